// ppe/src/config.h: eta-ppe's configuration, parsed from TOML.
//
// Two stages, so that `eta-ppe --check` and the unit tests can run each:
//   parse_config()     syntax and meaning of every key (no system access);
//   check_environment() what needs the machine: cores exist (hwloc), devices
//                      exist, permissions, hugepages when forced.
// Every error is one line: "FILE:LINE: KEY: what is wrong; what is allowed".
#pragma once

#include <mars/stack.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ppe {

enum class IdlePolicy : uint8_t { kSpin, kAdaptive, kSleep };
enum class MemoryMode : uint8_t { kAuto, kHuge, kNoHuge };
enum class LogLevel : uint8_t { kError, kWarn, kInfo, kDebug };
// Who copies received payload into the applications' rings ([copy] engine).
enum class CopyKind : uint8_t { kCpu, kDmadev };

const char *to_string(IdlePolicy p);
const char *to_string(MemoryMode m);
const char *to_string(LogLevel l);
const char *to_string(CopyKind k);

// A [copy] device as written ("dma_skeleton,lcore=0", "wq0.0",
// "0000:00:04.0"): the dmadev name DPDK registers it under (before any ','),
// and whether eta-ppe must create it as a virtual device (names "dma_*").
std::string dmadev_name(const std::string &device);
bool dmadev_is_vdev(const std::string &device);
// "DDDD:BB:DD.F" or "BB:DD.F".
bool looks_like_pci_address(const std::string &s);

// One entry of engine.cores as written: "core:N", "pu:N" or "auto:N".
struct CoreSpec {
    enum Kind : uint8_t { kCore, kPu, kAuto } kind;
    uint32_t n;
    std::string text; // as written, for messages
    uint32_t line = 0; // where, for messages
};

struct PortConfig {
    std::string name;
    std::string device;   // DPDK device (PCI address or vdev string), or "vnet:<ifname>" (vnet_port.h)
    uint32_t ip = 0;      // host byte order
    uint8_t prefix = 24;
    uint32_t gateway = 0; // 0: none
    // address6 = ["2001:2:0:1::1/64", ...] (issue 31): the port's IPv6
    // addresses (global or unique local), at most StackConfig::kMaxAddr6;
    // the link-local one is always derived from the MAC and never listed.
    // With kernel = "shared" the kernel's interface gets them too.
    std::vector<mars::Ip6Prefix> addr6;
    // gateway6 = "fe80::1" (issue 31): the port's IPv6 default route (::/0),
    // as `gateway` is IPv4's: the router's link-local address, or a global
    // one inside one of addr6's prefixes. :: (all zero): none.
    mars::Ip6Addr gateway6;
    bool has_gateway6() const
    {
        for (uint8_t b : gateway6.b)
            if (b) return true;
        return false;
    }
    uint16_t mtu = 1500;
    uint16_t rx_desc = 1024, tx_desc = 1024;
    // TCP segmentation offload where the device offers it (ppe/src/dpdk.cc);
    // false: MARS segments (in one pass, [tcp] tx_batch).
    bool tso = true;
    // Transmit by reference where the device takes multi-segment frames
    // (ppe/src/dpdk.cc): a segment is a header mbuf chained to an mbuf that
    // points into the application's send ring, not a copy of it; on a vnet
    // port the payload goes into sendmmsg in place. Default: false, true on
    // a vnet port (config.cc).
    bool tx_zerocopy = false;
    // kernel = "shared": the host's kernel stays a host on this port (same
    // MAC, same address) through a net_tap interface eta-ppe makes
    // (ppe/src/kernel_tap.h); what MARS does not claim goes to it, what it
    // sends goes out the port. "none" (default): the port is eta's alone.
    bool kernel_shared = false;
    std::string kernel_iface; // the interface's name; default "eta-k<index>"
    // flow_isolate = true (issue 29): for a NIC whose kernel driver stays
    // attached under DPDK (mlx5): rte_flow isolated mode, rules that steer
    // eta's traffic (flow_rules.h) to the engines, the rest stays the kernel
    // netdev's. Not with kernel = "shared", not on vnet, af_packet, af_xdp.
    bool flow_isolate = false;
    uint32_t line = 0; // of its device key, for messages
};

// [[port]] device = "vnet:<ifname>" (ppe/src/vnet_port.h): the interface
// name, or "" when `device` names a DPDK device.
inline std::string vnet_iface(const std::string &device)
{
    return device.rfind("vnet:", 0) == 0 ? device.substr(5) : std::string();
}

