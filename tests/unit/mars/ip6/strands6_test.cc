// TCP over IPv6 through the strand pipeline and the prefetching loop
// (mars/src/rx/tcp_in.cc input_strands / input_prefetch_ahead, FlowTable6's
// split lookup; issue 31): IPv6 frames take the stages (the counters show
// every yield and prefetch a frame of a known connection costs), and bursts
// mixing IPv4 and IPv6 connections -- data, a gap and its fill, a duplicate,
// resets with later frames of the reset connection in the same burst, a
// frame for no connection, a FIN, software checksums -- give byte for byte
// the frames, bytes, events and counters of run to completion.
#include "six_fixture.h"

#include "frame.h"

#include <cstdio>

namespace {

constexpr int kConns = 6; // per family

struct Pipeline {
    uint32_t strands;
    bool prefetch;
};

std::string hex(const std::vector<uint8_t> &f)
{
    std::string s;
    char b[3];
    for (uint8_t c : f) {
        std::snprintf(b, sizeof b, "%02x", c);
        s += b;
    }
    return s;
}

// The frames a burst of one IPv6 data segment per connection (all distinct,
// none in the last-flow cache) costs in stages: with prefetching, frame
// headers `width` ahead, the bucket, the connection's lines and the ring's
// tail; each strand yields after stages 0 and 1 (and 2 when it prefetched
// the ring).
struct StageCount {
    uint64_t yields, prefetches, fastpath;
};

StageCount one_per_connection(uint32_t strands, bool prefetch, int n)
{
    Six b(false, n, true, strands, prefetch ? 1 : 0);
    const StackStats before = b.stats();
    std::vector<std::vector<uint8_t>> burst;
    for (int i = 0; i < n; i++) burst.push_back(b.data(i, 0, 200));
    b.burst(burst, kNicChecked);
    for (int i = 0; i < n; i++) EXPECT_EQ(b.read(i), bytes_of(b, i, {0}, 200)) << "connection " << i;
    const StackStats &s = b.stats();
    return {s.strand_yields - before.strand_yields, s.prefetches - before.prefetches,
            s.fastpath_hits - before.fastpath_hits};
}

TEST(Strands6, FramesTakeTheStages)
{
    constexpr int n = 12;
    // 8 strands with prefetching: 3 yields a frame; prefetches: the headers
    // of frames 8..11, then per frame bucket + 4 connection lines + ring tail.
    const StageCount on = one_per_connection(8, true, n);
    EXPECT_EQ(on.yields, 3u * n);
    EXPECT_EQ(on.fastpath, uint64_t(n)) << "every frame predicted on the connection its strand found";
    // Without prefetching stage 2 has nothing to wait for.
    const StageCount off = one_per_connection(8, false, n);
    EXPECT_EQ(off.yields, 2u * n);
    EXPECT_EQ(off.prefetches, 0u);
    EXPECT_EQ(off.fastpath, uint64_t(n));
    // One strand, prefetching: each frame's headers two ahead and the next
    // frame's FlowTable6 bucket.
    const StageCount ahead = one_per_connection(1, true, n);
    EXPECT_EQ(ahead.yields, 0u);
    EXPECT_EQ(ahead.fastpath, uint64_t(n));
    // `prefetches` counts the transmit side's too (flush_output, the burst's
    // ACKs): the same in both runs, so their difference is the receive side's.
    const uint64_t strands_rx = (n - 8) + 6u * n, ahead_rx = (n - 2) + (n - 1u);
    EXPECT_EQ(on.prefetches - ahead.prefetches, strands_rx - ahead_rx);
    EXPECT_GE(ahead.prefetches, ahead_rx);
}

// Frames of the connection in FlowTable6's last-flow cache run to completion
// ahead of the pipeline (express6_cached), as IPv4's do: no stage, no yield
// (a request/response exchange paid the pipeline's set-up for every lone
// frame: engine-instructions rr6 4,705 -> 3,921 per transaction). Another
// connection's frame ends the run: it and what follows take the stages.
TEST(Strands6, CachedConnectionRunsToCompletion)
{
    Six b(false, 2, true, 8, 1);
    b.burst({b.data(0, 0, 200)}, kNicChecked); // connection 0 is the cached one now
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {0}, 200));
    const StackStats before = b.stats();
    b.burst({b.data(0, 1, 200), b.data(0, 2, 200), b.data(0, 3, 200)}, kNicChecked);
    EXPECT_EQ(b.stats().strand_yields - before.strand_yields, 0u);
    EXPECT_EQ(b.stats().fastpath_hits - before.fastpath_hits, 3u);
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {1, 2, 3}, 200));
    const StackStats mid = b.stats();
    b.burst({b.data(1, 0, 200), b.data(0, 4, 200)}, kNicChecked);
    EXPECT_GT(b.stats().strand_yields - mid.strand_yields, 0u);
    EXPECT_EQ(b.read(1), bytes_of(b, 1, {0}, 200));
    EXPECT_EQ(b.read(0), bytes_of(b, 0, {4}, 200));
}

