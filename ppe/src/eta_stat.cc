// eta-stat: live state and counters of a running eta-ppe, read from its
// read-only stats region (<control socket>.stats). Never disturbs the
// engines: it maps the region read-only and copies seqlocked snapshots.
//
//   eta-stat [--socket PATH] [--json|--prometheus] [--no-conns] [--latency [--slow]] [--watch [SECONDS]] [--output FILE]
#include "stat_format.h"
#include "stat_latency.h"
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
#include <cstdarg>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace ppe::stats;



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
        s->udp_total = 0;
        bool ok = true;
        // Each block waits out a writer caught mid-copy (read_patiently: the
        // engine may be descheduled with its seqlock odd on a busy machine).
        for (uint32_t e = 0; e < h.n_engines; e++) {
            ok &= read_patiently([&] { return v.engine(e)->read(&s->engines[e]); });
            for (uint32_t p = 0; p < h.n_ports; p++)
                ok &= read_patiently([&] { return v.stack(e, p)->read(&s->stacks[e * h.n_ports + p]); });
        }
        for (uint32_t p = 0; p < h.n_ports; p++) ok &= read_patiently([&] { return v.port(p)->read(&s->ports[p]); });
        for (uint32_t a = 0; a < h.max_apps; a++) {
            AppCounters ac{};
            ok &= read_patiently([&] { return v.app(a)->read(&ac); });
            if (ac.in_use) s->apps.push_back(ac);
        }
        for (uint32_t e = 0; e < h.n_engines; e++) {
            ok &= read_patiently([&] {
                const uint32_t s0 = v.conn_seq(e)->load(std::memory_order_acquire);
                if (s0 & 1) return false;
                ConnTableHeader th;
                load_words(&th, v.conn_header(e), sizeof th);
                const uint32_t n = std::min(th.count, h.conn_capacity);
                std::vector<ConnEntry> tmp(n);
                load_words(tmp.data(), v.conns(e), n * sizeof(ConnEntry));
                if (v.conn_seq(e)->load(std::memory_order_relaxed) != s0) return false;
                s->conns.insert(s->conns.end(), tmp.begin(), tmp.end());
                s->conns_total += th.total;
                s->udp_total += th.udp_total;
                return true;
            });
        }
        return ok;
    }
    // The latency breakdown (stat_latency.h): copied while the engines record.
    void read_latency(LatencySnapshot *out) const
    {
        View v{base_};
        ppe::stats::read_latency(v, v.header()->n_engines, out);
    }

  private:
    uint8_t *base_ = nullptr;
    size_t size_ = 0;
};

// printf into a string (the text view is built whole, then written once).
__attribute__((format(printf, 2, 3))) void appendf(std::string *out, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const int n = std::vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    if (n > 0) {
        const size_t at = out->size();
        out->resize(at + size_t(n) + 1);
        std::vsnprintf(out->data() + at, size_t(n) + 1, fmt, ap2);
        out->resize(at + size_t(n));
    }
    va_end(ap2);
}

// "cpu, the core copies" or "dmadev:NAME, payloads of N bytes or more".
std::string copy_engine_label(const Header &h, size_t e, uint32_t p)
{
    const std::string name = copy_engine_of(h, e, p);
    if (name == "cpu") return "cpu, the core copies";
    return name + ", payloads of " + std::to_string(h.copy_threshold) + " bytes or more";
}

