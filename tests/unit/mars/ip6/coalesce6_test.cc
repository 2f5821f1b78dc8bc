// Receive coalescing over IPv6 (mars/src/rx/rx_coalesce6.cc, issue 31) and
// LRO frames over IPv6: which segments of a burst are taken as one group
// (never across a gap, a flag other than ACK/PSH, a header change, a bad
// checksum or another connection's frame), that the application gets the
// bytes and the peer the frames (ACKs, SACK blocks, windows, timestamps) it
// gets with coalescing off, and that a segment longer than the MSS (a port's
// super-frame) is taken on the fast path and acknowledged as the segments it
// stands for. The frames are built byte by byte (six_fixture.h).
#include "six_fixture.h"

namespace {

// ---- what merges -------------------------------------------------------------

TEST(Coalesce6, InOrderSegmentsAreOneGroupAndOneAck)
{
    for (const uint32_t flags : {kNicChecked, 0u}) { // vouched for, and summed in the copy
        for (const bool ts : {true, false}) {
            SCOPED_TRACE(std::string(flags ? "NIC-checked" : "summed") + (ts ? ", timestamps" : ", no options"));
            Six b(true, 1, ts);
            const StackStats before = b.stats();
            std::vector<std::vector<uint8_t>> burst;
            for (uint32_t k = 0; k < 16; k++) burst.push_back(b.data(0, k, 1000));
            b.burst(burst, flags);
            b.peer().poll();
            EXPECT_EQ(b.stats().rx_coalesce_groups - before.rx_coalesce_groups, 1u);
            EXPECT_EQ(b.stats().rx_coalesce_segments - before.rx_coalesce_segments, 16u);
            EXPECT_EQ(b.stats().fastpath_hits - before.fastpath_hits, 16u);
            EXPECT_EQ(b.stats().ip6_in - before.ip6_in, 16u);
            EXPECT_EQ(b.stats().drop_tcp_csum, 0u);
            const std::vector<uint32_t> acks = b.acks(0);
            ASSERT_EQ(acks.size(), 1u) << "one ACK for the burst";
            EXPECT_EQ(acks[0], b.conn(0).peer_nxt);
            EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, 1000));
        }
    }
}

TEST(Coalesce6, FlagsEndOrBreakGroups)
{
    // PSH may end a group: 0 1(PSH) | 2 3.
    {
        Six b(true);
        b.burst({b.data(0, 0, 100), b.data(0, 1, 100, wire::kAck | wire::kPsh), b.data(0, 2, 100), b.data(0, 3, 100)},
                kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 2u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 4u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1, 2, 3}, 100));
    }
    // A PSH never starts one: 0(PSH) | 1 2.
    {
        Six b(true);
        b.burst({b.data(0, 0, 100, wire::kAck | wire::kPsh), b.data(0, 1, 100), b.data(0, 2, 100)}, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
    }
    // URG in the middle: nothing merges around it.
    {
        Six b(true);
        b.burst({b.data(0, 0, 100), b.data(0, 1, 100, wire::kAck | wire::kUrg), b.data(0, 2, 100)}, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 0u);
    }
    // FIN: the segments before it are a group, the FIN is taken alone.
    {
        Six b(true);
        b.burst({b.data(0, 0, 100), b.data(0, 1, 100), b.data(0, 2, 100, wire::kAck | wire::kFin)}, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1, 2}, 100));
        SockInfo si{};
        b.stack().info(b.conn(0).sock, &si);
        EXPECT_TRUE(si.peer_closed);
    }
}

