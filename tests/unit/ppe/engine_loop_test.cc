// The engine loop of eta-ppe (ppe/src/engine.cc) on a simulated wire: the
// real ppe::Engine thread — rx burst, MARS input, DTI engine service, tx,
// idle policy, io_uring wakeups — with its port replaced through the PortIo
// seam (ppe/src/port_io.h) by one wired to a second MARS stack (the peer)
// that runs on its own thread. Applications attach through libdti over a
// real control socket, as they do to eta-ppe. No root, no NIC: the EAL runs
// in-process without hugepages (the engine thread registers with it and
// the clock reads its TSC rate), frames are plain memory.
#include "engine.h"
#include "frame.h"
#include "malformed.h"
#include "port_io.h"
#include "sim_wire.h"
#include "stats.h"

#include <dti/dti.h>

#include <rte_eal.h>

#include <gtest/gtest.h>

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using mars::sim::pattern_check;
using mars::sim::pattern_fill;

constexpr uint32_t kEngineIp = 0xc6120001u; // 198.18.0.1 (host order)
constexpr uint32_t kPeerIp = 0xc6120002u;   // 198.18.0.2
const mars::MacAddr kEngineMac{{0x02, 0x00, 0x00, 0x00, 0xee, 0x01}};
const mars::MacAddr kPeerMac{{0x02, 0x00, 0x00, 0x00, 0xee, 0x02}};

uint64_t mono_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// Polls `done` until it holds or `timeout` passed (a bound, not a timing
// claim: every wait here ends as soon as its condition holds).
bool wait_until(const std::function<bool()> &done, std::chrono::milliseconds timeout)
{
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}

class EalEnv : public ::testing::Environment {
  public:
    void SetUp() override
    {
        // rte_eal_init pins the calling thread to its main lcore; give the
        // test's threads their CPUs back afterwards (the engine pins itself).
        cpu_set_t all;
        sched_getaffinity(0, sizeof all, &all);
        prefix_ = "engine-loop-test-" + std::to_string(getpid());
        std::vector<std::string> args = {"engine_loop_test", "--no-huge", "--no-shconf", "--no-pci",
                                         "--no-telemetry", "-m", "64", "--iova-mode=va", "--log-level=*:error",
                                         "--file-prefix", prefix_, "-l", "0"};
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        ASSERT_GE(rte_eal_init(int(argv.size()), argv.data()), 0) << "EAL could not start without hugepages";
        sched_setaffinity(0, sizeof all, &all);
    }
    void TearDown() override
    {
        // The EAL leaves its runtime directory behind even with --no-shconf
        // (/var/run/dpdk/<prefix> as root, under $XDG_RUNTIME_DIR or /tmp otherwise).
        const std::string runtime_dir = rte_eal_get_runtime_dir();
        rte_eal_cleanup();
        std::error_code ec;
        if (runtime_dir.find(prefix_) != std::string::npos) std::filesystem::remove_all(runtime_dir, ec);
    }

  private:
    std::string prefix_;
};

// The cable: frames as byte copies in two directions (the engine and the
// peer run on different threads and own their frame pools alone).
class Wire {
  public:
    void to_peer(const uint8_t *p, size_t n)
    {
        std::lock_guard<std::mutex> g(mu_);
        for_peer_.emplace_back(p, p + n);
        cv_.notify_all();
    }
    void to_engine(const uint8_t *p, size_t n)
    {
        std::lock_guard<std::mutex> g(mu_);
        for_engine_.emplace_back(p, p + n);
    }
    bool take_for_engine(std::vector<uint8_t> *out)
    {
        std::lock_guard<std::mutex> g(mu_);
        if (for_engine_.empty()) return false;
        *out = std::move(for_engine_.front());
        for_engine_.pop_front();
        return true;
    }
    // The peer's frames; waits up to `wait_ns` when there are none.
    std::deque<std::vector<uint8_t>> take_for_peer(uint64_t wait_ns)
    {
        std::unique_lock<std::mutex> g(mu_);
        if (for_peer_.empty()) cv_.wait_for(g, std::chrono::nanoseconds(wait_ns));
        return std::exchange(for_peer_, {});
    }
    void interrupt() { cv_.notify_all(); }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::vector<uint8_t>> for_peer_, for_engine_;
};

