// Config parser and core resolution: good configs give the values they say;
// every bad config gives one message naming the file, line, key and what is
// allowed.
#include "config.h"
#include "system.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

using ppe::Config;
using testing::HasSubstr;

namespace {

const char *kPort = R"(
[[port]]
device = "net_af_packet0,iface=eta0a"
address = "198.18.0.1/24"
)";

Config parse_ok(const std::string &text)
{
    Config c;
    std::string err;
    EXPECT_TRUE(ppe::parse_config("test.toml", text, &c, &err)) << err;
    return c;
}

std::string parse_err(const std::string &text)
{
    Config c;
    std::string err;
    EXPECT_FALSE(ppe::parse_config("test.toml", text, &c, &err)) << "accepted:\n" << text;
    return err;
}

TEST(PpeConfig, MinimalConfigTakesDefaults)
{
    Config c = parse_ok(kPort);
    ASSERT_EQ(c.ports.size(), 1u);
    EXPECT_EQ(c.ports[0].ip, 0xc6120001u);
    EXPECT_EQ(c.ports[0].prefix, 24);
    EXPECT_EQ(c.ports[0].mtu, 1500);
    EXPECT_EQ(c.ports[0].name, "port0");
    EXPECT_EQ(c.idle, ppe::IdlePolicy::kAdaptive);
    ASSERT_EQ(c.cores.size(), 1u);
    EXPECT_EQ(c.cores[0].kind, ppe::CoreSpec::kAuto);
    EXPECT_EQ(c.cores[0].n, 1u);
    EXPECT_EQ(c.socket, "/run/eta/ppe.sock");
    EXPECT_EQ(c.stats_path(), "/run/eta/ppe.sock.stats");
    EXPECT_EQ(c.memory, ppe::MemoryMode::kAuto);
    EXPECT_EQ(c.strands, 16u) << "the default the ablation chose (benchmarks/README.md)";
    EXPECT_TRUE(c.prefetch);
    EXPECT_TRUE(c.tcp.rx_coalesce) << "receive coalescing is on by default";
}

// Receive-buffer autotuning is on by default: the window starts at rcvbuf and
// the ring grows in place up to rcvbuf_max (the DTI rings grow, issue 11).
TEST(PpeConfig, ReceiveAutotuningIsOnByDefault)
{
    Config c = parse_ok(kPort);
    EXPECT_EQ(c.tcp.rcvbuf, 256u * 1024);
    EXPECT_EQ(c.tcp.rcvbuf_max, ppe::kDefaultRcvbufMax);
    EXPECT_EQ(ppe::kDefaultRcvbufMax, 4u << 20);
    // rcvbuf alone at or above the default cap: no autotuning, no error.
    c = parse_ok("[tcp]\nrcvbuf = \"8M\"\n" + std::string(kPort));
    EXPECT_EQ(c.tcp.rcvbuf, 8u << 20);
    EXPECT_EQ(c.tcp.rcvbuf_max, 0u);
    // Said explicitly, 0 still turns it off.
    c = parse_ok("[tcp]\nrcvbuf_max = 0\n" + std::string(kPort));
    EXPECT_EQ(c.tcp.rcvbuf_max, 0u);
}

TEST(PpeConfig, EngineStrandsAndPrefetch)
{
    Config c = parse_ok("[engine]\nstrands = 1\nprefetch = false\n" + std::string(kPort));
    EXPECT_EQ(c.strands, 1u) << "run to completion";
    EXPECT_FALSE(c.prefetch);
    c = parse_ok("[engine]\nstrands = 64\n" + std::string(kPort));
    EXPECT_EQ(c.strands, 64u);
}

TEST(PpeConfig, PortTxZerocopy)
{
    EXPECT_FALSE(parse_ok(kPort).ports[0].tx_zerocopy) << "copying is the default (benchmarks/README.md)";
    // ... but on a vnet port (its kernel copies from the send ring in place).
    std::string vnet = kPort;
    const size_t at = vnet.find("device = ");
    ASSERT_NE(at, std::string::npos);
    vnet.replace(at, vnet.find('\n', at) - at, "device = \"vnet:eth1\"");
    EXPECT_TRUE(parse_ok(vnet).ports[0].tx_zerocopy);
    EXPECT_FALSE(parse_ok(vnet + "tx_zerocopy = false\n").ports[0].tx_zerocopy);
    EXPECT_TRUE(parse_ok(std::string(kPort) + "tx_zerocopy = true\n").ports[0].tx_zerocopy);
    const std::string e = parse_err(std::string(kPort) + "tx_zerocopy = \"yes\"\n");
    EXPECT_THAT(e, HasSubstr("tx_zerocopy"));
}

