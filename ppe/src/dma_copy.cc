// ppe/src/dma_copy.cc: the dmadev copy engine (see dma_copy.h).
// dmadev is still "experimental" API in DPDK 22.11 (stable since 23.07 in
// upstream's marking); the functions used here are unchanged since 21.11.
#define ALLOW_EXPERIMENTAL_API 1

#include "dma_copy.h"

#include <rte_dmadev.h>
#include <rte_errno.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
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
    if (!closed_) rte_dma_close(dev_);
}

void DmaCopyEngine::abandon()
{
    if (gone_) return;
    rte_dma_stop(dev_);
    gone_ = slow_ = true;
    head_ = tail_; // the stack redoes them; nothing of theirs comes back
    unsubmitted_ = false;
}

__attribute__((cold, noinline)) void DmaCopyEngine::lose_device()
{
    // Stop it if it still answers, so no copy in flight lands later on ring
    // space the stack reuses once it has redone them.
    if (!gone_ && !closed_) rte_dma_stop(dev_);
    gone_ = lost_ = slow_ = true;
    unsubmitted_ = false;
}

inline __attribute__((always_inline)) bool DmaCopyEngine::took(int rc, uint64_t marker, mars::CopyFallback *why)
{
    if (rc < 0) {
        if (rc == -ENOSPC) {
            *why = mars::CopyFallback::kRingFull;
        } else {
            lose_device(); // -EINVAL/-ENODEV...: the device is not there any more
            *why = mars::CopyFallback::kDeviceGone;
        }
        return false;
    }
    markers_[tail_++ & mask_] = marker;
    unsubmitted_ = true;
    return true;
}

bool DmaCopyEngine::submit(void *dst, const void *src, uint32_t len, uint64_t marker, mars::CopyFallback *why)
{
    // One flag for everything unusual (abandoned, lost, a fault injected):
    // the fast path tests as much as it did before the fault seam.
    if (__builtin_expect(slow_, 0)) return submit_faulted(dst, src, len, marker, why);
    if (tail_ - head_ >= capacity_) {
        *why = mars::CopyFallback::kRingFull;
        return false;
    }
    // SVA device: virtual addresses are its addresses (dma_copy.h).
    return took(rte_dma_copy(dev_, 0, rte_iova_t(uintptr_t(src)), rte_iova_t(uintptr_t(dst)), len, 0), marker, why);
}

void DmaCopyEngine::doorbell()
{
    if (!unsubmitted_ || gone_) return;
    if (__builtin_expect(withheld_, 0)) return; // kStall: the device keeps them and never starts
    if (rte_dma_submit(dev_, 0) < 0) {
        lose_device();
        return;
    }
    unsubmitted_ = false;
}

// Inlined into poll(): the fast path costs what it did before the fault seam.
inline __attribute__((always_inline)) uint16_t DmaCopyEngine::take_completions(mars::CopyCompletion *out,
                                                                            uint16_t max)
{
    rte_dma_status_code status[64];
    uint16_t last = 0;
    const uint16_t n = rte_dma_completed_status(dev_, 0, std::min<uint16_t>(max, 64), &last, status);
    for (uint16_t i = 0; i < n; i++)
        out[i] = mars::CopyCompletion{markers_[head_++ & mask_], status[i] == RTE_DMA_STATUS_SUCCESSFUL};
    return n;
}

uint16_t DmaCopyEngine::poll(mars::CopyCompletion *out, uint16_t max)
{
    if (head_ == tail_ || max == 0) return 0;
    if (__builtin_expect(slow_, 0)) return poll_slow(out, max);
    return take_completions(out, max);
}

// ---- the slow path: injected faults, a lost device ------------------------

void DmaCopyEngine::inject(const DmaFault &fault)
{
    fault_ = fault;
    attempts_ = fault_hits_ = 0;
    if (fault.kind == DmaFault::kError) {
        failed_.assign(mask_ + 1, 0);
        poison_.assign(64 * 1024, 0xe7);
    }
    slow_ = fault.kind != DmaFault::kNone || gone_;
}