std::string text_view(const Snapshot &s, bool conns)
{
    std::string out;
    const Header &h = s.h;
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const double up = double(uint64_t(now.tv_sec) * 1'000'000'000ull + uint64_t(now.tv_nsec) - h.started_unix_ns) / 1e9;
    appendf(&out, "eta-ppe pid %d  %s  up %.0f s  engines on CPU %s  idle %s  memory %s\n", h.pid,
                ppe_state_name(h.state.load()), up, h.engine_cpus, h.idle_policy, h.memory_mode);
    appendf(&out, "  config %s  socket %s\n\n", h.config_path, h.socket_path);
    appendf(&out, "engine cpu  apps  conns        loops   busy%%   sleeps  cyc/busy-loop  cyc/pkt      rx pkts      tx pkts  "
                "wakeups  cmds/doorbell   steered in/out    drops\n");
    for (size_t e = 0; e < s.engines.size(); e++) {
        const EngineCounters &c = s.engines[e];
        const uint64_t pkts = c.rx_packets + c.tx_packets;
        appendf(&out, "%6zu %3d %5u %6" PRIu64 " %12" PRIu64 " %6.2f %8" PRIu64 " %14.0f %8.0f %12" PRIu64 " %12" PRIu64
                    " %8" PRIu64 " %14.2f %8" PRIu64 "/%-8" PRIu64 " %8" PRIu64 "\n",
                    e, c.pu, c.apps, engine_connections(s, e), c.loops, 100.0 * busy_share(c), c.sleeps,
                    c.busy_polls ? double(c.busy_cycles) / double(c.busy_polls) : 0.0,
                    pkts ? double(c.busy_cycles) / double(pkts) : 0.0, c.rx_packets, c.tx_packets, c.wakeups,
                    c.doorbells ? double(c.commands) / double(c.doorbells) : 0.0, c.steered_in, c.steered_out,
                    c.steer_drops);
    }
    // Payload digests (CRC32C the engine computes for DTI_OP_DIGEST).
    for (size_t e = 0; e < s.engines.size(); e++) {
        const EngineCounters &c = s.engines[e];
        appendf(&out, "digests e%zu: rx %" PRIu64 " bytes  tx %" PRIu64 " bytes  ranges %" PRIu64
                    "  mismatches %" PRIu64 "\n",
                    e, c.digest_rx_bytes, c.digest_tx_bytes, c.digest_ranges, c.digest_mismatches);
    }
    // Posted receives (the engine writing received bytes into the program's memory).
    for (size_t e = 0; e < s.engines.size(); e++) {
        const EngineCounters &c = s.engines[e];
        appendf(&out, "posted receives e%zu: posts %" PRIu64 "  bytes %" PRIu64 "  fallbacks %" PRIu64
                    "  faults %" PRIu64 "\n",
                    e, c.posts, c.posted_bytes, c.post_fallbacks, c.post_faults);
    }
    // Commands refused unanswered: a program that broke the protocol (or a bug).
    for (size_t e = 0; e < s.engines.size(); e++)
        if (s.engines[e].rejected_commands)
            appendf(&out, "rejected commands e%zu: %" PRIu64 " (a handle not held, a corrupt tag, a SEND past the "
                          "ring's room: their bytes stay unsent)\n",
                    e, s.engines[e].rejected_commands);
    appendf(&out, "\nport  name       device                               address             mtu  link     "
                "rx pkts      tx pkts   missed  errors\n");
    for (size_t p = 0; p < s.ports.size(); p++) {
        const PortInfo &pi = s.ports[p];
        appendf(&out, "%4zu  %-10s %-36s %-18s %5u  %-4s %12" PRIu64 " %12" PRIu64 " %8" PRIu64 " %7" PRIu64 "\n", p,
                    pi.name, pi.device, (ip_string(pi.ip) + "/" + std::to_string(pi.prefix)).c_str(), pi.mtu,
                    pi.link_up ? "up" : "down", pi.ipackets, pi.opackets, pi.imissed, pi.ierrors + pi.oerrors);
    }
    // IPv6 addresses ([[port]] address6; the link-local one, from the MAC, is not listed).
    for (size_t p = 0; p < s.ports.size(); p++) {
        std::string v6;
        for (const std::string &a : port_addr6(s.ports[p])) v6 += "  " + a;
        if (!v6.empty()) appendf(&out, "ipv6 p%zu:%s\n", p, v6.c_str());
    }
    // vnet ports (ppe/src/vnet_port.h): the offloads at work.
    for (size_t p = 0; p < s.ports.size(); p++) {
        const PortInfo &pi = s.ports[p];
        if (std::strncmp(pi.device, "vnet:", 5) != 0) continue;
        appendf(&out, "vnet p%zu: lro frames %" PRIu64 " (segments %" PRIu64 ")  tso frames %" PRIu64
                    " (segments %" PRIu64 ")  rx checksum valid %" PRIu64 " partial %" PRIu64 " unknown %" PRIu64
                    "  no buffer %" PRIu64 "\n",
                p, pi.rx_lro_frames, pi.rx_lro_segments, pi.tx_tso_frames, pi.tx_tso_segments, pi.rx_csum_valid,
                pi.rx_csum_partial, pi.rx_csum_unknown, pi.rx_nombuf);
    }
    // Ports shared with the kernel ([[port]] kernel = "shared").
    for (size_t p = 0; p < s.ports.size(); p++) {
        const PortInfo &pi = s.ports[p];
        if (!pi.kernel_iface[0]) continue;
        const KernelCounters k = port_kernel(s, uint32_t(p));
        uint64_t frames = 0, bytes = 0;
        std::string why;
        for (unsigned r = 0; r < mars::kUnclaimedReasons; r++) {
            frames += k.to_frames[r];
            bytes += k.to_bytes[r];
            if (k.to_frames[r]) why += std::string(why.empty() ? "" : ", ") + kernel_reason_name(r) + " " +
                                       std::to_string(k.to_frames[r]);
        }
        appendf(&out, "kernel p%zu (%s): to the kernel %" PRIu64 " frames %" PRIu64 " bytes (%s), from the kernel %"
                    PRIu64 " frames %" PRIu64 " bytes, dropped to/from %" PRIu64 "/%" PRIu64 "\n",
                    p, pi.kernel_iface, frames, bytes, why.empty() ? "none" : why.c_str(), k.from_frames,
                    k.from_bytes, k.to_drops, k.from_drops);
    }
    for (size_t e = 0; e < s.engines.size(); e++) {
        for (uint32_t p = 0; p < h.n_ports; p++) {
            const mars::StackStats &st = s.stacks[e * h.n_ports + p].stack;
            appendf(&out, "\nstack e%zu/p%u: conns %" PRIu64 "  rx %" PRIu64 " frames  tx %" PRIu64
                        " frames  fast path %" PRIu64 " hits / %" PRIu64 " misses  retransmits %" PRIu64
                        "  ooo buffers %" PRIu64 "  resets in/out %" PRIu64 "/%" PRIu64 "\n",
                        e, p, st.conns_open, st.rx_frames, st.tx_frames, st.fastpath_hits, st.fastpath_misses,
                        st.tcp_retransmits, st.ooo_frames_used, st.tcp_resets_in, st.tcp_resets_out);
            std::string drops;
#define D(f) if (st.f) drops += std::string("  ") + std::string(#f).substr(5) + " " + std::to_string(st.f);
            PPE_STATS_DROP_FIELDS(D)
#undef D
            appendf(&out, "  drops:%s\n", drops.empty() ? " none" : drops.c_str());
            appendf(&out, "  arp: requests out %" PRIu64 "  replies in %" PRIu64 "  failed %" PRIu64
                          "  connects unreachable %" PRIu64 "\n",
                    st.arp_requests_out, st.arp_replies_in, st.arp_failed, st.tcp_connects_unreachable);
            if (st.local_conns || st.local_frames)
                appendf(&out, "  local (both ends in this stack, no port): connections %" PRIu64 "  frames %" PRIu64
                              "  bytes %" PRIu64 "\n",
                        st.local_conns, st.local_frames, st.local_bytes);
            appendf(&out,
                    "  receive pipeline: strands %" PRIu64 "%s  yields %" PRIu64 "  prefetches %" PRIu64
                    "  coalesced %" PRIu64 " segments in %" PRIu64 " groups"
                    "\n  transmit: %" PRIu64 " segments in runs of one pass (%" PRIu64 " runs), %" PRIu64
                    " TSO frames, %" PRIu64 " segments by reference (%" PRIu64 " bytes)"
                    "\n  copy engine: %s; offloaded %" PRIu64 " copies, %" PRIu64
                    " bytes; core copies instead: below_threshold %" PRIu64 " ring_wrap %" PRIu64
                    " ring_full %" PRIu64 " device_gone %" PRIu64 " error %" PRIu64 " stalled %" PRIu64 "\n",
                    st.strands, st.strands <= 1 ? " (run to completion)" : "", st.strand_yields, st.prefetches,
                    st.rx_coalesce_segments, st.rx_coalesce_groups, st.tx_run_segments, st.tx_runs,
                    st.tx_tso_frames, st.tx_ref_frames, st.tx_ref_bytes, copy_engine_label(h, e, p).c_str(), st.copies_offloaded, st.copy_bytes_offloaded,
                    st.copy_fallback_below_threshold, st.copy_fallback_ring_wrap, st.copy_fallback_ring_full,
                    st.copy_fallback_device_gone, st.copy_fallback_error, st.copy_fallback_stalled);
        }
    }
    appendf(&out, "\napps: %zu\n", s.apps.size());
    if (!s.apps.empty())
        appendf(&out, "    pid  name             engine  sockets     memory     commands    doorbells   wakeups\n");
    for (const AppCounters &a : s.apps)
        appendf(&out, "%7d  %-16s %6u %8" PRIu64 " %10" PRIu64 " %12" PRIu64 " %12" PRIu64 " %9" PRIu64 "\n", a.pid,
                    a.comm, a.engine, a.sockets, a.memory_bytes, a.commands, a.doorbells, a.wakeups);
    appendf(&out, "\nprograms under the shim: %zu\n", s.programs.size());
    if (!s.programs.empty())
        appendf(&out, "    pid  name             attached  accel-open  accepted ppe/kernel  waits spun/slept  "
                      "refused  sockets by where they went\n");
    for (const eta_preload_stats &pr : s.programs) {
        std::string where;
        for (unsigned r = 0; r < ETA_PRELOAD_N_REASONS; r++)
            if (pr.fallbacks[r]) where += std::string(" ") + preload_reason_name(r) + " " + std::to_string(pr.fallbacks[r]);
        appendf(&out, "%7d  %-16s %8s %11" PRIu64 " %10" PRIu64 "/%-8" PRIu64 " %8" PRIu64 "/%-8" PRIu64 " %7" PRIu64
                      " %s\n",
                pr.pid, pr.comm, pr.attached ? "yes" : "no", pr.accel_open, pr.accepted, pr.kernel_accepted, pr.spins,
                pr.sleeps, pr.bypass_refused, where.empty() ? " none" : where.c_str());
        if (pr.lost_wakeups) // a bug's trace (preload/README.md "The watchdog"): shown only when it happened
            appendf(&out, "%7d  lost wakeups %" PRIu64 " (each recovered by the shim's watchdog within 1 s)\n", pr.pid,
                    pr.lost_wakeups);
    }
    size_t n_tcp = 0;
    for (const ConnEntry &c : s.conns) n_tcp += c.proto == kProtoTcp;
    appendf(&out, "\nconnections: %u", s.conns_total);
    if (s.conns_total > n_tcp) appendf(&out, " (%zu shown)", n_tcp);
    appendf(&out, "\n");
    if (conns && n_tcp) {
        appendf(&out, "  sock     pid  state        fam  local                  remote                 rx-queue  "
                    "tx-unacked  cwnd     srtt-us  retrans  memory\n");
        for (const ConnEntry &c : s.conns)
            if (c.proto == kProtoTcp)
                appendf(&out, "%6u %7d  %-12s tcp%c %-22s %-22s %8u %11u %8u %8u %8" PRIu64 " %7u\n", c.sock,
                        c.app_pid, tcp_state_name(c.state), c.ipv6 ? '6' : '4', conn_end(c, true).c_str(),
                        conn_end(c, false).c_str(), c.rx_readable, c.tx_unacked, c.cwnd, c.srtt_us, c.retransmits,
                        c.memory_bytes);
    }
    // UDP sockets (issue 31): what each holds and what it lost.
    const size_t n_udp = s.conns.size() - n_tcp;
    appendf(&out, "udp sockets: %u", s.udp_total);
    if (s.udp_total > n_udp) appendf(&out, " (%zu shown)", n_udp);
    appendf(&out, "\n");
    if (conns && n_udp) {
        appendf(&out, "  sock     pid  fam  local                  peer                   rx-queue  datagrams  drops  "
                    "memory\n");
        for (const ConnEntry &c : s.conns)
            if (c.proto == kProtoUdp)
                appendf(&out, "%6u %7d  udp%c %-22s %-22s %8u %10u %6" PRIu64 " %7u\n", c.sock, c.app_pid,
                        c.ipv6 ? '6' : '4', conn_end(c, true).c_str(),
                        c.remote_port ? conn_end(c, false).c_str() : "-", c.rx_readable, c.datagrams, c.drops,
                        c.memory_bytes);
    }
    return out;
}

volatile sig_atomic_t g_stop = 0;

// Writes `text` to `path` so that a reader (node_exporter's textfile
// collector) never sees a half-written file: a temporary file beside it,
// then rename().
bool write_atomically(const std::string &path, const std::string &text, std::string *error)
{
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    FILE *f = std::fopen(tmp.c_str(), "w");
    if (!f) {
        *error = "cannot write " + tmp + ": " + std::strerror(errno) + " (is the directory there and writable?)";
        return false;
    }
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const bool closed = std::fclose(f) == 0;
    if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
        *error = "cannot write " + path + ": " + std::strerror(errno);
        std::remove(tmp.c_str());
        return false;
    }
    return true;
}

} // namespace