// [[port]] address6 (issue 31): inet_pton's addresses in network order, 64
// when no prefix is written, in the order written.
TEST(PpeConfig, PortAddress6)
{
    EXPECT_TRUE(parse_ok(kPort).ports[0].addr6.empty()) << "no IPv6 address unless configured";
    Config c = parse_ok(std::string(kPort) + "address6 = [\"2001:2:0:1::1/64\", \"fd00::5\", \"2001:DB8::7/128\"]\n");
    ASSERT_EQ(c.ports[0].addr6.size(), 3u);
    const mars::Ip6Prefix &a = c.ports[0].addr6[0];
    const uint8_t want[16] = {0x20, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 1};
    EXPECT_EQ(std::memcmp(a.addr.b, want, 16), 0);
    EXPECT_EQ(a.prefix, 64);
    EXPECT_EQ(ppe::format_ipv6(a), "2001:2:0:1::1/64");
    EXPECT_EQ(ppe::format_ipv6(c.ports[0].addr6[1]), "fd00::5/64") << "64 when no prefix is written";
    EXPECT_EQ(ppe::format_ipv6(c.ports[0].addr6[2]), "2001:db8::7/128");
    std::string list;
    for (int i = 0; i < mars::StackConfig::kMaxAddr6; i++) list += "\"2001:2::" + std::to_string(i + 1) + "\", ";
    EXPECT_EQ(parse_ok(std::string(kPort) + "address6 = [" + list + "]\n").ports[0].addr6.size(),
              size_t(mars::StackConfig::kMaxAddr6));
}

TEST(PpeConfig, PortKernelSharedOrNone)
{
    Config c = parse_ok(kPort);
    EXPECT_FALSE(c.ports[0].kernel_shared) << "\"none\" is the default (ppe/README.md says why)";
    EXPECT_TRUE(c.ports[0].kernel_iface.empty());
    c = parse_ok(std::string(kPort) + "kernel = \"shared\"\n");
    EXPECT_TRUE(c.ports[0].kernel_shared);
    EXPECT_EQ(c.ports[0].kernel_iface, "eta-k0");
    c = parse_ok(std::string(kPort) + "kernel = \"shared\"\nkernel_iface = \"eta3s\"\n");
    EXPECT_EQ(c.ports[0].kernel_iface, "eta3s");
    EXPECT_FALSE(parse_ok(std::string(kPort) + "kernel = \"none\"\n").ports[0].kernel_shared);
    std::string e = parse_err(std::string(kPort) + "kernel = \"both\"\n");
    EXPECT_THAT(e, HasSubstr("kernel"));
    EXPECT_THAT(e, HasSubstr("\"both\" is not allowed; allowed \"shared\""));
    e = parse_err(std::string(kPort) + "kernel_iface = \"eta3s\"\n");
    EXPECT_THAT(e, HasSubstr("kernel_iface: is only used with kernel = \"shared\""));
    e = parse_err(std::string(kPort) + "kernel = \"shared\"\nkernel_iface = \"a-name-far-too-long\"\n");
    EXPECT_THAT(e, HasSubstr("is not an interface name"));
    e = parse_err(std::string(kPort) + "kernel = \"shared\"\nkernel_iface = \"bad/name\"\n");
    EXPECT_THAT(e, HasSubstr("is not an interface name"));
    e = parse_err(std::string(kPort) + "kernel = \"shared\"\nkernel_iface = \"k\"\n" +
                  "[[port]]\ndevice = \"net_af_packet1,iface=eta1a\"\naddress = \"198.18.1.1/24\"\n"
                  "kernel = \"shared\"\nkernel_iface = \"k\"\n");
    EXPECT_THAT(e, HasSubstr("names the kernel interface of two ports"));
}

// [[port]] flow_isolate (issue 29): off by default; on for a PCI NIC
// (mlx5) and for net_tap (DPDK's tap has rte_flow isolated mode); refused
// with kernel = "shared", on vnet, af_packet and af_xdp (ConfigErrors).
TEST(PpeConfig, PortFlowIsolate)
{
    EXPECT_FALSE(parse_ok(kPort).ports[0].flow_isolate);
    const std::string pci = "[[port]]\ndevice = \"0000:03:00.0\"\naddress = \"198.18.0.1/24\"\n";
    EXPECT_TRUE(parse_ok(pci + "flow_isolate = true\n").ports[0].flow_isolate);
    EXPECT_FALSE(parse_ok(pci + "flow_isolate = false\n").ports[0].flow_isolate);
    const std::string tap = "[[port]]\ndevice = \"net_tap0,iface=e0\"\naddress = \"198.18.0.1/24\"\n";
    EXPECT_TRUE(parse_ok(tap + "flow_isolate = true\n").ports[0].flow_isolate);
    Config a = parse_ok(pci), b = parse_ok(pci + "flow_isolate = true\n");
    EXPECT_FALSE(ppe::same_port_setup(a.ports[0], b.ports[0])) << "a reload cannot change it";
}

TEST(PpeConfig, CopyEngineDefaultsToTheCore)
{
    Config c = parse_ok(kPort);
    EXPECT_EQ(c.copy_engine, ppe::CopyKind::kCpu);
    EXPECT_TRUE(c.copy_devices.empty());
    c = parse_ok("[copy]\nengine = \"cpu\"\nthreshold = 1024\n" + std::string(kPort));
    EXPECT_EQ(c.copy_engine, ppe::CopyKind::kCpu);
    EXPECT_EQ(c.copy_threshold, 1024u);
}

