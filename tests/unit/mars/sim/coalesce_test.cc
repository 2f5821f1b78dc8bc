// Receive coalescing (mars/src/rx_coalesce.cc, TcpConfig::rx_coalesce):
// which segments of a burst are taken as one group (never across a gap, a
// flag other than ACK/PSH, an ACK number, window or option change, another
// flow, or 64 KiB), and that with coalescing on the application gets the
// same bytes and the peer the same frames (ACKs, SACK/D-SACK blocks,
// windows, timestamps) as with it off, for bursts mixing in-order, missing,
// reordered and duplicated segments, several flows, bad checksums and a FIN.
#include "frame.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace mars::sim {
namespace {

constexpr uint32_t kNicChecked = kRxIpCsumGood | kRxL4CsumGood;

std::string describe(const Parsed &p)
{
    std::ostringstream o;
    if (!p.is_tcp) return p.is_arp ? "arp" : "other";
    o << p.sport << ">" << p.dport << " seq " << p.seq << " ack " << p.ack << " flags " << int(p.flags) << " win "
      << p.window << " len " << p.payload.size();
    if (p.opts.ts) o << " ts " << p.opts.ts->first << "/" << p.opts.ts->second;
    for (const auto &b : p.opts.sack) o << " sack " << b.first << "-" << b.second;
    return o.str();
}

// An ARP request from the peer for the stack's address.
std::vector<uint8_t> build_arp_request(RawPeer &p)
{
    ArpSpec req{p.peer_mac, MacAddr{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}, 1, p.peer_mac, MacAddr{}, p.peer_ip,
                p.stack_ip};
    return build_arp(req);
}

std::vector<uint8_t> pattern(uint32_t conn, uint32_t k, size_t n)
{
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; i++) v[i] = uint8_t(conn * 37 + k * 11 + i);
    return v;
}

// One stack and a few connections the test plays the peer of.
class Bench {
  public:
    // strands 0: the pipeline from the environment (MARS_TEST_STRANDS, the
    // _strands registration); else that many, with prefetching when > 1.
    Bench(bool coalesce, int conns, bool timestamps = true, uint32_t strands = 0)
    {
        RawPeer::Options o;
        o.stack.tcp.rx_coalesce = coalesce;
        if (strands) {
            o.stack.strands = strands;
            o.stack.prefetch = strands > 1;
        }
        peer_ = std::make_unique<RawPeer>(o);
        SockId l = peer_->listen(80, 16);
        conns_.resize(size_t(conns));
        TcpOptions syn = RawPeer::full_syn_options(0);
        if (!timestamps) syn.ts.reset();
        for (int i = 0; i < conns; i++) {
            std::string why;
            if (peer_->open_passive(l, 80, uint16_t(41000 + i), &conns_[size_t(i)], syn, &why) == kNoSock)
                throw std::runtime_error(why);
        }
        peer_->take();
        peer_->take_events();
    }
    RawPeer &peer() { return *peer_; }
    RawPeer::Conn &conn(int i) { return conns_[size_t(i)]; }
    const StackStats &stats() { return peer_->stack().stats(); }

    // A data segment of n bytes on connection i at its next sequence number
    // (advanced), with flags and a hook to change the header.
    std::vector<uint8_t> data(int i, uint32_t k, size_t n, uint8_t flags = kAck,
                              const std::function<void(TcpSpec &)> &edit = nullptr)
    {
        RawPeer::Conn &c = conn(i);
        TcpSpec s = peer_->seg(c, flags, pattern(uint32_t(i), k, n));
        if (edit) edit(s);
        c.peer_nxt += uint32_t(n) + ((flags & kFin) ? 1 : 0);
        return build_tcp(s);
    }