int main(int argc, char **argv)
{
    CLI::App app{"eta-stat: live state and counters of a running eta-ppe"};
    const char *env = std::getenv("ETA_SOCKET");
    std::string socket = env && *env ? env : "/run/eta/ppe.sock";
    std::string output;
    bool json = false, prometheus = false, no_conns = false, latency = false, slow = false;
    double watch = 0;
    app.add_option("-s,--socket", socket, "the PPE's control socket (default $ETA_SOCKET or /run/eta/ppe.sock)");
    auto *json_flag = app.add_flag("-j,--json", json, "one JSON object per snapshot, for scripts");
    auto *prom_flag = app.add_flag("-p,--prometheus", prometheus,
                 "Prometheus text exposition format (node_exporter textfile collector; see tools/eta-ppe.service)")
        ->excludes(json_flag);
    app.add_flag("--no-conns", no_conns, "leave out the connection table");
    auto *latency_flag = app.add_flag("-l,--latency", latency,
                 "the latency breakdown of sampled requests instead: per stage count, p50, p90, p99, p99.9, max "
                 "(with --json, --prometheus: histograms)");
    app.add_flag("--slow", slow,
                 "with --latency: the slow-request log instead, the stages of the slowest sampled requests of "
                 "each engine's last and current 10 s interval (with --json: that part of the JSON)")
        ->needs(latency_flag)
        ->excludes(prom_flag);
    app.add_option("-w,--watch", watch, "repeat every SECONDS (default 1) until interrupted")
        ->expected(0, 1)
        ->default_str("1")
        ->check(CLI::PositiveNumber);
    app.add_option("-o,--output", output,
                   "replace FILE with each snapshot atomically (temporary file + rename) instead of printing it");
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
            // A collector must not keep exporting the last values of a PPE that is gone.
            if (!output.empty()) std::remove(output.c_str());
            return 1;
        }
        read_programs(socket, &snap); // none is fine: no program under the shim has run
        if (latency) {
            LatencySnapshot ls;
            region.read_latency(&ls);
            std::string text = slow ? (json ? slow_json(ls).dump() + "\n" : slow_text(ls))
                               : json ? latency_json(ls).dump() + "\n"
                               : prometheus ? latency_prometheus(ls)
                                            : latency_text(ls);
            if (output.empty()) {
                if (watch > 0 && !json && !prometheus) std::printf("\033[H\033[2J");
                std::fwrite(text.data(), 1, text.size(), stdout);
            } else if (!write_atomically(output, text, &err)) {
                std::fprintf(stderr, "eta-stat: %s\n", err.c_str());
                return 1;
            }
        } else if (json || prometheus || !output.empty()) {
            std::string text;
            if (json) text = to_json(snap, !no_conns).dump() + "\n";
            else if (prometheus) text = to_prometheus(snap);
            else text = text_view(snap, !no_conns);
            if (output.empty()) {
                std::fwrite(text.data(), 1, text.size(), stdout);
            } else if (!write_atomically(output, text, &err)) {
                std::fprintf(stderr, "eta-stat: %s\n", err.c_str());
                return 1;
            }
        } else {
            if (watch > 0) std::printf("\033[H\033[2J");
            std::fputs(text_view(snap, !no_conns).c_str(), stdout);
        }
        std::fflush(stdout);
        if (watch > 0) {
            timespec ts{time_t(watch), long((watch - double(time_t(watch))) * 1e9)};
            nanosleep(&ts, nullptr);
        }
    } while (watch > 0 && !g_stop);
    return 0;
}
