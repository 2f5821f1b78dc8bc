// The receiver's SACK reports on the simulated wire (RFC 2018 section 4,
// RFC 2883): what a sender can learn from the ACKs the stack sends while
// data arrives with holes in it. The test plays the sender with crafted
// segments, fed one at a time or as one received burst (the way an engine
// hands the stack a NIC burst), and keeps the scoreboard a SACK sender would
// keep from the ACKs.
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace mars::sim {
namespace {

constexpr uint32_t kSeg = 1000;
using Conn = RawPeer::Conn;
using Range = std::pair<uint32_t, uint32_t>; // [first, second), sequence numbers

bool before(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }

// What a SACK sender learns from the ACKs, in order: the cumulative ACK,
// the SACKed bytes above it (merged), and how often an ACK newly SACKed
// bytes below the highest SACKed byte (bytes the sender sent once: it takes
// that for reordering, RFC 4737 / Linux tcp_check_sack_reordering).
struct SenderView {
    uint32_t una = 0;
    std::vector<Range> sacked;
    uint32_t high = 0;
    bool any = false;
    int late_reports = 0;
    int dsacks = 0;

    void add(Range r)
    {
        sacked.push_back(r);
        std::sort(sacked.begin(), sacked.end(), [](Range a, Range b) { return before(a.first, b.first); });
        std::vector<Range> out;
        for (Range x : sacked) {
            if (!out.empty() && !before(out.back().second, x.first)) {
                if (before(out.back().second, x.second)) out.back().second = x.second;
            } else {
                out.push_back(x);
            }
        }
        sacked = out;
    }
    uint32_t covered(Range r) const
    {
        uint32_t n = 0;
        for (Range x : sacked) {
            uint32_t lo = before(x.first, r.first) ? r.first : x.first;
            uint32_t hi = before(x.second, r.second) ? x.second : r.second;
            if (before(lo, hi)) n += hi - lo;
        }
        return n;
    }
    void on_ack(const Parsed &a)
    {
        if (before(una, a.ack) || !any) una = a.ack;
        for (size_t i = 0; i < a.opts.sack.size(); i++) {
            Range r = a.opts.sack[i];
            if (!before(una, r.second)) { // at or below the ACK: a D-SACK
                if (i == 0) dsacks++;
                continue;
            }
            if (before(r.first, una)) r.first = una;
            if (any && before(r.first, high)) {
                const uint32_t top = before(r.second, high) ? r.second : high;
                if (covered({r.first, top}) < top - r.first) late_reports++;
            }
            add(r);
            if (!any || before(high, r.second)) high = r.second;
            any = true;
        }
        std::vector<Range> above;
        for (Range x : sacked)
            if (before(una, x.second)) above.push_back({before(x.first, una) ? una : x.first, x.second});
        sacked = above;
    }
};

class SackReport : public ::testing::Test {
  protected:
    void SetUp() override
    {
        peer = std::make_unique<RawPeer>();
        SockId l = p().listen(80);
        std::string why;
        s = p().open_passive(l, 80, 40000, &c, RawPeer::full_syn_options(0), &why); // SACK + timestamps
        ASSERT_NE(s, kNoSock) << why;
        p().take_conn(c);
        base = c.peer_nxt;
    }
    RawPeer &p() { return *peer; }
    Stack &st() { return peer->stack(); }

    // Segment i of the stream (kSeg bytes each from base), as the peer sends it.
    std::vector<uint8_t> segment(uint32_t i, uint32_t count = 1)
    {
        Conn at = c;
        at.peer_nxt = base + i * kSeg;
        std::vector<uint8_t> payload(kSeg * count);
        pattern_fill(1, i * kSeg, payload.data(), payload.size());
        return build_tcp(p().seg(at, kAck | kPsh, payload));
    }
    // The segments in one received burst; returns the ACKs it drew.
    std::vector<Parsed> burst(const std::vector<uint32_t> &which)
    {
        std::vector<std::vector<uint8_t>> frames;
        for (uint32_t i : which) frames.push_back(segment(i));
        p().input_burst(frames);
        p().poll();
        return acks();
    }
    std::vector<Parsed> one(uint32_t i) { return burst({i}); }
    std::vector<Parsed> acks()
    {
        std::vector<Parsed> v = p().take_conn(c);
        for (const Parsed &a : v) view.on_ack(a);
        return v;
    }
    Range segs(uint32_t first, uint32_t last) const { return {base + first * kSeg, base + (last + 1) * kSeg}; }
    static std::vector<Range> blocks(const Parsed &a) { return a.opts.sack; }

    std::unique_ptr<RawPeer> peer;
    Conn c;
    SockId s = kNoSock;
    uint32_t base = 0;
    SenderView view;
};

TEST_F(SackReport, ABurstWithSeveralHolesReportsEveryRun)
{
    // Segments 0..19 in one burst, 2, 6, 10 and 14 lost: four runs above
    // the first hole, more than the three blocks an ACK with timestamps
    // holds. The sender must learn every run, each before any higher one
    // (else it sees reordering and retransmits what we hold).
    std::vector<uint32_t> got;
    for (uint32_t i = 0; i < 20; i++)
        if (i != 2 && i != 6 && i != 10 && i != 14) got.push_back(i);
    auto a = burst(got);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(view.una, base + 2 * kSeg);
    EXPECT_EQ(view.sacked, (std::vector<Range>{segs(3, 5), segs(7, 9), segs(11, 13), segs(15, 19)}))
        << "the sender does not know of every run the receiver holds";
    EXPECT_EQ(view.late_reports, 0) << "a run was reported after a higher one: the sender takes it for reordering";
    for (const Parsed &x : a) EXPECT_LE(x.opts.sack.size(), 3u) << "timestamps leave room for three blocks";
    EXPECT_EQ(st().stats().tcp_dsacks_sent, 0u);
}

TEST_F(SackReport, BlocksAfterTheFirstAreTheMostRecentlyReported)
{
    // One segment at a time: 1, 3, 5, 7, 9 arrive, the even ones are lost.
    for (uint32_t i : {1u, 3u, 5u, 7u, 9u}) ASSERT_FALSE(one(i).empty());
    auto a = one(11);
    ASSERT_FALSE(a.empty());
    // RFC 2018 4: the run of the segment that triggered the ACK, then the
    // most recently reported others; not the lowest ones.
    EXPECT_EQ(blocks(a.back()), (std::vector<Range>{segs(11, 11), segs(9, 9), segs(7, 7)}));
    EXPECT_EQ(view.late_reports, 0);
    // A retransmission fills hole 4: its run (3..5) leads, the others follow
    // in the order they were last reported.
    a = one(4);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(blocks(a.back()), (std::vector<Range>{segs(3, 5), segs(11, 11), segs(9, 9)}));
    // The first hole fills: the ACK moves past 0..1, the reported runs stay.
    a = one(0);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a.back().ack, base + 2 * kSeg);
    EXPECT_EQ(blocks(a.back()), (std::vector<Range>{segs(3, 5), segs(11, 11), segs(9, 9)}));
    // Then hole 2: 0..5 in order; the runs above it, latest first.
    a = one(2);
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a.back().ack, base + 6 * kSeg);
    EXPECT_EQ(blocks(a.back()), (std::vector<Range>{segs(11, 11), segs(9, 9), segs(7, 7)}));
    EXPECT_EQ(st().stats().tcp_dsacks_sent, 0u);
}

