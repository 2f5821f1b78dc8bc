// eta-perf's stream content (ppe/src/stream_pattern.h): any range is the
// same bytes however the writes were cut; no power-of-two period up to
// 2^40 bytes (1 TiB); and the failure it exists for: a receive ring (a power
// of two, a multiple of 64 KiB) where one segment's copy never landed, so
// the previous lap's bytes are read instead, gives a different CRC32C than
// what was sent (ISA-L crc32_iscsi from ~0, as eta-perf runs it).
#include "stream_pattern.h"

#include <isa-l/crc.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

std::vector<uint8_t> bytes_at(const ppe::StreamPattern &p, uint64_t offset, size_t n)
{
    std::vector<uint8_t> v(n);
    p.fill(offset, v.data(), n);
    return v;
}

TEST(StreamPattern, AnyCutOfTheStreamGivesTheSameBytes)
{
    const ppe::StreamPattern p(0x1234'5678'9abcull);
    const uint64_t base = (5ull << 30) + 3; // past 4 GiB, unaligned
    const size_t total = 3 * ppe::StreamPattern::kBlock + 4093;
    const std::vector<uint8_t> whole = bytes_at(p, base, total);
    // Pieces of awkward sizes, crossing words and 64 KiB blocks.
    std::vector<uint8_t> pieced(total);
    const size_t sizes[] = {1, 7, 13, 16, 17, 4093, 65535, 65536, 65537, 1448};
    size_t at = 0;
    for (size_t i = 0; at < total; i++) {
        const size_t n = std::min(sizes[i % std::size(sizes)], total - at);
        p.fill(base + at, pieced.data() + at, n);
        at += n;
    }
    const auto diff = std::mismatch(whole.begin(), whole.end(), pieced.begin());
    EXPECT_TRUE(diff.first == whole.end()) << "pieced fill differs at byte " << (diff.first - whole.begin());
    EXPECT_TRUE(bytes_at(ppe::StreamPattern(1), 0, 4096) != bytes_at(ppe::StreamPattern(2), 0, 4096))
        << "the seed chooses the stream";
}

// For every power of two P up to 2^40: the 64 KiB at o and at o + P differ;
// from 8 bytes to below 64 KiB and from 64 KiB on, in every aligned word.
TEST(StreamPattern, NoPowerOfTwoPeriod)
{
    const size_t n = ppe::StreamPattern::kBlock;
    for (uint64_t seed : {1ull, 42ull, 0xfeed'f00d'dead'beefull}) {
        const ppe::StreamPattern p(seed);
        for (uint64_t o : {0ull, 8ull * 1001, (3ull << 30) + 64}) {
            const std::vector<uint8_t> a = bytes_at(p, o, n);
            for (int k = 0; k <= 40; k++) {
                const uint64_t period = 1ull << k;
                const std::vector<uint8_t> b = bytes_at(p, o + period, n);
                ASSERT_TRUE(a != b) << "seed " << seed << ": the stream repeats every 2^" << k << " bytes at " << o;
                if (period < 8) continue;
                size_t same_words = 0;
                for (size_t i = 0; i < n; i += 8) same_words += std::memcmp(&a[i], &b[i], 8) == 0;
                EXPECT_EQ(same_words, 0u) << "seed " << seed << ", 2^" << k << " bytes apart at " << o;
            }
        }
    }
}

// A receive ring of `ring` bytes fed the stream in 1448-byte segments (the
// first 32 bytes the Hello, as eta-perf's server sees), read out as it
// fills; the copy of segment `lost` never lands. The CRC32C of what was read
// must differ from the CRC32C of what was sent.
struct RingRun {
    uint32_t sent_crc = 0xffffffffu, read_crc = 0xffffffffu;
};

RingRun through_ring_losing_one_copy(const ppe::StreamPattern &p, size_t ring, uint64_t bytes, uint64_t lost)
{
    constexpr size_t kHello = 32, kSeg = 1448;
    std::vector<uint8_t> rx(ring, 0), seg(kSeg), out(kSeg);
    RingRun r;
    uint64_t pos = kHello; // ring position of stream offset 0
    for (uint64_t off = 0, k = 0; off < bytes; k++) {
        const size_t n = size_t(std::min<uint64_t>(kSeg, bytes - off));
        p.fill(off, seg.data(), n);
        r.sent_crc = crc32_iscsi(seg.data(), int(n), r.sent_crc);
        for (size_t i = 0; i < n; i++) {
            if (k != lost) rx[(pos + i) % ring] = seg[i];
            out[i] = rx[(pos + i) % ring];
        }
        r.read_crc = crc32_iscsi(out.data(), int(n), r.read_crc);
        pos += n;
        off += n;
    }
    return r;
}

TEST(StreamPattern, StaleRingBytesChangeTheCrc)
{
    const ppe::StreamPattern p(0xc0ffee);
    for (size_t ring : {size_t(64) << 10, size_t(256) << 10, size_t(2) << 20}) {
        const uint64_t bytes = 4 * ring; // the lost copy lands on the ring's third lap
        const uint64_t lost = (2 * ring + 1000) / 1448;
        const RingRun clean = through_ring_losing_one_copy(p, ring, bytes, UINT64_MAX);
        EXPECT_EQ(clean.read_crc, clean.sent_crc) << "the ring model itself loses bytes";
        const RingRun stale = through_ring_losing_one_copy(p, ring, bytes, lost);
        EXPECT_EQ(stale.sent_crc, clean.sent_crc);
        EXPECT_NE(stale.read_crc, stale.sent_crc)
            << "a ring of " << ring << " bytes read its previous lap for segment " << lost
            << " and the CRC32C did not change";
    }
}

} // namespace
