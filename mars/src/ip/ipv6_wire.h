// ipv6_wire.h: IPv6, ICMPv6 and neighbour discovery on the wire (RFC 8200,
// RFC 4443, RFC 4861), and the address helpers the IPv6 layer uses
// (RFC 4291: link-local from the MAC, solicited-node groups; RFC 2464: the
// 33:33 multicast MAC). Beside base/wire.h (IPv4, TCP), same conventions:
// packed structs, multi-byte fields in network order.
#pragma once

#include "base/wire.h"

#include <mars/stack.h>

#include <cstdint>
#include <cstring>

namespace mars::wire {

constexpr uint8_t kProtoIcmp6 = 58;
// Next-header values of the extension headers (RFC 8200 4).
constexpr uint8_t kNextHopByHop = 0, kNextRouting = 43, kNextFragment = 44, kNextNone = 59, kNextDestOpts = 60;

struct __attribute__((packed)) Ipv6 {
    uint32_t vtf; // version 4 bits, traffic class 8, flow label 20
    uint16_t payload_len;
    uint8_t next;
    uint8_t hop_limit;
    uint8_t src[16];
    uint8_t dst[16];
};
constexpr unsigned kIp6Len = sizeof(Ipv6); // 40

struct __attribute__((packed)) Icmp6 {
    uint8_t type, code;
    uint16_t csum;
    uint32_t data; // echo: id and sequence; packet too big: MTU; parameter problem: pointer
};
constexpr uint8_t kIcmp6Unreach = 1, kIcmp6PacketTooBig = 2, kIcmp6TimeExceeded = 3, kIcmp6ParamProblem = 4,
                  kIcmp6EchoRequest = 128, kIcmp6EchoReply = 129, kNdRouterSolicit = 133, kNdRouterAdvert = 134,
                  kNdNeighborSolicit = 135, kNdNeighborAdvert = 136, kNdRedirect = 137;
// Destination unreachable codes (RFC 4443 3.1) and parameter problem codes (3.4).
constexpr uint8_t kUnreachNoRoute = 0, kUnreachAddress = 3, kUnreachPort = 4;
constexpr uint8_t kParamHeader = 0, kParamNextHeader = 1, kParamOption = 2;

// Neighbour solicitation and advertisement (RFC 4861 4.3, 4.4), options follow.
struct __attribute__((packed)) NdNeighbor {
    uint8_t type, code;
    uint16_t csum;
    uint32_t flags; // NA: router, solicited, override (host-order masks below); NS: reserved
    uint8_t target[16];
};
constexpr uint32_t kNaRouter = 0x80000000u, kNaSolicited = 0x40000000u, kNaOverride = 0x20000000u;
constexpr uint8_t kNdOptSourceLla = 1, kNdOptTargetLla = 2;
// MLD (RFC 2710 3, RFC 3810 5): Multicast Listener Query, v1 Report and
// Done, v2 Report.
constexpr uint8_t kMldQuery = 130, kMldV1Report = 131, kMldV1Done = 132, kMldV2Report = 143;

} // namespace mars::wire

namespace mars::ip6 {

inline bool eq(const uint8_t *a, const uint8_t *b) { return std::memcmp(a, b, 16) == 0; }
inline bool eq(const Ip6Addr &a, const Ip6Addr &b) { return eq(a.b, b.b); }
inline Ip6Addr from(const uint8_t *p)
{
    Ip6Addr a;
    std::memcpy(a.b, p, 16);
    return a;
}
inline bool is_multicast(const uint8_t *a) { return a[0] == 0xff; }
inline bool is_unspecified(const uint8_t *a)
{
    static const uint8_t zero[16] = {};
    return eq(a, zero);
}
inline bool is_link_local(const uint8_t *a) { return a[0] == 0xfe && (a[1] & 0xc0) == 0x80; }
// fe80::/64 with the modified EUI-64 interface id of mac (RFC 4291 2.5.1, appendix A).
inline Ip6Addr link_local(const MacAddr &m)
{
    Ip6Addr a;
    a.b[0] = 0xfe;
    a.b[1] = 0x80;
    a.b[8] = uint8_t(m.b[0] ^ 0x02);
    a.b[9] = m.b[1];
    a.b[10] = m.b[2];
    a.b[11] = 0xff;
    a.b[12] = 0xfe;
    a.b[13] = m.b[3];
    a.b[14] = m.b[4];
    a.b[15] = m.b[5];
    return a;
}
// ff02::1:ffXX:XXXX, the solicited-node group of a (RFC 4291 2.7.1).
inline Ip6Addr solicited_node(const uint8_t *a)
{
    Ip6Addr g;
    g.b[0] = 0xff;
    g.b[1] = 0x02;
    g.b[11] = 0x01;
    g.b[12] = 0xff;
    g.b[13] = a[13];
    g.b[14] = a[14];
    g.b[15] = a[15];
    return g;
}
inline Ip6Addr all_nodes()
{
    Ip6Addr g;
    g.b[0] = 0xff;
    g.b[1] = 0x02;
    g.b[15] = 0x01;
    return g;
}
// The Ethernet address of an IPv6 multicast group (RFC 2464 7): 33:33 and its last 32 bits.
inline MacAddr multicast_mac(const uint8_t *group)
{
    MacAddr m;
    m.b[0] = 0x33;
    m.b[1] = 0x33;
    std::memcpy(m.b + 2, group + 12, 4);
    return m;
}
// How many leading bits a and b share (0..128).
inline unsigned common_prefix_len(const uint8_t *a, const uint8_t *b)
{
    for (unsigned i = 0; i < 16; i++)
        if (const unsigned x = unsigned(a[i] ^ b[i]); x != 0) return i * 8 + unsigned(__builtin_clz(x)) - 24;
    return 128;
}
// True when a and b agree on their first plen bits.
inline bool prefix_match(const uint8_t *a, const uint8_t *b, unsigned plen)
{
    if (plen > 128) plen = 128;
    const unsigned bytes = plen / 8, bits = plen % 8;
    if (std::memcmp(a, b, bytes) != 0) return false;
    if (!bits) return true;
    const uint8_t mask = uint8_t(0xff << (8 - bits));
    return (a[bytes] & mask) == (b[bytes] & mask);
}

} // namespace mars::ip6
