// ppe/src/stat_format.h: eta-stat's machine-readable outputs of one snapshot
// of the PPE's stats region: JSON (for scripts) and the Prometheus text
// exposition format (for node_exporter's textfile collector). Kept apart
// from eta_stat.cc so a unit test can format a fixture snapshot without a
// running PPE.
#pragma once

#include "stats.h"

#include <eta/preload_stats.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

// The drop counters of mars::StackStats, in declaration order; the reason a
// frame was dropped is the name without "drop_".
#define PPE_STATS_DROP_FIELDS(X)                                                                                   \
    X(drop_eth) X(drop_not_ours) X(drop_arp) X(drop_ip_header) X(drop_ip_csum) X(drop_ip_ttl) X(drop_ip_fragment) \
    X(drop_ip_proto) X(drop_icmp) X(drop_tcp_header) X(drop_tcp_csum) X(drop_tcp_no_socket) X(drop_tcp_bad_state) \
    X(drop_tcp_paws) X(drop_tcp_out_of_window) X(drop_tcp_ooo_full) X(drop_tx_no_buffer) X(drop_arp_queue_full) \
    X(drop_arp_unresolved) X(drop_local_full)

namespace ppe::stats {

// A consistent copy of everything eta-stat reads from the region.
struct Snapshot {
    Header h;
    std::vector<EngineCounters> engines;
    std::vector<StackCounters> stacks; // [engine * n_ports + port]
    std::vector<PortInfo> ports;
    std::vector<AppCounters> apps;
    std::vector<ConnEntry> conns; // TCP sockets, then UDP ones (ConnEntry::proto)
    uint32_t conns_total = 0;     // TCP sockets the engines hold
    uint32_t udp_total = 0;       // UDP sockets the engines hold
    // What each program under libeta-preload.so publishes beside the control
    // socket (<socket>.preload/<pid>): its sockets by where they went, accepts,
    // waits, calls refused. Read apart from the region (read_programs()).
    std::vector<eta_preload_stats> programs;
};

// Fills s->programs from <socket_path>.preload/; false when none is there
// (no program under the shim ever ran with this control socket).
bool read_programs(const std::string &socket_path, Snapshot *s);

// The name of a reason a socket went where it went (0: "accelerated").
const char *preload_reason_name(unsigned reason);

// An engine's share of its cycles spent in busy loop iterations (0..1), and
// the sockets its stacks hold (every port).
double busy_share(const EngineCounters &c);
// The copy engine of engine e's stack on port p: "cpu" (the core copies),
// or "dmadev:NAME" (the engine's own device; applications use port 0 only).
std::string copy_engine_of(const Header &h, size_t e, uint32_t p);
uint64_t engine_connections(const Snapshot &s, size_t engine);

// A port shared with the kernel: every engine's KernelCounters of port p
// summed, and the name of a reason (mars::Unclaimed: "tcp-other-port", "udp",
// "icmp", "arp", "ipv6", "other").
KernelCounters port_kernel(const Snapshot &s, uint32_t p);
const char *kernel_reason_name(unsigned reason);

const char *tcp_state_name(uint8_t state);
const char *ppe_state_name(uint32_t state);
std::string ip_string(uint32_t ip_host_order);
// A connection's end as the table shows it: "a.b.c.d:port", or for an IPv6
// connection "[addr]:port" (RFC 5952's text form, as ss prints it).
std::string conn_end(const ConnEntry &c, bool local);
// A port's IPv6 addresses ([[port]] address6) as "ADDR/PREFIX" texts.
std::vector<std::string> port_addr6(const PortInfo &pi);

// One JSON object (keys in a fixed order); the connection table only when
// with_conns.
nlohmann::ordered_json to_json(const Snapshot &s, bool with_conns);

// Every counter and gauge of the snapshot, one metric family per quantity,
// each with `# HELP` and `# TYPE`; labels engine, port, pid, reason, ...
std::string to_prometheus(const Snapshot &s);

} // namespace ppe::stats
