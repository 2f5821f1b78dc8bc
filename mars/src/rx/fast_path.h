// rx/fast_path.h: the receive fast path (Van Jacobson's header prediction,
// seed 002), on its own. Read this file alone to know what it takes, what
// it reads of a connection, and what it hands on.
//
// What it takes -- a segment of an ESTABLISHED connection that
//   - carries ACK (PSH allowed) and nothing else of SYN, FIN, RST, URG;
//   - is the next in order (seq == rcv_nxt), with no options or exactly
//     NOP NOP TS (and timestamps agreed, TSval not older than TS.Recent);
//   - advertises the window we have, or a smaller one not zero (seg_window
//     below: the SND.WL1 rule checked), while we have nothing unsent behind
//     a retransmission (snd_nxt == snd_max);
//   - finds the connection with rings, not in recovery (fast, timeout or a
//     tail loss probe), not shut for reading, and nothing in its SACK
//     scoreboard or out-of-order queue (kFRecBusy);
// and then is either
//   - data that fits the window we offered and the ring: copied into the
//     receive ring (the checksum summed in the same pass where the NIC did
//     not check it), rcv_nxt advanced, the delayed-ACK rule applied,
//     kEvReadable raised -- and if it also acknowledges new data (snd_una <
//     ack <= snd_max: a request answering our last reply), that ACK taken as
//     a pure one would be, once the checksum holds; or
//   - a pure ACK for new data (snd_una < ack <= snd_max): fast_ack().
// (An ACK below snd_una or above snd_max is the rules'.)
//
// What it reads and writes of the connection: tcp::Hot (tcp/conn.h), two
// cache lines, and nothing else on the data path. The hand-offs, each named
// where it happens:
//   - anything it does not take: returns false, and the caller sends the
//     segment through the TCP rules by state (tcp_in.cc tcp_dispatch, then
//     tcp/input.h) -- which repeat every check and count what they drop;
//   - an ACK of new data: fast_ack_part() takes the sender's hot part of
//     the connection (tcp::Conn after Hot: the send ring, the RTT sample,
//     congestion control, the retransmission timer, RACK's transmission
//     log on a SACK connection);
//   - the first unacknowledged segment: tcp::delay_ack() (the delayed-ACK
//     timer and the quick-ACK policy, tcp/sender.h);
//   - a copy engine (kAsyncCopy): rx_copy() (copy.cc).
// Receive coalescing (rx_coalesce.cc) runs the same prediction (predicts())
// for a group's first frame and the same data rules for the group.
#pragma once

#include "rx/frame_bytes.h"
#include "tcp/sender.h"
#include "tcp/timers.h"

#include <algorithm>
#include <cstring>

