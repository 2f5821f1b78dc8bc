// Engine placement on machines with SMT (issue 11): hwloc loads a synthetic
// topology from XML (two NUMA nodes, each a package of two cores with two
// hardware threads); auto:N takes distinct physical cores on the NIC's node,
// never two threads of one core unless [engine] allow_smt = true; pu:N
// entries naming siblings are refused with a clear message unless allowed;
// --check's placement line says where the engines are.
#include "config.h"
#include "system.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <sstream>

using ppe::Config;
using testing::HasSubstr;

namespace {

const char *kPort = R"(
[[port]]
device = "net_af_packet0,iface=eta0a"
address = "198.18.0.1/24"
)";

std::string mask(uint64_t bits)
{
    char b[32];
    std::snprintf(b, sizeof b, "0x%08llx", static_cast<unsigned long long>(bits));
    return b;
}

// hwloc 2 XML for `nodes` NUMA nodes (one package each) of `cores` cores of
// `threads` PUs; PU OS indexes run in order, so a core's threads are
// neighbours (core 0: PUs 0 and 1).
std::string topology_xml(int nodes, int cores, int threads)
{
    const int per_node = cores * threads;
    const uint64_t all = (uint64_t(1) << (nodes * per_node)) - 1;
    std::ostringstream x;
    int gp = 1;
    x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
      << "<topology version=\"2.0\">\n"
      << "<object type=\"Machine\" os_index=\"0\" cpuset=\"" << mask(all) << "\" complete_cpuset=\"" << mask(all)
      << "\" allowed_cpuset=\"" << mask(all) << "\" nodeset=\"" << mask((1u << nodes) - 1) << "\" complete_nodeset=\""
      << mask((1u << nodes) - 1) << "\" allowed_nodeset=\"" << mask((1u << nodes) - 1) << "\" gp_index=\"" << gp++
      << "\">\n";
    int pu = 0;
    for (int n = 0; n < nodes; n++) {
        const uint64_t set = ((uint64_t(1) << per_node) - 1) << (n * per_node);
        const std::string ns = mask(uint64_t(1) << n);
        auto sets = [&](uint64_t s) {
            return "cpuset=\"" + mask(s) + "\" complete_cpuset=\"" + mask(s) + "\" nodeset=\"" + ns +
                   "\" complete_nodeset=\"" + ns + "\" gp_index=\"" + std::to_string(gp++) + "\"";
        };
        x << "<object type=\"Package\" os_index=\"" << n << "\" " << sets(set) << ">\n";
        x << "<object type=\"NUMANode\" os_index=\"" << n << "\" " << sets(set) << " local_memory=\"1073741824\"/>\n";
        for (int c = 0; c < cores; c++) {
            const uint64_t cs = ((uint64_t(1) << threads) - 1) << pu;
            x << "<object type=\"Core\" os_index=\"" << n * cores + c << "\" " << sets(cs) << ">\n";
            for (int t = 0; t < threads; t++, pu++)
                x << "<object type=\"PU\" os_index=\"" << pu << "\" " << sets(uint64_t(1) << pu) << "/>\n";
            x << "</object>\n";
        }
        x << "</object>\n";
    }
    x << "</object>\n</topology>\n";
    return x.str();
}

ppe::Machine smt_machine()
{
    ppe::Machine m;
    std::string err;
    EXPECT_TRUE(ppe::Machine::from_xml(topology_xml(2, 2, 2), &m, &err)) << err;
    return m;
}

Config config(const std::string &engine)
{
    Config c;
    std::string err;
    EXPECT_TRUE(ppe::parse_config("test.toml", "[engine]\n" + engine + "\n" + kPort, &c, &err)) << err;
    return c;
}

// Engines on two threads of one core?
bool shares_a_core(const ppe::Machine &m, const std::vector<ppe::EngineCore> &e)
{
    std::set<size_t> cores;
    for (const auto &x : e)
        for (size_t i = 0; i < m.cores.size(); i++)
            for (int pu : m.cores[i].pus)
                if (pu == x.pu && !cores.insert(i).second) return true;
    return false;
}

TEST(PpePlacement, XmlTopologyHasTwoThreadsPerCore)
{
    const ppe::Machine m = smt_machine();
    ASSERT_EQ(m.cores.size(), 4u);
    EXPECT_THAT(m.cores[0].pus, testing::ElementsAre(0, 1));
    EXPECT_THAT(m.cores[3].pus, testing::ElementsAre(6, 7));
    EXPECT_EQ(m.cores[0].numa_node, 0);
    EXPECT_EQ(m.cores[2].numa_node, 1);
    EXPECT_EQ(m.pus.size(), 8u);
    ppe::Machine bad;
    std::string err;
    EXPECT_FALSE(ppe::Machine::from_xml("<topology", &bad, &err));
    EXPECT_THAT(err, HasSubstr("XML"));
}

TEST(PpePlacement, AllowSmtDefaultsToFalse)
{
    EXPECT_FALSE(config("").allow_smt);
    EXPECT_TRUE(config("allow_smt = true").allow_smt);
    Config c;
    std::string err;
    EXPECT_FALSE(ppe::parse_config("test.toml", std::string("[engine]\nallow_smt = 1\n") + kPort, &c, &err));
    EXPECT_THAT(err, HasSubstr("allow_smt"));
}

