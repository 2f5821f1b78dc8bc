// ppe/src/net_file.cc: the text of `<socket>.net` (net_file.h).
#include "net_file.h"

namespace ppe {

std::string net_file_text(const Config &c)
{
    // The network applications reach through the PPE (the shim decides
    // per destination): the first port carries application sockets.
    const PortConfig &port = c.ports[0];
    std::string net = "port " + format_ipv4(port.ip) + "/" + std::to_string(port.prefix) + "\n";
    if (port.gateway) net += "route 0.0.0.0/0 via " + format_ipv4(port.gateway) + "\n";
    // Its IPv6 addresses (issue 31: the shim connects on-link IPv6 through the PPE).
    for (const mars::Ip6Prefix &a : port.addr6) net += "port6 " + format_ipv6(a) + "\n";
    for (const RouteConfig &r : c.routes)
        if (r.port == port.name)
            net += "route " + format_ipv4(r.dest) + "/" + std::to_string(r.prefix) + " via " + format_ipv4(r.gateway) + "\n";
    // Its IPv6 routes (issue 31): what MARS reaches beyond the port6
    // prefixes, so the shim sends those connects to the engine too.
    if (port.has_gateway6()) net += "route6 ::/0 via " + format_ipv6(port.gateway6) + "\n";
    for (const Route6Config &r : c.routes6)
        if (r.port == port.name)
            net += "route6 " + format_ipv6(mars::Ip6Prefix{r.dest, r.prefix}) + " via " + format_ipv6(r.gateway) + "\n";
    // A connection to the port's own address stays inside the engine
    // (MARS loops it: mars/src/ip/local_loop.h, issue 29): "self local".
    // With kernel = "shared" the kernel holds the address too: the shim
    // holds eta's ports in the kernel, and a local connect no eta
    // listener takes goes through it (preload/README.md); "self local6":
    // to its IPv6 addresses too, shared or not (the shim holds IPv6 ports
    // there as IPv4's). Older shims read these as bad and accelerate nothing.
    if (port.kernel_shared) net += "self shared\n";
    net += "self local\nself local6\n";
    return net;
}

} // namespace ppe
