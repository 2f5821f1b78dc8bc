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

} // namespace

PortTraffic traffic_of(const PortConfig &p, uint32_t engines)
{
    PortTraffic t;
    t.ipv4 = p.ip;
    t.engines = engines;
    t.udp = true;
    t.addr6 = uint32_t(p.addr6.size());
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
    return r;
}

std::string describe(const Rule &r)
{
    std::string s = std::string(r.name) + ": eth / ";
    const std::string ip = format_ipv4(r.pattern.ipv4);
    switch (r.pattern.match) {
    case Match::kIpv4Tcp: s += "ipv4 dst " + ip + " proto tcp / tcp"; break;
    case Match::kIpv4Udp: s += "ipv4 dst " + ip + " proto udp / udp"; break;
    case Match::kIpv4Icmp: s += "ipv4 dst " + ip + " proto icmp"; break;
    case Match::kArpTarget: s += "type arp / arp_eth_ipv4 tpa " + ip; break;
    }
    if (r.action.kind == Action::kQueue) {
        s += " -> queue " + std::to_string(r.action.queue);
    } else {
        s += " -> rss queues ";
        for (size_t i = 0; i < r.action.queues.size(); i++)
            s += (i ? "," : "") + std::to_string(r.action.queues[i]);
        s += " (symmetric toeplitz, ipv4-tcp)";
    }
    return s;
}

std::string left_to_kernel(const PortTraffic &t)
{
    std::string s = "everything not to " + format_ipv4(t.ipv4) + ", ";
    if (!t.udp) s += "UDP, ";
    s += "IPv4 fragments, multicast, other ARP, IPv6";
    if (t.addr6) s += " (address6 included: eta takes no TCP over IPv6 yet)";
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
