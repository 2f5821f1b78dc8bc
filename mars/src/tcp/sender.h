// tcp/sender.h: the sender of one connection. Segment building from the
// prebuilt header template and the send ring (fused copy+checksum, or NIC
// offload), the sending policy (congestion and peer windows, Nagle, cork,
// sender SWS avoidance, SACK recovery's next segments), runs of full
// segments and TSO frames (new data and retransmissions), the window we
// advertise, D-SACK blocks, RST replies. Defined in tcp_out.cc and tx_run.cc.
//
// May call: the Env (transmit through link_/ip_, the clock, timers, events,
// want_output), loss recovery (tcp/recovery.h: what it sent), the timers
// (tcp/timers.h: arm the retransmission timer), receive autotuning for the
// window (tcp/rcv_tune.h). Never the socket table.
#pragma once

#include "tcp/env.h"
#include "tcp/tcp_segment.h"

#include <cstdint>

namespace mars::tcp {

// A run of n full new segments from snd_nxt built in one pass (tx_run.cc):
// at most kRunMax of them.
constexpr uint32_t kRunMax = 64;

// ---- tcp_out.cc: the connection's sizes, template and window --------------
void conn_init(Env &e, Sock &s);
void update_mss(Env &e, Sock &s);
void build_template(Env &e, Sock &s);
uint32_t rcv_window(const Env &e, const Sock &s);
uint16_t window_to_advertise(Env &e, Sock &s);
void ack_now(Env &e, Hot &s); // (Hot only: the fast path calls it)
// Quick-ACK mode (mars/README.md "Quick ACKs"): at the start of a connection
// and after it was idle, every data segment is ACKed at once, up to
// kQuickAcksMax of them (Linux's TCP_MAX_QUICKACKS), fewer when the receive
// window holds fewer than twice as many segments; then the delayed-ACK rule.
constexpr uint32_t kQuickAcksMax = 16;
void enter_quickack(Env &e, Sock &s);
// A segment ACKed at once in quick mode (entered anew after idle).
void quick_ack(Env &e, Sock &s);
// The first unacknowledged in-order data segment, when the delayed-ACK
// timer is not armed: in quick mode, or after an idle time (nothing sent for
// longer than the RTO), ACKed now; else the timer. (Two segments are ACKed
// at once by the caller: RFC 5681 4.2.)
__attribute__((always_inline)) inline void delay_ack(Env &e, Sock &s)
{
    if (__builtin_expect((s.flags & kFQuickAck) || e.now_ns_ - s.last_send_ns > s.rto_ns, 0)) {
        quick_ack(e, s);
        return;
    }
    e.wheel_.arm(&s.delack_timer, e.now_ns_ + e.cfg_.tcp.delack_ns);
}
// What send_segment() of the next connection to flush reads first.
void prefetch_output(Env &e, const Sock &s);

// ---- tcp_out.cc: output ------------------------------------------------------
// Sends what the windows and the sending policy allow now.
void tcp_output(Env &e, Sock &s);
bool send_segment(Env &e, Sock &s, uint32_t seq, uint32_t len, uint8_t flags, bool rtx);
void new_data_sent(Env &e, Sock &s, uint32_t len, bool fin, uint32_t data_end);
void send_raw(Env &e, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, uint32_t seq, uint32_t ack,
              uint8_t flags, uint16_t win, const uint8_t *opts, unsigned opt_len);
void send_rst_reply(Env &e, const TcpSegment &seg);
// A segment outside any template to the sender of seg (its family: seg.src6
// set is IPv6), from the address it was sent to.
void send_raw_reply(Env &e, const TcpSegment &seg, uint32_t seq, uint32_t ack, uint8_t flags, uint16_t win,
                    const uint8_t *opts, unsigned opt_len);
// ... to a connection's peer, from its address (IPv4, or IPv6 for kFV6).
void send_raw_conn(Env &e, const Sock &s, uint32_t seq, uint32_t ack, uint8_t flags, uint16_t win,
                   const uint8_t *opts, unsigned opt_len);
// The IP header's bytes for a connection's family: 40 (IPv4 + TCP) or 60.
inline uint32_t net_headers(const Sock &s) { return (s.flags & kFV6) ? 60u : 40u; }
// A pure ACK carries the highest sequence number sent (RFC 9293's SND.NXT;
// our snd_nxt goes back after a timeout, and an older sequence number
// would make the peer drop the ACK as unacceptable).
inline void send_ack(Env &e, Sock &s) { send_segment(e, s, s.snd_max, 0, wire::kAck, false); }
// PSH on the segment that ends the queued data (RFC 1122 4.2.2.2: advisory),
// except when those bytes were written with MSG_MORE (Linux sets none there).
inline uint8_t push_flag(const Sock &s, bool ends_data)
{
    return ends_data && !(s.flags & kFTailMore) ? wire::kPsh : 0;
}
// Remembers a duplicate [start, end) for the next ACK's D-SACK block.
// One is pending at a time: an earlier one still waiting goes out first
// in its own ACK, so every duplicate of a burst is reported (a sender
// undoes a spurious retransmission only on its D-SACK, RFC 2883).
inline void note_dsack(Env &e, Sock &s, uint32_t start, uint32_t end)
{
    if (s.flags & kFDsack) send_ack(e, s);
    s.rec.dsack = SeqRange{start, end};
    s.flags |= kFDsack;
}

// The window opened (from `before`, rx_consume) by two segments or half the
// buffer: tell the peer now.
void window_update(Env &e, Sock &s, uint32_t before);
// An explicit push (TCP_NODELAY set): what TCP_CORK held back goes out now.
void push_pending(Env &e, Sock &s);

// ---- tx_run.cc: transmit in runs -------------------------------------------
// n full new segments from snd_nxt; returns how many went out.
uint32_t send_run(Env &e, Sock &s, uint32_t n, uint8_t last_flags);
// (The pieces of a run, run_header/run_fill/send_tso/..., are templates on
// the family, kV6, local to tx_run.cc.) The bookkeeping once per run:
void run_sent(Env &e, Sock &s, uint32_t seq, uint32_t sent);
bool rtx_log_room(Env &e, Sock &s, uint32_t i, bool log_room);
void rtx_run_sent(Env &e, Sock &s, uint32_t sent);
// How many full segments from seq a retransmission run may take (0: send
// one by one): runs on, no D-SACK waiting, the template's MAC current.
uint32_t rtx_run_len(const Env &e, const Sock &s, uint32_t seq, uint32_t end, uint32_t budget);
// A run of n full segments from seq that were sent before (SACK
// recovery's lost bytes, go-back-N after a timeout), built in one pass
// as send_run_sw() builds new data, with send_segment(rtx)'s bookkeeping
// per segment. log_room: recovery's rule that each retransmission finds
// room in RACK's log first (checked before every segment but the first,
// which the caller checked). Returns how many went out.
// Where the port offers TSO, the run leaves as TSO frames (the segments
// the port cuts from them are those one by one would send).
uint32_t send_rtx_run(Env &e, Sock &s, uint32_t seq, uint32_t n, uint8_t last_flags, bool log_room);

} // namespace mars::tcp
