// route.cc: next-hop choice (longest prefix match over a handful of routes).
#include "ip/route.h"

#include "ip/nd.h"

#include <algorithm>
#include <cstring>

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

Router6::Router6(const StackConfig &c, const NeighborDiscovery &nd)
    : nd_(nd), n_routes_(std::clamp(c.n_routes6, 0, int(StackConfig::kMaxRoutes)))
{
    std::copy(c.routes6, c.routes6 + n_routes_, routes_);
}

bool Router6::next_hop(const uint8_t *dst, Ip6Addr *hop) const
{
    if (nd_.on_link(dst)) {
        std::memcpy(hop->b, dst, 16);
        return true;
    }
    const Route6 *best = nullptr;
    for (int i = 0; i < n_routes_; i++) {
        const Route6 &r = routes_[i];
        if (ip6::prefix_match(dst, r.dest.b, r.prefix) && (!best || r.prefix > best->prefix)) best = &r;
    }
    if (!best) return false;
    if (ip6::is_unspecified(best->gateway.b))
        std::memcpy(hop->b, dst, 16);
    else
        *hop = best->gateway;
    return true;
}

} // namespace mars