// IPv6 and IPv4 connections on one stack (the dual-stack listener takes
// both), bursts interleaving them.
class Mixed {
  public:
    Mixed(Pipeline pl, bool coalesce) : six_(coalesce, kConns, true, pl.strands, pl.prefetch ? 1 : 0)
    {
        sim::RawPeer &p = six_.peer();
        v4_.resize(kConns);
        for (int i = 0; i < kConns; i++) {
            std::string why;
            if (p.open_passive(six_.listener(), 80, uint16_t(50000 + i), &v4_[size_t(i)],
                               sim::RawPeer::full_syn_options(0), &why) == kNoSock)
                throw std::runtime_error("IPv4 connection: " + why);
        }
        p.take();
        p.take_raw();
        p.take_events();
    }
    Six &six() { return six_; }
    std::vector<uint8_t> v4(int i, uint32_t k, size_t n, uint8_t flags = wire::kAck | wire::kPsh)
    {
        sim::RawPeer::Conn &c = v4_[size_t(i)];
        std::vector<uint8_t> f = sim::build_tcp(six_.peer().seg(c, flags, pattern(100 + uint32_t(i), k, n)));
        c.peer_nxt += uint32_t(n);
        return f;
    }
    sim::RawPeer::Conn &conn4(int i) { return v4_[size_t(i)]; }

    // Every frame the stack sent (bytes), events, what each connection
    // holds, the counters.
    std::string outcome()
    {
        sim::RawPeer &p = six_.peer();
        p.poll();
        std::ostringstream o;
        for (const auto &f : p.take_raw()) o << "sent " << hex(f) << "\n";
        p.take();
        for (const auto &[sock, bits] : p.take_events()) o << "event " << sock << " " << bits << "\n";
        auto conn = [&](const char *fam, int i, SockId sock) {
            std::string got(1 << 20, '\0');
            const int64_t n = six_.stack().recv(sock, got.data(), got.size());
            got.resize(n > 0 ? size_t(n) : 0);
            SockInfo si{};
            six_.stack().info(sock, &si);
            o << fam << " " << i << " read " << got.size() << " hash " << std::hash<std::string>{}(got) << " state "
              << int(si.state) << " segs_in " << si.segs_in << " bytes_in " << si.bytes_in << " rcv_wnd " << si.rcv_wnd
              << " ooo " << si.ooo_frames << "\n";
        };
        for (int i = 0; i < kConns; i++) conn("v6", i, six_.conn(i).sock);
        for (int i = 0; i < kConns; i++) conn("v4", i, v4_[size_t(i)].sock);
        const StackStats &s = six_.stats();
        o << "fastpath " << s.fastpath_hits << "/" << s.fastpath_misses << " csum " << s.drop_tcp_csum << " ooo "
          << s.tcp_ooo_segments << " dsack " << s.tcp_dsacks_sent << " ip6_in " << s.ip6_in << " rx " << s.rx_frames
          << "/" << s.rx_bytes << " tx " << s.tx_frames << " no_socket " << s.drop_tcp_no_socket << " resets_in "
          << s.tcp_resets_in << "\n"; // (coalesced groups differ: the pipeline's frames are not coalesced)
        return o.str();
    }