    // Everything observable: bytes per connection, events, frames sent,
    // the counters coalescing must leave unchanged. Frames sent and events
    // are listed per connection, in their order: coalescing may take the
    // segments of interleaved connections in another order across them
    // (never within one), and their ACKs and events follow.
    std::string outcome()
    {
        peer_->poll();
        std::ostringstream o;
        std::map<uint32_t, std::string> per_conn; // by the peer's port; 0: not TCP
        for (const Parsed &p : peer_->take()) per_conn[p.is_tcp ? p.dport : 0] += describe(p) + "\n";
        for (const auto &[port, lines] : per_conn) o << lines;
        std::map<SockId, std::string> per_sock;
        for (const auto &[sock, bits] : peer_->take_events())
            per_sock[sock] += "event " + std::to_string(sock) + " " + std::to_string(bits) + "\n";
        for (const auto &[sock, lines] : per_sock) o << lines;
        for (RawPeer::Conn &c : conns_) {
            std::vector<uint8_t> got(1 << 18);
            int64_t n = peer_->stack().recv(c.sock, got.data(), got.size());
            o << "conn " << c.peer_port << " read " << n << " sum ";
            uint64_t h = 1469598103934665603ull;
            for (int64_t j = 0; j < n; j++) h = (h ^ got[size_t(j)]) * 1099511628211ull;
            o << h << "\n";
            SockInfo si{};
            peer_->stack().info(c.sock, &si);
            o << "  state " << int(si.state) << " peer_closed " << si.peer_closed << " segs_in " << si.segs_in
              << " bytes_in " << si.bytes_in << " rcv_wnd " << si.rcv_wnd << " ooo " << si.ooo_frames << "\n";
        }
        const StackStats &s = stats();
        o << "fastpath " << s.fastpath_hits << "/" << s.fastpath_misses << " csum " << s.drop_tcp_csum << " ooo "
          << s.tcp_ooo_segments << " dsack " << s.tcp_dsacks_sent << " resets " << s.tcp_resets_in << " rx "
          << s.rx_frames << "/" << s.rx_bytes << " tx " << s.tx_frames << "\n";
        return o.str();
    }

  private:
    std::unique_ptr<RawPeer> peer_;
    std::vector<RawPeer::Conn> conns_;
};

// ---- what merges -------------------------------------------------------------
// (Run to completion: with strands, frames the pipeline takes are not
// coalesced; see StrandsCoalesceTheRunToCompletionPrefix.)

TEST(RxCoalesce, InOrderSegmentsOfOneFlowAreOneGroupAndOneAck)
{
    Bench b(true, 1, true, 1);
    std::vector<std::vector<uint8_t>> burst;
    for (uint32_t k = 0; k < 32; k++) burst.push_back(b.data(0, k, 1448));
    b.peer().input_burst(burst, kNicChecked);
    b.peer().poll();
    EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 32u);
    EXPECT_EQ(b.stats().fastpath_hits, 32u);
    std::vector<Parsed> acks = b.peer().take_tcp();
    ASSERT_EQ(acks.size(), 1u) << "one ACK for the burst";
    EXPECT_EQ(acks[0].ack, b.conn(0).peer_nxt);
    std::vector<uint8_t> got(64 * 1024);
    EXPECT_EQ(b.peer().stack().recv(b.conn(0).sock, got.data(), got.size()), 32 * 1448);
}

TEST(RxCoalesce, NeverAcrossAGap)
{
    Bench b(true, 1, true, 1);
    std::vector<std::vector<uint8_t>> burst;
    burst.push_back(b.data(0, 0, 500));
    burst.push_back(b.data(0, 1, 500));
    b.conn(0).peer_nxt += 500; // segment 2 is missing
    burst.push_back(b.data(0, 3, 500));
    burst.push_back(b.data(0, 4, 500));
    b.peer().input_burst(burst, kNicChecked);
    b.peer().poll();
    EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 2u) << "only the two before the gap";
    EXPECT_EQ(b.stats().tcp_ooo_segments, 2u);
    std::vector<Parsed> acks = b.peer().take_tcp();
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back().ack, b.conn(0).peer_nxt - 1500);
    ASSERT_EQ(acks.back().opts.sack.size(), 1u);
}

