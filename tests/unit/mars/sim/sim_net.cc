// tests/unit/mars/sim/sim_net.cc: TEST FIXTURE. SimNet, the two-stack event
// loop on virtual time (see sim_wire.h). Kept apart from sim_wire.cc so the
// wire, pools and frame tools build and self-test without the stack.
#include "sim_wire.h"

#include "copy_engines.h"
#include "frame.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>
#include <stdexcept>
#include <string>

namespace mars::sim {

namespace {

// The receive pipeline the suites run with: meson registers each sim suite
// again with MARS_TEST_STRANDS / MARS_TEST_PREFETCH / MARS_TEST_COPY set, so
// the same byte-exact and conformance checks cover the strand path and the
// asynchronous copy path.
void apply_pipeline_env(StackConfig &c)
{
    if (const char *v = std::getenv("MARS_TEST_STRANDS")) {
        char *end = nullptr;
        const unsigned long n = std::strtoul(v, &end, 10);
        if (!*v || *end || n == 0 || n > StackConfig::kMaxStrands)
            throw std::invalid_argument("MARS_TEST_STRANDS must be 1..64");
        c.strands = uint32_t(n);
    }
    if (const char *v = std::getenv("MARS_TEST_PREFETCH")) c.prefetch = std::string(v) == "1";
    // MARS_TEST_COPY=deferred: every stack copies received payload through a
    // copy engine that completes a poll later (threshold 1 byte: all of it).
    if (const char *v = std::getenv("MARS_TEST_COPY")) {
        if (std::string(v) != "deferred") throw std::invalid_argument("MARS_TEST_COPY must be \"deferred\"");
        static std::vector<std::unique_ptr<DeferredCopyEngine>> engines; // outlive every stack of the process
        engines.push_back(std::make_unique<DeferredCopyEngine>(64, 1));
        c.copy_engine = engines.back().get();
        c.copy_threshold = 1;
    }
}

} // namespace

StackConfig test_stack_config(uint8_t host_octet)
{
    StackConfig c;
    c.mac = mac(host_octet);
    c.ip = ipv4(198, 18, 0, host_octet);
    c.prefix = 24;
    c.max_sockets = 1024;
    c.ooo_pool_frames = 2048;
    c.ooo_frames_per_conn = 256;
    c.isn_secret[0] = 0x243f6a8885a308d3ull + host_octet;
    c.isn_secret[1] = 0x13198a2e03707344ull;
    c.tcp.time_wait_ns = 2'000'000'000ull;
    apply_pipeline_env(c);
    return c;
}

SimNetConfig default_simnet_config()
{
    SimNetConfig c;
    c.a.stack = test_stack_config(1);
    c.b.stack = test_stack_config(2);
    c.a_to_b.seed = 11;
    c.b_to_a.seed = 22;
    return c;
}

SimNet::SimNet(const SimNetConfig &c) : pool_(c.pool_frames)
{
    for (int h = 0; h < 2; h++) links_[h] = std::make_unique<Link>(pool_, h == 0 ? c.a_to_b : c.b_to_a);
    for (int h = 0; h < 2; h++) {
        const HostConfig &hc = h == 0 ? c.a : c.b;
        Host &host = hosts_[h];
        host.config = hc.stack;
        host.rings = std::make_unique<RingPool>(hc.ring_slots, hc.stack.tcp.rcvbuf, hc.stack.tcp.sndbuf);
        Link *out = links_[h].get();
        host.port = std::make_unique<SimPort>(pool_, [this, out](const PacketRef &f) { out->send(f, now_); }, hc.offloads);
        std::string err;
        host.stack = Stack::create(hc.stack, *host.port, hc.rings ? *hc.rings : *host.rings, &err);
        if (!host.stack) throw std::runtime_error("Stack::create failed: " + err);
    }
    for (auto &h : hosts_) h.stack->announce(now_);
}

SimNet::~SimNet()
{
    // Stacks go first (they hold frames and rings), then frames in flight.
    for (auto &h : hosts_) h.stack.reset();
    for (auto &l : links_) l->flush();
}

bool SimNet::step_once()
{
    bool progress = false;
    PacketRef burst[32];
    for (int h = 0; h < 2; h++) {
        Link &in = *links_[1 - h];
        uint16_t n;
        while ((n = in.take_due(now_, burst, 32)) > 0) {
            if (hosts_[h].port->offloads() & kOffloadRxCsum) {
                for (uint16_t i = 0; i < n; i++) apply_rx_offload(burst[i]);
            }
            hosts_[h].stack->input(burst, n, now_);
            progress = true;
        }
    }
    for (auto &h : hosts_) h.stack->poll(now_);
    SockEvent evs[64];
    for (int h = 0; h < 2; h++) {
        if (own_events[h]) continue;
        uint16_t n;
        int rounds = 0;
        while ((n = hosts_[h].stack->events(evs, 64)) > 0 && rounds++ < 1000) {
            progress = true;
            for (uint16_t i = 0; i < n; i++) {
                if (on_event) on_event(h, evs[i]);
            }
        }
    }
    if (on_tick) on_tick();
    return progress;
}

void SimNet::step_now() { step_once(); }

bool SimNet::run_until(const std::function<bool()> &done, uint64_t budget_ns)
{
    const uint64_t end = now_ + budget_ns;
    uint32_t idle_same_instant = 0;
    uint64_t busy_same_instant = 0;
    stall_report_.clear();
    while (true) {
        bool progress = step_once();
        if (done()) return true;
        uint64_t next = std::min(links_[0]->next_arrival(), links_[1]->next_arrival());
        for (auto &h : hosts_) next = std::min(next, h.stack->next_deadline_ns());
        if (next <= now_) {
            // Something claims to be due now. Progress at one instant is fine
            // for a while; a deadline that poll() never clears is a stall.
            if (progress ? ++busy_same_instant > 1'000'000 : ++idle_same_instant > 1000) {
                char b[200];
                std::snprintf(b, sizeof b, "virtual time stuck at %llu ns: deadlines a=%llu b=%llu, %s",
                              (unsigned long long)now_, (unsigned long long)hosts_[0].stack->next_deadline_ns(),
                              (unsigned long long)hosts_[1].stack->next_deadline_ns(),
                              progress ? "endless work at one instant" : "poll() does not clear its deadline");
                stall_report_ = b;
                return false;
            }
            continue;
        }
        idle_same_instant = 0;
        busy_same_instant = 0;
        if (next > end) {
            now_ = end;
            step_once();
            return done();
        }
        now_ = next;
    }
}

void SimNet::run_for(uint64_t ns)
{
    run_until([] { return false; }, ns);
}

} // namespace mars::sim
