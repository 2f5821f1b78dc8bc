// Tests of mars/src/secret: SipHash-2-4 against the reference vectors (key
// 00..0f, message 00..n-1), RFC 6528 ISNs, and SYN cookie round trips,
// forgeries, other flows and expiry.
#include "secret.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace {

using namespace mars;

// vectors_sip64 of the SipHash reference implementation.
constexpr uint64_t kSipVectors[64] = {
    0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d,
    0xcf2794e0277187b7, 0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137,
    0x93f5f5799a932462, 0x9e0082df0ba9e4b0, 0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7,
    0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee, 0xa129ca6149be45e5,
    0x3f2acc7f57c29bdb, 0x699ae9f52cbe4794, 0x4bc1b3f0968dd39c, 0xbb6dc91da77961bd,
    0xbed65cf21aa2ee98, 0xd0f2cbb02e3b67c7, 0x93536795e3a33e88, 0xa80c038ccd5ccec8,
    0xb8ad50c6f649af94, 0xbce192de8a85b8ea, 0x17d835b85bbb15f3, 0x2f2e6163076bcfad,
    0xde4daaaca71dc9a5, 0xa6a2506687956571, 0xad87a3535c49ef28, 0x32d892fad841c342,
    0x7127512f72f27cce, 0xa7f32346f95978e3, 0x12e0b01abb051238, 0x15e034d40fa197ae,
    0x314dffbe0815a3b4, 0x027990f029623981, 0xcadcd4e59ef40c4d, 0x9abfd8766a33735c,
    0x0e3ea96b5304a7d0, 0xad0c42d6fc585992, 0x187306c89bc215a9, 0xd4a60abcf3792b95,
    0xf935451de4f21df2, 0xa9538f0419755787, 0xdb9acddff56ca510, 0xd06c98cd5c0975eb,
    0xe612a3cb9ecba951, 0xc766e62cfcadaf96, 0xee64435a9752fe72, 0xa192d576b245165a,
    0x0a8787bf8ecb74b2, 0x81b3e73d20b49b6f, 0x7fa8220ba3b2ecea, 0x245731c13ca42499,
    0xb78dbfaf3a8d83bd, 0xea1ad565322a1a0b, 0x60e61c23a3795013, 0x6606d7e446282b93,
    0x6ca4ecb15c5f91e1, 0x9f626da15c9625f3, 0xe51b38608ef25f57, 0x958a324ceb064572,
};

constexpr uint64_t kRefKey[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
constexpr uint64_t kKey[2] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull};
constexpr uint64_t kPeriod = 64'000'000'000ull;
const FlowKey kFlow{0xc0a80001, 0xc0a80002, 80, 40000};

TEST(SipHash, ReferenceVectors) {
    unsigned char msg[64];
    for (int i = 0; i < 64; ++i)
        msg[i] = static_cast<unsigned char>(i);
    for (size_t n = 0; n < 64; ++n)
        EXPECT_EQ(siphash24(kRefKey, msg, n), kSipVectors[n]) << "length " << n;
}

TEST(SipHash, UnalignedInputAndOtherKeys) {
    unsigned char buf[80];
    for (int i = 0; i < 64; ++i)
        buf[i + 3] = static_cast<unsigned char>(i);
    EXPECT_EQ(siphash24(kRefKey, buf + 3, 63), kSipVectors[63]);
    const uint64_t zero_key[2] = {0, 0};
    EXPECT_EQ(siphash24(zero_key, nullptr, 0), 0x1e924b9d737700d7ull);
    EXPECT_NE(siphash24(kKey, buf + 3, 15), siphash24(kRefKey, buf + 3, 15));
}

