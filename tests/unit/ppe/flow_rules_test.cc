// [[port]] flow_isolate (issue 29): the rule sets of ppe/src/flow_rules.h
// (pure data, no NIC), the RSS spread of the tcp4 rule against the owner
// function the software steering uses, and the applier (flow_apply.h) on a
// real DPDK port that has no rte_flow (net_null, EAL without hugepages, no
// root): a clear message naming what failed and what to do, no crash.
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

#include <unistd.h>

#include <algorithm>
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

// eta takes no TCP over IPv6 yet: a port's address6 adds no rule, and the
// start log says IPv6 (those addresses included) stays the kernel's.
TEST(FlowRules, Ipv6StaysTheKernels)
{
    PortTraffic t;
    t.ipv4 = kAddr;
    t.engines = 2;
    const size_t without = ppe::flow::rules_for(t).size();
    t.addr6 = 2;
    EXPECT_EQ(ppe::flow::rules_for(t).size(), without);
    EXPECT_NE(ppe::flow::left_to_kernel(t).find("address6 included"), std::string::npos);
    t.addr6 = 0;
    EXPECT_EQ(ppe::flow::left_to_kernel(t).find("address6"), std::string::npos);
    EXPECT_NE(ppe::flow::left_to_kernel(t).find("IPv6"), std::string::npos);
}

// What eta-ppe and --check hand rules_for(): the port's address, the
// engine count, UDP (MARS always takes it), how many address6.
TEST(FlowRules, TrafficOfAConfiguredPort)
{
    ppe::PortConfig p;
    p.ip = kAddr;
    p.addr6.resize(2);
    const PortTraffic t = ppe::flow::traffic_of(p, 3);
    EXPECT_EQ(t.ipv4, kAddr);
    EXPECT_EQ(t.engines, 3u);
    EXPECT_TRUE(t.udp);
    EXPECT_EQ(t.addr6, 2u);
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

} // namespace
