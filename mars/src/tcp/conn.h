// tcp/conn.h: one TCP connection's state (tcp::Conn), in parts that say
// what they are for. The TCP code reaches it as `Sock` (stack_impl.h).
//
//   part            what                                       who reads it
//   Hot (base)      the 4-tuple as frames carry it, state,     every segment: header prediction and
//                   flags, sequence space, the receive ring,   the fast path (rx/fast_path.h) read
//                   WL1, Last.ACK.sent, MSS, index, event      nothing else for in-order data
//                   bits, receive times and counters           (two cache lines, static_asserted)
//   flow            the flow table's node                      a table lookup (Env::sock_of)
//   sender's hot    send ring, transmit refs, ISS/IRS, WL2,    a pure ACK after prediction
//   part            RTT sample, RTO, congestion control        (fast_ack), output
//   identity        gen, used                                  the socket table (StackImpl)
//   sender          recovery point, MSS sizes, RTT estimator,  output, ACK processing
//                   timer state and the three timers
//   rec             SACK scoreboard, out-of-order queue,       the slow path; kFRecBusy in Hot
//                   the D-SACK to report                       says whether either holds anything
//   template        next hop, ARP generation, prebuilt header  every segment sent
//   lst             listener: SYN queue count, accept queue    listeners and their children
//   app             the user side: tag, error, ring memory,    the socket API, events,
//                   buffers and autotuning, options            receive-buffer autotuning
//   count           send counters                              info(), segments out
//   rack_timer,     RACK-TLP and PRR (cold: the slow path      recovery, timers
//   rack            and timers only)
//   v6              IPv6 connections only                      tcp/tcp6.h
//
// The order is the memory order; Conn is 64-byte aligned, so Hot is exactly
// its first two cache lines.
#pragma once

#include "tcp/cc.h"
#include "base/flow_table.h"
#include "base/flow_table6.h"
#include "tcp/ooo.h"
#include "tcp/rack.h"
#include "tcp/sack.h"
#include "base/timer_wheel.h"
#include "base/wire.h"

#include <mars/stack.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace mars {

// Per-socket flag bits.
enum SockFlag : uint32_t {
    kFNoDelay = 1u << 0,
    kFCork = 1u << 1,
    kFKeepAlive = 1u << 2,
    kFReuseAddr = 1u << 3,
    kFReusePort = 1u << 4,
    kFSackOk = 1u << 5,     // both sides agreed on SACK
    kFTsOk = 1u << 6,       // both sides agreed on timestamps
    kFWscaleOk = 1u << 7,   // both sides agreed on window scaling
    kFFinQueued = 1u << 8,  // the application is done sending: FIN after the data
    kFRdShut = 1u << 9,     // shutdown(SHUT_RD)
    kFUserClosed = 1u << 10, // close()/abort() called: the id belongs to the stack
    kFInEvents = 1u << 11,  // queued in the event list
    kFAckNow = 1u << 12,    // send an ACK at the next flush
    kFInRecovery = 1u << 13, // fast recovery (RFC 6582 / RFC 6675)
    kFBound = 1u << 14,     // has a local address from bind()
    kFHasRings = 1u << 15,  // ring memory from the BufferProvider
    kFInFlush = 1u << 16,   // queued in the flush list (output pending)
    kFMore = 1u << 17,      // MSG_MORE, only during the tx_commit that carries it (Linux tcp_push with CORK)
    kFAccepted = 1u << 18,  // taken by accept(), or an active open
    kFDetached = 1u << 19,  // closed by the user and in TIME-WAIT: kEvClosed sent, the id is gone
    kFRtoRecovery = 1u << 20, // retransmitting after a timeout (go-back-N)
    kFFinReceived = 1u << 21,
    kFSynCookie = 1u << 22,  // created from a SYN cookie
    kFDsack = 1u << 23,      // our next ACK reports rec.dsack first (RFC 2883; only with SACK)
    kFTlpOut = 1u << 24,     // a tail loss probe is unanswered (RFC 8985 7.4)
    kFRcvBufLocked = 1u << 25, // SO_RCVBUF set: no receive-buffer autotuning
    kFQuickAck = 1u << 26,   // quick-ACK mode: every data segment ACKed at once (quick_acks left; tcp_data.cc)
    kFTailMore = 1u << 27,   // the last bytes queued came with MSG_MORE: no PSH where they end (Linux)
    kFV6 = 1u << 28,         // an IPv6 socket (Conn::v6): its flow, template and addresses are v6's
    kFV6Only = 1u << 29,     // IPV6_V6ONLY: a listener on :: that takes no IPv4 arrival
    // The SACK scoreboard or the out-of-order queue may hold something
    // (Conn::note_rec): header prediction tests this bit of Hot instead of
    // reading the two. Set where either gains an entry, cleared by the slow
    // path once both are empty; set while both are empty is only slower.
    kFRecBusy = 1u << 30,
};

