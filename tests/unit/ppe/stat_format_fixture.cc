// TEST FIXTURE: prints eta-stat's JSON or Prometheus rendering of a made-up
// stats snapshot (two engines, two ports, two applications, three
// connections, one program under the shim; every counter a distinct
// value), so that
// stat_format_test.py can parse the output with real parsers without a
// running eta-ppe. The values mean nothing; they are distinct so that a
// counter shown under the wrong name or labels is caught.
//
//   stat_format_fixture json|prometheus|latency-json|latency-prometheus|latency-text|latency-slow
// The latency breakdown (stat_latency.h): two engines; engine 0 recorded
// 1..1000 us in every stage (stage i: value + i ns), engine 1 a single
// sample of 5 ms per stage; distinct trace counters.
#include "stat_format.h"
#include "stat_latency.h"

#include <cstdio>
#include <cstring>
#include <string>

using namespace ppe::stats;

namespace {

void fill_fixture(Snapshot &s)
{
    std::memset(static_cast<void *>(&s.h), 0, sizeof s.h);
    s.h.magic = kMagic;
    s.h.version = kVersion;
    s.h.pid = 4242;
    s.h.state.store(uint32_t(State::kRunning));
    s.h.n_engines = 2;
    s.h.n_ports = 2;
    s.h.tsc_hz = 2'000'000'000;
    s.h.started_unix_ns = 1'700'000'000'000'000'000ull;
    std::strcpy(s.h.engine_cpus, "1-2");
    std::strcpy(s.h.idle_policy, "adaptive");
    std::strcpy(s.h.memory_mode, "hugepages");
    std::strcpy(s.h.copy_engine, "dmadev:wq0.0,wq2.1"); // one device per engine
    s.h.copy_threshold = 512;
    std::strcpy(s.h.socket_path, "/run/eta/ppe.sock");
    std::strcpy(s.h.config_path, "/etc/eta/\"odd\\name\".toml"); // label escaping
    uint64_t next = 1000;
    for (uint32_t e = 0; e < 2; e++) {
        EngineCounters c{};
        c.pu = int32_t(e + 1);
        c.apps = 1;
        uint64_t *first = &c.loops, *last = &c.post_faults;
        for (uint64_t *f = first; f <= last; f++) *f = next++;
        c.busy_cycles = 4'000'000'000ull * (e + 1); // 2 s, 4 s at 2 GHz
        c.published_ns = 7'000'000'000ull + e; // CLOCK_MONOTONIC of each engine's last snapshot
        c.rejected_commands = 11 + e;          // commands refused unanswered
        s.engines.push_back(c);
        for (uint32_t p = 0; p < 2; p++) {
            StackCounters st{};
            uint64_t *w = reinterpret_cast<uint64_t *>(&st.stack);
            for (size_t i = 0; i < sizeof st.stack / 8; i++) w[i] = next++;
            s.stacks.push_back(st);
        }
    }
    for (uint32_t p = 0; p < 2; p++) {
        PortInfo pi{};
        std::snprintf(pi.name, sizeof pi.name, "port%u", p);
        std::strcpy(pi.device, "net_af_packet0,iface=veth-eta");
        const uint8_t mac[6] = {0x02, 0, 0, 0, 0, uint8_t(p)};
        std::memcpy(pi.mac, mac, 6);
        pi.mtu = 1500;
        pi.ip = (198u << 24) | (18u << 16) | (1 + p);
        pi.prefix = 24;
        if (p == 1) { // two IPv6 addresses ([[port]] address6): 2001:2:0:1::1/64, fd00::2/128
            const uint8_t a[16] = {0x20, 0x01, 0, 0x02, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 1};
            const uint8_t b[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
            std::memcpy(pi.addr6[0], a, 16);
            std::memcpy(pi.addr6[1], b, 16);
            pi.addr6_prefix[0] = 64;
            pi.addr6_prefix[1] = 128;
            pi.n_addr6 = 2;
        }
        pi.rx_queues = pi.tx_queues = 2;
        pi.link_up = 1;
        pi.link_speed_mbps = 10000;
        uint64_t *first = &pi.ipackets, *last = &pi.rx_nombuf;
        for (uint64_t *f = first; f <= last; f++) *f = next++;
        s.ports.push_back(pi);
    }
    for (int a = 0; a < 2; a++) {
        AppCounters ac{};
        ac.in_use = 1;
        ac.pid = 100 + a;
        ac.engine = uint32_t(a);
        std::strcpy(ac.comm, a ? "nginx" : "redis-server");
        ac.attached_unix_ns = 1'700'000'001'000'000'000ull;
        uint64_t *first = &ac.sockets, *last = &ac.bytes_out;
        for (uint64_t *f = first; f <= last; f++) *f = next++;
        s.apps.push_back(ac);
    }
    for (uint8_t state : {uint8_t(1), uint8_t(4), uint8_t(4)}) {
        ConnEntry c{};
        c.app_pid = 100;
        c.sock = uint32_t(s.conns.size());
        c.state = state;
        c.local_ip = s.ports[0].ip;
        c.local_port = 6379;
        c.remote_ip = (198u << 24) | (18u << 16) | 9;
        c.remote_port = uint16_t(40000 + s.conns.size());
        c.bytes_in = next++;
        s.conns.push_back(c);
    }
    { // an IPv6 connection: its addresses in local6/remote6
        ConnEntry c{};
        c.app_pid = 100;
        c.sock = uint32_t(s.conns.size());
        c.state = 4;
        c.ipv6 = 1;
        const uint8_t local6[16] = {0x20, 0x01, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1};
        const uint8_t remote6[16] = {0x20, 0x01, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2};
        std::memcpy(c.local6, local6, 16);
        std::memcpy(c.remote6, remote6, 16);
        c.local_port = 443;
        c.remote_port = 50000;
        s.conns.push_back(c);
    }
    s.conns_total = 4;
    { // UDP sockets (version 20): a dual-stack one on [::]:53, a connected IPv4 one
        ConnEntry u{};
        u.app_pid = 101;
        u.sock = 7;
        u.proto = kProtoUdp;
        u.ipv6 = 1;
        u.local_port = 53;
        u.rx_readable = 96;
        u.datagrams = 3;
        u.drops = 2;
        u.memory_bytes = 262144;
        s.conns.push_back(u);
        ConnEntry v{};
        v.app_pid = 101;
        v.sock = 8;
        v.proto = kProtoUdp;
        v.local_ip = s.ports[0].ip;
        v.local_port = 5000;
        v.remote_ip = (198u << 24) | (18u << 16) | 9;
        v.remote_port = 53;
        s.conns.push_back(v);
    }
    s.udp_total = 2;
    eta_preload_stats pr{}; // one program under the shim
    pr.magic = ETA_PRELOAD_STATS_MAGIC;
    pr.version = ETA_PRELOAD_STATS_VERSION;
    pr.pid = 300;
    std::strcpy(pr.comm, "memcached");
    pr.attached = 1;
    pr.fallbacks[0] = next++; // accelerated
    pr.fallbacks[7] = next++; // loopback
    pr.accel_open = next++;
    pr.accepted = next++;
    pr.kernel_accepted = next++;
    pr.sleeps = next++;
    pr.spins = next++;
    pr.bypass_refused = next++;
    pr.watchdog_wakes = next++;
    pr.lost_wakeups = next++;
    s.programs.push_back(pr);
}

void fill_latency(LatencySnapshot &l)
{
    l.engines.assign(2, Latency{});
    uint64_t next = 7;
    for (Latency &b : l.engines) {
        b.c.sample_every = 64;
        b.c.traces = next++ * 10;
        b.c.completed = next++;
        b.c.woken = next++;
        b.c.no_event = next++;
        b.c.no_reply = next++;
    }
    for (uint32_t i = 0; i < kLatencyStages; i++) {
        for (uint64_t us = 1; us <= 1000; us++) eta_hist_record(&l.engines[0].stages[i], us * 1000 + i);
        eta_hist_record(&l.engines[1].stages[i], 5'000'000);
    }
    // Slow-request log: engine 0's done interval holds requests of 1, 2, 3 us
    // (stamped: stack 100 ns, event 100, program 1000 * k - 300 split in
    // wake 0 / read 100 / reply rest / taken 100, transmit 100); engine 1's
    // open interval one of 5 us (woken, no stamps).
    for (uint32_t k = 1; k <= 3; k++) {
        SlowRequest &r = l.engines[0].slow.done[k - 1];
        r.seq = 2, r.at_ns = k, r.flags = kSlowStamped;
        r.stage_ns[kStageStack] = r.stage_ns[kStageEvent] = r.stage_ns[kStageTransmit] = 100;
        r.stage_ns[kStageProgramSpin] = 1000 * k - 300;
        r.stage_ns[kStageProgRead] = r.stage_ns[kStageProgTaken] = 100;
        r.stage_ns[kStageProgReply] = 1000 * k - 500;
        r.stage_ns[kStageRequest] = 1000 * k;
    }
    SlowRequest &r = l.engines[1].slow.open[3];
    r.seq = 4, r.at_ns = 9, r.flags = kSlowWoken;
    r.stage_ns[kStageProgramWoken] = 5000, r.stage_ns[kStageRequest] = 5000;
}

} // namespace

int main(int argc, char **argv)
{
    const std::string what = argc == 2 ? argv[1] : "";
    Snapshot s; // holds an atomic: filled in place, never copied
    fill_fixture(s);
    if (what == "json") std::fputs((to_json(s, true).dump() + "\n").c_str(), stdout);
    else if (what == "prometheus") std::fputs(to_prometheus(s).c_str(), stdout);
    else if (what.rfind("latency-", 0) == 0) {
        LatencySnapshot l;
        fill_latency(l);
        if (what == "latency-json") std::fputs((latency_json(l).dump() + "\n").c_str(), stdout);
        else if (what == "latency-prometheus") std::fputs(latency_prometheus(l).c_str(), stdout);
        else if (what == "latency-text") std::fputs(latency_text(l).c_str(), stdout);
        else if (what == "latency-slow") std::fputs(slow_text(l).c_str(), stdout);
        else return 2;
    } else {
        std::fprintf(stderr, "usage: stat_format_fixture json|prometheus|latency-json|latency-prometheus|latency-text|latency-slow\n");
        return 2;
    }
    return 0;
}