TEST(PpeConfig, CopyEngineDmadevWithItsDevice)
{
    Config c = parse_ok("[copy]\nengine = \"dmadev\"\ndevice = \"dma_skeleton,lcore=0\"\nthreshold = 512\nring = 256\n" +
                        std::string(kPort));
    EXPECT_EQ(c.copy_engine, ppe::CopyKind::kDmadev);
    ASSERT_EQ(c.copy_devices.size(), 1u);
    EXPECT_EQ(ppe::dmadev_name(c.copy_devices[0]), "dma_skeleton");
    EXPECT_TRUE(ppe::dmadev_is_vdev(c.copy_devices[0]));
    EXPECT_EQ(c.copy_threshold, 512u);
    EXPECT_EQ(c.copy_ring, 256u);
    EXPECT_EQ(c.copy_line, 3u) << "messages about the device point at its line";
    // The issue's short form, and one device per engine as an array.
    c = parse_ok("[copy]\nengine = \"dmadev:wq0.0\"\n" + std::string(kPort));
    ASSERT_EQ(c.copy_devices.size(), 1u);
    EXPECT_EQ(c.copy_devices[0], "wq0.0");
    EXPECT_FALSE(ppe::dmadev_is_vdev(c.copy_devices[0]));
    c = parse_ok("[engine]\ncores = [\"auto:2\"]\nidle = \"adaptive\"\n[copy]\nengine = \"dmadev\"\n"
                 "device = [\"wq0.0\", \"wq0.1\"]\n" + std::string(kPort));
    EXPECT_EQ(c.copy_devices.size(), 2u);
}

TEST(PpeConfig, BadCopyConfigsSayWhatIsAllowed)
{
    std::string e = parse_err("[copy]\nengine = \"dsa\"\n" + std::string(kPort));
    EXPECT_THAT(e, HasSubstr("test.toml:2: copy.engine: \"dsa\" is not a copy engine"));
    EXPECT_THAT(e, HasSubstr("\"cpu\""));
    EXPECT_THAT(e, HasSubstr("\"dmadev\""));
    e = parse_err("[copy]\nengine = \"dmadev\"\n" + std::string(kPort));
    EXPECT_THAT(e, HasSubstr("copy.engine: \"dmadev\" needs device = "));
    e = parse_err("[copy]\nengine = \"dmadev:\"\n" + std::string(kPort));
    EXPECT_THAT(e, HasSubstr("names no device"));
    e = parse_err("[copy]\ndevice = \"dma_skeleton\"\n" + std::string(kPort));
    EXPECT_THAT(e, HasSubstr("copy.device: is only used with engine = \"dmadev\""));
    e = parse_err("[copy]\nengine = \"dmadev\"\ndevice = \"dma skeleton\"\n" + std::string(kPort));
    EXPECT_THAT(e, HasSubstr("is not a DMA device name"));
    e = parse_err("[copy]\nengine = \"dmadev\"\ndevice = []\n" + std::string(kPort));
    EXPECT_THAT(e, HasSubstr("the array is empty"));
    e = parse_err("[engine]\ncores = [\"auto:2\"]\n[copy]\nengine = \"dmadev\"\ndevice = [\"wq0.0\", \"wq0.0\"]\n" +
                  std::string(kPort));
    EXPECT_THAT(e, HasSubstr("\"wq0.0\" is named twice"));
    e = parse_err("[engine]\ncores = [\"auto:2\"]\n[copy]\nengine = \"dmadev\"\ndevice = \"dma_skeleton\"\n" +
                  std::string(kPort));
    EXPECT_THAT(e, HasSubstr("test.toml:5: copy.device: 1 DMA device(s) for 2 engine(s)"));
    e = parse_err("[copy]\nthreshold = 0\n" + std::string(kPort));
    EXPECT_THAT(e, HasSubstr("copy.threshold: 0 is out of range; allowed 1 to 65536"));
    e = parse_err("[copy]\nengine = \"dmadev:wq0.0\"\nring = 1000\n" + std::string(kPort));
    EXPECT_THAT(e, HasSubstr("copy.ring: 1000 is not a power of two"));
    e = parse_err("[copy]\nengines = \"cpu\"\n" + std::string(kPort));
    EXPECT_THAT(e, HasSubstr("engines"));
}