bool DmaCopyEngine::submit_faulted(void *dst, const void *src, uint32_t len, uint64_t marker,
                                   mars::CopyFallback *why)
{
    if (gone_) {
        *why = mars::CopyFallback::kDeviceGone;
        return false;
    }
    if (tail_ - head_ >= capacity_) {
        *why = mars::CopyFallback::kRingFull;
        return false;
    }
    const uint64_t n = attempts_++;
    const bool from = n >= fault_.at;
    const bool within = from && n - fault_.at < fault_.count;
    switch (fault_.kind) {
    case DmaFault::kRingFull:
        if (within) {
            fault_hits_++;
            return took(-ENOSPC, marker, why);
        }
        break;
    case DmaFault::kError:
        if (within && len <= poison_.size()) {
            fault_hits_++;
            failed_[tail_ & mask_] = 1;
            src = poison_.data(); // the device writes garbage where the payload goes
        }
        break;
    case DmaFault::kStall:
        if (from) {
            fault_hits_++;
            withheld_ = true;
        }
        break;
    case DmaFault::kVanish:
        if (from && !closed_) { // it takes this copy, then goes away with it in flight
            fault_hits_++;
            const bool taken =
                took(rte_dma_copy(dev_, 0, rte_iova_t(uintptr_t(src)), rte_iova_t(uintptr_t(dst)), len, 0), marker, why);
            rte_dma_stop(dev_);
            rte_dma_close(dev_); // DPDK releases it: its fast-path calls now fail
            closed_ = true;
            return taken;
        }
        break;
    case DmaFault::kNone: break;
    }
    return took(rte_dma_copy(dev_, 0, rte_iova_t(uintptr_t(src)), rte_iova_t(uintptr_t(dst)), len, 0), marker, why);
}

uint16_t DmaCopyEngine::poll_slow(mars::CopyCompletion *out, uint16_t max)
{
    if (lost_) { // nothing will complete: every copy in flight goes back failed, in order
        uint16_t k = 0;
        for (; k < max && head_ != tail_; k++)
            out[k] = mars::CopyCompletion{markers_[head_++ & mask_], false, mars::CopyFallback::kDeviceGone};
        given_back_ += k;
        return k;
    }
    const uint32_t first = head_;
    const uint16_t n = take_completions(out, max);
    if (!failed_.empty())
        for (uint16_t i = 0; i < n; i++) {
            uint8_t &f = failed_[(first + i) & mask_];
            if (f) out[i].ok = false; // the status the device would report for its failed descriptor
            f = 0;
        }
    return n;
}

bool parse_dma_fault(const std::string &spec, DmaFault *out, std::string *error)
{
    static const struct {
        const char *word;
        DmaFault::Kind kind;
        bool counted;
    } kinds[] = {{"error", DmaFault::kError, true},
                 {"stall", DmaFault::kStall, false},
                 {"vanish", DmaFault::kVanish, false},
                 {"ring_full", DmaFault::kRingFull, true}};
    const size_t at = spec.find('@');
    const std::string word = spec.substr(0, at);
    const std::string allowed = "allowed: error@N[xCOUNT], stall@N, vanish@N, ring_full@N[xCOUNT] (N: the "
                                "submission it hits, from 0)";
    auto number = [](const std::string &t, uint64_t *v) {
        if (t.empty() || t.size() > 18 || t.find_first_not_of("0123456789") != std::string::npos) return false;
        *v = std::stoull(t);
        return true;
    };
    for (const auto &k : kinds) {
        if (word != k.word) continue;
        DmaFault f;
        f.kind = k.kind;
        const std::string rest = at == std::string::npos ? "" : spec.substr(at + 1);
        const size_t x = rest.find('x');
        if (!number(rest.substr(0, x), &f.at) || (x != std::string::npos && (!k.counted ||
                                                                               !number(rest.substr(x + 1), &f.count) ||
                                                                               f.count == 0))) {
            *error = "DMA fault \"" + spec + "\": bad number; " + allowed;
            return false;
        }
        *out = f;
        return true;
    }
    *error = "DMA fault \"" + spec + "\": unknown kind; " + allowed;
    return false;
}

bool inject_test_dma_fault(DmaCopyEngine &e, std::string *note, std::string *error)
{
    const char *spec = std::getenv("ETA_TEST_DMA_FAULT");
    if (!spec || !*spec) return true;
#ifdef NDEBUG
    (void)e;
    (void)error;
    *note = std::string("ETA_TEST_DMA_FAULT=") + spec + " ignored: a release build (NDEBUG) has no test faults";
    return true;
#else
    DmaFault f;
    if (!parse_dma_fault(spec, &f, error)) {
        *error = "ETA_TEST_DMA_FAULT: " + *error;
        return false;
    }
    e.inject(f);
    *note = std::string("ETA_TEST_DMA_FAULT=") + spec + ": injecting this fault into " + e.name() +
            " (a test seam; unset it outside tests)";
    return true;
#endif
}

} // namespace ppe
