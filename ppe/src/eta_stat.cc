// eta-stat: live state and counters of a running eta-ppe, read from its
// read-only stats region (<control socket>.stats). Never disturbs the
// engines: it maps the region read-only and copies seqlocked snapshots.
//
//   eta-stat [--socket PATH] [--json] [--conns|--no-conns] [--watch [SECONDS]]
#include "stats.h"

#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace ppe::stats;

std::string ip_str(uint32_t ip)
{
    char b[INET_ADDRSTRLEN];
    in_addr a;
    a.s_addr = htonl(ip);
    inet_ntop(AF_INET, &a, b, sizeof b);
    return b;
}

const char *state_name(uint8_t s)
{
    static const char *const names[] = {"CLOSED", "LISTEN", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT1",
                                        "FIN_WAIT2", "CLOSE_WAIT", "CLOSING", "LAST_ACK", "TIME_WAIT"};
    return s < 11 ? names[s] : "?";
}

const char *ppe_state(uint32_t s)
{
    static const char *const names[] = {"starting", "running", "stopping", "stopped"};
    return s < 4 ? names[s] : "?";
}

// The drop counters of mars::StackStats, by name, in declaration order.
#define DROP_FIELDS(X)                                                                                             \
    X(drop_eth) X(drop_not_ours) X(drop_arp) X(drop_ip_header) X(drop_ip_csum) X(drop_ip_ttl) X(drop_ip_fragment) \
    X(drop_ip_proto) X(drop_icmp) X(drop_tcp_header) X(drop_tcp_csum) X(drop_tcp_no_socket) X(drop_tcp_bad_state) \
    X(drop_tcp_paws) X(drop_tcp_out_of_window) X(drop_tcp_ooo_full) X(drop_tx_no_buffer) X(drop_arp_queue_full)
#define OTHER_FIELDS(X)                                                                                             \
    X(rx_frames) X(rx_bytes) X(tx_frames) X(tx_bytes) X(arp_requests_in) X(arp_replies_in) X(arp_requests_out)    \
    X(arp_replies_out) X(icmp_echo_in) X(icmp_unreach_in) X(icmp_frag_needed_in) X(icmp_out) X(fastpath_hits)      \
    X(fastpath_misses) X(lookup_cache_hits) X(lookup_cache_misses) X(tcp_active_opens) X(tcp_passive_opens)        \
    X(tcp_established) X(tcp_resets_in) X(tcp_resets_out) X(tcp_retransmits) X(tcp_fast_retransmits)              \
    X(tcp_timeouts) X(tcp_syncookies_sent) X(tcp_syncookies_ok) X(tcp_challenge_acks) X(tcp_ooo_segments)          \
    X(conns_open) X(ooo_frames_used) X(strands) X(strand_yields) X(prefetches) X(copies_offloaded)                 \
    X(copy_bytes_offloaded) X(copy_fallback_ring_full) X(copy_fallback_device_gone) X(copy_fallback_error)           \
    X(copy_fallback_stalled)

struct Snapshot {
    Header h;
    std::vector<EngineCounters> engines;
    std::vector<StackCounters> stacks; // [engine * n_ports + port]
    std::vector<PortInfo> ports;
    std::vector<AppCounters> apps;
    std::vector<ConnEntry> conns;
    uint32_t conns_total = 0;
};