TEST(RxCoalesce, FlagsEndOrBreakGroups)
{
    // PSH may end a group: 0 1(PSH) | 2 3.
    {
        Bench b(true, 1, true, 1);
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100), b.data(0, 1, 100, kAck | kPsh), b.data(0, 2, 100),
                                                b.data(0, 3, 100)};
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 2u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 4u);
    }
    // A PSH never starts one: 0(PSH) | 1 2.
    {
        Bench b(true, 1, true, 1);
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100, kAck | kPsh), b.data(0, 1, 100), b.data(0, 2, 100)};
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
    }
    // URG in the middle: nothing merges around it (0 | 1 URG | 2).
    {
        Bench b(true, 1, true, 1);
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100), b.data(0, 1, 100, kAck | kUrg), b.data(0, 2, 100)};
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 0u);
    }
    // FIN never merges: 0 1 | 2 FIN; the FIN is still seen.
    {
        Bench b(true, 1, true, 1);
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100), b.data(0, 1, 100), b.data(0, 2, 100, kAck | kFin)};
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
        SockInfo si{};
        ASSERT_EQ(b.peer().stack().info(b.conn(0).sock, &si), 0);
        EXPECT_TRUE(si.peer_closed);
        EXPECT_EQ(si.rx_readable, 300u);
    }
    // RST in the middle: the two before it merge, nothing after it is taken.
    {
        Bench b(true, 1, true, 1);
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100), b.data(0, 1, 100)};
        burst.push_back(build_tcp(b.peer().seg(b.conn(0), kRst | kAck)));
        burst.push_back(b.data(0, 2, 100));
        burst.push_back(b.data(0, 3, 100));
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 1u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
        EXPECT_EQ(b.stats().tcp_resets_in, 1u);
    }
}

TEST(RxCoalesce, OptionWindowOrAckChangeBreaksGroups)
{
    // TSecr changes between 1 and 2: 0 1 | 2 3.
    {
        Bench b(true, 1, true, 1);
        auto ecr = [](TcpSpec &s) { s.opts.ts->second += 1; };
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100), b.data(0, 1, 100), b.data(0, 2, 100, kAck, ecr),
                                                b.data(0, 3, 100, kAck, ecr)};
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 2u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 4u);
    }
    // TSval going back ends a group; going forward does not.
    {
        Bench b(true, 1, true, 1);
        auto later = [](TcpSpec &s) { s.opts.ts->first += 5; };
        auto earlier = [](TcpSpec &s) { s.opts.ts->first += 2; };
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100), b.data(0, 1, 100, kAck, later),
                                                b.data(0, 2, 100, kAck, earlier), b.data(0, 3, 100, kAck, earlier)};
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 2u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 4u);
    }
    // A segment without the timestamp option on a timestamp connection.
    {
        Bench b(true, 1, true, 1);
        auto no_ts = [](TcpSpec &s) { s.opts.ts.reset(); };
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100), b.data(0, 1, 100), b.data(0, 2, 100, kAck, no_ts)};
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 2u);
    }
    // The window field changes: 0 1 | 2 | 3 4, where 0 1 make it smaller
    // (predicted: a smaller window, not zero, is taken as the rules would,
    // rx/fast_path.h), 2 opens it again (a window update: the full rules)
    // and 3 4 are predicted again.
    {
        Bench b(true, 1, true, 1);
        const uint64_t misses = b.stats().fastpath_misses;
        auto win = [](TcpSpec &s) { s.window = 1000; };
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100, kAck, win), b.data(0, 1, 100, kAck, win),
                                                b.data(0, 2, 100), b.data(0, 3, 100), b.data(0, 4, 100)};
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 2u);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 4u);
        EXPECT_EQ(b.stats().fastpath_misses - misses, 1u);
    }
    // The ACK number changes (the peer acknowledges our data): 0 1 | 2 3, and
    // the group acknowledging new data goes through the full rules first.
    {
        Bench b(true, 1, true, 1);
        std::vector<uint8_t> msg(300, 7);
        ASSERT_EQ(b.peer().stack().send(b.conn(0).sock, msg.data(), msg.size()), 300);
        b.peer().poll();
        b.peer().take();
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100), b.data(0, 1, 100)};
        b.conn(0).stack_nxt += 300;
        burst.push_back(b.data(0, 2, 100));
        burst.push_back(b.data(0, 3, 100));
        burst.push_back(b.data(0, 4, 100));
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_groups, 2u) << "0 1, then 3 4 after 2 took the full path";
        EXPECT_EQ(b.stats().rx_coalesce_segments, 4u);
        SockInfo si{};
        ASSERT_EQ(b.peer().stack().info(b.conn(0).sock, &si), 0);
        EXPECT_EQ(si.tx_unacked, 0u);
        EXPECT_EQ(si.rx_readable, 500u);
    }
}

