// route.cc: next-hop choice (longest prefix match over a handful of routes).
#include "ip/route.h"

#include <algorithm>

namespace mars {

namespace {

uint32_t prefix_mask(int prefix) { return prefix == 0 ? 0 : (prefix >= 32 ? ~0u : ~((1u << (32 - prefix)) - 1)); }

} // namespace

Router::Router(const StackConfig &c)
    : ip_(c.ip), subnet_mask_(prefix_mask(c.prefix)),
      n_routes_(std::clamp(c.n_routes, 0, int(StackConfig::kMaxRoutes)))
{
    std::copy(c.routes, c.routes + n_routes_, routes_);
}

uint32_t Router::next_hop(uint32_t dst) const
{
    if ((dst & subnet_mask_) == (ip_ & subnet_mask_)) return dst;
    const Route *best = nullptr;
    for (int i = 0; i < n_routes_; i++) {
        const Route &r = routes_[i];
        const uint32_t m = prefix_mask(r.prefix);
        if ((dst & m) == (r.dest & m) && (!best || r.prefix > best->prefix)) best = &r;
    }
    if (!best) return 0;
    return best->gateway ? best->gateway : dst;
}

} // namespace mars