class Region {
  public:
    ~Region()
    {
        if (base_) munmap(base_, size_);
    }
    bool open(const std::string &path, std::string *error)
    {
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            *error = "no eta-ppe stats at " + path + " (" + std::strerror(errno) +
                     "); is eta-ppe running with control socket " + path.substr(0, path.size() - 6) + "?";
            return false;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || size_t(st.st_size) < sizeof(Header)) {
            ::close(fd);
            *error = path + " is too small to be an eta-ppe stats region";
            return false;
        }
        size_ = size_t(st.st_size);
        void *p = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
        ::close(fd);
        if (p == MAP_FAILED) {
            *error = "cannot map " + path + ": " + std::strerror(errno);
            return false;
        }
        base_ = static_cast<uint8_t *>(p);
        const Header *h = reinterpret_cast<const Header *>(base_);
        if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != kMagic || h->version != kVersion) {
            *error = path + " is not an eta-ppe stats region of version " + std::to_string(kVersion);
            return false;
        }
        if (h->size > size_ || h->n_engines > kMaxEngines || h->n_ports > kMaxPorts) {
            *error = path + " has an inconsistent header";
            return false;
        }
        return true;
    }

    bool read(Snapshot *s) const
    {
        View v{base_};
        std::memcpy(static_cast<void *>(&s->h), base_, sizeof(Header));
        const Header &h = s->h;
        s->engines.resize(h.n_engines);
        s->stacks.resize(size_t(h.n_engines) * h.n_ports);
        s->ports.resize(h.n_ports);
        s->apps.clear();
        s->conns.clear();
        s->conns_total = 0;
        bool ok = true;
        for (uint32_t e = 0; e < h.n_engines; e++) {
            ok &= v.engine(e)->read(&s->engines[e]);
            for (uint32_t p = 0; p < h.n_ports; p++) ok &= v.stack(e, p)->read(&s->stacks[e * h.n_ports + p]);
        }
        for (uint32_t p = 0; p < h.n_ports; p++) ok &= v.port(p)->read(&s->ports[p]);
        for (uint32_t a = 0; a < h.max_apps; a++) {
            AppCounters ac;
            if (v.app(a)->read(&ac) && ac.in_use) s->apps.push_back(ac);
        }
        for (uint32_t e = 0; e < h.n_engines; e++) {
            for (int attempt = 0; attempt < 1000; attempt++) {
                const uint32_t s0 = v.conn_seq(e)->load(std::memory_order_acquire);
                if (s0 & 1) continue;
                ConnTableHeader th;
                load_words(&th, v.conn_header(e), sizeof th);
                const uint32_t n = std::min(th.count, h.conn_capacity);
                std::vector<ConnEntry> tmp(n);
                load_words(tmp.data(), v.conns(e), n * sizeof(ConnEntry));
                if (v.conn_seq(e)->load(std::memory_order_relaxed) != s0) continue;
                s->conns.insert(s->conns.end(), tmp.begin(), tmp.end());
                s->conns_total += th.total;
                break;
            }
        }
        return ok;
    }

  private:
    uint8_t *base_ = nullptr;
    size_t size_ = 0;
};

std::string json_str(const char *s)
{
    std::string out = "\"";
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') out += '\\';
        if (uint8_t(*s) < 0x20) continue;
        out += *s;
    }
    return out + "\"";
}

