// route.h: next-hop choice for one stack's output. IPv4 (Router): a
// destination on the interface's own subnet is on-link; otherwise the longest
// matching prefix of the configured routes gives the gateway (a route without
// a gateway is on-link). IPv6 (Router6, issue 31): the same over
// StackConfig::routes6, on-link being neighbour discovery's answer
// (link-local, the port's own prefixes). Read-only after creation.
#pragma once

#include <mars/stack.h>

#include <cstdint>

namespace mars {

class Router {
  public:
    // config: our address and prefix, routes / n_routes (validated by the stack).
    explicit Router(const StackConfig &config);
    // Next hop for a destination; 0 when unroutable.
    uint32_t next_hop(uint32_t dst) const;

  private:
    uint32_t ip_;
    uint32_t subnet_mask_;
    int n_routes_;
    Route routes_[StackConfig::kMaxRoutes];
};

class NeighborDiscovery; // ip/nd.h: which IPv6 destinations are on-link

class Router6 {
  public:
    // config: routes6 / n_routes6 (validated by the stack); nd: on-link.
    Router6(const StackConfig &config, const NeighborDiscovery &nd);
    // The next hop for dst (16 bytes, network order) into *hop: dst itself
    // when on-link (or a route without a gateway covers it), else the
    // gateway of the longest matching route. False: no route (and *hop
    // untouched). Cold: connections keep their next hop's MAC in their
    // header template (tcp6.h); this runs when the neighbour generation
    // moved, for connects, and for frames that go without a template.
    bool next_hop(const uint8_t *dst, Ip6Addr *hop) const;
    // Whether dst has a next hop.
    bool routes(const uint8_t *dst) const
    {
        Ip6Addr hop;
        return next_hop(dst, &hop);
    }

  private:
    const NeighborDiscovery &nd_;
    int n_routes_;
    Route6 routes_[StackConfig::kMaxRoutes];
};

} // namespace mars
