// ppe/src/daemon.cc: eta-ppe, the packet processing engine daemon.
//
// Start-up is all-or-nothing: config, machine checks, stats region, EAL,
// ports, engines, control socket — any failure undoes what was made and
// exits non-zero with one message. Then the main thread becomes the control
// thread: one io_uring for signals (signalfd), the control socket and a
// periodic refresh of the device counters.
#include "config.h"
#include "dma_copy.h"
#include "dpdk.h"
#include "engine.h"
#include "flow_rules.h"
#include "log.h"
#include "net_file.h"
#include "notify.h"
#include "privilege.h"
#include "starting.h"
#include "stats.h"
#include "steer.h"
#include "system.h"

#include <dti/dti.h>

#include <CLI/CLI.hpp>
#include <liburing.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <unordered_map>

namespace ppe {
namespace {

constexpr uint32_t kConnCapacity = 65536; // connection table entries per engine in eta-stat
constexpr uint32_t kSteerRingEntries = 1024; // per (from, to) engine pair: 32 full bursts of 32 in flight
constexpr size_t kMaxPeeks = 256;            // control connections waiting for their HELLO

uint64_t clock_ns(clockid_t clock) // CLOCK_REALTIME for the stats' wall stamps, CLOCK_MONOTONIC for intervals
{
    timespec ts{};
    clock_gettime(clock, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

void copy_str(char *dst, size_t n, const std::string &s)
{
    std::strncpy(dst, s.c_str(), n - 1);
    dst[n - 1] = '\0';
}

// The shared counters region and the cores file next to the control socket.
class Published {
  public:
    ~Published() { remove(); }

    bool create(const Config &c, const std::vector<EngineCore> &engines, const std::string &cpus, std::string *error)
    {
        path_ = c.stats_path();
        cores_path_ = c.cores_path();
        net_path_ = c.socket + ".net";
        // Application slots: limits.max_apps per engine, each engine its own range.
        const uint32_t app_slots = c.limits.max_apps * uint32_t(engines.size());
        const auto l = stats::Layout::compute(uint32_t(engines.size()), uint32_t(c.ports.size()), app_slots,
                                              kConnCapacity);
        ::unlink(path_.c_str());
        mode_ = c.published_mode();
        int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || fchmod(fd, mode_) != 0 || ftruncate(fd, off_t(l.size)) != 0) {
            *error = "cannot create the stats region " + path_ + ": " + std::strerror(errno);
            if (fd >= 0) ::close(fd);
            return false;
        }
        void *p = mmap(nullptr, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
        if (p == MAP_FAILED) {
            *error = "cannot map the stats region " + path_ + ": " + std::strerror(errno);
            return false;
        }
        base_ = static_cast<uint8_t *>(p);
        size_ = l.size;
        view.base = base_;
        stats::Header *h = view.header();
        h->version = stats::kVersion;
        h->header_size = sizeof(stats::Header);
        h->pid = getpid();
        h->n_engines = uint32_t(engines.size());
        h->n_ports = uint32_t(c.ports.size());
        h->max_apps = app_slots;
        h->conn_capacity = kConnCapacity;
        h->started_unix_ns = clock_ns(CLOCK_REALTIME);
        h->size = l.size;
        h->engines_off = l.engines_off;
        h->stacks_off = l.stacks_off;
        h->ports_off = l.ports_off;
        h->apps_off = l.apps_off;
        h->conns_off = l.conns_off;
        h->conn_stride = l.conn_stride;
        h->latency_off = l.latency_off;
        for (size_t i = 0; i < engines.size() && i < stats::kMaxEngines; i++) h->engine_pus[i] = engines[i].pu;
        copy_str(h->engine_cpus, sizeof h->engine_cpus, cpus);
        copy_str(h->config_path, sizeof h->config_path, c.path);
        copy_str(h->socket_path, sizeof h->socket_path, c.socket);
        copy_str(h->idle_policy, sizeof h->idle_policy, to_string(c.idle));
        std::string copy = "cpu";
        if (c.copy_engine == CopyKind::kDmadev) {
            copy = "dmadev:";
            for (size_t i = 0; i < c.copy_devices.size(); i++)
                copy += (i ? "," : "") + dmadev_name(c.copy_devices[i]);
        }
        copy_str(h->copy_engine, sizeof h->copy_engine, copy);
        h->copy_threshold = c.copy_engine == CopyKind::kDmadev ? c.copy_threshold : 0;
        h->state.store(uint32_t(stats::State::kStarting), std::memory_order_relaxed);
        __atomic_store_n(&h->magic, stats::kMagic, __ATOMIC_RELEASE); // readers check it first

        // The engine CPUs, for eta-run: "1" or "2-3,6", one line.
        if (!write_file(cores_path_, cpus + "\n", mode_, error)) return false;
        // The network applications reach through the PPE: net_file.h.
        return write_file(net_path_, net_file_text(c), mode_, error);
    }

    // Readable by whoever may connect to the control socket (published_mode).
    static bool write_file(const std::string &path, const std::string &text, uint32_t mode, std::string *error)
    {
        const std::string tmp = path + ".tmp";
        ::unlink(tmp.c_str());
        int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 && fchmod(fd, mode) != 0) {
            ::close(fd);
            fd = -1;
        }
        if (fd < 0 || write(fd, text.data(), text.size()) != ssize_t(text.size()) || ::close(fd) != 0 ||
            rename(tmp.c_str(), path.c_str()) != 0) {
            *error = "cannot write " + path + ": " + std::strerror(errno);
            return false;
        }
        return true;
    }

    void set_state(stats::State s)
    {
        if (base_) view.header()->state.store(uint32_t(s), std::memory_order_release);
    }

    void remove()
    {
        if (base_) munmap(base_, size_);
        base_ = nullptr;
        if (!path_.empty()) ::unlink(path_.c_str());
        if (!cores_path_.empty()) ::unlink(cores_path_.c_str());
        if (!net_path_.empty()) ::unlink(net_path_.c_str());
        path_.clear();
        net_path_.clear();
        cores_path_.clear();
    }

    stats::View view;

  private:
    std::string path_, cores_path_, net_path_;
    uint8_t *base_ = nullptr;
    size_t size_ = 0;
    uint32_t mode_ = 0644;
};

void publish_port(const stats::View &v, uint32_t i, const Port &p)
{
    stats::PortInfo info{};
    copy_str(info.name, sizeof info.name, p.config.name);
    copy_str(info.device, sizeof info.device, p.config.device);
    std::memcpy(info.mac, p.mac.b, 6);
    info.mtu = p.config.mtu;
    info.ip = p.config.ip;
    info.prefix = p.config.prefix;
    info.gateway = p.config.gateway;
    for (const mars::Ip6Prefix &a : p.config.addr6) {
        if (info.n_addr6 >= uint32_t(mars::StackConfig::kMaxAddr6)) break;
        std::memcpy(info.addr6[info.n_addr6], a.addr.b, 16);
        info.addr6_prefix[info.n_addr6++] = a.prefix;
    }
    info.rx_queues = p.queues;
    info.tx_queues = p.queues;
    info.offloads = p.offloads;
    if (p.kernel.up()) copy_str(info.kernel_iface, sizeof info.kernel_iface, p.kernel.iface());
    if (p.is_vnet()) {
        // No DPDK port: the link from the interface, counters from the queues.
        bool up = false;
        p.vnet.link(&up, &info.link_speed_mbps);
        info.link_up = up;
        const VnetCounters c = p.vnet.sum();
        info.ipackets = c.rx_frames;
        info.ibytes = c.rx_bytes;
        info.opackets = c.tx_frames;
        info.obytes = c.tx_bytes;
        info.ierrors = c.rx_dropped;
        info.oerrors = c.tx_errors;
        info.rx_nombuf = c.rx_nombuf;
        info.imissed = p.vnet.socket_drops();
        info.rx_lro_frames = c.rx_lro_frames;
        info.rx_lro_segments = c.rx_lro_segments;
        info.rx_csum_valid = c.rx_csum_valid;
        info.rx_csum_partial = c.rx_csum_partial;
        info.rx_csum_unknown = c.rx_csum_unknown;
        info.tx_tso_frames = c.tx_tso_frames;
        info.tx_tso_segments = c.tx_tso_segments;
        v.port(i)->write(info);
        return;
    }
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(p.id, &link) == 0) {
        info.link_up = link.link_status;
        info.link_speed_mbps = link.link_speed;
    }
    rte_eth_stats st{};
    if (rte_eth_stats_get(p.id, &st) == 0) {
        info.ipackets = st.ipackets;
        info.opackets = st.opackets;
        info.ibytes = st.ibytes;
        info.obytes = st.obytes;
        info.imissed = st.imissed;
        info.ierrors = st.ierrors;
        info.oerrors = st.oerrors;
        info.rx_nombuf = st.rx_nombuf;
    }
    v.port(i)->write(info);
}

// What a SIGHUP can change in place, and what needs a restart.
void reload(Config &live, const std::string &path)
{
    Config next;
    std::string err;
    if (!load_config(path, &next, &err)) {
        log(LogLevel::kError, "reload: %s; keeping the running configuration", err.c_str());
        return;
    }
    std::vector<std::string> restart;
    auto cores_text = [](const Config &c) {
        std::string s;
        for (auto &x : c.cores) s += x.text + ",";
        return s;
    };
    if (cores_text(next) != cores_text(live)) restart.push_back("engine.cores");
    if (next.idle != live.idle || next.spin_us != live.spin_us || next.max_sleep_us != live.max_sleep_us ||
        next.burst != live.burst || next.strands != live.strands || next.prefetch != live.prefetch)
        restart.push_back("[engine]");
    if (next.memory != live.memory || next.memory_mb != live.memory_mb || next.file_prefix != live.file_prefix ||
        next.eal_args != live.eal_args)
        restart.push_back("[dpdk]");
    if (next.copy_engine != live.copy_engine || next.copy_devices != live.copy_devices ||
        next.copy_threshold != live.copy_threshold || next.copy_ring != live.copy_ring)
        restart.push_back("[copy]");
    bool ports_same = next.ports.size() == live.ports.size();
    for (size_t i = 0; ports_same && i < next.ports.size(); i++)
        ports_same = same_port_setup(next.ports[i], live.ports[i]);
    if (!ports_same) restart.push_back("[[port]]");
    if (!same_routes(next, live)) restart.push_back("[[route]]"); // IPv4 and IPv6
    if (std::memcmp(&next.tcp, &live.tcp, sizeof next.tcp) != 0 || next.max_sockets != live.max_sockets ||
        next.ooo_pool_frames != live.ooo_pool_frames || next.ooo_frames_per_conn != live.ooo_frames_per_conn ||
        next.arp_probes != live.arp_probes || next.arp_retrans_ms != live.arp_retrans_ms)
        restart.push_back("[tcp]");
    if (next.socket != live.socket || next.socket_mode != live.socket_mode) restart.push_back("[control]");
    if (next.limits.max_apps != live.limits.max_apps) restart.push_back("limits.max_apps (sizes the stats region)");

    // Applied now: log level and the per-application limits.
    live.log_level = next.log_level;
    g_log_level.store(next.log_level);
    live.limits.sockets_per_app = next.limits.sockets_per_app;
    live.limits.memory_per_app = next.limits.memory_per_app;
    live.limits.allowed_uids = next.limits.allowed_uids;
    live.limits.allowed_users = next.limits.allowed_users;
    for (size_t i = 0; i < live.limits.allowed_uids.size(); i++) {
        std::string who;
        if (!user_reaches_socket(live.limits.allowed_uids[i], live.socket_mode, geteuid(), live.socket_gid, &who))
            log(LogLevel::kWarn, "reload: limits.allowed_users names \"%s\", who cannot connect to %s: %s",
                live.limits.allowed_users[i].c_str(), live.socket.c_str(), who.c_str());
    }
    log(LogLevel::kInfo, "reload: applied log.level = %s and [limits] (sockets_per_app, memory_per_app, "
                         "allowed_users; they apply to the next attach)",
        to_string(live.log_level));
    for (auto &r : restart) log(LogLevel::kWarn, "reload: %s changed in %s; that needs a restart of eta-ppe", r.c_str(), path.c_str());
}

class ControlSocket {
  public:
    ~ControlSocket() { close(); }
    bool open(const Config &c, std::string *error)
    {
        path_ = c.socket;
        fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        copy_str(sa.sun_path, sizeof sa.sun_path, c.socket);
        ::unlink(c.socket.c_str()); // stale: check_environment found no live PPE behind it
        // Created with no more than its final permissions (no moment in which
        // others may connect), then set exactly.
        const mode_t old_mask = umask(~mode_t(c.socket_mode) & 0777);
        const bool bound = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr *>(&sa), sizeof sa) == 0;
        umask(old_mask);
        if (!bound || chmod(c.socket.c_str(), c.socket_mode) != 0 || listen(fd_, 128) != 0) {
            *error = "control socket " + c.socket + ": " + std::strerror(errno);
            close();
            return false;
        }
        return true;
    }
    void close()
    {
        if (fd_ >= 0) {
            ::close(fd_);
            ::unlink(path_.c_str());
        }
        fd_ = -1;
    }
    int fd() const { return fd_; }

