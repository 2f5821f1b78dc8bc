// stream_pattern.h: the bytes eta-perf's senders write (stream and rr).
//
// Byte o of a stream is a function of (seed, o) alone, so a sender produces
// any range on its own and the bytes never depend on how writes were cut:
//
//   word w (bytes 8w .. 8w+7, little-endian) = table[w mod 8192] ^ key(w / 8192)
//
// `table` is 64 KiB of seeded xorshift64 words; `key(b)` is a bijective
// 64-bit mix of the seed plus the 64 KiB block number b.
//
// Why not one 64 KiB block repeated: receive rings are powers of two and
// multiples of 64 KiB, so bytes left over from the ring's previous lap (a
// copy that never landed) would equal the right ones and every check would
// pass. Here two words a multiple of 64 KiB apart (up to 2^64 blocks) lie in
// different blocks, whose keys differ (a bijection), so they differ; two
// words less than 64 KiB apart in one block are different xorshift64
// outputs (its state does not repeat within 2^64 - 1 steps). So the stream
// has no power-of-two period, and a stale copy of 8 bytes or more from any
// earlier lap changes the data and its CRC32C.
//
// Cost: one 16-byte load, XOR and store per 16 bytes from a table that stays
// in cache, and one mix per 64 KiB: a plain copy's cost, well below the
// CRC32C and send each byte also pays (ppe/README.md "eta-perf").
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ppe {

static_assert(std::endian::native == std::endian::little, "stream words are little-endian");

class StreamPattern {
  public:
    static constexpr size_t kBlock = 64 * 1024; // the table's size and a key's span

    explicit StreamPattern(uint64_t seed) : table_(kBlock / 8), key_base_(mix(seed))
    {
        uint64_t x = seed | 1; // xorshift64's state must not be 0
        for (uint64_t &w : table_) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w = x;
        }
    }

    // Writes the stream's bytes [offset, offset + n) to out.
    void fill(uint64_t offset, uint8_t *out, size_t n) const
    {
        while (n) {
            const size_t at = size_t(offset % kBlock), k = std::min(n, kBlock - at);
            fill_in_block(at, key(offset / kBlock), out, k);
            out += k;
            offset += k;
            n -= k;
        }
    }

    // The key of 64 KiB block b (a bijection of b for a given seed).
    uint64_t key(uint64_t block) const { return mix(key_base_ + block); }

  private:
    // A bijective 64-bit finalizer (xor-shifts and odd multipliers, the
    // published splitmix64 constants): distinct inputs, distinct keys.
    static uint64_t mix(uint64_t z)
    {
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    // Bytes [at, at + n) of one block (at + n <= kBlock) under `key`.
    void fill_in_block(size_t at, uint64_t key, uint8_t *out, size_t n) const
    {
        typedef uint64_t Vec __attribute__((vector_size(16)));
        const uint8_t *src = reinterpret_cast<const uint8_t *>(table_.data()) + at;
        // Byte i of the output takes key byte (at + i) % 8: rotate the key so
        // that its byte 0 lines up with out[0].
        const uint64_t k = std::rotr(key, int(8 * (at % 8)));
        const Vec kv = {k, k};
        size_t i = 0;
        for (; i + 16 <= n; i += 16) {
            Vec v;
            std::memcpy(&v, src + i, 16);
            v ^= kv;
            std::memcpy(out + i, &v, 16);
        }
        for (; i < n; i++) out[i] = uint8_t(src[i] ^ (k >> (8 * (i % 8))));
    }

    std::vector<uint64_t> table_;
    uint64_t key_base_;
};

} // namespace ppe
