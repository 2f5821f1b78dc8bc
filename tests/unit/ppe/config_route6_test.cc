// IPv6 routes in eta-ppe's config (issue 31): [[port]] gateway6 and IPv6
// [[route]]s, each accepted form, each refusal with its one-line message,
// the reload comparison, and the `route6` lines of the shim's net file.
#include "config.h"
#include "net_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

using ppe::Config;
using testing::HasSubstr;

namespace {

// One port with IPv6 addresses: 2001:2:0:1::/64 and fd00::/120.
const char *kPort6 = R"(
[[port]]
device = "net_af_packet0,iface=eta0a"
address = "198.18.0.1/24"
address6 = ["2001:2:0:1::1/64", "fd00::1/120"]
)";

// Two ports, "a" (2001:2:0:1::/64) and "b" (2001:2:0:2::/64).
const char *kTwoPorts6 = R"(
[[port]]
name = "a"
device = "net_af_packet0,iface=eta0a"
address = "198.18.0.1/24"
address6 = ["2001:2:0:1::1/64"]
[[port]]
name = "b"
device = "net_af_packet1,iface=eta1a"
address = "198.18.1.1/24"
address6 = ["2001:2:0:2::1/64"]
)";

Config parse_ok(const std::string &text)
{
    Config c;
    std::string err;
    EXPECT_TRUE(ppe::parse_config("test.toml", text, &c, &err)) << err;
    return c;
}

std::string parse_err(const std::string &text)
{
    Config c;
    std::string err;
    EXPECT_FALSE(ppe::parse_config("test.toml", text, &c, &err)) << "accepted:\n" << text;
    EXPECT_EQ(err.rfind("test.toml:", 0), 0u) << "names the file and line: " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << "more than one line: " << err;
    return err;
}

mars::Ip6Addr ip6(const char *s)
{
    mars::Ip6Addr a;
    EXPECT_TRUE(ppe::parse_ipv6(s, &a)) << s;
    return a;
}

bool same(const mars::Ip6Addr &a, const char *s) { return std::memcmp(a.b, ip6(s).b, 16) == 0; }

std::string route6(const char *dest, const char *gw, const char *port = nullptr)
{
    std::string s = std::string("[[route]]\ndest = \"") + dest + "\"\ngateway = \"" + gw + "\"\n";
    if (port) s += std::string("port = \"") + port + "\"\n";
    return s;
}

TEST(PpeConfigRoute6, PortGateway6)
{
    Config c = parse_ok(std::string(kPort6) + "gateway6 = \"fe80::1\"\n");
    EXPECT_TRUE(c.ports[0].has_gateway6());
    EXPECT_TRUE(same(c.ports[0].gateway6, "fe80::1"));
    c = parse_ok(std::string(kPort6) + "gateway6 = \"2001:2:0:1::fe\"\n");
    EXPECT_TRUE(same(c.ports[0].gateway6, "2001:2:0:1::fe")) << "a global gateway inside the port's prefix";
    c = parse_ok(std::string(kPort6) + "gateway6 = \"FD00::FE\"\n");
    EXPECT_TRUE(same(c.ports[0].gateway6, "fd00::fe")) << "inside the second prefix, any case";
    EXPECT_FALSE(parse_ok(kPort6).ports[0].has_gateway6()) << "none unless written";
}

TEST(PpeConfigRoute6, Ipv6RoutesTakeTheirPort)
{
    Config c = parse_ok(std::string(kPort6) + route6("2001:db8::/32", "fe80::1") + route6("::/0", "2001:2:0:1::fe") +
                        "[[route]]\ndest = \"default\"\ngateway = \"198.18.0.254\"\n");
    ASSERT_EQ(c.routes6.size(), 2u);
    ASSERT_EQ(c.routes.size(), 1u) << "\"default\" stays IPv4's default route";
    EXPECT_TRUE(same(c.routes6[0].dest, "2001:db8::"));
    EXPECT_EQ(c.routes6[0].prefix, 32);
    EXPECT_TRUE(same(c.routes6[0].gateway, "fe80::1"));
    EXPECT_EQ(c.routes6[0].port, "port0") << "a link-local gateway with one port: that port's";
    EXPECT_EQ(c.routes6[0].index, 0u);
    EXPECT_TRUE(same(c.routes6[1].dest, "::"));
    EXPECT_EQ(c.routes6[1].prefix, 0);
    EXPECT_EQ(c.routes6[1].port, "port0");
    EXPECT_EQ(c.routes[0].index, 2u) << "the IPv4 route is the third [[route]]";
    EXPECT_EQ(c.routes[0].port, "port0");

    c = parse_ok(std::string(kTwoPorts6) + route6("2001:db8::/32", "2001:2:0:2::fe") +
                 route6("2001:db9::/48", "fe80::1", "b") + route6("2001:dba::/48", "2001:2:0:1::fe", "a"));
    ASSERT_EQ(c.routes6.size(), 3u);
    EXPECT_EQ(c.routes6[0].port, "b") << "the port whose prefix holds the gateway";
    EXPECT_EQ(c.routes6[1].port, "b") << "named";
    EXPECT_EQ(c.routes6[2].port, "a");
}

