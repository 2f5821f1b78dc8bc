// The strand pipeline through the whole stack (mars/src/strands.h,
// StackImpl::input_strands): bursts mixing one hot flow with many cold ones,
// out-of-order segments, a reset in the middle of a burst and frames that are
// not TCP give byte for byte the same result (bytes delivered per connection,
// every frame the stack sends, its counters) as run to completion.
#include "frame.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mars::sim {
namespace {

constexpr int kCold = 40;

struct Pipeline {
    uint32_t strands;
    bool prefetch;
};

std::string describe(const Parsed &p)
{
    std::ostringstream o;
    if (p.is_tcp) {
        o << "tcp " << p.sport << ">" << p.dport << " seq " << p.seq << " ack " << p.ack << " flags "
          << int(p.flags) << " win " << p.window << " len " << p.payload.size();
    } else if (p.is_arp) {
        o << "arp " << p.arp_op;
    } else {
        o << "other " << p.len;
    }
    return o.str();
}

std::vector<uint8_t> pattern(uint32_t conn, uint32_t k, size_t n)
{
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; i++) v[i] = uint8_t(conn * 31 + k * 7 + i);
    return v;
}

// What a scenario left behind, to compare across pipelines.
struct Outcome {
    std::vector<std::vector<uint8_t>> received; // per connection (0: hot)
    std::vector<uint32_t> events;
    std::vector<std::string> sent;
    uint64_t fastpath_hits = 0, drops_no_socket = 0, ooo_segments = 0, rx_frames = 0, resets_in = 0;
    uint64_t strand_yields = 0, prefetches = 0;
};

class Scenario {
  public:
    explicit Scenario(Pipeline pl)
    {
        RawPeer::Options o;
        o.stack.strands = pl.strands;
        o.stack.prefetch = pl.prefetch;
        o.ring_slots = kCold + 4;
        peer_ = std::make_unique<RawPeer>(o);
        SockId l = peer_->listen(80, 64);
        conns_.resize(kCold + 1);
        for (int i = 0; i <= kCold; i++) {
            std::string why;
            if (peer_->open_passive(l, 80, uint16_t(40000 + i), &conns_[i], RawPeer::full_syn_options(0), &why) ==
                kNoSock)
                throw std::runtime_error(why);
        }
        peer_->take();
        peer_->take_events();
    }
    RawPeer &peer() { return *peer_; }
    RawPeer::Conn &conn(int i) { return conns_[i]; }

    // A segment on connection i, advancing its sequence number.
    std::vector<uint8_t> data(int i, uint32_t k, size_t n)
    {
        RawPeer::Conn &c = conns_[i];
        std::vector<uint8_t> f = build_tcp(peer_->seg(c, kAck | kPsh, pattern(uint32_t(i), k, n)));
        c.peer_nxt += uint32_t(n);
        return f;
    }

    Outcome finish()
    {
        peer_->poll();
        Outcome out;
        for (const Parsed &p : peer_->take()) out.sent.push_back(describe(p));
        std::map<SockId, uint32_t> ev = peer_->take_events();
        for (RawPeer::Conn &c : conns_) {
            std::vector<uint8_t> got(1 << 16);
            int64_t n = peer_->stack().recv(c.sock, got.data(), got.size());
            got.resize(n > 0 ? size_t(n) : 0);
            out.received.push_back(got);
            out.events.push_back(ev.count(c.sock) ? ev[c.sock] : 0);
        }
        const StackStats &s = peer_->stack().stats();
        out.fastpath_hits = s.fastpath_hits;
        out.drops_no_socket = s.drop_tcp_no_socket;
        out.ooo_segments = s.tcp_ooo_segments;
        out.rx_frames = s.rx_frames;
        out.resets_in = s.tcp_resets_in;
        out.strand_yields = s.strand_yields;
        out.prefetches = s.prefetches;
        return out;
    }

  private:
    std::unique_ptr<RawPeer> peer_;
    std::vector<RawPeer::Conn> conns_;
};

const Pipeline kPipelines[] = {{1, false}, {1, true}, {2, false}, {8, true}, {64, true}, {64, false}};

void expect_same(const Outcome &want, const Outcome &got, const Pipeline &pl)
{
    SCOPED_TRACE("strands " + std::to_string(pl.strands) + " prefetch " + std::to_string(pl.prefetch));
    ASSERT_EQ(got.received.size(), want.received.size());
    for (size_t i = 0; i < want.received.size(); i++) EXPECT_EQ(got.received[i], want.received[i]) << "connection " << i;
    EXPECT_EQ(got.events, want.events);
    EXPECT_EQ(got.sent, want.sent);
    EXPECT_EQ(got.fastpath_hits, want.fastpath_hits);
    EXPECT_EQ(got.drops_no_socket, want.drops_no_socket);
    EXPECT_EQ(got.ooo_segments, want.ooo_segments);
    EXPECT_EQ(got.rx_frames, want.rx_frames);
    EXPECT_EQ(got.resets_in, want.resets_in);
    if (pl.strands > 1) {
        EXPECT_GT(got.strand_yields, 0u);
    } else {
        EXPECT_EQ(got.strand_yields, 0u);
    }
    if (pl.prefetch) {
        EXPECT_GT(got.prefetches, 0u);
    } else {
        EXPECT_EQ(got.prefetches, 0u);
    }
}

