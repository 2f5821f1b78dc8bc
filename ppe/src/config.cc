// ppe/src/config.cc: TOML → Config, with one clear message per error.
#include "config.h"
#include "config_net.h"
#include "config_section.h"

#include <toml++/toml.h>

#include <arpa/inet.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace ppe {

const char *to_string(IdlePolicy p)
{
    switch (p) {
    case IdlePolicy::kSpin: return "spin";
    case IdlePolicy::kAdaptive: return "adaptive";
    case IdlePolicy::kSleep: return "sleep";
    }
    return "?";
}

const char *to_string(MemoryMode m)
{
    switch (m) {
    case MemoryMode::kAuto: return "auto";
    case MemoryMode::kHuge: return "huge";
    case MemoryMode::kNoHuge: return "no-huge";
    }
    return "?";
}

const char *to_string(LogLevel l)
{
    switch (l) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
    }
    return "?";
}

const char *to_string(CopyKind k)
{
    switch (k) {
    case CopyKind::kCpu: return "cpu";
    case CopyKind::kDmadev: return "dmadev";
    }
    return "?";
}

std::string dmadev_name(const std::string &device) { return device.substr(0, device.find(',')); }

bool dmadev_is_vdev(const std::string &device) { return device.rfind("dma_", 0) == 0; }

bool parse_ipv4(const std::string &s, uint32_t *ip)
{
    in_addr a;
    if (inet_pton(AF_INET, s.c_str(), &a) != 1) return false;
    *ip = ntohl(a.s_addr);
    return true;
}

std::string format_ipv4(uint32_t ip)
{
    char buf[INET_ADDRSTRLEN];
    in_addr a;
    a.s_addr = htonl(ip);
    inet_ntop(AF_INET, &a, buf, sizeof buf);
    return buf;
}

bool parse_ipv6(const std::string &s, mars::Ip6Addr *ip)
{
    in6_addr a;
    if (inet_pton(AF_INET6, s.c_str(), &a) != 1) return false;
    std::memcpy(ip->b, a.s6_addr, 16);
    return true;
}

std::string format_ipv6(const mars::Ip6Addr &ip)
{
    char buf[INET6_ADDRSTRLEN];
    in6_addr a;
    std::memcpy(a.s6_addr, ip.b, 16);
    inet_ntop(AF_INET6, &a, buf, sizeof buf);
    return buf;
}

std::string format_ipv6(const mars::Ip6Prefix &p) { return format_ipv6(p.addr) + "/" + std::to_string(p.prefix); }

std::string format_addresses(const PortConfig &p)
{
    std::string s = format_ipv4(p.ip) + "/" + std::to_string(p.prefix);
    for (const mars::Ip6Prefix &a : p.addr6) s += " " + format_ipv6(a);
    return s;
}

bool same_port_setup(const PortConfig &a, const PortConfig &b)
{
    if (a.name != b.name || a.device != b.device || a.ip != b.ip || a.prefix != b.prefix || a.gateway != b.gateway ||
        a.mtu != b.mtu || a.rx_desc != b.rx_desc || a.tx_desc != b.tx_desc || a.addr6.size() != b.addr6.size() ||
        a.flow_isolate != b.flow_isolate || std::memcmp(a.gateway6.b, b.gateway6.b, 16) != 0)
        return false;
    for (size_t j = 0; j < a.addr6.size(); j++)
        if (std::memcmp(a.addr6[j].addr.b, b.addr6[j].addr.b, 16) != 0 || a.addr6[j].prefix != b.addr6[j].prefix)
            return false;
    return true;
}