TEST(PpeConfigRoute6, Ipv4MessagesNameTheirOwnRouteTable)
{
    // The IPv4 route is route[1] in the file even though it is the first IPv4 one.
    std::string e = parse_err(std::string(kPort6) + route6("2001:db8::/32", "fe80::1") +
                              "[[route]]\ndest = \"default\"\ngateway = \"10.1.1.1\"\n");
    EXPECT_THAT(e, HasSubstr("route[1].gateway: 10.1.1.1 is on no port's subnet"));
}

TEST(PpeConfigRoute6, RoutesPerFamilyAreBounded)
{
    auto many = [](int n) {
        std::string s;
        for (int i = 0; i < n; i++) s += route6(("2001:db8:" + std::to_string(i) + "::/48").c_str(), "fe80::1");
        return s;
    };
    EXPECT_EQ(parse_ok(std::string(kPort6) + many(16)).routes6.size(), 16u);
    EXPECT_EQ(parse_ok(std::string(kPort6) + "gateway6 = \"fe80::1\"\n" + many(15)).routes6.size(), 15u);
    std::string e = parse_err(std::string(kPort6) + "gateway6 = \"fe80::1\"\n" + many(16));
    EXPECT_THAT(e, HasSubstr("17 IPv6 routes (16 [[route]] and 1 gateway6); at most 16 are allowed"));
    e = parse_err(std::string(kPort6) + many(17));
    EXPECT_THAT(e, HasSubstr("17 IPv6 routes"));
    // IPv4 on its own count: 16 IPv4 routes beside 16 IPv6 ones are fine;
    // its port gateway counts as one too.
    std::string v4;
    for (int i = 0; i < 16; i++) v4 += "[[route]]\ndest = \"10." + std::to_string(i) + ".0.0/16\"\ngateway = \"198.18.0.254\"\n";
    Config c = parse_ok(std::string(kPort6) + many(16) + v4);
    EXPECT_EQ(c.routes.size(), 16u);
    e = parse_err(std::string(kPort6) + "gateway = \"198.18.0.254\"\n" + v4);
    EXPECT_THAT(e, HasSubstr("17 IPv4 routes (16 [[route]] and 1 port gateway); at most 16"));
}

struct Bad6 {
    const char *name;
    std::string text;
    std::vector<std::string> expect; // substrings of the one message
};

class PpeConfigRoute6Bad : public testing::TestWithParam<Bad6> {};

TEST_P(PpeConfigRoute6Bad, IsRejectedWithItsMessage)
{
    const Bad6 &b = GetParam();
    std::string err = parse_err(b.text);
    for (auto &s : b.expect) EXPECT_THAT(err, HasSubstr(s));
}

std::string gw6(const char *g) { return std::string(kPort6) + "gateway6 = \"" + g + "\"\n"; }
std::string r6(const char *d, const char *g, const char *port = nullptr) { return std::string(kPort6) + route6(d, g, port); }

