// Decision logic of the shim: which sockets the PPE carries.
#include <arpa/inet.h>
#include <cstring>
#include <string>
#include <gtest/gtest.h>

#include "decide.h"

namespace {

sockaddr_in in4(const char *ip, uint16_t port)
{
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

eta_net lab_net()
{
    eta_net n{};
    char why[128];
    EXPECT_EQ(eta_net_parse("port 198.18.0.1/24\nroute 10.0.0.0/8 via 198.18.0.254 # lab\n", &n, why, sizeof why), 0)
        << why;
    return n;
}

TEST(Decide, SocketAcceptsOnlyInetStreamTcp)
{
    EXPECT_EQ(eta_decide_socket(AF_INET, SOCK_STREAM, 0), ETA_R_NONE);
    EXPECT_EQ(eta_decide_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP), ETA_R_NONE);
    EXPECT_EQ(eta_decide_socket(AF_INET, SOCK_DGRAM, 0), ETA_R_NOT_STREAM);
    EXPECT_EQ(eta_decide_socket(AF_INET, SOCK_SEQPACKET, 0), ETA_R_NOT_STREAM);
    EXPECT_EQ(eta_decide_socket(AF_INET6, SOCK_STREAM, 0), ETA_R_INET6);
    EXPECT_EQ(eta_decide_socket(AF_UNIX, SOCK_STREAM, 0), ETA_R_NOT_INET);
    EXPECT_EQ(eta_decide_socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP), ETA_R_PROTOCOL);
}

sockaddr_in6 in6(const char *ip, uint16_t port)
{
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    inet_pton(AF_INET6, ip, &a.sin6_addr);
    return a;
}

enum eta_reason connect6(const eta_net &n, const char *ip)
{
    sockaddr_in6 a = in6(ip, 80);
    return eta_decide_connect6(&n, reinterpret_cast<sockaddr *>(&a), sizeof a);
}

// IPv6 (issue 31): "port6 ADDR/P" lines; a connect on-link of one of them
// goes through the PPE, the rest is the kernel's, each with its reason.
TEST(Decide, Ipv6ConnectOnLinkOfAPort6Prefix)
{
    eta_net n{};
    char why[200];
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nport6 2001:2:0:2::1/64\nport6 fd00::1/120\nself local\n", &n, why,
                            sizeof why),
              0)
        << why;
    ASSERT_EQ(n.n_ports6, 2u);
    EXPECT_EQ(n.port6[0].prefix, 64);
    EXPECT_EQ(n.port6[1].prefix, 120);
    EXPECT_EQ(connect6(n, "2001:2:0:2::2"), ETA_R_NONE);
    EXPECT_EQ(connect6(n, "2001:2:0:2:ffff:ffff:ffff:ffff"), ETA_R_NONE);
    EXPECT_EQ(connect6(n, "fd00::ff"), ETA_R_NONE);
    EXPECT_EQ(connect6(n, "fd00::100"), ETA_R_NOT_ROUTED) << "outside the /120";
    EXPECT_EQ(connect6(n, "2001:2:0:3::2"), ETA_R_NOT_ROUTED);
    EXPECT_EQ(connect6(n, "2001:2:0:2::1"), ETA_R_INET6) << "the PPE's own address, from a PPE without `self local6`";
    EXPECT_EQ(connect6(n, "::1"), ETA_R_LOOPBACK);
    EXPECT_EQ(connect6(n, "fe80::1"), ETA_R_INET6) << "link-local: a scope the shim does not map";
    EXPECT_EQ(connect6(n, "ff02::1"), ETA_R_INET6);
    EXPECT_EQ(connect6(n, "::"), ETA_R_INET6);
    sockaddr_in6 a = in6("2001:2:0:2::2", 80);
    EXPECT_EQ(eta_decide_connect6(&n, reinterpret_cast<sockaddr *>(&a), sizeof a - 1), ETA_R_NOT_INET);
    EXPECT_EQ(eta_decide_connect6(&n, nullptr, sizeof a), ETA_R_NOT_INET);
    // `self local6` (issue 29): the PPE's own IPv6 addresses are local
    // connections inside the engine; link-local still the kernel's.
    ASSERT_EQ(eta_net_parse("port6 2001:2:0:2::1/64\nport6 fd00::1/120\nself local\nself local6\n", &n, why, sizeof why),
              0)
        << why;
    EXPECT_TRUE(n.self_local6);
    EXPECT_EQ(connect6(n, "2001:2:0:2::1"), ETA_R_NONE) << "the PPE's own address: inside the engine";
    EXPECT_EQ(connect6(n, "fd00::1"), ETA_R_NONE);
    EXPECT_EQ(connect6(n, "fe80::1"), ETA_R_INET6);
    // Bad lines are refused, naming what is wrong.
    EXPECT_NE(eta_net_parse("port6 198.18.0.1/24", &n, why, sizeof why), 0);
    EXPECT_NE(std::string(why).find("IPv6 address"), std::string::npos) << why;
    EXPECT_NE(eta_net_parse("port6 2001:2::1/129", &n, why, sizeof why), 0);
    EXPECT_NE(eta_net_parse("port6 2001:2::1/", &n, why, sizeof why), 0);
    EXPECT_NE(eta_net_parse("port6", &n, why, sizeof why), 0);
    EXPECT_EQ(eta_net_parse("port6 2001:2::1", &n, why, sizeof why), 0) << "no prefix: /128";
    EXPECT_EQ(n.port6[0].prefix, 128);
}