enum TimerKind : uint32_t { kTimerRtx, kTimerDelack, kTimerAux, kTimerRack };

// Transmit by reference (tx_run.cc): which acknowledged send-ring bytes the
// port may still read. Frames are counted in two epochs. Every frame sent
// after a moment T points at bytes at or past tx_head(T) (snd_una never goes
// back), so when the older epoch has drained, the bytes before the current
// epoch's start (`closed_at`) are free; `released` is the start of the older
// epoch, free already. A frame sent opens a new epoch when the older one has
// drained. refs[] are decremented by the port (PacketIo::attach_external).
struct TxRefs {
    uint32_t refs[2] = {0, 0};
    uint32_t closed_at = 0, released = 0; // tx positions (free-running, as tx_head)
    uint8_t current = 0;
    bool listed = false;   // in StackImpl::tx_ref_socks_
    uint32_t reported = 0; // app_head() when kEvWritable was last raised for it
    bool any() const { return refs[0] | refs[1]; }
    // The position up to which the application may reuse the send ring.
    uint32_t app_head(uint32_t tx_head) const
    {
        if (!any()) return tx_head;
        return refs[current ^ 1] == 0 ? closed_at : released;
    }
    // The counter a frame sent now takes (before it is attached).
    uint32_t *take(uint32_t tx_head)
    {
        if (refs[current ^ 1] == 0) {
            released = any() ? closed_at : tx_head;
            closed_at = tx_head;
            current ^= 1;
        }
        return &refs[current];
    }
};

// IPv6 connections (tcp::V6Part): an IPv4 address no IPv4 segment carries
// (app.local.ip of an IPv6 socket that takes no IPv4), and the template's
// length (Ethernet + IPv6 + TCP).
constexpr uint32_t kNoV4 = 0xffffffffu;
constexpr unsigned kHeaders6Len = wire::kEthLen + 40 + wire::kTcpLen;

namespace tcp {

// The hot part: what the receive fast path (rx/fast_path.h) reads and
// writes of an established connection's in-order data segment, and what
// header prediction compares for a pure ACK -- two cache lines, and nothing
// else of the connection. Conn's first part and 64-byte aligned (so is Conn:
// the blocks are whole lines apart), so these are exactly two lines.
//
//   line 0  the 4-tuple as the peer's frames carry it, state, flags,
//           window scales, the sequence space, TS.Recent, the receive ring
//   line 1  ring positions, WL1, Last.ACK.sent, MSS, the event bits and the
//           socket's index (raise(), want_output()), when the last segment
//           came, the receive counters
//
// The flow table's node (Conn::flow) follows it: a table lookup reads it,
// the express path (the last-flow cache's connection) never does.
struct alignas(64) Hot {
    // The 4-tuple as the peer's frames carry it (network order), for the
    // express path's compare against the last-flow cache without swapping.
    uint32_t wire_rip = 0, wire_ports = 0;
    TcpState state = TcpState::kClosed;
    uint8_t snd_wscale = 0, rcv_wscale = 0;
    uint8_t dupacks = 0;
    uint32_t flags = 0;
    uint32_t rcv_nxt = 0, rcv_adv = 0; // rcv_adv: right edge of the window we advertised
    uint32_t snd_una = 0, snd_nxt = 0, snd_max = 0, snd_wnd = 0;
    uint32_t ts_recent = 0;
    uint32_t segs_unacked = 0; // segments received since our last ACK
    uint8_t *rx = nullptr;
    uint32_t rx_mask = 0, rx_head = 0; // free-running positions
    uint32_t rx_tail = 0;
    uint32_t rx_inflight = 0; // bytes past rx_tail a copy engine is still writing
    uint32_t snd_wl1 = 0;
    uint32_t last_ack_sent = 0; // rcv_nxt in our last ACK (RFC 7323 Last.ACK.sent)
    uint32_t mss = 536;     // what we send per segment (payload, options not included)
    uint32_t index = 0;     // in the socket table (events and the flush list carry it)
    uint32_t ev_bits = 0;   // events raised since the last events() drain (Env::raise)
    uint32_t keep_probes = 0;
    uint64_t last_recv_ns = 0;
    uint64_t ts_recent_ns = 0;
    uint64_t bytes_in = 0, segs_in = 0; // info(): payload bytes and segments received

