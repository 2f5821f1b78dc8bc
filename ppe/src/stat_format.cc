// ppe/src/stat_format.cc: JSON and Prometheus renderings of a stats snapshot.
#include "stat_format.h"

#include <arpa/inet.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

namespace ppe::stats {

// The other counters of mars::StackStats, each with its help text.
#define COUNTER_FIELDS(X)                                                                                           \
    X(rx_frames, "frames the stack received") X(rx_bytes, "bytes the stack received")                             \
    X(tx_frames, "frames the stack sent") X(tx_bytes, "bytes the stack sent")                                     \
    X(arp_requests_in, "ARP requests received") X(arp_replies_in, "ARP replies received")                         \
    X(arp_requests_out, "ARP requests sent") X(arp_replies_out, "ARP replies sent")                               \
    X(arp_failed, "ARP resolutions that went unanswered (neighbour FAILED)")                                   \
    X(tcp_connects_unreachable, "connects failed with EHOSTUNREACH: ARP for the next hop failed")             \
    X(icmp_echo_in, "ICMP echo requests received") X(icmp_unreach_in, "ICMP destination unreachable received")    \
    X(icmp_frag_needed_in, "ICMP fragmentation needed received") X(icmp_out, "ICMP messages sent")               \
    X(fastpath_hits, "segments taken by the receive fast path")                                                   \
    X(fastpath_misses, "segments that needed the slow path")                                                      \
    X(lookup_cache_hits, "connection lookups answered by the last-flow cache")                                   \
    X(lookup_cache_misses, "connection lookups that walked the hash table")                                      \
    X(tcp_active_opens, "connections opened by connect()") X(tcp_passive_opens, "connections accepted")          \
    X(tcp_established, "connections that reached ESTABLISHED") X(tcp_resets_in, "TCP resets received")           \
    X(tcp_resets_out, "TCP resets sent") X(tcp_retransmits, "TCP segments retransmitted")                         \
    X(tcp_fast_retransmits, "TCP fast retransmits") X(tcp_timeouts, "TCP retransmission timeouts")                \
    X(tcp_syncookies_sent, "SYN cookies sent") X(tcp_syncookies_ok, "SYN cookies validated")                      \
    X(tcp_challenge_acks, "challenge ACKs sent (RFC 5961)")                                                       \
    X(tcp_ooo_segments, "out-of-order segments received")                                                       \
    X(tcp_rack_lost, "transmissions RACK declared lost (RFC 8985)")                                             \
    X(tcp_tlp_probes, "tail loss probes sent")                                                                  \
    X(tcp_tlp_recoveries, "tail loss probes that repaired a loss")                                              \
    X(tcp_dsacks_in, "ACKs received with a D-SACK")                                                             \
    X(tcp_dsacks_sent, "ACKs sent with a D-SACK")                                                               \
    X(tcp_rcvbuf_grows, "receive buffers grown by autotuning (tcp.rcvbuf_max)")                                 \
    X(tcp_rx_ring_grows, "receive rings grown for autotuning")                                                  \
    X(udp_in, "UDP datagrams delivered to sockets (a multicast one per member)")                                \
    X(udp_out, "UDP datagrams sent")                                                                             \
    X(udp_rcvbuf_errors, "UDP datagrams dropped: the socket's receive ring was full")                          \
    X(udp_no_port, "UDP datagrams for a port no socket holds")                                                   \
    X(udp_csum_errors, "UDP datagrams dropped for a bad checksum")                                               \
    X(udp_header_errors, "UDP datagrams dropped for a bad length field")                                         \
    X(udp_unreach_limited, "ICMP port unreachables not sent (rate limit)")                                      \
    X(udp_mcast_in, "multicast UDP datagrams taken")                                                            \
    X(igmp_in, "IGMP messages received") X(igmp_out, "IGMP reports sent")                                       \
    X(mld_query_in, "MLD queries taken") X(mld_out, "MLD reports sent")                                         \
    X(mld_report_in, "MLD reports of other hosts received (ignored)")                                           \
    X(mld_drop, "MLD queries dropped: malformed, bad checksum, not link-local or not one hop")                  \
    X(local_conns, "local connections served in the engine: both ends in this stack (issue 29)")                \
    X(local_frames, "frames of local connections the stack sent to itself (no port)")                           \
    X(local_bytes, "bytes of those frames, Ethernet header included")                                          \
    X(strand_yields, "receive strands that yielded to wait for memory")                                          \
    X(prefetches, "software prefetches the stack issued (receive pipeline, transmit)")                                                      \
    X(copies_offloaded, "payload copies handed to a copy engine")                                                \
    X(copy_bytes_offloaded, "payload bytes handed to a copy engine")                                             \
    X(copy_fallback_ring_full, "copies the core made: the copy engine's ring was full")                          \
    X(copy_fallback_device_gone, "copies the core made: the copy device was gone")                               \
    X(copy_fallback_error, "copies the core made: the copy engine reported an error")                            \
    X(copy_fallback_stalled, "copies the core made: the copy engine stalled")                                  \
    X(copy_fallback_below_threshold, "copies the core made: shorter than the copy threshold")                   \
    X(copy_fallback_ring_wrap, "copies the core made: the payload wraps around the receive ring's end")        \
    X(rx_coalesce_groups, "receive coalescing: groups of two or more segments taken at once")                  \
    X(rx_coalesce_segments, "receive coalescing: segments taken in those groups")                              \
    X(tx_runs, "transmit runs: two or more full segments built in one pass")                                   \
    X(tx_run_segments, "transmit runs: segments sent in those runs")                                            \
    X(tx_tso_frames, "TCP segmentation offload frames handed to the port (several segments each)")          \
    X(tx_ref_frames, "segments sent with their payload by reference from the send ring (tx_zerocopy)")        \
    X(tx_ref_bytes, "payload bytes sent by reference from the send ring (tx_zerocopy)")                        \
    X(ip6_in, "IPv6 packets for the stack past the header checks")                                            \
    X(ip6_drop_header, "IPv6 packets dropped: bad header (version, payload length, multicast source)")        \
    X(ip6_drop_not_ours, "IPv6 packets dropped: not to an address or group of the stack")                     \
    X(ip6_drop_ext, "IPv6 packets dropped: extension header malformed or refused")                            \
    X(ip6_drop_routing, "IPv6 packets refused: routing header with segments left")                            \
    X(ip6_drop_fragment, "IPv6 fragments dropped (not reassembled)")                                          \
    X(ip6_drop_proto, "IPv6 packets dropped: no upper protocol here")                                         \
    X(ip6_drop_no_route, "IPv6 packets not sent: destination off-link (no IPv6 routes)")                      \
    X(icmp6_in, "ICMPv6 messages received") X(icmp6_drop, "ICMPv6 messages dropped: short or bad checksum")  \
    X(icmp6_echo_in, "ICMPv6 echo requests received")                                                         \
    X(icmp6_unreach_in, "ICMPv6 destination unreachable received")                                            \
    X(icmp6_ptb_in, "ICMPv6 packet too big received") X(icmp6_time_exceeded_in, "ICMPv6 time exceeded received") \
    X(icmp6_param_problem_in, "ICMPv6 parameter problem received") X(icmp6_out, "ICMPv6 messages sent")       \
    X(icmp6_rate_limited, "ICMPv6 errors not sent: rate limit")                                               \
    X(nd_ns_in, "neighbour solicitations received") X(nd_na_in, "neighbour advertisements received")          \
    X(nd_ns_out, "neighbour solicitations sent") X(nd_na_out, "neighbour advertisements sent")                \
    X(nd_drop_invalid, "neighbour discovery messages dropped: malformed (RFC 4861 7.1)")                      \
    X(nd_failed, "IPv6 neighbour resolutions that went unanswered (FAILED)")                                  \
    X(nd_drop_queue_full, "IPv6 frames dropped: too many waiting for neighbour resolution")                   \
    X(nd_drop_unresolved, "IPv6 frames dropped: their neighbour's resolution failed")                         \
    X(nd_dad_duplicates, "IPv6 addresses of the stack found duplicate (DAD), or claimed by another node")

std::string copy_engine_of(const Header &h, size_t e, uint32_t p)
{
    const std::string all(h.copy_engine, strnlen(h.copy_engine, sizeof h.copy_engine));
    if (p != 0 || all.rfind("dmadev:", 0) != 0) return "cpu";
    // "dmadev:A,B,...": the e-th name is engine e's.
    size_t start = 7;
    for (size_t i = 0; i < e; i++) {
        start = all.find(',', start);
        if (start == std::string::npos) return "cpu";
        start++;
    }
    return "dmadev:" + all.substr(start, all.find(',', start) - start);
}

double busy_share(const EngineCounters &c)
{
    return c.total_cycles ? double(c.busy_cycles) / double(c.total_cycles) : 0.0;
}

uint64_t engine_connections(const Snapshot &s, size_t e)
{
    uint64_t n = 0;
    for (uint32_t p = 0; p < s.h.n_ports; p++) n += s.stacks[e * s.h.n_ports + p].stack.conns_open;
    return n;
}

KernelCounters port_kernel(const Snapshot &s, uint32_t p)
{
    KernelCounters k{};
    for (size_t e = 0; e < s.engines.size() && p < s.h.n_ports; e++) {
        const KernelCounters &c = s.stacks[e * s.h.n_ports + p].kernel;
        for (unsigned r = 0; r < mars::kUnclaimedReasons; r++) {
            k.to_frames[r] += c.to_frames[r];
            k.to_bytes[r] += c.to_bytes[r];
        }
        k.to_drops += c.to_drops;
        k.from_frames += c.from_frames;
        k.from_bytes += c.from_bytes;
        k.from_drops += c.from_drops;
    }
    return k;
}

const char *kernel_reason_name(unsigned r)
{
    static const char *const names[mars::kUnclaimedReasons] = {"tcp-other-port", "udp", "icmp", "arp", "ipv6", "other"};
    return r < mars::kUnclaimedReasons ? names[r] : "?";
}

const char *tcp_state_name(uint8_t s)
{
    static const char *const names[] = {"CLOSED", "LISTEN", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT1",
                                        "FIN_WAIT2", "CLOSE_WAIT", "CLOSING", "LAST_ACK", "TIME_WAIT"};
    return s < 11 ? names[s] : "?";
}

const char *ppe_state_name(uint32_t s)
{
    static const char *const names[] = {"starting", "running", "stopping", "stopped"};
    return s < 4 ? names[s] : "?";
}

std::string ip_string(uint32_t ip)
{
    char b[INET_ADDRSTRLEN];
    in_addr a;
    a.s_addr = htonl(ip);
    inet_ntop(AF_INET, &a, b, sizeof b);
    return b;
}

std::string conn_end(const ConnEntry &c, bool local)
{
    const uint16_t port = local ? c.local_port : c.remote_port;
    if (!c.ipv6) return ip_string(local ? c.local_ip : c.remote_ip) + ":" + std::to_string(port);
    char b[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, local ? c.local6 : c.remote6, b, sizeof b);
    return std::string("[") + b + "]:" + std::to_string(port);
}

std::vector<std::string> port_addr6(const PortInfo &pi)
{
    std::vector<std::string> out;
    for (uint32_t i = 0; i < pi.n_addr6 && i < uint32_t(mars::StackConfig::kMaxAddr6); i++) {
        char b[INET6_ADDRSTRLEN];
        in6_addr a;
        std::memcpy(a.s6_addr, pi.addr6[i], 16);
        inet_ntop(AF_INET6, &a, b, sizeof b);
        out.push_back(std::string(b) + "/" + std::to_string(pi.addr6_prefix[i]));
    }
    return out;
}

namespace {

// Fixed-size char arrays from the region may lack their terminator when a
// writer filled them; never read past the array.
template <size_t N>
std::string c_str(const char (&a)[N])
{
    size_t n = 0;
    while (n < N && a[n]) n++;
    return std::string(a, n);
}

std::string mac_string(const uint8_t m[6])
{
    char b[18];
    std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    return b;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

// Collects samples per metric family so that each family is written once,
// all its samples together, as the exposition format requires.
class Exposition {
  public:
    explicit Exposition(std::string prefix) : prefix_(std::move(prefix)) {}

    void counter(const std::string &name, const char *help, const Labels &labels, uint64_t value)
    {
        family(name + "_total", "counter", help).push_back(line(name + "_total", labels, std::to_string(value)));
    }
    // A counter whose unit makes it fractional (seconds).
    void counter(const std::string &name, const char *help, const Labels &labels, double value)
    {
        family(name + "_total", "counter", help).push_back(line(name + "_total", labels, number(value)));
    }
    void gauge(const std::string &name, const char *help, const Labels &labels, double value)
    {
        family(name, "gauge", help).push_back(line(name, labels, number(value)));
    }
    void gauge(const std::string &name, const char *help, const Labels &labels, uint64_t value)
    {
        family(name, "gauge", help).push_back(line(name, labels, std::to_string(value)));
    }

    std::string text() const
    {
        std::string out;
        for (const std::string &name : order_) {
            const Family &f = families_.at(name);
            out += "# HELP " + prefix_ + f.base + " " + f.help + "\n";
            out += "# TYPE " + prefix_ + f.base + " " + f.type + "\n";
            for (const std::string &l : f.samples) out += l;
        }
        return out;
    }

  private:
    struct Family {
        std::string base, type, help;
        std::vector<std::string> samples;
    };

    std::vector<std::string> &family(const std::string &sample_name, const char *type, const char *help)
    {
        auto it = families_.find(sample_name);
        if (it == families_.end()) {
            // The text format (0.0.4) names the family exactly as its samples,
            // counters' _total included.
            it = families_.emplace(sample_name, Family{sample_name, type, help, {}}).first;
            order_.push_back(sample_name);
        }
        return it->second.samples;
    }

    static std::string number(double v)
    {
        char b[32];
        std::snprintf(b, sizeof b, "%.17g", v);
        return b;
    }

    static std::string escape(const std::string &v)
    {
        std::string out;
        for (char c : v) {
            if (c == '\\') out += "\\\\";
            else if (c == '"') out += "\\\"";
            else if (c == '\n') out += "\\n";
            else out += c;
        }
        return out;
    }

    std::string line(const std::string &name, const Labels &labels, const std::string &value) const
    {
        std::string out = prefix_ + name;
        if (!labels.empty()) {
            out += "{";
            for (size_t i = 0; i < labels.size(); i++)
                out += (i ? "," : "") + labels[i].first + "=\"" + escape(labels[i].second) + "\"";
            out += "}";
        }
        return out + " " + value + "\n";
    }

    std::string prefix_;
    std::map<std::string, Family> families_;
    std::vector<std::string> order_;
};

void engines_prometheus(const Snapshot &s, Exposition &x)
{
    for (size_t e = 0; e < s.engines.size(); e++) {
        const EngineCounters &c = s.engines[e];
        const Labels l{{"engine", std::to_string(e)}, {"cpu", std::to_string(c.pu)}};
        x.gauge("engine_apps", "applications the engine serves now", l, uint64_t(c.apps));
        x.counter("engine_loops", "engine loop iterations", l, c.loops);
        x.counter("engine_busy_polls", "engine loop iterations that found work", l, c.busy_polls);
        x.counter("engine_idle_polls", "engine loop iterations that found none", l, c.idle_polls);
        x.counter("engine_sleeps", "idle sleeps the engine took", l, c.sleeps);
        x.counter("engine_busy_cycles", "TSC cycles spent in busy loop iterations", l, c.busy_cycles);
        x.counter("engine_cycles", "TSC cycles since the engine started", l, c.total_cycles);
        if (s.h.tsc_hz) {
            x.counter("engine_busy_seconds", "seconds spent in busy loop iterations (busy cycles / TSC Hz)", l,
                      double(c.busy_cycles) / double(s.h.tsc_hz));
        }
        x.counter("engine_rx_packets", "frames the engine received from its ports", l, c.rx_packets);
        x.counter("engine_tx_packets", "frames the engine handed to its ports", l, c.tx_packets);
        x.counter("engine_tx_dropped", "frames the NIC did not take", l, c.tx_dropped);
        x.counter("engine_wakeups", "application wakeups the engine issued", l, c.wakeups);
        x.counter("engine_wake_submits", "io_uring submissions that carried wakeups", l, c.wake_submits);
        x.counter("engine_doorbells", "command batches taken from applications", l, c.doorbells);
        x.counter("engine_commands", "DTI commands executed", l, c.commands);
        x.counter("engine_events", "events delivered to applications", l, c.events);
        x.counter("engine_digest_rx_bytes", "received bytes the engine ran through CRC32C digests", l,
                  c.digest_rx_bytes);
        x.counter("engine_digest_tx_bytes", "sent bytes the engine ran through CRC32C digests", l, c.digest_tx_bytes);
        x.counter("engine_digest_ranges", "digest ranges applications asked for", l, c.digest_ranges);
        x.counter("engine_digest_mismatches", "checked digests that did not match", l, c.digest_mismatches);
        x.counter("engine_steered_out", "TCP segments the engine received for another engine's flow and handed over", l,
                  c.steered_out);
        x.counter("engine_steered_in", "TCP segments other engines handed to this engine (flows it owns)", l,
                  c.steered_in);
        x.counter("engine_steer_drops", "segments dropped because the owning engine's ring was full", l, c.steer_drops);
        x.counter("engine_arp_shared_out", "ARP frames the engine shared with the other engines", l, c.arp_shared_out);
        x.counter("engine_arp_shared_in", "ARP frames other engines shared with this engine", l, c.arp_shared_in);
        x.counter("engine_owner_kicks", "napping engines this engine woke after steering frames to them", l,
                  c.owner_kicks);
        x.counter("engine_rx_wakes", "idle sleeps a received frame ended (the port's kernel socket polled)", l,
                  c.rx_wakes);
        x.counter("engine_posts", "posted receives applications made into their own memory", l, c.posts);
        x.counter("engine_posted_bytes", "received bytes the engine wrote straight into application memory", l,
                  c.posted_bytes);
        x.counter("engine_post_fallbacks", "posted receives refused (the engine cannot write into that process)", l,
                  c.post_fallbacks);
        x.counter("engine_post_faults", "posted receives ended by an address the process cannot be written at", l,
                  c.post_faults);
        x.counter("engine_rx_ring_grows", "receive rings grown in place for autotuning", l, c.rx_ring_grows);
        x.counter("engine_rx_grow_refusals", "receive ring grows refused at limits.memory_per_app", l,
                  c.rx_grow_refusals);
        x.counter("engine_tx_ring_sized", "send rings sized above tcp.sndbuf for SO_SNDBUF", l, c.tx_ring_sized);
        x.counter("engine_tx_size_refusals", "SO_SNDBUF send rings refused at limits.memory_per_app", l,
                  c.tx_size_refusals);
        x.counter("engine_tx_ring_grows", "send rings grown on live sockets (autotuning, SO_SNDBUF)", l,
                  c.tx_ring_grows);
        x.counter("engine_tx_grow_refusals", "send ring grows refused (frames in flight, a bad size)", l,
                  c.tx_grow_refusals);
        x.counter("engine_rejected_commands",
                  "application commands refused unanswered (a handle not held, a SEND past the ring's room)", l,
                  c.rejected_commands);
        x.counter("engine_contended_windows", "10 ms windows in which the engine thread waited for its CPU", l,
                  c.contended_windows);
        x.gauge("engine_busy_share", "share of the engine's cycles spent in busy loop iterations (0..1)", l,
                busy_share(c));
        x.gauge("engine_connections", "TCP sockets the engine's stacks hold now", l, engine_connections(s, e));
    }
}

void stacks_prometheus(const Snapshot &s, Exposition &x)
{
    const uint32_t n_ports = s.h.n_ports;
    for (size_t e = 0; e < s.engines.size(); e++) {
        for (uint32_t p = 0; p < n_ports; p++) {
            const mars::StackStats &st = s.stacks[e * n_ports + p].stack;
            const Labels l{{"engine", std::to_string(e)}, {"port", std::to_string(p)}};
#define DROP(f)                                                                                                    \
    {                                                                                                              \
        Labels r = l;                                                                                              \
        r.emplace_back("reason", std::string(#f).substr(5));                                                       \
        x.counter("stack_drops", "frames the TCP/IP stack dropped, by reason", r, st.f);                          \
    }
            PPE_STATS_DROP_FIELDS(DROP)
#undef DROP
#define COUNT(f, help) x.counter("stack_" #f, help, l, st.f);
            COUNTER_FIELDS(COUNT)
#undef COUNT
            x.gauge("stack_conns_open", "sockets the stack has in use now", l, st.conns_open);
            x.gauge("stack_ooo_frames_used", "frames held for out-of-order data now", l, st.ooo_frames_used);
            x.gauge("stack_strands", "receive strands per burst (1: run to completion)", l, st.strands);
            Labels ce = l;
            ce.emplace_back("device", copy_engine_of(s.h, e, p));
            x.gauge("stack_copy_engine_info", "the receive copy engine (cpu: the core copies; dmadev:NAME)", ce,
                    uint64_t(1));
        }
    }
}

void ports_prometheus(const Snapshot &s, Exposition &x)
{
    for (size_t p = 0; p < s.ports.size(); p++) {
        const PortInfo &pi = s.ports[p];
        const Labels l{{"port", std::to_string(p)}, {"name", c_str(pi.name)}};
        Labels info = l;
        info.emplace_back("device", c_str(pi.device));
        info.emplace_back("mac", mac_string(pi.mac));
        info.emplace_back("address", ip_string(pi.ip) + "/" + std::to_string(pi.prefix));
        std::string v6;
        for (const std::string &a : port_addr6(pi)) v6 += (v6.empty() ? "" : ",") + a;
        info.emplace_back("address6", v6);
        x.gauge("port_info", "a port the PPE owns (always 1; identity in the labels)", info, uint64_t(1));
        x.gauge("port_mtu_bytes", "the port's MTU", l, uint64_t(pi.mtu));
        x.gauge("port_link_up", "1 when the port's link is up", l, uint64_t(pi.link_up));
        x.gauge("port_link_speed_mbps", "the port's link speed", l, pi.link_speed_mbps);
        x.gauge("port_rx_queues", "receive queues in use", l, uint64_t(pi.rx_queues));
        x.gauge("port_tx_queues", "transmit queues in use", l, uint64_t(pi.tx_queues));
        x.gauge("port_offloads", "mars::Offloads bit mask the port provides", l, uint64_t(pi.offloads));
        x.counter("port_rx_packets", "packets the device received", l, pi.ipackets);
        x.counter("port_tx_packets", "packets the device sent", l, pi.opackets);
        x.counter("port_rx_bytes", "bytes the device received", l, pi.ibytes);
        x.counter("port_tx_bytes", "bytes the device sent", l, pi.obytes);
        x.counter("port_rx_missed", "packets the device dropped for lack of receive descriptors", l, pi.imissed);
        x.counter("port_rx_errors", "receive errors the device reported", l, pi.ierrors);
        x.counter("port_tx_errors", "transmit errors the device reported", l, pi.oerrors);
        x.counter("port_rx_nombuf", "receive failures for lack of mbufs", l, pi.rx_nombuf);
        x.counter("port_rx_lro_frames", "super-frames received (vnet: GSO frames of the peer's kernel)", l,
                  pi.rx_lro_frames);
        x.counter("port_rx_lro_segments", "MSS segments the received super-frames stood for", l, pi.rx_lro_segments);
        x.counter("port_tx_tso_frames", "TSO frames sent (the kernel segments them)", l, pi.tx_tso_frames);
        x.counter("port_tx_tso_segments", "segments the TSO frames sent stood for", l, pi.tx_tso_segments);
        x.counter("port_rx_csum_valid", "frames received with a verified checksum", l, pi.rx_csum_valid);
        x.counter("port_rx_csum_partial", "frames received with a partial checksum (made by the peer's kernel)", l,
                  pi.rx_csum_partial);
        x.counter("port_rx_csum_unknown", "frames received without a checksum verdict (the engine checks)", l,
                  pi.rx_csum_unknown);
        if (pi.kernel_iface[0]) {
            const KernelCounters k = port_kernel(s, uint32_t(p));
            Labels ki = l;
            ki.emplace_back("iface", c_str(pi.kernel_iface));
            x.gauge("port_kernel_info", "the port is shared with the kernel through this interface (always 1)", ki,
                    uint64_t(1));
            for (unsigned r = 0; r < mars::kUnclaimedReasons; r++) {
                Labels rl = l;
                rl.emplace_back("reason", kernel_reason_name(r));
                x.counter("port_kernel_to_frames", "frames handed to the kernel's interface, by reason", rl,
                          k.to_frames[r]);
                x.counter("port_kernel_to_bytes", "bytes handed to the kernel's interface, by reason", rl,
                          k.to_bytes[r]);
            }
            x.counter("port_kernel_to_drops", "frames the kernel's interface did not take", l, k.to_drops);
            x.counter("port_kernel_from_frames", "frames the kernel sent out through the port", l, k.from_frames);
            x.counter("port_kernel_from_bytes", "bytes the kernel sent out through the port", l, k.from_bytes);
            x.counter("port_kernel_from_drops", "frames from the kernel the port did not take", l, k.from_drops);
        }
    }
}

void apps_prometheus(const Snapshot &s, Exposition &x)
{
    for (const AppCounters &a : s.apps) {
        const Labels l{{"pid", std::to_string(a.pid)}, {"name", c_str(a.comm)}, {"engine", std::to_string(a.engine)}};
        x.gauge("app_attached_time_seconds", "when the application attached (Unix time)", l,
                double(a.attached_unix_ns) / 1e9);
        x.gauge("app_sockets", "sockets the application has open now", l, a.sockets);
        x.gauge("app_memory_bytes", "region memory in use by the application's sockets", l, a.memory_bytes);
        x.gauge("app_region_bytes", "size of the application's shared region", l, a.region_bytes);
        x.counter("app_commands", "DTI commands the application submitted", l, a.commands);
        x.counter("app_doorbells", "doorbells the application rang", l, a.doorbells);
        x.counter("app_wakeups", "wakeups the engine sent the application", l, a.wakeups);
        x.counter("app_events", "events delivered to the application", l, a.events);
        x.counter("app_rx_bytes", "bytes the application received", l, a.bytes_in);
        x.counter("app_tx_bytes", "bytes the application sent", l, a.bytes_out);
    }
}

void programs_prometheus(const Snapshot &s, Exposition &x)
{
    for (const eta_preload_stats &pr : s.programs) {
        const Labels l{{"pid", std::to_string(pr.pid)}, {"name", c_str(pr.comm)}};
        x.gauge("program_attached", "1 while the program under the shim is attached to the PPE", l,
                uint64_t(pr.attached));
        for (unsigned r = 0; r < ETA_PRELOAD_N_REASONS; r++) {
            if (!pr.fallbacks[r] && r != 0) continue;
            Labels rl = l;
            rl.emplace_back("reason", preload_reason_name(r));
            x.counter("program_sockets", "sockets the program made, by where they went (reason accelerated: the PPE)",
                      rl, pr.fallbacks[r]);
        }
        x.gauge("program_accelerated_open", "accelerated sockets the program has open now", l, pr.accel_open);
        Labels ppe = l, kernel = l;
        ppe.emplace_back("from", "ppe");
        kernel.emplace_back("from", "kernel");
        x.counter("program_accepted", "connections the program accepted, by which half of its listener", ppe,
                  pr.accepted);
        x.counter("program_accepted", "connections the program accepted, by which half of its listener", kernel,
                  pr.kernel_accepted);
        Labels spun = l, slept = l;
        spun.emplace_back("ended", "spinning");
        slept.emplace_back("ended", "sleeping");
        x.counter("program_waits", "blocking waits of the program, by how they ended", spun, pr.spins);
        x.counter("program_waits", "blocking waits of the program, by how they ended", slept, pr.sleeps);
        x.counter("program_bypass_refused", "calls refused on an accelerated socket (splice, sendfile, ...)", l,
                  pr.bypass_refused);
        x.counter("program_watchdog_wakes", "sleeps the shim's 1 s watchdog ended (an idle waiter: one a second)", l,
                  pr.watchdog_wakes);
        x.counter("program_lost_wakeups",
                  "sockets found ready only when the watchdog ended a sleep: wakeups lost (0 unless something is wrong)",
                  l, pr.lost_wakeups);
    }
}

} // namespace

const char *preload_reason_name(unsigned reason)
{
    switch (reason) {
#define NAME(i, text)                                                                                              \
    case i: return text;
        ETA_PRELOAD_REASONS(NAME)
#undef NAME
    default: return "other";
    }
}

bool read_programs(const std::string &socket_path, Snapshot *s)
{
    s->programs.clear();
    int n = eta_preload_stats_each(
        socket_path.c_str(),
        [](const eta_preload_stats *st, void *arg) {
            static_cast<std::vector<eta_preload_stats> *>(arg)->push_back(*st);
            return 0;
        },
        &s->programs);
    return n >= 0;
}

std::string to_prometheus(const Snapshot &s)
{
    Exposition x("eta_");
    const Header &h = s.h;
    x.gauge("ppe_info", "the running eta-ppe (always 1; identity in the labels)",
            Labels{{"pid", std::to_string(h.pid)},
                   {"state", ppe_state_name(h.state.load())},
                   {"engine_cpus", c_str(h.engine_cpus)},
                   {"idle_policy", c_str(h.idle_policy)},
                   {"memory", c_str(h.memory_mode)}},
            uint64_t(1));
    x.gauge("ppe_start_time_seconds", "when eta-ppe started (Unix time)", {}, double(h.started_unix_ns) / 1e9);
    x.gauge("ppe_engines", "engines the PPE runs", {}, uint64_t(h.n_engines));
    x.gauge("ppe_tsc_hz", "the TSC frequency engine cycle counters use", {}, h.tsc_hz);
    engines_prometheus(s, x);
    stacks_prometheus(s, x);
    ports_prometheus(s, x);
    apps_prometheus(s, x);
    programs_prometheus(s, x);
    x.gauge("connections", "TCP connections the engines hold now", {}, uint64_t(s.conns_total));
    x.gauge("udp_sockets", "UDP sockets the engines hold now", {}, uint64_t(s.udp_total));
    std::map<std::string, uint64_t> by_state;
    for (const char *name : {"LISTEN", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT1", "FIN_WAIT2", "CLOSE_WAIT",
                             "CLOSING", "LAST_ACK", "TIME_WAIT"})
        by_state[name] = 0;
    for (const ConnEntry &c : s.conns)
        if (c.proto == kProtoTcp) by_state[tcp_state_name(c.state)]++;
    for (const auto &[state, n] : by_state)
        x.gauge("connections_by_state", "connections in the published tables, by TCP state", {{"state", state}}, n);
    return x.text();
}

nlohmann::ordered_json to_json(const Snapshot &s, bool with_conns)
{
    using json = nlohmann::ordered_json;
    const Header &h = s.h;
    json out{{"pid", h.pid},
             {"state", ppe_state_name(h.state.load())},
             {"engine_cpus", c_str(h.engine_cpus)},
             {"idle_policy", c_str(h.idle_policy)},
             {"memory", c_str(h.memory_mode)},
             {"copy_engine", c_str(h.copy_engine)},
             {"copy_threshold", h.copy_threshold},
             {"socket", c_str(h.socket_path)},
             {"config", c_str(h.config_path)},
             {"tsc_hz", h.tsc_hz},
             {"started_unix_ns", h.started_unix_ns}};
    json engines = json::array();
    for (size_t e = 0; e < s.engines.size(); e++) {
        const EngineCounters &c = s.engines[e];
        json je{{"engine", e},           {"cpu", c.pu},
                {"apps", c.apps},        {"loops", c.loops},
                {"busy_polls", c.busy_polls}, {"idle_polls", c.idle_polls},
                {"sleeps", c.sleeps},    {"busy_cycles", c.busy_cycles},
                {"total_cycles", c.total_cycles}, {"rx_packets", c.rx_packets},
                {"tx_packets", c.tx_packets}, {"tx_dropped", c.tx_dropped},
                {"wakeups", c.wakeups},  {"wake_submits", c.wake_submits},
                {"doorbells", c.doorbells}, {"commands", c.commands},
                {"events", c.events},
                {"digest_rx_bytes", c.digest_rx_bytes}, {"digest_tx_bytes", c.digest_tx_bytes},
                {"digest_ranges", c.digest_ranges}, {"digest_mismatches", c.digest_mismatches},
                {"steered_out", c.steered_out}, {"steered_in", c.steered_in},
                {"steer_drops", c.steer_drops}, {"arp_shared_out", c.arp_shared_out},
                {"arp_shared_in", c.arp_shared_in}, {"owner_kicks", c.owner_kicks}, {"rx_wakes", c.rx_wakes},
                {"posts", c.posts}, {"posted_bytes", c.posted_bytes},
                {"post_fallbacks", c.post_fallbacks}, {"post_faults", c.post_faults},
                {"rx_ring_grows", c.rx_ring_grows}, {"rx_grow_refusals", c.rx_grow_refusals},
                {"tx_ring_sized", c.tx_ring_sized}, {"tx_size_refusals", c.tx_size_refusals},
                {"tx_ring_grows", c.tx_ring_grows}, {"tx_grow_refusals", c.tx_grow_refusals},
                {"contended_windows", c.contended_windows},
                {"rejected_commands", c.rejected_commands},
                {"published_ns", c.published_ns},
                {"busy_share", busy_share(c)},
                {"connections", engine_connections(s, e)}};
        json stacks = json::array();
        for (uint32_t p = 0; p < h.n_ports; p++) {
            const mars::StackStats &st = s.stacks[e * h.n_ports + p].stack;
            json js{{"port", p}};
#define J(f) js[#f] = uint64_t(st.f);
#define JC(f, help) J(f)
            PPE_STATS_DROP_FIELDS(J)
            COUNTER_FIELDS(JC)
            J(conns_open)
            J(ooo_frames_used)
            J(strands)
            js["copy_engine"] = copy_engine_of(h, e, p);
#undef JC
#undef J
            stacks.push_back(std::move(js));
        }
        je["stacks"] = std::move(stacks);
        engines.push_back(std::move(je));
    }
    out["engines"] = std::move(engines);
    json ports = json::array();
    for (size_t pn = 0; pn < s.ports.size(); pn++) {
        const PortInfo &pi = s.ports[pn];
        ports.push_back({{"name", c_str(pi.name)},
                         {"device", c_str(pi.device)},
                         {"mac", mac_string(pi.mac)},
                         {"address", ip_string(pi.ip) + "/" + std::to_string(pi.prefix)},
                         {"address6", port_addr6(pi)},
                         {"mtu", pi.mtu},
                         {"link_up", pi.link_up},
                         {"link_speed_mbps", pi.link_speed_mbps},
                         {"queues", pi.rx_queues},
                         {"tx_queues", pi.tx_queues},
                         {"offloads", pi.offloads},
                         {"ipackets", pi.ipackets},
                         {"opackets", pi.opackets},
                         {"ibytes", pi.ibytes},
                         {"obytes", pi.obytes},
                         {"imissed", pi.imissed},
                         {"ierrors", pi.ierrors},
                         {"oerrors", pi.oerrors},
                         {"rx_nombuf", pi.rx_nombuf},
                         {"rx_lro_frames", pi.rx_lro_frames},
                         {"rx_lro_segments", pi.rx_lro_segments},
                         {"tx_tso_frames", pi.tx_tso_frames},
                         {"tx_tso_segments", pi.tx_tso_segments},
                         {"rx_csum_valid", pi.rx_csum_valid},
                         {"rx_csum_partial", pi.rx_csum_partial},
                         {"rx_csum_unknown", pi.rx_csum_unknown}});
        // kernel: null when the port is eta's alone; else what went to and
        // came from the kernel's interface ([[port]] kernel = "shared").
        json kj = nullptr;
        if (pi.kernel_iface[0]) {
            const KernelCounters k = port_kernel(s, uint32_t(pn));
            json to = json::object();
            for (unsigned r = 0; r < mars::kUnclaimedReasons; r++)
                to[kernel_reason_name(r)] = {{"frames", k.to_frames[r]}, {"bytes", k.to_bytes[r]}};
            kj = {{"iface", c_str(pi.kernel_iface)}, {"to", std::move(to)}, {"to_drops", k.to_drops},
                  {"from_frames", k.from_frames}, {"from_bytes", k.from_bytes}, {"from_drops", k.from_drops}};
        }
        ports.back()["kernel"] = std::move(kj);
    }
    out["ports"] = std::move(ports);
    json apps = json::array();
    for (const AppCounters &a : s.apps) {
        apps.push_back({{"pid", a.pid},
                        {"uid", a.uid},
                        {"name", c_str(a.comm)},
                        {"engine", a.engine},
                        {"attached_unix_ns", a.attached_unix_ns},
                        {"sockets", a.sockets},
                        {"memory_bytes", a.memory_bytes},
                        {"region_bytes", a.region_bytes},
                        {"commands", a.commands},
                        {"doorbells", a.doorbells},
                        {"wakeups", a.wakeups},
                        {"events", a.events},
                        {"bytes_in", a.bytes_in},
                        {"bytes_out", a.bytes_out}});
    }
    out["apps"] = std::move(apps);
    json programs = json::array();
    for (const eta_preload_stats &pr : s.programs) {
        json by_reason = json::object();
        for (unsigned r = 0; r < ETA_PRELOAD_N_REASONS; r++)
            if (pr.fallbacks[r] || r == 0) by_reason[preload_reason_name(r)] = pr.fallbacks[r];
        programs.push_back({{"pid", pr.pid},
                            {"name", c_str(pr.comm)},
                            {"attached", pr.attached != 0},
                            {"reattaches", pr.reattaches},
                            {"sockets", std::move(by_reason)},
                            {"accelerated_open", pr.accel_open},
                            {"accepted", pr.accepted},
                            {"kernel_accepted", pr.kernel_accepted},
                            {"spins", pr.spins},
                            {"sleeps", pr.sleeps},
                            {"bypass_refused", pr.bypass_refused},
                            {"watchdog_wakes", pr.watchdog_wakes},
                            {"lost_wakeups", pr.lost_wakeups}});
    }
    out["programs"] = std::move(programs);
    out["connections_total"] = s.conns_total;
    out["udp_sockets_total"] = s.udp_total;
    if (with_conns) {
        json conns = json::array(), udp = json::array();
        for (const ConnEntry &c : s.conns) {
            if (c.proto == kProtoUdp) {
                udp.push_back({{"sock", c.sock},
                               {"app_pid", c.app_pid},
                               {"proto", "udp"},
                               {"family", c.ipv6 ? 6 : 4},
                               {"local", conn_end(c, true)},
                               {"remote", c.remote_port ? conn_end(c, false) : ""},
                               {"rx_queued_bytes", c.rx_readable},
                               {"rx_datagrams", c.datagrams},
                               {"drops", c.drops},
                               {"memory_bytes", c.memory_bytes}});
                continue;
            }
            conns.push_back({{"sock", c.sock},
                             {"app_pid", c.app_pid},
                             {"proto", "tcp"},
                             {"family", c.ipv6 ? 6 : 4},
                             {"state", tcp_state_name(c.state)},
                             {"local", conn_end(c, true)},
                             {"remote", conn_end(c, false)},
                             {"rx_readable", c.rx_readable},
                             {"tx_unacked", c.tx_unacked},
                             {"tx_space", c.tx_space},
                             {"cwnd", c.cwnd},
                             {"srtt_us", c.srtt_us},
                             {"ooo_frames", c.ooo_frames},
                             {"memory_bytes", c.memory_bytes},
                             {"retransmits", c.retransmits},
                             {"bytes_in", c.bytes_in},
                             {"bytes_out", c.bytes_out}});
        }
        out["connections"] = std::move(conns);
        out["udp_sockets"] = std::move(udp);
    }
    return out;
}

} // namespace ppe::stats