// IPv6 routes (issue 31): "route6 D/P [via G]" lines. A global destination
// off every port6 prefix but inside a route6 prefix goes through the engine
// (MARS sends it to the gateway), TCP and UDP alike; the rest off-link stays
// the kernel's (`not-routed`), as it all did before route6 lines existed. A
// routed destination leaves from the port6 address sharing the longest
// prefix with it (RFC 6724 rule 8), the first of equals.
TEST(Decide, Ipv6RoutesTakeOffLinkDestinationsToTheEngine)
{
    const char *const ports = "port 198.18.0.1/24\nport6 2001:2:0:1::1/64\nport6 2001:db8:0:1::1/64\nself local\n"
                              "self local6\n";
    eta_net n{};
    char why[200];
    ASSERT_EQ(eta_net_parse((std::string(ports) + "route6 2001:db8::/32 via fe80::1\nroute6 2001:3::/48\n").c_str(), &n,
                            why, sizeof why),
              0)
        << why;
    ASSERT_EQ(n.n_routes6, 2u);
    EXPECT_EQ(n.route6[0].prefix, 32);
    EXPECT_EQ(n.route6[1].prefix, 48);
    EXPECT_EQ(connect6(n, "2001:db8:5::9"), ETA_R_NONE) << "inside 2001:db8::/32: routed";
    EXPECT_EQ(connect6(n, "2001:3:0:7::9"), ETA_R_NONE) << "inside 2001:3::/48 (no via)";
    EXPECT_EQ(connect6(n, "2001:3:1::9"), ETA_R_NOT_ROUTED) << "outside the /48";
    EXPECT_EQ(connect6(n, "2001:4::9"), ETA_R_NOT_ROUTED) << "off-link, no route";
    EXPECT_EQ(connect6(n, "2001:2:0:1::2"), ETA_R_NONE) << "on-link as before";
    EXPECT_EQ(connect6(n, "fe80::1"), ETA_R_INET6) << "link-local without the port's scope: still the kernel's";
    EXPECT_EQ(connect6(n, "ff0e::1"), ETA_R_INET6) << "multicast";
    EXPECT_EQ(connect6(n, "::1"), ETA_R_LOOPBACK);
    uint8_t ip[16], src[16], want[16];
    inet_pton(AF_INET6, "2001:db8:5::9", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_NONE) << "UDP to a routed destination: the engine's, as TCP";
    inet_pton(AF_INET6, "2001:4::9", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_NOT_ROUTED);
    // The source: the longest common prefix, not the first port6.
    inet_pton(AF_INET6, "2001:db8:5::9", ip);
    inet_pton(AF_INET6, "2001:db8:0:1::1", want);
    ASSERT_TRUE(eta_net_source6(&n, ip, src));
    EXPECT_EQ(memcmp(src, want, 16), 0) << "2001:db8:0:1::1 shares 32+ bits with 2001:db8:5::9";
    inet_pton(AF_INET6, "2001:3::9", ip);
    inet_pton(AF_INET6, "2001:2:0:1::1", want);
    ASSERT_TRUE(eta_net_source6(&n, ip, src));
    EXPECT_EQ(memcmp(src, want, 16), 0) << "2001:2:: shares 31 bits with 2001:3::, 2001:db8:: 20";
    inet_pton(AF_INET6, "3000::9", ip);
    ASSERT_TRUE(eta_net_source6(&n, ip, src));
    EXPECT_EQ(memcmp(src, want, 16), 0) << "a tie (3 bits each): the first";
    inet_pton(AF_INET6, "2001:db8:0:1::7", ip);
    inet_pton(AF_INET6, "2001:db8:0:1::1", want);
    ASSERT_TRUE(eta_net_source6(&n, ip, src));
    EXPECT_EQ(memcmp(src, want, 16), 0) << "on-link: the port6 whose prefix holds it";
    // The IPv6 default route: every global destination.
    ASSERT_EQ(eta_net_parse((std::string(ports) + "route6 ::/0 via fe80::1\n").c_str(), &n, why, sizeof why), 0) << why;
    EXPECT_EQ(connect6(n, "2001:4::9"), ETA_R_NONE);
    EXPECT_EQ(connect6(n, "fd12::9"), ETA_R_NONE);
    EXPECT_EQ(connect6(n, "::ffff:198.19.0.2"), ETA_R_INET6) << "v4-mapped: not IPv6's route";
    EXPECT_EQ(connect6(n, "fe80::9"), ETA_R_INET6);
    // No route6 line: off-link IPv6 is the kernel's, as before issue 31's routes.
    ASSERT_EQ(eta_net_parse(ports, &n, why, sizeof why), 0) << why;
    EXPECT_EQ(n.n_routes6, 0u);
    EXPECT_EQ(connect6(n, "2001:db8:5::9"), ETA_R_NOT_ROUTED);
    inet_pton(AF_INET6, "2001:db8:5::9", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_NOT_ROUTED);
    EXPECT_EQ(connect6(n, "2001:2:0:1::2"), ETA_R_NONE);
    // A route6 with no IPv6 address to send from routes nothing.
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nroute6 ::/0 via fe80::1\n", &n, why, sizeof why), 0) << why;
    EXPECT_EQ(connect6(n, "2001:4::9"), ETA_R_NOT_ROUTED);
    // Bad lines, each with what to write.
    EXPECT_NE(eta_net_parse("route6 2001:db8::/129", &n, why, sizeof why), 0);
    EXPECT_NE(strstr(why, "'route6' needs an IPv6 prefix ADDR/P"), nullptr) << why;
    EXPECT_NE(eta_net_parse("route6 198.18.0.0/16", &n, why, sizeof why), 0);
    EXPECT_NE(strstr(why, "IPv6 prefix"), nullptr) << why;
    EXPECT_NE(eta_net_parse("route6 2001:db8::/32 via 198.18.0.1", &n, why, sizeof why), 0);
    EXPECT_NE(strstr(why, "IPv6 gateway"), nullptr) << why;
    EXPECT_NE(eta_net_parse("route6 2001:db8::/32 through fe80::1", &n, why, sizeof why), 0);
    EXPECT_NE(strstr(why, "'route6 ADDR/P via GATEWAY'"), nullptr) << why;
    EXPECT_NE(eta_net_parse("route6", &n, why, sizeof why), 0);
    std::string many = "port6 2001:2::1/64\n";
    for (int i = 0; i < ETA_NET_MAX_ROUTES; i++) many += "route6 2001:db8:" + std::to_string(i) + "::/48\n";
    ASSERT_EQ(eta_net_parse(many.c_str(), &n, why, sizeof why), 0) << why;
    EXPECT_EQ(n.n_routes6, unsigned(ETA_NET_MAX_ROUTES));
    many += "route6 2001:db9::/32\n";
    EXPECT_NE(eta_net_parse(many.c_str(), &n, why, sizeof why), 0);
    EXPECT_NE(strstr(why, "more than 32 IPv6 routes"), nullptr) << why;
    EXPECT_NE(eta_net_parse("router6 10.0.0.0/8", &n, why, sizeof why), 0);
    EXPECT_NE(strstr(why, "'route6 ADDR/P [via G]'"), nullptr) << why;
}

