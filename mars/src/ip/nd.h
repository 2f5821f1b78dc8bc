// nd.h: IPv6 neighbour discovery of one stack (RFC 4861) and duplicate
// address detection of its own addresses (RFC 4862 5.4): the IPv6 sibling
// of ArpResolver.
//
// Our addresses: the link-local fe80::/64 + modified EUI-64 of the MAC
// (always) and StackConfig::addr6. A lone stack (not pass_unclaimed) starts
// each TENTATIVE: start() (Stack::announce) sends one DAD solicitation per
// address from :: to its solicited-node group; an address nobody claims
// within retrans_ns becomes PREFERRED and is announced with an unsolicited
// NA to all-nodes; a conflicting NA, or an NS from :: for it (another node's
// DAD), makes it DUPLICATE: never used, counted (nd_dad_duplicates), readable
// (addr(i).state). Sharing the port (pass_unclaimed) the kernel owns the same
// addresses and does DAD and answers: addresses are PREFERRED at once and no
// NS is answered here; NA and NS are still learnt from.
//
// The neighbour cache has the NUD states of RFC 4861 7.3.2 on Linux's timers:
// INCOMPLETE (arp_probes multicast NS, arp_retrans_ns apart; Linux's
// mcast_solicit 3 and retrans_time 1 s) -> REACHABLE (a solicited NA, or an
// upper layer's confirm()) -> STALE after kReachableNs (base_reachable_time
// 30 s) -> DELAY on the next use -> PROBE after kDelayNs (delay_first_probe
// 5 s; unicast NS, arp_probes of them: ucast_solicit 3) -> FAILED. A failure
// drops the frames that waited (nd_drop_unresolved), counts (nd_failed) and
// is listed (failed_count()/failed_at()) for the upper layers, as ARP does.
// At most arp_pending_frames frames wait for resolutions (nd_drop_queue_full).
//
// A generation for prebuilt headers (issue 31): an IPv6 connection's template
// keeps its next hop's MAC while the stack's neighbour generation is the one
// it was written under (Conn::arp_gen; ARP's counter, one for both families:
// ArpResolver::bump_generation). It moves whenever a cached MAC changes,
// an entry goes (FAILED, evicted) or becomes STALE (RFC 4861 7.3.3: its next
// use must go through lookup(), STALE -> DELAY -> PROBE), so a template never
// outlives what NUD would have told a frame sent through lookup(); DELAY,
// PROBE and REACHABLE send to the cached MAC, as RFC 4861 7.3.3 says. TCP's
// progress is the upper-layer confirmation of RFC 4861 7.3.1: confirm(hop,
// mac) with the MAC the connection's segments went to (never a MAC learnt
// since), so a connection that is moving data keeps its neighbour REACHABLE
// without probes (tcp6.h, Tcp6::next_hop_mac).
//
// Our own addresses are never neighbours (issue 29, local connections over
// IPv6): lookup() answers nullptr for one without a solicitation, hold()
// hands its frame to the stack's local loop (ArpResolver::loop, local_loop.h:
// back in as received at the next poll), and no NS or NA teaches the cache
// one (sharing, the kernel solicits from the same addresses).
#pragma once

#include "ip/ipv6_wire.h"
#include "ip/link.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>
#include <vector>

namespace mars {

class ArpResolver; // the owner of the local loop (arp.h, local_loop.h)

enum class NudState : uint8_t { kNone, kIncomplete, kReachable, kStale, kDelay, kProbe, kFailed };
enum class AddrState : uint8_t { kTentative, kPreferred, kDuplicate };

struct Neighbor6 {
    Ip6Addr ip;
    MacAddr mac;
    NudState state = NudState::kNone; // kNone: a free slot
    uint8_t probes = 0;               // solicitations of the resolution or probe in progress
    uint64_t due_ns = 0;              // when the state's timer runs out (INCOMPLETE, REACHABLE, DELAY, PROBE)
};

struct OwnAddr6 {
    Ip6Addr addr;
    uint8_t prefix = 64;
    AddrState state = AddrState::kTentative;
};

class NeighborDiscovery {
  public:
    static constexpr uint32_t kSlots = 256;
    static constexpr uint64_t kReachableNs = 30'000'000'000ull; // base_reachable_time
    static constexpr uint64_t kDelayNs = 5'000'000'000ull;      // delay_first_probe_time
    static constexpr int kMaxAddrs = StackConfig::kMaxAddr6 + 1; // link-local first

    // local: where frames for our own addresses go (the stack's local loop);
    // nullptr (a layer tested alone): they are dropped (nd_drop_unresolved).
    NeighborDiscovery(const StackConfig &config, Link &link, StackStats &stats, ArpResolver *local = nullptr);
    ~NeighborDiscovery();
    NeighborDiscovery(const NeighborDiscovery &) = delete;
    NeighborDiscovery &operator=(const NeighborDiscovery &) = delete;

