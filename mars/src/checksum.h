// checksum.h: the Internet checksum (RFC 1071), fused with copying where a
// copy happens anyway.
//
// Convention: sums are taken over 16-bit words loaded from memory in memory
// order (native loads, no byte swapping). The ones-complement sum commutes
// with byte order, so a folded result stored back to memory natively is the
// right checksum field. Values that do not come from packet memory (pseudo
// header fields) must be added in network byte order: use pseudo_sum().
#pragma once

#include <cstddef>
#include <cstdint>

namespace mars {

// Adds len bytes at data to a running 32-bit sum (as if data started at an
// even offset of the checksummed stream; an odd last byte is padded with a
// zero byte). The returned partial sum may carry: fold it with csum_fold().
uint32_t csum_add(uint32_t sum, const void *data, size_t len);

// Copies len bytes from src to dst and returns csum_add(sum, src, len) in
// the same pass (dst and src may not overlap).
uint32_t csum_copy(void *dst, const void *src, size_t len, uint32_t sum);

// Combines a partial sum of a block that starts at byte offset `offset` of
// the checksummed stream (odd offsets swap the block's bytes).
uint32_t csum_combine(uint32_t sum, uint32_t block_sum, size_t offset);

// Folds a partial sum to 16 bits (not inverted).
uint16_t csum_fold(uint32_t sum);

// The value to store in a checksum field: ~fold(sum), in memory order.
inline uint16_t csum_finish(uint32_t sum) { return static_cast<uint16_t>(~csum_fold(sum)); }

// The TCP/UDP pseudo-header sum; addresses and length in host order.
uint32_t pseudo_sum(uint32_t src_ip, uint32_t dst_ip, uint8_t proto, uint16_t l4_len);

// True when a received header or segment (checksum field included in the
// sum) verifies: the folded sum is 0xffff.
inline bool csum_ok(uint32_t sum) { return csum_fold(sum) == 0xffff; }

} // namespace mars
