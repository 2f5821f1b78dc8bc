// ppe/src/engine.h: one engine — a thread pinned to a reserved core that
// owns one MARS stack per port (its queue of each port) and the DTI contexts
// of the applications assigned to it. Share-nothing: no locks; the control
// thread talks to it only through a single-producer mailbox and a wake fd.
#pragma once

#include "config.h"
#include "cpu_contention.h"
#include "dpdk.h"
#include "latency_sampler.h"
#include "port_io.h"
#include "stats.h"
#include "steer.h"
#include "system.h"
#include "transport.h"

#include <dti/engine.h>

#include <mars/stack.h>

#include <liburing.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ppe {

// Single-producer single-consumer mailbox of pointers (control → engine and
// engine → control). Bounded; push fails when full and the producer retries
// later, so nothing is ever lost.
template <size_t N>
class Mailbox {
  public:
    bool push(void *p)
    {
        const uint32_t t = tail_.load(std::memory_order_relaxed);
        if (t - head_.load(std::memory_order_acquire) == N) return false;
        slots_[t % N] = p;
        tail_.store(t + 1, std::memory_order_release);
        return true;
    }
    void *pop()
    {
        const uint32_t h = head_.load(std::memory_order_relaxed);
        if (h == tail_.load(std::memory_order_acquire)) return nullptr;
        void *p = slots_[h % N];
        head_.store(h + 1, std::memory_order_release);
        return p;
    }
    bool empty() const
    {
        return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
    }

  private:
    alignas(64) std::atomic<uint32_t> head_{0};
    alignas(64) std::atomic<uint32_t> tail_{0};
    void *slots_[N] = {};
};

// What the DTI engine enforces per application, from [limits] and [tcp].
dti::engine::Limits dti_limits(const Config &c);
// The largest receive ring of a socket: tcp.rcvbuf, or with autotuning the
// power of two that holds tcp.rcvbuf_max (each slot reserves it; the ring
// starts at tcp.rcvbuf and grows in place).
uint32_t rx_ring_bytes(const mars::TcpConfig &t);

__extension__ typedef unsigned __int128 u128;

// Monotonic nanoseconds from the TSC: one rdtsc and a multiply.
class TscClock {
  public:
    void init();
    uint64_t now_ns() const;
    // A TSC reading (a program's latency stamp) on now_ns()'s scale.
    uint64_t ns_of_tsc(uint64_t tsc) const;
    uint64_t tsc_hz() const { return hz_; }

  private:
    uint64_t tsc0_ = 0, ns0_ = 0, hz_ = 1;
    u128 mult_ = 0; // ns per tick << 32
};

// Makes the engine's PortIo for (port, its queue); unset: MbufIo (DPDK).
// Unit tests make one wired to a simulated peer. Frames steered between
// engines are mbufs, so a maker other than MbufIo serves one engine only.
using PortIoMaker = std::function<std::unique_ptr<PortIo>(const Port &port, uint16_t queue, uint16_t burst)>;

class Engine {
  public:
    // `mesh`: the steering rings between all engines (outlives the engine).
    Engine(uint32_t index, const EngineCore &core, const Config &config, std::vector<Port> &ports,
           const stats::View &stats, const TscClock &clock, SteerMesh &mesh, PortIoMaker make_io = {});
    ~Engine();

    // Starts the thread; returns once the stacks exist (or failed to).
    bool start(std::string *error);
    // Asks the loop to shut down gracefully and waits for it.
    void stop();
    // Wakes the engine if it sleeps (mailbox messages, stop).
    void kick();
    // Hands a freshly accepted control connection to this engine (control
    // thread). False when the mailbox is full: the caller refuses it.
    bool offer_connection(int fd);

    uint32_t index() const { return index_; }
    int pu() const { return core_.pu; }
    mars::Stack *stack(size_t port) { return stacks_[port].get(); }
    // [copy] engine = "dmadev": this engine's device (owned by the caller,
    // outlives the engine; used by this engine's thread only). Before start().
    void set_copy_engine(mars::CopyEngine *engine) { copy_engine_ = engine; }
    // Its stacks' IPv6 addresses still in duplicate address detection, as
    // last published (mars::Stack::addrs6_tentative; UINT32_MAX until the
    // first publish). Any thread.
    uint32_t addrs6_tentative() const { return addrs6_tentative_.load(std::memory_order_acquire); }

  private:
    void thread_main();
    bool setup(std::string *error);
    void loop();
    uint32_t poll_once(uint64_t now);
    uint32_t receive_all(uint64_t now);
    uint32_t kernel_io(uint64_t now);
    void input_steered(mars::PacketRef *frames, uint16_t n, uint64_t now);
    void idle_sleep(uint64_t now);
    void arm_kick_read();
    void drain_completions();
    void publish(uint64_t now, bool with_conns);
    void shutdown_all(uint64_t now);