    // ---- our addresses
    int n_addrs() const { return n_addrs_; }
    const OwnAddr6 &addr(int i) const { return addrs_[i]; }
    // Our link-local address (always the first): MLD's source (RFC 3810 5).
    const OwnAddr6 &link_local() const { return addrs_[0]; }
    // Index of our address a in any state, or -1.
    int find_own(const uint8_t *a) const;
    // a is ours and usable (PREFERRED).
    bool is_ours(const uint8_t *a) const
    {
        const int i = find_own(a);
        return i >= 0 && addrs_[i].state == AddrState::kPreferred;
    }
    // a is the solicited-node group of one of our addresses.
    bool is_our_solicited_node(const uint8_t *a) const;
    // A usable source address for dst: the link-local one for link-local
    // destinations, else a global one on dst's prefix, else (a destination
    // through a route) the global one sharing the longest prefix with dst
    // (RFC 6724 rule 8); nullptr when none is usable.
    const Ip6Addr *source_for(const uint8_t *dst) const;
    // dst is on-link: link-local or in one of our prefixes.
    bool on_link(const uint8_t *dst) const;
    // DAD for every address (lone stack; sharing: nothing).
    void start(uint64_t now_ns);

    // ---- received NS/NA, IPv6 header and ICMPv6 message validated by the
    // caller up to the checksum and hop limit; len: the ICMPv6 message's.
    // They read the frame and leave it to the caller; eth_src: the frame's
    // Ethernet source (where an answer goes without a link-layer option).
    // False: malformed (RFC 4861 7.1), counted in nd_drop_invalid.
    bool input_ns(const wire::Ipv6 *ip, const uint8_t *msg, unsigned len, const uint8_t *eth_src, uint64_t now_ns);
    bool input_na(const wire::Ipv6 *ip, const uint8_t *msg, unsigned len, uint64_t now_ns);

    // ---- the neighbour cache
    // Destination MAC for an on-link next hop, or nullptr: the caller queues
    // its frame with hold(). Unknown or FAILED starts a resolution; STALE
    // becomes DELAY (RFC 4861 7.3.3). One of our own addresses: nullptr, no
    // resolution (hold() loops the frame).
    const MacAddr *lookup(const Ip6Addr &hop, uint64_t now_ns);
    // The entry for hop, without side effects (nullptr: none).
    const Neighbor6 *peek(const Ip6Addr &hop) const;
    // Upper-layer reachability confirmation (TCP progress): REACHABLE.
    // mac: the address the confirmed traffic went to; an entry that holds
    // another one (learnt since) is left to NUD. Nothing for an entry
    // without a MAC (INCOMPLETE, FAILED).
    void confirm(const Ip6Addr &hop, uint64_t now_ns, const MacAddr *mac = nullptr);
    // The neighbour generation prebuilt headers are checked against (the
    // stack's: ARP's counter; a layer tested alone: its own).
    uint32_t generation() const;
    // Takes an IPv6 frame (Ethernet source and type written) until hop
    // resolves; dropped and counted when the queue is full. For one of our
    // own addresses: to the local loop at once.
    void hold(const Ip6Addr &hop, PacketRef &frame);
    // Timers: resolutions, probes, REACHABLE running out, DAD. True when a
    // neighbour has FAILED since the last clear_failed().
    bool poll(uint64_t now_ns)
    {
        if (__builtin_expect(now_ns >= next_due_ns_, 0)) {
            expire(now_ns);
            return !failed_.empty();
        }
        return false;
    }
    uint64_t next_deadline_ns() const { return next_due_ns_; }
    size_t failed_count() const { return failed_.size(); }
    const Ip6Addr &failed_at(size_t i) const { return failed_[i]; }
    void clear_failed() { failed_.clear(); }
    size_t frames_waiting() const { return pending_.size(); }
    void discard_waiting();
    // As constructed (Stack::reset()).
    void clear();

  private:
    struct PendingFrame {
        Ip6Addr hop;
        PacketRef frame;
    };
    Neighbor6 *find(const uint8_t *ip);
    const Neighbor6 *find(const uint8_t *ip) const;
    Neighbor6 *insert(const uint8_t *ip);
    void set_state(Neighbor6 &e, NudState s, uint64_t due_ns);
    void set_mac(Neighbor6 &e, const uint8_t *mac);
    void bump(); // prebuilt headers' MACs must be checked again
    void resolve(Neighbor6 &e, uint64_t now_ns); // INCOMPLETE: the first NS
    void fail(Neighbor6 &e);
    void release_waiting(const Ip6Addr &hop, bool send);
    void duplicate(int i);
    // NS for target: multicast to its solicited-node group, or unicast to
    // (dst_ip, dst_mac); dad: from :: with no source link-layer option.
    bool send_ns(const uint8_t *target, const uint8_t *dst_ip, const MacAddr *dst_mac, bool dad);
    bool send_na(const uint8_t *target, const uint8_t *dst_ip, const MacAddr &dst_mac, uint32_t flags);
    void expire(uint64_t now_ns);
    void reset_addrs();

    const StackConfig &cfg_;
    const MacAddr mac_;
    const uint32_t max_pending_;
    const uint32_t probes_;
    const uint64_t retrans_ns_;
    Link &link_;
    StackStats &stats_;
    ArpResolver *const local_;
    OwnAddr6 addrs_[kMaxAddrs];
    int n_addrs_ = 0;
    bool dad_running_ = false;
    uint64_t dad_due_ns_ = UINT64_MAX;
    std::vector<Neighbor6> cache_;
    std::vector<PendingFrame> pending_;
    std::vector<Ip6Addr> failed_; // capacity kSlots
    uint64_t next_due_ns_ = UINT64_MAX;
    uint32_t own_gen_ = 1; // the generation without a stack's ArpResolver
};

} // namespace mars
