// route.h: next-hop choice for one stack's IPv4 output. A destination on the
// interface's own subnet is on-link; otherwise the longest matching prefix of
// the configured routes gives the gateway (a route without a gateway is
// on-link). Read-only after creation.
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

} // namespace mars