// Issue 31: a link-local destination whose scope id is the port's kernel
// interface (a shared port's tap, which the shim looked up: link6_ifindex)
// is the engine's; another interface's, or none, the kernel's (which refuses
// scope 0 with EINVAL); the PPE's own link-local address the kernel's too.
static enum eta_reason connect6_scoped(const eta_net &n, const char *ip, uint32_t scope)
{
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(80);
    a.sin6_scope_id = scope;
    inet_pton(AF_INET6, ip, &a.sin6_addr);
    return eta_decide_connect6(&n, (sockaddr *)&a, sizeof a);
}

TEST(Decide, LinkLocalOnThePortsInterface)
{
    eta_net n{};
    char why[128];
    ASSERT_EQ(eta_net_parse("port6 2001:2:0:2::1/64\nself shared\n", &n, why, sizeof why), 0) << why;
    EXPECT_EQ(connect6_scoped(n, "fe80::2", 7), ETA_R_INET6) << "no interface known (not shared, or not looked up)";
    n.link6_ifindex = 7;
    n.has_link6 = true;
    inet_pton(AF_INET6, "fe80::1", n.link6);
    EXPECT_EQ(connect6_scoped(n, "fe80::2", 7), ETA_R_NONE) << "the port's link: the engine's";
    EXPECT_EQ(connect6_scoped(n, "fe80::2", 3), ETA_R_INET6) << "another interface: the kernel's";
    EXPECT_EQ(connect6_scoped(n, "fe80::2", 0), ETA_R_INET6) << "no scope: the kernel's (EINVAL)";
    EXPECT_EQ(connect6_scoped(n, "fe80::1", 7), ETA_R_LOCAL) << "the PPE's own link-local: the kernel holds it";
    EXPECT_EQ(connect6_scoped(n, "ff02::1", 7), ETA_R_INET6) << "multicast stays the kernel's";
    uint8_t ip[16];
    inet_pton(AF_INET6, "fe80::2", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 7), ETA_R_NONE) << "UDP: as connect";
    EXPECT_EQ(eta_decide_udp6(&n, ip, 3), ETA_R_INET6);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_INET6);
}

