// Self-test of the TEST FIXTURE itself (no stack needed): the frame builder
// agrees with an independently computed known answer and with the parser,
// the parser never reads past a frame, the links impair as configured and
// deterministically, and the pools account for every buffer.
#include "frame.h"
#include "malformed.h"
#include "sim_wire.h"

#include <gtest/gtest.h>
#include <sanitizer/asan_interface.h>

#include <cstring>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define FIXTURE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIXTURE_ASAN 1
#endif
#endif
#ifndef FIXTURE_ASAN
#define FIXTURE_ASAN 0
#endif

#include <map>

namespace mars::sim {
namespace {

TcpSpec sample()
{
    TcpSpec s;
    s.src_mac = mac(2);
    s.dst_mac = mac(1);
    s.src_ip = ipv4(198, 18, 0, 2);
    s.dst_ip = ipv4(198, 18, 0, 1);
    s.sport = 40000;
    s.dport = 80;
    s.seq = 1000;
    s.ack = 2000;
    s.flags = kAck | kPsh;
    s.window = 65535;
    const char *p = "hello, mars";
    s.payload.assign(p, p + 11);
    return s;
}

TEST(FrameBuilder, KnownAnswerChecksums)
{
    // Checksums computed separately (Python, RFC 1071) for this exact segment.
    auto f = build_tcp(sample());
    ASSERT_EQ(f.size(), 14u + 20 + 20 + 11);
    EXPECT_EQ((f[14 + 10] << 8) | f[14 + 11], 0xae9d);
    EXPECT_EQ((f[34 + 16] << 8) | f[34 + 17], 0x4273);
}

TEST(FrameBuilder, RoundTripsThroughParser)
{
    TcpSpec s = sample();
    s.flags = kSyn;
    s.opts = TcpOptions{};
    s.opts.mss = 1460;
    s.opts.wscale = 7;
    s.opts.sack_permitted = true;
    s.opts.ts = {{123, 456}};
    s.opts.sack = {{10, 20}};
    auto f = build_tcp(s);
    Parsed p;
    ASSERT_TRUE(parse_frame(f.data(), f.size(), &p));
    EXPECT_TRUE(p.is_tcp && p.ip_csum_ok && p.tcp_csum_ok && p.opts_ok);
    EXPECT_EQ(p.sport, 40000);
    EXPECT_EQ(p.seq, 1000u);
    EXPECT_EQ(p.flags, kSyn);
    EXPECT_EQ(*p.opts.mss, 1460);
    EXPECT_EQ(*p.opts.wscale, 7);
    EXPECT_TRUE(p.opts.sack_permitted);
    EXPECT_EQ(p.opts.ts->first, 123u);
    EXPECT_EQ(p.opts.sack.size(), 1u);
    EXPECT_EQ(p.payload, s.payload);
    EXPECT_EQ(p.ip_frag & 0x4000, 0x4000);
}

TEST(FrameBuilder, ParserRejectsEveryMalformedCaseSafely)
{
    TcpSpec syn = sample();
    syn.flags = kSyn;
    syn.payload.clear();
    syn.opts.mss = 1460;
    for (auto &mc : malformed_cases(sample(), syn)) {
        // Exact-size copies: a read past the end fails under ASan.
        std::vector<uint8_t> exact(mc.frame);
        Parsed p;
        parse_frame(exact.data(), exact.size(), &p);
        bool clean = p.is_tcp && p.ip_csum_ok && p.tcp_csum_ok && p.opts_ok && (p.ip_frag & 0x3fff) == 0;
        bool flags_only = mc.name.rfind("flags_", 0) == 0 || mc.name.rfind("listener_", 0) == 0;
        bool addressing_only = mc.name == "eth_other_unicast_mac" || mc.name == "ip_not_our_address";
        if (!flags_only && !addressing_only) {
            EXPECT_FALSE(clean) << mc.name << " is not malformed";
        }
        if (flags_only) {
            EXPECT_TRUE(clean) << mc.name << " should break only the flags";
        }
    }
}

TEST(Link, ImpairsAtConfiguredRatesDeterministically)
{
    auto run = [](LinkParams lp) {
        FramePool pool(8192);
        Link link(pool, lp);
        auto f = build_tcp(sample());
        for (int i = 0; i < 5000; i++) {
            PacketRef r;
            EXPECT_TRUE(pool.get(&r));
            std::copy(f.begin(), f.end(), r.data);
            r.len = uint16_t(f.size());
            link.send(r, uint64_t(i) * 1000);
        }
        std::vector<uint64_t> arrivals;
        PacketRef out[64];
        size_t corrupted = 0;
        uint64_t now = 0;
        while (link.next_arrival() != UINT64_MAX) {
            now = link.next_arrival();
            uint16_t n = link.take_due(now, out, 64);
            for (uint16_t i = 0; i < n; i++) {
                Parsed p;
                parse_frame(out[i].data, out[i].len, &p);
                if (!(p.is_tcp && p.ip_csum_ok && p.tcp_csum_ok)) corrupted++;
                arrivals.push_back(now);
                pool.put(out[i]);
            }
        }
        EXPECT_EQ(pool.in_use(), 0u);
        EXPECT_EQ(corrupted, link.stats().corrupted) << "every corrupted frame fails its checksum";
        return std::make_pair(link.stats().lost + 1000000 * link.stats().duplicated, arrivals);
    };
    LinkParams lp;
    lp.loss = 0.1;
    lp.duplicate = 0.05;
    lp.corrupt = 0.05;
    lp.reorder = 0.1;
    lp.seed = 5;
    auto a = run(lp), b = run(lp);
    EXPECT_EQ(a, b) << "same seed, same run";
    uint64_t lost = a.first % 1000000, dup = a.first / 1000000;
    EXPECT_GT(lost, 400u);
    EXPECT_LT(lost, 600u);
    EXPECT_GT(dup, 150u);
    EXPECT_LT(dup, 350u);
    lp.seed = 6;
    EXPECT_NE(run(lp), a) << "another seed, another run";
}

TEST(Link, RateSerializesAndQueueDrops)
{
    FramePool pool(256);
    LinkParams lp;
    lp.rate_bps = 1'000'000'000;
    lp.delay_ns = 1000;
    lp.queue_frames = 10;
    Link link(pool, lp);
    for (int i = 0; i < 20; i++) {
        PacketRef r;
        ASSERT_TRUE(pool.get(&r));
        r.len = 1226; // (1226 + 24) * 8 bits at 1 Gbit/s = 10 us
        link.send(r, 0);
    }
    EXPECT_EQ(link.stats().queue_drops, 10u);
    PacketRef out[32];
    std::vector<uint64_t> at;
    while (link.next_arrival() != UINT64_MAX) {
        uint64_t t = link.next_arrival();
        uint16_t n = link.take_due(t, out, 32);
        for (uint16_t i = 0; i < n; i++) {
            at.push_back(t);
            pool.put(out[i]);
        }
    }
    ASSERT_EQ(at.size(), 10u);
    for (size_t i = 0; i < at.size(); i++) EXPECT_EQ(at[i], (i + 1) * 10'000 + 1000);
}

TEST(Pools, AccountForEveryBuffer)
{
    FramePool pool(4);
    PacketRef a, b;
    ASSERT_TRUE(pool.get(&a));
    ASSERT_TRUE(pool.get(&b));
    EXPECT_EQ(pool.in_use(), 2u);
    pool.put(a);
    pool.put(a);
    EXPECT_EQ(pool.bad_releases(), 1u);
    uint8_t bytes[3] = {1, 2, 3};
    PacketRef e = pool.get_exact(bytes, 3);
    EXPECT_EQ(pool.in_use(), 2u);
    pool.put(e);
    pool.put(b);
    EXPECT_EQ(pool.in_use(), 0u);
    RingPool rings(2, 4096, 4096);
    RingMemory m1, m2, m3;
    EXPECT_TRUE(rings.provide(1, &m1));
    EXPECT_TRUE(rings.provide(1, &m2));
    EXPECT_FALSE(rings.provide(1, &m3));
    EXPECT_EQ(rings.refused(), 1u);
    rings.reclaim(1, m1);
    rings.reclaim(1, m1);
    EXPECT_EQ(rings.bad_reclaims(), 1u);
    EXPECT_EQ(rings.outstanding(), 1u);
}

// get_exact() frames reuse their blocks, yet under AddressSanitizer a frame's
// memory still ends at its last byte and goes away at put(), as a heap block
// of its exact size did (what lets the fuzz target catch over-reads).
TEST(Pools, ExactFramesEndAtTheirLastByte)
{
    FramePool pool(2);
    const uint8_t bytes[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
    std::vector<PacketRef> held;
    std::vector<const uint8_t *> released; // the most recent first
    for (int round = 0; round < 300; round++) { // past the idle queue: blocks come back
        const size_t len = 1 + size_t(round) % sizeof bytes;
        PacketRef e = pool.get_exact(bytes, len);
        ASSERT_EQ(e.len, len);
        // A released frame's memory is not handed out again soon (a stale
        // pointer into it keeps being reported).
        for (size_t k = 0; k < released.size() && k < 32; k++) EXPECT_NE(e.data, released[k]) << "round " << round;
        EXPECT_EQ(std::memcmp(e.data, bytes, len), 0);
        EXPECT_EQ(pool.exact_in_use(), 1u + held.size());
#if FIXTURE_ASAN
        EXPECT_FALSE(__asan_address_is_poisoned(e.data + len - 1));
        EXPECT_TRUE(__asan_address_is_poisoned(e.data + len)) << "round " << round;
        EXPECT_TRUE(__asan_address_is_poisoned(e.data - 1));
#endif
        if (round % 3 == 0) {
            held.push_back(e); // some stay out a while
        } else {
            pool.put(e);
            released.insert(released.begin(), e.data);
#if FIXTURE_ASAN
            EXPECT_TRUE(__asan_address_is_poisoned(e.data));
#endif
        }
        if (held.size() == 5) {
            for (PacketRef &h : held) pool.put(h);
            held.clear();
        }
    }
    for (PacketRef &h : held) pool.put(h);
    EXPECT_EQ(pool.in_use(), 0u);
    EXPECT_EQ(pool.bad_releases(), 0u);
    PacketRef again = pool.get_exact(bytes, 3);
    pool.put(again);
    pool.put(again);
    EXPECT_EQ(pool.bad_releases(), 1u); // released twice
}

TEST(Pattern, DetectsAnyChangedByte)
{
    std::vector<uint8_t> v(10000);
    pattern_fill(3, 12345, v.data(), v.size());
    EXPECT_EQ(pattern_check(3, 12345, v.data(), v.size()), v.size());
    v[777] ^= 1;
    EXPECT_EQ(pattern_check(3, 12345, v.data(), v.size()), 777u);
    EXPECT_NE(pattern_check(4, 12345, v.data(), v.size()), v.size());
}

} // namespace
} // namespace mars::sim
