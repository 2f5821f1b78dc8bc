// Transmit in runs (mars/src/tx_run.cc, TcpConfig::tx_batch) and TCP
// segmentation offload: for many transfers — send sizes and write patterns,
// peer windows, Nagle and cork, timestamps and SACK on and off, a lost
// segment (SACK recovery, RACK, retransmissions), D-SACK to report, FIN
// piggybacked on the last data, send rings that wrap — the frames the stack
// transmits with one-pass segmentation are byte for byte the ones the one by
// one path transmits (same headers, payloads and order), and every counter
// and socket state is the same. With a port that offers TSO (SimPort's
// emulation of a NIC, a test fixture) the segments the port cuts from the
// large frames are those same frames too.
#include "frame.h"
#include "raw_peer.h"
#include "testing/stack_access.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <map>
#include <set>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

// Heap allocations made while g_count_allocations is set (every operator
// new of this test binary; PacketPathDoesNotAllocate).
static std::atomic<bool> g_count_allocations{false};
static std::atomic<uint64_t> g_allocations{0};

// Not inlined: gcc would pair the free() below with each new-expression it
// sees and warn (-Wmismatched-new-delete), though they are the same heap.
[[gnu::noinline]] void *operator new(std::size_t n)
{
    if (g_count_allocations.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void *p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void *p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void *p, std::size_t) noexcept { std::free(p); }

namespace mars::sim {
namespace {

// One transfer from the stack to the peer the test plays.
struct Plan {
    uint32_t total = 100000;      // bytes the application sends
    uint32_t chunk = 100000;      // bytes per write
    uint32_t window = 1 << 20;    // the peer's receive window (bytes)
    uint32_t sndbuf = 1 << 16;    // the stack's send ring
    bool ts = true, sack = true;
    bool nodelay = true, cork = false, more = false; // more: writes with MSG_MORE
    bool fin = true;              // shutdown after the last write
    int32_t drop_at = -1;         // the first transmission of the segment at this offset is lost
    uint32_t drop_count = 1;      // ... and of the drop_count - 1 segments after it (consecutive losses)
    int32_t spare = -1;           // ... except the spare-th of those, which arrives (two lost pieces)
    int dsack_round = -1;         // the peer sends a duplicate data segment in this round
    uint32_t ack_every = 2;       // the peer ACKs every this many segments (and at the end of a round)
    uint16_t peer_mss = 1460;     // below 1460: SACK blocks fit beside full segments
    int ooo_round = -1;           // the peer sends data past a gap in this round (SACK blocks from then on)
    uint64_t round_ns = 1'000'000;
    std::string name() const
    {
        std::ostringstream o;
        o << "total " << total << " chunk " << chunk << " window " << window << " sndbuf " << sndbuf << " ts " << ts
          << " sack " << sack << " nodelay " << nodelay << " cork " << cork << " more " << more << " fin " << fin
          << " drop_at " << drop_at << " drop_count " << drop_count << " spare " << spare << " dsack_round " << dsack_round << " ack_every " << ack_every << " peer_mss " << peer_mss << " ooo_round " << ooo_round;
        return o.str();
    }
};

// kTsoSmall: a port whose TSO frames hold at most 6000 bytes (4 full
// segments), so a run leaves as several TSO frames and a last ordinary one.
// kExternal: runs with the payload attached by reference (SimPort reads it
// at transmit); kExternalHeld: the port lets go of each frame's payload only
// a round after it was sent (as a NIC freeing descriptors late), so the
// frames differ (the application finds less room) but no byte may change
// under a frame in flight.
enum class Mode { kOneByOne, kRuns, kTso, kTsoSmall, kExternal, kExternalHeld };

std::string describe(const Parsed &p)
{
    std::ostringstream o;
    if (!p.is_tcp) return p.is_arp ? "arp" : "other";
    o << "seq " << p.seq << " ack " << p.ack << " flags " << int(p.flags) << " win " << p.window << " len "
      << p.payload.size();
    if (p.opts.ts) o << " ts " << p.opts.ts->first << "/" << p.opts.ts->second;
    for (const auto &b : p.opts.sack) o << " sack " << b.first << "-" << b.second;
    return o.str();
}

struct Outcome {
    std::vector<std::vector<uint8_t>> frames; // everything transmitted, in order
    std::string state;                        // counters, socket info, events
    StackStats stats{};
    bool delivered = false;                   // the peer got every byte (and the FIN)
    uint32_t rounds_held = 0; // rounds in which acknowledged bytes were held back from the application
    uint64_t rtx_run_segments = 0; // segments retransmitted in runs (StackImpl's count)
    uint64_t rtx_tso_frames = 0;   // ... and the TSO frames among them
    uint32_t base = 0;             // the stack's first data sequence number
};

// The counters a run changes by design: how the frames were made, not what they are.
std::string stats_text(StackStats s)
{
    s.tx_runs = s.tx_run_segments = s.tx_tso_frames = 0;
    s.tx_ref_frames = s.tx_ref_bytes = 0;
    std::ostringstream o;
    const uint64_t *w = reinterpret_cast<const uint64_t *>(&s);
    for (size_t i = 0; i < sizeof s / 8; i++) o << w[i] << (i % 16 == 15 ? "\n" : " ");
    return o.str();
}

Outcome run(const Plan &plan, Mode mode, uint32_t csum_offloads, uint32_t large_frames = 8)
{
    RawPeer::Options o;
    o.stack.tcp.tx_batch = mode != Mode::kOneByOne;
    o.stack.tcp.sndbuf = plan.sndbuf;
    o.keep_raw = true;
    const bool tso = mode == Mode::kTso || mode == Mode::kTsoSmall;
    o.offloads = csum_offloads | (tso ? uint32_t(kOffloadTxTcpSeg) : 0u);
    if (mode == Mode::kExternal || mode == Mode::kExternalHeld) o.offloads |= kOffloadTxExternal;
    auto peer = std::make_unique<RawPeer>(o);
    FramePool large(large_frames, 65535);
    if (tso) peer->port().enable_tso(&large, mode == Mode::kTso ? 65535 : 6000);
    const bool held = mode == Mode::kExternalHeld;
    if (mode == Mode::kExternal || held) peer->port().enable_external(held);
    // The exact bytes MARS made: checksum offload seeds are left as they are.
    peer->port().set_offload_emulation(false);

    RawPeer::Conn c;
    TcpOptions syn = RawPeer::full_syn_options(0);
    if (!plan.ts) syn.ts.reset();
    syn.sack_permitted = plan.sack;
    syn.mss = plan.peer_mss;
    std::string why;
    SockId l = peer->listen(80);
    SockId s = peer->open_passive(l, 80, 40000, &c, syn, &why);
    EXPECT_NE(s, kNoSock) << why;
    if (s == kNoSock) return Outcome{};
    Stack &st = peer->stack();
    st.set_option(s, SockOpt::kNoDelay, plan.nodelay ? 1 : 0);
    if (plan.cork) st.set_option(s, SockOpt::kCork, 1);
    c.window = uint16_t(std::min<uint32_t>(plan.window >> 7, 65535)); // the peer announced wscale 7
    const uint32_t base = c.stack_nxt;                                // the stack's ISN + 1
    peer->take();
    peer->take_raw();

    std::map<uint32_t, uint32_t> got; // received intervals above rcv, relative to base
    uint32_t rcv = 0;                 // next byte the peer expects (relative)
    int64_t fin_at = -1;              // relative sequence number of the stack's FIN
    bool shut = false, ooo_sent = false;
    std::set<uint32_t> dropped;       // segments (relative offsets) whose first transmission was lost
    int64_t drop_end = -1;            // where the lost segments end, once the first is seen
    uint32_t written = 0, unacked_segs = 0;
    auto ack = [&]() {
        TcpSpec a = peer->seg(c, kAck);
        const bool fin_in = fin_at >= 0 && rcv == uint32_t(fin_at);
        a.ack = base + rcv + (fin_in ? 1 : 0);
        if (plan.sack)
            for (auto it = got.begin(); it != got.end() && a.opts.sack.size() < 3; ++it)
                a.opts.sack.emplace_back(base + it->first, base + it->second);
        peer->inject(a);
        unacked_segs = 0;
    };
    Outcome out;
    size_t held_last_round = 0;
    for (int round = 0; round < 4000; round++) {
        if (held) {
            // Acknowledged bytes a held frame points at are not the application's yet.
            RingSpan span{};
            const uint32_t unacked = written - std::min(written, rcv);
            if (st.tx_view(s, &span) == 0 && span.total() < plan.sndbuf - unacked && peer->port().external_held())
                out.rounds_held++;
            // The frames of the round before go; the stack hears of it at its next poll.
            peer->port().release_external(held_last_round);
            held_last_round = peer->port().external_held();
        }
        // The application writes what the ring takes.
        while (written < plan.total) {
            RingSpan span{};
            if (st.tx_view(s, &span) != 0) break;
            const uint32_t room = span.total();
            const uint32_t n = std::min({plan.chunk - written % plan.chunk, plan.total - written, room});
            if (n == 0) break;
            for (uint32_t i = 0; i < n; i++) {
                uint8_t b = pattern_byte(7, written + i);
                if (i < span.n[0]) span.p[0][i] = b;
                else span.p[1][i - span.n[0]] = b;
            }
            const bool more = plan.more && written + n < plan.total;
            EXPECT_EQ(st.tx_commit(s, n, more), 0);
            written += n;
        }
        if (written == plan.total && !shut) {
            if (plan.cork) st.set_option(s, SockOpt::kCork, 0);
            if (plan.fin) st.shutdown(s, false, true);
            shut = true;
        }
        if (round == plan.dsack_round) {
            // Data from the peer, then the same segment again: the stack's
            // next ACK-bearing segment reports the duplicate (RFC 2883).
            // Both in one burst, and their ACK opens the window: the data
            // that waited goes out at the end of that burst with the
            // D-SACK in its first segment.
            const std::vector<uint8_t> d(10, 0x5a);
            c.window = uint16_t(std::min<uint32_t>((plan.window * 8) >> 7, 65535));
            const std::vector<uint8_t> frame = build_tcp(peer->seg(c, kAck, d));
            c.peer_nxt += 10;
            if (ooo_sent) c.peer_nxt += 20; // those 10 bytes filled the gap before it
            peer->input_burst({frame, frame});
        }
        if (round == plan.ooo_round) {
            // Data past a 10-byte gap: the stack holds it out of order and
            // reports it in SACK blocks on every segment after.
            TcpSpec ooo = peer->seg(c, kAck, std::vector<uint8_t>(20, 0xa5));
            ooo.seq += 10;
            peer->inject(ooo);
            ooo_sent = true;
        }
        peer->poll();
        // The peer receives what the stack sent.
        for (const Parsed &p : peer->take_tcp()) {
            peer->observe(c, p);
            const uint32_t rel = p.seq - base;
            const uint32_t len = uint32_t(p.payload.size());
            if (plan.drop_at >= 0 && len && drop_end < 0 && rel == uint32_t(plan.drop_at))
                drop_end = int64_t(rel) + int64_t(plan.drop_count) * len;
            const bool spared = plan.spare >= 0 && rel == uint32_t(plan.drop_at) + uint32_t(plan.spare) * len;
            if (drop_end >= 0 && len && int32_t(rel - uint32_t(plan.drop_at)) >= 0 && int64_t(rel) < drop_end &&
                !spared && dropped.insert(rel).second)
                continue; // its first transmission
            if (len) {
                for (uint32_t i = 0; i < len; i++)
                    if (p.payload[i] != pattern_byte(7, rel + i)) {
                        ADD_FAILURE() << "wrong byte at " << rel + i;
                        return out;
                    }
                if (int32_t(rel + len - rcv) > 0) {
                    auto &end = got[std::max(rel, rcv) == rel ? rel : rcv];
                    end = std::max(end, rel + len);
                }
            }
            if (p.flags & kFin) fin_at = int64_t(rel + len);
            // Merge what is now contiguous.
            for (auto it = got.begin(); it != got.end() && it->first <= rcv;) {
                rcv = std::max(rcv, it->second);
                it = got.erase(it);
            }
            if (++unacked_segs >= plan.ack_every) ack();
        }
        if (unacked_segs) ack();
        const bool fin_done = !plan.fin || (fin_at >= 0 && rcv == uint32_t(fin_at));
        if (written == plan.total && rcv == plan.total && fin_done && got.empty()) {
            out.delivered = true;
            peer->take_tcp();
            break;
        }
        peer->advance(plan.round_ns);
    }
    out.frames = peer->take_raw();
    SockInfo si{};
    st.info(s, &si);
    std::ostringstream state;
    state << "rcv " << rcv << " state " << int(si.state) << " segs_out " << si.segs_out << " bytes_out " << si.bytes_out
          << " rtx " << si.retransmits << "/" << si.total_retransmits << " cwnd " << si.cwnd << " srtt " << si.srtt_us
          << "\n"
          << stats_text(st.stats());
    for (const auto &[sock, bits] : peer->take_events()) state << "event " << sock << " " << bits << "\n";
    out.state = state.str();
    out.stats = st.stats();
    out.rtx_run_segments = StackAccess::rtx_run_segments(st);
    out.rtx_tso_frames = StackAccess::rtx_tso_frames(st);
    out.base = base;
    EXPECT_EQ(peer->port().tx_invalid, 0u) << "a frame broke the offload contract";
    EXPECT_EQ(peer->port().external_changed, 0u) << "send-ring bytes changed under a frame in flight";
    return out;
}

// The first difference between two outcomes, in words ("" when equal).
std::string difference(const Outcome &a, const Outcome &b)
{
    const size_t n = std::min(a.frames.size(), b.frames.size());
    for (size_t i = 0; i < n; i++) {
        if (a.frames[i] == b.frames[i]) continue;
        Parsed pa, pb;
        parse_frame(a.frames[i].data(), a.frames[i].size(), &pa);
        parse_frame(b.frames[i].data(), b.frames[i].size(), &pb);
        size_t at = 0;
        while (at < std::min(a.frames[i].size(), b.frames[i].size()) && a.frames[i][at] == b.frames[i][at]) at++;
        return "frame " + std::to_string(i) + " differs at byte " + std::to_string(at) + ": one by one [" +
               describe(pa) + "], runs [" + describe(pb) + "]";
    }
    if (a.frames.size() != b.frames.size())
        return "frames sent: " + std::to_string(a.frames.size()) + " one by one, " + std::to_string(b.frames.size()) +
               " with runs";
    if (a.state != b.state) return "state differs:\none by one:\n" + a.state + "runs:\n" + b.state;
    return "";
}

// Runs the plan one by one and with runs (and TSO), software checksums and
// checksum offload; every variant must equal the one by one path's.
void check_plan(const Plan &plan, uint64_t *runs_seen = nullptr, uint64_t *tso_seen = nullptr,
                uint64_t *rtx_runs_seen = nullptr)
{
    for (uint32_t offloads : {0u, uint32_t(kOffloadTxIpCsum | kOffloadTxTcpCsum)}) {
        const Outcome ref = run(plan, Mode::kOneByOne, offloads);
        EXPECT_TRUE(ref.delivered) << plan.name();
        EXPECT_EQ(ref.stats.tx_runs, 0u);
        std::vector<Mode> modes{Mode::kRuns, Mode::kExternal};
        if (offloads) {
            modes.push_back(Mode::kTso);
            modes.push_back(Mode::kTsoSmall);
        }
        for (Mode m : modes) {
            const Outcome got = run(plan, m, offloads);
            const char *what = m == Mode::kRuns ? " (runs)" : m == Mode::kExternal ? " (by reference)" : " (TSO)";
            EXPECT_EQ(difference(ref, got), "") << plan.name() << what << " offloads " << offloads;
            if (m == Mode::kExternal && got.stats.tx_run_segments > 0) {
                EXPECT_GT(got.stats.tx_ref_frames, 0u) << plan.name() << ": no payload went by reference";
            }
            if (runs_seen) *runs_seen += got.stats.tx_run_segments;
            if (tso_seen) *tso_seen += got.stats.tx_tso_frames;
            if (rtx_runs_seen) *rtx_runs_seen += got.rtx_run_segments;
        }
    }
}

TEST(MarsTxRun, BulkTransferSameFramesAndUsesRuns)
{
    Plan p;
    uint64_t runs = 0, tso = 0;
    check_plan(p, &runs, &tso);
    EXPECT_GT(runs, 0u) << "the runs path was not taken";
    EXPECT_GT(tso, 0u) << "no TSO frame was made";
}

TEST(MarsTxRun, SendSizes)
{
    for (uint32_t total : {1u, 100u, 1447u, 1448u, 1449u, 2896u, 2897u, 4344u, 14480u, 14481u, 65536u, 300000u}) {
        Plan p;
        p.total = total;
        check_plan(p);
        p.fin = false;
        check_plan(p);
    }
}

TEST(MarsTxRun, TimestampsAndSackOnAndOff)
{
    for (bool ts : {false, true})
        for (bool sack : {false, true}) {
            Plan p;
            p.total = 200000;
            p.ts = ts;
            p.sack = sack;
            check_plan(p);
        }
}

TEST(MarsTxRun, PeerWindowLimits)
{
    for (uint32_t window : {3000u, 2048u, 4096u, 5888u, 12800u, 40960u}) {
        Plan p;
        p.total = 60000;
        p.window = window;
        check_plan(p);
    }
}

TEST(MarsTxRun, NagleCorkAndMore)
{
    for (uint32_t chunk : {100u, 1000u, 3000u, 7000u}) {
        Plan p;
        p.total = 40000;
        p.chunk = chunk;
        p.nodelay = false;
        check_plan(p);
        p.cork = true;
        check_plan(p);
        p.cork = false;
        p.more = true;
        check_plan(p);
    }
}

TEST(MarsTxRun, SackRecoveryAfterALoss)
{
    uint64_t runs = 0;
    for (int32_t drop : {0, 1448, 14480, 28960, 57920}) {
        for (bool sack : {true, false}) {
            Plan p;
            p.total = 150000;
            p.drop_at = drop;
            p.sack = sack;
            p.ack_every = 1;
            check_plan(p, &runs);
        }
    }
    EXPECT_GT(runs, 0u);
}

// Several consecutive segments lost: RACK/SACK recovery resends them as
// runs (one pass, tx_run.cc), and without SACK the timeout's go-back-N
// does; every frame is still the one by one path's, and the peer gets every
// byte. Lost at the start, in the middle, at the tail (a probe, then the
// timeout), with timestamps on and off, ACKs every 1 or 2 segments.
TEST(MarsTxRun, RetransmissionsOfConsecutiveLossesInRuns)
{
    uint64_t rtx_runs = 0, rtx_runs_sack = 0;
    for (int32_t drop : {0, 14480, 57920, 136000}) {
        for (uint32_t count : {3u, 8u, 20u}) {
            for (bool sack : {true, false}) {
                for (bool ts : {true, false}) {
                    Plan p;
                    p.total = 150000;
                    p.drop_at = drop - drop % (ts ? 1448 : 1460);
                    p.drop_count = count;
                    p.sack = sack;
                    p.ts = ts;
                    p.ack_every = count == 8 ? 2 : 1;
                    uint64_t n = 0;
                    check_plan(p, nullptr, nullptr, &n);
                    rtx_runs += n;
                    if (sack) rtx_runs_sack += n;
                }
            }
        }
    }
    EXPECT_GT(rtx_runs_sack, 0u) << "SACK recovery never retransmitted in a run";
    EXPECT_GT(rtx_runs - rtx_runs_sack, 0u) << "go-back-N never retransmitted in a run";
}

// Retransmission runs as TSO frames (issue 11): with a port that offers
// TSO, the segments it cuts from the frames recovery and go-back-N hand it
// are, frame for frame, those the one by one path sends (and every counter
// and state, RACK's log with its per-segment send times and retransmitted
// marks included, since what the stack sends next depends on them): 3, 8
// and 20 consecutive losses, SACK and timestamps on and off, frames of up to
// 44-45 segments (kTso) or 4 (kTsoSmall: a run is several frames and a last
// ordinary one).
Outcome check_rtx_tso(const Plan &p, Mode m)
{
    const uint32_t csum = kOffloadTxIpCsum | kOffloadTxTcpCsum;
    const Outcome ref = run(p, Mode::kOneByOne, csum);
    EXPECT_TRUE(ref.delivered) << p.name();
    const Outcome got = run(p, m, csum);
    EXPECT_EQ(difference(ref, got), "") << p.name() << (m == Mode::kTso ? " (TSO)" : " (TSO, 4 segments a frame)");
    return got;
}

TEST(MarsTxRun, RetransmissionRunsAsTsoFrames)
{
    for (uint32_t count : {3u, 8u, 20u}) {
        for (bool sack : {true, false}) {
            for (bool ts : {true, false}) {
                uint64_t rtx_tso = 0;
                // In the middle (with SACK: recovery; without, NewReno's
                // single retransmissions and, for 20, the timeout), and the
                // last full segments (too few after them for three
                // duplicate ACKs: the timeout's go-back-N).
                // (60000 bytes in one write: every segment full but the last.)
                const int32_t mss = ts ? 1448 : 1460;
                for (int32_t drop : {14480 - 14480 % mss, (60000 / mss - int32_t(count)) * mss})
                    for (Mode m : {Mode::kTso, Mode::kTsoSmall}) {
                        Plan p;
                        p.total = p.chunk = 60000;
                        p.drop_at = drop;
                        p.drop_count = count;
                        p.sack = sack;
                        p.ts = ts;
                        p.ack_every = 1;
                        rtx_tso += check_rtx_tso(p, m).rtx_tso_frames;
                    }
                EXPECT_GT(rtx_tso, 0u) << count << " lost, sack " << sack << " ts " << ts
                                       << ": no retransmission left as a TSO frame";
            }
        }
    }
}

// Two lost pieces with one segment between them that arrived: with SACK,
// recovery's TSO frames stop at the segment the peer has (it is not sent
// again), and the next piece is a frame of its own: still exactly the one by
// one path's segments.
TEST(MarsTxRun, RetransmissionTsoFrameSplitsAtADeliveredSegment)
{
    for (int32_t spare : {1, 3, 6}) {
        for (bool ts : {true, false}) {
            Plan p;
            p.total = 150000;
            p.drop_at = 14480 - 14480 % (ts ? 1448 : 1460);
            p.drop_count = 12;
            p.spare = spare;
            p.ts = ts;
            p.ack_every = 1;
            const Outcome got = check_rtx_tso(p, Mode::kTso);
            EXPECT_GT(got.rtx_tso_frames, 0u) << p.name();
            // The segment that arrived went out once; the ones around it twice.
            const uint32_t mss = ts ? 1448 : 1460;
            std::map<uint32_t, int> sent; // relative sequence number -> transmissions
            for (const auto &f : got.frames) {
                Parsed q;
                parse_frame(f.data(), f.size(), &q);
                if (q.is_tcp && !q.payload.empty()) sent[q.seq - got.base]++;
            }
            const uint32_t at = uint32_t(p.drop_at) + uint32_t(spare) * mss;
            EXPECT_EQ(sent[at], 1) << p.name() << ": the delivered segment was sent again";
            EXPECT_EQ(sent[at - mss], 2) << p.name();
            EXPECT_EQ(sent[at + mss], 2) << p.name();
        }
    }
}

// A TSO port with no large buffer, or one: the rest of a retransmission
// run is segmented here (send_rtx_sw continues the run), the same segments.
TEST(MarsTxRun, RetransmissionTsoWithoutLargeBuffersFallsBack)
{
    const uint32_t csum = kOffloadTxIpCsum | kOffloadTxTcpCsum;
    for (bool sack : {true, false}) {
        Plan p;
        p.total = p.chunk = 60000;
        p.drop_at = (60000 / 1448 - 8) * 1448; // the last full segments: the timeout without SACK
        p.drop_count = 8;
        p.sack = sack;
        p.ack_every = 1;
        const Outcome ref = run(p, Mode::kOneByOne, csum);
        uint64_t rtx_runs = 0;
        for (uint32_t large : {0u, 1u}) {
            const Outcome got = run(p, Mode::kTso, csum, large);
            EXPECT_EQ(difference(ref, got), "") << p.name() << " large buffers " << large;
            if (large == 0) {
                EXPECT_EQ(got.rtx_tso_frames, 0u);
            }
            rtx_runs += got.rtx_run_segments;
        }
        EXPECT_GT(rtx_runs, 0u) << p.name();
    }
}

TEST(MarsTxRun, DsackReportedInTheFirstSegment)
{
    for (uint16_t mss : {1460, 1000, 536})
        for (int round : {0, 1, 3}) {
            Plan p;
            p.total = 80000;
            p.window = 8192; // data waits for the window the duplicate's ACK opens
            p.dsack_round = round;
            p.peer_mss = mss; // 1460: no room for SACK blocks beside a full segment
            check_plan(p);
        }
    // And the D-SACK really went out.
    Plan p;
    p.total = 80000;
    p.window = 8192;
    p.dsack_round = 1;
    p.peer_mss = 1000;
    const Outcome o = run(p, Mode::kRuns, 0);
    EXPECT_GT(o.stats.tcp_dsacks_sent, 0u);
    bool in_data = false;
    for (const auto &f : o.frames) {
        Parsed q;
        parse_frame(f.data(), f.size(), &q);
        in_data |= q.is_tcp && !q.payload.empty() && !q.opts.sack.empty();
    }
    EXPECT_TRUE(in_data) << "the D-SACK went in a data segment";
}

TEST(MarsTxRun, SendRingWraps)
{
    for (uint32_t sndbuf : {4096u, 8192u, 16384u}) {
        for (uint32_t chunk : {1000u, 5000u, 100000u}) {
            Plan p;
            p.total = 100000;
            p.sndbuf = sndbuf;
            p.chunk = chunk;
            check_plan(p);
        }
    }
}

TEST(MarsTxRun, SackBlocksForOutOfOrderData)
{
    for (uint16_t mss : {1460, 1200, 536})
        for (int round : {0, 2}) {
            Plan p;
            p.total = 60000;
            p.ooo_round = round;
            p.peer_mss = mss;
            p.dsack_round = round + 1;
            check_plan(p);
        }
}

// Many random plans: every knob at once.
TEST(MarsTxRun, RandomPlans)
{
    Rng rng(11);
    for (int i = 0; i < 60; i++) {
        Plan p;
        p.total = uint32_t(1 + rng.below(120000));
        p.chunk = uint32_t(1 + rng.below(20000));
        p.window = uint32_t(1024 + rng.below(200000));
        p.sndbuf = 4096u << rng.below(5);
        p.ts = rng.chance(0.5);
        p.sack = rng.chance(0.7);
        p.nodelay = rng.chance(0.5);
        p.cork = rng.chance(0.2);
        p.more = rng.chance(0.2);
        p.fin = rng.chance(0.7);
        p.drop_at = rng.chance(0.4) ? int32_t(rng.below(p.total) / 1448 * 1448) : -1;
        p.dsack_round = rng.chance(0.3) ? int(rng.below(5)) : -1;
        p.ack_every = uint32_t(1 + rng.below(3));
        p.peer_mss = rng.chance(0.5) ? 1460 : uint16_t(536 + rng.below(924));
        p.ooo_round = rng.chance(0.2) ? int(rng.below(4)) : -1;
        check_plan(p);
    }
}

// A port whose large buffers run out: the rest of a run is segmented in
// software (with one buffer, the second TSO frame of a run finds none: the
// first waits in the transmit burst), still the same frames.
TEST(MarsTxRun, TsoWithoutLargeBuffersFallsBack)
{
    Plan p;
    p.total = 300000;
    const uint32_t csum = kOffloadTxIpCsum | kOffloadTxTcpCsum;
    const Outcome ref = run(p, Mode::kOneByOne, csum);
    const Outcome none = run(p, Mode::kTso, csum, 0);
    EXPECT_EQ(difference(ref, none), "");
    EXPECT_EQ(none.stats.tx_tso_frames, 0u);
    EXPECT_GT(none.stats.tx_run_segments, 0u);
    const Outcome one = run(p, Mode::kTso, csum, 1);
    EXPECT_EQ(difference(ref, one), "");
    EXPECT_GT(one.stats.tx_tso_frames, 0u);
    const Outcome plenty = run(p, Mode::kTso, csum);
    EXPECT_LT(plenty.stats.tx_tso_frames * 2, plenty.stats.tx_run_segments) << "each TSO frame carries several segments";
    EXPECT_GT(one.stats.tx_run_segments - 0, one.stats.tx_tso_frames);
}

// Transmit by reference with a port that lets go of frames a round late:
// every byte arrives, none changed under a frame in flight (SimPort checks
// each held payload when it lets go), and acknowledged bytes were really
// held back from the application meanwhile.
TEST(MarsTxRun, ByReferenceHeldFramesKeepTheRing)
{
    for (uint32_t sndbuf : {4096u, 16384u, 65536u})
        for (int32_t drop : {-1, 14480}) {
            Plan p;
            p.total = 200000;
            p.sndbuf = sndbuf;
            p.drop_at = drop;
            const Outcome o = run(p, Mode::kExternalHeld, 0);
            EXPECT_TRUE(o.delivered) << p.name();
            EXPECT_GT(o.stats.tx_ref_frames, 0u) << p.name();
            EXPECT_GT(o.rounds_held, 0u) << p.name() << ": the port held frames, yet the ring was never held back";
        }
}

// A socket closed (and its rings released) while the port still reads its
// send ring: the ring memory goes back to its provider, and the socket slot
// to the free list, only once the port has let go.
TEST(MarsTxRun, ByReferenceCloseWaitsForThePort)
{
    RawPeer::Options o;
    o.stack.tcp.sndbuf = 65536;
    o.stack.max_sockets = 4;
    o.offloads = kOffloadTxExternal; // the stack reads its port's offloads once, at creation
    auto peer = std::make_unique<RawPeer>(o);
    peer->port().enable_external(true);
    RawPeer::Conn c;
    std::string why;
    SockId l = peer->listen(80);
    SockId s = peer->open_passive(l, 80, 40000, &c, RawPeer::full_syn_options(0), &why);
    ASSERT_NE(s, kNoSock) << why;
    Stack &st = peer->stack();
    c.window = 65535;
    const uint32_t rings_before = peer->rings().outstanding();
    std::vector<uint8_t> data(30000, 0x3c);
    ASSERT_EQ(st.send(s, data.data(), data.size()), int64_t(data.size()));
    peer->poll();
    ASSERT_GT(peer->port().external_held(), 0u);
    ASSERT_EQ(st.abort(s), 0);
    st.close(s);
    peer->poll();
    EXPECT_EQ(peer->rings().outstanding(), rings_before) << "the ring went back while the port read it";
    peer->port().release_external();
    peer->poll();
    EXPECT_EQ(peer->rings().outstanding(), rings_before - 1);
    EXPECT_EQ(peer->port().external_changed, 0u);
}

// The stack's packet path allocates nothing (issue 11): eight connections
// sending runs by reference (every one of them listed, in one pass, for the
// port's references), or as TSO frames, the ACKs that clock them out, a
// retransmission timeout and go-back-N's runs (TSO frames with TSO): no
// operator new inside input(), poll() or the application's sends. The
// lists a frame by reference joins are sized when the stack is made.
TEST(MarsTxRun, PacketPathDoesNotAllocate)
{
    constexpr uint32_t kConns = 8, kSegs = 8;
    for (const bool tso : {false, true}) {
        SCOPED_TRACE(tso ? "TSO" : "by reference");
        RawPeer::Options o;
        o.stack.max_sockets = kConns + 1;
        o.stack.tcp.timestamps = false;
        o.offloads = kOffloadTxIpCsum | kOffloadTxTcpCsum | (tso ? kOffloadTxTcpSeg : kOffloadTxExternal);
        auto peer = std::make_unique<RawPeer>(o);
        FramePool large(64, 65535);
        if (tso) peer->port().enable_tso(&large, 65535);
        else peer->port().enable_external(false);
        Stack &st = peer->stack();
        SockId l = peer->listen(80);
        RawPeer::Conn c[kConns];
        SockId s[kConns];
        uint32_t base[kConns];
        TcpOptions syn = RawPeer::full_syn_options(0);
        syn.ts.reset();
        syn.sack_permitted = false; // a loss waits for the timeout: go-back-N
        for (uint32_t i = 0; i < kConns; i++) {
            std::string why;
            s[i] = peer->open_passive(l, 80, uint16_t(40000 + i), &c[i], syn, &why);
            ASSERT_NE(s[i], kNoSock) << why;
            c[i].window = 65535; // scaled by 128: the window never limits
            base[i] = c[i].stack_nxt;
        }
        peer->take();
        peer->set_capture(false); // frames go back to the pool as they leave
        SockInfo si{};
        st.info(s[0], &si);
        const uint32_t mss = si.snd_mss;
        std::vector<uint8_t> data(kSegs * mss, 0x5c);
        g_allocations = 0;
        auto counted = [](auto &&step) {
            g_count_allocations = true;
            step();
            g_count_allocations = false;
        };
        // The peer acknowledges up to `upto` bytes of connection i (built outside the count).
        auto ack = [&](uint32_t i, uint64_t upto) {
            c[i].stack_nxt = base[i] + uint32_t(upto);
            const std::vector<uint8_t> b = build_tcp(peer->seg(c[i], kAck));
            PacketRef f;
            ASSERT_TRUE(peer->pool().get(&f));
            std::memcpy(f.data, b.data(), b.size());
            f.len = uint16_t(b.size());
            f.room = 0;
            f.flags = 0;
            counted([&] { st.input(&f, 1, peer->now); });
        };
        uint64_t written = 0;
        for (int round = 0; round < 6; round++) {
            const bool lost = round == 3; // this round's first transmissions are all lost
            uint64_t rtx_before[kConns];
            for (uint32_t i = 0; i < kConns; i++) {
                st.info(s[i], &si);
                rtx_before[i] = si.total_retransmits;
            }
            const uint64_t start = written;
            counted([&] {
                for (uint32_t i = 0; i < kConns; i++)
                    EXPECT_EQ(st.send(s[i], data.data(), data.size()), int64_t(data.size()));
                st.poll(peer->now); // every connection sends its run in this one pass
            });
            written += data.size();
            // Lost: nothing comes back until the timeout; go-back-N resends
            // in runs (slow start), the peer acknowledging what each fills.
            if (lost) peer->now += 2'000'000'000;
            for (int k = 0; k < 64; k++) {
                counted([&] { st.poll(peer->now); });
                bool done = true;
                for (uint32_t i = 0; i < kConns; i++) {
                    st.info(s[i], &si);
                    if (si.tx_unacked == 0 && si.bytes_out == written) continue;
                    done = false;
                    const uint64_t resent_to = start + (si.total_retransmits - rtx_before[i]) * mss;
                    ack(i, lost ? std::min<uint64_t>(si.bytes_out, resent_to) : si.bytes_out);
                }
                if (done) break;
                peer->now += 1'000'000;
            }
        }
        for (uint32_t i = 0; i < kConns; i++) {
            st.info(s[i], &si);
            EXPECT_EQ(si.tx_unacked, 0u) << "connection " << i;
            EXPECT_EQ(si.bytes_out, written) << "connection " << i;
        }
        const StackStats &stats = st.stats();
        EXPECT_GT(StackAccess::rtx_run_segments(st), 0u) << "no retransmission run";
        if (tso) EXPECT_GT(StackAccess::rtx_tso_frames(st), 0u) << "no retransmission TSO frame";
        else EXPECT_GT(stats.tx_ref_frames, 0u) << "nothing went by reference";
        EXPECT_EQ(g_allocations, 0u) << "the packet path allocated";
        g_allocations = 0;
    }
}

} // namespace
} // namespace mars::sim
