// arp.h: the ARP layer of one stack (RFC 826): a small open-addressed cache of
// neighbours with expiry and refresh, a bounded queue of frames waiting for a
// resolution, requests and replies, and gratuitous ARP. Frames go out through
// the stack's Link.
//
// A resolution probes on Linux's schedule (StackConfig::arp_probes requests,
// arp_retrans_ns apart: mcast_solicit and retrans_time); when the last one
// has gone unanswered for arp_retrans_ns the neighbour is FAILED: its frames
// are dropped (drop_arp_unresolved), the failure is counted (arp_failed) and
// reported (failed_count(), failed_at()) so that the stack can fail the connects
// waiting on it (EHOSTUNREACH). The next frame for a FAILED neighbour starts
// a new resolution, as Linux's neighbour code does.
//
// Our own address is never resolved (issue 29): lookup() answers nullptr
// without a request and hold() hands the frame to the local loop
// (local_loop.h), whose frames make poll() report work (next_deadline_ns() is
// 0 while any wait), so the path to any other neighbour is untouched. The
// loop is the stack's one for both families: NeighborDiscovery::hold hands it
// IPv6 frames for our own IPv6 addresses through loop().
//
// Time is passed in (now_ns), as everywhere in MARS.
#pragma once

#include "ip/link.h"
#include "ip/local_loop.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>
#include <vector>

namespace mars {

struct ArpEntry {
    uint32_t ip = 0; // 0: free
    MacAddr mac;
    bool resolved = false;
    bool failed = false;       // the last resolution went unanswered (Linux's NUD_FAILED)
    uint64_t expires_ns = 0;
    uint64_t requested_ns = 0; // last request sent
    uint32_t requests = 0;     // requests of the resolution in progress (0: none in progress)
};

class ArpResolver {
  public:
    static constexpr uint32_t kSlots = 256; // the cache (the hash gives 8 bits)

    // config: our address and MAC, arp_timeout_ns, arp_pending_frames,
    // arp_probes, arp_retrans_ns.
    ArpResolver(const StackConfig &config, Link &link, StackStats &stats);
    ~ArpResolver();
    ArpResolver(const ArpResolver &) = delete;
    ArpResolver &operator=(const ArpResolver &) = delete;

    // An ARP frame received (Ethernet header included); consumes it.
    void input(PacketRef &frame, uint64_t now_ns);
    // Destination MAC for a next hop, or nullptr: the caller queues its frame
    // with hold(). An unknown, expired or FAILED neighbour starts a
    // resolution (a request now, the rest from poll()).
    const MacAddr *lookup(uint32_t next_hop, uint64_t now_ns);
    // The cached MAC of a resolved neighbour, without side effects.
    const MacAddr *peek(uint32_t next_hop) const;
    // Takes an IPv4 frame (Ethernet source and type written) until next_hop
    // resolves; dropped and counted when the queue is full.
    void hold(uint32_t next_hop, PacketRef &frame, uint64_t now_ns);
    // A frame for one of our own addresses, either family (Ethernet source
    // and type written): into the local loop, back in at the next poll().
    void loop(PacketRef &frame)
    {
        local_.push(frame, mac_, link_);
        if (!local_.empty()) next_expire_ns_ = 0; // poll() takes them back in
    }
    // A request for our own address (gratuitous ARP).
    void announce();
    // While resolutions are in progress: the next request of each, or its
    // failure after the last one. True when a neighbour has FAILED since the
    // last clear_failed() (failed_count(), failed_at()).
    // Also true while frames for our own address wait (take_local()).
    bool poll(uint64_t now_ns)
    {
        if (__builtin_expect(now_ns >= next_expire_ns_, 0)) {
            if (now_ns >= resolve_next_ns_) expire(now_ns);
            return !failed_.empty() || !local_.empty();
        }
        return false;
    }
    // Frames sent to our own address, back as received frames (the stack
    // feeds them to its input); 0 when none wait.
    uint16_t take_local(PacketRef *out, uint16_t max)
    {
        const uint16_t n = local_.take(out, max);
        if (local_.empty()) next_expire_ns_ = resolve_next_ns_;
        return n;
    }
    // When poll() has work to do (UINT64_MAX: no resolution in progress).
    uint64_t next_deadline_ns() const { return next_expire_ns_; }
    // Neighbours whose resolution failed since the last take (the stack
    // fails the connects waiting on them; clear_failed() empties the list).
    size_t failed_count() const { return failed_.size(); }
    uint32_t failed_at(size_t i) const { return failed_[i]; }
    void clear_failed() { failed_.clear(); }
    // Changes whenever a cached MAC changes or goes (a connection's prebuilt
    // header is good while the generation it was built with is current).
    uint32_t generation() const { return gen_; }
    // The stack has one neighbour generation for both families: IPv6's
    // neighbour discovery (nd.h) moves it when one of its neighbours' MAC
    // changes or goes, or must be checked again (STALE), so the one test
    // `Conn::arp_gen == generation()` covers either family's template.
    void bump_generation() { gen_++; }
    size_t frames_waiting() const { return pending_.size(); }
    // Frames still waiting go back to their owner (the stack going away).
    void discard_waiting();
    // As constructed: no neighbour known, nothing waiting, generation 1
    // (Stack::reset()).
    void clear();
    // As constructed (what clear() leaves): Stack::reset()'s check.
    bool is_clear() const;

  private:
    struct PendingFrame {
        uint32_t next_hop;
        PacketRef frame;
    };
    ArpEntry *find(uint32_t ip);
    const ArpEntry *find(uint32_t ip) const;
    ArpEntry *insert(uint32_t ip);
    void learn(uint32_t ip, const MacAddr &mac, bool create, uint64_t now_ns);
    void request(uint32_t ip);
    void start(ArpEntry &e, uint64_t now_ns); // a resolution: the first request
    void fail(ArpEntry &e);
    bool send(uint16_t op, const uint8_t *dst, const MacAddr &tha, uint32_t tpa);
    void expire(uint64_t now_ns);

    const uint32_t ip_;
    const MacAddr mac_;
    const uint64_t timeout_ns_;
    const uint32_t max_pending_;
    const uint32_t probes_;
    const uint64_t retrans_ns_;
    Link &link_;
    StackStats &stats_;
    std::vector<ArpEntry> cache_;
    uint32_t mask_ = kSlots - 1;
    uint32_t gen_ = 1;
    std::vector<PendingFrame> pending_;
    std::vector<uint32_t> failed_; // neighbours failed since clear_failed() (capacity kSlots)
    // The next resolution step (resolve_next_ns_), or 0 while frames for our
    // own address wait: poll() tests one word either way.
    void set_resolve_next(uint64_t t)
    {
        resolve_next_ns_ = t;
        if (next_expire_ns_ != 0 || local_.empty()) next_expire_ns_ = t;
    }
    uint64_t next_expire_ns_ = UINT64_MAX;
    uint64_t resolve_next_ns_ = UINT64_MAX;
    LocalLoop local_;
    uint32_t resolving_ = 0; // entries with a resolution in progress (requests > 0)
};

} // namespace mars