TEST(Decide, ConnectFollowsThePpeRoutes)
{
    eta_net n = lab_net();
    auto peer = in4("198.18.0.2", 80), routed = in4("10.1.2.3", 80), other = in4("198.19.0.2", 80),
         lo = in4("127.0.0.1", 80);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&peer, sizeof peer), ETA_R_NONE);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&routed, sizeof routed), ETA_R_NONE);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&other, sizeof other), ETA_R_NOT_ROUTED);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&lo, sizeof lo), ETA_R_LOOPBACK);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&peer, 4), ETA_R_NOT_INET); // short: the kernel answers
    EXPECT_EQ(eta_decide_connect(&n, nullptr, 0), ETA_R_NOT_INET);
    sockaddr unspec{};
    unspec.sa_family = AF_UNSPEC;
    EXPECT_EQ(eta_decide_connect(&n, &unspec, sizeof unspec), ETA_R_NOT_INET);
    auto mc = in4("224.0.0.1", 80), bc = in4("255.255.255.255", 80);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&mc, sizeof mc), ETA_R_NOT_ROUTED);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&bc, sizeof bc), ETA_R_NOT_ROUTED);
}

TEST(Decide, ConnectWithNoPpeNetworkGoesToTheKernel)
{
    eta_net empty{};
    auto peer = in4("198.18.0.2", 80);
    EXPECT_EQ(eta_decide_connect(&empty, (sockaddr *)&peer, sizeof peer), ETA_R_NOT_ROUTED);
}

