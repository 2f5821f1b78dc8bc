// [[port]] flow_isolate (issues 29, 31): the rule sets of
// ppe/src/flow_rules.h (pure data, no NIC; with address6 too), the RSS
// spread of the tcp4 and tcp6 rules against the owner functions the
// software steering uses, the rte_flow items and actions built for each
// rule (read back as testpmd text), what --check prints, and the applier
// (flow_apply.h) on a real DPDK port that has no rte_flow (net_null, EAL
// without hugepages, no root): a clear message naming what failed and what
// to do, no crash.
// No bifurcated NIC is here: that rte_flow accepts these rules on mlx5 is
// not tested (ppe/README.md says so).
#include "flow_apply.h"
#include "flow_rules.h"
#include "steer.h"

#include <dti_abi.h>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_thash.h>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace {

using ppe::flow::Action;
using ppe::flow::Match;
using ppe::flow::PortTraffic;
using ppe::flow::Rule;

constexpr uint32_t kAddr = 0xC6120001; // 198.18.0.1

std::vector<std::string> described(const std::vector<Rule> &rules)
{
    std::vector<std::string> out;
    for (const Rule &r : rules) out.push_back(ppe::flow::describe(r));
    return out;
}

TEST(FlowRules, OneEngine)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.engines = 1;
    EXPECT_EQ(described(ppe::flow::rules_for(t)),
              (std::vector<std::string>{
                  "tcp4: eth / ipv4 dst 198.18.0.1 proto tcp / tcp -> queue 0",
                  "udp4: eth / ipv4 dst 198.18.0.1 proto udp / udp -> queue 0",
                  "icmp4: eth / ipv4 dst 198.18.0.1 proto icmp -> queue 0",
                  "arp: eth / type arp / arp_eth_ipv4 tpa 198.18.0.1 -> queue 0",
              }));
}

TEST(FlowRules, SeveralEnginesSpreadTcpOnly)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.engines = 2;
    const std::vector<Rule> r = ppe::flow::rules_for(t);
    ASSERT_EQ(r.size(), 4u);
    EXPECT_EQ(ppe::flow::describe(r[0]),
              "tcp4: eth / ipv4 dst 198.18.0.1 proto tcp / tcp -> rss queues 0,1 (symmetric toeplitz, ipv4-tcp)");
    // UDP stays on the engine that holds every UDP socket; ICMP and ARP on
    // queue 0 (steering shares ARP with every engine).
    EXPECT_EQ(r[1].action.kind, Action::kQueue);
    EXPECT_EQ(r[1].action.queue, ppe::kUdpEngine);
    EXPECT_EQ(r[2].action.kind, Action::kQueue);
    EXPECT_EQ(r[3].action.kind, Action::kQueue);
    EXPECT_EQ(r[3].pattern.match, Match::kArpTarget);
    EXPECT_EQ(r[3].pattern.ipv4, kAddr);

    for (uint32_t n = 2; n <= DTI_MAX_ENGINES; n++) {
        t.engines = n;
        const Action a = ppe::flow::rules_for(t)[0].action;
        ASSERT_EQ(a.kind, Action::kRss);
        const bool pow2 = (n & (n - 1)) == 0;
        ASSERT_EQ(a.queues.size(), pow2 ? n : DTI_FLOW_RETA_SPAN) << n << " engines";
        for (size_t i = 0; i < a.queues.size(); i++) ASSERT_EQ(a.queues[i], i % n);
    }
}