const Bad6 kBad6[] = {
    // [[port]] gateway6
    {"gw6_not_v6", gw6("198.18.0.254"), {"test.toml:6", "port[0].gateway6", "is not an IPv6 address", "fe80::1"}},
    {"gw6_zone", gw6("fe80::1%eth0"), {"port[0].gateway6", "has a zone", "\"fe80::1\""}},
    {"gw6_unspecified", gw6("::"), {"port[0].gateway6", "unspecified address"}},
    {"gw6_loopback", gw6("::1"), {"port[0].gateway6", "loopback"}},
    {"gw6_multicast", gw6("ff02::2"), {"port[0].gateway6", "multicast"}},
    {"gw6_v4_mapped", gw6("::ffff:198.18.0.254"), {"port[0].gateway6", "IPv4-mapped", "A.B.C.D"}},
    {"gw6_v4_compatible", gw6("::198.18.0.254"), {"port[0].gateway6", "IPv4-compatible"}},
    {"gw6_outside", gw6("2001:2:0:9::fe"),
     {"port[0].gateway6", "\"2001:2:0:9::fe\" is outside the port's address6 prefixes (2001:2:0:1::/64, fd00::/120)",
      "link-local"}},
    {"gw6_own", gw6("2001:2:0:1::1"), {"port[0].gateway6", "the port's own address"}},
    {"gw6_no_address6", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.1/24\"\ngateway6 = \"fe80::1\"\n",
     {"port[0].gateway6", "no address6", "add address6"}},
    {"gw6_not_string", std::string(kPort6) + "gateway6 = 1\n", {"port[0].gateway6", "expected a string"}},
    // IPv6 [[route]] dest
    {"dest6_host_bits", r6("2001:db8::1/32", "fe80::1"), {"test.toml:7", "route[0].dest", "host bits", "\"2001:db8::/32\""}},
    {"dest6_no_prefix", r6("2001:db8::", "fe80::1"), {"route[0].dest", "no prefix length", "::/0"}},
    {"dest6_prefix_129", r6("2001:db8::/129", "fe80::1"), {"route[0].dest", "allowed 0 to 128"}},
    {"dest6_prefix_sign", r6("2001:db8::/+32", "fe80::1"), {"route[0].dest", "allowed 0 to 128"}},
    {"dest6_not_v6", r6("2001:db8::zz/32", "fe80::1"), {"route[0].dest", "is not an IPv6 address"}},
    {"dest6_link_local", r6("fe80::/64", "fe80::1"), {"route[0].dest", "link-local", "never routed"}},
    {"dest6_multicast", r6("ff00::/8", "fe80::1"), {"route[0].dest", "multicast"}},
    {"dest6_v4_mapped", r6("::ffff:0:0/96", "fe80::1"), {"route[0].dest", "IPv4 hosts", "IPv4 [[route]]"}},
    // mixed families
    {"mix_v6_dest_v4_gw", r6("2001:db8::/32", "198.18.0.254"),
     {"test.toml:8", "route[0].gateway", "is not an IPv6 address, but dest \"2001:db8::/32\" is IPv6", "one family"}},
    {"mix_v4_dest_v6_gw", r6("10.0.0.0/8", "fe80::1"), {"route[0].gateway", "is an IPv6 address, but dest \"10.0.0.0/8\" is IPv4", "one family"}},
    {"mix_default_v6_gw", r6("default", "fe80::1"), {"route[0].gateway", "\"default\" is the IPv4 default route", "dest = \"::/0\""}},
    // IPv6 [[route]] gateway
    {"rgw6_unspecified", r6("::/0", "::"), {"route[0].gateway", "unspecified"}},
    {"rgw6_loopback", r6("::/0", "::1"), {"route[0].gateway", "loopback"}},
    {"rgw6_multicast", r6("::/0", "ff02::1"), {"route[0].gateway", "multicast"}},
    {"rgw6_v4_mapped", r6("::/0", "::ffff:198.18.0.254"), {"route[0].gateway", "IPv4-mapped"}},
    {"rgw6_zone", r6("::/0", "fe80::1%eth0"), {"route[0].gateway", "has a zone"}},
    {"rgw6_on_no_port", r6("::/0", "2001:2:0:9::fe"),
     {"route[0].gateway", "is inside no port's address6 prefix (port0: 2001:2:0:1::/64, fd00::/120)", "port = \"NAME\""}},
    {"rgw6_outside_named_port", std::string(kTwoPorts6) + route6("::/0", "2001:2:0:2::fe", "a"),
     {"route[0].gateway", "is outside port \"a\"'s address6 prefixes (2001:2:0:1::/64)"}},
    {"rgw6_link_local_two_ports", std::string(kTwoPorts6) + route6("::/0", "fe80::1"),
     {"route[0].gateway", "link-local", "2 ports", "port = \"NAME\" (\"a\", \"b\")"}},
    {"rgw6_own", r6("::/0", "fd00::1"), {"route[0].gateway", "port \"port0\"'s own address"}},
    {"route6_bad_port", r6("::/0", "fe80::1", "x"), {"route[0].port", "no port is named \"x\"", "\"port0\""}},
    {"route6_port_no_address6",
     std::string(kTwoPorts6) + "[[port]]\nname = \"c\"\ndevice = \"net_tap0\"\naddress = \"198.18.2.1/24\"\n" +
         route6("::/0", "fe80::1", "c"),
     {"route[0].port", "port \"c\" has no address6", "add address6"}},
    {"route6_one_port_no_address6",
     "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.1/24\"\n" + route6("::/0", "fe80::1"),
     {"route[0].gateway", "port \"port0\" has no address6"}},
    {"route6_unknown_key", r6("::/0", "fe80::1") + "metric = 5\n", {"route[0].metric", "unknown key", "dest, gateway, port"}},
};