// The engine's port: what ppe::MbufIo does with rte_eth_*, on the wire.
class WirePortIo final : public ppe::PortIo {
  public:
    explicit WirePortIo(Wire &wire) : wire_(wire), pool_(4096) {}
    uint16_t receive(mars::PacketRef *out, uint16_t n) override
    {
        uint16_t k = 0;
        std::vector<uint8_t> bytes;
        while (k < n && wire_.take_for_engine(&bytes)) {
            mars::PacketRef f;
            if (!pool_.get(&f)) break; // cannot happen: the stack returns what it takes
            f.len = uint16_t(std::min<size_t>(bytes.size(), f.room));
            std::memcpy(f.data, bytes.data(), f.len);
            f.flags = 0; // no rx checksum offload: the stack checks every checksum
            out[k++] = f;
        }
        rx_packets += k;
        return k;
    }
    uint16_t alloc(mars::PacketRef *out, uint16_t n) override
    {
        uint16_t k = 0;
        while (k < n && pool_.get(&out[k])) k++;
        return k;
    }
    uint16_t transmit(mars::PacketRef *frames, uint16_t n) override
    {
        for (uint16_t i = 0; i < n; i++) {
            wire_.to_peer(frames[i].data, frames[i].len);
            pool_.put(frames[i]);
        }
        tx_packets += n;
        return n;
    }
    void release(mars::PacketRef *frames, uint16_t n) override
    {
        for (uint16_t i = 0; i < n; i++) pool_.put(frames[i]);
    }

  private:
    Wire &wire_;
    mars::sim::FramePool pool_;
};

// The remote host: a plain MARS stack on its own thread, on real time.
// Tests reach it only through with(), under its lock.
class Peer {
  public:
    explicit Peer(Wire &wire)
        : wire_(wire), pool_(8192), rings_(16, 256 * 1024, 256 * 1024),
          port_(pool_, [this](const mars::PacketRef &f) {
              wire_.to_engine(f.data, f.len);
              pool_.put(f);
          })
    {
        mars::StackConfig c = mars::sim::test_stack_config(2);
        c.mac = kPeerMac;
        c.ip = kPeerIp;
        c.tcp.rcvbuf = c.tcp.sndbuf = 256 * 1024;
        std::string err;
        stack_ = mars::Stack::create(c, port_, rings_, &err);
        if (!stack_) throw std::runtime_error("peer stack: " + err);
        thread_ = std::thread([this] { run(); });
    }
    ~Peer()
    {
        stop_ = true;
        wire_.interrupt();
        thread_.join();
        std::lock_guard<std::mutex> g(mu_);
        stack_.reset();
    }
    template <typename F>
    auto with(F f)
    {
        std::lock_guard<std::mutex> g(mu_);
        return f(*stack_, mono_ns());
    }
    // Called on the peer's thread after every round (data pumps).
    void set_tick(std::function<void(mars::Stack &)> tick)
    {
        std::lock_guard<std::mutex> g(mu_);
        tick_ = std::move(tick);
    }

  private:
    void run()
    {
        std::vector<mars::PacketRef> in;
        mars::SockEvent evs[64];
        while (!stop_) {
            auto frames = wire_.take_for_peer(200'000);
            std::lock_guard<std::mutex> g(mu_);
            const uint64_t now = mono_ns();
            in.clear();
            for (auto &bytes : frames) {
                mars::PacketRef f;
                if (!pool_.get(&f)) break;
                f.len = uint16_t(std::min<size_t>(bytes.size(), f.room));
                std::memcpy(f.data, bytes.data(), f.len);
                in.push_back(f);
                if (in.size() == 64) {
                    stack_->input(in.data(), uint16_t(in.size()), now);
                    in.clear();
                }
            }
            if (!in.empty()) stack_->input(in.data(), uint16_t(in.size()), now);
            stack_->poll(now);
            while (stack_->events(evs, 64)) {}
            if (tick_) tick_(*stack_);
            stack_->poll(now);
        }
    }

    Wire &wire_;
    mars::sim::FramePool pool_;
    mars::sim::RingPool rings_;
    mars::sim::SimPort port_;
    std::unique_ptr<mars::Stack> stack_;
    std::mutex mu_;
    std::function<void(mars::Stack &)> tick_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// eta-ppe's control thread, reduced to what one engine needs: accept on
// the control socket and hand each connection to the engine.
class ControlAcceptor {
  public:
    ControlAcceptor(const std::string &path, ppe::Engine &engine) : path_(path), engine_(engine)
    {
        fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0); // as libdti and eta-ppe
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
        unlink(path.c_str());
        if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || listen(fd_, 16) != 0)
            throw std::runtime_error("control socket " + path + ": " + std::strerror(errno));
        stop_fd_ = eventfd(0, EFD_CLOEXEC);
        thread_ = std::thread([this] { run(); });
    }
    ~ControlAcceptor()
    {
        uint64_t one = 1;
        if (write(stop_fd_, &one, sizeof one) != sizeof one) std::abort();
        thread_.join();
        close(fd_);
        close(stop_fd_);
        unlink(path_.c_str());
    }
    int offered() const { return offered_; }

