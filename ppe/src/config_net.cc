// ppe/src/config_net.cc: the network keys of eta-ppe's config (config_net.h):
// a port's addresses and gateways, [[route]] for IPv4 and IPv6 (issue 31),
// and the checks that tie each route to a port.
#include "config_net.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ppe {

namespace config_net {

// "A.B.C.D/P"
void parse_cidr(Section &s, const std::string &key, const std::string &text, uint32_t *ip, uint8_t *prefix)
{
    size_t slash = text.find('/');
    std::string addr = slash == std::string::npos ? text : text.substr(0, slash);
    if (slash == std::string::npos)
        s.fail(key, "\"" + text + "\" has no prefix length; write ADDRESS/PREFIX such as \"198.18.0.1/24\"");
    if (!parse_ipv4(addr, ip))
        s.fail(key, "\"" + addr + "\" is not an IPv4 address; write ADDRESS/PREFIX such as \"198.18.0.1/24\"");
    std::string p = text.substr(slash + 1);
    char *end = nullptr;
    errno = 0;
    long v = std::strtol(p.c_str(), &end, 10);
    if (p.empty() || *end != '\0' || errno || v < 0 || v > 32)
        s.fail(key, "prefix length \"" + p + "\" is not allowed; allowed 0 to 32");
    *prefix = uint8_t(v);
}

uint32_t netmask(uint8_t prefix) { return prefix == 0 ? 0 : ~0u << (32 - prefix); }

bool is_unicast_host(uint32_t ip)
{
    return ip != 0 && ip != 0xffffffffu && (ip >> 28) != 0xe /* multicast */ && (ip >> 24) != 127;
}

bool in_prefix6(const mars::Ip6Addr &a, const mars::Ip6Addr &net, unsigned prefix)
{
    const unsigned whole = prefix / 8, rest = prefix % 8;
    if (std::memcmp(a.b, net.b, whole) != 0) return false;
    return rest == 0 || ((a.b[whole] ^ net.b[whole]) & uint8_t(0xff00u >> rest)) == 0;
}

mars::Ip6Addr network6(const mars::Ip6Addr &a, unsigned prefix)
{
    mars::Ip6Addr n;
    for (unsigned i = 0; i < 16; i++) {
        const unsigned bits = prefix >= 8 * (i + 1) ? 8 : prefix > 8 * i ? prefix - 8 * i : 0;
        n.b[i] = a.b[i] & uint8_t(0xff00u >> bits);
    }
    return n;
}

namespace {

bool same6(const mars::Ip6Addr &a, const mars::Ip6Addr &b) { return std::memcmp(a.b, b.b, 16) == 0; }

bool is_link_local6(const mars::Ip6Addr &a) { return a.b[0] == 0xfe && (a.b[1] & 0xc0) == 0x80; }

// What kind of IPv6 address a is, for the checks of address6 and gateway6
// (RFC 4291 2.4-2.5: ::, ::1, ::/96, ::ffff:0:0/96, ff00::/8, fe80::/10).
enum class Kind6 { kUnspecified, kLoopback, kV4Compatible, kV4Mapped, kMulticast, kLinkLocal, kUnicast };

Kind6 kind6(const mars::Ip6Addr &a)
{
    const uint8_t *b = a.b;
    bool zero10 = true;
    for (int i = 0; i < 10; i++) zero10 &= b[i] == 0;
    if (zero10 && b[10] == 0 && b[11] == 0) {
        const uint32_t last = uint32_t(b[12]) << 24 | uint32_t(b[13]) << 16 | uint32_t(b[14]) << 8 | b[15];
        return last == 0 ? Kind6::kUnspecified : last == 1 ? Kind6::kLoopback : Kind6::kV4Compatible;
    }
    if (zero10 && b[10] == 0xff && b[11] == 0xff) return Kind6::kV4Mapped;
    if (b[0] == 0xff) return Kind6::kMulticast;
    if (is_link_local6(a)) return Kind6::kLinkLocal;
    return Kind6::kUnicast;
}

// Inside one of the port's address6 prefixes (on its link).
bool on_port6(const PortConfig &p, const mars::Ip6Addr &a)
{
    for (const mars::Ip6Prefix &x : p.addr6)
        if (in_prefix6(a, x.addr, x.prefix)) return true;
    return false;
}

// The port's IPv6 prefixes as networks, for messages: "2001:2:0:1::/64, fd00::/120".
std::string prefixes6(const PortConfig &p)
{
    std::string s;
    for (const mars::Ip6Prefix &a : p.addr6)
        s += (s.empty() ? "" : ", ") + format_ipv6(mars::Ip6Prefix{network6(a.addr, a.prefix), a.prefix});
    return s.empty() ? "none: it has no address6" : s;
}

// Why `text` cannot be an IPv6 gateway, "" when it can (parsed into *gw): a
// unicast neighbour's address, link-local (fe80::/10) or global.
std::string gateway6_problem(const std::string &text, mars::Ip6Addr *gw)
{
    const std::string example = "write the router's address, e.g. \"fe80::1\" (its link-local address) or a global "
                                "one inside the port's address6 prefixes";
    if (text.find('%') != std::string::npos)
        return "has a zone (%...); the port is the link: write the address alone, e.g. \"fe80::1\" (with "
               "port = \"NAME\" in a [[route]] where there are several ports)";
    if (!parse_ipv6(text, gw)) return "is not an IPv6 address; " + example;
    switch (kind6(*gw)) {
    case Kind6::kUnspecified: return "is the unspecified address (::), not a router; " + example;
    case Kind6::kLoopback: return "is the loopback address (::1), not a router; " + example;
    case Kind6::kV4Compatible: return "is an IPv4-compatible address (::/96, deprecated by RFC 4291); " + example;
    case Kind6::kV4Mapped:
        return "is an IPv4-mapped address (::ffff:0:0/96), which names an IPv4 host; an IPv4 gateway is written "
               "A.B.C.D (`gateway`, or an IPv4 [[route]]); for IPv6 " + example;
    case Kind6::kMulticast: return "is a multicast address (ff00::/8), not one router; " + example;
    case Kind6::kLinkLocal:
    case Kind6::kUnicast: break;
    }
    return "";
}

std::string port_names(const Config &c)
{
    std::string s;
    for (const PortConfig &p : c.ports) s += (s.empty() ? "\"" : ", \"") + p.name + "\"";
    return s;
}

// dest = "NETWORK/PREFIX" of an IPv6 route.
void parse_dest6(Section &r, const std::string &dest, Route6Config *rt)
{
    const std::string example =
        "write NETWORK/PREFIX such as \"2001:db8::/32\", or \"::/0\" for the IPv6 default route";
    const size_t slash = dest.find('/');
    if (slash == std::string::npos) r.fail("dest", "\"" + dest + "\" has no prefix length; " + example);
    const std::string a = dest.substr(0, slash), pl = dest.substr(slash + 1);
    if (a.find('%') != std::string::npos || !parse_ipv6(a, &rt->dest))
        r.fail("dest", "\"" + a + "\" is not an IPv6 address; " + example);
    char *end = nullptr;
    errno = 0;
    const long v = std::strtol(pl.c_str(), &end, 10);
    if (pl.empty() || !std::isdigit(static_cast<unsigned char>(pl[0])) || *end != '\0' || errno || v < 0 || v > 128)
        r.fail("dest", "prefix length \"" + pl + "\" is not allowed; allowed 0 to 128");
    rt->prefix = uint8_t(v);
    const mars::Ip6Addr net = network6(rt->dest, rt->prefix);
    if (!same6(net, rt->dest))
        r.fail("dest", "\"" + dest + "\" has host bits set; write the network, e.g. \"" +
                           format_ipv6(mars::Ip6Prefix{net, rt->prefix}) + "\"");
    const uint8_t *b = rt->dest.b;
    if (rt->prefix >= 10 && is_link_local6(rt->dest))
        r.fail("dest", "\"" + dest + "\" is link-local (fe80::/10): always on the port's own link, never routed; "
                       "remove this route");
    if (rt->prefix >= 8 && b[0] == 0xff)
        r.fail("dest", "\"" + dest + "\" is multicast (ff00::/8); a route carries unicast destinations");
    bool zero10 = true;
    for (int i = 0; i < 10; i++) zero10 &= b[i] == 0;
    if (rt->prefix >= 96 && zero10 && b[10] == 0xff && b[11] == 0xff)
        r.fail("dest", "\"" + dest + "\" names IPv4 hosts (::ffff:0:0/96); write an IPv4 [[route]] "
                       "(dest = \"A.B.C.D/P\" with an IPv4 gateway)");
}

// An IPv6 [[route]]: dest parsed, the gateway and the port settled.
void parse_route6(Section &r, uint32_t index, const std::string &dest, const std::string &gw, const std::string &port,
                  Config *c)
{
    Route6Config rt;
    rt.index = index;
    parse_dest6(r, dest, &rt);
    if (gw.find(':') == std::string::npos)
        r.fail("gateway", "\"" + gw + "\" is not an IPv6 address, but dest \"" + dest + "\" is IPv6; a route is "
                          "one family: write an IPv6 gateway (e.g. \"fe80::1\"), or an IPv4 dest");
    const std::string why = gateway6_problem(gw, &rt.gateway);
    if (!why.empty()) r.fail("gateway", "\"" + gw + "\" " + why);
    r.reject_unknown("dest, gateway, port");
    // No port at all: cross_check says so.
    const PortConfig *via = nullptr;
    const bool link_local = is_link_local6(rt.gateway);
    if (!port.empty()) {
        for (const PortConfig &p : c->ports)
            if (p.name == port) via = &p;
        if (!via && !c->ports.empty())
            r.fail("port", "no port is named \"" + port + "\"; the ports are " + port_names(*c));
    } else if (link_local) {
        if (c->ports.size() > 1)
            r.fail("gateway", "\"" + gw + "\" is link-local, which names a neighbour on one link, and there are " +
                                  std::to_string(c->ports.size()) + " ports: say which with port = \"NAME\" (" +
                                  port_names(*c) + ")");
        if (!c->ports.empty()) via = &c->ports[0];
    } else {
        std::string all;
        for (const PortConfig &p : c->ports) {
            if (on_port6(p, rt.gateway)) {
                via = &p;
                break;
            }
            all += (all.empty() ? "" : "; ") + p.name + ": " + prefixes6(p);
        }
        if (!via && !c->ports.empty())
            r.fail("gateway", "\"" + gw + "\" is inside no port's address6 prefix (" + all +
                                  "); a gateway is a neighbour on a port's link: write one inside them, or the "
                                  "router's link-local address (fe80::...) with port = \"NAME\"");
    }
    if (via) {
        if (via->addr6.empty())
            r.fail(port.empty() ? "gateway" : "port",
                   "port \"" + via->name + "\" has no address6; routed IPv6 leaves from one of the port's own "
                   "addresses: add address6 = [\"ADDRESS/PREFIX\"] to it");
        if (!link_local && !on_port6(*via, rt.gateway))
            r.fail("gateway", "\"" + gw + "\" is outside port \"" + via->name + "\"'s address6 prefixes (" +
                                  prefixes6(*via) + "); a gateway is a neighbour on the link: write one inside "
                                  "them, or the router's link-local address (fe80::...)");
        for (const mars::Ip6Prefix &a : via->addr6)
            if (same6(a.addr, rt.gateway))
                r.fail("gateway", "\"" + gw + "\" is port \"" + via->name + "\"'s own address; write the router's");
        rt.port = via->name;
    }
    c->routes6.push_back(rt);
}

} // namespace

// [[port]] address6 = ["ADDR[/PREFIX]", ...]: global or unique-local IPv6
// addresses (issue 31). Link-local ones are the stack's own (derived from
// the MAC), so never written here; nor multicast, ::, ::1, v4-mapped or
// v4-compatible addresses, nor one address twice.
void parse_address6(Section &p, PortConfig *port)
{
    const std::string key = "address6";
    const toml::node *n = p.node(key);
    if (!n) return;
    if (n->is_string())
        p.fail(key, "expected an array of strings, e.g. address6 = [\"" + *n->value<std::string>() +
                        "\"] (one port may have several IPv6 addresses)");
    bool present = false;
    const auto list = p.strings(key, &present);
    if (list.size() > size_t(mars::StackConfig::kMaxAddr6))
        p.fail(key, std::to_string(list.size()) + " addresses; at most " +
                        std::to_string(mars::StackConfig::kMaxAddr6) + " per port are allowed");
    const std::string example = "write ADDRESS/PREFIX such as \"2001:2:0:1::1/64\"";
    for (auto &[text, where] : list) {
        auto bad = [&](const std::string &what) { p.fail_at(where, p.full(key), "\"" + text + "\" " + what); };
        const size_t slash = text.find('/');
        const std::string a = slash == std::string::npos ? text : text.substr(0, slash);
        mars::Ip6Prefix e;
        if (a.find('%') != std::string::npos)
            bad("has a zone (%...); zones belong to link-local addresses, which are derived from the MAC and are "
                "not configured; write a global address, " + example);
        if (!parse_ipv6(a, &e.addr)) bad("is not an IPv6 address; " + example);
        e.prefix = 64;
        if (slash != std::string::npos) {
            const std::string pl = text.substr(slash + 1);
            char *end = nullptr;
            errno = 0;
            const long v = std::strtol(pl.c_str(), &end, 10);
            if (pl.empty() || !std::isdigit(static_cast<unsigned char>(pl[0])) || *end != '\0' || errno || v < 1 ||
                v > 128)
                bad("has prefix length \"" + pl + "\"; allowed 1 to 128 (64 when omitted)");
            e.prefix = uint8_t(v);
        }
        const char *why = nullptr;
        switch (kind6(e.addr)) {
        case Kind6::kUnspecified: why = "is the unspecified address (::); write one of the port's own addresses"; break;
        case Kind6::kLoopback: why = "is the loopback address (::1); write one of the port's own addresses"; break;
        case Kind6::kV4Compatible:
            why = "is an IPv4-compatible address (::/96, deprecated by RFC 4291); write a native IPv6 address";
            break;
        case Kind6::kV4Mapped:
            why = "is an IPv4-mapped address (::ffff:0:0/96), which names an IPv4 host; put the IPv4 address in "
                  "`address` and a native IPv6 address here";
            break;
        case Kind6::kMulticast: why = "is a multicast address (ff00::/8); a port's address must be unicast"; break;
        case Kind6::kLinkLocal:
            why = "is link-local (fe80::/10); the port's link-local address is always derived from its MAC, so "
                  "leave it out and list only global or unique-local addresses";
            break;
        case Kind6::kUnicast: break;
        }
        if (why) bad(why);
        for (const mars::Ip6Prefix &o : port->addr6)
            if (std::memcmp(o.addr.b, e.addr.b, 16) == 0)
                bad("is listed twice (as \"" + format_ipv6(o) + "\" before); list each address once");
        port->addr6.push_back(e);
    }
}

void parse_gateway6(Section &p, PortConfig *port)
{
    if (!p.has("gateway6")) return;
    const std::string text = p.string("gateway6", "");
    const std::string why = gateway6_problem(text, &port->gateway6);
    if (!why.empty()) p.fail("gateway6", "\"" + text + "\" " + why);
    if (port->addr6.empty())
        p.fail("gateway6", "the port has no address6; routed IPv6 leaves from one of the port's own addresses: "
                           "add address6 = [\"ADDRESS/PREFIX\"], or remove gateway6");
    for (const mars::Ip6Prefix &a : port->addr6)
        if (same6(a.addr, port->gateway6))
            p.fail("gateway6", "\"" + text + "\" is the port's own address; write the router's");
    if (!is_link_local6(port->gateway6) && !on_port6(*port, port->gateway6))
        p.fail("gateway6", "\"" + text + "\" is outside the port's address6 prefixes (" + prefixes6(*port) +
                               "); a gateway is a neighbour on the link: write one inside them, or the router's "
                               "link-local address (fe80::...)");
}

void parse_route(Section &r, uint32_t index, Config *c)
{
    const std::string dest = r.string("dest", "", true);
    const std::string gw = r.string("gateway", "", true);
    const std::string port = r.string("port", "");
    if (dest != "default" && dest.find(':') != std::string::npos) {
        parse_route6(r, index, dest, gw, port, c);
        return;
    }
    RouteConfig route;
    route.index = index;
    if (dest == "default") {
        route.dest = 0;
        route.prefix = 0;
    } else {
        parse_cidr(r, "dest", dest, &route.dest, &route.prefix);
        if ((route.dest & ~netmask(route.prefix)) != 0)
            r.fail("dest", "\"" + dest + "\" has host bits set; write the network, e.g. \"" +
                               format_ipv4(route.dest & netmask(route.prefix)) + "/" +
                               std::to_string(route.prefix) + "\"");
    }
    if (gw.find(':') != std::string::npos)
        r.fail("gateway", dest == "default"
                              ? "\"" + gw + "\" is an IPv6 address, but dest \"default\" is the IPv4 default route; "
                                "for IPv6's write dest = \"::/0\""
                              : "\"" + gw + "\" is an IPv6 address, but dest \"" + dest + "\" is IPv4; a route is "
                                "one family: write an IPv4 gateway (A.B.C.D), or an IPv6 dest");
    if (!parse_ipv4(gw, &route.gateway) || !is_unicast_host(route.gateway))
        r.fail("gateway", "\"" + gw + "\" is not a unicast IPv4 address");
    route.port = port;
    r.reject_unknown("dest, gateway, port");
    c->routes.push_back(route);
}

void check_routes(Section &root, Config *c)
{
    // Each port's MARS stack holds kMaxRoutes of each family; a port's
    // gateway (gateway6) is one of them (its default route).
    const size_t most = size_t(mars::StackConfig::kMaxRoutes);
    size_t gw4 = 0, gw6 = 0;
    for (const PortConfig &p : c->ports) {
        gw4 += p.gateway != 0;
        gw6 += p.has_gateway6();
    }
    if (c->routes.size() + gw4 > most)
        root.fail("route", std::to_string(c->routes.size() + gw4) + " IPv4 routes (" +
                               std::to_string(c->routes.size()) + " [[route]] and " + std::to_string(gw4) +
                               " port gateway); at most " + std::to_string(most) + " are allowed");
    if (c->routes6.size() + gw6 > most)
        root.fail("route", std::to_string(c->routes6.size() + gw6) + " IPv6 routes (" +
                               std::to_string(c->routes6.size()) + " [[route]] and " + std::to_string(gw6) +
                               " gateway6); at most " + std::to_string(most) + " are allowed");
    for (RouteConfig &r : c->routes) {
        const PortConfig *via = nullptr;
        for (auto &p : c->ports) {
            bool named = !r.port.empty() && p.name == r.port;
            bool holds = (r.gateway & netmask(p.prefix)) == (p.ip & netmask(p.prefix));
            if (named || (r.port.empty() && holds)) { via = &p; break; }
        }
        std::string key = "route[" + std::to_string(r.index) + "]";
        if (!via && !r.port.empty()) root.fail("route", key + ".port: no port is named \"" + r.port + "\"");
        if (!via) root.fail("route", key + ".gateway: " + format_ipv4(r.gateway) + " is on no port's subnet");
        if ((r.gateway & netmask(via->prefix)) != (via->ip & netmask(via->prefix)))
            root.fail("route", key + ".gateway: " + format_ipv4(r.gateway) + " is not on port \"" + via->name +
                                   "\"'s subnet");
        r.port = via->name;
    }
}

} // namespace config_net

