// arp.h: the ARP layer of one stack (RFC 826): a small open-addressed cache of
// neighbours with expiry and refresh, a bounded queue of frames waiting for a
// resolution, requests (rate limited: one a second per neighbour) and
// replies, and gratuitous ARP. Frames go out through the stack's Link.
//
// Time is passed in (now_ns), as everywhere in MARS.
#pragma once

#include "ip/link.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>
#include <vector>

namespace mars {

struct ArpEntry {
    uint32_t ip = 0; // 0: free
    MacAddr mac;
    bool resolved = false;
    uint64_t expires_ns = 0;
    uint64_t requested_ns = 0; // last request sent (rate limit: one per second)
    uint32_t requests = 0;
};

class ArpResolver {
  public:
    static constexpr uint32_t kSlots = 256; // the cache (the hash gives 8 bits)

    // config: our address and MAC, arp_timeout_ns, arp_pending_frames.
    ArpResolver(const StackConfig &config, Link &link, StackStats &stats);
    ~ArpResolver();
    ArpResolver(const ArpResolver &) = delete;
    ArpResolver &operator=(const ArpResolver &) = delete;

    // An ARP frame received (Ethernet header included); consumes it.
    void input(PacketRef &frame, uint64_t now_ns);
    // Destination MAC for a next hop, or nullptr: a request is sent (at most
    // one a second) and the caller queues its frame with hold().
    const MacAddr *lookup(uint32_t next_hop, uint64_t now_ns);
    // The cached MAC of a resolved neighbour, without side effects.
    const MacAddr *peek(uint32_t next_hop) const;
    // Takes an IPv4 frame (Ethernet source and type written) until next_hop
    // resolves; dropped and counted when the queue is full.
    void hold(uint32_t next_hop, PacketRef &frame, uint64_t now_ns);
    // A request for our own address (gratuitous ARP).
    void announce();
    // Once a second while frames wait: re-ask, give up after three requests.
    void poll(uint64_t now_ns)
    {
        if (now_ns >= next_expire_ns_) expire(now_ns);
    }
    // When poll() has work to do (UINT64_MAX: nothing waits).
    uint64_t next_deadline_ns() const { return pending_.empty() ? UINT64_MAX : next_expire_ns_; }
    // Changes whenever a cached MAC changes or goes (a connection's prebuilt
    // header is good while the generation it was built with is current).
    uint32_t generation() const { return gen_; }
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
    bool send(uint16_t op, const uint8_t *dst, const MacAddr &tha, uint32_t tpa);
    void expire(uint64_t now_ns);

    const uint32_t ip_;
    const MacAddr mac_;
    const uint64_t timeout_ns_;
    const uint32_t max_pending_;
    Link &link_;
    StackStats &stats_;
    std::vector<ArpEntry> cache_;
    uint32_t mask_ = kSlots - 1;
    uint32_t gen_ = 1;
    std::vector<PendingFrame> pending_;
    uint64_t next_expire_ns_ = 0;
};

} // namespace mars