  private:
    Six six_;
    std::vector<sim::RawPeer::Conn> v4_;
};

struct MixedResult {
    std::string outcome;
    uint64_t yields, prefetches;
};

MixedResult mixed(Pipeline pl, bool coalesce)
{
    Mixed m(pl, coalesce);
    Six &b = m.six();
    const StackStats before = b.stats();
    std::vector<std::vector<uint8_t>> burst;
    for (uint32_t k = 0; k < 4; k++) {
        for (int i = 0; i < kConns; i++) {
            burst.push_back(b.data(i, k, 300 + 10 * k + size_t(i)));
            burst.push_back(m.v4(i, k, 200 + 10 * k + size_t(i)));
            if (k == 1 && i == 0) burst.push_back(b.data(i, 9, 120)); // two in a row on one IPv6 connection
        }
        if (k == 1) {
            // IPv6 connection 2: a segment after a 500-byte gap (held), and a
            // duplicate of connection 1's segment.
            b.conn(2).peer_nxt += 500;
            burst.push_back(b.data(2, 50, 80));
            b.conn(2).peer_nxt -= 580;
            Seg dup = b.seg(1, 1, 311);
            dup.seq -= 311;
            burst.push_back(b.frame(dup));
            b.conn(1).peer_nxt -= 311;
            // A segment for a port nobody holds (a reset in answer).
            Seg stranger = b.seg(3, 7, 40);
            b.conn(3).peer_nxt -= 40;
            stranger.sport = 999;
            stranger.dport = 81;
            burst.push_back(b.frame(stranger));
        }
        if (k == 2) {
            // Resets of IPv6 connection 4 and IPv4 connection 3, each
            // followed in the burst by a later frame of the connection (looked
            // up before the reset retired).
            burst.push_back(b.data(4, 60, 0, wire::kRst | wire::kAck));
            burst.push_back(m.v4(3, 60, 0, wire::kRst | wire::kAck));
            burst.push_back(b.data(4, 62, 30));
            burst.push_back(m.v4(3, 62, 30));
        }
    }
    burst.push_back(b.data(4, 61, 90));
    burst.push_back(m.v4(3, 61, 90));
    b.burst(burst, kNicChecked);
    // Second burst, checksums left to the stack: the gap filled, a FIN on
    // IPv6 connection 5, the rest interleaved.
    std::vector<std::vector<uint8_t>> second;
    for (int i = 0; i < kConns; i++) {
        if (i == 2) second.push_back(b.data(2, 49, 500));
        if (i != 4) second.push_back(b.data(i, 20, 700, i == 5 ? wire::kAck | wire::kFin : wire::kAck));
        if (i != 3) second.push_back(m.v4(i, 20, 650));
    }
    b.burst(second, 0);
    const StackStats &s = b.stats();
    return {m.outcome(), s.strand_yields - before.strand_yields, s.prefetches - before.prefetches};
}

TEST(Strands6, MixedFamiliesSameAsRunToCompletion)
{
    const Pipeline pipelines[] = {{1, true}, {2, false}, {8, true}, {8, false}, {64, true}};
    for (const bool coalesce : {false, true}) {
        SCOPED_TRACE(coalesce ? "coalescing" : "one by one");
        const MixedResult want = mixed({1, false}, coalesce);
        EXPECT_NE(want.outcome.find("no_socket 1 resets_in 2"), std::string::npos) << want.outcome;
        for (const Pipeline &pl : pipelines) {
            SCOPED_TRACE("strands " + std::to_string(pl.strands) + " prefetch " + std::to_string(pl.prefetch));
            const MixedResult got = mixed(pl, coalesce);
            EXPECT_EQ(got.outcome, want.outcome);
            if (pl.strands > 1) {
                EXPECT_GT(got.yields, 0u);
            }
            if (pl.prefetch) {
                EXPECT_GT(got.prefetches, 0u);
            }
        }
    }
}

} // namespace