std::vector<uint8_t> expected_bytes(int conn, uint32_t k0, uint32_t k1, size_t n)
{
    std::vector<uint8_t> want;
    for (uint32_t k = k0; k < k1; k++) {
        std::vector<uint8_t> p = pattern(uint32_t(conn), k, n);
        want.insert(want.end(), p.begin(), p.end());
    }
    return want;
}

std::vector<uint8_t> read_all(Bench &b, int conn)
{
    std::vector<uint8_t> got(1 << 18);
    int64_t n = b.peer().stack().recv(b.conn(conn).sock, got.data(), got.size());
    got.resize(size_t(std::max<int64_t>(n, 0)));
    return got;
}

TEST(RxCoalesce, InterleavedFlowsMergePerFlow)
{
    Bench b(true, 3, true, 1);
    std::vector<std::vector<uint8_t>> burst;
    // Interleaved (0 1 2 0 1 2 ...), then back to back (0 0 0 1 1 1 2 2 2):
    // one group per flow, each taking its segments from the whole burst.
    for (uint32_t k = 0; k < 3; k++)
        for (int i = 0; i < 3; i++) burst.push_back(b.data(i, k, 200 + 10 * size_t(i)));
    for (int i = 0; i < 3; i++)
        for (uint32_t k = 3; k < 6; k++) burst.push_back(b.data(i, k, 200 + 10 * size_t(i)));
    b.peer().input_burst(burst, kNicChecked);
    EXPECT_EQ(b.stats().rx_coalesce_groups, 3u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 18u);
    EXPECT_EQ(b.stats().fastpath_hits, 18u);
    b.peer().poll();
    std::vector<Parsed> acks = b.peer().take_tcp();
    EXPECT_EQ(acks.size(), 3u) << "one ACK per flow";
    for (int i = 0; i < 3; i++) EXPECT_EQ(read_all(b, i), expected_bytes(i, 0, 6, 200 + 10 * size_t(i))) << i;
}

TEST(RxCoalesce, AGapInOneFlowDoesNotStopAnother)
{
    Bench b(true, 2, true, 1);
    std::vector<std::vector<uint8_t>> burst;
    // 0 1 0 1 0 1 ... with flow 1's third segment missing: flow 0 is one
    // group of 8; flow 1 is a group of 2, then its segments after the gap
    // are held out of order (never merged across it).
    for (uint32_t k = 0; k < 8; k++) {
        burst.push_back(b.data(0, k, 300));
        if (k == 2) {
            b.conn(1).peer_nxt += 300;
            continue;
        }
        burst.push_back(b.data(1, k, 300));
    }
    b.peer().input_burst(burst, kNicChecked);
    EXPECT_EQ(b.stats().rx_coalesce_groups, 2u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 10u);
    EXPECT_EQ(b.stats().tcp_ooo_segments, 5u);
    EXPECT_EQ(read_all(b, 0), expected_bytes(0, 0, 8, 300));
    EXPECT_EQ(read_all(b, 1), expected_bytes(1, 0, 2, 300));
}

TEST(RxCoalesce, InterleavingIsBounded)
{
    // Eight frames of other flows between two segments of flow 0: too far
    // (kGroMaxSkip is 7), flow 0 is not merged; seven are not.
    for (int between : {7, 8}) {
        SCOPED_TRACE(between);
        Bench b(true, 9, false, 1);
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100)};
        for (int i = 1; i <= between; i++) burst.push_back(b.data(i, 0, 100));
        burst.push_back(b.data(0, 1, 100));
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_segments, between == 7 ? 2u : 0u);
        EXPECT_EQ(read_all(b, 0), expected_bytes(0, 0, 2, 100));
    }
    // Another protocol's frame (here an ARP request) between them: never
    // looked past (it may concern the connection), nothing merges.
    {
        Bench b(true, 2, false, 1);
        std::vector<std::vector<uint8_t>> burst{b.data(0, 0, 100), b.data(1, 0, 100)};
        burst.push_back(build_arp_request(b.peer()));
        burst.push_back(b.data(0, 1, 100));
        b.peer().input_burst(burst, kNicChecked);
        EXPECT_EQ(b.stats().rx_coalesce_segments, 0u);
        EXPECT_EQ(read_all(b, 0), expected_bytes(0, 0, 2, 100));
    }
}

