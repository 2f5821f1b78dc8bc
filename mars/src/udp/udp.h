// udp/udp.h: UDP over IPv4 (RFC 768) and IPv6 (RFC 8200 8.1; udp6.cc), its
// own component beside TCP.
//
// UdpLayer owns everything UDP: its socket table (ids below 2^22, disjoint
// from TCP's), the port index, SO_REUSEPORT groups, multicast memberships
// with IGMPv3 (igmp.cc) and MLDv2 (mld.cc), its events. It sees the stack
// only through a narrow environment (UdpEnv: config, clock, counters, ring
// memory, the link, IPv4 and IPv6 layers and neighbour discovery below);
// the stack holds one,
// hands it UDP and IGMP through Ipv4Layer (Ipv4DatagramUpper), UDP over IPv6
// and MLD queries from its Ipv6Upper (udp6_input, mld_query; the IPv6 layer
// asks group6_joined/group6_mac which groups are ours) and drains its
// events beside TCP's.
//
// Families (Linux's AF_INET6 UDP socket): a socket becomes an IPv6 one at
// bind6, connect6 or send_to6. What it is bound to says which datagrams it
// takes (UdpSock::fam): an IPv4 socket IPv4 ones; an IPv6 one bound to ::
// IPv6 ones and, unless v6only, IPv4 ones (dual-stack); bound to an IPv6
// address of ours IPv6 ones to it; bound to a v4-mapped address IPv4 ones.
// One port index and one ephemeral picker for both families; two sockets
// conflict when their families' addresses overlap (as Linux's
// inet_rcv_saddr_equal for UDP).
//
// Receive: a datagram is checked (length field against the IPv4 payload,
// checksum unless zero or verified by the NIC), matched to sockets (unicast:
// the best match as Linux scores it, one member of a reuseport group by a
// hash of the 4-tuple; multicast: every socket of the port bound to the
// wildcard or the group that mc_allow lets in, below) and
// copied whole as one record into each socket's receive ring
// (udp/dgram_ring.h). No socket: ICMP port unreachable (rate-limited) or, when
// the address is shared, PacketIo::unclaimed().
// Send: one frame built from the caller's bytes (udp.cc, mars/README.md "UDP").
#pragma once

#include "ip/ipv4.h"
#include "ip/ipv6.h"
#include "ip/link.h"
#include "ip/nd.h"
#include "ip/route.h"
#include "base/wire.h"
#include "udp/dgram_ring.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace mars::udp {

// What UDP may touch of the stack (all owned by the stack, referenced here).
struct UdpEnv {
    const StackConfig &cfg;
    const uint64_t &now_ns;    // the stack's clock
    const uint32_t &offloads;  // the port's Offloads (set at the stack's init)
    StackStats &stats;
    BufferProvider &buffers;
    Link &link;
    Ipv4Layer &ip;
    const Router &router;
    Ipv6Layer &ip6;
    NeighborDiscovery &nd;
};

// ::ffff:a.b.c.d (RFC 4291 2.5.5.2) of an IPv4 address (host order), and
// the IPv4 address a v4-mapped one names (false: not v4-mapped).
inline Ip6Addr v4_mapped(uint32_t v4)
{
    Ip6Addr a;
    a.b[10] = a.b[11] = 0xff;
    a.b[12] = uint8_t(v4 >> 24), a.b[13] = uint8_t(v4 >> 16), a.b[14] = uint8_t(v4 >> 8), a.b[15] = uint8_t(v4);
    return a;
}
inline bool is_v4_mapped(const Ip6Addr &a, uint32_t *v4)
{
    static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(a.b, kPrefix, 12) != 0) return false;
    *v4 = uint32_t(a.b[12]) << 24 | uint32_t(a.b[13]) << 16 | uint32_t(a.b[14]) << 8 | a.b[15];
    return true;
}

// UdpSock::fam: the families of datagrams a bound socket takes.
enum : uint8_t {
    kFam4 = 1, // IPv4 ones to local.ip (0: any of ours)
    kFam6 = 2, // IPv6 ones to local6 (::: any of ours)
};