TEST(Isn, TicksEveryFourMicroseconds) {
    const uint64_t t0 = 123'456'789'000ull;
    const uint32_t isn = isn_generate(kKey, kFlow, t0);
    EXPECT_EQ(isn_generate(kKey, kFlow, t0), isn); // deterministic
    EXPECT_EQ(uint32_t(isn_generate(kKey, kFlow, t0 + 4000) - isn), 1u);
    EXPECT_EQ(uint32_t(isn_generate(kKey, kFlow, t0 + 4'000'000'000ull) - isn), 1'000'000u);
    // 2^32 ticks later it has wrapped around exactly.
    EXPECT_EQ(isn_generate(kKey, kFlow, t0 + 4000ull * (1ull << 32)), isn);
}

TEST(Isn, DependsOnEveryFlowFieldAndTheKey) {
    const uint64_t t = 5'000'000'000ull;
    const uint32_t base = isn_generate(kKey, kFlow, t);
    FlowKey f = kFlow;
    f.local_ip ^= 1;
    EXPECT_NE(isn_generate(kKey, f, t), base);
    f = kFlow;
    f.remote_ip ^= 1;
    EXPECT_NE(isn_generate(kKey, f, t), base);
    f = kFlow;
    f.local_port ^= 1;
    EXPECT_NE(isn_generate(kKey, f, t), base);
    f = kFlow;
    f.remote_port ^= 1;
    EXPECT_NE(isn_generate(kKey, f, t), base);
    const uint64_t other_key[2] = {kKey[0], kKey[1] ^ 1};
    EXPECT_NE(isn_generate(other_key, kFlow, t), base);
    // Flows hash far apart: the offsets of 1000 flows are mostly distinct.
    std::vector<uint32_t> offsets;
    for (uint16_t port = 1; port <= 1000; ++port) {
        f = kFlow;
        f.remote_port = port;
        offsets.push_back(isn_generate(kKey, f, t));
    }
    std::sort(offsets.begin(), offsets.end());
    EXPECT_GE(std::unique(offsets.begin(), offsets.end()) - offsets.begin(), 999);
}

TEST(CookieMss, IndexBoundaries) {
    EXPECT_EQ(cookie_mss_index(0), 0);
    EXPECT_EQ(cookie_mss_index(535), 0);
    EXPECT_EQ(cookie_mss_index(65535), 7);
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(cookie_mss_index(kCookieMss[i]), i);
        EXPECT_EQ(cookie_mss_index(static_cast<uint16_t>(kCookieMss[i] + 1)), i);
        if (i > 0) {
            EXPECT_EQ(cookie_mss_index(static_cast<uint16_t>(kCookieMss[i] - 1)), i - 1);
            EXPECT_LT(kCookieMss[i - 1], kCookieMss[i]);
        }
    }
    EXPECT_EQ(cookie_mss_index(1460), 5);
    EXPECT_EQ(cookie_mss_index(9000), 7);
}

TEST(SynCookie, RoundTripEveryMssIndex) {
    const uint64_t now = 1000 * kPeriod + 12'345'678'901ull;
    for (int mss = 0; mss < 8; ++mss) {
        for (uint32_t peer_isn : {0u, 1u, 0x80000000u, 0xffffffffu, 0x12345678u}) {
            uint32_t c = syncookie_encode(kKey, kFlow, peer_isn, mss, now);
            EXPECT_EQ((c >> 24) & 7, uint32_t(mss));
            EXPECT_EQ(syncookie_decode(kKey, kFlow, peer_isn, c, now), mss);
            EXPECT_EQ(syncookie_decode(kKey, kFlow, peer_isn, c, now + kPeriod), mss);
        }
    }
}

TEST(SynCookie, OutOfRangeIndexIsClamped) {
    const uint64_t now = 77 * kPeriod;
    EXPECT_EQ(syncookie_decode(kKey, kFlow, 9, syncookie_encode(kKey, kFlow, 9, -3, now), now), 0);
    EXPECT_EQ(syncookie_decode(kKey, kFlow, 9, syncookie_encode(kKey, kFlow, 9, 12, now), now), 7);
}

TEST(SynCookie, AcceptsCurrentAndPreviousCounterOnly) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{1}, kPeriod / 2, kPeriod - 1}) {
        const uint64_t made = 500 * kPeriod + offset;
        const uint32_t c = syncookie_encode(kKey, kFlow, 42, 5, made);
        EXPECT_EQ(syncookie_decode(kKey, kFlow, 42, c, made), 5);
        EXPECT_EQ(syncookie_decode(kKey, kFlow, 42, c, 500 * kPeriod + kPeriod - 1), 5);
        EXPECT_EQ(syncookie_decode(kKey, kFlow, 42, c, 501 * kPeriod), 5);
        EXPECT_EQ(syncookie_decode(kKey, kFlow, 42, c, 502 * kPeriod - 1), 5);
        EXPECT_EQ(syncookie_decode(kKey, kFlow, 42, c, 502 * kPeriod), -1);
        EXPECT_EQ(syncookie_decode(kKey, kFlow, 42, c, made + 3 * kPeriod), -1);
        EXPECT_EQ(syncookie_decode(kKey, kFlow, 42, c, 500 * kPeriod - 1), -1); // from the future
        // The 5-bit field wraps every 32 periods: the full counter is hashed.
        EXPECT_EQ(syncookie_decode(kKey, kFlow, 42, c, made + 32 * kPeriod), -1);
        EXPECT_EQ(syncookie_decode(kKey, kFlow, 42, c, made + 33 * kPeriod), -1);
    }
    // Right after boot (counter 0 has no previous one).
    const uint32_t c = syncookie_encode(kKey, kFlow, 1, 2, 0);
    EXPECT_EQ(syncookie_decode(kKey, kFlow, 1, c, 0), 2);
    EXPECT_EQ(syncookie_decode(kKey, kFlow, 1, c, kPeriod), 2);
}

