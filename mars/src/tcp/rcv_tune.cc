// Receive-buffer autotuning: the buffer a connection offers grows with what
// the application drains per round trip (dynamic right-sizing, the idea of
// Fisk and Feng's DRS that Linux's tcp_rcv_space_adjust also follows), up
// to tcp.rcvbuf_max; the out-of-order share grows with it, and the ring
// grows through the BufferProvider when the offered buffer outgrows it.
//
// Nothing here runs per segment: the tuning step runs when the application
// releases bytes (rx_consume), at most once per round trip.
#include "tcp/rcv_tune.h"
#include "tcp/sender.h"

#include <algorithm>

namespace mars::tcp {

using namespace wire;

uint32_t rcv_buf_limit(const Env &e, const Sock &s)
{
    return autotune(e, s) ? std::max(s.app.rcv_buf, e.cfg_.tcp.rcvbuf_max) : s.app.rcv_buf;
}

// The out-of-order share follows the buffer: a sender may fill the whole
// window behind one hole, so the share must hold the window in full
// segments, and the window never exceeds what the share holds (when the
// share reaches the whole pool, the pool caps the window).
void ooo_share_for(Env &e, Sock &s)
{
    const uint32_t base = e.cfg_.ooo_frames_per_conn;
    if (base == 0) { // no queue: nothing to protect
        s.app.ooo_share = 0;
        s.app.ooo_cap = UINT32_MAX;
        return;
    }
    // Until the buffer has grown past where it started (by autotuning, or
    // to a larger SO_RCVBUF), the configured share is the share (and caps
    // the window), exactly as without autotuning.
    const bool may_grow = autotune(e, s) || (s.flags & kFRcvBufLocked);
    if (!may_grow || s.app.rcv_space <= e.cfg_.tcp.rcvbuf) {
        s.app.ooo_share = base;
        s.app.ooo_cap = e.ooo_window_cap_;
        return;
    }
    const uint64_t need = (uint64_t(s.app.rcv_space) + e.ooo_seg_bytes_ - 1) / e.ooo_seg_bytes_;
    const uint64_t share = std::min<uint64_t>(std::max<uint64_t>(base, need), e.cfg_.ooo_pool_frames);
    s.app.ooo_share = uint32_t(share);
    s.app.ooo_cap = uint32_t(std::min<uint64_t>(share * e.ooo_seg_bytes_, UINT32_MAX));
}

void rcv_space_init(Env &e, Sock &s)
{
    const uint32_t ring = s.rx_mask + 1;
    // Without autotuning and SO_RCVBUF the window is the ring, as it always was.
    s.app.rcv_space = (autotune(e, s) || (s.flags & kFRcvBufLocked)) ? std::min(s.app.rcv_buf, ring) : ring;
    s.app.rcv_target = 0;
    s.app.drs_ns = e.now_ns_;
    s.app.drs_head = s.rx_head;
    s.app.rrtt_ns = 0;
    s.app.rrtt_est_ns = 0;
    ooo_share_for(e, s);
    // SO_RCVBUF set before the connection existed: the new ring is empty,
    // so it grows to hold the buffer at once (before any byte or window).
    if ((s.flags & kFRcvBufLocked) && s.app.rcv_buf > ring) {
        s.app.rcv_target = s.app.rcv_buf;
        rx_ring_grow(e, s);
    }
}

void rcv_buf_fix(Env &e, Sock &s, uint32_t bytes)
{
    s.flags |= kFRcvBufLocked;
    s.app.rcv_buf = bytes;
    s.app.rcv_target = 0; // autotuning's wish, if any, is void
    if (!(s.flags & kFHasRings)) return; // the rings will be sized when they come (rcv_space_init)
    // A smaller buffer takes effect at once (the right edge already
    // advertised never moves left: window_to_advertise keeps it); a larger
    // one only once the ring holds it, so no window is offered that the
    // ring could not take.
    s.app.rcv_space = std::min(s.app.rcv_buf, s.rx_mask + 1);
    ooo_share_for(e, s);
    if (s.app.rcv_buf > s.rx_mask + 1) {
        s.app.rcv_target = s.app.rcv_buf;
        rx_ring_grow(e, s); // now if the ring is empty, else at the release that empties it (rcv_tune)
    }
}

void rcv_set_space(Env &e, Sock &s, uint32_t bytes)
{
    if (bytes <= s.app.rcv_space) return;
    s.app.rcv_space = bytes;
    ooo_share_for(e, s);
    e.stats_.tcp_rcvbuf_grows++;
}

// The ring grows only while it holds nothing unread and no copy is writing
// into it: no byte the application has not taken moves. Positions run on,
// so the next byte lands at rx_tail & the new mask.
bool rx_ring_grow(Env &e, Sock &s)
{
    if (!s.app.rcv_target || !(s.flags & kFHasRings)) return false;
    if (s.rx_readable() || s.rx_inflight) return false; // later: the next release that empties it
    const uint32_t want = s.app.rcv_target;
    s.app.rcv_target = 0;
    RingMemory m = s.app.mem;
    if (!e.buffers_.grow_rx(s.app.user, &m, want)) return false;
    if (!m.rx || (m.rx_size & (m.rx_size - 1)) || m.rx_size <= s.rx_mask + 1 || m.tx != s.app.mem.tx ||
        m.tx_size != s.app.mem.tx_size) {
        // A provider breaking the contract: keep the old ring. It has to
        // take the memory back itself; we go on with what we had.
        return false;
    }
    s.app.mem = m;
    s.rx = m.rx;
    s.rx_mask = m.rx_size - 1;
    e.stats_.tcp_rx_ring_grows++;
    if (s.flags & kFRcvBufLocked) { // SO_RCVBUF's size, not autotuning's
        s.app.rcv_space = std::min(s.app.rcv_buf, m.rx_size);
        ooo_share_for(e, s);
    } else {
        rcv_set_space(e, s, std::min(want, m.rx_size));
    }
    return true;
}

// One DRS step, from rx_consume(). The receiver's RTT: how long rcv_nxt
// takes to pass the right edge we had advertised when timing started (an
// upper bound: exact while the sender is window-limited, which is when the
// buffer matters), filtered towards its minimum; our own SRTT when smaller.
// Once per RTT: if the application drained more than half the buffer in
// it, the buffer becomes twice what was drained (capped by rcvbuf_max),
// so a reader that keeps up lets the window run ahead of the sender while
// a slow reader, which drains less than the window per RTT, keeps it.
void rcv_tune(Env &e, Sock &s)
{
    if (s.app.rcv_target) rx_ring_grow(e, s); // a growth waiting for the ring to empty
    if (!autotune(e, s) || !(s.flags & kFHasRings)) return;
    const uint64_t now = e.now_ns_;
    if (s.app.rrtt_ns == 0) {
        if (seq_gt(s.rcv_adv, s.rcv_nxt)) {
            s.app.rrtt_seq = s.rcv_adv;
            s.app.rrtt_ns = now;
        }
    } else if (seq_ge(s.rcv_nxt, s.app.rrtt_seq)) {
        const uint64_t sample = std::max<uint64_t>(now - s.app.rrtt_ns, 1000);
        s.app.rrtt_est_ns = (s.app.rrtt_est_ns == 0 || sample < s.app.rrtt_est_ns) ? sample
                                                                         : s.app.rrtt_est_ns + (sample - s.app.rrtt_est_ns) / 8;
        s.app.rrtt_ns = 0;
    }
    uint64_t rtt = s.app.rrtt_est_ns;
    if (s.srtt_ns && (rtt == 0 || s.srtt_ns < rtt)) rtt = s.srtt_ns;
    if (rtt == 0 || now - s.app.drs_ns < rtt) return;
    const uint32_t drained = s.rx_head - s.app.drs_head;
    s.app.drs_ns = now;
    s.app.drs_head = s.rx_head;
    const uint32_t limit = rcv_buf_limit(e, s);
    if (s.app.rcv_space >= limit || uint64_t(drained) * 2 <= s.app.rcv_space) return;
    const uint32_t want = uint32_t(std::min<uint64_t>(uint64_t(drained) * 2, limit));
    const uint32_t ring = s.rx_mask + 1;
    if (want > ring) {
        s.app.rcv_target = want;
        rx_ring_grow(e, s); // now if the ring is empty, else at a later release
    }
    rcv_set_space(e, s, std::min(want, s.rx_mask + 1));
}

} // namespace mars::tcp