    uint32_t rx_readable() const { return rx_tail - rx_head; }
    uint32_t rx_free() const { return rx_mask ? rx_mask + 1 - rx_readable() - rx_inflight : 0; }
};

// The layout the fast path was measured with (benchmarks/README.md, "mars:
// the fast path"): a change here moves fields across cache lines; measure
// `tools/eta bench fastpath` before changing these.
static_assert(offsetof(Hot, state) == 8 && offsetof(Hot, flags) == 12 && offsetof(Hot, rcv_nxt) == 16,
              "line 0: the 4-tuple, state, flags, sequence space");
static_assert(offsetof(Hot, snd_una) == 24 && offsetof(Hot, ts_recent) == 40 && offsetof(Hot, rx) == 48 &&
                  offsetof(Hot, rx_head) == 60,
              "line 0: send sequence space, the receive ring");
static_assert(offsetof(Hot, rx_tail) == 64 && offsetof(Hot, mss) == 80 && offsetof(Hot, ev_bits) == 88 &&
                  offsetof(Hot, last_recv_ns) == 96 && offsetof(Hot, segs_in) == 120,
              "line 1: ring positions, ACK state, events, times, counters");
static_assert(sizeof(Hot) == 128 && alignof(Hot) == 64, "the hot part is two cache lines");

// The segments a received payload stands for in the delayed-ACK rule (an
// ACK at least every second full-sized segment, RFC 1122 4.2.3.2, RFC 5681
// 4.2): one, or for an LRO frame (a port's super-frame: one TCP segment
// longer than the MSS, as a GRO'd skb is) the MSS-sized segments it holds,
// so a sender of super-frames is acknowledged as one of segments would be.
inline uint32_t rx_segments(uint32_t len, uint32_t mss)
{
    return len <= mss || mss == 0 ? 1u : (len + mss - 1) / mss;
}


// Loss recovery's warm part (the fast path checks that both are empty).
struct Recovery {
    SackScoreboard sack;
    OooQueue ooo;
    SeqRange dsack{}; // a duplicate we received, for the next ACK's first SACK block (kFDsack)
};

// A listener's queues, and a child's place in them.
struct ListenPart {
    uint32_t parent = UINT32_MAX;      // listener index, for connections not yet accepted
    uint32_t queue_next = UINT32_MAX;  // accept queue link
    uint32_t accept_head = UINT32_MAX, accept_tail = UINT32_MAX;
    uint32_t accept_len = 0, backlog = 0, syn_queue_len = 0;
};

// The application's side: its tag, events, error, ring memory, buffer sizes
// and their autotuning, options.
struct UserSide {
    uint64_t user = 0;
    int error = 0;
    RingMemory mem;
    uint32_t rcv_buf = 0, snd_buf = 0;
    // Receive buffer offered now (<= the ring; the window is what of it is
    // not held by unread bytes) and the out-of-order share that goes with it
    // (rcv_tune.cc): ooo_cap is the most window the share holds in full
    // segments.
    uint32_t rcv_space = 0, ooo_share = 0, ooo_cap = UINT32_MAX;
    // Dynamic right-sizing: bytes the application drained since drs_ns
    // (from position drs_head); the receiver's RTT estimate from how long
    // rcv_nxt takes to reach an advertised edge (rrtt_seq, from rrtt_ns).
    uint64_t drs_ns = 0, rrtt_ns = 0, rrtt_est_ns = 0;
    uint32_t drs_head = 0, rrtt_seq = 0;
    uint32_t rcv_target = 0; // a size the ring must grow to first (0: none)
    uint32_t snd_wanted = 0; // the send ring size last asked for (BufferProvider::want_tx; 0: none)
    uint64_t keep_idle_ns = 0, keep_intvl_ns = 0;
    uint32_t keep_cnt = 0;
    uint64_t user_timeout_ns = 0;
    int32_t linger_sec = -1;
    uint8_t tos = 0;    // IP_TOS: an IPv4 connection's (SockOpt::kTos)
    uint8_t tclass = 0; // IPV6_TCLASS: an IPv6 connection's traffic class (SockOpt::kTclass)
    uint32_t rcv_lowat = 1;
    uint32_t notsent_lowat = UINT32_MAX; // TCP_NOTSENT_LOWAT (SockOpt::kNotsentLowat); UINT32_MAX: none
    Endpoint local, remote;
};

// TCP over IPv6's part of a connection (issue 31; tcp/tcp6.h), cold and
// last: an IPv4 connection never touches it. The IPv6 4-tuple's flow node
// (FlowTable6), the addresses (network order) and the segment template
// (Ethernet + IPv6 + TCP: 74 bytes) that Hot's FlowNode and Conn::hdr are
// for IPv4. A listener on a specific address or IPV6_V6ONLY keeps
// app.local.ip at kNoV4 (it matches no IPv4 segment); a dual-stack one on
// :: at 0 (it takes IPv4 as a wildcard IPv4 listener does).
struct V6Part {
    FlowNode6 flow;
    Ip6Addr local, remote;
    alignas(8) uint8_t hdr[kHeaders6Len] = {};
    // snd_una when hdr's MAC was last checked (Tcp6::next_hop_mac): an ACK
    // beyond it is the connection's progress, RFC 4861 7.3.1's confirmation.
    uint32_t nd_una = 0;
};

// The rest of the per-connection counters (the receive ones are Hot's).
struct Counters {
    uint64_t total_retransmits = 0, bytes_out = 0, segs_out = 0;
};

struct Conn : Hot {
    // ---- the flow table's node (right after Hot: Env::sock_of) -----------
    FlowNode flow;