TEST(PpeConfig, FullConfigMapsOntoTcpConfig)
{
    Config c = parse_ok(std::string(R"(
[engine]
cores = ["core:1", "pu:3"]
idle = "spin"
spin_us = 50
nice = -5
[dpdk]
memory = "no-huge"
memory_mb = 256
file_prefix = "eta-x"
[tcp]
rcvbuf = "1M"
rcvbuf_max = "3M"
sndbuf = 65536
congestion = "newreno"
sack = false
rx_coalesce = false
rto_min_ms = 5
rto_initial_ms = 300
time_wait_ms = 1000
[limits]
max_apps = 3
sockets_per_app = 10
memory_per_app = "64M"
allowed_users = ["root", "1234"]
[control]
socket = "/tmp/x/ppe.sock"
mode = 0o600
[log]
level = "debug"
[[route]]
dest = "10.0.0.0/8"
gateway = "198.18.0.254"
)") + kPort);
    ASSERT_EQ(c.cores.size(), 2u);
    EXPECT_EQ(c.cores[0].kind, ppe::CoreSpec::kCore);
    EXPECT_EQ(c.cores[1].kind, ppe::CoreSpec::kPu);
    EXPECT_EQ(c.cores[1].n, 3u);
    EXPECT_EQ(c.idle, ppe::IdlePolicy::kSpin);
    EXPECT_EQ(c.nice, -5);
    EXPECT_EQ(c.memory, ppe::MemoryMode::kNoHuge);
    EXPECT_EQ(c.tcp.rcvbuf, 1u << 20);
    EXPECT_EQ(c.tcp.rcvbuf_max, 3u << 20);
    EXPECT_EQ(c.tcp.sndbuf, 65536u);
    EXPECT_EQ(c.tcp.cc, mars::CongestionControl::kNewReno);
    EXPECT_FALSE(c.tcp.sack);
    EXPECT_FALSE(c.tcp.rx_coalesce);
    EXPECT_EQ(c.tcp.rto_min_ns, 5'000'000u);
    EXPECT_EQ(c.tcp.time_wait_ns, 1'000'000'000u);
    EXPECT_EQ(c.limits.memory_per_app, 64u << 20);
    EXPECT_THAT(c.limits.allowed_uids, testing::ElementsAre(0u, 1234u));
    EXPECT_EQ(c.socket_mode, 0600u);
    EXPECT_EQ(c.log_level, ppe::LogLevel::kDebug);
    ASSERT_EQ(c.routes.size(), 1u);
    EXPECT_EQ(c.routes[0].port, "port0");
    EXPECT_EQ(c.routes[0].prefix, 8);
}

struct BadCase {
    const char *name;
    std::string text;
    std::vector<std::string> expect; // substrings of the one message
};

class PpeConfigBad : public testing::TestWithParam<BadCase> {};

TEST_P(PpeConfigBad, IsRejectedWithItsMessage)
{
    const BadCase &b = GetParam();
    std::string err = parse_err(b.text);
    EXPECT_THAT(err, HasSubstr("test.toml")) << err;
    for (auto &s : b.expect) EXPECT_THAT(err, HasSubstr(s));
    EXPECT_EQ(err.find('\n'), std::string::npos) << "more than one line: " << err;
}

std::string with_port(const std::string &s) { return s + kPort; }

const BadCase kBad[] = {
    {"not_toml", "[engine\ncores = 1", {"test.toml:1", "not valid TOML"}},
    {"unknown_section", with_port("[engin]\ncores = [\"auto:1\"]\n"), {"engin", "unknown key", "[engine]"}},
    {"unknown_key", with_port("[engine]\ncorez = [\"auto:1\"]\n"), {"test.toml:2", "engine.corez", "unknown key", "cores, idle"}},
    {"wrong_type_cores", with_port("[engine]\ncores = 1\n"), {"engine.cores", "expected an array of strings", "an integer"}},
    {"wrong_type_idle", with_port("[engine]\nidle = 3\n"), {"engine.idle", "\"spin\", \"adaptive\", \"sleep\""}},
    {"bad_idle", with_port("[engine]\nidle = \"lazy\"\n"), {"test.toml:2", "engine.idle", "\"lazy\" is not allowed", "adaptive"}},
    {"bad_core_kind", with_port("[engine]\ncores = [\"cpu:1\"]\n"), {"engine.cores", "\"cpu:1\"", "core:N", "auto:N"}},
    {"bad_core_number", with_port("[engine]\ncores = [\"core:-1\"]\n"), {"engine.cores", "core:-1"}},
    {"auto_zero", with_port("[engine]\ncores = [\"auto:0\"]\n"), {"engine.cores", "auto:0"}},
    {"auto_mixed", with_port("[engine]\ncores = [\"auto:1\", \"core:1\"]\n"), {"engine.cores", "only entry"}},
    {"empty_cores", with_port("[engine]\ncores = []\n"), {"engine.cores", "is empty"}},
    {"spin_range", with_port("[engine]\nspin_us = -5\n"), {"engine.spin_us", "out of range", "allowed 0 to"}},
    {"spin_float", with_port("[engine]\nspin_us = 2.5\n"), {"engine.spin_us", "expected an integer", "fraction"}},
    {"nice_range", with_port("[engine]\nnice = -21\n"), {"engine.nice", "out of range", "allowed -20 to 19"}},
    {"no_port", "[engine]\nidle = \"spin\"\n", {"port", "no [[port]] is configured"}},
    {"port_no_device", "[[port]]\naddress = \"198.18.0.1/24\"\n", {"port[0].device", "is required"}},
    {"port_no_address", "[[port]]\ndevice = \"net_tap0\"\n", {"port[0].address", "is required"}},
    {"port_bad_device", "[[port]]\ndevice = \"eth0\"\naddress = \"198.18.0.1/24\"\n", {"port[0].device", "is not a device", "PCI address", "vnet:eth1"}},
    {"port_vnet_no_iface", "[[port]]\ndevice = \"vnet:\"\naddress = \"198.18.0.1/24\"\n", {"port[0].device", "wants an interface name"}},
    {"port_vnet_bad_iface", "[[port]]\ndevice = \"vnet:eth/0\"\naddress = \"198.18.0.1/24\"\n", {"port[0].device", "wants an interface name"}},
    {"isolate_shared", "[[port]]\ndevice = \"0000:03:00.0\"\naddress = \"198.18.0.1/24\"\nkernel = \"shared\"\nflow_isolate = true\n", {"port[0].flow_isolate", "cannot be used with kernel = \"shared\"", "two interfaces with one MAC", "Choose one"}},
    {"isolate_vnet", "[[port]]\ndevice = \"vnet:eth1\"\naddress = \"198.18.0.1/24\"\nflow_isolate = true\n", {"port[0].flow_isolate", "not available on a vnet port", "mlx5"}},
    {"isolate_af_packet", "[[port]]\ndevice = \"net_af_packet0,iface=v0\"\naddress = \"198.18.0.1/24\"\nflow_isolate = true\n", {"port[0].flow_isolate", "\"net_af_packet0\" has no rte_flow isolated mode", "mlx5", "kernel = \"shared\""}},
    {"isolate_af_xdp", "[[port]]\ndevice = \"net_af_xdp0,iface=v0\"\naddress = \"198.18.0.1/24\"\nflow_isolate = true\n", {"port[0].flow_isolate", "\"net_af_xdp0\" has no rte_flow isolated mode"}},
    {"isolate_not_bool", "[[port]]\ndevice = \"0000:03:00.0\"\naddress = \"198.18.0.1/24\"\nflow_isolate = \"yes\"\n", {"port[0].flow_isolate"}},
    {"port_vnet_shared", "[[port]]\ndevice = \"vnet:eth1\"\naddress = \"198.18.0.1/24\"\nkernel = \"shared\"\n", {"port[0].kernel", "not available on a vnet port"}},
    {"bad_address", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.300/24\"\n", {"test.toml:3", "port[0].address", "not an IPv4 address"}},
    {"no_prefix", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.1\"\n", {"port[0].address", "no prefix length"}},
    {"bad_prefix", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.1/33\"\n", {"port[0].address", "allowed 0 to 32"}},
    {"network_address", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.0/24\"\n", {"port[0].address", "not a usable host address"}},
    {"gateway_off_subnet", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.1/24\"\ngateway = \"10.0.0.1\"\n", {"port[0].gateway", "not inside"}},
    {"mtu_range", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.1/24\"\nmtu = 20000\n", {"port[0].mtu", "allowed 576 to 9600"}},
    {"port_unknown_key", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.1/24\"\nspeed = 10\n", {"port[0].speed", "unknown key", "device, address"}},
    {"two_ports_same_name", "[[port]]\nname=\"a\"\ndevice = \"net_tap0\"\naddress = \"198.18.0.1/24\"\n[[port]]\nname=\"a\"\ndevice = \"net_tap1\"\naddress = \"198.18.1.1/24\"\n", {"port[1].name", "names two ports"}},
    {"two_ports_same_ip", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.1/24\"\n[[port]]\ndevice = \"net_tap1\"\naddress = \"198.18.0.1/24\"\n", {"port[1].address", "two ports"}},
    {"port_not_array", "[port]\ndevice = \"net_tap0\"\n", {"port", "[[port]]"}},
    {"route_host_bits", with_port("[[route]]\ndest = \"10.0.0.1/8\"\ngateway = \"198.18.0.254\"\n"), {"route[0].dest", "host bits", "10.0.0.0/8"}},
    {"route_gateway_unreachable", with_port("[[route]]\ndest = \"default\"\ngateway = \"10.1.1.1\"\n"), {"route[0].gateway", "on no port's subnet"}},
    {"route_bad_port", with_port("[[route]]\ndest = \"default\"\ngateway = \"198.18.0.254\"\nport = \"x\"\n"), {"route[0].port", "no port is named"}},
    {"rcvbuf_not_pow2", with_port("[tcp]\nrcvbuf = 100000\n"), {"tcp.rcvbuf", "not a power of two"}},
    {"rcvbuf_bad_unit", with_port("[tcp]\nrcvbuf = \"1T\"\n"), {"tcp.rcvbuf", "not a size"}},
    {"rcvbuf_too_big", with_port("[tcp]\nrcvbuf = \"1G\"\n"), {"tcp.rcvbuf", "out of range", "4K to 64M"}},
    {"rcvbuf_max_below_rcvbuf", with_port("[tcp]\nrcvbuf = \"1M\"\nrcvbuf_max = \"512K\"\n"),
     {"tcp.rcvbuf_max", "below rcvbuf", "0 turns autotuning off"}},
    {"rcvbuf_max_too_big", with_port("[tcp]\nrcvbuf_max = \"1G\"\n"), {"tcp.rcvbuf_max", "out of range"}},
    {"bad_cc", with_port("[tcp]\ncongestion = \"bbr\"\n"), {"tcp.congestion", "\"cubic\", \"newreno\""}},
    {"sack_not_bool", with_port("[tcp]\nsack = \"yes\"\n"), {"tcp.sack", "expected true or false"}},
    {"rx_coalesce_not_bool", with_port("[tcp]\nrx_coalesce = 1\n"), {"tcp.rx_coalesce", "expected true or false"}},
    {"rto_order", with_port("[tcp]\nrto_min_ms = 5000\nrto_max_ms = 1000\n"), {"tcp.rto_min_ms", "larger than rto_max_ms"}},
    {"bad_memory_mode", with_port("[dpdk]\nmemory = \"lots\"\n"), {"dpdk.memory", "\"auto\", \"huge\", \"no-huge\""}},
    {"bad_prefix_chars", with_port("[dpdk]\nfile_prefix = \"a/b\"\n"), {"dpdk.file_prefix", "characters"}},
    {"unknown_user", with_port("[limits]\nallowed_users = [\"no-such-user-eta\"]\n"), {"limits.allowed_users", "no user named"}},
    {"max_apps_zero", with_port("[limits]\nmax_apps = 0\n"), {"limits.max_apps", "allowed 1 to"}},
    {"socket_relative", with_port("[control]\nsocket = \"ppe.sock\"\n"), {"control.socket", "not an absolute path"}},
    {"socket_too_long", with_port("[control]\nsocket = \"/" + std::string(120, 'a') + "\"\n"), {"control.socket", "longer than"}},
    {"bad_log_level", with_port("[log]\nlevel = \"verbose\"\n"), {"log.level", "\"error\", \"warn\", \"info\", \"debug\""}},
    {"strands_zero", with_port("[engine]\nstrands = 0\n"), {"test.toml:2", "engine.strands", "out of range", "allowed 1 to 64"}},
    {"strands_too_many", with_port("[engine]\nstrands = 65\n"), {"engine.strands", "allowed 1 to 64"}},
    {"strands_not_int", with_port("[engine]\nstrands = \"8\"\n"), {"engine.strands", "expected an integer"}},
    {"prefetch_not_bool", with_port("[engine]\nprefetch = 1\n"), {"engine.prefetch", "expected true or false"}},
    {"section_wrong_type", with_port("engine = 5\n"), {"engine", "expected a table"}},
    {"unknown_group", with_port("[control]\ngroup = \"no-such-group-eta\"\n"),
     {"control.group", "no group \"no-such-group-eta\"", "addgroup --system"}},
    {"empty_group", with_port("[control]\ngroup = \"\"\n"), {"control.group", "is empty"}},
    {"slice_too_short", with_port("[engine]\nslice_us = 50\n"), {"engine.slice_us", "100 to 100000"}},
    {"slice_too_long", with_port("[engine]\nslice_us = 200000\n"), {"engine.slice_us", "out of range"}},
    {"yield_not_bool", with_port("[engine]\nyield_when_contended = 1\n"), {"engine.yield_when_contended", "expected true or false"}},
    {"address6_link_local", std::string(kPort) + "address6 = [\"fe80::1/64\"]\n", {"test.toml:5", "port[0].address6", "link-local", "derived from its MAC"}},
    {"address6_zone", std::string(kPort) + "address6 = [\"fe80::1%eth0\"]\n", {"port[0].address6", "zone"}},
    {"address6_multicast", std::string(kPort) + "address6 = [\"ff02::1:ff00:1\"]\n", {"port[0].address6", "multicast"}},
    {"address6_unspecified", std::string(kPort) + "address6 = [\"::/64\"]\n", {"port[0].address6", "unspecified"}},
    {"address6_loopback", std::string(kPort) + "address6 = [\"::1\"]\n", {"port[0].address6", "loopback"}},
    {"address6_v4_mapped", std::string(kPort) + "address6 = [\"::ffff:10.0.0.1\"]\n", {"port[0].address6", "IPv4-mapped"}},
    {"address6_v4_compatible", std::string(kPort) + "address6 = [\"::10.0.0.1\"]\n", {"port[0].address6", "IPv4-compatible"}},
    {"address6_twice", std::string(kPort) + "address6 = [\n  \"2001:2::1\",\n  \"2001:2:0:0::1/80\",\n]\n",
     {"test.toml:7", "\"2001:2:0:0::1/80\" is listed twice", "\"2001:2::1/64\" before"}},
    {"address6_prefix_129", std::string(kPort) + "address6 = [\"2001:2::1/129\"]\n", {"port[0].address6", "allowed 1 to 128"}},
    {"address6_prefix_0", std::string(kPort) + "address6 = [\"2001:2::1/0\"]\n", {"port[0].address6", "allowed 1 to 128"}},
    {"address6_prefix_sign", std::string(kPort) + "address6 = [\"2001:2::1/+64\"]\n", {"port[0].address6", "allowed 1 to 128"}},
    {"address6_not_v6", std::string(kPort) + "address6 = [\"198.18.0.1\"]\n", {"port[0].address6", "not an IPv6 address", "2001:2:0:1::1/64"}},
    {"address6_string", std::string(kPort) + "address6 = \"2001:2::1\"\n", {"port[0].address6", "expected an array of strings", "[\"2001:2::1\"]"}},
    {"address6_too_many", std::string(kPort) + "address6 = [\"2001:2::1\", \"2001:2::2\", \"2001:2::3\", \"2001:2::4\", \"2001:2::5\", "
                          "\"2001:2::6\", \"2001:2::7\", \"2001:2::8\", \"2001:2::9\"]\n", {"port[0].address6", "9 addresses; at most 8"}},
    {"address6_two_ports", "[[port]]\ndevice = \"net_tap0\"\naddress = \"198.18.0.1/24\"\naddress6 = [\"2001:2::1\"]\n"
                           "[[port]]\ndevice = \"net_tap1\"\naddress = \"198.18.1.1/24\"\naddress6 = [\"2001:2::1/80\"]\n",
     {"port[1].address6", "given to two ports"}},
};

INSTANTIATE_TEST_SUITE_P(All, PpeConfigBad, testing::ValuesIn(kBad),
                         [](const testing::TestParamInfo<BadCase> &i) { return std::string(i.param.name); });

TEST(PpeConfig, ControlGroupAndEngineSharingKeys)
{
    // [control] group names an existing group (root's always exists); the
    // engine's CPU-sharing keys take their documented defaults when absent.
    Config c;
    std::string err;
    ASSERT_TRUE(ppe::parse_config("test.toml", with_port("[control]\ngroup = \"root\"\n[engine]\nslice_us = 0\n"
                                                         "yield_when_contended = false\n"), &c, &err)) << err;
    EXPECT_EQ(c.socket_group, "root");
    EXPECT_EQ(c.socket_gid, 0u);
    EXPECT_EQ(c.slice_us, 0u);
    EXPECT_FALSE(c.yield_when_contended);
    Config d;
    ASSERT_TRUE(ppe::parse_config("test.toml", kPort, &d, &err)) << err;
    EXPECT_EQ(d.slice_us, 100u);
    EXPECT_TRUE(d.yield_when_contended);
}

TEST(PpeConfig, MissingFileSaysSo)
{
    Config c;
    std::string err;
    EXPECT_FALSE(ppe::load_config("/nonexistent/ppe.toml", &c, &err));
    EXPECT_THAT(err, HasSubstr("/nonexistent/ppe.toml"));
    EXPECT_THAT(err, HasSubstr("No such file"));
}

TEST(PpeConfig, ExampleConfigParses)
{
    Config c;
    std::string err;
    ASSERT_TRUE(ppe::load_config(PPE_EXAMPLE_CONFIG, &c, &err)) << err;
    EXPECT_EQ(c.ports.size(), 1u);
    EXPECT_EQ(c.tcp.rcvbuf, 256u * 1024);
}

// The config eta-lab writes must parse: run its write_ppe_config function.
TEST(PpeConfig, LabConfigParses)
{
    char dir[] = "/tmp/eta-ppe-lab-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string out = std::string(dir) + "/lab.toml";
    const std::string cmd =
        "bash -c 'eval \"$(sed -n \"/^write_ppe_config()/,/^}/p\" \"$0\")\"; "
        "ETA_LAB_NAME=t ETA_LAB_INDEX=3 ETA_LAB_PPE_IFACE=eta3a ETA_LAB_PPE_IP=198.18.3.1 ETA_LAB_PREFIX=24 "
        "ETA_LAB_PEER_IP=198.18.3.2 ETA_LAB_PPE_IP6=2001:2:0:3::1 ETA_LAB_PREFIX6=64 ETA_LAB_MTU=9000 ETA_LAB_ENGINES=2 ETA_LAB_SOCKET=/run/eta/lab-t/ppe.sock ETA_LAB_CONFIG=$1 "
        "write_ppe_config' " ETA_LAB_SCRIPT " " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    Config c;
    std::string err;
    ASSERT_TRUE(ppe::load_config(out, &c, &err)) << err;
    std::remove(out.c_str());
    rmdir(dir);
    ASSERT_EQ(c.ports.size(), 1u);
    EXPECT_EQ(c.ports[0].device, "net_af_packet_3,iface=eta3a");
    EXPECT_EQ(c.ports[0].mtu, 9000);
    EXPECT_EQ(c.idle, ppe::IdlePolicy::kAdaptive);
    EXPECT_EQ(c.memory, ppe::MemoryMode::kNoHuge);
    EXPECT_EQ(c.socket, "/run/eta/lab-t/ppe.sock");
    ASSERT_EQ(c.cores.size(), 1u);
    EXPECT_EQ(c.cores[0].text, "auto:2") << "eta-lab up --engines 2";
    ASSERT_EQ(c.ports[0].addr6.size(), 1u) << "the lab's IPv6 address (issue 31)";
    EXPECT_EQ(ppe::format_ipv6(c.ports[0].addr6[0]), "2001:2:0:3::1/64");
}

TEST(PpeConfig, LabSharedConfigParses)
{
    char dir[] = "/tmp/eta-ppe-lab-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string out = std::string(dir) + "/lab.toml";
    const std::string cmd =
        "bash -c 'eval \"$(sed -n \"/^write_ppe_config()/,/^}/p\" \"$0\")\"; "
        "ETA_LAB_NAME=t ETA_LAB_INDEX=3 ETA_LAB_PPE_IFACE=eta3a ETA_LAB_PPE_IP=198.18.3.1 ETA_LAB_PREFIX=24 "
        "ETA_LAB_PEER_IP=198.18.3.2 ETA_LAB_MTU=1500 ETA_LAB_ENGINES=1 ETA_LAB_SOCKET=/run/eta/lab-t/ppe.sock ETA_LAB_CONFIG=$1 "
        "ETA_LAB_SHARED=1 ETA_LAB_SHARED_IFACE=eta3s write_ppe_config' " ETA_LAB_SCRIPT " " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    Config c;
    std::string err;
    ASSERT_TRUE(ppe::load_config(out, &c, &err)) << err;
    std::remove(out.c_str());
    rmdir(dir);
    ASSERT_EQ(c.ports.size(), 1u);
    EXPECT_TRUE(c.ports[0].kernel_shared) << "eta-lab up --shared";
    EXPECT_EQ(c.ports[0].kernel_iface, "eta3s");
}

// ---- core resolution on synthetic machines -----------------------------

ppe::Machine machine(int cores, int pus_per_core, int numa_split = -1)
{
    ppe::Machine m;
    int pu = 0;
    for (int i = 0; i < cores; i++) {
        ppe::Machine::Core c;
        for (int k = 0; k < pus_per_core; k++) c.pus.push_back(pu + k * cores);
        c.numa_node = numa_split < 0 ? 0 : (i < numa_split ? 0 : 1);
        m.cores.push_back(c);
        pu++;
    }
    for (auto &c : m.cores)
        for (int p : c.pus) m.pus.push_back(p);
    return m;
}

Config cores_config(const std::string &cores)
{
    return parse_ok("[engine]\ncores = [" + cores + "]\n" + kPort);
}

TEST(PpeCores, AutoOneOnTwoCoresPicksCoreOne)
{
    std::vector<ppe::EngineCore> e;
    std::string err;
    ASSERT_TRUE(ppe::resolve_cores(cores_config("\"auto:1\""), machine(2, 1), -1, &e, &err)) << err;
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].pu, 1);
}

