// mars/copy.h: the copy-engine interface (asynchronous copy offload, seed
// 003 MARS).
//
// The receive path may hand the frame -> application-ring payload copy to a
// copy engine instead of doing it with the core: submit copies, ring the
// doorbell once per burst, poll completions later. The stack makes the bytes
// visible to the application (ring tail, readable event) and releases the
// frame only when the copy's completion comes back, in submission order.
//
// I/O-agnostic: an engine is whatever moves bytes. Implementations:
// CpuCopyEngine here (synchronous memcpy at submit; always available) and,
// in ppe/, a DPDK dmadev engine. Tests use an engine that completes later.
//
// Failures never lose or reorder data: a refused submit (ring full, device
// gone) is copied by the core at once; a completion with an error, or a
// device that does not finish within the stack's bound when it must drain,
// is redone by the core from the frame, which the stack still holds (after a
// stall the engine is abandoned first, so a late write cannot land on ring
// space already reused); an engine that finds its device gone (ppe's dmadev
// engine, when an rte_dma_* call fails) gives the copies in flight back as
// failed completions with why = kDeviceGone, redone the same way. Each
// fallback is counted by reason (StackStats).
#pragma once

#include <cstdint>
#include <cstring>

namespace mars {

// Why a copy was done by the core instead of the engine.
enum class CopyFallback : uint8_t {
    kRingFull = 0,   // the engine's submission ring had no room
    kDeviceGone = 1, // the engine refused every submission (device stopped or removed)
    kError = 2,      // the engine completed the copy with an error
    kStalled = 3,    // the engine did not complete within the drain bound
    kBelowThreshold = 4, // shorter than StackConfig::copy_threshold (a descriptor costs more)
    kRingWrap = 5,   // the payload wraps around the receive ring's end
    kCount = 6,
};

const char *to_string(CopyFallback r);

struct CopyCompletion {
    uint64_t marker; // what submit() was given
    bool ok;         // false: the bytes at dst are not to be trusted; copy again
    // When !ok, why (counted by the stack): kError for a copy the engine
    // reported failed, kDeviceGone for a copy in flight when the device
    // vanished (the engine gives those back itself, failed, once it knows).
    CopyFallback why = CopyFallback::kError;
};

class CopyEngine {
  public:
    virtual ~CopyEngine() = default;
    // For eta-stat ("cpu", "dmadev:dma_skeleton0", ...).
    virtual const char *name() const = 0;
    // Queues one copy of len bytes. marker comes back with its completion.
    // Returns false when the copy was not taken (reason in *why): the caller
    // copies it itself. Copies complete in submission order.
    virtual bool submit(void *dst, const void *src, uint32_t len, uint64_t marker, CopyFallback *why) = 0;
    // Starts what was queued since the last doorbell (one per burst).
    virtual void doorbell() = 0;
    // Up to max completed copies, oldest first. Never blocks.
    virtual uint16_t poll(CopyCompletion *out, uint16_t max) = 0;
    // Copies submitted and not yet returned by poll().
    virtual uint32_t outstanding() const = 0;
    // The stack gave up waiting (a stalled device) and redoes every copy in
    // flight with the core; it will release their frames and may reuse their
    // ring space at once. From here on the engine must never write any of
    // them (a DMA device is stopped) and should refuse further submissions
    // (kDeviceGone). Engines that complete at submit need do nothing.
    virtual void abandon() {}
};

// The core copies at submit time; poll() returns the completions.
class CpuCopyEngine final : public CopyEngine {
  public:
    const char *name() const override { return "cpu"; }
    bool submit(void *dst, const void *src, uint32_t len, uint64_t marker, CopyFallback *why) override
    {
        if (n_ == kRing) {
            *why = CopyFallback::kRingFull;
            return false;
        }
        std::memcpy(dst, src, len);
        done_[(head_ + n_++) % kRing] = marker;
        return true;
    }
    void doorbell() override {}
    uint16_t poll(CopyCompletion *out, uint16_t max) override
    {
        uint16_t k = 0;
        for (; k < max && n_; k++, n_--) {
            out[k] = CopyCompletion{done_[head_], true};
            head_ = (head_ + 1) % kRing;
        }
        return k;
    }
    uint32_t outstanding() const override { return n_; }

  private:
    static constexpr uint32_t kRing = 256;
    uint64_t done_[kRing];
    uint32_t head_ = 0, n_ = 0;
};

} // namespace mars