namespace mars::rx {

using namespace wire;

// The flags that keep a connection off the fast path; with kFHasRings set
// and none of these, it may take a segment.
constexpr uint32_t kFastPathOff = kFInRecovery | kFRtoRecovery | kFTlpOut | kFRdShut | kFRecBusy;

// Header prediction on the connection's side alone (the frame's layout was
// checked by the caller): state, flags, sequence number, window, nothing
// unsent behind a retransmission, nothing in recovery or held.
// The window: the one we have, or a smaller one that is not zero (a peer
// whose right edge stays while our data fills its buffer: every request of
// a request-response exchange), taken as the slow path would by RFC 9293
// 3.10.7.4's SND.WL1/WL2 rule -- which holds for every segment predicted
// but one whose sequence number is below WL1 (WL2 <= snd_una <= its ACK),
// so WL1 is checked. A window that opens (output may be due, probes end) or
// closes (persist) is the rules'.
__attribute__((always_inline)) inline uint32_t seg_window(const tcp::Hot &h, const Tcp *th)
{
    return uint32_t(be16(th->win)) << h.snd_wscale;
}
__attribute__((always_inline)) inline bool predicted(const tcp::Hot &h, const Tcp *th)
{
    const uint32_t seq = be32(th->seq), win = seg_window(h, th);
    return h.state == TcpState::kEstablished && (th->flags & (kSyn | kFin | kRst | kUrg | kAck)) == kAck &&
           seq == h.rcv_nxt && h.snd_nxt == h.snd_max &&
           (win == h.snd_wnd || (win - 1 < h.snd_wnd && seq_le(h.snd_wl1, seq))) &&
           (h.flags & (kFastPathOff | kFHasRings)) == kFHasRings;
}

// The option layouts the fast path reads (tp: the TCP header, doff its data
// offset, inside the segment): none, or exactly NOP NOP TS.
__attribute__((always_inline)) inline bool fast_options(const uint8_t *tp, unsigned doff)
{
    return doff == kTcpLen || (doff == kTcpLen + 12 && load32(tp + kTcpLen) == be32(kTsPrefixBe));
}

// Every check the demux would make on a frame of connection h, done on the
// frame's bytes as loaded, then header prediction proper.
__attribute__((always_inline)) inline bool Receiver::predicts(const PacketRef &f, const tcp::Hot &h,
                                                             unsigned *doff_out, unsigned *len_out) const
{
    const uint8_t *d = f.data;
    if (f.len < kHeadersLen) return false;
    if (load32(d) != wire_mac_lo_ || load16(d + 4) != wire_mac_hi_ ||
        (load32(d + 12) & kWireIpv4Mask) != kWireIpv4NoOptions)
        return false;
    const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(d + kEthLen);
    const unsigned total = be16(ip->total_len);
    const Tcp *th = reinterpret_cast<const Tcp *>(d + kEthLen + kIpLen);
    if (ip->dst != wire_ip_ || ip->src != h.wire_rip || load32(th) != h.wire_ports ||
        total + kEthLen > f.len || total < kIpLen + kTcpLen || (ip->frag & kWireFragMask) ||
        (load16(&ip->ttl) & 0xff00) != kWireProtoTcp || ip->ttl == 0)
        return false;
    const unsigned doff = (th->doff >> 4) * 4u;
    const unsigned len = total - kIpLen;
    // The data offset must lie inside the segment before the options are read.
    if (doff > len || (doff != kTcpLen && (doff != kTcpLen + 12 || load32(th + 1) != kWireTsPrefix))) return false;
    if (!(f.flags & kRxIpCsumGood) && !csum_ok(csum_add(0, ip, kIpLen))) return false;
    if (!predicted(h, th)) return false;
    *doff_out = doff;
    *len_out = len;
    return true;
}

// The delayed-ACK rule for segs in-order segments just taken (at least
// every second segment, RFC 5681 4.2; the ACK leaves at the end of the
// burst). Fewer than two unacknowledged means none were before these: our
// last ACK cancelled the delayed-ACK timer (send_segment, run_sent) and only
// delay_ack() arms it, with one segment unacknowledged -- so it is not
// armed, and the timer is not read here.
__attribute__((always_inline)) inline void fast_ack_rule(tcp::Env &e, tcp::Hot &h, uint32_t segs)
{
    h.segs_unacked += segs;
    if (h.segs_unacked >= 2) {
        if (!(h.flags & kFAckNow)) tcp::ack_now(e, h);
    } else {
        tcp::delay_ack(e, tcp::conn_of(h)); // hand-off: the timer, or quick mode again after idle
    }
}

// A coalesced group's commit to its connection (rx_coalesce.cc input_run,
// rx_coalesce6.cc input_run6; the members' frames already released): what
// one by one would have left. bytes in `taken` segments, the window and the
// last member's sequence number read before the frames went back; tsval the
// first member's. RFC 7323 4.3: TS.Recent from a segment at or below
// Last.ACK.sent, as one by one. last_ack_sent is always an rcv_nxt we
// acknowledged (send_segment, run_sent), so it is at most rcv_nxt and of a
// group only the first member (seq == rcv_nxt) can be such a one. The
// delayed-ACK rule counts segments (at least every second one, RFC 5681
// 4.2; the ACK leaves at the end of the burst), LRO frames as the MSS
// segments they hold: for the group as a whole (its bytes in MSS segments
// where that is more than its frames), so the copy loop pays nothing per
// frame for it.
__attribute__((always_inline)) inline void commit_group(tcp::Env &e, tcp::Hot &s, uint32_t bytes, uint16_t taken,
                                                        uint32_t win, uint32_t last_seq, bool ts, uint32_t tsval)
{
    if (ts && seq_le(s.rcv_nxt, s.last_ack_sent)) {
        s.ts_recent = tsval;
        s.ts_recent_ns = e.now_ns_;
    }
    s.snd_wl1 = last_seq;
    s.snd_wnd = win;
    s.rx_tail += bytes;
    s.rcv_nxt += bytes;
    s.bytes_in += bytes;
    s.segs_in += taken;
    s.last_recv_ns = e.now_ns_;
    fast_ack_rule(e, s, bytes > taken * s.mss ? tcp::rx_segments(bytes, s.mss) : uint32_t(taken));
    e.raise(s, kEvReadable);
    if (taken >= 2) {
        e.stats_.rx_coalesce_groups++;
        e.stats_.rx_coalesce_segments += taken;
    }
}

// The sender's side of an ACK for new data (ack in (snd_una, snd_max], the
// prediction held: no SACK blocks to score, not in recovery, the window
// not opened, established so no FIN of ours to acknowledge): the send ring
// advances, an RTT sample, congestion control, the retransmission timer,
// kEvWritable, output if more is queued. The sender's hot part of the
// connection (tcp::Conn after Hot). For a pure ACK and for data that
// acknowledges new data alike (a request answering our last reply).
__attribute__((always_inline)) inline void Receiver::fast_ack_part(Sock &s, uint32_t ack)
{
    const uint32_t acked = ack - s.snd_una;
    const uint32_t in_flight = s.snd_max - s.snd_una;
    s.tx_head += acked;
    s.snd_una = ack;
    s.snd_wl2 = ack; // with WL1 (the caller's): the window taken by the SND.WL1/WL2 rule
    uint64_t rtt = 0;
    if (s.rtt_start_ns && seq_ge(ack, s.rtt_seq)) {
        rtt = env().now_ns_ - s.rtt_start_ns;
        s.rtt_start_ns = 0;
        tcp::rtt_sample(env(), s, rtt);
    }
    s.cca->on_ack(s.cc, acked, in_flight, rtt, s.min_rtt_ns, env().now_ns_);
    s.dupacks = 0;
    s.rtx_count = 0;
    if (s.snd_una == s.snd_max) {
        TimerWheel::cancel(&s.rtx_timer);
        s.first_rtx_ns = 0;
    } else {
        s.first_rtx_ns = env().now_ns_;
        env().wheel_.arm(&s.rtx_timer, env().now_ns_ + s.rto_ns);
    }
    // RACK's transmission log drops what this ACK delivered, as the slow
    // path's rack_on_ack() does (left, the log of a sender whose ACKs came
    // this way grew until a loss, and recovery paid for it: rtx-instructions
    // +88). RACK's reference transmission is left to the next ACK with SACK
    // blocks, which always takes the rules (kFRecBusy): an in-order ACK
    // without them detects no loss (not in recovery, no tail probe out).
    if (s.flags & kFSackOk) s.rack.log.prune(ack);
    env().raise(s, kEvWritable);
    if (s.tx_tail != s.snd_nxt - s.iss - 1) env().want_output(s);
}

// A pure ACK for new data (the prediction held). False: the slow path's.
__attribute__((always_inline)) inline bool Receiver::fast_ack(Sock &s, PacketRef &f, const Tcp *th, unsigned doff,
                                                              uint32_t tsval, uint32_t src_ip)
{
    const uint32_t ack = be32(th->ack);
    if (!seq_gt(ack, s.snd_una) || seq_gt(ack, s.snd_max)) return false;
    if (!(f.flags & kRxL4CsumGood) &&
        !csum_ok(csum_add(pseudo_sum(src_ip, env().cfg_.ip, kProtoTcp, uint16_t(doff)), th, doff)))
        return false;
    fast_ack_part(s, ack);
    s.snd_wl1 = be32(th->seq);
    s.snd_wnd = seg_window(s, th);
    if (doff != kTcpLen && seq_le(be32(th->seq), s.last_ack_sent)) {
        s.ts_recent = tsval;
        s.ts_recent_ns = env().now_ns_;
    }
    s.segs_in++;
    s.last_recv_ns = env().now_ns_;
    release_rx(f);
    return true;
}

// The prediction held (predicts(), or tcp_input's own checks). Returns
// false to send the segment on through the full rules; true once the frame
// is consumed (queued, or dropped for a bad checksum).
template <bool kAsyncCopy>
__attribute__((always_inline)) inline bool Receiver::tcp_fast_path(tcp::Hot &h, PacketRef &f, const Tcp *th,
                                                                   unsigned doff, const uint8_t *payload,
                                                                   uint32_t len, uint32_t src_ip)
{
    uint32_t tsval = 0;
    if (doff != kTcpLen) {
        if (!(h.flags & kFTsOk)) return false;
        tsval = be32(load32(reinterpret_cast<const uint8_t *>(th) + kTcpLen + 4));
        if (seq_lt(tsval, h.ts_recent)) return false; // PAWS: the slow path decides
    }
    if (len == 0) return fast_ack(tcp::conn_of(h), f, th, doff, tsval, src_ip); // hand-off: the sender's part
    const bool csum_done = f.flags & kRxL4CsumGood;
    // In-order data that fits, acknowledging nothing new or new data (whose
    // ACK is taken once the checksum holds).
    if (len > h.rcv_adv - h.rcv_nxt) return false;
    const uint32_t ack = be32(th->ack);
    const bool acks_new = ack != h.snd_una;
    if (acks_new && (!seq_gt(ack, h.snd_una) || seq_gt(ack, h.snd_max))) return false;
    bool deferred = false;
    if constexpr (kAsyncCopy) {
        // Through the copy engine (copy.cc): the checksum, where the NIC did
        // not verify it, is checked before any byte can be delivered; the
        // bytes become visible when the copy completes, after those of
        // earlier deliveries.
        if (len > h.rx_free()) return false;
        if (!csum_done &&
            !csum_ok(csum_add(pseudo_sum(src_ip, env().cfg_.ip, kProtoTcp, uint16_t(doff + len)), th, doff + len))) {
            env().stats_.drop_tcp_csum++;
            env().release(f);
            return true;
        }
        deferred = rx_copy(tcp::conn_of(h), f, payload, len); // hand-off: the copy engine
        if (!deferred) {
            const uint32_t off = h.rx_tail & h.rx_mask;
            const uint32_t first = std::min(len, h.rx_mask + 1 - off);
            std::memcpy(h.rx + off, payload, first);
            if (len > first) std::memcpy(h.rx, payload + first, len - first);
        }
    } else {
        // (the prediction checked kFHasRings: rx_free() without its test; no
        // copies are in flight on this path)
        if (len > h.rx_mask + 1 - h.rx_readable()) return false;
        const uint32_t off = h.rx_tail & h.rx_mask;
        const uint32_t first = std::min(len, h.rx_mask + 1 - off);
        if (csum_done) {
            std::memcpy(h.rx + off, payload, first);
            if (len > first) std::memcpy(h.rx, payload + first, len - first);
        } else {
            // Copy into free ring space and sum in the same pass; the bytes only
            // become readable (rx_tail) once the checksum holds.
            uint32_t c = csum_add(pseudo_sum(src_ip, env().cfg_.ip, kProtoTcp, uint16_t(doff + len)), th, doff);
            c = csum_combine(c, csum_copy(h.rx + off, payload, first, 0), 0);
            if (len > first) c = csum_combine(c, csum_copy(h.rx, payload + first, len - first, 0), first);
            if (!csum_ok(c)) {
                env().stats_.drop_tcp_csum++;
                env().release(f);
                return true;
            }
        }
    }
    if (acks_new) fast_ack_part(tcp::conn_of(h), ack); // hand-off: the sender's part
    h.snd_wl1 = h.rcv_nxt;
    h.snd_wnd = seg_window(h, th);
    if (!deferred) h.rx_tail += len;
    h.rcv_nxt += len;
    h.bytes_in += len;
    h.segs_in++;
    h.last_recv_ns = env().now_ns_;
    if (doff != kTcpLen && seq_le(be32(th->seq), h.last_ack_sent)) {
        h.ts_recent = tsval;
        h.ts_recent_ns = env().now_ns_;
    }
    fast_ack_rule(env(), h, tcp::rx_segments(len, h.mss)); // an LRO frame: the segments it holds
    if (deferred) return true; // readable and released at completion
    env().raise(h, kEvReadable);
    release_rx(f);
    return true;
}

} // namespace mars::rx