// A NIC that builds its indirection table from the RSS action's queue list
// by repeating it up to a power of two (mlx5's way) and indexes it with the
// hash's low bits puts every flow on the queue of the engine that owns it
// (dti_flow_owner: what software steering and MARS's ephemeral ports use).
TEST(FlowRules, RssActionPutsEveryFlowOnItsOwnersQueue)
{
    uint8_t key[40];
    ppe::rss_fill_key(key, sizeof key);
    std::mt19937 rng(29);
    for (uint32_t n = 2; n <= DTI_MAX_ENGINES; n++) {
        PortTraffic t;
        t.ipv4 = kAddr;
        t.engines = n;
        const std::vector<uint16_t> list = ppe::flow::rules_for(t)[0].action.queues;
        uint32_t table = 1;
        while (table < list.size()) table <<= 1;
        for (int i = 0; i < 3000; i++) {
            const uint32_t src = rng();
            const uint16_t sport = uint16_t(rng()), dport = uint16_t(rng());
            uint32_t tuple[3] = {src, kAddr, uint32_t(sport) << 16 | dport};
            const uint32_t hash = rte_softrss(tuple, 3, key);
            const uint16_t nic_queue = list[(hash & (table - 1)) % list.size()];
            ASSERT_EQ(nic_queue, dti_flow_owner(src, sport, kAddr, dport, n)) << n << " engines";
        }
    }
}

TEST(FlowRules, WithoutUdpTheKernelKeepsIt)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.udp = false;
    for (const Rule &r : ppe::flow::rules_for(t)) EXPECT_NE(r.pattern.match, Match::kIpv4Udp) << r.name;
    EXPECT_EQ(ppe::flow::rules_for(t).size(), 3u);
    EXPECT_NE(ppe::flow::left_to_kernel(t).find("UDP"), std::string::npos);
}

mars::Ip6Addr ip6(const char *text)
{
    mars::Ip6Addr a;
    EXPECT_EQ(inet_pton(AF_INET6, text, a.b), 1) << text;
    return a;
}

const Rule *find(const std::vector<Rule> &rules, const std::string &name)
{
    for (const Rule &r : rules)
        if (name == r.name) return &r;
    return nullptr;
}

// RFC 4291 2.7.1: ff02::1:ff00:0/104 and the address's low 24 bits.
TEST(FlowRules, SolicitedNodeGroup)
{
    EXPECT_EQ(ppe::format_ipv6(ppe::flow::solicited_node(ip6("2001:2:0:1::1"))), "ff02::1:ff00:1");
    EXPECT_EQ(ppe::format_ipv6(ppe::flow::solicited_node(ip6("2001:db8::21a:2bff:fe3c:4d5e"))), "ff02::1:ff3c:4d5e");
    EXPECT_EQ(ppe::format_ipv6(ppe::flow::solicited_node(ip6("fd00::abcd:ef12:3456"))), "ff02::1:ff12:3456");
}

// One engine, one address6: the IPv4 rules as before, then TCP, UDP and
// ICMPv6 to the address and the neighbour solicitations at its group.
TEST(FlowRules, OneEngineWithAddress6)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.addr6 = {ip6("2001:2:0:1::1")};
    EXPECT_EQ(described(ppe::flow::rules_for(t)),
              (std::vector<std::string>{
                  "tcp4: eth / ipv4 dst 198.18.0.1 proto tcp / tcp -> queue 0",
                  "udp4: eth / ipv4 dst 198.18.0.1 proto udp / udp -> queue 0",
                  "icmp4: eth / ipv4 dst 198.18.0.1 proto icmp -> queue 0",
                  "arp: eth / type arp / arp_eth_ipv4 tpa 198.18.0.1 -> queue 0",
                  "tcp6: eth / ipv6 dst 2001:2:0:1::1 proto tcp / tcp -> queue 0",
                  "udp6: eth / ipv6 dst 2001:2:0:1::1 proto udp / udp -> queue 0",
                  "icmp6: eth / ipv6 dst 2001:2:0:1::1 proto icmpv6 -> queue 0",
                  "nd6: eth / ipv6 dst ff02::1:ff00:1 proto icmpv6 / icmpv6 type 135 -> queue 0",
              }));
}