  private:
    void run()
    {
        for (;;) {
            pollfd p[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
            if (poll(p, 2, -1) < 0) continue;
            if (p[1].revents) return;
            const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) continue;
            offered_++; // before: the engine may answer the attach before offer_connection returns
            if (!engine_.offer_connection(c)) close(c);
        }
    }
    std::string path_;
    ppe::Engine &engine_;
    int fd_ = -1, stop_fd_ = -1;
    std::atomic<int> offered_{0};
    std::thread thread_;
};

// The stats region the engine publishes into, in private memory.
class StatsRegion {
  public:
    StatsRegion(uint32_t max_apps, uint32_t conn_capacity)
    {
        const auto l = ppe::stats::Layout::compute(1, 1, max_apps, conn_capacity);
        mem_.reset(static_cast<uint8_t *>(std::aligned_alloc(4096, l.size)));
        std::memset(mem_.get(), 0, l.size);
        view.base = mem_.get();
        ppe::stats::Header *h = view.header();
        h->n_engines = 1;
        h->n_ports = 1;
        h->max_apps = max_apps;
        h->conn_capacity = conn_capacity;
        h->size = l.size;
        h->engines_off = l.engines_off;
        h->stacks_off = l.stacks_off;
        h->ports_off = l.ports_off;
        h->apps_off = l.apps_off;
        h->conns_off = l.conns_off;
        h->latency_off = l.latency_off;
        h->conn_stride = l.conn_stride;
    }
    ppe::stats::EngineCounters engine() const
    {
        ppe::stats::EngineCounters c{};
        view.engine(0)->read(&c);
        return c;
    }
    mars::StackStats stack() const
    {
        ppe::stats::StackCounters c{};
        view.stack(0, 0)->read(&c);
        return c.stack;
    }
    ppe::stats::View view;

  private:
    struct Free {
        void operator()(uint8_t *p) const { std::free(p); }
    };
    std::unique_ptr<uint8_t, Free> mem_;
};

int engine_cpu()
{
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    int last = 0;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) last = i;
    return last;
}

// Data pump for one peer socket: sends `total` bytes of stream `send_seed`
// as space allows and checks every byte it receives against `recv_seed`.
// Runs on the peer's thread (Peer::set_tick).
struct PeerStream {
    mars::SockId sock = 0;
    uint64_t send_seed = 0, recv_seed = 0, total = 0;
    std::atomic<uint64_t> sent{0}, received{0};
    std::atomic<bool> mismatch{false}, eof{false};

    void tick(mars::Stack &s)
    {
        uint8_t buf[16384];
        while (sent < total) {
            const size_t n = size_t(std::min<uint64_t>(sizeof buf, total - sent));
            pattern_fill(send_seed, sent, buf, n);
            const int64_t r = s.send(sock, buf, n);
            if (r <= 0) break;
            sent += uint64_t(r);
        }
        for (;;) {
            const int64_t r = s.recv(sock, buf, sizeof buf);
            if (r == 0) eof = true;
            if (r <= 0) break;
            if (pattern_check(recv_seed, received, buf, size_t(r)) != size_t(r)) mismatch = true;
            received += uint64_t(r);
        }
    }
};