// One burst: the hot flow (connection 0) every other frame, each cold flow
// once, one cold flow's segment ahead of a gap, an ARP request and a segment
// for no connection in between.
Outcome hot_and_cold(Pipeline pl)
{
    Scenario sc(pl);
    std::vector<std::vector<uint8_t>> burst;
    for (int k = 0; k < kCold; k++) {
        burst.push_back(sc.data(0, uint32_t(k), 100 + size_t(k)));
        if (k == 7) {
            // Connection 7's next segment arrives after a 300-byte gap (held out of order).
            RawPeer::Conn &c = sc.conn(7);
            c.peer_nxt += 300;
            burst.push_back(sc.data(7, 99, 60));
            c.peer_nxt -= 360;
        }
        if (k == 11) {
            ArpSpec a;
            a.eth_src = a.sha = sc.peer().peer_mac;
            a.eth_dst = MacAddr{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};
            a.op = 1;
            a.spa = sc.peer().peer_ip;
            a.tpa = sc.peer().stack_ip;
            burst.push_back(build_arp(a));
        }
        if (k == 13) {
            RawPeer::Conn stranger = sc.conn(1);
            stranger.peer_port = 9;
            stranger.stack_port = 81; // nobody listens there
            burst.push_back(build_tcp(sc.peer().seg(stranger, kAck, pattern(9, 9, 10))));
        }
        burst.push_back(sc.data(k + 1, uint32_t(k), 50 + size_t(k)));
    }
    sc.peer().input_burst(burst, kRxIpCsumGood | kRxL4CsumGood);
    // A second burst: connection 7's gap filled, the hot flow goes on.
    std::vector<std::vector<uint8_t>> second;
    second.push_back(sc.data(7, 98, 300));
    for (int k = 0; k < 20; k++) second.push_back(sc.data(0, 100 + uint32_t(k), 1000));
    sc.peer().input_burst(second, kRxIpCsumGood | kRxL4CsumGood);
    return sc.finish();
}

TEST(StackStrands, HotFlowMixedWithColdFlowsSameAsRunToCompletion)
{
    const Outcome want = hot_and_cold({1, false});
    ASSERT_GT(want.received[0].size(), 0u);
    EXPECT_EQ(want.received[7].size(), 56u + 300 + 60) << "the gap was filled and the held segment delivered";
    EXPECT_EQ(want.drops_no_socket, 1u);
    for (const Pipeline &pl : kPipelines) expect_same(want, hot_and_cold(pl), pl);
}

// A reset of connection 3 in the middle of a burst whose later frames were
// looked up before it retired: they must see the connection gone.
Outcome reset_mid_burst(Pipeline pl, bool software_checksums)
{
    Scenario sc(pl);
    std::vector<std::vector<uint8_t>> burst;
    burst.push_back(sc.data(3, 0, 200));
    burst.push_back(sc.data(4, 0, 200));
    burst.push_back(build_tcp(sc.peer().seg(sc.conn(3), kRst)));
    for (int k = 1; k < 6; k++) {
        burst.push_back(sc.data(3, uint32_t(k), 200));
        burst.push_back(sc.data(4, uint32_t(k), 200));
    }
    sc.peer().input_burst(burst, software_checksums ? 0 : kRxIpCsumGood | kRxL4CsumGood);
    return sc.finish();
}

TEST(StackStrands, ResetInsideABurstSameAsRunToCompletion)
{
    for (bool sw : {false, true}) {
        const Outcome want = reset_mid_burst({1, false}, sw);
        EXPECT_EQ(want.received[3].size(), 200u) << "only what arrived before the reset";
        EXPECT_EQ(want.received[4].size(), 1200u);
        EXPECT_EQ(want.resets_in, 1u);
        for (const Pipeline &pl : kPipelines) expect_same(want, reset_mid_burst(pl, sw), pl);
    }
}

TEST(StackStrands, ReconfiguredBetweenBursts)
{
    Scenario sc({1, false});
    Stack &st = sc.peer().stack();
    EXPECT_EQ(st.set_receive_pipeline(0, true), -EINVAL);
    EXPECT_EQ(st.set_receive_pipeline(StackConfig::kMaxStrands + 1, true), -EINVAL);
    ASSERT_EQ(st.set_receive_pipeline(16, true), 0);
    EXPECT_EQ(st.stats().strands, 16u);
    std::vector<std::vector<uint8_t>> burst;
    for (int k = 0; k < 32; k++) burst.push_back(sc.data(k % 5, uint32_t(k), 64));
    sc.peer().input_burst(burst, kRxIpCsumGood | kRxL4CsumGood);
    Outcome o = sc.finish();
    for (int i = 0; i < 5; i++) {
        std::vector<uint8_t> want;
        for (int k = i; k < 32; k += 5) {
            std::vector<uint8_t> p = pattern(uint32_t(i), uint32_t(k), 64);
            want.insert(want.end(), p.begin(), p.end());
        }
        EXPECT_EQ(o.received[size_t(i)], want) << "connection " << i;
    }
    EXPECT_GT(o.strand_yields, 0u);
    EXPECT_GT(o.prefetches, 0u);
}

TEST(StackStrands, CreateRejectsStrandsOutOfRange)
{
    for (uint32_t bad : {0u, StackConfig::kMaxStrands + 1}) {
        StackConfig c = test_stack_config(1);
        c.strands = bad;
        FramePool pool(16);
        SimPort port(pool, [](const PacketRef &) {});
        RingPool rings(1, c.tcp.rcvbuf, c.tcp.sndbuf);
        std::string err;
        EXPECT_EQ(Stack::create(c, port, rings, &err), nullptr);
        EXPECT_NE(err.find("strands must be 1..64"), std::string::npos) << err;
    }
}

} // namespace
} // namespace mars::sim
