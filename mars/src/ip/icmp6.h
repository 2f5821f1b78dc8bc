// icmp6.h: the ICMPv6 parts of the IPv6 layer (RFC 4443) that keep state:
// the path MTU per destination learnt from packet too big (RFC 8201), and
// the rate limit on the errors we send (RFC 4443 2.4 (f)). The messages
// themselves are Ipv6Layer's (icmp6.cc).
#pragma once

#include "ip/ipv6_wire.h"

#include <mars/stack.h>

#include <cstdint>

namespace mars {

// Path MTUs below the link's, per destination (RFC 8201 5.2, 5.3): a small
// table; an entry ages out after kAgeNs (Linux's ip6 mtu_expires, 10 min);
// a full table replaces the entry that expires first.
class PathMtu6 {
  public:
    static constexpr int kEntries = 64;
    static constexpr uint64_t kAgeNs = 600'000'000'000ull;
    static constexpr uint32_t kMinMtu = 1280; // RFC 8200 5

    explicit PathMtu6(uint32_t link_mtu) : link_mtu_(link_mtu < kMinMtu ? kMinMtu : link_mtu) {}
    // A packet too big reporting mtu for dst: the value now in force (never
    // below 1280, never raised by a report).
    uint32_t lower(const uint8_t *dst, uint32_t mtu, uint64_t now_ns);
    uint32_t get(const uint8_t *dst, uint64_t now_ns) const;
    void clear();

  private:
    struct Entry {
        Ip6Addr dst;
        uint32_t mtu = 0; // 0: free
        uint64_t expires_ns = 0;
    };
    const uint32_t link_mtu_;
    Entry e_[kEntries];
};

// A token bucket for ICMPv6 errors (Linux: icmp_msgs_per_sec 1000, burst 50).
class Icmp6RateLimit {
  public:
    static constexpr uint32_t kBurst = 50;
    static constexpr uint64_t kNsPerToken = 1'000'000; // 1000 a second

    bool allow(uint64_t now_ns)
    {
        if (now_ns > last_ns_) {
            const uint64_t add = (now_ns - last_ns_) / kNsPerToken;
            if (add) {
                tokens_ = uint32_t(tokens_ + add > kBurst ? kBurst : tokens_ + add);
                last_ns_ += add * kNsPerToken;
            }
        }
        if (!tokens_) return false;
        tokens_--;
        return true;
    }
    void clear()
    {
        tokens_ = kBurst;
        last_ns_ = 0;
    }

  private:
    uint32_t tokens_ = kBurst;
    uint64_t last_ns_ = 0;
};

} // namespace mars
