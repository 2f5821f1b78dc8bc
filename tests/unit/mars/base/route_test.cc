// Tests of mars/src/route (Router): the interface's subnet is on-link, the
// longest matching prefix wins, a route without a gateway is on-link, the
// default route, and unroutable destinations.
#include "route.h"

#include <gtest/gtest.h>

namespace {

using namespace mars;

constexpr uint32_t ip(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return a << 24 | b << 16 | c << 8 | d; }

StackConfig config(int prefix)
{
    StackConfig c;
    c.ip = ip(198, 18, 0, 1);
    c.prefix = uint8_t(prefix);
    return c;
}

TEST(Router, OwnSubnetIsOnLinkAndNothingElseWithoutRoutes)
{
    Router r(config(24));
    EXPECT_EQ(r.next_hop(ip(198, 18, 0, 77)), ip(198, 18, 0, 77));
    EXPECT_EQ(r.next_hop(ip(198, 18, 1, 1)), 0u);
    EXPECT_EQ(r.next_hop(ip(198, 19, 0, 1)), 0u);
}

TEST(Router, LongestPrefixWins)
{
    StackConfig c = config(24);
    c.routes[0] = Route{0, 0, ip(198, 18, 0, 254)};                       // default
    c.routes[1] = Route{ip(198, 19, 0, 0), 16, ip(198, 18, 0, 10)};       // 198.19/16
    c.routes[2] = Route{ip(198, 19, 7, 0), 24, ip(198, 18, 0, 11)};       // 198.19.7/24
    c.routes[3] = Route{ip(198, 19, 8, 0), 24, 0};                        // on-link
    c.n_routes = 4;
    Router r(c);
    EXPECT_EQ(r.next_hop(ip(198, 19, 7, 5)), ip(198, 18, 0, 11));
    EXPECT_EQ(r.next_hop(ip(198, 19, 6, 5)), ip(198, 18, 0, 10));
    EXPECT_EQ(r.next_hop(ip(198, 19, 8, 5)), ip(198, 19, 8, 5)) << "no gateway: on-link";
    EXPECT_EQ(r.next_hop(ip(198, 20, 0, 1)), ip(198, 18, 0, 254)) << "default route";
    EXPECT_EQ(r.next_hop(ip(198, 18, 0, 9)), ip(198, 18, 0, 9)) << "own subnet before any route";
}

TEST(Router, HostRouteAndHostPrefix)
{
    StackConfig c = config(32);
    c.routes[0] = Route{ip(198, 18, 5, 5), 32, ip(198, 18, 0, 2)};
    c.n_routes = 1;
    Router r(c);
    EXPECT_EQ(r.next_hop(ip(198, 18, 0, 1)), ip(198, 18, 0, 1));
    EXPECT_EQ(r.next_hop(ip(198, 18, 0, 2)), 0u) << "a /32 interface has no neighbours of its own";
    EXPECT_EQ(r.next_hop(ip(198, 18, 5, 5)), ip(198, 18, 0, 2));
    EXPECT_EQ(r.next_hop(ip(198, 18, 5, 6)), 0u);
}

} // namespace
