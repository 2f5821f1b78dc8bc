// mars/checksum_offload.h: the transmit checksum-offload contract between
// MARS and whoever sends its frames (the PPE's DPDK port and vnet port, the
// test wire), for IPv4 frames and (below) IPv6 ones.
//
// MARS asks for an offload only when the port reported it in
// PacketIo::offloads() (kOffloadTxIpCsum, kOffloadTxTcpCsum, packet.h), and
// then marks each frame that needs it with kTxIpCsum / kTxTcpCsum in
// PacketRef::flags. Such a frame is Ethernet (14 bytes, no VLAN tag), IPv4
// (header length from IHL) and TCP, and its checksum fields hold:
//
//   kTxIpCsum:  the IPv4 header checksum field is 0; the sender computes it.
//   kTxTcpCsum: the TCP checksum field holds the ones-complement sum of the
//               IPv4 pseudo-header (source, destination, zero, protocol 6,
//               TCP length = header + payload), folded to 16 bits and NOT
//               inverted, in memory (network) order; the TCP header and
//               payload are not in it. The sender adds them and inverts.
//
// That is what DPDK expects of a frame sent with RTE_MBUF_F_TX_TCP_CKSUM
// (rte_ipv4_phdr_cksum(): the pseudo-header sum pre-filled), so the PPE
// (ppe/src/dpdk.cc) only sets the mbuf's ol_flags, l2_len and l3_len and
// never touches the bytes. A sender that completes the checksum in software
// (tests/unit/mars/sim SimPort) may recompute it from scratch instead.
//
// TCP segmentation offload (kTxTcpSeg, only when the port reported
// kOffloadTxTcpSeg; always together with kTxIpCsum and kTxTcpCsum): one
// Ethernet + IPv4 + TCP header (options included) and the payload of several
// segments; tx_seg_size() (the top bits of PacketRef::flags) is the payload per
// segment (the MSS). The
// IPv4 total length covers the whole frame (at most 65535), the IPv4
// checksum is 0, and the TCP checksum field holds the pseudo-header sum
// WITHOUT the TCP length (tcp_len 0 below), as DPDK's rte_ipv4_phdr_cksum()
// gives for RTE_MBUF_F_TX_TCP_SEG. The header's sequence number is the first
// segment's; PSH and FIN (set only when the last segment must carry them)
// belong on the last segment alone. The port sends each segment with the
// same header bytes but: sequence number advanced by the payload before it,
// IPv4 total length and both checksums of that segment, PSH/FIN cleared
// except on the last. (Hardware NICs also advance the IPv4 ID per segment;
// MARS sends DF with ID 0, which RFC 6864 lets receivers ignore.)
//
// IPv6 frames (issue 31): Ethernet (14 bytes, EtherType 0x86dd), the 40-byte
// IPv6 header with TCP right after it (MARS sends no extension headers), and
// TCP. There is no IP header checksum: kTxIpCsum is never set on one, and the
// port need not offer kOffloadTxIpCsum for TCP checksum offload or TSO over
// IPv6 (MARS asks for kOffloadTxTcpSeg | kOffloadTxTcpCsum). kTxTcpCsum: the
// TCP checksum field holds the folded, uninverted sum of the IPv6
// pseudo-header (RFC 8200 8.1: source and destination addresses, the
// upper-layer length = TCP header + payload, next header 6), in memory order,
// as rte_ipv6_phdr_cksum() gives; kTxTcpSeg: the IPv6 payload length covers
// the whole frame's TCP header and payload (at most 65535), and the seed
// leaves the length out (tcp_len 0), as rte_ipv6_phdr_cksum() does for
// RTE_MBUF_F_TX_TCP_SEG. The sender tells the families apart by the IP
// version (the first byte after Ethernet): DPDK RTE_MBUF_F_TX_IPV6 with
// l3_len 40 (never RTE_MBUF_F_TX_IP_CKSUM); virtio_net_hdr GSO_TCPV6 with
// csum_start 54. Each segment the port cuts has its own payload length and
// checksum, the rest as for IPv4 (no ID to advance: IPv6 has none).
//
// Without the offload MARS fills both fields completely (computed in the same
// pass as the payload copy), and the flags are clear.
#pragma once

#include <cstdint>

namespace mars::checksum_offload {

// Where the fields are in an offloaded frame.
constexpr uint32_t kL2Len = 14;            // Ethernet header, no VLAN tag
constexpr uint32_t kIpCsumOffset = 10;     // in the IPv4 header
constexpr uint32_t kIp6Len = 40;           // the IPv6 header (TCP follows it)
constexpr uint32_t kTcpCsumOffset = 16;    // in the TCP header
constexpr uint8_t kProtoTcp = 6;

// The value a kTxTcpCsum frame carries in its TCP checksum field, as a
// number (read the field big-endian to compare): the folded, uninverted
// pseudo-header sum. Addresses in host order; tcp_len is header + payload.
constexpr uint16_t tcp_pseudo_header_seed(uint32_t src_ip, uint32_t dst_ip, uint16_t tcp_len)
{
    uint32_t sum = (src_ip >> 16) + (src_ip & 0xffff) + (dst_ip >> 16) + (dst_ip & 0xffff) + kProtoTcp + tcp_len;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

// The IPv6 twin: src and dst are the 16-byte addresses in network order.
constexpr uint16_t tcp6_pseudo_header_seed(const uint8_t *src, const uint8_t *dst, uint32_t tcp_len)
{
    uint32_t sum = kProtoTcp + (tcp_len >> 16) + (tcp_len & 0xffff);
    for (int i = 0; i < 16; i += 2) sum += uint32_t(src[i] << 8 | src[i + 1]) + uint32_t(dst[i] << 8 | dst[i + 1]);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

} // namespace mars::checksum_offload
