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

    uint32_t ring_size() const { return mask_ + 1; }

  private:
    DmaCopyEngine(int16_t dev, std::string label, uint32_t ring);

    const int16_t dev_;
    const std::string label_;       // "dmadev:NAME", for eta-stat
    std::vector<uint64_t> markers_; // of the copies in flight, in submission order
    uint32_t mask_;
    uint32_t capacity_;             // copies the device holds at once
    uint32_t head_ = 0, tail_ = 0;  // markers_[head_..tail_) are in flight
    bool unsubmitted_ = false;      // copies enqueued since the last doorbell
    bool gone_ = false;             // abandoned: stopped, refuses everything
};

// Every dmadev DPDK found, "name (driver capabilities)" joined by ", ", or
// "none": for the message when a configured device is missing.
std::string list_dmadevs();

} // namespace ppe
