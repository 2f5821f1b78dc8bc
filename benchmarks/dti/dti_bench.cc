// dti_bench: what a DTI crossing costs, beside the physical limit.
//
//   dti_bench [--app-cpu N] [--engine-cpu M] [--iters K]
//
// 1. Bare cache-line ping-pong between two threads pinned on the two cores:
//    the round trip of one line, the floor for any cross-core protocol.
// 2. DTI command -> completion round trip (NOP) between an application thread
//    (libdti, spinning) and an engine thread (busy-polling), same two cores,
//    measured in the same run. Prints the ratio to (1); target <= 2x.
// 3. Signalling at several loads with a sleeping engine and an application
//    that sleeps when idle: commands per doorbell and wakeups per request.
// The engine here is the unit tests' fixture (loopback transport): NOPs never
// reach a transport, so (2) measures the DTI only.
#include "loopback.h"

#include <dti/dti.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

namespace {

using Clock = std::chrono::steady_clock;

void pin(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

double ns_since(Clock::time_point t0)
{
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

// One cache line bounced between two threads: round trip in ns.
double pingpong(int cpu_a, int cpu_b, uint64_t iters)
{
    struct alignas(64) Line {
        std::atomic<uint64_t> v{0};
    };
    static Line line;
    line.v.store(0);
    std::thread other([&] {
        pin(cpu_b);
        for (uint64_t i = 1; i <= iters; i++) {
            while (line.v.load(std::memory_order_acquire) != 2 * i - 1) {
            }
            line.v.store(2 * i, std::memory_order_release);
        }
    });
    pin(cpu_a);
    auto t0 = Clock::now();
    for (uint64_t i = 1; i <= iters; i++) {
        line.v.store(2 * i - 1, std::memory_order_release);
        while (line.v.load(std::memory_order_acquire) != 2 * i) {
        }
    }
    double ns = ns_since(t0);
    other.join();
    return ns / double(iters);
}

struct Fixture { // the unit tests' PPE (a DTI server on its own thread) and an attachment
    std::unique_ptr<dti::fixture::TestPpe> ppe;
    dti_t *d = nullptr;
    bool start(bool busy, int cpu, const std::string &path)
    {
        dti::fixture::TestPpe::Options o;
        o.busy_poll = busy;
        o.cpu = cpu;
        o.limits.max_sockets = 16;
        ppe = std::make_unique<dti::fixture::TestPpe>(path, o);
        std::string why;
        if (!ppe->start(&why)) {
            std::fprintf(stderr, "dti_bench: %s\n", why.c_str());
            return false;
        }
        dti_attach_opts opts{path.c_str(), "dti_bench"};
        char msg[256];
        if (dti_attach(&opts, &d, msg, sizeof msg) < 0) {
            std::fprintf(stderr, "dti_bench: %s\n", msg);
            return false;
        }
        return true;
    }
    ~Fixture()
    {
        if (d)
            dti_detach(d);
        if (ppe)
            ppe->stop();
    }
};

// NOP round trips with a spinning app: ns per round trip.
double dti_rtt(dti_ctx_t *c, uint64_t iters)
{
    dti_cqe e;
    auto one = [&](uint64_t i) {
        dti_prep_nop(c, i);
        dti_submit(c);
        while (dti_reap(c, &e, 1) == 0) {
        }
    };
    for (uint64_t i = 0; i < iters / 10; i++) // warm up
        one(i);
    auto t0 = Clock::now();
    for (uint64_t i = 0; i < iters; i++)
        one(i);
    return ns_since(t0) / double(iters);
}

void sleep_until(Clock::time_point t)
{
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t - Clock::now()).count();
    if (ns > 0) {
        timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
        nanosleep(&ts, nullptr);
    }
}

// Requests of `batch` NOPs at `rate` requests/s for `seconds` (rate 0: as
// fast as possible); the app waits with dti_wait() (spin 20 us, then sleep).
void load_point(dti::fixture::TestPpe &ppe, dti_ctx_t *c, double rate, unsigned batch, double seconds)
{
    dti::engine::Stats s0 = ppe.stats();
    auto t0 = Clock::now();
    auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    uint64_t requests = 0;
    dti_cqe e[64];
    while (Clock::now() < end) {
        for (unsigned k = 0; k < batch; k++)
            dti_prep_nop(c, k);
        dti_submit(c);
        for (unsigned got = 0; got < batch;) {
            if (dti_wait(c, 1000) != 1)
                break;
            got += dti_reap(c, e, 64);
        }
        requests++;
        if (rate > 0)
            sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(double(requests) / rate)));
    }
    dti::engine::Stats s1 = ppe.stats();
    double secs = ns_since(t0) / 1e9;
    uint64_t cmds = s1.commands - s0.commands;
    uint64_t bells = s1.doorbells_seen - s0.doorbells_seen;
    uint64_t wakes = s1.wakeups - s0.wakeups;
    char rate_s[32];
    if (rate > 0)
        std::snprintf(rate_s, sizeof rate_s, "%.0f/s", rate);
    else
        std::snprintf(rate_s, sizeof rate_s, "max");
    std::printf("  %-10s batch %-3u %9.0f req/s  %8.2f cmds/doorbell  %6.3f wakeups/req\n", rate_s, batch,
                double(requests) / secs, bells ? double(cmds) / double(bells) : double(cmds),
                requests ? double(wakes) / double(requests) : 0.0);
    // The fixture engine wrote at most one wakeup per armed context per
    // pass; the app side never wakes the engine while it polls.
}

} // namespace

int main(int argc, char **argv)
{
    int app_cpu = 0, engine_cpu = 1;
    uint64_t iters = 200000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--app-cpu"))
            app_cpu = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--engine-cpu"))
            engine_cpu = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--iters"))
            iters = std::strtoull(argv[i + 1], nullptr, 10);
        else {
            std::fprintf(stderr, "usage: dti_bench [--app-cpu N] [--engine-cpu M] [--iters K]\n");
            return 2;
        }
    }
    std::string path = "/tmp/dti-bench-" + std::to_string(getpid()) + ".sock";
    std::printf("dti_bench: app on cpu %d, engine on cpu %d, %llu round trips\n", app_cpu, engine_cpu,
                (unsigned long long)iters);

    double pp1 = pingpong(app_cpu, engine_cpu, iters);
    double rtt;
    {
        Fixture e;
        if (!e.start(true, engine_cpu, path))
            return 1;
        pin(app_cpu);
        dti_ctx_t *c = dti_ctx_get(e.d, nullptr);
        if (!c)
            return 1;
        rtt = dti_rtt(c, iters);
    }
    double pp2 = pingpong(app_cpu, engine_cpu, iters);
    double pp = (pp1 + pp2) / 2;
    std::printf("cache-line ping-pong round trip: %.1f ns (%.1f before, %.1f after)\n", pp, pp1, pp2);
    std::printf("DTI NOP command->completion round trip: %.1f ns\n", rtt);
    std::printf("ratio DTI / ping-pong: %.2fx (target <= 2x)\n", rtt / pp);

    std::printf("signalling with a sleeping engine (engine cpu %d, app cpu %d):\n", engine_cpu, app_cpu);
    {
        Fixture e;
        if (!e.start(false, engine_cpu, path))
            return 1;
        dti_ctx_t *c = dti_ctx_get(e.d, nullptr);
        if (!c)
            return 1;
        for (double rate : {100.0, 1000.0, 10000.0, 0.0})
            load_point(*e.ppe, c, rate, 1, 1.0);
        for (double rate : {1000.0, 0.0})
            load_point(*e.ppe, c, rate, 16, 1.0);
    }
    return 0;
}
