// tcp_data.cc: received data and FIN in the synchronized states: in-order
// delivery into the receive ring, out-of-order segments held as frames
// (ooo.h) and the D-SACK reports, the FIN transitions (CLOSE-WAIT,
// CLOSING, TIME-WAIT), and segments for a connection in TIME-WAIT (RFC 6191
// reuse).
#include "tcp/input.h"
#include "tcp/sender.h"
#include "tcp/timers.h"
#include "tcp/recovery.h"
#include "tcp/rcv_tune.h"
#include "tcp/tcp_rules.h"

#include <algorithm>
#include <cstring>

namespace mars::tcp {

using namespace wire;

uint32_t deliver(Env &, Sock &s, const uint8_t *p, uint32_t n)
{
    const uint32_t off = s.rx_tail & s.rx_mask;
    const uint32_t first = std::min(n, s.rx_mask + 1 - off);
    std::memcpy(s.rx + off, p, first);
    std::memcpy(s.rx, p + first, n - first);
    s.rx_tail += n;
    s.bytes_in += n;
    return n;
}

void tcp_data(Env &e, Sock &s, PacketRef *frame, uint32_t seq, uint8_t *payload, uint32_t len, bool fin, bool *held)
{
    if (seq == s.rcv_nxt) {
        bool got_fin = fin;
        if (len) {
            deliver(e, s, payload, len);
            s.rcv_nxt += len;
        }
        if (!s.rec.ooo.empty()) {
            bool ooo_fin = false;
            s.rcv_nxt = s.rec.ooo.drain(e.ooo_pool_, e.io_, s.rcv_nxt, &ooo_fin,
                                    [&](const uint8_t *p, uint32_t n) { deliver(e, s, p, n); });
            e.stats_.ooo_frames_used = e.ooo_pool_.used();
            got_fin = got_fin || ooo_fin;
            ack_now(e, s); // a gap filled: ACK at once (RFC 5681 4.2)
            s.note_rec();  // emptied, perhaps: header prediction may take it again
        }
        if (len) e.raise(s, kEvReadable);
        if (got_fin) {
            tcp_fin(e, s);
        } else if (len) {
            // Every second segment (RFC 5681 4.2; an LRO frame counts as the
            // segments it holds); the first at once in quick mode
            // (tcp/sender.h), else the timer.
            s.segs_unacked += rx_segments(len, s.mss);
            if (s.segs_unacked >= 2) ack_now(e, s);
            else if (!TimerWheel::armed(&s.delack_timer)) delay_ack(e, s);
        }
        return;
    }
    // Out of order: keep the frame itself in the anonymous pool.
    if (len) {
        // The ACK of a burst goes out at its end and its first SACK block
        // is the run of the last arrival (RFC 2018 4). An arrival that
        // starts another run first sends the ACK that reports the run the
        // previous one extended, so no run goes unreported: a run the sender
        // learns of only after higher ones looks reordered to it (Linux then
        // raises its reordering estimate and RACK window), and one it never
        // learns of it retransmits although we hold it.
        if ((s.flags & kFAckNow) && (s.flags & kFSackOk) && !s.rec.ooo.empty() && !s.rec.ooo.extends_latest_run(seq))
            send_ack(e, s);
        const uint32_t share = s.app.ooo_share; // grows with the buffer (rcv_tune.cc)
        switch (s.rec.ooo.insert(e.ooo_pool_, e.io_, seq, payload, len, fin, *frame, share)) {
        case OooQueue::Insert::kQueued:
            *held = true;
            e.stats_.tcp_ooo_segments++;
            break;
        case OooQueue::Insert::kDuplicate:
            if (s.flags & kFSackOk) note_dsack(e, s, seq, seq + len); // all of it was queued already
            break;
        case OooQueue::Insert::kNoRoom:
            e.stats_.drop_tcp_ooo_full++;
            break;
        }
        e.stats_.ooo_frames_used = e.ooo_pool_.used();
        s.note_rec(); // header prediction hands the connection on while it holds frames
    }
    ack_now(e, s); // duplicate ACK with SACK blocks: the sender learns of the hole
}

void tcp_fin(Env &e, Sock &s)
{
    s.rcv_nxt++;
    s.flags |= kFFinReceived;
    e.raise(s, kEvPeerClosed | kEvReadable);
    ack_now(e, s);
    switch (s.state) {
    case TcpState::kEstablished:
        s.state = TcpState::kCloseWait;
        break;
    case TcpState::kFinWait1: {
        // Has our FIN been acked by this very segment? tcp_ack moved us on if so.
        s.state = TcpState::kClosing;
        break;
    }
    case TcpState::kFinWait2:
        enter_time_wait(e, s);
        break;
    default:
        break;
    }
}

void time_wait_input(Env &e, Sock &s, const TcpSegment &seg, bool *reopen)
{
    const uint8_t flags = seg.flags;
    const uint32_t seq = seg.seq;
    const TcpOptions &opt = seg.opt;
    if (flags & kRst) {
        if (seq == s.rcv_nxt) e.conn_closed(s);
        else e.stats_.drop_tcp_bad_state++;
        if (s.used && s.state == TcpState::kClosed && !(s.flags & kFUserClosed)) s.app.error = 0;
        return;
    }
    if (flags & kSyn) {
        // RFC 6191: a newer timestamp, or without timestamps a higher ISN,
        // lets the SYN reopen the connection.
        const bool newer = ((s.flags & kFTsOk) && opt.has_ts) ? seq_gt(opt.tsval, s.ts_recent) : seq_gt(seq, s.rcv_nxt);
        const bool listened = (s.flags & kFV6)
                                  ? e.find_listener6(s.v6.local, s.app.local.port, s.v6.remote, s.app.remote.port)
                                  : e.find_listener(e.cfg_.ip, s.app.local.port, s.app.remote.ip, s.app.remote.port);
        if (newer && listened) {
            // Frees a closed socket; one the application still holds stays,
            // unlinked, in CLOSED.
            e.conn_closed(s);
            *reopen = true;
            return;
        }
        e.stats_.drop_tcp_bad_state++;
        ack_now(e, s);
        return;
    }
    if ((s.flags & kFTsOk) && opt.has_ts && paws_old(opt.tsval, s.ts_recent)) {
        e.stats_.drop_tcp_paws++;
        ack_now(e, s);
        return;
    }
    if (flags & kFin) {
        // The peer did not hear our last ACK: ACK again, restart 2MSL.
        ack_now(e, s);
        e.wheel_.arm(&s.aux_timer, e.now_ns_ + e.cfg_.tcp.time_wait_ns);
        return;
    }
    e.stats_.drop_tcp_bad_state++;
}

} // namespace mars::tcp
