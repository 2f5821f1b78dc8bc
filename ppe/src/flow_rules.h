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
// the port's IPv4 address is eta's alone. The kernel's netdev keeps the
// host's OWN address (SSH, DNS, monitoring) and everything else on the wire.
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
// Left to the kernel: IPv6 (no rule for a port's address6 yet, so under
// isolation MARS's IPv6 sockets see no traffic: a tcp6 rule would spread by
// dti_flow_owner6 as tcp4 does by dti_flow_owner, and the address6's
// neighbour discovery would need rules of its own), IPv4 fragments,
// multicast and broadcast IPv4, every other protocol and address.
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
    uint32_t addr6 = 0;    // how many address6 the port lists (no rule: see above)
};

// What eta takes on a configured port run by `engines` engines: its address,
// UDP (MARS's UdpLayer always takes it), its address6 count.
PortTraffic traffic_of(const PortConfig &p, uint32_t engines);

// What a rule matches. Every pattern is Ethernet (any MAC) then:
enum class Match : uint8_t {
    kIpv4Tcp,  // IPv4, destination `ipv4`, protocol 6, then a TCP header
    kIpv4Udp,  // IPv4, destination `ipv4`, protocol 17, then a UDP header
    kIpv4Icmp, // IPv4, destination `ipv4`, protocol 1
    kArpTarget // EtherType 0x0806, ARP for Ethernet/IPv4, target protocol address `ipv4`
};

struct Pattern {
    Match match;
    uint32_t ipv4 = 0; // host byte order: destination (IPv4) or target (ARP)
};

struct Action {
    enum Kind : uint8_t {
        kQueue, // to `queue`
        kRss    // spread over `queues` by the symmetric Toeplitz hash of the
                // TCP/IPv4 4-tuple (key 0x6d5a repeated, steer.h rss_fill_key)
    } kind = kQueue;
    uint16_t queue = 0;
    // kRss: the queue list handed to the NIC. With a power-of-two count it
    // is 0..n-1 (a NIC that fills its indirection table by repeating the
    // list, as mlx5 does, then picks queue hash mod n: dti_flow_owner's
    // choice); otherwise the DTI_FLOW_RETA_SPAN-entry list whose entry i is
    // i mod n, the table dpdk.cc programs through the RETA.
    std::vector<uint16_t> queues;
};

struct Rule {
    const char *name;    // short, for messages: "tcp4", "udp4", "icmp4", "arp"
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

// What stays the kernel's, one line for the start log.
std::string left_to_kernel(const PortTraffic &t);

// What `eta-ppe --check` prints for a flow_isolate port: one line per rule
// it would program, then what stays the kernel's netdev's. Each line is
// prefixed "<config path>: port \"<name>\": " and ends in a newline; a
// port without flow_isolate gives "".
std::string check_listing(const std::string &config_path, const PortConfig &p, uint32_t engines);

} // namespace ppe::flow
