// ppe/src/flow_rules.h: the rte_flow rules of a port with [[port]]
// flow_isolate = true, as plain data (issue 29).
//
// A NIC whose kernel driver stays attached while DPDK runs it (mlx5's
// bifurcated model) can be put in rte_flow "isolated mode": DPDK's queues
// then receive only frames that a flow rule sends them, and every other
// frame goes to the kernel's own netdev, as if DPDK were not there. This
// file decides WHICH rules: from what eta takes on the port (its address,
// how many engines, whether eta takes UDP) it builds a list of rules, each
// a pattern ("IPv4 to 198.18.0.1, TCP") and an action ("spread over the
// engines' queues" or "queue 0"). No DPDK here: flow_apply.h turns the
// list into rte_flow calls, and tests/unit/ppe/flow_rules_test.cc checks
// the lists without a NIC.
//
// The model (ppe/README.md, "NICs that stay the kernel's: flow_isolate"):
// the port's IPv4 address and its address6 are eta's alone. The kernel's
// netdev keeps the host's OWN addresses (SSH, DNS, monitoring), the
// link-local address and everything else on the wire.
//   tcp4  IPv4 to the address, TCP   -> the engines (RSS, the same hash the
//         software steering uses: dti_flow_owner), or queue 0 with one engine
//   udp4  IPv4 to the address, UDP   -> queue kUdpEngine (engine 0 holds
//         every UDP socket, steer.h); only when eta takes UDP
//   icmp4 IPv4 to the address, ICMP  -> queue 0: MARS answers echo (the
//         kernel does not hold the address, so it would not) and uses the
//         errors quoting its segments (fragmentation needed: path MTU)
//   arp   ARP whose target address is the port's -> queue 0 (steering
//         shares ARP with every engine): requests for eta's address (MARS
//         answers) and the replies to MARS's own requests (MARS resolves its
//         next hops). ARP for the kernel's address, the replies to the
//         kernel's requests and everything else stay the kernel's: each
//         stack sees the ARP meant for it, nothing is needed twice.
// and for each address6 (issue 31):
//   tcp6  IPv6 to it, next header TCP -> RSS as tcp4 (dti_flow_owner6: the
//         same key over the IPv6 4-tuple), or queue 0 with one engine
//   udp6  IPv6 to it, next header UDP -> queue kUdpEngine; only as udp4
//   icmp6 IPv6 to it, next header ICMPv6 -> queue 0: echo, errors quoting
//         MARS's segments (packet too big), and the neighbour discovery sent
//         to the address itself: the advertisements answering MARS's own
//         solicitations (MARS solicits from the address6 on the target's
//         prefix) and unicast solicitations (reachability probes). Steering
//         shares NS/NA with every engine and hands errors to the flow's owner.
//   nd6   IPv6 to the address's solicited-node group (ff02::1:ffXX:XXXX,
//         RFC 4291 2.7.1), ICMPv6 type 135 -> queue 0: the neighbour
//         solicitations that resolve the address and other nodes' duplicate
//         address detection for it. One rule per group (two address6 ending
//         in the same 24 bits share one). Only type 135: another host's MLDv1
//         report for the group (sent to the group) stays the kernel's. The
//         group is not the address: the kernel's solicitations for an
//         address of its own in the same group (its link-local one when the
//         MAC ends in those 24 bits) would reach eta too, so it must hold
//         none (left_to_kernel says which groups). The ICMPv6 ND_NS item
//         would match the target address itself; it is not used because the
//         NIC this is for (mlx5) is not known to take it, and a refused rule
//         stops eta-ppe.
// Left to the kernel: the link-local address (fe80:: + the MAC's EUI-64:
// the kernel's netdev has the same MAC, so the same address, which it needs
// for its routers; MARS keeps it for on-link peers, so under isolation
// MARS's link-local peers are unreachable), neighbour advertisements to the
// all-nodes group (a defender's answer to MARS's duplicate address detection
// never reaches MARS, which then takes a duplicate address), router
// advertisements, MLD (MARS sends none for its solicited-node groups and the
// kernel, not holding the address6, does not join them: a switch that
// snoops MLD may then not forward the solicitations), IPv4 and IPv6
// fragments, IPv6 behind extension headers (the rules match the base
// header's next header), multicast and broadcast, every other protocol and
// address.
#pragma once