  private:
    int fd_ = -1;
    std::string path_;
};

// A new connection on the control socket goes to an engine, which runs the
// attach protocol (the DTI engine is single-threaded, on its engine thread).
// Refuses a connection whose HELLO the control thread peeked: the message is
// read first, because closing a UNIX socket with unread data resets it and
// the application would see ECONNRESET instead of the reason.
void refuse_peeked(int fd, int code, const std::string &why)
{
    uint8_t msg[128];
    ssize_t r = recv(fd, msg, sizeof msg, MSG_DONTWAIT);
    (void)r;
    dti::engine::refuse_connection(fd, code, why);
    ::close(fd);
}

void hand_to(int fd, Engine &e)
{
    if (!e.offer_connection(fd)) refuse_peeked(fd, EAGAIN, "the PPE is busy with other attaches; try again");
}

// Which engine: the one its HELLO names (libdti attaches to each engine by
// index), or the next in turn for DTI_ENGINE_ANY. The control thread only
// peeks at the message (MSG_PEEK); the engine's DTI engine reads it as if
// the connection had come straight to it.
void route_connection(int fd, const uint8_t *msg, int len, std::vector<std::unique_ptr<Engine>> &engines,
                      size_t *next)
{
    const uint32_t n = uint32_t(engines.size());
    const HelloRoute r = route_hello(msg, size_t(len), n);
    switch (r.kind) {
    case HelloRoute::kEngine:
        hand_to(fd, *engines[r.engine]);
        return;
    case HelloRoute::kNoSuchEngine: {
        const std::string why = "engine " + std::to_string(r.engine) + " does not exist: this eta-ppe runs " +
                                std::to_string(n) + " engine(s), 0 to " + std::to_string(n - 1);
        log(LogLevel::kInfo, "attach refused: %s", why.c_str());
        refuse_peeked(fd, EINVAL, why);
        return;
    }
    case HelloRoute::kAny:
    case HelloRoute::kNotHello: // the DTI engine answers it with the protocol's refusal
        hand_to(fd, *engines[(*next)++ % n]);
        return;
    }
}

// A connection whose first message the control thread is peeking at.
struct Peek {
    int fd;
    uint8_t msg[128]; // sizeof(dti_ctl_msg)
};

enum : uint64_t { kTagSignal = 1, kTagAccept = 2, kTagTimer = 3, kTagPeek = 4 }; // kTagPeek: seq << 8 | kind

// The status line systemd shows (sd_notify STATUS=): what serves, and to how many.
std::string status_line(const Config &config, const Published &pub, size_t n_engines, size_t n_ports)
{
    uint32_t apps = 0;
    for (uint32_t i = 0; i < n_engines; i++) {
        stats::EngineCounters e{};
        if (pub.view.engine(i)->read(&e)) apps += e.apps;
    }
    return "serving on " + config.socket + " (group " + config.socket_group + "): " + std::to_string(n_engines) +
           " engine(s), " + std::to_string(n_ports) + " port(s), " + std::to_string(apps) + " application(s)";
}

int control_loop(Config &config, ControlSocket &ctl, std::vector<Port> &ports, Published &pub,
                 std::vector<std::unique_ptr<Engine>> &engines, Notifier &notify)
{
    // The watchdog is petted from the engines' heartbeat (their published
    // loop counters): a hung engine stops the pets and systemd restarts us.
    WatchdogGate gate;
    gate.start(notify.watchdog_usec(), clock_ns(CLOCK_MONOTONIC), uint32_t(engines.size()));
    // READY=1 carried the first status; later ones go when it changes.
    std::string last_status = status_line(config, pub, engines.size(), ports.size()), nerr;
    auto notify_failed = [&](bool ok) {
        if (!ok) log(LogLevel::kWarn, "%s", nerr.c_str());
    };
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    io_uring ring;
    if (sfd < 0 || io_uring_queue_init(32, &ring, 0) < 0) {
        log(LogLevel::kError, "control thread: cannot set up signalfd/io_uring: %s", std::strerror(errno));
        return 1;
    }
    signalfd_siginfo si{};
    __kernel_timespec tick{0, 100'000'000};
    auto arm_signal = [&] {
        io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        io_uring_prep_read(sqe, sfd, &si, sizeof si, 0);
        io_uring_sqe_set_data64(sqe, kTagSignal);
    };
    auto arm_accept = [&] {
        io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        io_uring_prep_multishot_accept(sqe, ctl.fd(), nullptr, nullptr, SOCK_CLOEXEC);
        io_uring_sqe_set_data64(sqe, kTagAccept);
    };
    auto arm_timer = [&] {
        io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        io_uring_prep_timeout(sqe, &tick, 0, 0);
        io_uring_sqe_set_data64(sqe, kTagTimer);
    };
    // Connections waiting for their first message: one io_uring recv with
    // MSG_PEEK each (the thread never blocks on one), bounded in number.
    std::unordered_map<uint64_t, std::unique_ptr<Peek>> peeks;
    uint64_t next_peek = 1;
    auto start_peek = [&](int fd) {
        if (peeks.size() >= kMaxPeeks) {
            dti::engine::refuse_connection(fd, EAGAIN, "too many attaches are waiting for their HELLO; try again");
            ::close(fd);
            return;
        }
        auto p = std::make_unique<Peek>();
        p->fd = fd;
        io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        if (!sqe) {
            io_uring_submit(&ring);
            sqe = io_uring_get_sqe(&ring);
        }
        io_uring_prep_recv(sqe, fd, p->msg, sizeof p->msg, MSG_PEEK);
        const uint64_t seq = next_peek++;
        io_uring_sqe_set_data64(sqe, seq << 8 | kTagPeek);
        peeks.emplace(seq, std::move(p));
    };
    auto end_peek = [&](uint64_t seq, int res, size_t *next) {
        auto it = peeks.find(seq);
        if (it == peeks.end()) return;
        std::unique_ptr<Peek> p = std::move(it->second);
        peeks.erase(it);
        if (res <= 0) ::close(p->fd); // hung up (or failed) before saying anything
        else route_connection(p->fd, p->msg, res, engines, next);
    };
    arm_signal();
    arm_accept();
    arm_timer();
    bool running = true;
    size_t next_engine = 0;
    while (running) {
        io_uring_cqe *cqe = nullptr;
        int rc = io_uring_submit_and_wait(&ring, 1);
        if (rc < 0 && rc != -EINTR) {
            log(LogLevel::kError, "control thread: io_uring: %s", std::strerror(-rc));
            break;
        }
        unsigned head, n = 0;
        io_uring_for_each_cqe(&ring, head, cqe)
        {
            n++;
            const uint64_t tag = io_uring_cqe_get_data64(cqe);
            if ((tag & 0xff) == kTagPeek) {
                end_peek(tag >> 8, cqe->res, &next_engine);
                continue;
            }
            switch (tag) {
            case kTagSignal:
                if (cqe->res == int(sizeof si)) {
                    if (si.ssi_signo == SIGHUP) {
                        log(LogLevel::kInfo, "SIGHUP: re-reading %s", config.path.c_str());
                        reload(config, config.path);
                        notify_failed(notify.status(status_line(config, pub, engines.size(), ports.size()), &nerr));
                    } else {
                        log(LogLevel::kInfo, "%s: shutting down", si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
                        running = false;
                    }
                }
                if (running) arm_signal();
                break;
            case kTagAccept:
                if (cqe->res >= 0) start_peek(cqe->res);
                if (!(cqe->flags & IORING_CQE_F_MORE) && running) arm_accept();
                break;
            case kTagTimer:
                for (uint32_t i = 0; i < ports.size(); i++) publish_port(pub.view, i, ports[i]);
                if (notify.enabled()) {
                    uint64_t loops[stats::kMaxEngines] = {};
                    const uint32_t ne = uint32_t(std::min<size_t>(engines.size(), stats::kMaxEngines));
                    for (uint32_t i = 0; i < ne; i++) {
                        stats::EngineCounters e{};
                        if (pub.view.engine(i)->read(&e)) loops[i] = e.loops;
                    }
                    if (gate.due(loops, ne, clock_ns(CLOCK_MONOTONIC))) notify_failed(notify.watchdog(&nerr));
                    std::string st = status_line(config, pub, engines.size(), ports.size());
                    if (st != last_status) {
                        notify_failed(notify.status(st, &nerr));
                        last_status = st;
                    }
                }
                if (running) arm_timer();
                break;
            }
        }
        io_uring_cq_advance(&ring, n);
    }
    io_uring_queue_exit(&ring); // cancels the peeks still waiting
    for (auto &p : peeks) ::close(p.second->fd);
    ::close(sfd);
    return 0;
}

// Forks into the background; the parent exits with the child's start-up
// result, so `eta-ppe` without --foreground still fails loudly.
int daemonize(int *report_fd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid > 0) {
        ::close(p[1]);
        char ok = 0;
        ssize_t r = read(p[0], &ok, 1);
        _exit(r == 1 && ok == '1' ? 0 : 1);
    }
    ::close(p[0]);
    setsid();
    *report_fd = p[1];
    return 0;
}

} // namespace