void print_json(const Snapshot &s, bool conns)
{
    const Header &h = s.h;
    std::printf("{\"pid\":%d,\"state\":\"%s\",\"engine_cpus\":%s,\"idle_policy\":%s,\"memory\":%s,\"socket\":%s,"
                "\"config\":%s,\"tsc_hz\":%" PRIu64 ",\"engines\":[",
                h.pid, ppe_state(h.state.load()), json_str(h.engine_cpus).c_str(), json_str(h.idle_policy).c_str(),
                json_str(h.memory_mode).c_str(), json_str(h.socket_path).c_str(), json_str(h.config_path).c_str(),
                h.tsc_hz);
    for (size_t e = 0; e < s.engines.size(); e++) {
        const EngineCounters &c = s.engines[e];
        std::printf("%s{\"engine\":%zu,\"cpu\":%d,\"apps\":%u,\"loops\":%" PRIu64 ",\"busy_polls\":%" PRIu64
                    ",\"idle_polls\":%" PRIu64 ",\"sleeps\":%" PRIu64 ",\"busy_cycles\":%" PRIu64
                    ",\"total_cycles\":%" PRIu64 ",\"rx_packets\":%" PRIu64 ",\"tx_packets\":%" PRIu64
                    ",\"tx_dropped\":%" PRIu64 ",\"wakeups\":%" PRIu64 ",\"wake_submits\":%" PRIu64
                    ",\"doorbells\":%" PRIu64 ",\"commands\":%" PRIu64 ",\"events\":%" PRIu64 ",\"stacks\":[",
                    e ? "," : "", e, c.pu, c.apps, c.loops, c.busy_polls, c.idle_polls, c.sleeps, c.busy_cycles,
                    c.total_cycles, c.rx_packets, c.tx_packets, c.tx_dropped, c.wakeups, c.wake_submits, c.doorbells,
                    c.commands, c.events);
        for (uint32_t p = 0; p < h.n_ports; p++) {
            const mars::StackStats &st = s.stacks[e * h.n_ports + p].stack;
            std::printf("%s{\"port\":%u", p ? "," : "", p);
#define J(f) std::printf(",\"" #f "\":%" PRIu64, uint64_t(st.f));
            DROP_FIELDS(J)
            OTHER_FIELDS(J)
#undef J
            std::printf("}");
        }
        std::printf("]}");
    }
    std::printf("],\"ports\":[");
    for (size_t p = 0; p < s.ports.size(); p++) {
        const PortInfo &pi = s.ports[p];
        char mac[18];
        std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", pi.mac[0], pi.mac[1], pi.mac[2], pi.mac[3],
                      pi.mac[4], pi.mac[5]);
        std::printf("%s{\"name\":%s,\"device\":%s,\"mac\":\"%s\",\"address\":\"%s/%u\",\"mtu\":%u,\"link_up\":%u,"
                    "\"queues\":%u,\"offloads\":%u,\"ipackets\":%" PRIu64 ",\"opackets\":%" PRIu64
                    ",\"ibytes\":%" PRIu64 ",\"obytes\":%" PRIu64 ",\"imissed\":%" PRIu64 ",\"ierrors\":%" PRIu64
                    ",\"oerrors\":%" PRIu64 ",\"rx_nombuf\":%" PRIu64 "}",
                    p ? "," : "", json_str(pi.name).c_str(), json_str(pi.device).c_str(), mac, ip_str(pi.ip).c_str(),
                    pi.prefix, pi.mtu, pi.link_up, pi.rx_queues, pi.offloads, pi.ipackets, pi.opackets, pi.ibytes,
                    pi.obytes, pi.imissed, pi.ierrors, pi.oerrors, pi.rx_nombuf);
    }
    std::printf("],\"apps\":[");
    for (size_t a = 0; a < s.apps.size(); a++) {
        const AppCounters &ac = s.apps[a];
        std::printf("%s{\"pid\":%d,\"uid\":%u,\"name\":%s,\"engine\":%u,\"sockets\":%" PRIu64
                    ",\"memory_bytes\":%" PRIu64 ",\"region_bytes\":%" PRIu64 ",\"commands\":%" PRIu64
                    ",\"doorbells\":%" PRIu64 ",\"wakeups\":%" PRIu64 ",\"events\":%" PRIu64 ",\"bytes_in\":%" PRIu64
                    ",\"bytes_out\":%" PRIu64 "}",
                    a ? "," : "", ac.pid, ac.uid, json_str(ac.comm).c_str(), ac.engine, ac.sockets, ac.memory_bytes,
                    ac.region_bytes, ac.commands, ac.doorbells, ac.wakeups, ac.events, ac.bytes_in, ac.bytes_out);
    }
    std::printf("],\"connections_total\":%u", s.conns_total);
    if (conns) {
        std::printf(",\"connections\":[");
        for (size_t i = 0; i < s.conns.size(); i++) {
            const ConnEntry &c = s.conns[i];
            std::printf("%s{\"sock\":%u,\"app_pid\":%d,\"state\":\"%s\",\"local\":\"%s:%u\",\"remote\":\"%s:%u\","
                        "\"rx_readable\":%u,\"tx_unacked\":%u,\"tx_space\":%u,\"cwnd\":%u,\"srtt_us\":%u,"
                        "\"ooo_frames\":%u,\"memory_bytes\":%u,\"retransmits\":%" PRIu64 ",\"bytes_in\":%" PRIu64
                        ",\"bytes_out\":%" PRIu64 "}",
                        i ? "," : "", c.sock, c.app_pid, state_name(c.state), ip_str(c.local_ip).c_str(), c.local_port,
                        ip_str(c.remote_ip).c_str(), c.remote_port, c.rx_readable, c.tx_unacked, c.tx_space, c.cwnd,
                        c.srtt_us, c.ooo_frames, c.memory_bytes, c.retransmits, c.bytes_in, c.bytes_out);
        }
        std::printf("]");
    }
    std::printf("}\n");
}