struct RouteConfig {
    uint32_t dest = 0;
    uint8_t prefix = 0;
    uint32_t gateway = 0;
    std::string port; // which port it goes out of; empty: the one whose subnet holds the gateway
    uint32_t index = 0; // its place among the [[route]] tables, for messages ("route[N]")
};

// An IPv6 [[route]] (issue 31): dest = "2001:db8::/32" or "::/0" with an
// IPv6 gateway. The port it goes out of is always filled in by the parser:
// the one named, else the one whose address6 prefix holds a global gateway,
// else (a link-local gateway) the only port.
struct Route6Config {
    mars::Ip6Addr dest;
    uint8_t prefix = 0;
    mars::Ip6Addr gateway;
    std::string port;
    uint32_t index = 0; // its place among the [[route]] tables, for messages ("route[N]")
};

// [tcp] rcvbuf_max when the file does not say: receive-buffer autotuning on,
// up to 4 MiB per socket (Linux's tcp_rmem max is 6 MiB; ppe/README.md).
constexpr uint32_t kDefaultRcvbufMax = 4u << 20;
// [tcp] sndbuf_max when the file does not say: SO_SNDBUF may ask for up to
// 4 MiB per socket (Linux's tcp_wmem max).
constexpr uint32_t kDefaultSndbufMax = 4u << 20;

struct LimitsConfig {
    uint32_t max_apps = 64;
    uint32_t sockets_per_app = 1024;
    uint64_t memory_per_app = 1ull << 30; // bytes of shared region (sparse: pages are used as sockets are)
    // Users allowed to attach (checked with SO_PEERCRED). Empty: everyone
    // who can reach the control socket ([control] mode: by default root and
    // eta-ppe's own group).
    std::vector<uint32_t> allowed_uids;
    std::vector<std::string> allowed_users; // as written, for messages
    uint32_t allowed_users_line = 0;        // for messages
};


struct Config {
    std::string path; // the file it came from

    // [engine]
    std::vector<CoreSpec> cores{CoreSpec{CoreSpec::kAuto, 1, "auto:1"}};
    IdlePolicy idle = IdlePolicy::kAdaptive;
    uint32_t spin_us = 200;         // adaptive: busy-poll this long after the last work
    uint32_t slice_us = 100;        // adaptive/sleep: the engine thread's scheduler slice (0: the kernel's; cpu_contention.h)
    bool yield_when_contended = true; // adaptive: nap at once while the engine's CPU is shared (cpu_contention.h)
    uint32_t max_sleep_us = 5000;   // adaptive/sleep: longest nap while the NIC cannot interrupt us
    uint32_t burst = 32;            // rx/tx burst size
    uint32_t latency_sample = 64;   // latency breakdown: trace one in N received frames (0: off; engine_latency.cc)
    // The engine threads' nice value (setpriority on each thread); 0: left
    // as inherited. Below 0 an engine wins its core from ordinary programs
    // (a CPU hog), but also from the kernel threads a veth/af_packet port
    // needs (ksoftirqd): in the lab -10 made eta slower (benchmarks/README.md
    // "loaded"), hence 0. Needs CAP_SYS_NICE; without it, a warning.
    int32_t nice = 0;
    // Engines on two hardware threads (SMT siblings) of one physical core
    // share its execution units and caches: refused unless allowed; auto:N
    // then also uses siblings once every core has an engine.
    bool allow_smt = false;
    // Receive latency hiding in each engine's MARS stacks (mars/README.md,
    // "Strands"): frames of a burst in flight (1: run to completion) and
    // software prefetching. Defaults from benchmarks/README.md's ablation.
    uint32_t strands = 16;
    bool prefetch = true;

    // [copy]: the receive copy (frame -> application ring). kCpu: the engine
    // core copies inline; kDmadev: payloads of at least copy_threshold bytes
    // go to a DPDK dmadev, one device per engine (ppe/src/dma_copy.h).
    CopyKind copy_engine = CopyKind::kCpu;
    std::vector<std::string> copy_devices; // as written, one per engine
    uint32_t copy_threshold = 256;         // bytes; smaller payloads stay on the core
    uint32_t copy_ring = 1024;             // descriptors per device (power of two)
    uint32_t copy_line = 0;                // of [copy] device, for messages
    // Empty completion polls before a wait for the device gives up, stops it
    // and lets the core copy (mars::StackConfig::copy_drain_polls): about a
    // second, since dma_skeleton is a thread that a busy core may deschedule
    // for tens of ms, and giving up stops the device for good. Not a key.
    uint32_t copy_drain_polls = 1u << 26;