// Several engines, several address6, UDP on and off: each address gets its
// own tcp6 (RSS over the engines with IPv6's hash, tcp4's queue list) and
// icmp6; udp6 only with UDP; one nd6 per solicited-node group (the first and
// third address end in the same 24 bits).
TEST(FlowRules, SeveralEnginesSeveralAddress6)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.engines = 2;
    t.addr6 = {ip6("2001:2:0:1::1"), ip6("fd00:2::abcd"), ip6("2001:2:0:2::1")};
    std::vector<Rule> r = ppe::flow::rules_for(t);
    std::vector<std::string> names;
    for (const Rule &x : r) names.push_back(x.name);
    EXPECT_EQ(names, (std::vector<std::string>{"tcp4", "udp4", "icmp4", "arp", "tcp6", "udp6", "icmp6", "tcp6", "udp6",
                                               "icmp6", "tcp6", "udp6", "icmp6", "nd6", "nd6"}));
    const std::vector<std::string> d = described(r);
    EXPECT_EQ(d[4], "tcp6: eth / ipv6 dst 2001:2:0:1::1 proto tcp / tcp -> rss queues 0,1 (symmetric toeplitz, "
                    "ipv6-tcp)");
    EXPECT_EQ(d[5], "udp6: eth / ipv6 dst 2001:2:0:1::1 proto udp / udp -> queue 0");
    EXPECT_EQ(d[7], "tcp6: eth / ipv6 dst fd00:2::abcd proto tcp / tcp -> rss queues 0,1 (symmetric toeplitz, "
                    "ipv6-tcp)");
    EXPECT_EQ(d[12], "icmp6: eth / ipv6 dst 2001:2:0:2::1 proto icmpv6 -> queue 0");
    EXPECT_EQ(d[13], "nd6: eth / ipv6 dst ff02::1:ff00:1 proto icmpv6 / icmpv6 type 135 -> queue 0");
    EXPECT_EQ(d[14], "nd6: eth / ipv6 dst ff02::1:ff00:abcd proto icmpv6 / icmpv6 type 135 -> queue 0");
    EXPECT_EQ(r[5].action.queue, ppe::kUdpEngine);

    for (uint32_t n = 1; n <= DTI_MAX_ENGINES; n++) {
        t.engines = n;
        r = ppe::flow::rules_for(t);
        EXPECT_EQ(find(r, "tcp6")->action.kind, find(r, "tcp4")->action.kind) << n << " engines";
        EXPECT_EQ(find(r, "tcp6")->action.queues, find(r, "tcp4")->action.queues) << n << " engines";
        for (const Rule &x : r)
            if (std::string(x.name) != "tcp4" && std::string(x.name) != "tcp6") {
                EXPECT_EQ(x.action.kind, Action::kQueue) << x.name;
                EXPECT_EQ(x.action.queue, 0) << x.name;
            }
    }

    t.udp = false;
    r = ppe::flow::rules_for(t);
    EXPECT_EQ(r.size(), 11u);
    for (const Rule &x : r) {
        EXPECT_NE(x.pattern.match, Match::kIpv6Udp) << x.name;
        EXPECT_NE(x.pattern.match, Match::kIpv4Udp) << x.name;
    }
}