    // ---- the sender's hot part: what an ACK that advances snd_una reads
    // after prediction (the fast path's pure ACK, output): the send ring,
    // the RTT sample, the retransmission timer's state, congestion control
    uint8_t *tx = nullptr;
    uint32_t tx_mask = 0, tx_head = 0, tx_tail = 0; // tx position of data seq s: s - iss - 1
    TxRefs tx_refs; // frames the port still reads from tx (transmit by reference)
    uint32_t irs = 0, iss = 0;
    uint32_t snd_wl2 = 0, max_snd_wnd = 0;
    uint32_t rtt_seq = 0;
    uint32_t rtx_count = 0;    // consecutive retransmission timeouts / SYN retries
    uint64_t rtt_start_ns = 0; // 0: not timing a segment
    uint64_t rto_ns = 0, min_rtt_ns = 0;
    uint64_t first_rtx_ns = 0; // when the current unanswered retransmissions began
    uint64_t last_send_ns = 0;
    CcVars cc;
    const CcAlgo *cca = nullptr;

    // ---- identity in the socket table (index: Hot's) ---------------------
    uint32_t gen = 0;
    bool used = false;

    // ---- sender: recovery point, sizes, RTT and RTO, timers --------------
    uint32_t recover = 0, high_rxt = 0;
    uint32_t snd_sml = 0; // end of the last small segment sent (Minshall's Nagle)
    uint32_t peer_mss = 536, user_mss = 0, path_mtu = 1500;
    uint64_t srtt_ns = 0, rttvar_ns = 0;
    uint32_t probes = 0;       // keepalive or zero-window probes without answer
    uint32_t quick_acks = 0;   // quick-ACK mode: immediate ACKs left (kFQuickAck; tcp/sender.h)
    uint64_t last_challenge_ns = 0; // throttle: RFC 5961 challenge ACKs, SYN-ACKs resent for a repeated SYN
    Timer rtx_timer, delack_timer, aux_timer;

    Recovery rec;

    // ---- the segment template -------------------------------------------
    uint32_t next_hop = 0;
    uint32_t arp_gen = 0;   // hdr's destination MAC is valid while this matches the stack's
    alignas(8) uint8_t hdr[wire::kHeadersLen] = {}; // prebuilt Ethernet+IPv4+TCP header