TEST(RxCoalesce, GroupsStopAt64KiB)
{
    Bench b(true, 1, true, 1);
    // Two segments first: their ACK opens the window past the SYN-ACK's 64 KiB.
    b.peer().input_burst({b.data(0, 0, 1448), b.data(0, 100, 1448)}, kNicChecked);
    b.peer().poll();
    std::vector<std::vector<uint8_t>> burst;
    for (uint32_t k = 1; k <= 50; k++) burst.push_back(b.data(0, k, 1448));
    b.peer().input_burst(burst, kNicChecked);
    // 45 x 1448 = 65160 <= 65536 < 46 x 1448.
    EXPECT_EQ(b.stats().rx_coalesce_groups, 3u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 52u);
    std::vector<uint8_t> got(128 * 1024);
    EXPECT_EQ(b.peer().stack().recv(b.conn(0).sock, got.data(), got.size()), 52 * 1448);
}

TEST(RxCoalesce, BadChecksumEndsTheGroupAndIsDropped)
{
    Bench b(true, 1, true, 1);
    std::vector<std::vector<uint8_t>> burst;
    for (uint32_t k = 0; k < 6; k++) burst.push_back(b.data(0, k, 300));
    burst[3].back() ^= 0x5a; // segment 3's payload no longer matches its checksum
    b.peer().input_burst(burst, 0);
    EXPECT_EQ(b.stats().drop_tcp_csum, 1u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 3u);
    EXPECT_EQ(b.stats().tcp_ooo_segments, 2u);
    SockInfo si{};
    ASSERT_EQ(b.peer().stack().info(b.conn(0).sock, &si), 0);
    EXPECT_EQ(si.rx_readable, 900u);
}

TEST(RxCoalesce, StrandsCoalesceTheRunToCompletionPrefix)
{
    Bench b(true, 2, true, 8);
    std::vector<std::vector<uint8_t>> burst;
    // The burst runs to completion while frames are taken by a group or the
    // express path: connection 0's run, then connection 1's (found by a
    // table lookup); the pipeline starts at the first frame neither takes
    // (connection 0 after a gap: not coalesced, held out of order).
    b.peer().input_burst({b.data(0, 0, 100)}, kNicChecked);
    for (uint32_t k = 1; k <= 16; k++) burst.push_back(b.data(0, k, 1000));
    for (uint32_t k = 0; k < 4; k++) burst.push_back(b.data(1, k, 1000));
    b.conn(0).peer_nxt += 1000;
    for (uint32_t k = 0; k < 3; k++) burst.push_back(b.data(0, 30 + k, 1000));
    b.peer().input_burst(burst, kNicChecked);
    EXPECT_EQ(b.stats().rx_coalesce_groups, 2u);
    EXPECT_EQ(b.stats().rx_coalesce_segments, 20u);
    EXPECT_EQ(b.stats().fastpath_hits, 21u);
    EXPECT_EQ(b.stats().tcp_ooo_segments, 3u);
    EXPECT_GT(b.stats().strand_yields, 0u) << "the pipeline took the rest";
    SockInfo si{};
    ASSERT_EQ(b.peer().stack().info(b.conn(1).sock, &si), 0);
    EXPECT_EQ(si.rx_readable, 4000u);
}

// ---- same result as one by one -------------------------------------------------

// Each scenario feeds bursts to a Bench; it runs with coalescing on and off
// and everything observable must match.
using Scenario = std::function<void(Bench &)>;

void expect_same_as_one_by_one(const Scenario &sc, int conns, bool timestamps = true)
{
    Bench off(false, conns, timestamps), on(true, conns, timestamps);
    sc(off);
    sc(on);
    EXPECT_EQ(on.outcome(), off.outcome());
    EXPECT_EQ(off.stats().rx_coalesce_groups, 0u);
    EXPECT_GT(on.stats().rx_coalesce_groups, 0u) << "the scenario must coalesce something";
}