// The IPv6 counterpart of RssActionPutsEveryFlowOnItsOwnersQueue: the NIC's
// Toeplitz hash of the TCP/IPv6 4-tuple (source address, destination
// address, source port, destination port; 36 bytes) with the same key,
// mapped onto tcp6's queue list, is dti_flow_owner6's engine, the one
// software steering and MARS's IPv6 ephemeral ports use.
TEST(FlowRules, Rss6ActionPutsEveryFlowOnItsOwnersQueue)
{
    uint8_t key[40];
    ppe::rss_fill_key(key, sizeof key);
    std::mt19937 rng(31);
    const mars::Ip6Addr local = ip6("2001:2:0:1::1");
    for (uint32_t n = 2; n <= DTI_MAX_ENGINES; n++) {
        PortTraffic t;
        t.ipv4 = kAddr;
        t.engines = n;
        t.addr6 = {local};
        const std::vector<Rule> rules = ppe::flow::rules_for(t);
        const Rule *tcp6 = find(rules, "tcp6");
        ASSERT_NE(tcp6, nullptr);
        ASSERT_EQ(tcp6->action.kind, Action::kRss);
        const std::vector<uint16_t> &list = tcp6->action.queues;
        uint32_t table = 1;
        while (table < list.size()) table <<= 1;
        std::vector<uint32_t> seen(n);
        for (int i = 0; i < 3000; i++) {
            uint8_t remote[16];
            for (uint8_t &b : remote) b = uint8_t(rng());
            // A peer on the address's own prefix half the time (MARS's IPv6
            // peers are on-link): only the interface id varies.
            if (i & 1) std::memcpy(remote, local.b, 8);
            const uint16_t sport = uint16_t(rng()), dport = uint16_t(rng());
            uint32_t tuple[9];
            for (int w = 0; w < 4; w++) {
                tuple[w] = uint32_t(remote[4 * w]) << 24 | uint32_t(remote[4 * w + 1]) << 16 |
                           uint32_t(remote[4 * w + 2]) << 8 | remote[4 * w + 3];
                tuple[4 + w] = uint32_t(local.b[4 * w]) << 24 | uint32_t(local.b[4 * w + 1]) << 16 |
                               uint32_t(local.b[4 * w + 2]) << 8 | local.b[4 * w + 3];
            }
            tuple[8] = uint32_t(sport) << 16 | dport;
            const uint32_t hash = rte_softrss(tuple, 9, key);
            const uint16_t nic_queue = list[(hash & (table - 1)) % list.size()];
            ASSERT_EQ(nic_queue, dti_flow_owner6(remote, sport, local.b, dport, n)) << n << " engines";
            seen[nic_queue]++;
        }
        for (uint32_t e = 0; e < n; e++) EXPECT_GT(seen[e], 0u) << "engine " << e << " of " << n << " got no flow";
    }
}

// Without address6 the start log says IPv6 stays the kernel's; with them it
// names them beside the IPv4 address, what of IPv6 still stays the
// kernel's, and the groups in which the kernel must hold no address.
TEST(FlowRules, LeftToTheKernel)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.engines = 2;
    EXPECT_EQ(ppe::flow::left_to_kernel(t), "everything not to 198.18.0.1, IPv4 fragments, multicast, other ARP, IPv6");
    t.addr6 = {ip6("2001:2:0:1::1"), ip6("fd00:2::abcd"), ip6("2001:2:0:2::1")};
    const std::string s = ppe::flow::left_to_kernel(t);
    EXPECT_EQ(s.rfind("everything not to 198.18.0.1, 2001:2:0:1::1, fd00:2::abcd or 2001:2:0:2::1, ", 0), 0u) << s;
    for (const char *part : {"IPv4 and IPv6 fragments", "extension headers", "neighbour advertisements to all nodes",
                             "router advertisements", "MLD", "the link-local address",
                             "no address of its own in solicited-node group ff02::1:ff00:1, ff02::1:ff00:abcd ("})
        EXPECT_NE(s.find(part), std::string::npos) << part << " in: " << s;
    t.udp = false;
    EXPECT_NE(ppe::flow::left_to_kernel(t).find("or 2001:2:0:2::1, UDP, "), std::string::npos);
}

// What eta-ppe and --check hand rules_for(): the port's address, the
// engine count, UDP (MARS always takes it), its address6.
TEST(FlowRules, TrafficOfAConfiguredPort)
{
    ppe::PortConfig p;
    p.ip = kAddr;
    p.addr6 = {{ip6("2001:2:0:1::1"), 64}, {ip6("fd00::5"), 48}};
    const PortTraffic t = ppe::flow::traffic_of(p, 3);
    EXPECT_EQ(t.ipv4, kAddr);
    EXPECT_EQ(t.engines, 3u);
    EXPECT_TRUE(t.udp);
    ASSERT_EQ(t.addr6.size(), 2u);
    EXPECT_EQ(ppe::format_ipv6(t.addr6[0]), "2001:2:0:1::1");
    EXPECT_EQ(ppe::format_ipv6(t.addr6[1]), "fd00::5");
}