INSTANTIATE_TEST_SUITE_P(All, PpeConfigRoute6Bad, testing::ValuesIn(kBad6),
                         [](const testing::TestParamInfo<Bad6> &i) { return std::string(i.param.name); });

// A reload cannot change gateway6 or any route: the comparisons see them.
TEST(PpeConfigRoute6, ReloadSeesIpv6Routes)
{
    const std::string base = std::string(kPort6) + "gateway6 = \"fe80::1\"\n" + route6("2001:db8::/32", "2001:2:0:1::fe");
    Config a = parse_ok(base), same = parse_ok(base);
    EXPECT_TRUE(ppe::same_port_setup(a.ports[0], same.ports[0]));
    EXPECT_TRUE(ppe::same_routes(a, same));
    Config g = parse_ok(std::string(kPort6) + "gateway6 = \"fe80::2\"\n" + route6("2001:db8::/32", "2001:2:0:1::fe"));
    EXPECT_FALSE(ppe::same_port_setup(a.ports[0], g.ports[0])) << "gateway6 changed";
    Config none = parse_ok(std::string(kPort6) + route6("2001:db8::/32", "2001:2:0:1::fe"));
    EXPECT_FALSE(ppe::same_port_setup(a.ports[0], none.ports[0])) << "gateway6 removed";
    const std::string head = std::string(kPort6) + "gateway6 = \"fe80::1\"\n";
    EXPECT_FALSE(ppe::same_routes(a, parse_ok(head + route6("2001:db9::/32", "2001:2:0:1::fe")))) << "dest";
    EXPECT_FALSE(ppe::same_routes(a, parse_ok(head + route6("2001:db8::/48", "2001:2:0:1::fe")))) << "prefix";
    EXPECT_FALSE(ppe::same_routes(a, parse_ok(head + route6("2001:db8::/32", "2001:2:0:1::fd")))) << "gateway";
    EXPECT_FALSE(ppe::same_routes(a, parse_ok(head))) << "removed";
    Config two1 = parse_ok(std::string(kTwoPorts6) + route6("::/0", "fe80::1", "a"));
    Config two2 = parse_ok(std::string(kTwoPorts6) + route6("::/0", "fe80::1", "b"));
    EXPECT_FALSE(ppe::same_routes(two1, two2)) << "port";
    // IPv4 routes still count.
    Config v4a = parse_ok(std::string(kPort6) + "[[route]]\ndest = \"10.0.0.0/8\"\ngateway = \"198.18.0.254\"\n");
    Config v4b = parse_ok(std::string(kPort6) + "[[route]]\ndest = \"10.0.0.0/8\"\ngateway = \"198.18.0.253\"\n");
    EXPECT_FALSE(ppe::same_routes(v4a, v4b));
    EXPECT_TRUE(ppe::same_routes(v4a, parse_ok(std::string(kPort6) + "[[route]]\ndest = \"10.0.0.0/8\"\ngateway = \"198.18.0.254\"\n")));
}