    ListenPart lst;
    UserSide app;
    Counters count;

    // ---- loss recovery, cold: the slow path and timers only; last, so the
    // fields the fast path touches keep their cache lines
    Timer rack_timer; // RACK's reordering timer, or the tail loss probe (rack.timer_is_pto)
    RackVars rack;    // RACK-TLP and PRR (rack.h); SACK connections only

    V6Part v6;        // IPv6 connections (kFV6) only

    // To 29 cache lines (an odd count with no cheap shift-and-add form): the
    // table's index-to-block arithmetic is then one multiply. At 26 lines
    // (the size without it) it was three instructions, +2 at every lookup
    // by index (events, the flush list, each API call): +12 per rr
    // transaction (benchmarks/README.md, seventh sitting).
    uint8_t pad_to_29_lines[192];

    Hot &hot() { return *this; }
    const Hot &hot() const { return *this; }
    uint32_t tx_queued() const { return tx_tail - tx_head; }
    // Acknowledged bytes a frame in flight may still point at stay the
    // stack's (TxRefs::app_head).
    uint32_t tx_free() const { return tx_mask ? tx_mask + 1 - (tx_tail - tx_refs.app_head(tx_head)) : 0; }
    uint32_t in_flight() const { return snd_max - snd_una; }
    // kFRecBusy after the scoreboard or the out-of-order queue changed.
    void note_rec()
    {
        if (rec.sack.empty() && rec.ooo.empty()) flags &= ~kFRecBusy;
        else flags |= kFRecBusy;
    }
    // What of the offered buffer unread and in-flight bytes leave (<= rx_free()).
    uint32_t rx_space_free() const
    {
        const uint32_t used_now = rx_readable() + rx_inflight;
        return app.rcv_space > used_now ? app.rcv_space - used_now : 0;
    }
    // Bytes written and never sent (Linux's write_seq - snd_nxt; snd_max
    // here, as our snd_nxt goes back after a timeout). 0 once a FIN went.
    uint32_t tx_unsent() const
    {
        const int32_t d = int32_t(iss + 1 + tx_tail - snd_max);
        return d > 0 ? uint32_t(d) : 0;
    }
    // What the application may write now: the ring's free space, and with
    // TCP_NOTSENT_LOWAT nothing while the unsent bytes are at or above the
    // mark (Linux's tcp_stream_memory_free), else no more than leaves them
    // at the mark once what the windows let go now has gone (Linux sends
    // while it copies: a write of 59000 with IW10 and a mark of 16000 takes
    // 10000 + 16000).
    uint32_t tx_room() const
    {
        const uint32_t free = tx_free();
        if (app.notsent_lowat == UINT32_MAX) return free;
        const uint32_t unsent = tx_unsent();
        if (unsent >= app.notsent_lowat) return 0;
        const uint32_t flight = snd_max - snd_una;
        const uint32_t by_cwnd = cc.cwnd > flight ? cc.cwnd - flight : 0;
        const int32_t by_wnd = int32_t(snd_una + snd_wnd - snd_max);
        const uint32_t usable = std::min(by_cwnd, by_wnd > 0 ? uint32_t(by_wnd) : 0u);
        return uint32_t(std::min<uint64_t>(free, uint64_t(app.notsent_lowat - unsent) + usable));
    }
};

// The parts' sizes as laid out (Conn itself is not standard-layout, so its
// offsets are not asserted; the parts keep the places the loose fields had).
static_assert(sizeof(Recovery) == 192 && sizeof(ListenPart) == 28 && sizeof(UserSide) == 176 &&
                  sizeof(Counters) == 24,
              "the parts' sizes (tools: see tcp/conn.h's table)");

// The named hand-off from the hot part to the rest of its connection (the
// fast path, rx/fast_path.h, reads Hot only and says where it leaves it).
inline Conn &conn_of(Hot &h) { return static_cast<Conn &>(h); }

// Env::sock_of() finds a connection from its flow node by this offset.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(offsetof(Conn, flow) == sizeof(Hot), "the flow node right after Hot");
#pragma GCC diagnostic pop
static_assert(alignof(Conn) == 64 && sizeof(Conn) == 29 * 64, "blocks whole cache lines apart, 29 of them");

} // namespace tcp

using Sock = tcp::Conn;

} // namespace mars