TEST_F(SackReport, EveryDuplicateOfABurstIsReportedAsADsack)
{
    // 0..3 arrive in order; then a burst repeats 1 and 3 (two spurious
    // retransmissions). Each must come back as a D-SACK (RFC 2883 4.1), or
    // the sender cannot undo its reaction to the other one.
    ASSERT_FALSE(burst({0, 1, 2, 3}).empty());
    auto a = burst({1, 3});
    std::set<Range> reported;
    for (const Parsed &x : a) {
        ASSERT_FALSE(x.opts.sack.empty());
        EXPECT_EQ(x.ack, base + 4 * kSeg);
        reported.insert(x.opts.sack[0]);
    }
    EXPECT_EQ(reported, (std::set<Range>{segs(1, 1), segs(3, 3)}));
    EXPECT_EQ(st().stats().tcp_dsacks_sent, 2u);
}

TEST_F(SackReport, FirstTimeDataNeverDrawsADsack)
{
    // Holes, runs joining, holes filling, in bursts and alone: no byte is
    // received twice, so no ACK may carry a D-SACK (a first block at or
    // below the ACK, or one counted as sent).
    burst({0, 1, 3, 4, 6, 8, 9});
    burst({10, 12, 13});
    one(7);
    burst({2, 5, 11, 14});
    EXPECT_EQ(view.dsacks, 0);
    EXPECT_EQ(st().stats().tcp_dsacks_sent, 0u);
    EXPECT_EQ(view.una, base + 15 * kSeg) << "everything arrived";
}

} // namespace
} // namespace mars::sim