TEST(Decide, BindTargets)
{
    eta_net n = lab_net();
    eta_reason why;
    auto any = in4("0.0.0.0", 80), ppe = in4("198.18.0.1", 80), kern = in4("198.19.0.1", 80),
         lo = in4("127.0.0.1", 80);
    EXPECT_EQ(eta_decide_bind(&n, (sockaddr *)&any, sizeof any, &why), ETA_BIND_BOTH);
    EXPECT_EQ(eta_decide_bind(&n, (sockaddr *)&ppe, sizeof ppe, &why), ETA_BIND_PPE);
    EXPECT_EQ(eta_decide_bind(&n, (sockaddr *)&kern, sizeof kern, &why), ETA_BIND_KERNEL);
    EXPECT_EQ(why, ETA_R_KERNEL_ADDR);
    EXPECT_EQ(eta_decide_bind(&n, (sockaddr *)&lo, sizeof lo, &why), ETA_BIND_KERNEL);
    EXPECT_EQ(why, ETA_R_LOOPBACK);
    EXPECT_EQ(eta_decide_bind(&n, nullptr, 0, &why), ETA_BIND_KERNEL);
    EXPECT_EQ(why, ETA_R_NOT_INET);
}

TEST(Decide, NetSaysWhetherThePpeReachesItself)
{
    eta_net n;
    char why[160];
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\n", &n, why, sizeof why), 0) << why;
    EXPECT_FALSE(n.self_unreachable); // a PPE that says nothing (the test fixture loops back)
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nself unreachable\n", &n, why, sizeof why), 0) << why;
    EXPECT_TRUE(n.self_unreachable);
    EXPECT_NE(eta_net_parse("self reachable", &n, why, sizeof why), 0);
    EXPECT_NE(eta_net_parse("self unreachable now", &n, why, sizeof why), 0);
}