int daemon_main(int argc, char **argv)
{
    CLI::App app{"eta-ppe: the eta packet processing engine (owns the NIC and the engine cores, serves DTI applications)"};
    std::string config_path = "/etc/eta/ppe.toml";
    bool foreground = false, check = false, allow_root = false;
    int ready_fd = -1;
    app.add_option("-c,--config", config_path, "configuration file (TOML)")->capture_default_str();
    app.add_flag("-f,--foreground", foreground, "stay in the foreground (systemd, tests)");
    app.add_option("--ready-fd", ready_fd, "write \"READY\\n\" to this fd once serving, then close it")
        ->check(CLI::Range(0, 1 << 20));
    app.add_flag("--check", check, "validate the configuration and the machine, then exit");
    app.add_flag("--allow-root", allow_root, "run as root (refused otherwise; ETA_PPE_ALLOW_ROOT=1 does the same)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e);
    }

    Config config;
    std::string err;
    if (!load_config(config_path, &config, &err)) {
        std::fprintf(stderr, "eta-ppe: %s\n", err.c_str());
        return 1;
    }
    g_log_level.store(config.log_level);
    Machine machine = Machine::detect();
    std::vector<EngineCore> engines;
    if (!resolve_cores(config, machine, device_numa_node(config.ports[0].device), &engines, &err)) {
        std::fprintf(stderr, "eta-ppe: %s\n", err.c_str());
        return 1;
    }
    {
        // Every application's region holds a slot (two rings) per socket; the
        // rings at their starting sizes must fit (they grow while they still
        // fit; the slots' reserve for growth is address space, not memory).
        const dti::engine::Limits lim = dti_limits(config);
        const uint64_t need = dti::engine::region_bytes_in_use(lim);
        if (dti::engine::region_bytes(lim) == 0 || need > config.limits.memory_per_app) {
            std::fprintf(stderr,
                         "eta-ppe: %s: limits.memory_per_app: %llu MiB cannot hold a region for sockets_per_app = %u "
                         "sockets with receive + send rings of %u KiB each (tcp.rcvbuf + tcp.sndbuf; "
                         "needs %llu MiB); raise memory_per_app or lower sockets_per_app or the ring sizes\n",
                         config.path.c_str(), static_cast<unsigned long long>(config.limits.memory_per_app >> 20),
                         config.limits.sockets_per_app, (config.tcp.rcvbuf + config.tcp.sndbuf) >> 10,
                         static_cast<unsigned long long>((need + (1 << 20) - 1) >> 20));
            return 1;
        }
    }
    bool use_huge = false;
    std::string cap_warning;
    if (!check_capabilities(config, uint32_t(engines.size()), &err, &cap_warning) ||
        !check_environment(config, &use_huge, &err)) {
        std::fprintf(stderr, "eta-ppe: %s\n", err.c_str());
        return 1;
    }
    if (!cap_warning.empty()) std::fprintf(stderr, "eta-ppe: warning: %s\n", cap_warning.c_str());
    std::vector<int> engine_pus, control_pus;
    for (auto &e : engines) engine_pus.insert(engine_pus.end(), e.core_pus.begin(), e.core_pus.end());
    for (int pu : machine.pus)
        if (std::find(engine_pus.begin(), engine_pus.end(), pu) == engine_pus.end()) control_pus.push_back(pu);
    // Engines on every core (allowed when they nap: adaptive or sleep): the
    // control thread and DPDK's threads share them.
    if (control_pus.empty()) control_pus = machine.pus;
    const std::string cpus = format_cpu_list(engine_pus);
    if (check) {
        std::printf("%s: configuration OK: %zu engine(s) on CPU %s (idle %s), control thread on CPU %s, %zu port(s), "
                    "memory %s, control socket %s\n",
                    config.path.c_str(), engines.size(), cpus.c_str(), to_string(config.idle),
                    format_cpu_list(control_pus).c_str(), config.ports.size(), use_huge ? "hugepages" : "no-huge",
                    config.socket.c_str());
        std::printf("%s: %s\n", config.path.c_str(),
                    describe_placement(config, machine, device_numa_node(config.ports[0].device), engines).c_str());
        for (const PortConfig &p : config.ports)
            std::fputs(flow::check_listing(config.path, p, uint32_t(engines.size())).c_str(), stdout);
        if (config.copy_engine == CopyKind::kDmadev) {
            std::string devs;
            for (const std::string &d : config.copy_devices) devs += (devs.empty() ? "" : ", ") + d;
            std::printf("%s: receive copies of %u bytes or more on DMA device(s) %s (found and checked at start, "
                        "once DPDK is up)\n",
                        config.path.c_str(), config.copy_threshold, devs.c_str());
        }
        return 0;
    }
    if (!refuse_root(allow_root, &err)) {
        std::fprintf(stderr, "eta-ppe: %s\n", err.c_str());
        return 1;
    }
    // Under systemd (Type=notify): READY once serving, STATUS, WATCHDOG.
    Notifier notify;
    if (!notify.open_from_environment(&err)) {
        std::fprintf(stderr, "eta-ppe: %s\n", err.c_str());
        return 1;
    }

    // From here until the control socket listens, <socket>.starting names
    // this process: eta-run waits for it rather than refuse a --require
    // program (starting.h). Without it starting goes on; eta-run then refuses.
    StartingMark starting;
    if (!starting.write(config.socket, getpid(), &err)) log(LogLevel::kWarn, "%s", err.c_str());
    int daemon_fd = -1;
    if (!foreground && daemonize(&daemon_fd) != 0) {
        std::fprintf(stderr, "eta-ppe: cannot go to the background: %s\n", std::strerror(errno));
        return 1;
    }
    if (!foreground && !starting.write(config.socket, getpid(), &err)) log(LogLevel::kWarn, "%s", err.c_str());
    // Signals are taken by the control thread's signalfd; every thread
    // (EAL's included) inherits the mask set here.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal(SIGPIPE, SIG_IGN);

    Published pub;
    Eal eal;
    std::vector<Port> ports;
    std::vector<std::unique_ptr<DmaCopyEngine>> copies; // [copy] dmadev: one per engine, outlive them
    SteerMesh mesh; // before `running`: engines use its rings and bells until they stop
    std::vector<std::unique_ptr<Engine>> running;
    ControlSocket ctl;
    TscClock clock;
    auto fail = [&](const std::string &msg) {
        log(LogLevel::kError, "%s", msg.c_str());
        for (auto &e : running) e->stop();
        running.clear();
        copies.clear();
        for (auto &p : ports) p.close();
        ctl.close();
        eal.cleanup();
        pub.remove();
        starting.remove();
        return 1;
    };
    if (!pub.create(config, engines, cpus, &err)) return fail(err);
    copy_str(pub.view.header()->memory_mode, sizeof pub.view.header()->memory_mode, use_huge ? "huge" : "no-huge");
    if (!eal.init(config, use_huge, control_pus, uint32_t(engines.size()), &err)) return fail(err);
    pub.view.header()->tsc_hz = rte_get_tsc_hz();
    if (config.copy_engine == CopyKind::kDmadev) {
        for (const std::string &d : config.copy_devices) {
            auto e = DmaCopyEngine::open(dmadev_name(d), config.copy_ring, &err);
            if (!e) return fail(config.path + ":" + std::to_string(config.copy_line) + ": copy.device: " + err);
            log(LogLevel::kInfo, "copy engine %s: %u descriptors, payloads of %u bytes or more", e->name(),
                e->ring_size(), config.copy_threshold);
            std::string note;
            if (!inject_test_dma_fault(*e, &note, &err)) return fail(err);
            if (!note.empty()) log(LogLevel::kWarn, "%s", note.c_str());
            copies.push_back(std::move(e));
        }
    }
    ports.reserve(config.ports.size()); // engines keep pointers into it
    // A pool also lends frames that wait in other engines' steering rings.
    const uint32_t mbufs = config.ooo_pool_frames + 64 /* ARP queue */ + 4 * config.burst + 1024 +
                           uint32_t(engines.size() - 1) * kSteerRingEntries;
    for (auto &pc : config.ports) {
        ports.emplace_back();
        if (!ports.back().open(pc, engines, mbufs, &err, uint16_t(ports.size() - 1))) {
            ports.pop_back();
            return fail(err);
        }
    }
    clock.init();
    if (!mesh.create(uint32_t(engines.size()), kSteerRingEntries, &err)) return fail(err);
    for (uint32_t i = 0; i < engines.size(); i++) {
        auto e = std::make_unique<Engine>(i, engines[i], config, ports, pub.view, clock, mesh);
        if (i < copies.size()) e->set_copy_engine(copies[i].get());
        if (!e->start(&err)) return fail(err);
        running.push_back(std::move(e));
    }
    for (uint32_t i = 0; i < ports.size(); i++) publish_port(pub.view, i, ports[i]);
    if (!ctl.open(config, &err)) return fail(err);
    if (!apply_socket_group(config, &err)) return fail(err);
    starting.remove(); // the socket answers now

    pub.set_state(stats::State::kRunning);
    for (auto &p : ports)
        log(LogLevel::kInfo, "port %s (%s) up: %s mtu %u, %02x:%02x:%02x:%02x:%02x:%02x", p.config.name.c_str(),
            p.config.device.c_str(), format_addresses(p.config).c_str(), p.config.mtu, p.mac.b[0], p.mac.b[1],
            p.mac.b[2], p.mac.b[3], p.mac.b[4], p.mac.b[5]);
    log(LogLevel::kInfo, "serving on %s: %zu engine(s) on CPU %s, idle %s, memory %s, EAL prefix %s",
        config.socket.c_str(), engines.size(), cpus.c_str(), to_string(config.idle), use_huge ? "huge" : "no-huge",
        eal.prefix().c_str());
    wait_addrs6_settled(running, config, 5000); // READY: the addresses usable (engine.h)
    if (!notify.ready(status_line(config, pub, engines.size(), ports.size()), &err)) log(LogLevel::kWarn, "%s", err.c_str());
    if (ready_fd >= 0) {
        [[maybe_unused]] ssize_t r = write(ready_fd, "READY\n", 6);
        ::close(ready_fd);
    }
    if (daemon_fd >= 0) {
        [[maybe_unused]] ssize_t r = write(daemon_fd, "1", 1);
        ::close(daemon_fd);
        int null = ::open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            ::close(null);
        }
    }

    const int rc = control_loop(config, ctl, ports, pub, running, notify);
    if (!notify.stopping(&err)) log(LogLevel::kWarn, "%s", err.c_str());

    // Graceful stop: no new attaches, engines reset what is left and stop,
    // then the NIC is released and the runtime files go.
    pub.set_state(stats::State::kStopping);
    ctl.close();
    for (auto &e : running) e->stop();
    running.clear();
    copies.clear();
    for (auto &p : ports) p.close();
    ports.clear();
    eal.cleanup();
    pub.set_state(stats::State::kStopped);
    pub.remove();
    log(LogLevel::kInfo, "stopped");
    return rc;
}

} // namespace ppe
