// The vnet port's header work (ppe/src/vnet_port.h), no socket, no root:
// what a frame MARS made is sent with (the virtio_net_hdr for a checksum
// request and a TSO frame, the fields the port fills: the IPv4 header
// checksum, the TCP length in a TSO frame's pseudo-header seed, as the
// kernel's CHECKSUM_PARTIAL and GSO want it), and what a received frame's
// header says (the checksum verdict, the segments an LRO frame stands for).
#include "vnet_port.h"

#include <mars/checksum_offload.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace ppe {
namespace {

constexpr uint32_t kSrc = 0xc6120002, kDst = 0xc6120001; // 198.18.0.2 -> 198.18.0.1

uint32_t sum16(const uint8_t *p, size_t n, uint32_t s = 0)
{
    for (size_t i = 0; i + 1 < n; i += 2) s += uint32_t(p[i]) << 8 | p[i + 1];
    if (n & 1) s += uint32_t(p[n - 1]) << 8;
    return s;
}
uint16_t fold(uint32_t s)
{
    while (s >> 16) s = (s & 0xffff) + (s >> 16);
    return uint16_t(s);
}

// Ethernet + IPv4 (20) + TCP with timestamps (32) + payload, as MARS hands
// over a frame with the offload flags: IP checksum 0, TCP checksum field the
// seed (without the TCP length for TSO).
std::vector<uint8_t> frame(uint32_t payload, bool tso)
{
    std::vector<uint8_t> f(14 + 20 + 32 + payload, 0);
    f[12] = 0x08;
    uint8_t *ip = f.data() + 14;
    ip[0] = 0x45;
    const uint16_t total = uint16_t(20 + 32 + payload);
    ip[2] = uint8_t(total >> 8);
    ip[3] = uint8_t(total);
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = 6;
    for (int i = 0; i < 4; i++) {
        ip[12 + i] = uint8_t(kSrc >> (24 - 8 * i));
        ip[16 + i] = uint8_t(kDst >> (24 - 8 * i));
    }
    uint8_t *tcp = ip + 20;
    tcp[12] = 8 << 4;
    tcp[13] = 0x10;
    const uint16_t seed =
        mars::checksum_offload::tcp_pseudo_header_seed(kSrc, kDst, tso ? 0 : uint16_t(32 + payload));
    tcp[16] = uint8_t(seed >> 8);
    tcp[17] = uint8_t(seed);
    for (uint32_t i = 0; i < payload; i++) f[66 + i] = uint8_t(i * 7);
    return f;
}

TEST(VnetPort, PlainFrameGoesWithoutHeaderFlags)
{
    std::vector<uint8_t> f = frame(100, false);
    mars::PacketRef r{nullptr, f.data(), uint16_t(f.size()), 0, 0};
    virtio_net_hdr h;
    EXPECT_EQ(vnet_tx_prepare(r, &h), 1u);
    EXPECT_EQ(h.flags, 0);
    EXPECT_EQ(h.gso_type, VIRTIO_NET_HDR_GSO_NONE);
}

TEST(VnetPort, ChecksumRequestBecomesNeedsCsumAndTheIpChecksumIsFilled)
{
    std::vector<uint8_t> f = frame(1448, false);
    mars::PacketRef r{nullptr, f.data(), uint16_t(f.size()), 0, mars::kTxIpCsum | mars::kTxTcpCsum};
    virtio_net_hdr h;
    EXPECT_EQ(vnet_tx_prepare(r, &h), 1u);
    EXPECT_EQ(h.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
    EXPECT_EQ(h.csum_start, 34);
    EXPECT_EQ(h.csum_offset, 16);
    EXPECT_EQ(h.gso_type, VIRTIO_NET_HDR_GSO_NONE);
    EXPECT_EQ(fold(sum16(f.data() + 14, 20)), 0xffff) << "the IPv4 header checksum does not hold";
    // What the kernel then does (the sum from csum_start, inverted) gives a
    // checksum that holds over pseudo-header + segment.
    uint8_t *tcp = f.data() + 34;
    const uint16_t c = uint16_t(~fold(sum16(tcp, f.size() - 34)));
    tcp[16] = uint8_t(c >> 8);
    tcp[17] = uint8_t(c);
    const uint32_t pseudo = (kSrc >> 16) + (kSrc & 0xffff) + (kDst >> 16) + (kDst & 0xffff) + 6 + (f.size() - 34);
    EXPECT_EQ(fold(sum16(tcp, f.size() - 34, pseudo)), 0xffff);
}

TEST(VnetPort, TsoFrameBecomesGsoTcpv4WithTheLengthInTheSeed)
{
    const uint32_t mss = 1448, payload = 45 * mss;
    std::vector<uint8_t> f = frame(payload, true);
    mars::PacketRef r{nullptr, f.data(), uint16_t(f.size()), 0,
                      mars::kTxIpCsum | mars::kTxTcpCsum | mars::kTxTcpSeg | mars::tx_seg_flags(uint16_t(mss))};
    virtio_net_hdr h;
    EXPECT_EQ(vnet_tx_prepare(r, &h), 45u);
    EXPECT_EQ(h.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
    EXPECT_EQ(h.gso_type, VIRTIO_NET_HDR_GSO_TCPV4);
    EXPECT_EQ(h.gso_size, mss);
    EXPECT_EQ(h.hdr_len, 66);
    EXPECT_EQ(fold(sum16(f.data() + 14, 20)), 0xffff);
    const uint16_t want = mars::checksum_offload::tcp_pseudo_header_seed(kSrc, kDst, uint16_t(32 + payload));
    EXPECT_EQ(uint16_t(f[34 + 16] << 8 | f[34 + 17]), want)
        << "the kernel's GSO wants the pseudo-header sum with the whole TCP length";
}

TEST(VnetPort, TsoFrameWithItsPayloadByReferenceCountsTheAttachedBytes)
{
    // tx_zerocopy: the frame's own buffer holds the 66 header bytes, the
    // payload rides attached (kTxExternal); the GSO fields and the seed's
    // TCP length are those of the whole frame on the wire.
    const uint32_t mss = 1448, payload = 45 * mss;
    std::vector<uint8_t> f = frame(payload, true);
    mars::PacketRef r{nullptr, f.data(), 66, 0,
                      mars::kTxIpCsum | mars::kTxTcpCsum | mars::kTxTcpSeg | mars::kTxExternal |
                          mars::tx_seg_flags(uint16_t(mss))};
    virtio_net_hdr h;
    EXPECT_EQ(vnet_tx_prepare(r, &h, payload), 45u);
    EXPECT_EQ(h.gso_type, VIRTIO_NET_HDR_GSO_TCPV4);
    EXPECT_EQ(h.gso_size, mss);
    EXPECT_EQ(h.hdr_len, 66);
    const uint16_t want = mars::checksum_offload::tcp_pseudo_header_seed(kSrc, kDst, uint16_t(32 + payload));
    EXPECT_EQ(uint16_t(f[34 + 16] << 8 | f[34 + 17]), want);
}

TEST(VnetPort, TsoFrameOfOneSegmentIsSentPlain)
{
    std::vector<uint8_t> f = frame(1000, true);
    mars::PacketRef r{nullptr, f.data(), uint16_t(f.size()), 0,
                      mars::kTxIpCsum | mars::kTxTcpCsum | mars::kTxTcpSeg | mars::tx_seg_flags(1448)};
    virtio_net_hdr h;
    EXPECT_EQ(vnet_tx_prepare(r, &h), 1u);
    EXPECT_EQ(h.gso_type, VIRTIO_NET_HDR_GSO_NONE);
    EXPECT_EQ(h.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
    const uint16_t want = mars::checksum_offload::tcp_pseudo_header_seed(kSrc, kDst, 32 + 1000);
    EXPECT_EQ(uint16_t(f[34 + 16] << 8 | f[34 + 17]), want);
}

// Ethernet + IPv6 (40) + TCP with timestamps (32) + payload, as MARS hands
// over an IPv6 frame with the offload flags (mars/checksum_offload.h): no IP
// checksum, the TCP checksum field the IPv6 pseudo-header seed (without the
// TCP length for TSO).
const uint8_t kSrc6[16] = {0x20, 0x01, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
const uint8_t kDst6[16] = {0x20, 0x01, 0, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

std::vector<uint8_t> frame6(uint32_t payload, bool tso)
{
    std::vector<uint8_t> f(14 + 40 + 32 + payload, 0);
    f[12] = 0x86, f[13] = 0xdd;
    uint8_t *ip = f.data() + 14;
    ip[0] = 0x60;
    const uint16_t plen = uint16_t(32 + payload);
    ip[4] = uint8_t(plen >> 8);
    ip[5] = uint8_t(plen);
    ip[6] = 6;
    ip[7] = 64;
    std::memcpy(ip + 8, kSrc6, 16);
    std::memcpy(ip + 24, kDst6, 16);
    uint8_t *tcp = ip + 40;
    tcp[12] = 8 << 4;
    tcp[13] = 0x10;
    const uint16_t seed = mars::checksum_offload::tcp6_pseudo_header_seed(kSrc6, kDst6, tso ? 0 : 32 + payload);
    tcp[16] = uint8_t(seed >> 8);
    tcp[17] = uint8_t(seed);
    for (uint32_t i = 0; i < payload; i++) f[86 + i] = uint8_t(i * 7);
    return f;
}

// IPv6: NEEDS_CSUM from the TCP header at 54, the IPv6 header untouched (no
// checksum to fill: the bytes where IPv4's would be are the source address).
TEST(VnetPort, Ipv6ChecksumRequestStartsAfterTheIpv6Header)
{
    std::vector<uint8_t> f = frame6(1428, false);
    const std::vector<uint8_t> ip_before(f.begin() + 14, f.begin() + 54);
    mars::PacketRef r{nullptr, f.data(), uint16_t(f.size()), 0, mars::kTxTcpCsum};
    virtio_net_hdr h;
    EXPECT_EQ(vnet_tx_prepare(r, &h), 1u);
    EXPECT_EQ(h.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
    EXPECT_EQ(h.csum_start, 54);
    EXPECT_EQ(h.csum_offset, 16);
    EXPECT_EQ(h.gso_type, VIRTIO_NET_HDR_GSO_NONE);
    EXPECT_TRUE(std::equal(ip_before.begin(), ip_before.end(), f.begin() + 14)) << "the IPv6 header changed";
    // The kernel's completion (the sum from csum_start, inverted) holds over
    // the IPv6 pseudo-header + segment (RFC 8200 8.1).
    uint8_t *tcp = f.data() + 54;
    const uint32_t len = uint32_t(f.size() - 54);
    const uint16_t c = uint16_t(~fold(sum16(tcp, len)));
    tcp[16] = uint8_t(c >> 8);
    tcp[17] = uint8_t(c);
    const uint32_t pseudo = sum16(kSrc6, 16, sum16(kDst6, 16)) + 6 + len;
    EXPECT_EQ(fold(sum16(tcp, len, pseudo)), 0xffff);
}

TEST(VnetPort, Ipv6TsoFrameBecomesGsoTcpv6WithTheLengthInTheSeed)
{
    const uint32_t mss = 1428, payload = 45 * mss;
    std::vector<uint8_t> f = frame6(payload, true);
    mars::PacketRef r{nullptr, f.data(), uint16_t(f.size()), 0,
                      mars::kTxTcpCsum | mars::kTxTcpSeg | mars::tx_seg_flags(uint16_t(mss))};
    virtio_net_hdr h;
    EXPECT_EQ(vnet_tx_prepare(r, &h), 45u);
    EXPECT_EQ(h.flags, VIRTIO_NET_HDR_F_NEEDS_CSUM);
    EXPECT_EQ(h.gso_type, VIRTIO_NET_HDR_GSO_TCPV6);
    EXPECT_EQ(h.gso_size, mss);
    EXPECT_EQ(h.hdr_len, 86);
    EXPECT_EQ(h.csum_start, 54);
    const uint16_t want = mars::checksum_offload::tcp6_pseudo_header_seed(kSrc6, kDst6, 32 + payload);
    EXPECT_EQ(uint16_t(f[54 + 16] << 8 | f[54 + 17]), want)
        << "the kernel's GSO wants the pseudo-header sum with the whole TCP length";
}

TEST(VnetPort, ReceiveVerdictsAndLroSegments)
{
    std::vector<uint8_t> f = frame(45 * 1448, false);
    uint32_t segs = 99;
    virtio_net_hdr h{};
    EXPECT_EQ(vnet_rx_flags(h, f.data(), uint32_t(f.size()), &segs), 0u) << "no flag: MARS must check";
    EXPECT_EQ(segs, 0u);
    h.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    EXPECT_EQ(vnet_rx_flags(h, f.data(), uint32_t(f.size()), &segs), uint32_t(mars::kRxL4CsumGood));
    h.flags = VIRTIO_NET_HDR_F_DATA_VALID;
    EXPECT_EQ(vnet_rx_flags(h, f.data(), uint32_t(f.size()), &segs), uint32_t(mars::kRxL4CsumGood));
    h.gso_type = VIRTIO_NET_HDR_GSO_TCPV4;
    h.gso_size = 1448;
    vnet_rx_flags(h, f.data(), uint32_t(f.size()), &segs);
    EXPECT_EQ(segs, 45u);
    h.gso_type = VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_ECN;
    vnet_rx_flags(h, f.data(), uint32_t(f.size()) - 1, &segs);
    EXPECT_EQ(segs, 45u); // a partial last segment counts
}

// An IPv6 super-frame (the peer's TCP over IPv6: GSO_TCPV6): the same
// verdicts, and its segments counted past the 40-byte IPv6 header (not an
// IPv4 IHL read from the traffic class).
TEST(VnetPort, ReceiveIpv6LroSegments)
{
    const uint32_t mss = 1428, payload = 45 * mss;
    std::vector<uint8_t> f(14 + 40 + 32 + payload, 0);
    f[12] = 0x86;
    f[13] = 0xdd;
    f[14] = 0x6f; // version 6, a traffic class whose high nibble an IHL would misread
    f[15] = 0xf0;
    f[18] = uint8_t((32 + payload) >> 8);
    f[19] = uint8_t(32 + payload);
    f[20] = 6;
    f[21] = 64;
    f[54 + 12] = 8 << 4;
    f[54 + 13] = 0x10;
    virtio_net_hdr h{};
    h.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    h.gso_type = 4; // VIRTIO_NET_HDR_GSO_TCPV6 (linux/virtio_net.h; vnet_port.h names what transmit uses)
    h.gso_size = uint16_t(mss);
    uint32_t segs = 0;
    EXPECT_EQ(vnet_rx_flags(h, f.data(), uint32_t(f.size()), &segs), uint32_t(mars::kRxL4CsumGood));
    EXPECT_EQ(segs, 45u);
    h.flags = VIRTIO_NET_HDR_F_DATA_VALID;
    EXPECT_EQ(vnet_rx_flags(h, f.data(), uint32_t(f.size()) - 1, &segs), uint32_t(mars::kRxL4CsumGood));
    EXPECT_EQ(segs, 45u); // a partial last segment counts
    h.flags = 0;
    EXPECT_EQ(vnet_rx_flags(h, f.data(), uint32_t(f.size()), &segs), 0u) << "no flag: MARS must check";
}

} // namespace
} // namespace ppe
