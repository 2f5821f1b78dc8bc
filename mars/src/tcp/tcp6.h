// tcp/tcp6.h: TCP over IPv6, its IPv6-specific part (issue 31): a component
// beside the IPv4 path, not branches inside it. What is IPv6's and not TCP's
// lives here: the segment header image (Ethernet + 40-byte IPv6 header + TCP
// header, traffic class, flow label, hop limit), the pseudo-header checksum
// (RFC 8200 8.1), the checks of a received segment, and the reset for a
// segment nobody holds (RFC 9293 3.10.7.1). Ipv6Layer hands TCP segments up
// through Ipv6Upper::ip6_input (StackImpl), which gives them to Tcp6::input.
//
// Connections over IPv6 run the same TCP code as IPv4's (tcp/*.cc): what a
// connection needs of IPv6 it reaches through tcp::Env::tcp6_ (this class):
// its template (build_template), the frame out through Ipv6Layer::send
// (neighbour discovery holds it until the next hop resolves), segments outside
// a template (send_raw: resets, cookie SYN-ACKs), the path MTU. The receive
// side is rx::Receiver::tcp6_input (rx/tcp_in.cc): check() here, then the
// IPv6 flow table (base/flow_table6.h) and the TCP rules by state.
#pragma once

#include "base/flow_table.h"
#include "base/wire.h"
#include "tcp/conn.h"
#include "ip/ipv6.h"
#include "ip/ipv6_wire.h"
#include "ip/nd.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>

namespace mars::tcp6 {

// Ethernet + IPv6 + TCP without options: 74 bytes.
using mars::kHeaders6Len;
static_assert(kHeaders6Len == wire::kEthLen + wire::kIp6Len + wire::kTcpLen);

// The 12-byte key the IPv4 helpers of base/secret.h (RFC 6528 ISNs, RFC 4987
// SYN cookies) take, for an IPv6 4-tuple: both addresses go through SipHash
// with the stack's secret (all 36 bytes count; a fold nobody can aim at
// without the key), the ports as they are.
FlowKey isn_key(const uint64_t secret[2], const Ip6Addr &local, const Ip6Addr &remote, uint16_t lport, uint16_t rport);

// The fields of the IPv6 header TCP sends with, one connection's.
struct Hdr6 {
    Ip6Addr src, dst;
    uint16_t sport = 0, dport = 0; // host order
    uint8_t tclass = 0;            // traffic class (IPV6_TCLASS: DSCP and ECN bits)
    uint32_t flow_label = 0;       // 20 bits; 0: unlabelled
    uint8_t hop_limit = 64;
};

// The flow label of a 4-tuple (RFC 6437 3: a keyed hash, never 0, the same
// for every packet of the flow): CRC32C over addresses and ports, then the
// key, folded to 20 bits.
uint32_t flow_label(const Ip6Addr &src, const Ip6Addr &dst, uint16_t sport, uint16_t dport, const uint64_t key[2]);

// Writes the header image at p (kHeaders6Len bytes): Ethernet source `mac`,
// destination zero (the next hop's, filled by Ipv6Layer::send or the caller),
// EtherType 0x86dd; IPv6 version 6, h's traffic class, flow label, hop limit,
// next header TCP, payload length 0; TCP ports, the rest zero.
void write_headers(uint8_t *p, const MacAddr &mac, const Hdr6 &h);

// Sets the IPv6 payload length to tcp_len (TCP header, options, payload at
// p + 54) and the TCP checksum over the IPv6 pseudo-header.
void finish(uint8_t *p, unsigned tcp_len);

// The TCP checksum of a received segment (l4 at its offset, tcp_len bytes)
// over the IPv6 pseudo-header is right.
bool csum_good(const wire::Ipv6 *ip, const uint8_t *l4, unsigned tcp_len);

// TCP over IPv6 for one stack: what Ipv6Upper::ip6_input hands it.
class Tcp6 {
  public:
    Tcp6(const StackConfig &config, Ipv6Layer &ip6, NeighborDiscovery &nd, Link &link, StackStats &stats)
        : cfg_(config), ip6_(ip6), nd_(nd), link_(link), stats_(stats)
    {
    }
    Tcp6(const Tcp6 &) = delete;
    Tcp6 &operator=(const Tcp6 &) = delete;

    // A TCP segment to a usable address of ours: true when it is well formed
    // (the caller looks up its connection). A malformed one (header shorter
    // than 20 bytes or its data offset past the packet: drop_tcp_header; a
    // wrong checksum unless the NIC verified it: drop_tcp_csum) is dropped
    // and counted: false, the frame released.
    bool check(PacketRef &f, const Ip6Rx &rx);
    // One for no socket: false when sharing the port (the layer hands it to
    // the kernel), else answered with a reset (never one for a reset) and
    // taken (drop_tcp_no_socket).
    bool no_socket(PacketRef &f, const Ip6Rx &rx, uint64_t now_ns);

    // ---- a connection's IPv6 side (kFV6)
    // The template: Ethernet (destination: the next hop's, filled by
    // next_hop_mac), IPv6 (traffic class app.tclass, the flow's label,
    // hop_limit6), TCP ports. Its MAC is not current (arp_gen 0).
    void build_template(tcp::Conn &s) const;
    // The template's MAC is good while s.arp_gen is the stack's neighbour
    // generation (nd.h). When it is not: the next hop's MAC from the
    // neighbour cache (a lookup, so NUD's STALE -> DELAY happens), written
    // into the template, s.arp_gen set; first, progress since the last
    // check (an ACK beyond v6.nd_una, the last segment received within
    // ReachableTime) confirms the neighbour at the MAC the segments went to
    // (RFC 4861 7.3.1: no probe while TCP moves data). nullptr: unresolved,
    // our own address or off-link: the frame goes through send().
    const MacAddr *next_hop_mac(tcp::Conn &s, uint64_t now_ns);
    // A segment built on the template (tcp_len bytes from the TCP header):
    // payload length set; the checksum is the caller's. Out through ND
    // (held until the next hop resolves, looped to ourselves).
    void send(PacketRef &frame, uint64_t now_ns) { ip6_.send(frame, now_ns); }
    uint32_t path_mtu(const Ip6Addr &dst, uint64_t now_ns) const { return ip6_.path_mtu(dst, now_ns); }
    // A segment outside any template: from src to dst (ports host order).
    void send_raw(const Ip6Addr &src, const Ip6Addr &dst, uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack,
                  uint8_t flags, uint16_t win, const uint8_t *opts, unsigned opt_len, uint64_t now_ns);

  private:
    // RFC 9293 3.10.7.1: the reset answering seg (its IPv6 header, the TCP
    // header at th, seg_len the segment's payload length).
    void send_rst_reply(const wire::Ipv6 *ip, const wire::Tcp *th, unsigned seg_len, uint64_t now_ns);

    const StackConfig &cfg_;
    Ipv6Layer &ip6_;
    NeighborDiscovery &nd_;
    Link &link_;
    StackStats &stats_;
};

} // namespace mars::tcp6