// What each engine's MARS stack for a port gets (engine.cc): the port's
// gateway6 as ::/0 first, then the IPv6 routes whose port it is; IPv4 alike.
TEST(PpeConfigRoute6, StacksGetTheirPortsRoutes)
{
    Config c = parse_ok(std::string(kTwoPorts6) + "gateway6 = \"fe80::9\"\ngateway = \"198.18.1.254\"\n" +
                        route6("2001:db8::/32", "2001:2:0:1::fe") + route6("2001:db9::/48", "fe80::1", "b") +
                        "[[route]]\ndest = \"10.0.0.0/8\"\ngateway = \"198.18.0.254\"\n");
    ASSERT_EQ(c.ports.size(), 2u);
    mars::StackConfig a, b;
    ppe::stack_routes(c, c.ports[0], &a);
    ppe::stack_routes(c, c.ports[1], &b);
    ASSERT_EQ(a.n_routes6, 1);
    EXPECT_TRUE(same(a.routes6[0].dest, "2001:db8::"));
    EXPECT_EQ(a.routes6[0].prefix, 32);
    EXPECT_TRUE(same(a.routes6[0].gateway, "2001:2:0:1::fe"));
    ASSERT_EQ(a.n_routes, 1);
    EXPECT_EQ(a.routes[0].dest, 0x0a000000u);
    EXPECT_EQ(a.routes[0].prefix, 8);
    ASSERT_EQ(b.n_routes6, 2);
    EXPECT_TRUE(same(b.routes6[0].dest, "::"));
    EXPECT_EQ(b.routes6[0].prefix, 0) << "gateway6: the default route";
    EXPECT_TRUE(same(b.routes6[0].gateway, "fe80::9"));
    EXPECT_TRUE(same(b.routes6[1].dest, "2001:db9::"));
    EXPECT_EQ(b.routes6[1].prefix, 48);
    EXPECT_TRUE(same(b.routes6[1].gateway, "fe80::1"));
    ASSERT_EQ(b.n_routes, 1);
    EXPECT_EQ(b.routes[0].prefix, 0);
    EXPECT_EQ(b.routes[0].gateway, 0xc61201feu);
    mars::StackConfig none;
    const Config plain = parse_ok(kPort6);
    ASSERT_EQ(plain.ports.size(), 1u);
    ppe::stack_routes(plain, plain.ports[0], &none);
    EXPECT_EQ(none.n_routes6, 0) << "no gateway6, no IPv6 route: on-link only, as before";
    EXPECT_EQ(none.n_routes, 0);
}

// `<socket>.net`: the first port's routes, IPv4 then IPv6 (route6 lines:
// gateway6 as ::/0); another port's routes are not the shim's.
TEST(PpeConfigRoute6, NetFileCarriesTheFirstPortsIpv6Routes)
{
    Config c = parse_ok(std::string(kTwoPorts6) + "gateway6 = \"fe80::9\"\n" + route6("2001:db8::/32", "2001:2:0:1::fe") +
                        route6("2001:db9::/48", "fe80::1", "b") + route6("fd01::/16", "fe80::2", "a") +
                        "[[route]]\ndest = \"10.0.0.0/8\"\ngateway = \"198.18.0.254\"\n");
    // gateway6 above belongs to port "b" (the last [[port]]).
    ASSERT_EQ(c.ports.size(), 2u);
    EXPECT_EQ(ppe::net_file_text(c), "port 198.18.0.1/24\n"
                                     "port6 2001:2:0:1::1/64\n"
                                     "route 10.0.0.0/8 via 198.18.0.254\n"
                                     "route6 2001:db8::/32 via 2001:2:0:1::fe\n"
                                     "route6 fd01::/16 via fe80::2\n"
                                     "self local\nself local6\n");
    Config g = parse_ok(std::string(kPort6) + "gateway6 = \"fe80::1\"\ngateway = \"198.18.0.254\"\nkernel = \"shared\"\n");
    ASSERT_EQ(g.ports.size(), 1u);
    EXPECT_EQ(ppe::net_file_text(g), "port 198.18.0.1/24\n"
                                     "route 0.0.0.0/0 via 198.18.0.254\n"
                                     "port6 2001:2:0:1::1/64\n"
                                     "port6 fd00::1/120\n"
                                     "route6 ::/0 via fe80::1\n"
                                     "self shared\nself local\nself local6\n");
    const Config plain = parse_ok(kPort6);
    ASSERT_EQ(plain.ports.size(), 1u);
    EXPECT_EQ(ppe::net_file_text(plain).find("route6"), std::string::npos) << "no IPv6 route, no line";
}

} // namespace