#include "config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ppe::flow {

// What eta takes on one port: the input.
struct PortTraffic {
    uint32_t ipv4 = 0;     // the port's address, host byte order
    uint32_t engines = 1;  // queues 0..engines-1, queue i read by engine i
    bool udp = true;       // eta has UDP sockets on the address (MARS's UdpLayer)
    std::vector<mars::Ip6Addr> addr6; // the port's address6, network byte order
};

// What eta takes on a configured port run by `engines` engines: its address,
// UDP (MARS's UdpLayer always takes it), its address6.
PortTraffic traffic_of(const PortConfig &p, uint32_t engines);

// What a rule matches. Every pattern is Ethernet (any MAC) then:
enum class Match : uint8_t {
    kIpv4Tcp,  // IPv4, destination `ipv4`, protocol 6, then a TCP header
    kIpv4Udp,  // IPv4, destination `ipv4`, protocol 17, then a UDP header
    kIpv4Icmp, // IPv4, destination `ipv4`, protocol 1
    kArpTarget, // EtherType 0x0806, ARP for Ethernet/IPv4, target protocol address `ipv4`
    kIpv6Tcp,   // IPv6, destination `ipv6`, next header 6, then a TCP header
    kIpv6Udp,   // IPv6, destination `ipv6`, next header 17, then a UDP header
    kIpv6Icmp,  // IPv6, destination `ipv6`, next header 58
    kIpv6NdSolicit // IPv6, destination `ipv6` (a solicited-node group), next header 58, ICMPv6 type 135
};

// Whether the pattern is IPv6's (`ipv6` set, `ipv4` unused).
bool is_ipv6(Match m);

struct Pattern {
    Match match;
    uint32_t ipv4 = 0;  // host byte order: destination (IPv4) or target (ARP)
    mars::Ip6Addr ipv6; // network byte order: destination (the kIpv6 kinds)
};

// The solicited-node multicast group of an IPv6 address (RFC 4291 2.7.1):
// ff02::1:ff00:0/104 with the address's low 24 bits.
mars::Ip6Addr solicited_node(const mars::Ip6Addr &a);

struct Action {
    enum Kind : uint8_t {
        kQueue, // to `queue`
        kRss    // spread over `queues` by the symmetric Toeplitz hash of the
                // TCP 4-tuple of the pattern's family (key 0x6d5a repeated,
                // steer.h rss_fill_key): dti_flow_owner's, dti_flow_owner6's
    } kind = kQueue;
    uint16_t queue = 0;
    // kRss: the queue list handed to the NIC. With a power-of-two count it
    // is 0..n-1 (a NIC that fills its indirection table by repeating the
    // list, as mlx5 does, then picks queue hash mod n: dti_flow_owner's
    // choice, dti_flow_owner6's over IPv6); otherwise the DTI_FLOW_RETA_SPAN-entry list whose entry i is
    // i mod n, the table dpdk.cc programs through the RETA.
    std::vector<uint16_t> queues;
};

struct Rule {
    const char *name;    // short, for messages: "tcp4", "udp4", "icmp4", "arp", "tcp6", "udp6", "icmp6", "nd6"
    const char *purpose; // one line: why eta needs it
    Pattern pattern;
    Action action;
};

// The rules for a port, in the order they are programmed. Rules never
// overlap, so their order and priority do not matter.
std::vector<Rule> rules_for(const PortTraffic &t);

// One line per rule, e.g. "tcp4: eth / ipv4 dst 198.18.0.1 proto tcp / tcp
// -> rss queues 0,1 (symmetric toeplitz, ipv4-tcp)", for logs and tests.
std::string describe(const Rule &r);

// What stays the kernel's, one line for the start log; with address6 it
// also names the solicited-node groups in which the kernel must hold no
// address of its own (the nd6 rules take their solicitations).
std::string left_to_kernel(const PortTraffic &t);

// What `eta-ppe --check` prints for a flow_isolate port: one line per rule
// it would program, then what stays the kernel's netdev's. Each line is
// prefixed "<config path>: port \"<name>\": " and ends in a newline; a
// port without flow_isolate gives "".
std::string check_listing(const std::string &config_path, const PortConfig &p, uint32_t engines);

} // namespace ppe::flow
