// Input format (everything is optional; short input just ends the run):
//   byte 0: how many sockets the fake app creates first (x % 8, half listen)
//   then repeated chunks: [where:1][offset:2][len:1][len bytes]
//     where % 3 == 0: queue pair (where/3 % 2) header (its app-written words)
//     where % 3 == 1: command ring of that queue pair
//     where % 3 == 2: publish offset % 64 entries: stamp them and move
//                     cmd_prod (past what was written, the ring, anything)
//   after each chunk the engine polls once.
// The app side here is hostile by construction; the engine must survive,
// answer or refuse, and never touch memory outside the region. Checked after
// every input: the region sits between PROT_NONE guard pages (a touch
// outside it faults in any build), the engine-owned layout words of the
// header are unchanged, and shutdown leaves the region marked GONE with no
// attachment left.
#include "fuzz_region.h"

#include "dti_abi.h"
#include "loopback.h"

#include <dti/dti.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace dti::fuzz {
namespace {

[[noreturn]] void broken(const char *what)
{
    std::fprintf(stderr, "dti fuzz: invariant broken: %s\n", what);
    std::abort();
}

// Region memory whose end abuts an inaccessible page, with another before
// its start: the engine's reads and writes past either end fault.
class GuardedRegion {
  public:
    explicit GuardedRegion(uint64_t bytes)
    {
        const size_t page = size_t(sysconf(_SC_PAGESIZE));
        inner_ = (bytes + page - 1) / page * page;
        total_ = inner_ + 2 * page;
        map_ = static_cast<uint8_t *>(mmap(nullptr, total_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        if (map_ == MAP_FAILED) broken("cannot map the guarded region");
        if (mprotect(map_ + page, inner_, PROT_READ | PROT_WRITE) != 0) broken("cannot open the region's pages");
        // bytes is a multiple of the cache line (the layout's unit), so the
        // start stays aligned.
        base_ = map_ + page + (inner_ - bytes);
    }
    ~GuardedRegion() { munmap(map_, total_); }
    uint8_t *base() const { return base_; }

  private:
    uint8_t *map_ = nullptr, *base_ = nullptr;
    size_t inner_ = 0, total_ = 0;
};

} // namespace

void run_one(const uint8_t *data, size_t size)
{
    engine::Limits l;
    l.max_contexts = 2;
    l.max_sockets = 16;
    l.cmdq_entries = 16;
    l.evq_entries = 32;
    l.rx_ring_size = 4096;
    l.tx_ring_size = 4096;
    l.pool_size = 8192;
    l.commands_per_poll = 8;
    fixture::LoopbackTransport tr;
    auto e = engine::Server::create(tr, l, nullptr);
    tr.set_provider(e.get());
    uint64_t bytes = engine::region_bytes(l);
    if (bytes == 0 || bytes % 64) broken("region size is not a whole number of cache lines");
    GuardedRegion mem(bytes);
    auto *base = mem.base();
    engine::layout_region(base, bytes, l);
    auto *hdr = reinterpret_cast<dti_region_header *>(base);
    // The engine-owned layout words: written once, read-only afterwards.
    uint8_t layout[offsetof(dti_region_header, pad0)];
    std::memcpy(layout, hdr, sizeof layout);
    if (e->attach_memory(base, bytes, 2) < 0)
        broken("a fresh region was refused");
    auto qp = [&](unsigned i) {
        return reinterpret_cast<dti_qp_header *>(base + hdr->ctx_offset + hdr->ctx_stride * i);
    };
    auto cmds = [&](unsigned i) { return reinterpret_cast<dti_cmd *>(reinterpret_cast<uint8_t *>(qp(i)) + sizeof(dti_qp_header)); };
    size_t pos = 0;
    // Some valid state first, so that garbage meets live sockets.
    unsigned nsock = size > 0 ? data[pos++] % 8 : 0;
    uint32_t prod[2] = {0, 0};
    auto publish = [&](unsigned q, unsigned n) {
        for (unsigned k = 0; k < n; k++, prod[q]++)
            __atomic_store_n(&cmds(q)[prod[q] % l.cmdq_entries].stamp, prod[q] + 1, __ATOMIC_RELEASE);
        __atomic_store_n(&qp(q)->cmd_prod, prod[q], __ATOMIC_SEQ_CST);
    };
    for (unsigned k = 0; k < nsock; k++) {
        dti_cmd c{};
        c.op = DTI_OP_SOCKET;
        c.tag = k;
        cmds(0)[k % l.cmdq_entries] = c;
    }
    publish(0, nsock);
    e->poll();
    qp(0)->ev_cons = __atomic_load_n(&qp(0)->ev_prod, __ATOMIC_ACQUIRE);
    for (int rounds = 0; pos + 4 <= size && rounds < 4096; rounds++) {
        uint8_t where = data[pos];
        uint16_t off = uint16_t(data[pos + 1] | data[pos + 2] << 8);
        uint8_t len = data[pos + 3];
        pos += 4;
        size_t n = std::min<size_t>(len, size - pos);
        unsigned q = (where / 3) % 2;
        if (where % 3 == 0) {
            // Only the app-written words of the queue pair header.
            uint32_t *words[] = {&prod[q], &qp(q)->ev_cons, &qp(q)->armed};
            for (size_t k = 0; k + 4 <= n; k += 4) {
                uint32_t v;
                std::memcpy(&v, data + pos + k, 4);
                *words[(off + k / 4) % 3] = v;
            }
        } else if (where % 3 == 1) {
            size_t ring = sizeof(dti_cmd) * l.cmdq_entries;
            auto *r = reinterpret_cast<uint8_t *>(cmds(q));
            for (size_t k = 0; k < n; k++)
                r[(off + k) % ring] = data[pos + k];
        } else {
            publish(q, off % 64);
        }
        pos += n;
        e->poll();
        e->clear_wakeups();
        // Consume events now and then like an app would.
        if (where & 0x80)
            qp(q)->ev_cons = __atomic_load_n(&qp(q)->ev_prod, __ATOMIC_ACQUIRE);
    }
    if (std::memcmp(layout, hdr, sizeof layout) != 0) broken("the engine changed the region's layout words");
    e->shutdown();
    e->poll();
    // GONE, or BROKEN when the engine found the hostile region corrupt (and
    // counted it): never still ALIVE.
    const uint32_t state = __atomic_load_n(&hdr->engine_state, __ATOMIC_ACQUIRE);
    if (state != DTI_ENGINE_GONE && !(state == DTI_ENGINE_BROKEN && e->stats().broken_regions > 0))
        broken("after shutdown the region is neither GONE nor counted BROKEN");
    if (!e->attachments().empty()) broken("an attachment survived shutdown");
    if (std::memcmp(layout, hdr, sizeof layout) != 0) broken("shutdown changed the region's layout words");
}

} // namespace dti::fuzz
