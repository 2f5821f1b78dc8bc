// The DPDK port's transmit offload fields (ppe/src/mbuf_packets.h
// mbuf_tx_offload, what MbufIo::transmit sets per frame), on an mbuf on the
// stack: no EAL, no port. IPv4 frames as before (TX_IPV4, l3_len from the
// IHL, IP_CKSUM when asked); IPv6 ones (issue 31) TX_IPV6, l3_len 40, never
// IP_CKSUM; TSO with l4_len and the segment size for both.
#include "mbuf_packets.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace ppe {
namespace {

// Ethernet + IP + TCP with timestamps (32 bytes) + payload; v6 or IPv4.
std::vector<uint8_t> frame(bool v6, uint32_t payload)
{
    std::vector<uint8_t> f(14 + (v6 ? 40 : 20) + 32 + payload, 0);
    uint8_t *ip = f.data() + 14;
    if (v6) {
        f[12] = 0x86, f[13] = 0xdd;
        ip[0] = 0x60;
        ip[6] = 6;
    } else {
        f[12] = 0x08;
        ip[0] = 0x45;
        ip[9] = 6;
    }
    ip[v6 ? 40 + 12 : 20 + 12] = 8 << 4;
    return f;
}

rte_mbuf offloaded(std::vector<uint8_t> &f, uint32_t flags)
{
    rte_mbuf mb;
    std::memset(&mb, 0, sizeof mb);
    mars::PacketRef r{nullptr, f.data(), uint16_t(f.size()), 0, flags};
    mbuf_tx_offload(&mb, r);
    return mb;
}

TEST(TxOffload, Ipv4ChecksumsAndTso)
{
    std::vector<uint8_t> f = frame(false, 10 * 1448);
    rte_mbuf mb = offloaded(f, mars::kTxIpCsum | mars::kTxTcpCsum);
    EXPECT_EQ(mb.ol_flags, RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_TCP_CKSUM);
    EXPECT_EQ(mb.l2_len, 14u);
    EXPECT_EQ(mb.l3_len, 20u);
    mb = offloaded(f, mars::kTxIpCsum | mars::kTxTcpCsum | mars::kTxTcpSeg | mars::tx_seg_flags(1448));
    EXPECT_EQ(mb.ol_flags,
              RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_TCP_CKSUM | RTE_MBUF_F_TX_TCP_SEG);
    EXPECT_EQ(mb.l4_len, 32u);
    EXPECT_EQ(mb.tso_segsz, 1448u);
}

TEST(TxOffload, Ipv6IsTxIpv6WithL3Len40AndNoIpChecksum)
{
    std::vector<uint8_t> f = frame(true, 10 * 1428);
    rte_mbuf mb = offloaded(f, mars::kTxTcpCsum);
    EXPECT_EQ(mb.ol_flags, RTE_MBUF_F_TX_IPV6 | RTE_MBUF_F_TX_TCP_CKSUM);
    EXPECT_EQ(mb.l2_len, 14u);
    EXPECT_EQ(mb.l3_len, 40u);
    mb = offloaded(f, mars::kTxTcpCsum | mars::kTxTcpSeg | mars::tx_seg_flags(1428));
    EXPECT_EQ(mb.ol_flags, RTE_MBUF_F_TX_IPV6 | RTE_MBUF_F_TX_TCP_CKSUM | RTE_MBUF_F_TX_TCP_SEG);
    EXPECT_EQ(mb.l3_len, 40u);
    EXPECT_EQ(mb.l4_len, 32u) << "the TCP header read after the IPv6 header";
    EXPECT_EQ(mb.tso_segsz, 1428u);
}

} // namespace
} // namespace ppe