// One UDP socket: the component's own state.
struct UdpSock {
    bool used = false, bound = false, reuse_port = false, reuse_addr = false;
    bool v6 = false, v6only = false; // an IPv6 socket (bind6/connect6/send_to6), IPV6_V6ONLY
    bool remote6 = false;            // connected to an IPv6 peer (remote_ip6; remote.ip 0)
    // The local address was the wildcard and connect fixed it to our source
    // toward the peer (Linux's ip4/ip6_datagram_connect); AF_UNSPEC gives
    // back the wildcard and the families it had (fam_unfixed).
    bool addr_by_connect = false;
    uint8_t fam_unfixed = 0;
    uint8_t fam = 0;                 // bound: kFam4 | kFam6
    uint8_t tos = 0, tclass = 0;     // IP_TOS (IPv4 sends), IPV6_TCLASS (IPv6 sends)
    int16_t ttl = -1, hops = -1;     // IP_TTL, IPV6_UNICAST_HOPS of unicast sends (-1: the stack's)
    uint32_t gen = 0;
    uint64_t user = 0;
    Endpoint local, remote; // remote.port != 0: connected
    Ip6Addr local_ip6, remote_ip6; // kFam6: the bound IPv6 address (:: any); the IPv6 peer
    uint32_t next_in_port = UINT32_MAX; // the port index's chain
    RingMemory mem;
    DgramRing rx;
    uint64_t drops = 0;
    uint32_t ev_bits = 0;
    bool in_events = false;
    // Memberships, kMaxGroups per family (Linux limits the families apart
    // too: igmp_max_memberships, and for IPv6 only the socket's memory).
    int n_groups = 0, n_groups6 = 0;
    UdpGroup groups[UdpSockets::kMaxGroups];
    UdpGroup6 groups6[UdpSockets::kMaxGroups];
    bool mc_all = true; // SockOpt::kMulticastAll (IP_MULTICAST_ALL / IPV6_MULTICAST_ALL)
    // Sending to groups: IP_MULTICAST_TTL, IPV6_MULTICAST_HOPS (-1: 1) and
    // IP_MULTICAST_LOOP, IPV6_MULTICAST_LOOP (SockOpt::kMulticast*).
    int16_t mc_ttl = -1, mc_hops = -1;
    bool mc_loop = true, mc_loop6 = true;
    // The latest asynchronous error (udp_error.cc; errno, 0 none) and how
    // many came since open (UdpInfo).
    int error = 0;
    uint32_t errors = 0;
};

class UdpLayer final : public UdpSockets, public Ipv4DatagramUpper {
  public:
    explicit UdpLayer(const UdpEnv &env) : e_(env) {}
    UdpLayer(const UdpLayer &) = delete;
    UdpLayer &operator=(const UdpLayer &) = delete;
    ~UdpLayer() { release_all(); }

    // The stack's init(): the event list's capacity, the first ephemeral port.
    void init();
    // Every socket gone without a word, rings back, events dropped (the
    // stack's reset() and destructor).
    void release_all();

    // UdpSockets
    int64_t open(uint64_t user) override;
    int bind(SockId s, Endpoint local) override;
    int set_option(SockId s, SockOpt opt, int64_t value) override;
    int connect(SockId s, Endpoint remote) override;
    int64_t send_to(SockId s, const Endpoint *dst, const void *data, size_t len, int tos = -1) override;
    int bind6(SockId s, const Endpoint6 &local, bool v6only) override;
    int connect6(SockId s, const Endpoint6 &remote) override;
    int64_t send_to6(SockId s, const Endpoint6 *dst, const void *data, size_t len, int tos = -1) override;
    int64_t recv_from(SockId s, void *data, size_t len, UdpRecord *rec, bool peek) override;
    int rx_view(SockId s, RingSpan *out) const override;
    int rx_consume(SockId s, uint32_t n) override;
    int join(SockId s, UdpGroup g) override;
    int leave(SockId s, UdpGroup g) override;
    int join6(SockId s, const UdpGroup6 &g) override;
    int leave6(SockId s, const UdpGroup6 &g) override;
    int close(SockId s) override;
    int info(SockId s, UdpInfo *out) const override;
    void for_each_socket(void (*fn)(SockId, const UdpInfo &, uint64_t user, void *arg), void *arg) const override;