TEST(RxCoalesceSame, InOrderBurstsWithTimestampTicksAndDelayedAck)
{
    for (bool ts : {true, false}) {
        SCOPED_TRACE(ts ? "timestamps" : "no timestamps");
        expect_same_as_one_by_one(
            [](Bench &b) {
                for (uint32_t round = 0; round < 6; round++) {
                    std::vector<std::vector<uint8_t>> burst;
                    // 1, 2, 3, ... segments per burst: odd counts leave the delayed ACK armed.
                    for (uint32_t k = 0; k <= round; k++) burst.push_back(b.data(0, round * 10 + k, 1000 + k));
                    b.peer().input_burst(burst, kNicChecked);
                    b.peer().advance(1'500'000); // TSval ticks between bursts
                }
                b.peer().advance(100'000'000); // the delayed ACK fires
            },
            1, ts);
    }
}

TEST(RxCoalesceSame, ReorderedDuplicatedAndMissingInsideBursts)
{
    expect_same_as_one_by_one(
        [](Bench &b) {
            std::vector<std::vector<uint8_t>> seg;
            for (uint32_t k = 0; k < 24; k++) seg.push_back(b.data(0, k, 700));
            // Burst 1: 0 1 2, 4 5 (3 missing), 2 again (duplicate), 6.
            b.peer().input_burst({seg[0], seg[1], seg[2], seg[4], seg[5], seg[2], seg[6]}, kNicChecked);
            // Burst 2: 3 fills the hole, then 8 7 (swapped), 9 10 11, 11 again.
            b.peer().input_burst({seg[3], seg[8], seg[7], seg[9], seg[10], seg[11], seg[11]}, kNicChecked);
            // Burst 3: 12..17 with 14 twice in a row, then 19 20 (18 missing), 18.
            b.peer().input_burst({seg[12], seg[13], seg[14], seg[14], seg[15], seg[16], seg[17], seg[19], seg[20],
                                  seg[18]},
                                 kNicChecked);
            // Burst 4: old data (5 6) then new (21 22 23).
            b.peer().input_burst({seg[5], seg[6], seg[21], seg[22], seg[23]}, kNicChecked);
        },
        1);
}

TEST(RxCoalesceSame, SeveralFlowsSoftwareChecksumsAndAFin)
{
    expect_same_as_one_by_one(
        [](Bench &b) {
            std::vector<std::vector<uint8_t>> burst;
            for (uint32_t k = 0; k < 12; k++) {
                for (int i = 0; i < 4; i++) {
                    if (i == 2 && k == 5) {
                        b.conn(2).peer_nxt += 100; // a gap on flow 2
                        continue;
                    }
                    burst.push_back(b.data(i, k, 100 + 50 * size_t(i)));
                }
            }
            burst[13].back() ^= 1;  // a bad checksum in the middle of flow 1's run
            burst.push_back(b.data(3, 99, 10, kAck | kFin));
            b.peer().input_burst(burst, 0);
            // Flow 0 sends on with PSH on every third segment.
            std::vector<std::vector<uint8_t>> second;
            for (uint32_t k = 0; k < 9; k++) second.push_back(b.data(0, 50 + k, 1448, k % 3 == 2 ? kAck | kPsh : kAck));
            b.peer().input_burst(second, 0);
        },
        4);
}