// What `eta-ppe --check` prints for a flow_isolate port with address6
// (daemon.cc prints check_listing as it is): every rule, then what stays
// the kernel's; nothing for a port without flow_isolate.
TEST(FlowRules, CheckListing)
{
    ppe::PortConfig p;
    p.name = "eth1";
    p.ip = kAddr;
    p.addr6 = {{ip6("2001:2:0:1::1"), 64}};
    EXPECT_EQ(ppe::flow::check_listing("/etc/eta/ppe.toml", p, 2), "");
    p.flow_isolate = true;
    const std::string pre = "/etc/eta/ppe.toml: port \"eth1\": flow rule ";
    const std::string post = " (programmed at start, if the NIC takes it)\n";
    const std::string rss = "rss queues 0,1 (symmetric toeplitz, ";
    EXPECT_EQ(ppe::flow::check_listing("/etc/eta/ppe.toml", p, 2),
              pre + "tcp4: eth / ipv4 dst 198.18.0.1 proto tcp / tcp -> " + rss + "ipv4-tcp)" + post + pre +
                  "udp4: eth / ipv4 dst 198.18.0.1 proto udp / udp -> queue 0" + post + pre +
                  "icmp4: eth / ipv4 dst 198.18.0.1 proto icmp -> queue 0" + post + pre +
                  "arp: eth / type arp / arp_eth_ipv4 tpa 198.18.0.1 -> queue 0" + post + pre +
                  "tcp6: eth / ipv6 dst 2001:2:0:1::1 proto tcp / tcp -> " + rss + "ipv6-tcp)" + post + pre +
                  "udp6: eth / ipv6 dst 2001:2:0:1::1 proto udp / udp -> queue 0" + post + pre +
                  "icmp6: eth / ipv6 dst 2001:2:0:1::1 proto icmpv6 -> queue 0" + post + pre +
                  "nd6: eth / ipv6 dst ff02::1:ff00:1 proto icmpv6 / icmpv6 type 135 -> queue 0" + post +
                  "/etc/eta/ppe.toml: port \"eth1\": left to the kernel's netdev: " +
                  ppe::flow::left_to_kernel(ppe::flow::traffic_of(p, 2)) + "\n");
}

// The rte_flow items and actions apply_rules hands the NIC, read back
// (flow_command): each rule's pattern and action as rte_flow structures,
// IPv6's next header, ICMPv6 type and RSS hash types included.
TEST(FlowRules, RteFlowItemsAndActions)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.engines = 2;
    t.addr6 = {ip6("2001:2:0:1::1")};
    std::vector<std::string> cmds;
    for (const Rule &r : ppe::flow::rules_for(t)) cmds.push_back(ppe::flow::flow_command(0, r));
    std::string k;
    for (int i = 0; i < 20; i++) k += "6d5a";
    const std::string rss = "rss func toeplitz level 0 types ";
    const std::string q = " end queues 0 1 end key " + k + " key_len 40 / end";
    EXPECT_EQ(cmds, (std::vector<std::string>{
                        "flow create 0 ingress pattern eth / ipv4 dst is 198.18.0.1 proto is 6 / tcp / end actions " +
                            rss + "ipv4-tcp" + q,
                        "flow create 0 ingress pattern eth / ipv4 dst is 198.18.0.1 proto is 17 / udp / end actions "
                        "queue index 0 / end",
                        "flow create 0 ingress pattern eth / ipv4 dst is 198.18.0.1 proto is 1 / end actions queue "
                        "index 0 / end",
                        "flow create 0 ingress pattern eth type is 0x0806 / arp_eth_ipv4 tpa is 198.18.0.1 / end "
                        "actions queue index 0 / end",
                        "flow create 0 ingress pattern eth / ipv6 dst is 2001:2:0:1::1 proto is 6 / tcp / end "
                        "actions " +
                            rss + "ipv6-tcp" + q,
                        "flow create 0 ingress pattern eth / ipv6 dst is 2001:2:0:1::1 proto is 17 / udp / end "
                        "actions queue index 0 / end",
                        "flow create 0 ingress pattern eth / ipv6 dst is 2001:2:0:1::1 proto is 58 / end actions "
                        "queue index 0 / end",
                        "flow create 0 ingress pattern eth / ipv6 dst is ff02::1:ff00:1 proto is 58 / icmp6 type is "
                        "135 / end actions queue index 0 / end",
                    }));
}

