// ppe/src/config_net.h: the network keys of eta-ppe's config: a port's
// addresses and gateways, [[route]] for IPv4 and IPv6 (issue 31), and the
// checks that tie routes to ports. Internal to config.cc, which calls these
// while it walks the file (config_section.h).
#pragma once

#include "config.h"
#include "config_section.h"

#include <cstdint>
#include <string>

namespace ppe::config_net {

using config_section::Section;

// "A.B.C.D/P" into *ip (host order) and *prefix; fails on `key`.
void parse_cidr(Section &s, const std::string &key, const std::string &text, uint32_t *ip, uint8_t *prefix);
uint32_t netmask(uint8_t prefix);
bool is_unicast_host(uint32_t ip);

// The first `prefix` bits of a and net are equal.
bool in_prefix6(const mars::Ip6Addr &a, const mars::Ip6Addr &net, unsigned prefix);
// a with the bits past `prefix` cleared.
mars::Ip6Addr network6(const mars::Ip6Addr &a, unsigned prefix);

// [[port]] address6 = ["ADDR[/PREFIX]", ...] into port->addr6.
void parse_address6(Section &p, PortConfig *port);
// [[port]] gateway6 = "ADDR" into port->gateway6 (after parse_address6:
// a global gateway must lie inside one of the port's prefixes).
void parse_gateway6(Section &p, PortConfig *port);
// One [[route]] table, the index-th: IPv4 into c->routes, IPv6 into
// c->routes6 (the family is the dest's: "default" and A.B.C.D/P are IPv4,
// an address with ':' IPv6). Needs c->ports parsed (an IPv6 route's port is
// settled here, with the gateway's line in its messages).
void parse_route(Section &r, uint32_t index, Config *c);
// After everything is parsed: each IPv4 route's port, and the number of
// routes of each family (port gateways count) within what MARS holds.
void check_routes(Section &root, Config *c);

} // namespace ppe::config_net
