// wire.h: on-the-wire header layouts (Ethernet II, ARP, IPv4, ICMP, TCP, UDP) and
// byte-order helpers. Headers are read and written through these packed
// structs at any alignment; multi-byte fields are in network order.
#pragma once

#include <cstdint>
#include <cstring>

namespace mars::wire {

inline uint16_t be16(uint16_t v) { return __builtin_bswap16(v); }
inline uint32_t be32(uint32_t v) { return __builtin_bswap32(v); }

constexpr uint16_t kEtherIpv4 = 0x0800;
constexpr uint16_t kEtherArp = 0x0806;
constexpr uint16_t kEtherIpv6 = 0x86dd;
constexpr uint8_t kProtoIcmp = 1;
constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;

struct __attribute__((packed)) Eth {
    uint8_t dst[6];
    uint8_t src[6];
    uint16_t type;
};

struct __attribute__((packed)) Arp {
    uint16_t htype, ptype;
    uint8_t hlen, plen;
    uint16_t op;
    uint8_t sha[6];
    uint32_t spa;
    uint8_t tha[6];
    uint32_t tpa;
};
constexpr uint16_t kArpRequest = 1, kArpReply = 2;

struct __attribute__((packed)) Ipv4 {
    uint8_t ver_ihl;
    uint8_t tos;
    uint16_t total_len;
    uint16_t id;
    uint16_t frag; // flags (DF 0x4000, MF 0x2000) and offset
    uint8_t ttl;
    uint8_t proto;
    uint16_t csum;
    uint32_t src, dst;
};
constexpr uint16_t kIpDf = 0x4000, kIpMf = 0x2000, kIpOffsetMask = 0x1fff;

struct __attribute__((packed)) Icmp {
    uint8_t type, code;
    uint16_t csum;
    uint16_t id_or_unused; // echo id, or unused / next-hop MTU pair below
    uint16_t seq_or_mtu;   // echo seq, or next-hop MTU (frag needed)
};
constexpr uint8_t kIcmpEchoReply = 0, kIcmpUnreach = 3, kIcmpEcho = 8, kIcmpParamProblem = 12;
constexpr uint8_t kIcmpCodePort = 3, kIcmpCodeFragNeeded = 4;

struct __attribute__((packed)) Tcp {
    uint16_t sport, dport;
    uint32_t seq, ack;
    uint8_t doff;  // data offset in the high nibble
    uint8_t flags;
    uint16_t win;
    uint16_t csum;
    uint16_t urp;
};
constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10, kUrg = 0x20;

struct __attribute__((packed)) Udp {
    uint16_t sport, dport;
    uint16_t len; // header and payload
    uint16_t csum; // 0: none (IPv4, RFC 768)
};
constexpr unsigned kUdpLen = sizeof(Udp);
constexpr uint8_t kProtoIgmp = 2;

// IPv4 multicast (224.0.0.0/4), host order.
inline bool ipv4_multicast(uint32_t ip) { return (ip >> 28) == 14; }

constexpr unsigned kEthLen = sizeof(Eth), kIpLen = sizeof(Ipv4), kTcpLen = sizeof(Tcp);
constexpr unsigned kHeadersLen = kEthLen + kIpLen + kTcpLen; // 54

static_assert(sizeof(Eth) == 14 && sizeof(Arp) == 28 && sizeof(Ipv4) == 20 && sizeof(Tcp) == 20);

// Sequence-number comparisons modulo 2^32 (RFC 9293 3.4).
inline bool seq_lt(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
inline bool seq_le(uint32_t a, uint32_t b) { return int32_t(a - b) <= 0; }
inline bool seq_gt(uint32_t a, uint32_t b) { return int32_t(a - b) > 0; }
inline bool seq_ge(uint32_t a, uint32_t b) { return int32_t(a - b) >= 0; }
inline uint32_t seq_max(uint32_t a, uint32_t b) { return seq_gt(a, b) ? a : b; }
inline uint32_t seq_min(uint32_t a, uint32_t b) { return seq_lt(a, b) ? a : b; }

} // namespace mars::wire