TEST(Coalesce6, NeverAcrossAGap)
{
    Six b(true);
    std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 500), b.data(0, 1, 500)};
    b.conn(0).peer_nxt += 500; // segment 2 is missing
    burst.push_back(b.data(0, 3, 500));
    burst.push_back(b.data(0, 4, 500));
    b.burst(burst, kNicChecked);
    b.peer().poll();
    EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 2u) << "only the two before the gap";
    EXPECT_EQ(b.stats().tcp_ooo_segments, 2u);
    const std::vector<std::string> lines = b.sent()[b.conn(0).port];
    ASSERT_FALSE(lines.empty());
    std::ostringstream want;
    want << "ack " << b.conn(0).peer_nxt - 1500 << " ";
    EXPECT_NE(lines.back().find(want.str()), std::string::npos) << lines.back();
    EXPECT_NE(lines.back().find(" 5 10 "), std::string::npos) << "a SACK block: " << lines.back();
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1}, 500));
}

TEST(Coalesce6, BadChecksumEndsTheGroupAndIsDropped)
{
    Six b(true);
    std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 700), b.data(0, 1, 700),
                                            b.data(0, 2, 700, wire::kAck, [](Seg &s) { s.corrupt = true; }),
                                            b.data(0, 3, 700), b.data(0, 4, 700)};
    b.burst(burst, 0); // no verdict: summed in the copy
    b.peer().poll();
    EXPECT_EQ(b.stats().drop_tcp_csum, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
    EXPECT_EQ(b.stats().tcp_ooo_segments, 2u) << "3 and 4 wait behind the dropped one";
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1}, 700));
    // Its retransmission fills the gap.
    b.conn(0).peer_nxt -= 3 * 700;
    b.burst({b.data(0, 2, 700)}, 0);
    b.conn(0).peer_nxt += 2 * 700;
    b.peer().poll();
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {2, 3, 4}, 700));
    EXPECT_EQ(b.acks(0).back(), b.conn(0).peer_nxt);
}

TEST(Coalesce6, InterleavedConnectionsAreGathered)
{
    // A A B B A A: three groups (a frame the next continues is taken with
    // it at once, no look further: as IPv4's).
    {
        Six b(true, 2);
        b.burst({b.data(0, 0, 300), b.data(0, 1, 300), b.data(1, 0, 300), b.data(1, 1, 300), b.data(0, 2, 300),
                 b.data(0, 3, 300)},
                kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 3u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 6u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1, 2, 3}, 300));
        EXPECT_EQ(b.read(1), bytes_of(b, 1, {0, 1}, 300));
    }
    // A B C A B C A B C: three groups of three (round robin).
    {
        Six b(true, 3);
        std::vector<std::vector<uint8_t>> f;
        for (uint32_t k = 0; k < 3; k++)
            for (int i = 0; i < 3; i++) f.push_back(b.data(i, k, 300));
        b.burst(f, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 3u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 9u);
        EXPECT_EQ(b.stats().fastpath_hits, 9u);
        for (int i = 0; i < 3; i++) EXPECT_EQ(b.read(i), bytes_of(b, i, {0, 1, 2}, 300));
    }
    // An ICMPv6 message between (it may concern the connection: packet too
    // big) ends the look: A B ICMPv6 A B gathers nothing past it.
    {
        Six b(true, 2);
        std::vector<std::vector<uint8_t>> f{b.data(0, 0, 300), b.data(1, 0, 300)};
        f.push_back(eth6(b.peer().stack_mac, b.peer().peer_mac,
                         packet6(kPeerIp, kOurIp, wire::kProtoIcmp6,
                                 icmp6(kPeerIp, kOurIp, 128, 0, 0x12340001, std::vector<uint8_t>(8, 1)))));
        f.push_back(b.data(0, 1, 300));
        f.push_back(b.data(1, 1, 300));
        b.burst(f, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 0u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1}, 300));
        EXPECT_EQ(b.read(1), bytes_of(b, 1, {0, 1}, 300));
    }
}