namespace {

using config_section::ConfigError;
using config_section::Section;
using config_section::subtable;
using config_net::check_routes;
using config_net::is_unicast_host;
using config_net::netmask;
using config_net::parse_address6;
using config_net::parse_cidr;
using config_net::parse_gateway6;
using config_net::parse_route;

void parse_engine(Section &e, Config *c)
{
    bool present = false;
    auto cores = e.strings("cores", &present);
    if (present) {
        if (cores.empty()) e.fail("cores", "is empty; name at least one engine core (\"core:N\", \"pu:N\" or \"auto:N\")");
        c->cores.clear();
        for (auto &[text, where] : cores) {
            CoreSpec spec{};
            size_t colon = text.find(':');
            std::string kind = text.substr(0, colon);
            std::string num = colon == std::string::npos ? "" : text.substr(colon + 1);
            char *end = nullptr;
            unsigned long n = num.empty() ? 0 : std::strtoul(num.c_str(), &end, 10);
            bool num_ok = !num.empty() && *end == '\0' && num[0] != '-' && n < 4096;
            if (kind == "core") spec.kind = CoreSpec::kCore;
            else if (kind == "pu") spec.kind = CoreSpec::kPu;
            else if (kind == "auto") spec.kind = CoreSpec::kAuto;
            else num_ok = false;
            if (!num_ok || (spec.kind == CoreSpec::kAuto && n == 0))
                e.fail_at(where, e.full("cores"),
                          "\"" + text + "\" is not a core location; allowed \"core:N\" (hwloc core index), "
                          "\"pu:N\" (hwloc processing unit index) or \"auto:N\" (N >= 1 cores near the NIC)");
            spec.n = uint32_t(n);
            spec.text = text;
            spec.line = uint32_t(where.begin.line);
            c->cores.push_back(spec);
        }
        bool has_auto = false;
        for (auto &s : c->cores) has_auto |= s.kind == CoreSpec::kAuto;
        if (has_auto && c->cores.size() > 1)
            e.fail("cores", "\"auto:N\" must be the only entry; it picks all N engine cores itself");
    }
    c->idle = e.choice<IdlePolicy>("idle", c->idle,
                                   {{"spin", IdlePolicy::kSpin}, {"adaptive", IdlePolicy::kAdaptive},
                                    {"sleep", IdlePolicy::kSleep}});
    c->cores_line = e.line("cores");
    c->spin_us = uint32_t(e.integer("spin_us", c->spin_us, 0, 10'000'000));
    c->yield_when_contended = e.boolean("yield_when_contended", c->yield_when_contended);
    c->slice_us = uint32_t(e.integer("slice_us", c->slice_us, 0, 100'000));
    if (c->slice_us != 0 && c->slice_us < 100)
        e.fail("slice_us", "0 (the kernel's slice) or 100 to 100000 microseconds: Linux takes no shorter slice");
    c->max_sleep_us = uint32_t(e.integer("max_sleep_us", c->max_sleep_us, 10, 100'000));
    c->burst = uint32_t(e.integer("burst", c->burst, 1, 256));
    c->latency_sample = uint32_t(e.integer("latency_sample", c->latency_sample, 0, 1'000'000'000));
    c->nice = int32_t(e.integer("nice", c->nice, -20, 19));
    c->strands = uint32_t(e.integer("strands", c->strands, 1, mars::StackConfig::kMaxStrands));
    c->prefetch = e.boolean("prefetch", c->prefetch);
    c->allow_smt = e.boolean("allow_smt", c->allow_smt);
    e.reject_unknown("cores, idle, spin_us, yield_when_contended, slice_us, max_sleep_us, burst, latency_sample, nice, strands, prefetch, allow_smt");
}

void parse_dpdk(Section &d, Config *c)
{
    c->memory = d.choice<MemoryMode>("memory", c->memory,
                                     {{"auto", MemoryMode::kAuto}, {"huge", MemoryMode::kHuge},
                                      {"no-huge", MemoryMode::kNoHuge}});
    c->memory_line = d.line("memory");
    c->memory_mb = uint32_t(d.integer("memory_mb", c->memory_mb, 64, 1 << 20));
    c->file_prefix = d.string("file_prefix", "");
    if (c->file_prefix.size() > 64)
        d.fail("file_prefix", "is longer than 64 characters");
    for (char ch : c->file_prefix)
        if (!(isalnum(uint8_t(ch)) || ch == '-' || ch == '_' || ch == '.'))
            d.fail("file_prefix", "\"" + c->file_prefix + "\" has characters other than A-Z a-z 0-9 - _ .");
    bool present = false;
    for (auto &[arg, where] : d.strings("eal_args", &present)) {
        (void)where;
        c->eal_args.push_back(arg);
    }
    d.reject_unknown("memory, memory_mb, file_prefix, eal_args");
}

// [copy]: engine = "cpu" | "dmadev" (or "dmadev:DEVICE"), device (a string,
// or an array with one device per engine), threshold, ring.
void parse_copy(Section &s, Config *c)
{
    const std::string allowed = "allowed \"cpu\" (the engine core copies) or \"dmadev\" with device = \"NAME\" "
                                "(or \"dmadev:NAME\"; NAME e.g. \"dma_skeleton\", a DSA work queue \"wq0.0\")";
    std::string engine = s.string("engine", "cpu");
    std::string inline_device;
    if (engine.rfind("dmadev:", 0) == 0) {
        inline_device = engine.substr(7);
        engine = "dmadev";
        if (inline_device.empty()) s.fail("engine", "\"dmadev:\" names no device; " + allowed);
    }
    if (engine == "cpu") c->copy_engine = CopyKind::kCpu;
    else if (engine == "dmadev") c->copy_engine = CopyKind::kDmadev;
    else s.fail("engine", "\"" + engine + "\" is not a copy engine; " + allowed);
    c->copy_line = s.line("engine");
    if (s.has("device")) {
        if (c->copy_engine != CopyKind::kDmadev)
            s.fail("device", "is only used with engine = \"dmadev\" (the engine is \"cpu\")");
        if (!inline_device.empty())
            s.fail("device", "the device is named twice (engine = \"dmadev:" + inline_device + "\" and device); keep one");
        const toml::node *n = s.node("device");
        if (n->is_string()) {
            c->copy_devices.push_back(*n->value<std::string>());
        } else {
            bool present = false;
            for (auto &[d, where] : s.strings("device", &present)) c->copy_devices.push_back(d);
            if (c->copy_devices.empty()) s.fail("device", "the array is empty; name one DMA device per engine");
        }
        c->copy_line = s.line("device");
    } else if (!inline_device.empty()) {
        c->copy_devices.push_back(inline_device);
    } else if (c->copy_engine == CopyKind::kDmadev) {
        s.fail("engine", "\"dmadev\" needs device = \"NAME\" (one per engine, e.g. \"dma_skeleton\" for the "
                         "software test device, \"wq0.0\" for a DSA work queue), or engine = \"cpu\"");
    }
    for (const std::string &d : c->copy_devices) {
        bool ok = !d.empty() && dmadev_name(d).size() <= 64;
        for (char ch : d) ok &= isalnum(uint8_t(ch)) || strchr("_-.:,=", ch) != nullptr;
        if (!ok)
            s.fail("device", "\"" + d + "\" is not a DMA device name (letters, digits and _-.:,= up to 64 before any ','); "
                             "e.g. \"dma_skeleton\", \"dma_skeleton,lcore=0\", \"wq0.0\", \"0000:00:04.0\"");
        for (const std::string &p : c->copy_devices)
            if (&p != &d && dmadev_name(p) == dmadev_name(d))
                s.fail("device", "\"" + dmadev_name(d) + "\" is named twice; each engine needs a device of its own");
    }
    c->copy_threshold = uint32_t(s.integer("threshold", c->copy_threshold, 1, 65536));
    c->copy_ring = uint32_t(s.integer("ring", c->copy_ring, 32, 8192));
    if (c->copy_ring & (c->copy_ring - 1))
        s.fail("ring", std::to_string(c->copy_ring) + " is not a power of two; allowed 32, 64, ... 8192");
    s.reject_unknown("engine, device, threshold, ring");
}

bool looks_like_pci(const std::string &s)
{
    // DDDD:BB:DD.F or BB:DD.F
    auto hex = [](char ch) { return isxdigit(uint8_t(ch)) != 0; };
    std::string t = s;
    if (t.size() == 12 && t[4] == ':') t = t.substr(5);
    return t.size() == 7 && hex(t[0]) && hex(t[1]) && t[2] == ':' && hex(t[3]) && hex(t[4]) && t[5] == '.' &&
           t[6] >= '0' && t[6] <= '7';
}

void parse_port(Section &p, size_t index, Config *c)
{
    PortConfig port;
    port.name = p.string("name", "port" + std::to_string(index));
    port.device = p.string("device", "", true);
    port.line = p.line("device");
    std::string dev_name = port.device.substr(0, port.device.find(','));
    const bool vnet = port.device.rfind("vnet:", 0) == 0;
    if (vnet) {
        const std::string ifn = vnet_iface(port.device);
        bool ok = !ifn.empty() && ifn.size() <= 15 && ifn != "." && ifn != "..";
        for (char ch : ifn)
            if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.' || ch == '@'))
                ok = false;
        if (!ok)
            p.fail("device", "\"" + port.device + "\": \"vnet:\" wants an interface name (1 to 15 letters, digits, "
                             "'-', '_', '.'), e.g. \"vnet:eth1\"");
    } else if (!looks_like_pci(port.device) && dev_name.rfind("net_", 0) != 0)
        p.fail("device", "\"" + port.device + "\" is not a device; allowed a PCI address (\"0000:03:00.0\"), "
                         "a DPDK virtual device (\"net_af_packet0,iface=eth1\", \"net_af_xdp0,iface=eth1\", "
                         "\"net_tap0\", \"net_memif0,...\") or a kernel interface with offloads (\"vnet:eth1\")");
    std::string addr = p.string("address", "", true);
    parse_cidr(p, "address", addr, &port.ip, &port.prefix);
    if (!is_unicast_host(port.ip) || port.prefix == 0 || port.prefix > 31 ||
        (port.ip & ~netmask(port.prefix)) == 0 || (port.ip | netmask(port.prefix)) == 0xffffffffu)
        p.fail("address", "\"" + addr + "\" is not a usable host address with a prefix from 1 to 31");
    if (p.has("gateway")) {
        std::string gw = p.string("gateway", "");
        if (!parse_ipv4(gw, &port.gateway) || !is_unicast_host(port.gateway))
            p.fail("gateway", "\"" + gw + "\" is not a unicast IPv4 address");
        if ((port.gateway & netmask(port.prefix)) != (port.ip & netmask(port.prefix)))
            p.fail("gateway", gw + " is not inside the port's subnet " + addr);
    }
    parse_address6(p, &port);
    parse_gateway6(p, &port);
    port.mtu = uint16_t(p.integer("mtu", 1500, 576, 9600));
    port.rx_desc = uint16_t(p.integer("rx_desc", port.rx_desc, 64, 16384));
    port.tx_desc = uint16_t(p.integer("tx_desc", port.tx_desc, 64, 16384));
    port.tso = p.boolean("tso", port.tso);
    // By reference by default on a vnet port only (the kernel's sendmmsg
    // copies the payload from the send ring: a copy fewer, measured faster,
    // benchmarks/README.md "Session 58"); on DPDK devices copying measured
    // no slower ("Transmit by reference").
    port.tx_zerocopy = p.boolean("tx_zerocopy", vnet);
    const std::string kernel = p.string("kernel", "none");
    if (kernel == "shared") port.kernel_shared = true;
    else if (kernel != "none")
        p.fail("kernel", "\"" + kernel + "\" is not allowed; allowed \"shared\" (the host's kernel keeps the port's "
                         "address through an interface eta-ppe makes) or \"none\" (the port is eta's alone)");
    if (p.has("kernel_iface")) {
        port.kernel_iface = p.string("kernel_iface", "");
        if (!port.kernel_shared) p.fail("kernel_iface", "is only used with kernel = \"shared\"");
        bool ok = !port.kernel_iface.empty() && port.kernel_iface.size() <= 15 && port.kernel_iface != "." &&
                  port.kernel_iface != "..";
        for (char ch : port.kernel_iface)
            if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) ok = false;
        if (!ok)
            p.fail("kernel_iface", "\"" + port.kernel_iface + "\" is not an interface name; allowed 1 to 15 letters, "
                                   "digits, '-', '_' or '.'");
    } else if (port.kernel_shared) {
        port.kernel_iface = "eta-k" + std::to_string(index);
    }
    if (vnet && port.kernel_shared)
        p.fail("kernel", "\"shared\" is not available on a vnet port: the kernel keeps \"" + vnet_iface(port.device) +
                         "\" itself; give the kernel its own address on that interface, or use kernel = \"none\"");
    port.flow_isolate = p.boolean("flow_isolate", false);
    if (port.flow_isolate) {
        const std::string use = "; flow_isolate is for a NIC whose kernel driver stays attached under DPDK (mlx5), "
                                "give it its PCI address";
        if (port.kernel_shared)
            p.fail("flow_isolate", "cannot be used with kernel = \"shared\": with flow_isolate the NIC's own kernel "
                                   "netdev keeps what eta does not take, with kernel = \"shared\" an interface eta-ppe "
                                   "makes does; the host would have two interfaces with one MAC. Choose one: "
                                   "flow_isolate = true for a NIC that stays the kernel's (mlx5), else kernel = \"shared\"");
        else if (vnet)
            p.fail("flow_isolate", "is not available on a vnet port: it is a kernel interface already (no rte_flow)" +
                                       use);
        else if (dev_name.rfind("net_af_packet", 0) == 0 || dev_name.rfind("net_af_xdp", 0) == 0)
            p.fail("flow_isolate", "\"" + dev_name + "\" has no rte_flow isolated mode (DPDK 22.11)" + use +
                                       ", or use kernel = \"shared\" on this device");
    }
    p.reject_unknown("name, device, address, address6, gateway, gateway6, mtu, rx_desc, tx_desc, tso, tx_zerocopy, kernel, "
                     "kernel_iface, flow_isolate");
    for (auto &other : c->ports) {
        if (other.name == port.name) p.fail("name", "\"" + port.name + "\" names two ports; names must differ");
        if (other.device == port.device) p.fail("device", "\"" + port.device + "\" is used by two ports");
        if (other.ip == port.ip) p.fail("address", "the address " + addr + " is given to two ports");
        for (const mars::Ip6Prefix &a : port.addr6)
            for (const mars::Ip6Prefix &b : other.addr6)
                if (std::memcmp(a.addr.b, b.addr.b, 16) == 0)
                    p.fail("address6", "the address " + format_ipv6(a.addr) + " is given to two ports (\"" +
                                           other.name + "\" has it too); each address belongs to one port");
        if (port.kernel_shared && other.kernel_shared && other.kernel_iface == port.kernel_iface)
            p.fail("kernel_iface", "\"" + port.kernel_iface + "\" names the kernel interface of two ports");
    }
    c->ports.push_back(port);
}

void parse_tcp(Section &t, Config *c)
{
    mars::TcpConfig &tcp = c->tcp;
    auto ring = [&](const char *key, uint32_t dflt) {
        uint64_t v = t.size(key, dflt, 4096, 64u << 20);
        if (v & (v - 1)) t.fail(key, Section::human(v) + " is not a power of two; allowed 4K, 8K, ... 64M");
        return uint32_t(v);
    };
    tcp.rcvbuf = ring("rcvbuf", tcp.rcvbuf);
    // Receive-buffer autotuning's cap (mars::TcpConfig::rcvbuf_max): 0 = off.
    // Any size from rcvbuf up; each socket's ring grows in place up to the
    // power of two that holds it. Not given: kDefaultRcvbufMax, or off when
    // rcvbuf alone is already that large (as Linux does not tune a buffer
    // that starts at tcp_rmem's max).
    const uint32_t dflt_max = tcp.rcvbuf < kDefaultRcvbufMax ? kDefaultRcvbufMax : 0;
    tcp.rcvbuf_max = uint32_t(t.size("rcvbuf_max", t.has("rcvbuf_max") ? tcp.rcvbuf_max : dflt_max, 0, 64u << 20));
    if (tcp.rcvbuf_max != 0 && tcp.rcvbuf_max < tcp.rcvbuf)
        t.fail("rcvbuf_max", Section::human(tcp.rcvbuf_max) + " is below rcvbuf (" + Section::human(tcp.rcvbuf) +
                                 "); 0 turns autotuning off");
    tcp.sndbuf = ring("sndbuf", tcp.sndbuf);
    // SO_SNDBUF's cap (Config::sndbuf_max): each socket slot
    // reserves the power of two that holds it. 0 = SO_SNDBUF sizes no ring
    // above sndbuf. Not given: kDefaultSndbufMax, or sndbuf when larger.
    const uint32_t dflt_snd = tcp.sndbuf < kDefaultSndbufMax ? kDefaultSndbufMax : 0;
    c->sndbuf_max = uint32_t(t.size("sndbuf_max", t.has("sndbuf_max") ? c->sndbuf_max : dflt_snd, 0, 64u << 20));
    if (c->sndbuf_max != 0 && c->sndbuf_max < tcp.sndbuf)
        t.fail("sndbuf_max", Section::human(c->sndbuf_max) + " is below sndbuf (" + Section::human(tcp.sndbuf) +
                                 "); 0 keeps every send ring at sndbuf");
    tcp.cc = t.choice<mars::CongestionControl>(
        "congestion", tcp.cc, {{"cubic", mars::CongestionControl::kCubic}, {"newreno", mars::CongestionControl::kNewReno}});
    tcp.sack = t.boolean("sack", tcp.sack);
    tcp.timestamps = t.boolean("timestamps", tcp.timestamps);
    tcp.window_scaling = t.boolean("window_scaling", tcp.window_scaling);
    tcp.syncookies = t.boolean("syncookies", tcp.syncookies);
    tcp.rx_coalesce = t.boolean("rx_coalesce", tcp.rx_coalesce);
    tcp.tx_batch = t.boolean("tx_batch", tcp.tx_batch);
    tcp.syn_backlog = uint32_t(t.integer("syn_backlog", tcp.syn_backlog, 1, 1 << 20));
    auto ms = [&](const char *key, uint64_t dflt_ns, int64_t lo, int64_t hi) {
        return uint64_t(t.integer(key, int64_t(dflt_ns / 1'000'000), lo, hi)) * 1'000'000;
    };
    tcp.rto_initial_ns = ms("rto_initial_ms", tcp.rto_initial_ns, 10, 600'000);
    tcp.rto_min_ns = ms("rto_min_ms", tcp.rto_min_ns, 1, 600'000);
    tcp.rto_max_ns = ms("rto_max_ms", tcp.rto_max_ns, 10, 3'600'000);
    tcp.delack_ns = ms("delayed_ack_ms", tcp.delack_ns, 0, 500);
    tcp.time_wait_ns = ms("time_wait_ms", tcp.time_wait_ns, 0, 600'000);
    tcp.keepalive_idle_ns = uint64_t(t.integer("keepalive_idle_s", int64_t(tcp.keepalive_idle_ns / 1'000'000'000), 1,
                                               32767)) * 1'000'000'000;
    tcp.keepalive_intvl_ns = uint64_t(t.integer("keepalive_interval_s",
                                                int64_t(tcp.keepalive_intvl_ns / 1'000'000'000), 1, 32767)) *
                             1'000'000'000;
    tcp.keepalive_probes = uint32_t(t.integer("keepalive_probes", tcp.keepalive_probes, 1, 127));
    tcp.max_retries = uint32_t(t.integer("max_retries", tcp.max_retries, 1, 255));
    tcp.syn_retries = uint32_t(t.integer("syn_retries", tcp.syn_retries, 1, 127));
    if (tcp.rto_min_ns > tcp.rto_max_ns) t.fail("rto_min_ms", "is larger than rto_max_ms");
    if (tcp.rto_initial_ns < tcp.rto_min_ns || tcp.rto_initial_ns > tcp.rto_max_ns)
        t.fail("rto_initial_ms", "must lie between rto_min_ms and rto_max_ms");
    c->max_sockets = uint32_t(t.integer("max_sockets", c->max_sockets, 16, 1 << 22));
    c->ooo_pool_frames = uint32_t(t.integer("ooo_pool_frames", c->ooo_pool_frames, 0, 1 << 20));
    c->ooo_frames_per_conn = uint32_t(t.integer("ooo_frames_per_conn", c->ooo_frames_per_conn, 0, 1 << 16));
    c->arp_probes = uint32_t(t.integer("arp_probes", c->arp_probes, 1, 255));
    c->arp_retrans_ms = uint32_t(t.integer("arp_retrans_ms", c->arp_retrans_ms, 1, 60'000));
    t.reject_unknown("rcvbuf, rcvbuf_max, sndbuf, sndbuf_max, congestion, sack, timestamps, window_scaling, syncookies, syn_backlog, "
                     "rto_initial_ms, rto_min_ms, rto_max_ms, delayed_ack_ms, time_wait_ms, keepalive_idle_s, "
                     "keepalive_interval_s, keepalive_probes, max_retries, syn_retries, max_sockets, "
                     "ooo_pool_frames, ooo_frames_per_conn, rx_coalesce, tx_batch, arp_probes, arp_retrans_ms");
}

void parse_limits(Section &l, Config *c)
{
    LimitsConfig &lim = c->limits;
    lim.max_apps = uint32_t(l.integer("max_apps", lim.max_apps, 1, 4096));
    lim.sockets_per_app = uint32_t(l.integer("sockets_per_app", lim.sockets_per_app, 1, 1 << 20));
    lim.memory_per_app = l.size("memory_per_app", lim.memory_per_app, 1u << 20, 1ull << 40);
    bool present = false;
    lim.allowed_users_line = l.line("allowed_users");
    for (auto &[user, where] : l.strings("allowed_users", &present)) {
        uint32_t uid = 0;
        char *end = nullptr;
        unsigned long v = std::strtoul(user.c_str(), &end, 10);
        if (!user.empty() && *end == '\0' && user[0] != '-' && v < 0xffffffffu) {
            uid = uint32_t(v);
        } else {
            errno = 0;
            passwd *pw = getpwnam(user.c_str());
            if (!pw)
                l.fail_at(where, l.full("allowed_users"),
                          "no user named \"" + user + "\" on this machine; allowed user names or numeric uids");
            uid = pw->pw_uid;
        }
        lim.allowed_uids.push_back(uid);
        lim.allowed_users.push_back(user);
    }
    l.reject_unknown("max_apps, sockets_per_app, memory_per_app, allowed_users");
}

void parse_control(Section &s, Config *c)
{
    c->socket = s.string("socket", c->socket);
    if (c->socket.empty() || c->socket[0] != '/')
        s.fail("socket", "\"" + c->socket + "\" is not an absolute path");
    if (c->socket.size() + sizeof(".stats") > 107)
        s.fail("socket", "path is longer than 100 characters (UNIX socket paths are limited)");
    if (c->socket.back() == '/') s.fail("socket", "\"" + c->socket + "\" names a directory, not a socket file");
    c->socket_line = s.line("socket");
    c->socket_mode = uint32_t(s.integer("mode", c->socket_mode, 0, 0777));
    // [control] group: named, it must exist; unnamed, "eta" when the package
    // made it, else eta-ppe's own group (a build tree's eta-ppe as root).
    const bool named = s.has("group");
    c->group_line = named ? s.line("group") : 0;
    const std::string group = s.string("group", "");
    if (named && group.empty()) s.fail("group", "is empty; name a group (default \"eta\")");
    const struct group *g = getgrnam(group.empty() ? "eta" : group.c_str());
    if (g) {
        c->socket_group = g->gr_name;
        c->socket_gid = uint32_t(g->gr_gid);
    } else if (named) {
        s.fail("group", "no group \"" + group + "\" on this machine (addgroup --system " + group +
                            ", or name an existing group)");
    } else {
        c->socket_gid = uint32_t(getegid());
        const struct group *own = getgrgid(gid_t(c->socket_gid));
        c->socket_group = own ? own->gr_name : std::to_string(c->socket_gid);
    }
    s.reject_unknown("socket, mode, group");
}

void cross_check(Section &root, Config *c)
{
    if (c->copy_engine == CopyKind::kDmadev) {
        const size_t engines = c->cores[0].kind == CoreSpec::kAuto ? c->cores[0].n : c->cores.size();
        if (c->copy_devices.size() != engines) {
            std::ostringstream os;
            os << c->path << ':' << c->copy_line << ": copy.device: " << c->copy_devices.size()
               << " DMA device(s) for " << engines << " engine(s); each engine needs one of its own "
               << "(device = [\"...\", ...], one per engine), or engine = \"cpu\"";
            throw ConfigError{os.str()};
        }
    }
    if (c->ports.empty())
        root.fail_at(root.table().source(), "port",
                     "no [[port]] is configured; at least one is needed, e.g. [[port]] with "
                     "device = \"net_af_packet0,iface=eth1\" and address = \"198.18.0.1/24\"");
    check_routes(root, c);
}

void parse_document(const std::string &path, const toml::table &doc, Config *c)
{
    Section root(path, doc, "");
    static const toml::table empty;
    {
        Section s(path, subtable(root, "engine", empty), "engine");
        parse_engine(s, c);
    }
    {
        Section s(path, subtable(root, "dpdk", empty), "dpdk");
        parse_dpdk(s, c);
    }
    if (const toml::node *n = root.node("port")) {
        const toml::array *arr = n->as_array();
        if (!arr || !arr->is_array_of_tables())
            root.fail("port", "expected [[port]] tables (an array of tables)");
        size_t i = 0;
        for (const toml::node &e : *arr) {
            Section s(path, *e.as_table(), "port[" + std::to_string(i) + "]");
            parse_port(s, i, c);
            i++;
        }
    }
    if (const toml::node *n = root.node("route")) {
        const toml::array *arr = n->as_array();
        if (!arr || !arr->is_array_of_tables())
            root.fail("route", "expected [[route]] tables (an array of tables)");
        size_t i = 0;
        for (const toml::node &e : *arr) {
            Section s(path, *e.as_table(), "route[" + std::to_string(i) + "]");
            parse_route(s, uint32_t(i++), c);
        }
    }
    {
        Section s(path, subtable(root, "copy", empty), "copy");
        parse_copy(s, c);
    }
    {
        Section s(path, subtable(root, "tcp", empty), "tcp");
        parse_tcp(s, c);
    }
    {
        Section s(path, subtable(root, "limits", empty), "limits");
        parse_limits(s, c);
    }
    {
        Section s(path, subtable(root, "control", empty), "control");
        parse_control(s, c);
    }
    {
        Section s(path, subtable(root, "log", empty), "log");
        c->log_level = s.choice<LogLevel>("level", c->log_level,
                                          {{"error", LogLevel::kError}, {"warn", LogLevel::kWarn},
                                           {"info", LogLevel::kInfo}, {"debug", LogLevel::kDebug}});
        s.reject_unknown("level");
    }
    root.reject_unknown("[engine], [dpdk], [copy], [[port]], [[route]], [tcp], [limits], [control], [log]");
    cross_check(root, c);
}

} // namespace

bool looks_like_pci_address(const std::string &s) { return looks_like_pci(s); }

bool parse_config(const std::string &path, const std::string &text, Config *out, std::string *error)
{
    Config c;
    c.path = path;
    try {
        toml::table doc = toml::parse(text, path);
        parse_document(path, doc, &c);
    } catch (const toml::parse_error &e) {
        std::ostringstream os;
        os << path << ':' << e.source().begin.line << ": not valid TOML: " << e.description();
        *error = os.str();
        return false;
    } catch (const ConfigError &e) {
        *error = e.message;
        return false;
    }
    *out = std::move(c);
    return true;
}

bool load_config(const std::string &path, Config *out, std::string *error)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        *error = path + ": cannot read the config file: " + std::strerror(errno);
        return false;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) {
        *error = path + ": error reading the config file: " + std::strerror(errno);
        return false;
    }
    return parse_config(path, ss.str(), out, error);
}

} // namespace ppe
