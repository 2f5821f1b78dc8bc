// ppe/src/dma_copy.cc: the dmadev copy engine (see dma_copy.h).
// dmadev is still "experimental" API in DPDK 22.11 (stable since 23.07 in
// upstream's marking); the functions used here are unchanged since 21.11.
#define ALLOW_EXPERIMENTAL_API 1

#include "dma_copy.h"

#include <rte_dmadev.h>
#include <rte_errno.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ppe {

namespace {

std::string capabilities(uint64_t capa)
{
    std::string s;
    auto add = [&](uint64_t bit, const char *word) {
        if (capa & bit) s += (s.empty() ? "" : "+") + std::string(word);
    };
    add(RTE_DMA_CAPA_MEM_TO_MEM, "mem2mem");
    add(RTE_DMA_CAPA_SVA, "sva");
    add(RTE_DMA_CAPA_OPS_COPY, "copy");
    return s.empty() ? "none" : s;
}

uint32_t round_down_pow2(uint32_t v)
{
    uint32_t p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
}

} // namespace

std::string list_dmadevs()
{
    std::string out;
    int16_t id = -1;
    while ((id = rte_dma_next_dev(int16_t(id + 1))) >= 0) {
        rte_dma_info info{};
        if (rte_dma_info_get(id, &info) != 0) continue;
        out += (out.empty() ? "" : ", ") + std::string(info.dev_name) + " (" + capabilities(info.dev_capa) + ")";
    }
    return out.empty() ? "none" : out;
}

std::unique_ptr<DmaCopyEngine> DmaCopyEngine::open(const std::string &name, uint32_t ring, std::string *error)
{
    const int id = rte_dma_get_dev_id_by_name(name.c_str());
    if (id < 0) {
        *error = "no DMA device \"" + name + "\" (DPDK found: " + list_dmadevs() +
                 "); name a device DPDK finds (\"dma_skeleton\" is the software device for tests; a DSA work "
                 "queue needs the kernel idxd driver and accel-config), or set engine = \"cpu\"";
        return nullptr;
    }
    rte_dma_info info{};
    if (rte_dma_info_get(int16_t(id), &info) != 0) {
        *error = "DMA device \"" + name + "\": cannot read its capabilities: " + rte_strerror(rte_errno);
        return nullptr;
    }
    const std::string what = "DMA device \"" + name + "\" (" + capabilities(info.dev_capa) + ")";
    if (!(info.dev_capa & RTE_DMA_CAPA_MEM_TO_MEM) || !(info.dev_capa & RTE_DMA_CAPA_OPS_COPY)) {
        *error = what + " cannot copy memory to memory; use a copy engine (DSA, IOAT-class) or engine = \"cpu\"";
        return nullptr;
    }
    if (!(info.dev_capa & RTE_DMA_CAPA_SVA)) {
        *error = what + " cannot reach process memory (no SVA): the applications' rings are memfd regions DPDK "
                 "has not mapped for it, and eta-ppe does not map them; use a device with SVA (a DSA work "
                 "queue of the kernel idxd driver, not vfio-pci) or engine = \"cpu\"";
        return nullptr;
    }
    if (info.max_vchans < 1) {
        *error = what + " has no free virtual channel";
        return nullptr;
    }
    rte_dma_conf conf{};
    conf.nb_vchans = 1;
    int rc = rte_dma_configure(int16_t(id), &conf);
    if (rc != 0) {
        *error = what + ": configure failed (" + std::strerror(-rc) + "); is it used by another program?";
        return nullptr;
    }
    rte_dma_vchan_conf vc{};
    vc.direction = RTE_DMA_DIR_MEM_TO_MEM;
    vc.nb_desc = uint16_t(round_down_pow2(std::clamp<uint32_t>(ring, info.min_desc, info.max_desc)));
    rc = rte_dma_vchan_setup(int16_t(id), 0, &vc);
    if (rc != 0) {
        *error = what + ": no free vchan with " + std::to_string(vc.nb_desc) + " descriptors (" +
                 std::strerror(-rc) + "); try a smaller [copy] ring";
        return nullptr;
    }
    rc = rte_dma_start(int16_t(id));
    if (rc != 0) {
        *error = what + ": start failed (" + std::string(std::strerror(-rc)) + ")";
        rte_dma_close(int16_t(id));
        return nullptr;
    }
    std::unique_ptr<DmaCopyEngine> e(new DmaCopyEngine(int16_t(id), "dmadev:" + name, vc.nb_desc));
    // What the device takes at once (dma_skeleton: one descriptor less than
    // its ring, to tell full from empty).
    const uint16_t cap = rte_dma_burst_capacity(int16_t(id), 0);
    e->capacity_ = std::min<uint32_t>(cap ? cap : vc.nb_desc, vc.nb_desc);
    return e;
}

DmaCopyEngine::DmaCopyEngine(int16_t dev, std::string label, uint32_t ring)
    : dev_(dev), label_(std::move(label)), markers_(ring), mask_(ring - 1), capacity_(ring)
{}

DmaCopyEngine::~DmaCopyEngine()
{
    if (!gone_) rte_dma_stop(dev_);
    rte_dma_close(dev_);
}

void DmaCopyEngine::abandon()
{
    if (gone_) return;
    rte_dma_stop(dev_);
    gone_ = true;
    head_ = tail_; // the stack redoes them; nothing of theirs comes back
    unsubmitted_ = false;
}

bool DmaCopyEngine::submit(void *dst, const void *src, uint32_t len, uint64_t marker, mars::CopyFallback *why)
{
    if (gone_) {
        *why = mars::CopyFallback::kDeviceGone;
        return false;
    }
    if (tail_ - head_ >= capacity_) {
        *why = mars::CopyFallback::kRingFull;
        return false;
    }
    // SVA device: virtual addresses are its addresses (dma_copy.h).
    const int rc = rte_dma_copy(dev_, 0, rte_iova_t(uintptr_t(src)), rte_iova_t(uintptr_t(dst)), len, 0);
    if (rc < 0) {
        *why = rc == -ENOSPC ? mars::CopyFallback::kRingFull : mars::CopyFallback::kDeviceGone;
        return false;
    }
    markers_[tail_++ & mask_] = marker;
    unsubmitted_ = true;
    return true;
}

void DmaCopyEngine::doorbell()
{
    if (!unsubmitted_ || gone_) return;
    rte_dma_submit(dev_, 0);
    unsubmitted_ = false;
}

uint16_t DmaCopyEngine::poll(mars::CopyCompletion *out, uint16_t max)
{
    if (head_ == tail_ || max == 0) return 0;
    rte_dma_status_code status[64];
    uint16_t last = 0;
    const uint16_t n = rte_dma_completed_status(dev_, 0, std::min<uint16_t>(max, 64), &last, status);
    for (uint16_t i = 0; i < n; i++)
        out[i] = mars::CopyCompletion{markers_[head_++ & mask_], status[i] == RTE_DMA_STATUS_SUCCESSFUL};
    return n;
}

} // namespace ppe