TEST(Coalesce6, HeaderChangesBreakTheRun)
{
    // Segment 0 as sent, then 1 and 2 with the change: 0 never joins them;
    // 1 and 2 are a group of their own when the fast path takes such a
    // segment, none when it does not (an older TSval fails PAWS' look, a
    // SACK option is not the fast path's layout).
    struct Edit {
        const char *what;
        std::function<void(Seg &)> edit;
        uint64_t group_of_the_changed; // 2: they merge with each other, 0: not
    };
    const std::vector<Edit> edits{
        {"window", [](Seg &s) { s.win = 4000; }, 2},
        {"hop limit", [](Seg &s) { s.hop = 63; }, 2},
        {"traffic class (ECN CE)", [](Seg &s) { s.tclass = 3; }, 2},
        {"TSecr", [](Seg &s) { s.opts[11] ^= 1; }, 2},
        {"older TSval", [](Seg &s) { s.opts[7] -= 1; }, 0},
        {"a SACK option", [](Seg &s) { s.opts = {1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2}; }, 0},
    };
    for (const Edit &e : edits) {
        SCOPED_TRACE(e.what);
        Six b(true);
        b.burst({b.data(0, 0, 200), b.data(0, 1, 200, wire::kAck, e.edit), b.data(0, 2, 200, wire::kAck, e.edit)},
                kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_segments, e.group_of_the_changed);
        b.peer().poll();
        // Whatever the full rules make of the change, segment 0's bytes are there.
        EXPECT_EQ(b.read(0).substr(0, 200), bytes_of(b, 0, {0}, 200));
    }
}

// ---- the same outcome as one by one -------------------------------------------

// Bursts mixing in-order data, a gap, a duplicate, reordering, a bad
// checksum, PSH, two connections and a FIN: with coalescing on, the peer
// gets the same frames and the application the same bytes as with it off.
std::string mixed_run(bool coalesce, uint32_t flags, uint32_t strands)
{
    Six b(coalesce, 2, true, strands);
    std::ostringstream o;
    auto step = [&](const std::vector<std::vector<uint8_t>> &frames) {
        b.burst(frames, flags);
        o << b.outcome();
    };
    std::vector<std::vector<uint8_t>> f;
    for (uint32_t k = 0; k < 8; k++) f.push_back(b.data(0, k, 1000));
    for (uint32_t k = 0; k < 3; k++) f.push_back(b.data(1, k, 600));
    f.push_back(b.data(0, 8, 1000, wire::kAck | wire::kPsh));
    f.push_back(b.data(0, 9, 1000));
    step(f);
    // A gap, then what follows it, then the missing one and a duplicate.
    f.clear();
    Six::Conn &c = b.conn(0);
    const uint32_t gap = c.peer_nxt;
    c.peer_nxt += 1000;
    for (uint32_t k = 11; k < 15; k++) f.push_back(b.data(0, k, 1000));
    step(f);
    f.clear();
    const uint32_t end = c.peer_nxt;
    c.peer_nxt = gap;
    f.push_back(b.data(0, 10, 1000));
    c.peer_nxt = gap;
    f.push_back(b.data(0, 10, 1000));
    c.peer_nxt = end;
    for (uint32_t k = 15; k < 19; k++) f.push_back(b.data(0, k, 1000));
    step(f);
    // A corrupted segment inside a run (dropped where no NIC vouches), then the rest.
    f.clear();
    for (uint32_t k = 19; k < 25; k++)
        f.push_back(b.data(0, k, 1000, wire::kAck, [&](Seg &s) { s.corrupt = k == 21; }));
    for (uint32_t k = 3; k < 9; k++) f.push_back(b.data(1, k, 600));
    step(f);
    // The two connections interleaved (gathered), one of them with a gap.
    f.clear();
    for (uint32_t k = 0; k < 6; k++) {
        f.push_back(b.data(0, 25 + k, 1000));
        if (k == 3) b.conn(1).peer_nxt += 600; // conn 1's segment 12 is missing
        f.push_back(b.data(1, 9 + k, 600));
    }
    step(f);
    f.clear();
    const uint32_t end1 = b.conn(1).peer_nxt;
    b.conn(1).peer_nxt -= 4 * 600; // the gap
    f.push_back(b.data(1, 12, 600));
    b.conn(1).peer_nxt = end1;
    step(f);
    // The FIN after data.
    f.clear();
    f.push_back(b.data(1, 9, 600));
    f.push_back(b.data(1, 10, 600, wire::kAck | wire::kFin));
    step(f);
    return o.str();
}

