// ppe/src/flow_rules.cc: the rule lists of flow_rules.h.
#include "flow_rules.h"

#include "config.h"
#include "steer.h"

#include <dti_abi.h>

namespace ppe::flow {

namespace {

Action to_queue(uint16_t q)
{
    Action a;
    a.kind = Action::kQueue;
    a.queue = q;
    return a;
}

Action spread(uint32_t n)
{
    if (n <= 1) return to_queue(0);
    Action a;
    a.kind = Action::kRss;
    const bool pow2 = (n & (n - 1)) == 0;
    const uint32_t entries = pow2 ? n : DTI_FLOW_RETA_SPAN;
    for (uint32_t i = 0; i < entries; i++) a.queues.push_back(uint16_t(i % n));
    return a;
}

bool same(const mars::Ip6Addr &a, const mars::Ip6Addr &b)
{
    for (int i = 0; i < 16; i++)
        if (a.b[i] != b.b[i]) return false;
    return true;
}

// The distinct solicited-node groups of the address6, in their order.
std::vector<mars::Ip6Addr> groups_of(const std::vector<mars::Ip6Addr> &addr6)
{
    std::vector<mars::Ip6Addr> g;
    for (const mars::Ip6Addr &a : addr6) {
        const mars::Ip6Addr sn = solicited_node(a);
        bool seen = false;
        for (const mars::Ip6Addr &o : g) seen = seen || same(o, sn);
        if (!seen) g.push_back(sn);
    }
    return g;
}

Pattern pattern6(Match m, const mars::Ip6Addr &dst)
{
    Pattern p{m};
    p.ipv6 = dst;
    return p;
}

} // namespace

bool is_ipv6(Match m)
{
    return m == Match::kIpv6Tcp || m == Match::kIpv6Udp || m == Match::kIpv6Icmp || m == Match::kIpv6NdSolicit;
}

mars::Ip6Addr solicited_node(const mars::Ip6Addr &a)
{
    mars::Ip6Addr g;
    g.b[0] = 0xff;
    g.b[1] = 0x02;
    g.b[11] = 0x01;
    g.b[12] = 0xff;
    g.b[13] = a.b[13];
    g.b[14] = a.b[14];
    g.b[15] = a.b[15];
    return g;
}

PortTraffic traffic_of(const PortConfig &p, uint32_t engines)
{
    PortTraffic t;
    t.ipv4 = p.ip;
    t.engines = engines;
    t.udp = true;
    for (const mars::Ip6Prefix &a : p.addr6) t.addr6.push_back(a.addr);
    return t;
}

std::vector<Rule> rules_for(const PortTraffic &t)
{
    std::vector<Rule> r;
    r.push_back({"tcp4", "TCP to eta's address: its connections and listeners",
                 {Match::kIpv4Tcp, t.ipv4}, spread(t.engines)});
    if (t.udp)
        r.push_back({"udp4", "UDP to eta's address: its UDP sockets (engine 0 holds them all)",
                     {Match::kIpv4Udp, t.ipv4}, to_queue(uint16_t(kUdpEngine))});
    r.push_back({"icmp4", "ICMP to eta's address: echo answered by MARS, errors quoting its segments (path MTU)",
                 {Match::kIpv4Icmp, t.ipv4}, to_queue(0)});
    r.push_back({"arp", "ARP for eta's address: requests MARS answers, replies to MARS's own requests",
                 {Match::kArpTarget, t.ipv4}, to_queue(0)});
    for (const mars::Ip6Addr &a : t.addr6) {
        r.push_back({"tcp6", "TCP to eta's address6: its IPv6 connections and listeners",
                     pattern6(Match::kIpv6Tcp, a), spread(t.engines)});
        if (t.udp)
            r.push_back({"udp6", "UDP to eta's address6: its UDP sockets (engine 0 holds them all)",
                         pattern6(Match::kIpv6Udp, a), to_queue(uint16_t(kUdpEngine))});
        r.push_back({"icmp6",
                     "ICMPv6 to eta's address6: echo answered by MARS, errors quoting its segments (packet too "
                     "big), neighbour advertisements answering MARS's solicitations, unicast solicitations",
                     pattern6(Match::kIpv6Icmp, a), to_queue(0)});
    }
    // Two address6 ending in the same 24 bits share a group: one rule, as
    // rules must not overlap.
    for (const mars::Ip6Addr &g : groups_of(t.addr6))
        r.push_back({"nd6",
                     "neighbour solicitations at eta's address6's solicited-node group: resolution of the "
                     "address (MARS answers) and other nodes' duplicate address detection for it",
                     pattern6(Match::kIpv6NdSolicit, g), to_queue(0)});
    return r;
}

std::string describe(const Rule &r)
{
    std::string s = std::string(r.name) + ": eth / ";
    const std::string ip = format_ipv4(r.pattern.ipv4), ip6 = format_ipv6(r.pattern.ipv6);
    switch (r.pattern.match) {
    case Match::kIpv4Tcp: s += "ipv4 dst " + ip + " proto tcp / tcp"; break;
    case Match::kIpv4Udp: s += "ipv4 dst " + ip + " proto udp / udp"; break;
    case Match::kIpv4Icmp: s += "ipv4 dst " + ip + " proto icmp"; break;
    case Match::kArpTarget: s += "type arp / arp_eth_ipv4 tpa " + ip; break;
    case Match::kIpv6Tcp: s += "ipv6 dst " + ip6 + " proto tcp / tcp"; break;
    case Match::kIpv6Udp: s += "ipv6 dst " + ip6 + " proto udp / udp"; break;
    case Match::kIpv6Icmp: s += "ipv6 dst " + ip6 + " proto icmpv6"; break;
    case Match::kIpv6NdSolicit: s += "ipv6 dst " + ip6 + " proto icmpv6 / icmpv6 type 135"; break;
    }
    if (r.action.kind == Action::kQueue) {
        s += " -> queue " + std::to_string(r.action.queue);
    } else {
        s += " -> rss queues ";
        for (size_t i = 0; i < r.action.queues.size(); i++)
            s += (i ? "," : "") + std::to_string(r.action.queues[i]);
        s += is_ipv6(r.pattern.match) ? " (symmetric toeplitz, ipv6-tcp)" : " (symmetric toeplitz, ipv4-tcp)";
    }
    return s;
}

std::string left_to_kernel(const PortTraffic &t)
{
    std::string s = "everything not to " + format_ipv4(t.ipv4);
    for (size_t i = 0; i < t.addr6.size(); i++)
        s += (i + 1 == t.addr6.size() ? " or " : ", ") + format_ipv6(t.addr6[i]);
    s += ", ";
    if (!t.udp) s += "UDP, ";
    if (t.addr6.empty()) return s + "IPv4 fragments, multicast, other ARP, IPv6";
    s += "IPv4 and IPv6 fragments, IPv6 behind extension headers, multicast (but the neighbour solicitations "
         "of the nd6 rules), other ARP, neighbour advertisements to all nodes (MARS sees no defence of its "
         "address6), router advertisements, MLD, the link-local address (the kernel's: the same MAC); the kernel "
         "must hold no address of its own in solicited-node group ";
    const std::vector<mars::Ip6Addr> g = groups_of(t.addr6);
    for (size_t i = 0; i < g.size(); i++) s += (i ? ", " : "") + format_ipv6(g[i]);
    s += " (one ending in the same 24 bits: its solicitations go to eta)";
    return s;
}

std::string check_listing(const std::string &config_path, const PortConfig &p, uint32_t engines)
{
    if (!p.flow_isolate) return "";
    const PortTraffic t = traffic_of(p, engines);
    const std::string prefix = config_path + ": port \"" + p.name + "\": ";
    std::string out;
    for (const Rule &r : rules_for(t))
        out += prefix + "flow rule " + describe(r) + " (programmed at start, if the NIC takes it)\n";
    out += prefix + "left to the kernel's netdev: " + left_to_kernel(t) + "\n";
    return out;
}

} // namespace ppe::flow
