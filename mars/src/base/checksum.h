// checksum.h: the Internet checksum (RFC 1071), fused with copying where a
// copy happens anyway.
//
// Convention: sums are taken over 16-bit words loaded from memory in memory
// order (native loads, no byte swapping). The ones-complement sum commutes
// with byte order, so a folded result stored back to memory natively is the
// right checksum field. Values that do not come from packet memory (pseudo
// header fields) must be added in network byte order: use pseudo_sum().
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace mars {

// Adds len bytes at data to a running 32-bit sum (as if data started at an
// even offset of the checksummed stream; an odd last byte is padded with a
// zero byte). The returned partial sum may carry: fold it with csum_fold().
// (This implementation returns sums already folded to 16 bits, so callers
// may also add a few of them with plain integer addition without overflow.)
uint32_t csum_add(uint32_t sum, const void *data, size_t len);

// Copies len bytes from src to dst and returns csum_add(sum, src, len) in
// the same pass (dst and src may not overlap).
uint32_t csum_copy(void *dst, const void *src, size_t len, uint32_t sum);

// Folds a partial sum to 16 bits (not inverted).
inline uint16_t csum_fold(uint32_t sum) {
    sum = (sum & 0xffff) + (sum >> 16); // at most 0x1fffe
    sum = (sum & 0xffff) + (sum >> 16); // no carry left
    return static_cast<uint16_t>(sum);
}

// Combines a partial sum of a block that starts at byte offset `offset` of
// the checksummed stream (odd offsets swap the block's bytes).
inline uint32_t csum_combine(uint32_t sum, uint32_t block_sum, size_t offset) {
    uint32_t block = csum_fold(block_sum);
    if (offset & 1) // a block at an odd offset has its words' bytes swapped
        block = static_cast<uint16_t>((block << 8) | (block >> 8));
    uint32_t total = sum + block;
    total += total < block; // end-around carry
    return total;
}

// The value to store in a checksum field: ~fold(sum), in memory order.
inline uint16_t csum_finish(uint32_t sum) { return static_cast<uint16_t>(~csum_fold(sum)); }

// The TCP/UDP pseudo-header sum; addresses and length in host order.
inline uint32_t pseudo_sum(uint32_t src_ip, uint32_t dst_ip, uint8_t proto, uint16_t l4_len) {
    // Sum the words as numbers (host order), then convert the folded sum to
    // memory order once: byte swapping commutes with the ones-complement sum.
    uint32_t sum = (src_ip >> 16) + (src_ip & 0xffff) + (dst_ip >> 16) + (dst_ip & 0xffff) +
                   proto + l4_len;
    uint16_t folded = csum_fold(sum);
    if constexpr (std::endian::native == std::endian::little)
        folded = static_cast<uint16_t>((folded << 8) | (folded >> 8));
    return folded;
}

// The IPv6 pseudo-header sum (RFC 8200 8.1): source and destination as in
// packet memory (16 bytes each), the upper-layer length and next header.
// The addresses' 32 bytes are four 64-bit words added inline in one carry
// chain (checksum.cc explains why a 64-bit ones-complement sum folds to the
// 16-bit one): every IPv6 segment in and out pays this, where two csum_add
// calls cost ~3x the instructions.
inline uint32_t pseudo_sum6(const void *src, const void *dst, uint8_t next, uint32_t l4_len) {
    uint64_t w[4];
    __builtin_memcpy(&w[0], src, 16);
    __builtin_memcpy(&w[2], dst, 16);
    uint64_t acc = w[0], t;
    for (int i = 1; i < 4; i++) acc = __builtin_add_overflow(acc, w[i], &t) ? t + 1 : t;
    uint32_t lo = static_cast<uint32_t>(acc), hi = static_cast<uint32_t>(acc >> 32);
    uint32_t sum = lo + hi;
    sum += sum < hi; // end-around carry
    // The length and next header go through pseudo_sum's host-to-memory-order
    // conversion; both terms are at most 0xffff after folding.
    return csum_fold(uint32_t(csum_fold(sum)) + pseudo_sum(0, l4_len, next, 0));
}

// True when a received header or segment (checksum field included in the
// sum) verifies: the folded sum is 0xffff.
inline bool csum_ok(uint32_t sum) { return csum_fold(sum) == 0xffff; }

} // namespace mars