void stack_routes(const Config &c, const PortConfig &port, mars::StackConfig *sc)
{
    const int most = mars::StackConfig::kMaxRoutes;
    if (port.gateway) sc->routes[sc->n_routes++] = mars::Route{0, 0, port.gateway};
    for (const RouteConfig &r : c.routes)
        if (r.port == port.name && sc->n_routes < most)
            sc->routes[sc->n_routes++] = mars::Route{r.dest, r.prefix, r.gateway};
    // IPv6 (issue 31): gateway6 is the port's ::/0.
    if (port.has_gateway6()) sc->routes6[sc->n_routes6++] = mars::Route6{{}, 0, port.gateway6};
    for (const Route6Config &r : c.routes6)
        if (r.port == port.name && sc->n_routes6 < most)
            sc->routes6[sc->n_routes6++] = mars::Route6{r.dest, r.prefix, r.gateway};
}

bool same_routes(const Config &a, const Config &b)
{
    if (a.routes.size() != b.routes.size() || a.routes6.size() != b.routes6.size()) return false;
    for (size_t i = 0; i < a.routes.size(); i++) {
        const RouteConfig &x = a.routes[i], &y = b.routes[i];
        if (x.dest != y.dest || x.prefix != y.prefix || x.gateway != y.gateway || x.port != y.port) return false;
    }
    for (size_t i = 0; i < a.routes6.size(); i++) {
        const Route6Config &x = a.routes6[i], &y = b.routes6[i];
        if (std::memcmp(x.dest.b, y.dest.b, 16) != 0 || x.prefix != y.prefix ||
            std::memcmp(x.gateway.b, y.gateway.b, 16) != 0 || x.port != y.port)
            return false;
    }
    return true;
}

} // namespace ppe