    const uint32_t index_;
    const EngineCore core_;
    const Config &config_;
    std::vector<Port> &ports_;
    const stats::View stats_;
    const TscClock &clock_;

    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<int> setup_state_{0}; // 0 pending, 1 ok, -1 failed
    std::string setup_error_;

    SteerMesh &mesh_;
    const uint32_t n_engines_;
    Steering steering_;
    bool kicks_queued_ = false; // io_uring writes to napping owners' kick fds, not yet submitted
    void wake_owners(uint32_t engines);
    PortIoMaker make_io_;
    std::vector<std::unique_ptr<PortIo>> ios_;
    std::vector<std::unique_ptr<mars::Stack>> stacks_;
    // Ports shared with the kernel (kernel_tap.h): their MbufIo (nullptr:
    // not shared) and this engine's counters of what went to and came from it.
    std::vector<MbufIo *> kernel_io_;
    std::vector<stats::KernelCounters> kernel_counters_;
    bool has_kernel_ = false;
    bool kernel_busy_ = false;       // the last look at a tap found frames
    uint64_t kernel_polled_ns_ = 0;
    static constexpr uint64_t kKernelPollNs = 20'000;
    // DTI: the applications this engine serves.
    void accept_connections();
    void try_attach(int fd);
    void watch_control(int id);
    void arm_poll(int fd, uint64_t tag, unsigned mask);
    void rearm(uint64_t tag);
    void reconcile_watches();
    void on_control_ready(uint64_t seq);
    void publish_apps();
    // MARS's owner_of hook: a socket's user tag names its DTI group (bits
    // 32..47); the group's uid decides who may share a SO_REUSEPORT port.
    static uint32_t owner_uid(uint64_t user, void *engine);
    void refresh_owners();
    std::vector<uint32_t> group_uid_; // by DTI group id, refreshed at attach

    Mailbox<256> inbox_; // accepted control connections (fds), control → engine
    uint64_t now_ = 0;   // the loop's time, for the transport's connect()
    mars::Stack *dti_stack_ = nullptr; // the stack applications use (port 0)
    mars::CopyEngine *copy_engine_ = nullptr; // its receive copies (nullptr: the core copies)
    std::unique_ptr<MarsTransport> transport_;
    DtiBuffers buffers_;
    std::unique_ptr<dti::engine::Server> dti_;
    struct Watch {
        int id;         // attachment
        int ctl_fd;     // its control socket
        int bell_fd;    // its doorbell eventfd (-1: none)
        uint64_t seq;   // io_uring tag sequence of its polls
    };
    std::vector<Watch> watches_;
    std::vector<std::pair<int, uint64_t>> hellos_; // connections waiting for their HELLO, with tags
    uint64_t next_seq_ = 1;
    uint64_t seen_detaches_ = 0;
    std::vector<bool> published_apps_; // app slots this engine filled in the stats region

    io_uring ring_{};
    bool ring_up_ = false;
    int kick_fd_ = -1;
    uint64_t kick_buf_ = 0;
    bool kick_read_armed_ = false;
    std::atomic<uint32_t> sleeping_{0};
    std::atomic<uint32_t> addrs6_tentative_{UINT32_MAX}; // publish() (addrs6_tentative())
    uint64_t nap_ns_ = 0; // current idle nap (0: not napping yet)
    CpuContention contention_; // adaptive: is this CPU shared? (sampled every 10 ms)
    // Sockets that turn readable when frames reach this engine's queues
    // (rx_wake.h), polled while it sleeps; armed: a poll is outstanding.
    struct RxWake {
        int fd;
        bool armed;
    };
    std::vector<RxWake> rx_wakes_;
    bool draining_sleep_ = false; // drain_completions() right after an idle sleep
    void find_rx_wakes();
    void arm_rx_wakes();

    stats::EngineCounters counters_{};
    std::vector<stats::ConnEntry> conn_scratch_;

    LatencySampler latency_; // the latency breakdown's sampled traces (latency_sampler.h)
};

// Before READY (daemon.cc): waits, at most max_ms, until no engine has an
// IPv6 address of a port with address6 in duplicate address detection
// (about a second after start: RFC 4862 5.4), so that READY means every
// configured address is usable; a port without address6, or shared with
// the kernel (no DAD in MARS there), does not wait. Logs when the bound
// passes (and READY goes anyway).
void wait_addrs6_settled(const std::vector<std::unique_ptr<Engine>> &engines, const Config &config, uint32_t max_ms);

} // namespace ppe