TEST(PpeCores, AutoPrefersTheNicNode)
{
    std::vector<ppe::EngineCore> e;
    std::string err;
    // Cores 0-3 on node 0, 4-7 on node 1; NIC on node 0: cores 3 and 2.
    ASSERT_TRUE(ppe::resolve_cores(cores_config("\"auto:2\""), machine(8, 1, 4), 0, &e, &err)) << err;
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].numa_node, 0);
    EXPECT_EQ(e[1].numa_node, 0);
    EXPECT_NE(e[0].pu, 0);
    EXPECT_NE(e[1].pu, 0);
}

TEST(PpeCores, CoreKeepsItsHyperthreads)
{
    std::vector<ppe::EngineCore> e;
    std::string err;
    ASSERT_TRUE(ppe::resolve_cores(cores_config("\"core:1\""), machine(2, 2), -1, &e, &err)) << err;
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].pu, 1);
    EXPECT_THAT(e[0].core_pus, testing::ElementsAre(1, 3));
}

TEST(PpeCores, NonexistentCoreIsRejected)
{
    std::vector<ppe::EngineCore> e;
    std::string err;
    EXPECT_FALSE(ppe::resolve_cores(cores_config("\"core:7\""), machine(2, 1), -1, &e, &err));
    EXPECT_THAT(err, HasSubstr("engine.cores"));
    EXPECT_THAT(err, HasSubstr("\"core:7\" does not exist"));
    EXPECT_THAT(err, HasSubstr("cores 0-1"));
}