// A port shared with the kernel, IPv6 (issues 29 and 31): TCP decides as on a
// port that is not shared (the placeholder holds the port in the kernel),
// the PPE's own IPv6 address is a local connection in the engine with
// `self local6` and the kernel's (`local`) without it; UDP over IPv6 is
// the engine's there too (session 53: its placeholder holds the port), but
// UDP to the PPE's own addresses is the kernel's (`local`: it loops the
// datagrams to whichever socket holds the port there); a bind to the PPE's
// IPv6 address is the PPE's for TCP and UDP alike.
TEST(Decide, Ipv6OnASharedPort)
{
    eta_net n{};
    char why[200];
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nport6 2001:2:0:2::1/64\nport6 fd00::1/120\nself shared\nself local\n"
                            "self local6\n",
                            &n, why, sizeof why),
              0)
        << why;
    EXPECT_EQ(connect6(n, "2001:2:0:2::2"), ETA_R_NONE) << "on-link, shared: the engine's (its port held in the kernel)";
    EXPECT_EQ(connect6(n, "2001:2:0:2::1"), ETA_R_NONE) << "the PPE's own address: tried in the engine first";
    EXPECT_EQ(connect6(n, "2001:2:0:3::2"), ETA_R_NOT_ROUTED);
    EXPECT_EQ(connect6(n, "fe80::1"), ETA_R_INET6);
    EXPECT_EQ(connect6(n, "::1"), ETA_R_LOOPBACK);
    sockaddr_in6 own = in6("2001:2:0:2::1", 80), other = in6("2001:2:0:2::2", 80), any = in6("::", 80);
    EXPECT_EQ(eta_decide_bind6(&n, (sockaddr *)&own, sizeof own, false), ETA_BIND_PPE) << "TCP: placeholder and PPE";
    EXPECT_EQ(eta_decide_bind6(&n, (sockaddr *)&own, sizeof own, true), ETA_BIND_PPE) << "UDP: placeholder and PPE";
    EXPECT_EQ(eta_decide_bind6(&n, (sockaddr *)&other, sizeof other, true), ETA_BIND_KERNEL) << "UDP, another address";
    EXPECT_EQ(eta_decide_bind6(&n, (sockaddr *)&other, sizeof other, false), ETA_BIND_KERNEL);
    EXPECT_EQ(eta_decide_bind6(&n, (sockaddr *)&any, sizeof any, false), ETA_BIND_KERNEL) << "[::] is listen()'s";
    EXPECT_EQ(eta_decide_bind6(&n, (sockaddr *)&own, sizeof own - 1, false), ETA_BIND_KERNEL);
    own.sin6_scope_id = 2;
    EXPECT_EQ(eta_decide_bind6(&n, (sockaddr *)&own, sizeof own, false), ETA_BIND_KERNEL) << "a scope: the kernel's";
    uint8_t dest[16], src[16], want[16];
    inet_pton(AF_INET6, "2001:2:0:2::1", dest);
    ASSERT_TRUE(eta_net_source6(&n, dest, src));
    EXPECT_EQ(memcmp(src, dest, 16), 0) << "a local connection leaves from the address it goes to";
    inet_pton(AF_INET6, "fd00::7", dest);
    inet_pton(AF_INET6, "fd00::1", want);
    ASSERT_TRUE(eta_net_source6(&n, dest, src));
    EXPECT_EQ(memcmp(src, want, 16), 0) << "from the port6 whose prefix holds the destination";
    inet_pton(AF_INET6, "2001:db8::7", dest);
    inet_pton(AF_INET6, "2001:2:0:2::1", want);
    ASSERT_TRUE(eta_net_source6(&n, dest, src));
    EXPECT_EQ(memcmp(src, want, 16), 0) << "else from the first";
    uint8_t peer[16];
    inet_pton(AF_INET6, "2001:2:0:2::2", peer);
    EXPECT_EQ(eta_decide_udp6(&n, peer, 0), ETA_R_NONE) << "UDP over IPv6 on-link, shared: the engine's (port held)";
    EXPECT_EQ(eta_decide_udp6(&n, dest, 0), ETA_R_NOT_ROUTED) << "UDP over IPv6 off-link, shared";
    inet_pton(AF_INET6, "2001:2:0:2::1", peer);
    EXPECT_EQ(eta_decide_udp6(&n, peer, 0), ETA_R_LOCAL) << "UDP to the PPE's own IPv6 address, shared: the kernel's (`local`)";
    inet_pton(AF_INET6, "fe80::1", peer);
    EXPECT_EQ(eta_decide_udp6(&n, peer, 0), ETA_R_INET6) << "UDP link-local, shared: the kernel's";
    inet_pton(AF_INET6, "::ffff:198.18.0.1", peer);
    EXPECT_EQ(eta_decide_udp6(&n, peer, 0), ETA_R_LOCAL) << "v4-mapped PPE address, shared: IPv4's UDP rule (the kernel's)";
    inet_pton(AF_INET6, "2001:2:0:2::2", peer);
    // Without `self local6`: the PPE's own IPv6 address is the kernel's, which
    // holds it on a shared port (`local`, as IPv4's).
    ASSERT_EQ(eta_net_parse("port6 2001:2:0:2::1/64\nself shared\nself local\n", &n, why, sizeof why), 0) << why;
    EXPECT_EQ(connect6(n, "2001:2:0:2::1"), ETA_R_LOCAL);
    EXPECT_EQ(connect6(n, "2001:2:0:2::2"), ETA_R_NONE);
    // Not shared: UDP's bind to the PPE's IPv6 address is the PPE's (as before).
    ASSERT_EQ(eta_net_parse("port6 2001:2:0:2::1/64\nself local\n", &n, why, sizeof why), 0) << why;
    own.sin6_scope_id = 0;
    EXPECT_EQ(eta_decide_bind6(&n, (sockaddr *)&own, sizeof own, true), ETA_BIND_PPE);
    EXPECT_EQ(eta_decide_bind6(&n, (sockaddr *)&own, sizeof own, false), ETA_BIND_PPE);
    EXPECT_EQ(eta_decide_udp6(&n, peer, 0), ETA_R_NONE);
    eta_net none{};
    EXPECT_FALSE(eta_net_source6(&none, dest, src)) << "no IPv6 address: no source";
}

