// ppe/src/mbuf_packets.h: DPDK mbufs as MARS packets. The allocation and
// release every port implementation (MbufIo, dpdk.h; VnetIo, vnet_port.h)
// does the same way: a PacketRef's handle is its rte_mbuf, its data the
// mbuf's first byte, its room the mbuf's tailroom. Inline: these run per
// burst on the packet path.
#pragma once

#include <mars/checksum_offload.h>
#include <mars/packet.h>

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>

namespace ppe {

// The PacketRef of an empty mbuf to write a frame into.
inline mars::PacketRef packet_to_fill(rte_mbuf *m)
{
    return mars::PacketRef{m, rte_pktmbuf_mtod(m, uint8_t *), 0, uint16_t(rte_pktmbuf_tailroom(m)), 0};
}

// Up to n (at most 256) empty packets from pool; fewer when it runs short.
inline uint16_t alloc_packets(rte_mempool *pool, mars::PacketRef *out, uint16_t n)
{
    rte_mbuf *m[256];
    if (n > 256) n = 256;
    // Bulk is all-or-nothing; when the pool runs short take what is left.
    uint16_t got = n;
    if (rte_pktmbuf_alloc_bulk(pool, m, n) != 0) {
        got = 0;
        while (got < n && (m[got] = rte_pktmbuf_alloc(pool)) != nullptr) got++;
    }
    for (uint16_t i = 0; i < got; i++) out[i] = packet_to_fill(m[i]);
    return got;
}

// Up to n packets one by one from pool (large buffers, few at a time: the
// TSO pools); none when there is no pool.
inline uint16_t alloc_packets_each(rte_mempool *pool, mars::PacketRef *out, uint16_t n)
{
    uint16_t got = 0;
    for (; pool && got < n; got++) {
        rte_mbuf *m = rte_pktmbuf_alloc(pool);
        if (!m) break;
        out[got] = packet_to_fill(m);
    }
    return got;
}

// Gives n packets' mbufs back to their pools, in bulk.
inline void free_packets(mars::PacketRef *frames, uint16_t n)
{
    rte_mbuf *m[256];
    while (n > 0) {
        const uint16_t k = n > 256 ? 256 : n;
        for (uint16_t i = 0; i < k; i++) m[i] = static_cast<rte_mbuf *>(frames[i].handle);
        rte_pktmbuf_free_bulk(m, k);
        frames += k;
        n = uint16_t(n - k);
    }
}

// Transmit by reference (PacketIo::attach_external): a second mbuf from
// pool, attached to `len` bytes at `payload` (an application's send ring)
// as an external buffer and chained after the frame's header mbuf. Its
// shared info lives in that mbuf's own unused data room (untouched by the
// attach; the mbuf goes back to the pool only after the callback ran). The
// free callback, run where the chain is freed (the driver's transmit, or
// the vnet port's after sendmmsg), counts *refs down by one. The IOVA is
// the address (VA mode; a port whose device reads by DMA is not offered
// this, see Port::open). False: no mbuf left (the caller copies).
inline void external_done(void *, void *refs) { --*static_cast<uint32_t *>(refs); }
inline bool attach_external_mbuf(rte_mempool *pool, mars::PacketRef &frame, const uint8_t *payload, uint16_t len,
                                 uint32_t *refs)
{
    rte_mbuf *ext = rte_pktmbuf_alloc(pool);
    if (!ext) return false;
    auto *shinfo = reinterpret_cast<rte_mbuf_ext_shared_info *>(
        RTE_PTR_ALIGN_CEIL(static_cast<uint8_t *>(ext->buf_addr), alignof(rte_mbuf_ext_shared_info)));
    shinfo->free_cb = external_done;
    shinfo->fcb_opaque = refs;
    rte_mbuf_ext_refcnt_set(shinfo, 1);
    void *addr = const_cast<uint8_t *>(payload);
    rte_pktmbuf_attach_extbuf(ext, addr, rte_iova_t(uintptr_t(addr)), len, shinfo);
    ext->data_len = len;
    ext->pkt_len = len;
    rte_mbuf *head = static_cast<rte_mbuf *>(frame.handle);
    head->next = ext;
    head->nb_segs = 2;
    frame.flags |= mars::kTxExternal;
    return true;
}

// The mbuf's transmit offload fields for a frame that asks for checksum
// offload or TSO (kTxIpCsum / kTxTcpCsum / kTxTcpSeg): the frame's fields
// already hold what DPDK wants (mars/checksum_offload.h), so only the
// lengths and flags are set. IPv4 or IPv6 by the IP version nibble (the
// byte IPv4 reads for its IHL anyway): RTE_MBUF_F_TX_IPV6 with l3_len 40
// (TCP right after the IPv6 header: MARS sends no extension header) and never
// IP_CKSUM (IPv6 has none); IPv4 as before. Exposed for the unit tests
// (tests/unit/ppe/tx_offload_test.cc).
inline void mbuf_tx_offload(rte_mbuf *mb, const mars::PacketRef &f)
{
    const uint8_t *ip = f.data + mars::checksum_offload::kL2Len;
    mb->l2_len = mars::checksum_offload::kL2Len;
    if (__builtin_expect((ip[0] >> 4) == 6, 0)) {
        mb->l3_len = mars::checksum_offload::kIp6Len;
        mb->ol_flags |= RTE_MBUF_F_TX_IPV6;
    } else {
        mb->l3_len = uint16_t((ip[0] & 0x0f) * 4);
        mb->ol_flags |= RTE_MBUF_F_TX_IPV4;
        if (f.flags & mars::kTxIpCsum) mb->ol_flags |= RTE_MBUF_F_TX_IP_CKSUM;
    }
    if (f.flags & mars::kTxTcpCsum) mb->ol_flags |= RTE_MBUF_F_TX_TCP_CKSUM;
    if (f.flags & mars::kTxTcpSeg) {
        // TSO: the TCP checksum field holds the pseudo-header sum without
        // the length, as DPDK wants for TCP_SEG (either family).
        mb->ol_flags |= RTE_MBUF_F_TX_TCP_SEG;
        mb->l4_len = uint16_t((ip[mb->l3_len + 12] >> 4) * 4);
        mb->tso_segsz = mars::tx_seg_size(f);
    }
}

} // namespace ppe