    // Ipv4DatagramUpper
    void udp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) override;
    void igmp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) override;
    // ICMP and ICMPv6 errors quoting a datagram of ours (udp_error.cc):
    // Linux's __udp4_lib_err/__udp6_lib_err without IP_RECVERR: a hard error
    // (port unreachable, parameter problem, a packet too big...) becomes
    // the pending error of the connected socket that sent it (kEvError);
    // soft ones and unconnected sockets are left alone.
    void udp_icmp_error(const IcmpUdpError &e) override;
    void udp6_icmp_error(const Icmp6Error &e);
    // UDP over IPv6 from the stack's Ipv6Upper (udp6.cc), with Ipv6Upper's
    // contract: true when taken (delivered, or dropped and counted: the frame
    // is released here); false when no socket holds the port (the frame
    // untouched: Ipv6Layer hands it on when sharing, else answers ICMPv6
    // port unreachable).
    bool udp6_input(PacketRef &f, const Ip6Rx &rx);
    // For the stack's Ipv6Upper (mld.cc): a socket of the stack holds a
    // membership of group (16 bytes); a joined group maps to this 33:33
    // MAC; an MLD query (checksum verified by the IPv6 layer), answered.
    bool group6_joined(const uint8_t *group) const;
    bool group6_mac(const uint8_t *mac) const;
    void mld_query(const wire::Ipv6 *ip, const uint8_t *msg, unsigned len, bool router_alert);

    // Events for Stack::events(): the sockets with bits, then closes.
    bool has_events() const { return !event_list_.empty() || !closed_events_.empty(); }
    uint16_t events(SockEvent *out, uint16_t max);

    // Ids: index in the low kIndexBits, a generation (1..255) above; every
    // id is below 2^22, where no TCP id is (TCP generations start at 1).
    static constexpr uint32_t kIndexBits = 14;
    static_assert((1u << kIndexBits) == kMaxSockets);
    static bool is_udp_id(SockId id) { return id < (1u << 22); }

  private:
    UdpSock *lookup(SockId id);
    const UdpSock *lookup(SockId id) const;
    SockId id_of(const UdpSock &s) const { return (s.gen << kIndexBits) | index_of(s); }
    uint32_t index_of(const UdpSock &s) const { return uint32_t(&s - socks_.data()); }
    void raise(UdpSock &s, uint32_t bits);
    // The port index: bound sockets chained per bucket.
    static constexpr uint32_t kBuckets = 1024;
    static uint32_t bucket(uint16_t port) { return port & (kBuckets - 1); }
    void index_add(UdpSock &s);
    void index_remove(UdpSock &s);
    // Another socket holds port with an address that overlaps by's (by's
    // fam, local.ip and local_ip6 as they are to be bound; wild: as the
    // wildcards of its families, the ephemeral picker's question).
    bool port_taken(uint16_t port, const UdpSock &by, bool wild = false) const;
    int pick_port(UdpSock &s);
    bool same_owner(const UdpSock &a, const UdpSock &b) const;
    // Binds s (unbound) to its fam/local.ip/local_ip6 on port (0: ephemeral).
    int bind_as(UdpSock &s, uint16_t port);
    // An unbound socket's implicit bind before connect/send: IPv4's wildcard,
    // or for an IPv6 socket (or a first IPv6 call) :: dual-stack.
    int autobind(UdpSock &s, bool v6);
    // The IPv4 side of connect/send_to (also v4-mapped connect6/send_to6).
    int connect4(UdpSock &s, Endpoint remote);
    // AF_UNSPEC: no peer; a local address connect fixed is the wildcard again.
    static void dissolve(UdpSock &s);
    int64_t send4(UdpSock &s, Endpoint dst, const void *data, size_t len, int tos);
    // Receive: a datagram's addressing (either family) as match() scores it.
    struct Tuple {
        bool v6;
        uint32_t src4, dst4;          // IPv4 (host order)
        const uint8_t *src6, *dst6;   // IPv6 (in the frame)
        uint16_t sport, dport;
    };
    // How well s matches t (Linux's compute_score): -1 not at all.
    static int score(const UdpSock &s, const Tuple &t);
    // The socket a unicast datagram goes to (nullptr: none).
    UdpSock *match(const Tuple &t);
    // A datagram to a group (IPv4: t.dst4; IPv6: t.dst6 with a6 filled for
    // its records), received or looped back from a send of ours: a copy to
    // every socket of the port that takes it (bound to the wildcard or the
    // group, mc_allow4/6 letting it in; a connected one from its peer only),
    // when some socket of the stack joined the group. False: none took it.
    bool deliver_group(const Tuple &t, const UdpRecord &hdr, const UdpRecord6 *a6, const void *payload,
                       unsigned len);
    // Copies the datagram into s's ring as one record: hdr (size filled
    // here), the addresses when a6 (an IPv6 record), the payload (false:
    // full, counted).
    bool deliver(UdpSock &s, UdpRecord hdr, const UdpRecord6 *a6, const void *payload, unsigned len);
    // The socket that sent the datagram an ICMP error quotes (t: the quoted
    // datagram's addressing reversed, as a reply to it would arrive) takes
    // err when hard and the socket is connected.
    void take_error(const Tuple &t, int err, bool hard);
    // ICMP port unreachable within the rate limit.
    void port_unreachable(const uint8_t *ip_packet, unsigned len);
    // Linux's ip_mc_sf_allow / ip6_mc_sf_allow: s takes a datagram to
    // group from src when one of its memberships of the group lets src in,
    // or when it holds none of the group and keeps kMulticastAll (the
    // caller knows the stack joined the group: someone did).
    static bool mc_allow4(const UdpSock &s, uint32_t group, uint32_t src);
    static bool mc_allow6(const UdpSock &s, const uint8_t *group, const uint8_t *src);
    // The groups some socket joined, with their count of memberships (the
    // receive path's "did the stack join it", without walking the sockets).
    struct Joined4 {
        uint32_t group;
        uint32_t refs;
    };
    struct Joined6 {
        Ip6Addr group;
        uint32_t refs;
    };
    bool group4_joined(uint32_t group) const;
    void joined4_count(uint32_t group, int delta);
    void joined6_count(const Ip6Addr &group, int delta);
    // ---- igmp.cc: IGMPv3 (RFC 3376) host side ------------------------------
    // The group's filter on this stack changed (a join or leave): a
    // state-change report for it.
    void group_changed(uint32_t group);
    // A current-state or state-change report of the given groups (all: every
    // group joined); record_kind: 0 current state, 1 state change.
    void send_report(const uint32_t *groups, int n, bool change);
    // The stack's filter for one group: any source (exclude {}), or include
    // these sources (at most out_max). False: nobody joined it.
    bool group_filter(uint32_t group, bool *any, uint32_t *sources, int *n, int out_max) const;
    // Sends a frame to a multicast group (its MAC, no ARP).
    void send_group_frame(PacketRef &f, uint32_t group);
    // ---- mld.cc: MLDv2 (RFC 3810) host side, igmp.cc's IPv6 twin -----------
    // The stack's filter for one group (RFC 3810 4.2: the union of its
    // sockets'): exclude {} when any member takes every source, else
    // include the sources asked for (at most kMaxSources6 of them).
    static constexpr int kMaxSources6 = 64;
    struct Filter6 {
        bool joined = false, exclude = false;
        int n = 0;
        Ip6Addr src[kMaxSources6];
    };
    void group6_filter(const Ip6Addr &group, Filter6 *out) const;
    // A join or leave moved the stack's filter for group from before to
    // after: the state-change report that says so (none when unchanged).
    void group6_changed(const Ip6Addr &group, const Filter6 &before, const Filter6 &after);
    // A report being built: one frame, records appended (a full frame goes
    // and another starts), sent at flush.
    struct MldReport {
        PacketRef f;
        unsigned len = 0; // bytes of records
        uint16_t records = 0;
        bool open = false;
    };
    void mld_add(MldReport &r, uint8_t type, const Ip6Addr &group, const Ip6Addr *src, int n);
    void mld_flush(MldReport &r);
    // The current-state record of a group (MODE_IS_EXCLUDE / MODE_IS_INCLUDE).
    void mld_current(MldReport &r, const Ip6Addr &group);

    UdpEnv e_;
    std::vector<UdpSock> socks_;     // grows at open (never on the packet path)
    std::vector<uint32_t> free_;     // free indices
    uint32_t buckets_[kBuckets];
    std::vector<uint32_t> event_list_;
    std::vector<SockEvent> closed_events_;
    std::vector<Joined4> joined4_; // grow at join (control path)
    std::vector<Joined6> joined6_;
    uint16_t next_ephemeral_ = 0;
    // ICMP rate limit: a token bucket as Linux's icmp_msgs_per_sec (1000)
    // and icmp_msgs_burst (50), in milli-tokens.
    uint64_t icmp_tokens_ = 0, icmp_last_ns_ = 0;
    uint32_t hash_key_ = 0;
};

} // namespace mars::udp