TEST(SynCookie, EveryFlippedBitIsRejected) {
    std::mt19937_64 rng(7);
    for (int round = 0; round < 200; ++round) {
        FlowKey flow{static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                     static_cast<uint16_t>(rng()), static_cast<uint16_t>(rng())};
        const uint32_t peer_isn = static_cast<uint32_t>(rng());
        const uint64_t now = rng() % (1ull << 62);
        const int mss = static_cast<int>(rng() % 8);
        const uint32_t c = syncookie_encode(kKey, flow, peer_isn, mss, now);
        ASSERT_EQ(syncookie_decode(kKey, flow, peer_isn, c, now), mss);
        for (int bit = 0; bit < 32; ++bit)
            ASSERT_EQ(syncookie_decode(kKey, flow, peer_isn, c ^ (1u << bit), now), -1)
                << "bit " << bit;
    }
}

TEST(SynCookie, OtherFlowPeerIsnOrKeyRejected) {
    const uint64_t now = 900 * kPeriod + 5;
    const uint32_t c = syncookie_encode(kKey, kFlow, 1000, 4, now);
    FlowKey f = kFlow;
    f.local_ip ^= 1;
    EXPECT_EQ(syncookie_decode(kKey, f, 1000, c, now), -1);
    f = kFlow;
    f.remote_ip ^= 0x100;
    EXPECT_EQ(syncookie_decode(kKey, f, 1000, c, now), -1);
    f = kFlow;
    f.local_port ^= 1;
    EXPECT_EQ(syncookie_decode(kKey, f, 1000, c, now), -1);
    f = kFlow;
    f.remote_port ^= 1;
    EXPECT_EQ(syncookie_decode(kKey, f, 1000, c, now), -1);
    EXPECT_EQ(syncookie_decode(kKey, kFlow, 1001, c, now), -1);
    EXPECT_EQ(syncookie_decode(kKey, kFlow, 999, c, now), -1);
    const uint64_t other_key[2] = {kKey[0] ^ 1, kKey[1]};
    EXPECT_EQ(syncookie_decode(other_key, kFlow, 1000, c, now), -1);
    EXPECT_EQ(syncookie_decode(kKey, kFlow, 1000, c, now), 4);
}

TEST(SynCookie, RandomGuessesAlmostNeverPass) {
    std::mt19937_64 rng(8);
    const uint64_t now = 1234 * kPeriod;
    int accepted = 0;
    for (int i = 0; i < 200000; ++i)
        accepted += syncookie_decode(kKey, kFlow, 77, static_cast<uint32_t>(rng()), now) >= 0;
    // Expected about 200000 * (2/32) * 2^-24 = 0.0007.
    EXPECT_LE(accepted, 1);
}

} // namespace