void print_text(const Snapshot &s, bool conns)
{
    const Header &h = s.h;
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const double up = double(uint64_t(now.tv_sec) * 1'000'000'000ull + uint64_t(now.tv_nsec) - h.started_unix_ns) / 1e9;
    std::printf("eta-ppe pid %d  %s  up %.0f s  engines on CPU %s  idle %s  memory %s\n", h.pid,
                ppe_state(h.state.load()), up, h.engine_cpus, h.idle_policy, h.memory_mode);
    std::printf("  config %s  socket %s\n\n", h.config_path, h.socket_path);
    std::printf("engine cpu  apps        loops   busy%%   sleeps  cyc/busy-loop  cyc/pkt      rx pkts      tx pkts  "
                "wakeups  cmds/doorbell\n");
    for (size_t e = 0; e < s.engines.size(); e++) {
        const EngineCounters &c = s.engines[e];
        const uint64_t pkts = c.rx_packets + c.tx_packets;
        std::printf("%6zu %3d %5u %12" PRIu64 " %6.2f %8" PRIu64 " %14.0f %8.0f %12" PRIu64 " %12" PRIu64 " %8" PRIu64
                    " %14.2f\n",
                    e, c.pu, c.apps, c.loops, c.total_cycles ? 100.0 * double(c.busy_cycles) / double(c.total_cycles) : 0.0,
                    c.sleeps, c.busy_polls ? double(c.busy_cycles) / double(c.busy_polls) : 0.0,
                    pkts ? double(c.busy_cycles) / double(pkts) : 0.0, c.rx_packets, c.tx_packets, c.wakeups,
                    c.doorbells ? double(c.commands) / double(c.doorbells) : 0.0);
    }
    std::printf("\nport  name       device                               address             mtu  link     "
                "rx pkts      tx pkts   missed  errors\n");
    for (size_t p = 0; p < s.ports.size(); p++) {
        const PortInfo &pi = s.ports[p];
        std::printf("%4zu  %-10s %-36s %-18s %5u  %-4s %12" PRIu64 " %12" PRIu64 " %8" PRIu64 " %7" PRIu64 "\n", p,
                    pi.name, pi.device, (ip_str(pi.ip) + "/" + std::to_string(pi.prefix)).c_str(), pi.mtu,
                    pi.link_up ? "up" : "down", pi.ipackets, pi.opackets, pi.imissed, pi.ierrors + pi.oerrors);
    }
    for (size_t e = 0; e < s.engines.size(); e++) {
        for (uint32_t p = 0; p < h.n_ports; p++) {
            const mars::StackStats &st = s.stacks[e * h.n_ports + p].stack;
            std::printf("\nstack e%zu/p%u: conns %" PRIu64 "  rx %" PRIu64 " frames  tx %" PRIu64
                        " frames  fast path %" PRIu64 " hits / %" PRIu64 " misses  retransmits %" PRIu64
                        "  ooo buffers %" PRIu64 "  resets in/out %" PRIu64 "/%" PRIu64 "\n",
                        e, p, st.conns_open, st.rx_frames, st.tx_frames, st.fastpath_hits, st.fastpath_misses,
                        st.tcp_retransmits, st.ooo_frames_used, st.tcp_resets_in, st.tcp_resets_out);
            std::string drops;
#define D(f) if (st.f) drops += std::string("  ") + (#f + 5) + " " + std::to_string(st.f);
            DROP_FIELDS(D)
#undef D
            std::printf("  drops:%s\n", drops.empty() ? " none" : drops.c_str());
            std::printf("  receive pipeline: strands %" PRIu64 "%s  yields %" PRIu64 "  prefetches %" PRIu64
                        "\n  copy engine: none, the core copies (eta-ppe has no [copy] engine yet); offloaded %" PRIu64
                        " copies, %" PRIu64 " bytes; fallbacks ring_full %" PRIu64 " device_gone %" PRIu64
                        " error %" PRIu64 " stalled %" PRIu64 "\n",
                        st.strands, st.strands <= 1 ? " (run to completion)" : "", st.strand_yields, st.prefetches,
                        st.copies_offloaded, st.copy_bytes_offloaded, st.copy_fallback_ring_full,
                        st.copy_fallback_device_gone, st.copy_fallback_error, st.copy_fallback_stalled);
        }
    }
    std::printf("\napps: %zu\n", s.apps.size());
    if (!s.apps.empty())
        std::printf("    pid  name             engine  sockets     memory     commands    doorbells   wakeups\n");
    for (const AppCounters &a : s.apps)
        std::printf("%7d  %-16s %6u %8" PRIu64 " %10" PRIu64 " %12" PRIu64 " %12" PRIu64 " %9" PRIu64 "\n", a.pid,
                    a.comm, a.engine, a.sockets, a.memory_bytes, a.commands, a.doorbells, a.wakeups);
    std::printf("\nconnections: %u", s.conns_total);
    if (s.conns_total > s.conns.size()) std::printf(" (%zu shown)", s.conns.size());
    std::printf("\n");
    if (!conns || s.conns.empty()) return;
    std::printf("  sock     pid  state        local                  remote                 rx-queue  tx-unacked  "
                "cwnd     srtt-us  retrans  memory\n");
    for (const ConnEntry &c : s.conns)
        std::printf("%6u %7d  %-12s %-22s %-22s %8u %11u %8u %8u %8" PRIu64 " %7u\n", c.sock, c.app_pid,
                    state_name(c.state), (ip_str(c.local_ip) + ":" + std::to_string(c.local_port)).c_str(),
                    (ip_str(c.remote_ip) + ":" + std::to_string(c.remote_port)).c_str(), c.rx_readable, c.tx_unacked,
                    c.cwnd, c.srtt_us, c.retransmits, c.memory_bytes);
}

volatile sig_atomic_t g_stop = 0;

} // namespace