// A port shared with the kernel (issue 29): the PPE's own addresses are the
// kernel's to connect to (its loopback reaches eta's hybrid listeners too);
// the rest of the subnet still goes through the PPE.
TEST(Decide, SharedPortSendsLocalConnectionsToTheKernel)
{
    eta_net n;
    char why[160];
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nroute 0.0.0.0/0 via 198.18.0.254\nself shared\n", &n, why, sizeof why), 0)
        << why;
    EXPECT_TRUE(n.self_shared);
    EXPECT_FALSE(n.self_unreachable);
    auto self = in4("198.18.0.1", 80), other = in4("198.18.0.2", 80);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&self, sizeof self), ETA_R_LOCAL);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&other, sizeof other), ETA_R_NONE);
    EXPECT_EQ(eta_net_source(&n, ntohl(other.sin_addr.s_addr)), ntohl(self.sin_addr.s_addr));
    EXPECT_EQ(eta_net_source(&n, 0x08080808u), ntohl(self.sin_addr.s_addr)); // via the route's gateway
    // Not shared: the PPE's own address is still "routed" (the caller refuses it).
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nself unreachable\n", &n, why, sizeof why), 0) << why;
    EXPECT_FALSE(n.self_shared);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&self, sizeof self), ETA_R_NONE);
    EXPECT_NE(eta_net_parse("self shared now", &n, why, sizeof why), 0);
    EXPECT_STREQ(eta_reason_name(ETA_R_LOCAL), "local");
}

// Issue 29: `self local` (the engine carries connections to its own
// address): a local connect goes to the PPE, shared port or not (the shim
// tries the kernel only after MARS refused one on a shared port).
TEST(Decide, SelfLocalKeepsLocalConnectionsInTheEngine)
{
    eta_net n;
    char why[200];
    auto self = in4("198.18.0.1", 80), other = in4("198.18.0.2", 80);
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nself shared\nself local\n", &n, why, sizeof why), 0) << why;
    EXPECT_TRUE(n.self_shared);
    EXPECT_TRUE(n.self_local);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&self, sizeof self), ETA_R_NONE);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&other, sizeof other), ETA_R_NONE);
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nself local\n", &n, why, sizeof why), 0) << why;
    EXPECT_FALSE(n.self_shared);
    EXPECT_FALSE(n.self_unreachable);
    EXPECT_TRUE(n.self_local);
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&self, sizeof self), ETA_R_NONE);
    EXPECT_NE(eta_net_parse("self local now", &n, why, sizeof why), 0);
    EXPECT_NE(eta_net_parse("bogus 10.0.0.0/8", &n, why, sizeof why), 0);
    EXPECT_NE(strstr(why, "'self local'"), nullptr) << why; // the message names what is allowed
}

TEST(Decide, NetParsingRejectsBadInputClearly)
{
    eta_net n;
    char why[160];
    EXPECT_EQ(eta_net_parse("port 198.18.0.1/24; route 10.0.0.0/8", &n, why, sizeof why), 0);
    EXPECT_EQ(n.n_ports, 1u);
    EXPECT_EQ(n.n_routes, 1u);
    EXPECT_EQ(n.port[0].prefix, 24);
    EXPECT_EQ(eta_net_parse("", &n, why, sizeof why), 0);
    EXPECT_EQ(n.n_ports, 0u);
    EXPECT_NE(eta_net_parse("port 198.18.0.1/33", &n, why, sizeof why), 0);
    EXPECT_NE(std::string(why).find("port"), std::string::npos);
    EXPECT_NE(eta_net_parse("port banana", &n, why, sizeof why), 0);
    EXPECT_NE(eta_net_parse("gateway 1.2.3.4/32", &n, why, sizeof why), 0);
    EXPECT_NE(std::string(why).find("unknown line"), std::string::npos);
    EXPECT_NE(eta_net_parse("route 10.0.0.0/8 through 1.2.3.4", &n, why, sizeof why), 0);
    std::string many;
    for (int i = 0; i < ETA_NET_MAX_PORTS + 1; i++)
        many += "port 10.0." + std::to_string(i) + ".1/24\n";
    EXPECT_NE(eta_net_parse(many.c_str(), &n, why, sizeof why), 0);
    std::string longline(300, 'x');
    EXPECT_NE(eta_net_parse(longline.c_str(), &n, why, sizeof why), 0);
}