TEST(Coalesce6, SameOutcomeAsOneByOne)
{
    for (const uint32_t flags : {kNicChecked, 0u}) {
        SCOPED_TRACE(flags ? "NIC-checked" : "summed in the copy");
        const std::string on = mixed_run(true, flags, 0), off = mixed_run(false, flags, 0);
        EXPECT_EQ(on, off);
    }
}

TEST(Coalesce6, SameOutcomeThroughStrands)
{
    const std::string on = mixed_run(true, 0, 8), off = mixed_run(false, 0, 1);
    EXPECT_EQ(on, off);
}

// ---- LRO frames over IPv6 -------------------------------------------------------

// A port's super-frame (a GRO'd skb, the vnet port's GSO_TCPV6 frame): one
// segment of 20 MSS (1,428 bytes with timestamps) is taken on the fast path
// (express over IPv6), acknowledged at the burst's end as the 20 segments it
// stands for would be (not after the delayed-ACK timer), byte exact; two in
// one burst are one group; without the port's verdict it is summed, and a
// bad one dropped.
TEST(Lro6, SuperFrameTakenOnTheFastPathAndAckedAtOnce)
{
    for (const bool coalesce : {true, false}) {
        SCOPED_TRACE(coalesce ? "coalescing" : "one by one");
        Six b(coalesce);
        // Past quick-ACK mode (at most 16 ACKs at once at the start), where
        // a lone full segment waits for the delayed-ACK timer.
        for (uint32_t k = 0; k < 20; k++) {
            b.burst({b.data(0, 1000 + k, 1428)}, kNicChecked);
            b.peer().poll();
            b.read(0);
        }
        b.peer().poll();
        b.sent();
        const StackStats before = b.stats();
        b.burst({b.data(0, 0, 20 * 1428)}, kNicChecked);
        b.peer().poll(); // the burst's end: no time passes
        EXPECT_EQ(b.stats().fastpath_hits - before.fastpath_hits, 1u);
        EXPECT_EQ(b.stats().fastpath_misses - before.fastpath_misses, 0u);
        const std::vector<uint32_t> acks = b.acks(0);
        ASSERT_FALSE(acks.empty()) << "a frame of 20 segments waited for the delayed-ACK timer";
        EXPECT_EQ(acks.back(), b.conn(0).peer_nxt);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0}, 20 * 1428));
    }
}

TEST(Lro6, TwoSuperFramesAreOneGroup)
{
    Six b(true);
    b.burst({b.data(0, 0, 20 * 1428), b.data(0, 1, 20 * 1428)}, kNicChecked);
    b.peer().poll();
    EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
    const std::vector<uint32_t> acks = b.acks(0);
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back(), b.conn(0).peer_nxt);
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {0, 1}, 20 * 1428));
}

TEST(Lro6, NotVouchedIsSummedAndABadOneDropped)
{
    for (const bool coalesce : {true, false}) {
        SCOPED_TRACE(coalesce ? "coalescing" : "one by one");
        Six b(coalesce);
        b.burst({b.data(0, 0, 40 * 1428), b.data(0, 1, 40 * 1428, wire::kAck, [](Seg &s) { s.corrupt = true; })}, 0);
        b.peer().poll();
        EXPECT_EQ(b.stats().drop_tcp_csum, 1u);
        EXPECT_EQ(b.read(0), bytes_of(b, 0, {0}, 40 * 1428));
        EXPECT_EQ(b.acks(0).back(), b.conn(0).peer_nxt - 40 * 1428);
    }
}

} // namespace
