// Tests of mars/src/checksum: against a naive word-by-word reference on every
// length and alignment, split sums combined at odd offsets, and real packets
// whose checksums were computed byte by byte in network order.
#include "checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <vector>

namespace {

using namespace mars;

// Naive reference: 16-bit words in memory order, odd byte padded with zero.
uint16_t ref_fold(uint64_t sum) {
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

uint64_t ref_sum(const unsigned char *p, size_t len) {
    uint64_t sum = 0;
    for (size_t i = 0; i + 1 < len; i += 2) {
        uint16_t w;
        std::memcpy(&w, p + i, 2);
        sum += w;
    }
    if (len & 1) {
        unsigned char pair[2] = {p[len - 1], 0};
        uint16_t w;
        std::memcpy(&w, pair, 2);
        sum += w;
    }
    return sum;
}

// Network-order (big-endian) checksum computed byte by byte, as on paper.
uint16_t paper_checksum(const std::vector<uint8_t> &bytes) {
    uint32_t sum = 0;
    for (size_t i = 0; i < bytes.size(); i += 2) {
        uint32_t hi = bytes[i], lo = i + 1 < bytes.size() ? bytes[i + 1] : 0;
        sum += (hi << 8) | lo;
    }
    return static_cast<uint16_t>(~ref_fold(sum));
}

std::vector<unsigned char> random_bytes(std::mt19937_64 &rng, size_t n) {
    std::vector<unsigned char> v(n);
    for (auto &b : v)
        b = static_cast<unsigned char>(rng());
    return v;
}

TEST(Checksum, FoldAndFinish) {
    EXPECT_EQ(csum_fold(0), 0);
    EXPECT_EQ(csum_fold(0xffff), 0xffff);
    EXPECT_EQ(csum_fold(0x10000), 1);
    EXPECT_EQ(csum_fold(0x1fffe), 0xffff);
    EXPECT_EQ(csum_fold(0xffffffff), 0xffff);
    EXPECT_EQ(csum_fold(0x12345678), ref_fold(0x12345678));
    EXPECT_EQ(csum_finish(0xffff), 0);
    EXPECT_TRUE(csum_ok(0xffff));
    EXPECT_TRUE(csum_ok(0x1fffe));
    EXPECT_FALSE(csum_ok(0xfffe));
}

TEST(Checksum, AddMatchesReferenceEveryLengthAndAlignment) {
    std::mt19937_64 rng(1);
    auto buf = random_bytes(rng, 2000 + 16);
    for (size_t align = 0; align < 8; ++align) {
        for (size_t len = 0; len <= 2000; ++len) {
            const unsigned char *p = buf.data() + align;
            ASSERT_EQ(csum_fold(csum_add(0, p, len)), ref_fold(ref_sum(p, len)))
                << "len " << len << " align " << align;
        }
    }
}

TEST(Checksum, AddCarriesTheIncomingSum) {
    std::mt19937_64 rng(2);
    auto buf = random_bytes(rng, 1500);
    const uint32_t starts[] = {0, 1, 0xffff, 0x10000, 0x7fffffff, 0xfffffffe, 0xffffffff};
    for (uint32_t start : starts)
        for (size_t len : {0, 1, 7, 8, 31, 32, 33, 1500})
            EXPECT_EQ(csum_fold(csum_add(start, buf.data(), len)),
                      ref_fold(uint64_t{start} + ref_sum(buf.data(), len)));
}

TEST(Checksum, AllOnesStressesCarries) {
    std::vector<unsigned char> ones(65536 + 7, 0xff);
    for (size_t len : {2, 8, 32, 40, 65535, 65536})
        EXPECT_EQ(csum_fold(csum_add(0xffffffff, ones.data(), len)),
                  ref_fold(0xffffffffull + ref_sum(ones.data(), len)));
}

TEST(Checksum, CopyMatchesReferenceAndCopiesExactly) {
    std::mt19937_64 rng(3);
    auto src = random_bytes(rng, 2000 + 16);
    std::vector<unsigned char> dst(2000 + 32);
    for (size_t align = 0; align < 8; ++align) {
        size_t dst_align = (align * 3) & 7; // src and dst alignments differ
        for (size_t len = 0; len <= 2000; ++len) {
            std::fill(dst.begin(), dst.end(), 0xa5);
            const unsigned char *s = src.data() + align;
            unsigned char *d = dst.data() + dst_align;
            uint32_t got = csum_copy(d, s, len, 0x1234);
            ASSERT_EQ(csum_fold(got), ref_fold(0x1234 + ref_sum(s, len))) << "len " << len;
            ASSERT_EQ(std::memcmp(d, s, len), 0) << "len " << len;
            for (size_t i = 0; i < dst_align; ++i)
                ASSERT_EQ(dst[i], 0xa5);
            for (size_t i = dst_align + len; i < dst.size(); ++i)
                ASSERT_EQ(dst[i], 0xa5) << "wrote past the end, len " << len;
        }
    }
}

TEST(Checksum, SplitBlocksCombineAtAnyOffset) {
    std::mt19937_64 rng(4);
    for (size_t len : {0, 1, 2, 3, 17, 64, 255, 1000, 1461}) {
        auto buf = random_bytes(rng, len + 1);
        const uint16_t want = ref_fold(ref_sum(buf.data(), len));
        for (size_t cut = 0; cut <= len; ++cut) {
            uint32_t head = csum_add(0, buf.data(), cut);
            uint32_t tail = csum_add(0, buf.data() + cut, len - cut);
            ASSERT_EQ(csum_fold(csum_combine(head, tail, cut)), want) << len << "/" << cut;
        }
    }
}

TEST(Checksum, ManyPiecesCombineIncludingCopies) {
    std::mt19937_64 rng(5);
    for (int round = 0; round < 300; ++round) {
        size_t len = rng() % 3000;
        auto buf = random_bytes(rng, len);
        std::vector<unsigned char> copy(len);
        uint32_t sum = 0;
        size_t off = 0;
        while (off < len) {
            size_t piece = std::min<size_t>(len - off, 1 + rng() % 97);
            uint32_t block = (rng() & 1)
                                 ? csum_add(0, buf.data() + off, piece)
                                 : csum_copy(copy.data() + off, buf.data() + off, piece, 0);
            sum = csum_combine(sum, block, off);
            off += piece;
        }
        ASSERT_EQ(csum_fold(sum), ref_fold(ref_sum(buf.data(), len)));
    }
}

TEST(Checksum, CombineWithLargePartialSums) {
    // Unfolded partial sums near 2^32 must not lose their carries.
    for (uint32_t a : {0u, 0xffffu, 0xfffffffeu, 0xffffffffu, 0x8000ffffu})
        for (uint32_t b : {0u, 0x1u, 0xffffffffu, 0x12345678u})
            for (size_t off : {0, 1}) {
                uint32_t block = ref_fold(b);
                if (off)
                    block = static_cast<uint16_t>((block << 8) | (block >> 8));
                EXPECT_EQ(csum_fold(csum_combine(a, b, off)), ref_fold(uint64_t{a} + block));
            }
}

TEST(Checksum, PseudoSumMatchesNetworkOrderHeader) {
    std::mt19937_64 rng(6);
    for (int i = 0; i < 10000; ++i) {
        uint32_t src = static_cast<uint32_t>(rng()), dst = static_cast<uint32_t>(rng());
        uint8_t proto = static_cast<uint8_t>(rng());
        uint16_t len = static_cast<uint16_t>(rng());
        if (i == 0)
            src = dst = 0xffffffff, proto = 0xff, len = 0xffff;
        if (i == 1)
            src = dst = 0, proto = 0, len = 0;
        const unsigned char hdr[12] = {
            uint8_t(src >> 24), uint8_t(src >> 16), uint8_t(src >> 8), uint8_t(src),
            uint8_t(dst >> 24), uint8_t(dst >> 16), uint8_t(dst >> 8), uint8_t(dst),
            0, proto, uint8_t(len >> 8), uint8_t(len)};
        // Equal as ones-complement numbers (0 and 0xffff are the same value).
        uint16_t got = csum_fold(pseudo_sum(src, dst, proto, len));
        uint16_t want = ref_fold(ref_sum(hdr, 12));
        ASSERT_EQ(got % 0xffff, want % 0xffff);
    }
}

// The IPv6 pseudo-header (RFC 8200 8.1: source, destination, a 32-bit
// upper-layer length, three zero bytes, next header) against the reference
// over its 40 bytes laid out in memory; random addresses, all-ones ones to
// drive every carry, and all zeros.
TEST(Checksum, PseudoSum6MatchesTheHeaderInMemory) {
    std::mt19937_64 rng(7);
    for (int i = 0; i < 10000; ++i) {
        auto src = random_bytes(rng, 16), dst = random_bytes(rng, 16);
        uint8_t next = static_cast<uint8_t>(rng());
        uint16_t len = static_cast<uint16_t>(rng());
        if (i == 0)
            std::fill(src.begin(), src.end(), 0xff), std::fill(dst.begin(), dst.end(), 0xff), next = 0xff,
                len = 0xffff;
        if (i == 1)
            std::fill(src.begin(), src.end(), 0), std::fill(dst.begin(), dst.end(), 0), next = 0, len = 0;
        unsigned char hdr[40] = {};
        std::memcpy(hdr, src.data(), 16);
        std::memcpy(hdr + 16, dst.data(), 16);
        hdr[34] = uint8_t(len >> 8), hdr[35] = uint8_t(len), hdr[39] = next;
        uint16_t got = csum_fold(pseudo_sum6(src.data(), dst.data(), next, len));
        uint16_t want = ref_fold(ref_sum(hdr, 40));
        ASSERT_EQ(got % 0xffff, want % 0xffff) << "case " << i;
    }
}

TEST(Checksum, RealIpv4Header) {
    // 192.168.0.1 -> 192.168.0.199, UDP, total length 115; checksum 0xb861.
    std::vector<uint8_t> hdr = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                                0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
    ASSERT_EQ(paper_checksum(hdr), 0xb861);
    uint16_t field = csum_finish(csum_add(0, hdr.data(), hdr.size()));
    std::memcpy(&hdr[10], &field, 2); // stored natively
    EXPECT_EQ(hdr[10], 0xb8);
    EXPECT_EQ(hdr[11], 0x61);
    EXPECT_TRUE(csum_ok(csum_add(0, hdr.data(), hdr.size())));
    hdr[15] ^= 1;
    EXPECT_FALSE(csum_ok(csum_add(0, hdr.data(), hdr.size())));
}

TEST(Checksum, RealTcpSegmentWithPseudoHeader) {
    // 192.168.0.1:40000 -> 192.168.0.199:80, seq 0x12345678, ack 0x9abcdef0,
    // PSH|ACK, window 65535, payload "hello, world!" (odd length: 33 bytes).
    const char payload[] = "hello, world!";
    std::vector<uint8_t> seg = {0x9c, 0x40, 0x00, 0x50, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc,
                                0xde, 0xf0, 0x50, 0x18, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00};
    seg.insert(seg.end(), payload, payload + 13);
    ASSERT_EQ(seg.size(), 33u);
    std::vector<uint8_t> paper = {192, 168, 0, 1, 192, 168, 0, 199, 0, 6, 0, 33};
    paper.insert(paper.end(), seg.begin(), seg.end());
    ASSERT_EQ(paper_checksum(paper), 0x4d70); // also computed outside this code

    const uint32_t src = 0xc0a80001, dst = 0xc0a800c7;
    // Header and payload summed separately, as the stack does when it copies
    // the payload: the payload starts at an even offset (20).
    uint32_t sum = pseudo_sum(src, dst, 6, 33);
    sum = csum_add(sum, seg.data(), 20);
    std::vector<uint8_t> copied(13);
    sum = csum_combine(sum, csum_copy(copied.data(), seg.data() + 20, 13, 0), 20);
    uint16_t field = csum_finish(sum);
    std::memcpy(&seg[16], &field, 2);
    EXPECT_EQ(seg[16], 0x4d);
    EXPECT_EQ(seg[17], 0x70);
    EXPECT_TRUE(csum_ok(csum_add(pseudo_sum(src, dst, 6, 33), seg.data(), seg.size())));
    seg[32] ^= 0x80; // corrupt the odd last byte
    EXPECT_FALSE(csum_ok(csum_add(pseudo_sum(src, dst, 6, 33), seg.data(), seg.size())));
}

} // namespace