class EngineLoop : public ::testing::Test {
  protected:
    // Starts the engine (with `config`'s idle policy) and its control socket.
    void start(ppe::Config config)
    {
        config_ = std::move(config);
        ppe::Port port;
        port.id = 0;
        port.config.name = "sim0";
        port.config.device = "simulated wire";
        port.config.ip = kEngineIp;
        port.config.prefix = 24;
        port.mac = kEngineMac;
        ports_.push_back(port);
        config_.ports.push_back(port.config);
        config_.max_sockets = 1024;
        config_.ooo_pool_frames = 1024;
        config_.tcp.rcvbuf = config_.tcp.sndbuf = 128 * 1024;
        config_.limits.max_apps = 4;
        config_.limits.sockets_per_app = 64;
        config_.limits.memory_per_app = 64ull << 20;
        stats_ = std::make_unique<StatsRegion>(config_.limits.max_apps, 64);
        clock_.init();
        std::string err;
        ASSERT_TRUE(mesh_.create(1, 64, &err)) << err;
        ppe::EngineCore core;
        core.pu = engine_cpu();
        core.core_pus = {core.pu};
        core.spec = "test";
        engine_ = std::make_unique<ppe::Engine>(0, core, config_, ports_, stats_->view, clock_, mesh_,
                                                [this](const ppe::Port &, uint16_t, uint16_t) {
                                                    auto io = std::make_unique<WirePortIo>(wire_);
                                                    io_ = io.get();
                                                    return io;
                                                });
        ASSERT_TRUE(engine_->start(&err)) << err;
        path_ = "/tmp/engine-loop-test-" + std::to_string(getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".sock";
        control_ = std::make_unique<ControlAcceptor>(path_, *engine_);
    }
    static ppe::Config adaptive(uint32_t max_sleep_us)
    {
        ppe::Config c;
        c.idle = ppe::IdlePolicy::kAdaptive;
        c.spin_us = 50;
        c.max_sleep_us = max_sleep_us;
        return c;
    }
    void attach()
    {
        dti_attach_opts o{path_.c_str(), "engine-loop-test"};
        char why[256] = "";
        ASSERT_EQ(dti_attach(&o, &d_, why, sizeof why), 0) << why;
        int err = 0;
        c_ = dti_ctx_get(d_, &err);
        ASSERT_NE(c_, nullptr) << dti_strerror(err);
    }
    void TearDown() override
    {
        if (d_) dti_detach(d_);
        d_ = nullptr;
        control_.reset();
        if (engine_) engine_->stop();
        engine_.reset();
        peer_.reset(); // after the engine: nothing sends to it any more
    }
    bool engine_asleep() const
    {
        const std::atomic<uint32_t> *s = mesh_.bell(0).sleeping.load();
        return s && s->load() != 0;
    }
    // Waits (bounded) until the idle engine is blocked in a nap that lasts at
    // least `min_ns`, given that it did its last work no later than `since`
    // (the engine's clock). Naps double from 50 us while there is no work,
    // so the nap that starts after a publish at P lasts about as long as all
    // earlier naps together: at least P - since (less the 50 us spin).
    bool wait_for_long_nap(uint64_t min_ns, uint64_t since)
    {
        return wait_until(
            [&] {
                const ppe::stats::EngineCounters ec = stats_->engine();
                return ec.published_ns > since && ec.published_ns - since >= min_ns + 50'000 &&
                       engine_blocked_in_kernel();
            },
            std::chrono::seconds(60));
    }
    // When the loop began (its first publish), as an upper bound of when its
    // naps started growing.
    uint64_t loop_began()
    {
        uint64_t p = 0;
        wait_until([&] { return (p = stats_->engine().published_ns) != 0; }, std::chrono::seconds(10));
        return p;
    }
    // Asleep and past its last look at the applications: the engine thread
    // is blocked in io_uring_enter (no other thread of this test makes that
    // call), so only a doorbell, a kick or the nap's end can wake it.
    bool engine_blocked_in_kernel() const
    {
        if (!engine_asleep()) return false;
        for (const auto &task : std::filesystem::directory_iterator("/proc/self/task")) {
            std::ifstream f(task.path() / "syscall");
            long nr = -1;
            if (f >> nr && nr == SYS_io_uring_enter) return true;
        }
        return false;
    }
    // An established connection: the application listens on the engine,
    // the peer connects. Fills app_sock_ and peer_sock_.
    void connect_peer_to_app(uint16_t port)
    {
        const int l = dti_socket(c_);
        ASSERT_GE(l, 0) << dti_strerror(l);
        dti_addr local{0, port};
        ASSERT_EQ(dti_bind(c_, dti_sock_t(l), &local), 0);
        ASSERT_EQ(dti_listen(c_, dti_sock_t(l), 8), 0);
        const int64_t ps = peer_->with([&](mars::Stack &s, uint64_t now) {
            const int64_t id = s.open(1);
            if (id >= 0 && s.connect(mars::SockId(id), {kEngineIp, port}, now) != 0) return int64_t(-1);
            return id;
        });
        ASSERT_GE(ps, 0);
        dti_addr from{};
        const int a = dti_accept(c_, dti_sock_t(l), &from, 10000);
        ASSERT_GE(a, 0) << "the engine never delivered the peer's connection: " << dti_strerror(a);
        EXPECT_EQ(from.ip, kPeerIp);
        app_sock_ = dti_sock_t(a);
        peer_sock_ = mars::SockId(ps);
        ASSERT_EQ(dti_close(c_, dti_sock_t(l)), 0);
    }
    // Moves `bytes` each way between app_sock_ and peer_sock_, checking
    // every byte on both sides.
    void transfer_both_ways(uint64_t bytes, uint64_t seed)
    {
        auto stream = std::make_shared<PeerStream>();
        stream->sock = peer_sock_;
        stream->send_seed = seed;
        stream->recv_seed = seed + 1;
        stream->total = bytes;
        peer_->set_tick([stream](mars::Stack &s) { stream->tick(s); });
        std::atomic<ssize_t> send_result{0};
        std::thread sender([&] {
            dti_ctx_t *c = dti_ctx_get(d_, nullptr);
            std::vector<uint8_t> buf(48 * 1024);
            for (uint64_t off = 0; off < bytes;) {
                const size_t n = size_t(std::min<uint64_t>(buf.size(), bytes - off));
                pattern_fill(seed + 1, off, buf.data(), n);
                const ssize_t r = dti_send_all(c, app_sock_, buf.data(), n, 10000);
                if (r != ssize_t(n)) {
                    send_result = r < 0 ? r : -1;
                    return;
                }
                off += n;
            }
            send_result = ssize_t(bytes);
        });
        std::vector<uint8_t> buf(64 * 1024);
        uint64_t got = 0;
        while (got < bytes) {
            const ssize_t r = dti_recv_wait(c_, app_sock_, buf.data(), buf.size(), 10000);
            ASSERT_GT(r, 0) << "after " << got << " of " << bytes << " bytes: "
                            << (r < 0 ? dti_strerror(int(r)) : "end of stream");
            ASSERT_EQ(pattern_check(seed, got, buf.data(), size_t(r)), size_t(r))
                << "the application received a wrong byte after " << got;
            got += uint64_t(r);
        }
        sender.join();
        EXPECT_EQ(send_result.load(), ssize_t(bytes)) << dti_strerror(int(send_result.load()));
        EXPECT_TRUE(wait_until([&] { return stream->received >= bytes || stream->mismatch; },
                               std::chrono::seconds(20)))
            << "the peer got " << stream->received << " of " << bytes << " bytes";
        EXPECT_FALSE(stream->mismatch) << "the peer received a wrong byte";
        EXPECT_EQ(stream->received.load(), bytes);
        EXPECT_EQ(stream->sent.load(), bytes);
        peer_->set_tick({});
    }

    Wire wire_;
    std::unique_ptr<Peer> peer_ = std::make_unique<Peer>(wire_);
    ppe::Config config_;
    std::vector<ppe::Port> ports_;
    std::unique_ptr<StatsRegion> stats_;
    ppe::TscClock clock_;
    ppe::SteerMesh mesh_;
    std::unique_ptr<ppe::Engine> engine_;
    WirePortIo *io_ = nullptr;
    std::string path_;
    std::unique_ptr<ControlAcceptor> control_;
    dti_t *d_ = nullptr;
    dti_ctx_t *c_ = nullptr;
    dti_sock_t app_sock_ = 0;
    mars::SockId peer_sock_ = 0;
};

TEST_F(EngineLoop, PeerConnectsToAnApplicationAndBytesArriveExactBothWays)
{
    ASSERT_NO_FATAL_FAILURE(start(adaptive(1000)));
    ASSERT_NO_FATAL_FAILURE(attach());
    ASSERT_NO_FATAL_FAILURE(connect_peer_to_app(5000));
    ASSERT_NO_FATAL_FAILURE(transfer_both_ways(2u << 20, 7));
    // The loop counted what crossed its port and published it.
    // 2 MiB each way is at least 1,437 full segments each way.
    EXPECT_TRUE(wait_until([&] { return stats_->engine().rx_packets >= 1437 && stats_->engine().tx_packets >= 1437; },
                           std::chrono::seconds(5)))
        << "rx " << stats_->engine().rx_packets << ", tx " << stats_->engine().tx_packets;
    EXPECT_GT(stats_->engine().commands, 0u);
    EXPECT_GT(stats_->engine().events, 0u);
    // The application's close reaches the peer as a FIN.
    ASSERT_EQ(dti_close(c_, app_sock_), 0);
    EXPECT_TRUE(wait_until(
        [&] {
            return peer_->with([&](mars::Stack &s, uint64_t) {
                uint8_t b;
                return s.recv(peer_sock_, &b, 1) == 0;
            });
        },
        std::chrono::seconds(10)))
        << "the peer never saw the application's FIN";
}

TEST_F(EngineLoop, ApplicationConnectsOutThroughTheEngine)
{
    ASSERT_NO_FATAL_FAILURE(start(adaptive(1000)));
    const int64_t listener = peer_->with([](mars::Stack &s, uint64_t) {
        const int64_t id = s.open(1);
        if (id < 0 || s.bind(mars::SockId(id), {0, 6000}) != 0 || s.listen(mars::SockId(id), 4) != 0) return int64_t(-1);
        return id;
    });
    ASSERT_GE(listener, 0);
    ASSERT_NO_FATAL_FAILURE(attach());
    const int s = dti_socket(c_);
    ASSERT_GE(s, 0);
    dti_addr to{kPeerIp, 6000};
    ASSERT_EQ(dti_connect(c_, dti_sock_t(s), &to, 10000), 0) << "no SYN/SYN-ACK through the engine loop";
    app_sock_ = dti_sock_t(s);
    int64_t accepted = -1;
    ASSERT_TRUE(wait_until(
        [&] {
            accepted = peer_->with([&](mars::Stack &st, uint64_t) { return st.accept(mars::SockId(listener), 2); });
            return accepted >= 0;
        },
        std::chrono::seconds(10)));
    peer_sock_ = mars::SockId(accepted);
    ASSERT_NO_FATAL_FAILURE(transfer_both_ways(512u << 10, 21));
}

// Adaptive idle: with nothing to do the engine naps, each nap twice the
// last (from 50 us, capped here at 120 s). What an application does must
// wake it at once: a new control connection (the control thread's kick)
// and a command (the application's doorbell, which io_uring polls). Each is
// made while a nap of several seconds has just begun, and must be served in
// less than half of it: long enough for a loaded machine, far too short for
// a nap that ends by itself (the check tells "woken" from "slept it out").
TEST_F(EngineLoop, IdleEngineSleepsAndApplicationsWakeIt)
{
    constexpr uint64_t kNap = 4'000'000'000ull; // at least this long when the event comes
    const auto bound = std::chrono::nanoseconds(kNap / 2);
    ASSERT_NO_FATAL_FAILURE(start(adaptive(120'000'000)));
    const uint64_t began = loop_began();
    ASSERT_NE(began, 0u) << "the engine loop never published its counters";
    ASSERT_NO_FATAL_FAILURE(attach()); // an attach is no work: the naps keep growing

    ASSERT_TRUE(wait_for_long_nap(kNap, began)) << "the idle engine never took long naps";
    const uint64_t doorbells_before = stats_->engine().doorbells;
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(dti_prep_nop(c_, 1), 0);
    ASSERT_GE(dti_submit(c_), 0);
    dti_cqe cqe{};
    ASSERT_EQ(dti_wait_cqe(c_, 1, &cqe, 20000), 1) << "the sleeping engine never served the command";
    EXPECT_LT(std::chrono::steady_clock::now() - t0, bound) << "the command waited for the nap to end (no doorbell)";
    EXPECT_EQ(cqe.res, 0);
    const uint64_t served = clock_.now_ns(); // after the engine's work for it

    // A second application attaches while the engine is in a long nap again.
    ASSERT_TRUE(wait_for_long_nap(kNap, served)) << "the engine did not go back to long naps after the command";
    EXPECT_GT(stats_->engine().doorbells, doorbells_before) << "the engine counted no doorbell";
    dti_attach_opts o{path_.c_str(), "engine-loop-test-2"};
    char why[256] = "";
    dti_t *second = nullptr;
    t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(dti_attach(&o, &second, why, sizeof why), 0) << why; // returns once the engine answered WELCOME
    EXPECT_LT(std::chrono::steady_clock::now() - t0, bound) << "the attach waited for the nap to end (no kick)";
    EXPECT_EQ(control_->offered(), 2);
    dti_detach(second);
}

// The spin policy never sleeps: the loop keeps polling.
TEST_F(EngineLoop, SpinPolicyNeverSleeps)
{
    ppe::Config c;
    c.idle = ppe::IdlePolicy::kSpin;
    ASSERT_NO_FATAL_FAILURE(start(c));
    ppe::stats::EngineCounters ec{};
    ASSERT_TRUE(wait_until(
        [&] {
            ec = stats_->engine();
            return ec.idle_polls >= 10000;
        },
        std::chrono::seconds(10)));
    EXPECT_EQ(ec.sleeps, 0u);
    EXPECT_FALSE(engine_asleep());
}

// Hostile frames from the wire (one broken rule each, mars's malformed-frame
// classes) pass the engine's rx path to the stack, which drops and counts
// every one under its reason; the connection beside them is unharmed.
TEST_F(EngineLoop, MalformedFramesAreDroppedAndCountedAndTheConnectionSurvives)
{
    ASSERT_NO_FATAL_FAILURE(start(adaptive(1000)));
    ASSERT_NO_FATAL_FAILURE(attach());
    ASSERT_NO_FATAL_FAILURE(connect_peer_to_app(5001));
    ASSERT_NO_FATAL_FAILURE(transfer_both_ways(64u << 10, 3));

    mars::SockInfo pi{};
    ASSERT_EQ(peer_->with([&](mars::Stack &s, uint64_t) { return s.info(peer_sock_, &pi); }), 0);
    mars::sim::TcpSpec data;
    data.src_mac = kPeerMac;
    data.dst_mac = kEngineMac;
    data.src_ip = kPeerIp;
    data.dst_ip = kEngineIp;
    data.sport = pi.local.port;
    data.dport = pi.remote.port;
    data.seq = 1000;
    data.ack = 1000;
    data.flags = mars::sim::kAck;
    data.payload.assign(100, 0x5a);
    mars::sim::TcpSpec syn = data;
    syn.dport = 5999;
    syn.flags = mars::sim::kSyn;
    syn.payload.clear();
    const auto cases = mars::sim::malformed_cases(data, syn);

    ASSERT_TRUE(wait_until([&] { return stats_->engine().rx_packets > 0; }, std::chrono::seconds(5)));
    const mars::StackStats before = stats_->stack();
    const uint64_t rx_before = stats_->engine().rx_packets;
    // Cases per drop counter (member pointers have no order: a small list).
    std::vector<std::pair<uint64_t mars::StackStats::*, uint64_t>> expected;
    auto expected_of = [&](uint64_t mars::StackStats::*counter) -> uint64_t & {
        for (auto &e : expected)
            if (e.first == counter) return e.second;
        return expected.emplace_back(counter, 0).second;
    };
    uint64_t injected = 0;
    for (const auto &c : cases) {
        if (!c.counter) continue; // several drop reasons are defensible: checked by mars_sim_malformed
        wire_.to_engine(c.frame.data(), c.frame.size());
        expected_of(c.counter)++;
        injected++;
    }
    ASSERT_GT(injected, 20u);
    auto all_counted = [&] {
        const mars::StackStats now = stats_->stack();
        for (const auto &[counter, n] : expected)
            if (now.*counter - before.*counter < n) return false;
        return stats_->engine().rx_packets - rx_before >= injected;
    };
    ASSERT_TRUE(wait_until(all_counted, std::chrono::seconds(10)))
        << "not every malformed frame was counted under its drop reason";
    const mars::StackStats after = stats_->stack();
    for (const auto &[counter, n] : expected) EXPECT_EQ(after.*counter - before.*counter, n);
    for (const auto &c : cases) {
        if (!c.counter) continue;
        EXPECT_EQ(after.*(c.counter) - before.*(c.counter), expected_of(c.counter)) << c.name;
    }
    // The same connection still carries verified bytes both ways.
    ASSERT_NO_FATAL_FAILURE(transfer_both_ways(64u << 10, 11));
}

} // namespace

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    ::testing::AddGlobalTestEnvironment(new EalEnv);
    return RUN_ALL_TESTS();
}
