// udp/udp.h: UDP over IPv4 (RFC 768), its own component beside TCP.
//
// UdpLayer owns everything UDP: its socket table (ids below 2^22, disjoint
// from TCP's), the port index, SO_REUSEPORT groups, multicast memberships
// and IGMPv3 (igmp.cc), its events. It sees the stack only through a narrow
// environment (UdpEnv: config, clock, counters, ring memory, the link and
// IPv4 layers below); the stack holds one, hands it UDP and IGMP through
// Ipv4Layer (Ipv4DatagramUpper) and drains its events beside TCP's.
//
// Receive: a datagram is checked (length field against the IPv4 payload,
// checksum unless zero or verified by the NIC), matched to sockets (unicast:
// the best match as Linux scores it, one member of a reuseport group by a
// hash of the 4-tuple; multicast: every member socket of the port) and
// copied whole as one record into each socket's receive ring
// (udp/dgram_ring.h). No socket: ICMP port unreachable (rate-limited) or, when
// the address is shared, PacketIo::unclaimed().
// Send: one frame built from the caller's bytes (udp.cc, mars/README.md "UDP").
#pragma once

#include "ip/ipv4.h"
#include "ip/link.h"
#include "ip/route.h"
#include "base/wire.h"
#include "udp/dgram_ring.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>
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
};

// One UDP socket: the component's own state.
struct UdpSock {
    bool used = false, bound = false, reuse_port = false, reuse_addr = false;
    uint8_t tos = 0;
    uint32_t gen = 0;
    uint64_t user = 0;
    Endpoint local, remote; // remote.port != 0: connected
    uint32_t next_in_port = UINT32_MAX; // the port index's chain
    RingMemory mem;
    DgramRing rx;
    uint64_t drops = 0;
    uint32_t ev_bits = 0;
    bool in_events = false;
    int n_groups = 0;
    UdpGroup groups[UdpSockets::kMaxGroups];
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
    int64_t send_to(SockId s, const Endpoint *dst, const void *data, size_t len) override;
    int bind6(SockId s, const Endpoint6 &local, bool v6only) override;
    int connect6(SockId s, const Endpoint6 &remote) override;
    int64_t send_to6(SockId s, const Endpoint6 *dst, const void *data, size_t len) override;
    int64_t recv_from(SockId s, void *data, size_t len, UdpRecord *rec, bool peek) override;
    int rx_view(SockId s, RingSpan *out) const override;
    int rx_consume(SockId s, uint32_t n) override;
    int join(SockId s, UdpGroup g) override;
    int leave(SockId s, UdpGroup g) override;
    int close(SockId s) override;
    int info(SockId s, UdpInfo *out) const override;

    // Ipv4DatagramUpper
    void udp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) override;
    void igmp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) override;

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
    bool port_taken(uint32_t ip, uint16_t port, const UdpSock &by) const;
    int pick_port(UdpSock &s);
    bool same_owner(const UdpSock &a, const UdpSock &b) const;
    // Receive: the socket a unicast datagram goes to (nullptr: none).
    UdpSock *match(uint32_t dst, uint16_t dport, uint32_t src, uint16_t sport);
    // Copies the datagram into s's ring as one record (false: full, counted).
    bool deliver(UdpSock &s, const wire::Ipv4 *ip, const wire::Udp *uh, unsigned len, bool mcast);
    // ICMP port unreachable within the rate limit.
    void port_unreachable(const uint8_t *ip_packet, unsigned len);
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

    UdpEnv e_;
    std::vector<UdpSock> socks_;     // grows at open (never on the packet path)
    std::vector<uint32_t> free_;     // free indices
    uint32_t buckets_[kBuckets];
    std::vector<uint32_t> event_list_;
    std::vector<SockEvent> closed_events_;
    uint16_t next_ephemeral_ = 0;
    // ICMP rate limit: a token bucket as Linux's icmp_msgs_per_sec (1000)
    // and icmp_msgs_burst (50), in milli-tokens.
    uint64_t icmp_tokens_ = 0, icmp_last_ns_ = 0;
    uint32_t hash_key_ = 0;
};

} // namespace mars::udp
