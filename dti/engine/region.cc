// The region and socket table (table.h), its region: the layout (what the application maps) and the ring memory
// the transport borrows for each socket (mars::BufferProvider forwards here).
#include "table.h"

#include <sys/mman.h>

#include <algorithm>

#include <cstring>

namespace dti::engine::detail {

bool geometry(const Limits &l, Geometry *g)
{
    if (!pow2(l.cmdq_entries) || !pow2(l.evq_entries) || l.evq_entries < 2 * l.cmdq_entries ||
        l.cmdq_entries > DTI_CMDQ_MAX || l.evq_entries > DTI_EVQ_MAX || !pow2(l.rx_ring_size) || !pow2(l.tx_ring_size) ||
        l.rx_ring_size > (1u << 30) || l.tx_ring_size > (1u << 30) || l.max_contexts == 0 ||
        l.max_contexts > kMaxContexts || l.max_sockets == 0 || l.max_sockets > DTI_SLOT_MASK ||
        (l.rx_ring_max > l.rx_ring_size && (!pow2(l.rx_ring_max) || l.rx_ring_max > (1u << 30))) ||
        (l.tx_ring_max > l.tx_ring_size && (!pow2(l.tx_ring_max) || l.tx_ring_max > (1u << 30))))
        return false;
    g->rx_reserve = std::max(l.rx_ring_size, l.rx_ring_max);
    g->tx_reserve = std::max(l.tx_ring_size, l.tx_ring_max);
    g->ctx_offset = 4096;
    g->ctx_stride = align_up(sizeof(dti_qp_header) + uint64_t{l.cmdq_entries} * sizeof(dti_cmd) +
                                 uint64_t{l.evq_entries} * sizeof(dti_ev),
                             DTI_CACHELINE);
    g->sock_offset = align_up(g->ctx_offset + g->ctx_stride * l.max_contexts, 4096);
    g->data_offset = align_up(g->sock_offset + uint64_t{l.max_sockets} * sizeof(dti_sock_shared), 4096);
    // Each slot reserves its rings' largest sizes; pages a ring never
    // reached stay untouched, so the memory in use is the region with every
    // ring at its starting size (committed) plus what grown rings add.
    g->data_stride = uint64_t{g->rx_reserve} + g->tx_reserve;
    g->pool_offset = align_up(g->data_offset + g->data_stride * l.max_sockets, 4096);
    g->size = align_up(g->pool_offset + l.pool_size, 4096);
    g->committed = g->size - (uint64_t{g->rx_reserve - l.rx_ring_size} + (g->tx_reserve - l.tx_ring_size)) * l.max_sockets;
    return true;
}

void Table::init_region(Group &group)
{
    group.hdr = reinterpret_cast<dti_region_header *>(group.base);
    group.socks = reinterpret_cast<dti_sock_shared *>(group.base + group.geo.sock_offset);
    group.slots.assign(group.lim.max_sockets, Slot{});
    group.free_slots.clear();
    for (uint32_t i = group.lim.max_sockets; i-- > 0;)
        group.free_slots.push_back(i);
    group.ctxs.assign(group.lim.max_contexts, Ctx{});
    for (uint32_t i = 0; i < group.lim.max_contexts; i++) {
        uint8_t *qp = group.base + group.geo.ctx_offset + group.geo.ctx_stride * i;
        Ctx &c = group.ctxs[i];
        c.qp = reinterpret_cast<dti_qp_header *>(qp);
        c.cmds = reinterpret_cast<dti_cmd *>(qp + sizeof(dti_qp_header));
        c.evs = reinterpret_cast<dti_ev *>(qp + sizeof(dti_qp_header) + size_t{group.lim.cmdq_entries} * sizeof(dti_cmd));
    }
}

void layout_region_impl(void *region, const Limits &l, const Geometry &g)
{
    auto *h = static_cast<dti_region_header *>(region);
    std::memset(h, 0, sizeof *h);
    h->magic = DTI_REGION_MAGIC;
    h->abi_version = DTI_ABI_VERSION;
    h->header_size = sizeof *h;
    h->region_size = g.size;
    h->max_contexts = l.max_contexts;
    h->cmdq_entries = l.cmdq_entries;
    h->evq_entries = l.evq_entries;
    h->max_sockets = l.max_sockets;
    h->rx_ring_size = g.rx_reserve; // libdti bounds every socket's ring by it
    h->tx_ring_size = g.tx_reserve; // libdti bounds every socket's send ring by it
    h->ctx_offset = g.ctx_offset;
    h->ctx_stride = g.ctx_stride;
    h->sock_offset = g.sock_offset;
    h->data_offset = g.data_offset;
    h->data_stride = g.data_stride;
    h->pool_offset = g.pool_offset;
    h->pool_size = l.pool_size;
    h->app_ip = l.app_ip;
    std::memcpy(h->app_ip6, l.app_ip6, sizeof h->app_ip6);
    std::memcpy(h->app_ll6, l.app_ll6, sizeof h->app_ll6);
    store_rel(&h->engine_state, uint32_t{DTI_ENGINE_ALIVE});
}

// ---- buffer provider -----------------------------------------------------------------------

bool Table::provide(uint64_t user, RingMemory *out)
{
    Group *gp = group_of_tag(user);
    uint32_t si = uint32_t(user);
    if (!gp || gp->dying || gp->broken || si >= gp->slots.size())
        return false;
    Group &group = *gp;
    Slot &owner = group.slots[si];
    uint32_t ri = si;
    if (owner.state & DTI_STATE_LISTENING) {
        // Passive open: a new slot of the listener's application, not yet
        // visible to it (an embryo) until accepted.
        if (group.free_slots.empty())
            return false;
        ri = group.free_slots.back();
        group.free_slots.pop_back();
        Slot &e = group.slots[ri];
        uint32_t gen = e.gen;
        e = Slot{};
        e.gen = gen;
        e.in_free_list = false;
        e.embryo = true;
        e.parent = si;
        owner.embryos++;
        mark(group, si);
    } else if (owner.rings_out || !owner.holders) {
        return false;
    }
    Slot &r = group.slots[ri];
    r.rings_out = true;
    release_growth(group, ri); // (a free slot's growth went back already)
    r.rx_size = group.lim.rx_ring_size;
    r.rx_rebase = false;
    if (ri != si)
        r.sndbuf_set = owner.sndbuf_set; // an accepted connection takes its listener's SO_SNDBUF, as on Linux
    r.tx_size = size_tx(group, r.sndbuf_set);
    r.tx_want = 0;
    r.tx_grow_acks = 0;
    // Published here: the size changes only at the writer's TX_GROW, and the
    // state that makes the socket writable is stored (release) later, by
    // write_shared. It sits in the entry's second cache line, which the
    // publish of every event then leaves alone.
    store_rlx(&group.socks[ri].tx_size, r.tx_size);
    store_rlx(&group.socks[ri].tx_want, 0u);
    store_rlx(&group.socks[ri].tx_grow_ack, 0u);
    store_rlx(&group.socks[ri].err_seq, 0u); // a datagram socket's errors count from its rings (dti_abi.h)
    store_rlx(&group.socks[ri].err_last, 0);
    group.rings_out++;
    *out = RingMemory{group.rx_ring(ri), r.rx_size, group.tx_ring(ri), r.tx_size};
    return true;
}

// The send ring for a socket whose SO_SNDBUF is `sndbuf` (0: never set):
// the default, or the power of two holding the size set (Linux's buffer
// counts every byte queued, unacknowledged ones too, as the ring does),
// within the slot's reserve. A ring larger than the default is charged
// against max_region_bytes (refused and counted past it: the default); a
// smaller one gives nothing back (the starting sizes were checked).
uint32_t Table::size_tx(Group &group, uint32_t sndbuf)
{
    const uint32_t start = group.lim.tx_ring_size;
    if (sndbuf == 0)
        return start;
    uint32_t size = 4096;
    while (size < sndbuf && size < group.geo.tx_reserve)
        size <<= 1;
    if (size <= start)
        return size;
    const uint64_t more = size - start;
    if (group.geo.committed + group.rx_grown + group.tx_grown + more > group.lim.max_region_bytes) {
        stats_.tx_size_refusals++;
        return start;
    }
    group.tx_grown += more;
    stats_.tx_ring_sized++;
    return size;
}

void Table::want_tx(uint64_t user, const RingMemory &mem, uint32_t want)
{
    Group *gp = group_of_tag(user);
    if (!gp || gp->dying || gp->broken || !gp->base)
        return;
    Slot *sp = ring_owner(*gp, mem.rx);
    if (!sp || sp->sndbuf_set || sp->dgram) // SO_SNDBUF set: no autotuning (Linux's SOCK_SNDBUF_LOCK)
        return;
    want_tx_size(*gp, uint32_t(sp - gp->slots.data()), want);
}

void Table::want_tx_size(Group &group, uint32_t si, uint32_t want)
{
    Slot &s = group.slots[si];
    if (!s.rings_out || !s.tx_size)
        return;
    uint32_t size = s.tx_size;
    while (size < want && size < group.geo.tx_reserve)
        size <<= 1;
    if (size <= s.tx_size || size <= s.tx_want)
        return;
    s.tx_want = size;
    store_rlx(&group.socks[si].tx_want, size); // read by the writer's slow path only
}

// The slot whose receive ring starts at rx, if its rings are out.
Slot *Table::ring_owner(Group &group, const uint8_t *rx)
{
    const uint8_t *data = group.base + group.geo.data_offset;
    if (rx < data)
        return nullptr;
    uint64_t off = uint64_t(rx - data);
    uint64_t si = off / group.geo.data_stride;
    if (off % group.geo.data_stride != 0 || si >= group.slots.size() || !group.slots[si].rings_out)
        return nullptr;
    return &group.slots[si];
}

bool Table::grow_rx(uint64_t user, RingMemory *mem, uint32_t want)
{
    Group *gp = group_of_tag(user);
    if (!gp || gp->dying || gp->broken || !gp->base || !mem)
        return false;
    Group &group = *gp;
    Slot *sp = ring_owner(group, mem->rx);
    if (!sp || mem->rx_size != sp->rx_size)
        return false;
    Slot &s = *sp;
    uint32_t size = s.rx_size;
    while (size < want && size < group.geo.rx_reserve)
        size <<= 1;
    if (size <= s.rx_size)
        return false;
    const uint64_t more = size - s.rx_size;
    if (group.geo.committed + group.rx_grown + group.tx_grown + more > group.lim.max_region_bytes) {
        stats_.rx_grow_refusals++; // the transport keeps the window it has
        return false;
    }
    group.rx_grown += more;
    stats_.rx_ring_grows++;
    s.rx_size = size;
    // The ring is empty and positions run on: the next byte lands at the
    // transport's position modulo the new size, so rx_base is found again
    // (settle_rx) before anything reads the ring or tells the app of it.
    s.rx_rebase = true;
    mem->rx_size = size;
    mark(group, uint32_t(sp - group.slots.data()));
    return true;
}

// settle_rx() found the ring grown: its base for the new size, from where
// the transport writes next.
void Table::rebase_rx(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    s.rx_rebase = false;
    RingSpan v;
    if (s.has_sid && (s.dgram ? tr_.dgram_rx_view(s.sid, &v) : tr_.rx_view(s.sid, &v)) == 0 && v.p[0])
        s.rx_base = (uint32_t(v.p[0] - group.rx_ring(si)) - s.rx_consumed) & (s.rx_size - 1);
}

// A grown ring goes back to its starting size when its slot is free (no
// holder can read it), and the pages it grew into go back to the system
// (the region is a memfd): the slot's next socket starts small, and memory
// use stays what max_region_bytes was checked against.
void Table::release_growth(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    const uint32_t tx_start = group.lim.tx_ring_size;
    if (s.tx_size > tx_start) { // SO_SNDBUF's larger send ring: its pages go back too
        group.tx_grown -= s.tx_size - tx_start;
        const uintptr_t page = 4096;
        const uintptr_t from = (uintptr_t(group.tx_ring(si) + tx_start) + page - 1) & ~(page - 1);
        const uintptr_t to = uintptr_t(group.tx_ring(si) + s.tx_size) & ~(page - 1);
        if (group.owns_mapping && from < to)
            (void)madvise(reinterpret_cast<void *>(from), to - from, MADV_REMOVE);
    }
    s.tx_size = 0;
    const uint32_t start = group.lim.rx_ring_size;
    if (s.rx_size <= start)
        return;
    group.rx_grown -= s.rx_size - start;
    const uintptr_t page = 4096;
    const uintptr_t from = (uintptr_t(group.rx_ring(si) + start) + page - 1) & ~(page - 1);
    const uintptr_t to = uintptr_t(group.rx_ring(si) + s.rx_size) & ~(page - 1);
    if (group.owns_mapping && from < to)
        (void)madvise(reinterpret_cast<void *>(from), to - from, MADV_REMOVE); // slow path: a socket's end
    s.rx_size = start;
}

void Table::reclaim(uint64_t user, const RingMemory &mem)
{
    Group *gp = group_of_tag(user);
    if (!gp || !gp->base)
        return;
    Group &group = *gp;
    Slot *sp = ring_owner(group, mem.rx);
    if (!sp)
        return;
    Slot &s = *sp;
    uint32_t si = uint32_t(sp - group.slots.data());
    s.rings_out = false;
    group.rings_out--;
    if (s.embryo) {
        // Died before anyone accepted it.
        s.embryo = false;
        Slot &l = group.slots[s.parent];
        if (l.embryos > 0)
            l.embryos--;
        mark(group, s.parent);
    }
    maybe_free(group, si);
    // A dying attachment is finalized from poll() or detach(), never from
    // inside a transport call that may be iterating over it.
}

void Table::maybe_free(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    if (s.holders || s.has_sid || s.rings_out || s.embryo || s.in_free_list)
        return;
    release_growth(group, si); // nobody can read the ring any more
    store_rlx(&group.socks[si].name6, 0u); // the slot's next socket starts as no IPv6 one (setup.cc)
    s.in_free_list = true;
    group.free_slots.push_back(si);
}

} // namespace dti::engine::detail

namespace dti::engine {

uint64_t region_bytes(const Limits &limits)
{
    detail::Geometry g;
    return detail::geometry(limits, &g) ? g.size : 0;
}

uint64_t region_bytes_in_use(const Limits &limits)
{
    detail::Geometry g;
    return detail::geometry(limits, &g) ? g.committed : 0;
}

void layout_region(void *region, uint64_t size, const Limits &limits)
{
    detail::Geometry g;
    if (detail::geometry(limits, &g) && size >= g.size)
        detail::layout_region_impl(region, limits, g);
}

} // namespace dti::engine