TEST(PpeCores, OverlappingCoresAreRejected)
{
    std::vector<ppe::EngineCore> e;
    std::string err;
    EXPECT_FALSE(ppe::resolve_cores(cores_config("\"core:1\", \"pu:3\""), machine(4, 2), -1, &e, &err));
    EXPECT_THAT(err, HasSubstr("overlap"));
    EXPECT_THAT(err, HasSubstr("test.toml:2"));
}

TEST(PpeCores, AllCoresLeaveNothingAndAreRejectedWhenSpinning)
{
    std::vector<ppe::EngineCore> e;
    std::string err;
    Config spin = parse_ok(std::string("[engine]\ncores = [\"auto:2\"]\nidle = \"spin\"\n") + kPort);
    EXPECT_FALSE(ppe::resolve_cores(spin, machine(2, 1), -1, &e, &err));
    EXPECT_THAT(err, HasSubstr("auto:2"));
    EXPECT_THAT(err, HasSubstr("spin"));
    spin = parse_ok(std::string("[engine]\ncores = [\"core:0\", \"core:1\"]\nidle = \"spin\"\n") + kPort);
    EXPECT_FALSE(ppe::resolve_cores(spin, machine(2, 1), -1, &e, &err));
    EXPECT_THAT(err, HasSubstr("leave at least one"));
}

