// ppe/src/dma_copy.h: MARS's copy engine (mars/copy.h) on a DPDK dmadev.
//
// One device (one virtual channel) per engine, used only by that engine's
// thread: submit() enqueues a copy (rte_dma_copy, no doorbell), doorbell()
// rings the device once per burst (rte_dma_submit), poll() takes completions
// in order (rte_dma_completed_status) and hands back the marker of each, in
// the ring of copies in flight kept here. The stack (mars/src/copy.cc) makes
// the bytes visible and releases the frame at the completion, exactly as for
// any other engine; failures fall back to the core there, by reason.
//
// Addressing: the destination is an application's receive ring in its DTI
// region, a memfd mapped by eta-ppe, which DPDK knows nothing about. We take
// only devices that work on the process's virtual addresses (RTE_DMA_CAPA_SVA:
// a DSA work queue of the kernel idxd driver, through PASID; the dma_skeleton
// software device), and pass virtual addresses for both sides: the mbuf's
// data (in IOVA-as-VA mode, which dma_skeleton requires, the same value as
// rte_pktmbuf_iova) and the ring. A device without SVA would need every
// application region registered (rte_extmem_register + rte_dev_dma_map) at
// attach; eta-ppe refuses such a device at start instead (see ppe/README.md).
#pragma once

#include <mars/copy.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ppe {

// A failure to inject on the real dmadev path (tests; eta-ppe's
// ETA_TEST_DMA_FAULT, see ppe/README.md "Copy offload"). Submissions are
// counted from inject(); the fault hits submission `at` (0: the next one):
//  kError    `count` copies in a row: the device copies a poison pattern
//            instead of the payload, and poll() returns their completions
//            failed, as when rte_dma_completed_status reports a status other
//            than RTE_DMA_STATUS_SUCCESSFUL (a failed DSA descriptor); the
//            stack redoes them with the core.
//  kStall    from there on the doorbell (rte_dma_submit) is withheld: the
//            device holds the copies and completes none of them, until the
//            stack's drain bound abandons it (rte_dma_stop).
//  kVanish   the device takes that submission, then is stopped and closed
//            (rte_dma_stop + rte_dma_close: DPDK releases it) with it in
//            flight; the rte_dma_* calls that follow (the doorbell, the next
//            copy) fail for real, and the engine gives the copies in flight
//            back failed as kDeviceGone.
//  kRingFull `count` submissions in a row get -ENOSPC, rte_dma_copy's
//            answer when the device's ring is full (not made by filling
//            the ring: the engine never gives the device more than it
//            holds), without reaching the device.
struct DmaFault {
    enum Kind : uint8_t { kNone, kError, kStall, kVanish, kRingFull };
    Kind kind = kNone;
    uint64_t at = 0;
    uint64_t count = 1; // kError, kRingFull
};

// "error@AT[xCOUNT]", "stall@AT", "vanish@AT", "ring_full@AT[xCOUNT]"
// (decimal). false and a sentence in *error for anything else.
bool parse_dma_fault(const std::string &spec, DmaFault *out, std::string *error);

class DmaCopyEngine final : public mars::CopyEngine {
  public:
    // Opens dmadev `name` (already probed by the EAL), sets up one
    // memory-to-memory vchan with `ring` descriptors (clamped to what the
    // device allows) and starts it. nullptr and a sentence in *error (what is
    // wrong, what to do) otherwise. Control thread, before the engines start.
    static std::unique_ptr<DmaCopyEngine> open(const std::string &name, uint32_t ring, std::string *error);
    ~DmaCopyEngine() override; // stops and closes the device

    const char *name() const override { return label_.c_str(); }
    bool submit(void *dst, const void *src, uint32_t len, uint64_t marker, mars::CopyFallback *why) override;
    void doorbell() override;
    uint16_t poll(mars::CopyCompletion *out, uint16_t max) override;
    uint32_t outstanding() const override { return tail_ - head_; }
    // Stops the device (rte_dma_stop: dma_skeleton joins its thread; a DSA
    // work queue is disabled), so no copy in flight can land later; from
    // then on every submission is refused as kDeviceGone.
    void abandon() override;
    bool abandoned() const { return gone_; }
    // The device vanished (an rte_dma_* call failed): no copy goes to it
    // again; those in flight came back failed (kDeviceGone). Like a stall,
    // this lasts until eta-ppe restarts: no retry.
    bool lost() const { return lost_; }
    uint64_t given_back() const { return given_back_; } // copies in flight returned failed after the loss

    // Test seam (see DmaFault). Off until called: the fast path's one test
    // of slow_ (which also stands for gone_) costs what the gone_ test did.
    // Call before traffic, from the engine's thread or before it starts.
    void inject(const DmaFault &fault);
    uint64_t fault_hits() const { return fault_hits_; } // submissions the fault changed

    uint32_t ring_size() const { return mask_ + 1; }

  private:
    DmaCopyEngine(int16_t dev, std::string label, uint32_t ring);
    // The slow path of submit()/poll(): an injected fault, a lost device.
    bool submit_faulted(void *dst, const void *src, uint32_t len, uint64_t marker, mars::CopyFallback *why);
    uint16_t poll_slow(mars::CopyCompletion *out, uint16_t max);
    // rte_dma_copy's answer: the copy is in flight (true), or refused.
    bool took(int rc, uint64_t marker, mars::CopyFallback *why);
    uint16_t take_completions(mars::CopyCompletion *out, uint16_t max);
    void lose_device(); // an rte_dma_* call failed: the device is gone

    const int16_t dev_;
    const std::string label_;       // "dmadev:NAME", for eta-stat
    std::vector<uint64_t> markers_; // of the copies in flight, in submission order
    uint32_t mask_;
    uint32_t capacity_;             // copies the device holds at once
    uint32_t head_ = 0, tail_ = 0;  // markers_[head_..tail_) are in flight
    bool unsubmitted_ = false;      // copies enqueued since the last doorbell
    bool gone_ = false;             // abandoned or lost: stopped, refuses everything
    bool slow_ = false;             // a fault injected, or gone_: submit()/poll() take the slow path
    bool lost_ = false;             // vanished: copies in flight go back failed
    bool withheld_ = false;         // kStall: doorbells are not rung
    bool closed_ = false;           // kVanish closed the device (not to be closed again)
    DmaFault fault_{};
    uint64_t given_back_ = 0;
    uint64_t attempts_ = 0, fault_hits_ = 0; // submissions since inject(), those the fault hit
    std::vector<uint8_t> failed_;   // kError: per ring slot, its completion reports an error
    std::vector<uint8_t> poison_;   // kError: what the device copies instead of the payload
};

// The test seam in eta-ppe: when ETA_TEST_DMA_FAULT holds a DmaFault spec,
// injects it into e and says so in *note (for the log). Honoured only in
// builds with assertions (no NDEBUG: `tools/eta build`, the test builds);
// a release build ignores it and *note says that. false and *error for a
// bad spec. Control thread, before the engine starts.
bool inject_test_dma_fault(DmaCopyEngine &e, std::string *note, std::string *error);

// Every dmadev DPDK found, "name (driver capabilities)" joined by ", ", or
// "none": for the message when a configured device is missing.
std::string list_dmadevs();

} // namespace ppe
