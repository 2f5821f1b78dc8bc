// tests/unit/mars/sim/copy_engines.h: TEST FIXTURE. A copy engine that
// completes later (mars/copy.h), as a DMA device would, with each failure a
// test can inject: a full ring, a vanished device, copies completed with an
// error (and garbage written), a device that stalls.
#pragma once

#include <mars/copy.h>

#include <cstdint>
#include <cstring>
#include <deque>

namespace mars::sim {

class DeferredCopyEngine final : public CopyEngine {
  public:
    // Copies happen `delay_polls` poll() calls after their doorbell.
    explicit DeferredCopyEngine(uint32_t capacity = 64, uint32_t delay_polls = 1)
        : capacity_(capacity), delay_(delay_polls) {}

    // Failure injection.
    bool gone = false;          // every submit is refused (device removed)
    bool stalled = false;       // nothing completes (device hung)
    uint32_t fail_every = 0;    // every Nth copy completes with an error (garbage written)
    // The device disappears with copies in flight: some of them were
    // half-written (garbage), none completes; from now on every submit is
    // refused, and the next poll gives the copies in flight back failed,
    // as kDeviceGone (what ppe's dmadev engine does when rte_dma_* fail).
    void vanish()
    {
        gone = true;
        for (Op &o : q_) std::memset(o.dst, 0xdd, o.len);
        lost_ = true;
    }

    uint64_t submitted = 0, doorbells = 0, completed = 0;

    const char *name() const override { return "test-deferred"; }
    bool submit(void *dst, const void *src, uint32_t len, uint64_t marker, CopyFallback *why) override
    {
        if (gone) {
            *why = CopyFallback::kDeviceGone;
            return false;
        }
        if (q_.size() >= capacity_) {
            *why = CopyFallback::kRingFull;
            return false;
        }
        q_.push_back(Op{dst, src, len, marker, false, 0});
        submitted++;
        return true;
    }
    void doorbell() override
    {
        doorbells++;
        for (Op &o : q_) o.started = true;
    }
    uint16_t poll(CopyCompletion *out, uint16_t max) override
    {
        uint16_t k = 0;
        if (lost_) {
            while (k < max && !q_.empty()) {
                out[k++] = CopyCompletion{q_.front().marker, false, CopyFallback::kDeviceGone};
                q_.pop_front();
            }
            return k;
        }
        if (stalled) return 0;
        for (Op &o : q_)
            if (o.started) o.age++;
        while (k < max && !q_.empty() && q_.front().started && q_.front().age >= delay_) {
            Op o = q_.front();
            q_.pop_front();
            completed++;
            const bool fail = fail_every && completed % fail_every == 0;
            if (fail) {
                std::memset(o.dst, 0xee, o.len);
            } else {
                std::memcpy(o.dst, o.src, o.len);
            }
            out[k++] = CopyCompletion{o.marker, !fail};
        }
        return k;
    }
    uint32_t outstanding() const override { return uint32_t(q_.size()); }
    // The stack took the copies over: none of them may be written later.
    void abandon() override
    {
        abandoned++;
        q_.clear();
        gone = true;
    }
    uint32_t abandoned = 0;

  private:
    struct Op {
        void *dst;
        const void *src;
        uint32_t len;
        uint64_t marker;
        bool started;
        uint32_t age;
    };
    std::deque<Op> q_;
    uint32_t capacity_, delay_;
    bool lost_ = false;
};

} // namespace mars::sim
