// copy.cc: asynchronous receive copies through a CopyEngine (mars/copy.h).
//
// The fast path hands an in-order payload to the engine and advances
// rcv_nxt (the ACK may go out), but the bytes stay invisible to the
// application (rx_tail, kEvReadable) and the frame stays with the stack until
// the copy's completion comes back. Deliveries are applied strictly in
// submission order, so a connection's bytes become visible in order even when
// some of its payloads were copied by the core (below the threshold, a
// refused submit): those wait in the same queue behind the engine's copies.
// Everything else that reads or writes a receive ring (the slow path, close,
// the rings going back) first waits until nothing is in flight.
#include "rx/host.h"

#include <algorithm>
#include <cstring>

namespace mars {

const char *to_string(CopyFallback r)
{
    switch (r) {
    case CopyFallback::kRingFull: return "ring_full";
    case CopyFallback::kDeviceGone: return "device_gone";
    case CopyFallback::kError: return "error";
    case CopyFallback::kStalled: return "stalled";
    case CopyFallback::kBelowThreshold: return "below_threshold";
    case CopyFallback::kRingWrap: return "ring_wrap";
    default: return "?";
    }
}

namespace {

void ring_write(uint8_t *ring, uint32_t mask, uint32_t off, const uint8_t *src, uint32_t len)
{
    const uint32_t first = std::min(len, mask + 1 - off);
    std::memcpy(ring + off, src, first);
    if (len > first) std::memcpy(ring, src + first, len - first);
}
} // namespace

namespace rx {

void Receiver::count_fallback(CopyFallback why)
{
    switch (why) {
    case CopyFallback::kRingFull: env().stats_.copy_fallback_ring_full++; break;
    case CopyFallback::kDeviceGone: env().stats_.copy_fallback_device_gone++; break;
    case CopyFallback::kError: env().stats_.copy_fallback_error++; break;
    case CopyFallback::kStalled: env().stats_.copy_fallback_stalled++; break;
    case CopyFallback::kBelowThreshold: env().stats_.copy_fallback_below_threshold++; break;
    case CopyFallback::kRingWrap: env().stats_.copy_fallback_ring_wrap++; break;
    default: break;
    }
}

bool Receiver::rx_copy(Sock &s, PacketRef &f, const uint8_t *payload, uint32_t len)
{
    const bool offload = len >= copy_threshold_;
    if (!offload) env().stats_.copy_fallback_below_threshold++;
    if (!offload && s.rx_inflight == 0) return false; // nothing to wait behind: copy now, visible now
    if (pending_tail_ - pending_head_ == kMaxPendingCopies) {
        reap_copies(true); // the queue is full: finish the oldest (all) first
        if (!offload) return false;
    }
    const uint64_t marker = pending_tail_++;
    PendingCopy &p = pending_[marker % kMaxPendingCopies];
    const uint32_t off = (s.rx_tail + s.rx_inflight) & s.rx_mask;
    p = PendingCopy{f, payload, s.index, s.gen, off, len, false, true, CopyFallback::kError};
    bool queued = false;
    // A payload that wraps around the ring end stays with the core (two
    // descriptors for one delivery are not worth it).
    if (offload && off + len > s.rx_mask + 1) {
        env().stats_.copy_fallback_ring_wrap++;
    } else if (offload) {
        CopyFallback why = CopyFallback::kRingFull;
        queued = copy_->submit(s.rx + off, payload, len, marker, &why);
        if (queued) {
            env().stats_.copies_offloaded++;
            env().stats_.copy_bytes_offloaded += len;
            doorbell_due_ = true;
        } else {
            count_fallback(why);
        }
    }
    if (!queued) {
        ring_write(s.rx, s.rx_mask, off, payload, len);
        p.done = true;
    }
    s.rx_inflight += len;
    return true;
}

void Receiver::reap_copies(bool wait)
{
    if (doorbell_due_) {
        copy_->doorbell();
        doorbell_due_ = false;
    }
    CopyCompletion done[64];
    uint32_t idle_polls = 0;
    for (;;) {
        const uint16_t k = copy_->poll(done, 64);
        for (uint16_t i = 0; i < k; i++) {
            const uint64_t m = done[i].marker;
            if (m < pending_head_ || m >= pending_tail_) continue; // already redone by the core after a stall
            PendingCopy &p = pending_[m % kMaxPendingCopies];
            p.done = true;
            p.ok = done[i].ok;
            p.redo_why = done[i].why;
        }
        // Apply finished deliveries in order.
        while (pending_head_ != pending_tail_) {
            PendingCopy &p = pending_[pending_head_ % kMaxPendingCopies];
            if (!p.done) break;
            Sock &s = env().conn_at(p.sock);
            const bool live = s.gen == p.gen && s.rx;
            if (!p.ok) {
                count_fallback(p.redo_why); // error, or in flight when the device vanished
                if (live) ring_write(s.rx, s.rx_mask, p.off, p.src, p.len);
            }
            if (live) {
                s.rx_inflight -= p.len;
                s.rx_tail += p.len;
                env().raise(s, kEvReadable);
            }
            release_rx(p.frame);
            pending_head_++;
        }
        if (!wait || pending_head_ == pending_tail_) return;
        if (k == 0 && ++idle_polls >= env().cfg_.copy_drain_polls) break;
    }
    // The engine did not finish in time: it is abandoned (stopped, so none
    // of these copies can land later, on ring space the application may have
    // consumed and we reused, from frames we released), and the core copies
    // what is left. A completion that still comes is ignored.
    copy_->abandon();
    for (uint64_t m = pending_head_; m != pending_tail_; m++) {
        PendingCopy &p = pending_[m % kMaxPendingCopies];
        if (!p.done) {
            p.done = true;
            p.ok = true;
            count_fallback(CopyFallback::kStalled);
            Sock &s = env().conn_at(p.sock);
            if (s.gen == p.gen && s.rx) ring_write(s.rx, s.rx_mask, p.off, p.src, p.len);
        }
    }
    reap_copies(false);
}

void Receiver::use_copy_engine(CopyEngine *engine, uint32_t threshold)
{
    if (copies_in_flight()) reap_copies(true);
    flush_rx_done();
    copy_ = engine;
    copy_threshold_ = threshold;
    if (copy_ && pending_.empty()) pending_.resize(kMaxPendingCopies); // setup, not the packet path
}

} // namespace rx
} // namespace mars
