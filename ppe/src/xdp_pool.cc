// ppe/src/xdp_pool.cc: see xdp_pool.h.
#include "xdp_pool.h"

#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_mempool.h>

#include <unistd.h>

namespace ppe {

rte_mempool *create_xdp_pool(const std::string &name, uint32_t n, uint32_t cache, uint16_t data_room, int socket)
{
    // rte_pktmbuf_pool_create() takes no mempool flags: the same steps with
    // RTE_MEMPOOL_F_NO_IOVA_CONTIG (pg_sz 0 in the populate helper: no
    // skipping to the next page between objects).
    rte_pktmbuf_pool_private priv{};
    priv.mbuf_data_room_size = data_room;
    priv.mbuf_priv_size = 0;
    rte_mempool *mp = rte_mempool_create_empty(name.c_str(), n, unsigned(sizeof(rte_mbuf) + data_room), cache,
                                               unsigned(sizeof priv), socket, RTE_MEMPOOL_F_NO_IOVA_CONTIG);
    if (!mp) return nullptr;
    if (rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr) != 0) {
        rte_mempool_free(mp);
        rte_errno = EINVAL;
        return nullptr;
    }
    rte_pktmbuf_pool_init(mp, &priv);
    const int rc = rte_mempool_populate_default(mp);
    if (rc < 0) {
        rte_mempool_free(mp);
        rte_errno = -rc;
        return nullptr;
    }
    rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
    return mp;
}

namespace {

struct UmemCheck {
    uintptr_t base = 0;     // the UMEM's start (the first chunk, page-aligned)
    uint64_t size = 0;      // its length as net_af_xdp computes it
    uint64_t frame = 0;     // one object with its header and trailer (the UMEM chunk)
    uint32_t outside = 0;   // objects not wholly inside
    uintptr_t first_outside = 0;
};

void check_object(rte_mempool *mp, void *opaque, void *obj, unsigned)
{
    auto *c = static_cast<UmemCheck *>(opaque);
    // The PMD's address of an mbuf: its object header's offset in the UMEM.
    const uintptr_t head = reinterpret_cast<uintptr_t>(obj) - mp->header_size;
    if (head >= c->base && head - c->base + c->frame <= c->size) return;
    if (c->outside++ == 0) c->first_outside = head;
}

} // namespace

bool xdp_umem_covers_pool(const rte_mempool *pool, std::string *why)
{
    auto *mp = const_cast<rte_mempool *>(pool); // the iterators take no const pool
    const rte_mempool_memhdr *first = STAILQ_FIRST(&mp->mem_list);
    if (!first || mp->populated_size == 0) {
        *why = "the pool has no memory";
        return false;
    }
    // DPDK 22.11's xdp_umem_configure(): base = the first memory chunk rounded
    // down to a page; size = populated_size x rte_mempool_calc_obj_size() +
    // that rounding.
    UmemCheck c;
    const uintptr_t chunk = reinterpret_cast<uintptr_t>(first->addr);
    c.base = chunk & ~uintptr_t(getpagesize() - 1);
    c.frame = rte_mempool_calc_obj_size(mp->elt_size, mp->flags, nullptr);
    c.size = uint64_t(mp->populated_size) * c.frame + (chunk - c.base);
    rte_mempool_obj_iter(mp, check_object, &c);
    if (c.outside == 0) return true;
    *why = std::to_string(c.outside) + " of its " + std::to_string(mp->populated_size) +
           " buffers lie outside the " + std::to_string(c.size) + " bytes net_af_xdp registers with the kernel (the first at offset " +
           std::to_string(int64_t(c.first_outside - c.base)) + "; the pool has " + std::to_string(mp->nb_mem_chunks) +
           " memory chunk(s))";
    return false;
}

} // namespace ppe