// Engines that nap (adaptive, the default, or sleep) share their cores with
// the control thread and applications: a 2-core machine runs 2 engines.
TEST(PpeCores, AllCoresAreAllowedWhenEnginesNap)
{
    std::vector<ppe::EngineCore> e;
    std::string err;
    ASSERT_TRUE(ppe::resolve_cores(cores_config("\"auto:2\""), machine(2, 1), -1, &e, &err)) << err;
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].pu, 1) << "the boot core comes last";
    EXPECT_EQ(e[1].pu, 0);
    EXPECT_FALSE(ppe::resolve_cores(cores_config("\"auto:3\""), machine(2, 1), -1, &e, &err));
    EXPECT_THAT(err, HasSubstr("asks for 3"));
}

TEST(PpeCores, ThisMachineResolvesAuto)
{
    ppe::Machine m = ppe::Machine::detect();
    ASSERT_FALSE(m.pus.empty());
    std::vector<ppe::EngineCore> e;
    std::string err;
    if (m.cores.size() < 2) GTEST_SKIP() << "needs two cores";
    ASSERT_TRUE(ppe::resolve_cores(cores_config("\"auto:1\""), m, -1, &e, &err)) << err;
    EXPECT_NE(e[0].pu, m.boot_pu);
}

TEST(PpeCores, CpuListFormat)
{
    EXPECT_EQ(ppe::format_cpu_list({3, 1, 2, 7, 5, 6}), "1-3,5-7");
    EXPECT_EQ(ppe::format_cpu_list({1}), "1");
}

} // namespace