TEST(RxCoalesceSame, InterleavedFlowsWithGapsFlagsAndOtherFrames)
{
    for (bool ts : {true, false}) {
        SCOPED_TRACE(ts ? "timestamps" : "no timestamps");
        expect_same_as_one_by_one(
            [](Bench &b) {
                for (uint32_t round = 0; round < 4; round++) {
                    std::vector<std::vector<uint8_t>> burst;
                    // Five flows round robin, 1000-1448 bytes; in round 1 flow
                    // 2 loses a segment (then its later ones are held out of
                    // order and the next round fills the hole), in round 2
                    // flow 3 pushes (PSH) every fourth segment, in round 3 an
                    // ARP request and a pure ACK of flow 4 sit in the middle.
                    for (uint32_t k = 0; k < 8; k++) {
                        for (int i = 0; i < 5; i++) {
                            const size_t len = 1000 + 112 * size_t(i) + k;
                            if (round == 1 && i == 2 && k == 3) {
                                b.conn(2).peer_nxt += uint32_t(len);
                                continue;
                            }
                            const uint8_t flags = round == 2 && i == 3 && k % 4 == 3 ? kAck | kPsh : kAck;
                            burst.push_back(b.data(i, round * 100 + k, len, flags));
                            if (round == 3 && k == 4 && i == 2) burst.push_back(build_arp_request(b.peer()));
                            if (round == 3 && k == 5 && i == 4)
                                burst.push_back(build_tcp(b.peer().seg(b.conn(4), kAck)));
                        }
                    }
                    b.peer().input_burst(burst, round == 2 ? 0 : kNicChecked);
                    if (round == 1) {
                        // The hole filled: flow 2's missing segment again.
                        RawPeer::Conn &c = b.conn(2);
                        const uint32_t nxt = c.peer_nxt;
                        size_t after = 0;
                        for (uint32_t k = 4; k < 8; k++) after += 1000 + 224 + k;
                        c.peer_nxt = nxt - uint32_t(after) - uint32_t(1000 + 224 + 3);
                        std::vector<uint8_t> fill = b.data(2, 103, 1000 + 224 + 3);
                        c.peer_nxt = nxt;
                        b.peer().input_burst({fill}, kNicChecked);
                    }
                    b.peer().advance(1'500'000);
                }
                b.peer().advance(100'000'000);
            },
            5, ts);
    }
}

TEST(RxCoalesceSame, WindowFillsInsideAGroup)
{
    expect_same_as_one_by_one(
        [](Bench &b) {
            // The stack's receive ring is 256 KiB and nobody reads: the
            // window closes in the middle of the fourth burst's group.
            for (uint32_t round = 0; round < 5; round++) {
                std::vector<std::vector<uint8_t>> burst;
                for (uint32_t k = 0; k < 48; k++) burst.push_back(b.data(0, round * 100 + k, 1448));
                b.peer().input_burst(burst, kNicChecked);
                b.peer().poll();
            }
        },
        1);
}

// A group whose payloads cross the receive ring's end (the application reads
// everything after each burst, so the stream goes round the 256 KiB ring):
// copied in two pieces where the end falls inside a payload (1448-byte
// segments), or on to the ring's start where a payload ends exactly at it
// (1024-byte segments: 256 of them fill the ring; 12 a burst, so in both
// the ring's end falls inside a burst's group), with the NIC's checksum
// verdict and with the checksum summed in the copy. The bytes read must be the
// stream sent, and everything observable the same as one by one.
TEST(RxCoalesceSame, GroupsAcrossTheRingsEnd)
{
    for (const size_t len : {size_t(1448), size_t(1024)}) {
        for (const uint32_t flags : {kNicChecked, 0u}) {
            SCOPED_TRACE("segments of " + std::to_string(len) + (flags ? ", NIC-checked" : ", software checksums"));
            constexpr uint32_t kBursts = 32, kPerBurst = 12; // 384 segments: past the ring's end once, inside a burst
            expect_same_as_one_by_one(
                [&](Bench &b) {
                    std::vector<uint8_t> got(kPerBurst * len);
                    for (uint32_t round = 0; round < kBursts; round++) {
                        std::vector<std::vector<uint8_t>> burst;
                        for (uint32_t k = 0; k < kPerBurst; k++) burst.push_back(b.data(0, round * kPerBurst + k, len));
                        b.peer().input_burst(burst, flags);
                        ASSERT_EQ(b.peer().stack().recv(b.conn(0).sock, got.data(), got.size()), int64_t(got.size()));
                        for (uint32_t k = 0; k < kPerBurst; k++)
                            ASSERT_EQ(std::vector<uint8_t>(got.begin() + k * len, got.begin() + (k + 1) * len),
                                      pattern(0, round * kPerBurst + k, len))
                                << "segment " << round * kPerBurst + k;
                        b.peer().poll();
                    }
                    if (b.stats().rx_coalesce_groups) { // the coalescing run: every segment in a group
                        EXPECT_EQ(b.stats().rx_coalesce_segments, uint64_t(kBursts * kPerBurst));
                    }
                },
                1);
        }
    }
}

} // namespace
} // namespace mars::sim
