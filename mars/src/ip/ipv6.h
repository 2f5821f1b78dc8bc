// ipv6.h: the IPv6 layer of one stack (RFC 8200), beside Ipv4Layer. Input
// validates the header against the frame (version, payload length, source
// not multicast, destination one of ours, our solicited-node group,
// all-nodes or a group the stack joined, Ipv6Upper), walks the extension
// headers (hop-by-hop only first; options skipped when unknown-skippable,
// else as their action bits say; routing with segments left 0 skipped, any
// routing header with segments left refused with parameter problem
// (routing type 0 among them, RFC 5095);
// fragments dropped and counted: nothing here reassembles) and hands the
// upper protocol up through Ipv6Upper. ICMPv6 (icmp6.cc, RFC 4443): echo
// answered, errors generated with a rate limit, received errors quoting a
// packet of ours handed up, packet too big lowering the destination's path
// MTU (RFC 8201), NS/NA to NeighborDiscovery (nd.h), MLD queries to the
// upper layer (Ipv6Upper::ip6_mld_query; other hosts' reports counted).
// Output finishes an IPv6 frame's Ethernet header for its next hop (Router6,
// route.h: on-link destinations directly, others through the gateway of the
// longest matching route of StackConfig::routes6; none: dropped, counted in
// ip6_drop_no_route), multicast to its 33:33 MAC.
//
// Sharing the port (pass_unclaimed): the kernel has the same addresses. What
// this stack does not claim goes on to PacketIo::unclaimed (Unclaimed::kIpv6):
// everything today but NS/NA (learnt from, then passed on: the kernel
// answers) and ICMPv6 errors (handed up, then passed on); echo is the kernel's.
#pragma once

#include "ip/icmp6.h"
#include "ip/ipv6_wire.h"
#include "ip/link.h"
#include "ip/nd.h"
#include "ip/route.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>

namespace mars {

// An upper-layer packet for us (TCP, UDP: next session's), its headers validated.
struct Ip6Rx {
    const wire::Ipv6 *ip; // the IPv6 header in the frame
    unsigned l4_off;      // the upper-layer header's offset from the frame's start
    unsigned l4_len;      // upper-layer header and payload
    uint8_t proto;        // its next-header value
};

// An ICMPv6 error quoting a packet we sent (enough of it for the RFC 5927
// checks: addresses, ports, TCP sequence number).
struct Icmp6Error {
    Ip6Addr local, remote; // the quoted packet's source (ours) and destination
    uint8_t proto;         // its upper protocol (kProtoTcp, kProtoUdp)
    uint16_t local_port, remote_port;
    uint32_t seq;          // TCP: the quoted sequence number
    uint8_t type, code;    // ICMPv6 type and code
    uint32_t mtu;          // packet too big: the path MTU now in force (>= 1280)
};

// What the IPv6 layer hands up to (TCP and UDP over IPv6 plug in here).
class Ipv6Upper {
  public:
    // An upper-layer packet for us: true when taken (the frame is the
    // callee's); false: nobody here handles it, the layer passes it on
    // (sharing) or answers it as a lone host does (ICMPv6 unreachable).
    virtual bool ip6_input(PacketRef &f, const Ip6Rx &rx) = 0;
    virtual void ip6_error(const Icmp6Error &e) = 0;
    // Multicast listening (UDP's memberships, MLD): kept above this layer,
    // which only asks. A group some socket of the stack joined (16 bytes):
    // its packets are taken as ours. A 33:33 MAC one of those groups maps
    // to (the frame filter's question). An MLD query (type 130), its
    // ICMPv6 checksum verified, len the message's bytes; router_alert: a
    // hop-by-hop Router Alert option (RFC 2711, value 0: MLD) came with it.
    // The message is read there and left to this layer.
    virtual bool ip6_group_joined(const uint8_t *) const { return false; }
    virtual bool ip6_group_mac(const uint8_t *) const { return false; }
    virtual void ip6_mld_query(const wire::Ipv6 *, const uint8_t *, unsigned, bool) {}

  protected:
    ~Ipv6Upper() = default;
};

class Ipv6Layer {
  public:
    Ipv6Layer(const StackConfig &config, Link &link, NeighborDiscovery &nd, StackStats &stats, Ipv6Upper &upper);
    Ipv6Layer(const Ipv6Layer &) = delete;
    Ipv6Layer &operator=(const Ipv6Layer &) = delete;

    // An Ethernet destination a lone stack accepts for IPv6 beside its own
    // MAC: all-nodes (33:33:00:00:00:01), our solicited-node groups
    // (33:33:ff:xx:xx:xx) and the MACs of groups joined (Ipv6Upper).
    bool accepts_mac(const uint8_t *dst) const;
    // An IPv6 frame (EtherType checked, Ethernet header included); takes it.
    void input(PacketRef &f, uint64_t now_ns);
    // Finishes the Ethernet header of an IPv6 frame (IPv6 header written) for
    // its destination's next hop and queues it (or holds it for ND). False:
    // no route, dropped and counted. Takes the frame.
    bool send(PacketRef &frame, uint64_t now_ns);
    // The next-hop choice (the stack's IPv6 routes): for the upper layers'
    // connects and templates.
    const Router6 &router() const { return router_; }
    // An ICMPv6 error (type, code, param: MTU or pointer) to the sender of
    // orig (len bytes of IPv6 packet), rate-limited; never about an ICMPv6
    // error, a packet from :: or multicast, or (but for packet too big and
    // parameter problem code 2) to a multicast destination (RFC 4443 2.4 (e)).
    void send_error(const uint8_t *orig, unsigned len, uint8_t type, uint8_t code, uint32_t param, uint64_t now_ns);
    // The path MTU to dst (the link's unless a packet too big lowered it).
    uint32_t path_mtu(const Ip6Addr &dst, uint64_t now_ns) const { return pmtu_.get(dst.b, now_ns); }
    // As constructed (Stack::reset()).
    void clear();

  private:
    // The extension headers from next at off (the header after IPv6's) up
    // to end; *nh_ptr: the offset in the packet of the next-header field
    // naming what follows (for parameter problem). False: the frame was
    // consumed (dropped, refused or passed on).
    // *router_alert: as options_ok says of the hop-by-hop header.
    bool walk_ext(PacketRef &f, uint8_t *next, unsigned *off, unsigned end, unsigned *nh_ptr, bool *router_alert,
                  uint64_t now_ns);
    // Options of a hop-by-hop or destination options header at off (len bytes).
    // *router_alert (hop-by-hop only; nullptr for destination options): set
    // when a Router Alert option for MLD (RFC 2711 value 0) is among them.
    bool options_ok(PacketRef &f, unsigned off, unsigned len, unsigned end, uint64_t now_ns, bool *router_alert);
    void input_icmp(PacketRef &f, unsigned off, unsigned len, bool router_alert, uint64_t now_ns);
    void input_icmp_error(const uint8_t *msg, unsigned len, uint64_t now_ns);
    void echo_reply(const wire::Ipv6 *ip, const uint8_t *msg, unsigned len, uint64_t now_ns);
    // Consumes f: to the other stack when sharing, else dropped.
    void pass_or_drop(PacketRef &f, uint64_t *counter);

    const MacAddr mac_;
    Link &link_;
    NeighborDiscovery &nd_;
    StackStats &stats_;
    Ipv6Upper &upper_;
    const Router6 router_;
    PathMtu6 pmtu_;
    Icmp6RateLimit rate_;
};

} // namespace mars