TEST(PpePlacement, AutoTakesDistinctCoresOnTheNicNode)
{
    const ppe::Machine m = smt_machine();
    std::vector<ppe::EngineCore> e;
    std::string err;
    ASSERT_TRUE(ppe::resolve_cores(config("cores = [\"auto:2\"]"), m, 1, &e, &err)) << err;
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].numa_node, 1);
    EXPECT_EQ(e[1].numa_node, 1);
    EXPECT_FALSE(shares_a_core(m, e));
    // Every thread of an engine's core is kept from applications.
    EXPECT_EQ(e[0].core_pus.size(), 2u);
    // All four cores (adaptive engines may take the boot core too), never a sibling.
    ASSERT_TRUE(ppe::resolve_cores(config("cores = [\"auto:4\"]"), m, 1, &e, &err)) << err;
    EXPECT_EQ(e.size(), 4u);
    EXPECT_FALSE(shares_a_core(m, e));
}

TEST(PpePlacement, AutoUsesSiblingsOnlyWhenAllowed)
{
    const ppe::Machine m = smt_machine();
    std::vector<ppe::EngineCore> e;
    std::string err;
    EXPECT_FALSE(ppe::resolve_cores(config("cores = [\"auto:5\"]"), m, 0, &e, &err));
    EXPECT_THAT(err, HasSubstr("asks for 5"));
    EXPECT_THAT(err, HasSubstr("allow_smt = true would also use"));
    ASSERT_TRUE(ppe::resolve_cores(config("cores = [\"auto:5\"]\nallow_smt = true"), m, 0, &e, &err)) << err;
    ASSERT_EQ(e.size(), 5u);
    EXPECT_TRUE(shares_a_core(m, e));
    std::set<int> pus;
    for (const auto &x : e) EXPECT_TRUE(pus.insert(x.pu).second) << "PU " << x.pu << " twice";
    // Engines sharing a core each keep only their own thread.
    int single = 0;
    for (const auto &x : e) single += x.core_pus.size() == 1;
    EXPECT_EQ(single, 2);
    ASSERT_TRUE(ppe::resolve_cores(config("cores = [\"auto:8\"]\nallow_smt = true"), m, 0, &e, &err)) << err;
    EXPECT_EQ(e.size(), 8u);
    EXPECT_FALSE(ppe::resolve_cores(config("cores = [\"auto:9\"]\nallow_smt = true"), m, 0, &e, &err));
    EXPECT_THAT(err, HasSubstr("asks for 9"));
}

TEST(PpePlacement, ExplicitSiblingsAreRefusedUnlessAllowed)
{
    const ppe::Machine m = smt_machine();
    std::vector<ppe::EngineCore> e;
    std::string err;
    EXPECT_FALSE(ppe::resolve_cores(config("cores = [\"pu:0\", \"pu:1\"]"), m, -1, &e, &err));
    EXPECT_THAT(err, HasSubstr("test.toml:2"));
    EXPECT_THAT(err, HasSubstr("\"pu:0\" and \"pu:1\" are hardware threads (SMT siblings) of one physical core"));
    EXPECT_THAT(err, HasSubstr("allow_smt = true"));
    EXPECT_TRUE(ppe::resolve_cores(config("cores = [\"pu:0\", \"pu:1\"]\nallow_smt = true"), m, -1, &e, &err)) << err;
    EXPECT_TRUE(ppe::resolve_cores(config("cores = [\"pu:0\", \"pu:2\"]"), m, -1, &e, &err)) << err;
    // A whole core and a thread of it overlap, allowed or not.
    EXPECT_FALSE(ppe::resolve_cores(config("cores = [\"core:0\", \"pu:1\"]\nallow_smt = true"), m, -1, &e, &err));
    EXPECT_THAT(err, HasSubstr("overlap"));
}

TEST(PpePlacement, CheckDescribesPlacement)
{
    const ppe::Machine m = smt_machine();
    std::vector<ppe::EngineCore> e;
    std::string err;
    Config c = config("cores = [\"auto:2\"]");
    ASSERT_TRUE(ppe::resolve_cores(c, m, 1, &e, &err)) << err;
    std::string line = ppe::describe_placement(c, m, 1, e);
    EXPECT_THAT(line, HasSubstr("engine 0 on PU 6 (core 3, NUMA node 1)"));
    EXPECT_THAT(line, HasSubstr("NIC on NUMA node 1"));
    EXPECT_THAT(line, HasSubstr("each engine has its own physical core (allow_smt = false)"));
    c = config("cores = [\"pu:0\", \"pu:1\"]\nallow_smt = true");
    ASSERT_TRUE(ppe::resolve_cores(c, m, 1, &e, &err)) << err;
    line = ppe::describe_placement(c, m, 1, e);
    EXPECT_THAT(line, HasSubstr("engines share a physical core"));
    EXPECT_THAT(line, HasSubstr("some engines are on another node"));
}

} // namespace
