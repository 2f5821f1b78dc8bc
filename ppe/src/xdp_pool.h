// ppe/src/xdp_pool.h: packet buffers that DPDK's net_af_xdp can lend to the
// kernel, and how many buffers that device holds.
//
// net_af_xdp (DPDK 22.11) registers the queue's mempool as the AF_XDP socket's
// UMEM and hands mbufs to the kernel by their offset in it (fill ring, tx
// ring). It computes the UMEM as [first memory chunk of the pool, rounded down
// to a page) + populated_size x object size: it assumes the objects lie back
// to back. A pool made by rte_pktmbuf_pool_create() does not keep that
// promise: objects never cross a page boundary there (4 KiB pages without
// hugepages: one 2.4 KiB mbuf per page; 2 MiB hugepages: a gap at each page's
// end), so its last objects lie beyond the registered UMEM. The kernel takes
// such a fill-ring entry, finds it out of bounds and drops it (the buffer is
// gone for good); such a tx descriptor is counted invalid and never completed
// (the frame is not sent, the mbuf never comes back). Each lost fill entry is
// one buffer fewer for receiving: once the 2,048 are gone the socket receives
// nothing ever again, and nothing makes the PMD refill (it refills only what
// it receives). See ppe/README.md, "net_af_xdp's buffers".
#pragma once

#include <cstdint>
#include <string>

struct rte_mempool;

namespace ppe {

// Buffers net_af_xdp (DPDK 22.11) keeps on a queue at all times, whatever
// rx_desc/tx_desc say: its fill ring is given ETH_AF_XDP_DFLT_NUM_DESCS
// (2,048) mbufs at setup and each received frame is replaced one for one, so
// fill ring + rx ring + the kernel hold exactly that many; sent mbufs wait in
// the tx ring (tx_desc) and then in the completion ring (2,048 entries; the
// kernel takes no tx descriptor without a completion slot) until the PMD's
// next tx burst frees them.
constexpr uint32_t kAfXdpFillBuffers = 2048;
constexpr uint32_t kAfXdpCompletionEntries = 2048;

// A pktmbuf pool (data rooms of data_room bytes, headroom included) whose
// objects lie back to back in one virtually contiguous area, as net_af_xdp
// assumes: RTE_MEMPOOL_F_NO_IOVA_CONTIG lets an object cross a page boundary
// (AF_XDP devices never DMA from it; the kernel copies or maps pages). Null
// with rte_errno set when the memory is not there.
rte_mempool *create_xdp_pool(const std::string &name, uint32_t n, uint32_t cache, uint16_t data_room,
                             int socket);

// Whether every object of the pool lies wholly inside the UMEM net_af_xdp
// (DPDK 22.11) will register for it; when not, *why says how many do not and
// where the pool's memory is. The exact test of the bound the PMD assumes.
bool xdp_umem_covers_pool(const rte_mempool *pool, std::string *why);

} // namespace ppe