int main(int argc, char **argv)
{
    CLI::App app{"eta-stat: live state and counters of a running eta-ppe"};
    const char *env = std::getenv("ETA_SOCKET");
    std::string socket = env && *env ? env : "/run/eta/ppe.sock";
    bool json = false, no_conns = false;
    double watch = 0;
    app.add_option("-s,--socket", socket, "the PPE's control socket (default $ETA_SOCKET or /run/eta/ppe.sock)");
    app.add_flag("-j,--json", json, "one JSON object per snapshot, for scripts");
    app.add_flag("--no-conns", no_conns, "leave out the connection table");
    app.add_option("-w,--watch", watch, "repeat every SECONDS (default 1) until interrupted")
        ->expected(0, 1)
        ->default_str("1")
        ->check(CLI::PositiveNumber);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e);
    }
    if (app.count("--watch") && watch <= 0) watch = 1;

    Region region;
    std::string err;
    if (!region.open(socket + ".stats", &err)) {
        std::fprintf(stderr, "eta-stat: %s\n", err.c_str());
        return 1;
    }
    signal(SIGINT, [](int) { g_stop = 1; });
    signal(SIGTERM, [](int) { g_stop = 1; });
    Snapshot snap;
    do {
        if (!region.read(&snap)) {
            std::fprintf(stderr, "eta-stat: the PPE kept its counters busy; try again\n");
            return 1;
        }
        if (kill(snap.h.pid, 0) != 0 && errno == ESRCH) {
            std::fprintf(stderr, "eta-stat: eta-ppe (pid %d) is not running; %s.stats is stale\n", snap.h.pid,
                         socket.c_str());
            return 1;
        }
        if (watch > 0 && !json) std::printf("\033[H\033[2J");
        if (json) print_json(snap, !no_conns);
        else print_text(snap, !no_conns);
        std::fflush(stdout);
        if (watch > 0) {
            timespec ts{time_t(watch), long((watch - double(time_t(watch))) * 1e9)};
            nanosleep(&ts, nullptr);
        }
    } while (watch > 0 && !g_stop);
    return 0;
}