    // [dpdk]
    MemoryMode memory = MemoryMode::kAuto;
    uint32_t memory_mb = 512;       // EAL memory (-m)
    std::string file_prefix;        // empty: "eta-ppe-<pid>"
    std::vector<std::string> eal_args; // extra EAL arguments, for experts

    // [[port]] and [[route]]
    std::vector<PortConfig> ports;
    std::vector<RouteConfig> routes;   // IPv4 [[route]]s
    std::vector<Route6Config> routes6; // IPv6 [[route]]s (issue 31)

    // [tcp], [stack]. rcvbuf_max not given: kDefaultRcvbufMax (config.cc).
    mars::TcpConfig tcp;
    // [tcp] sndbuf_max: the largest send buffer SO_SNDBUF may ask for (Linux:
    // tcp_wmem[2]); each socket slot reserves the power of two holding it.
    uint32_t sndbuf_max = kDefaultSndbufMax;
    uint32_t max_sockets = 65536;
    uint32_t ooo_pool_frames = 4096;
    uint32_t ooo_frames_per_conn = 256;
    // ARP resolution (mars::StackConfig::arp_probes / arp_retrans_ns): as
    // Linux's mcast_solicit and retrans_time; a connect whose next hop never
    // answers fails with EHOSTUNREACH after about probes * retrans.
    uint32_t arp_probes = 3;
    uint32_t arp_retrans_ms = 1000;

    // [limits]
    LimitsConfig limits;

    // [control]
    std::string socket = "/run/eta/ppe.sock";
    // Who may connect: by default eta-ppe's user (root) and its group. The
    // files beside it (.stats, .cores, .net) are readable by the same classes.
    uint32_t socket_mode = 0660;
    // The socket's group (issue 34): its members may attach. Default: "eta"
    // where that group exists (the package makes it), else eta-ppe's own.
    std::string socket_group;       // as resolved, for messages
    uint32_t socket_gid = 0;
    uint32_t group_line = 0;

    // [log]
    LogLevel log_level = LogLevel::kInfo;
    uint32_t cores_line = 0, memory_line = 0, socket_line = 0; // for messages

    // Derived paths next to the control socket.
    std::string stats_path() const { return socket + ".stats"; }
    std::string cores_path() const { return socket + ".cores"; }
    // The mode of those files: written by eta-ppe, read by whoever may connect.
    uint32_t published_mode() const
    {
        uint32_t m = 0600;
        for (uint32_t shift : {3u, 0u})
            if (socket_mode & (02u << shift)) m |= 04u << shift;
        return m;
    }
};


// Parses `text` (the contents of `path`). Returns false and one message in
// *error when anything is wrong.
bool parse_config(const std::string &path, const std::string &text, Config *out, std::string *error);

// Reads and parses a file.
bool load_config(const std::string &path, Config *out, std::string *error);

// Parses "A.B.C.D" into host byte order.
bool parse_ipv4(const std::string &s, uint32_t *ip);
std::string format_ipv4(uint32_t ip);

// Parses an IPv6 address (inet_pton) into network byte order.
bool parse_ipv6(const std::string &s, mars::Ip6Addr *ip);
// "2001:2:0:1::1" / "2001:2:0:1::1/64" (RFC 5952 form, inet_ntop).
std::string format_ipv6(const mars::Ip6Addr &ip);
std::string format_ipv6(const mars::Ip6Prefix &p);
// A port's addresses as the start log writes them: "A.B.C.D/P ADDR6/P ...".
std::string format_addresses(const PortConfig &p);
// Whether two configs of a port agree on everything a reload cannot change
// (name, device, addresses, gateway, gateway6, mtu, descriptor counts).
bool same_port_setup(const PortConfig &a, const PortConfig &b);
// The routes of port's MARS stacks, into sc->routes and sc->routes6: the
// port's gateway (gateway6) as the default route, then the [[route]]s whose
// port it is (parse_config bounds them and settles each route's port).
void stack_routes(const Config &c, const PortConfig &port, mars::StackConfig *sc);
// Whether two configs have the same [[route]]s, IPv4 and IPv6 (a reload
// cannot change them).
bool same_routes(const Config &a, const Config &b);

} // namespace ppe