// The applier on a real DPDK port without rte_flow (net_null): isolated
// mode and every rule are refused with the port, the rule, rte_flow's
// message and what to do instead; nothing crashes, nothing is left made.
class NullPort : public ::testing::Test {
  protected:
    static void SetUpTestSuite()
    {
        prefix_ = "flow-rules-test-" + std::to_string(getpid());
        std::vector<std::string> args = {"flow_rules_test", "--no-huge", "--no-shconf", "--no-pci",
                                         "--no-telemetry", "-m", "64", "--iova-mode=va",
                                         "--log-level=*:error", "--file-prefix", prefix_, "-l", "0",
                                         "--vdev", "net_null0"};
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        ASSERT_GE(rte_eal_init(int(argv.size()), argv.data()), 0) << "EAL could not start without hugepages";
        ASSERT_EQ(rte_eth_dev_get_port_by_name("net_null0", &port_), 0);
    }
    static void TearDownTestSuite()
    {
        const std::string runtime_dir = rte_eal_get_runtime_dir();
        rte_eal_cleanup();
        std::error_code ec;
        if (runtime_dir.find(prefix_) != std::string::npos) std::filesystem::remove_all(runtime_dir, ec);
    }
    static std::string prefix_;
    static uint16_t port_;
};
std::string NullPort::prefix_;
uint16_t NullPort::port_ = 0;

TEST_F(NullPort, IsolationRefusedClearly)
{
    std::string err;
    EXPECT_FALSE(ppe::flow::enter_isolated_mode(port_, "port \"p0\" (net_null0)", &err));
    EXPECT_NE(err.find("port \"p0\" (net_null0): flow_isolate = true, but the device cannot enter rte_flow isolated "
                       "mode: "),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("use kernel = \"shared\""), std::string::npos) << err;
    EXPECT_NE(err.find("two NICs"), std::string::npos) << err;
}

TEST_F(NullPort, RuleRefusedNamesTheRule)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.engines = 1;
    std::vector<rte_flow *> made;
    std::string err;
    EXPECT_FALSE(ppe::flow::apply_rules(port_, ppe::flow::rules_for(t), "port \"p0\" (net_null0)", &made, &err));
    EXPECT_TRUE(made.empty());
    EXPECT_NE(err.find("the NIC refused rule \"tcp4: eth / ipv4 dst 198.18.0.1 proto tcp / tcp -> queue 0\" (TCP to "
                       "eta's address"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("use kernel = \"shared\""), std::string::npos) << err;
}

// An IPv6 rule the NIC refuses is named as the IPv4 ones are.
TEST_F(NullPort, Ipv6RuleRefusedNamesTheRule)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.engines = 2;
    t.addr6 = {ip6("2001:2:0:1::1")};
    std::vector<Rule> rules;
    for (const Rule &r : ppe::flow::rules_for(t))
        if (ppe::flow::is_ipv6(r.pattern.match)) rules.push_back(r);
    ASSERT_EQ(rules.size(), 4u);
    std::vector<rte_flow *> made;
    std::string err;
    EXPECT_FALSE(ppe::flow::apply_rules(port_, rules, "port \"p0\" (net_null0)", &made, &err));
    EXPECT_TRUE(made.empty());
    EXPECT_NE(err.find("the NIC refused rule \"tcp6: eth / ipv6 dst 2001:2:0:1::1 proto tcp / tcp -> rss queues 0,1 "
                       "(symmetric toeplitz, ipv6-tcp)\" (TCP to eta's address6"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("use kernel = \"shared\""), std::string::npos) << err;
}

} // namespace