TEST(Decide, ReasonNamesMatchThePublishedList)
{
    EXPECT_STREQ(eta_reason_name(ETA_R_NONE), "accelerated");
    EXPECT_STREQ(eta_reason_name(ETA_R_NO_PPE), "no-ppe");
    EXPECT_STREQ(eta_reason_name(ETA_R_FORK_CHILD), "fork-child");
    EXPECT_STREQ(eta_reason_name(ETA_R_COUNT), "unknown");
    static_assert(ETA_R_COUNT <= 16, "eta_preload_stats has 16 reason slots");
}

// UDP to the PPE's own addresses (issues 29 and 31): on a port shared with
// the kernel the kernel's (`local`, both families: it loops them to a plain
// program's socket or an eta socket's placeholder, which the shim reads),
// even where the engine carries local TCP connections; on a port not shared
// the engine's (its local loop), IPv6 only with `self local6`. Other
// destinations decide as a connect's.
TEST(Decide, UdpToThePpesOwnAddresses)
{
    eta_net n{};
    char why[200];
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nport6 2001:2:0:2::1/64\nself shared\nself local\nself local6\n", &n, why,
                            sizeof why),
              0)
        << why;
    auto self = in4("198.18.0.1", 53), other = in4("198.18.0.2", 53), lo = in4("127.0.0.1", 53);
    EXPECT_EQ(eta_decide_udp(&n, (sockaddr *)&self, sizeof self), ETA_R_LOCAL) << "shared: the kernel's";
    EXPECT_EQ(eta_decide_connect(&n, (sockaddr *)&self, sizeof self), ETA_R_NONE) << "TCP: the engine's try first";
    EXPECT_EQ(eta_decide_udp(&n, (sockaddr *)&other, sizeof other), ETA_R_NONE);
    EXPECT_EQ(eta_decide_udp(&n, (sockaddr *)&lo, sizeof lo), ETA_R_LOOPBACK);
    EXPECT_EQ(eta_decide_udp(&n, (sockaddr *)&self, sizeof self - 1), ETA_R_NOT_INET);
    EXPECT_EQ(eta_decide_udp(&n, nullptr, 0), ETA_R_NOT_INET);
    EXPECT_FALSE(eta_net_udp_routes(&n, ntohl(self.sin_addr.s_addr))) << "a hybrid sends it through its kernel half";
    EXPECT_TRUE(eta_net_udp_routes(&n, ntohl(other.sin_addr.s_addr)));
    EXPECT_FALSE(eta_net_udp_routes(&n, 0x7f000001u));
    uint8_t ip[16];
    inet_pton(AF_INET6, "2001:2:0:2::1", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_LOCAL);
    inet_pton(AF_INET6, "::ffff:198.18.0.1", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_LOCAL) << "v4-mapped: IPv4's UDP rule";
    inet_pton(AF_INET6, "2001:2:0:2::2", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_NONE);
    // Not shared: the engine carries them (MARS's local loop).
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nport6 2001:2:0:2::1/64\nself local\nself local6\n", &n, why, sizeof why), 0)
        << why;
    EXPECT_EQ(eta_decide_udp(&n, (sockaddr *)&self, sizeof self), ETA_R_NONE);
    EXPECT_TRUE(eta_net_udp_routes(&n, ntohl(self.sin_addr.s_addr)));
    inet_pton(AF_INET6, "2001:2:0:2::1", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_NONE);
    inet_pton(AF_INET6, "::ffff:198.18.0.1", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_NONE);
    // A PPE that does not loop IPv6 (no `self local6`): the kernel's, as before.
    ASSERT_EQ(eta_net_parse("port 198.18.0.1/24\nport6 2001:2:0:2::1/64\nself local\n", &n, why, sizeof why), 0) << why;
    inet_pton(AF_INET6, "2001:2:0:2::1", ip);
    EXPECT_EQ(eta_decide_udp6(&n, ip, 0), ETA_R_INET6);
}

} // namespace
