// ppe/src/engine.cc: the engine loop.
//
//   rx burst (each port) → stack.input
//   application command queues → stack (AppHost::poll)
//   stack.poll (timers, deferred ACKs, output) → tx burst inside PacketIo
//   stack.events → application event queues, wakeups collected
//   one io_uring submission for all wakeups of this iteration
//   idle: spin, or (adaptive/sleep) one io_uring wait until a doorbell, a
//   kick from the control thread, the next stack timer, or max_sleep_us.
// The counters it publishes for eta-stat: engine_publish.cc.
#include "engine.h"

#include "engine_ring.h"
#include "log.h"
#include "rx_wake.h"

#include <rte_cycles.h>
#include <rte_lcore.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ppe {

using namespace engine_ring;

namespace {

uint64_t clock_ns(clockid_t id)
{
    timespec ts;
    clock_gettime(id, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// A port shared with the kernel (issue 29): the ephemeral ports MARS picks
// itself (native DTI clients; the shim's connects take the kernel's picks,
// preload/README.md) lie outside the kernel's ip_local_port_range, so that
// no connection of MARS's can have a 4-tuple of one of the kernel's: above
// the range when there is room there, else below it (from 1024). Read at
// start; false (MARS's default range kept) when it cannot be read or leaves
// no room.
bool ephemeral_outside_kernel(mars::StackConfig &sc)
{
    unsigned lo = 0, hi = 0;
    FILE *f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    const bool ok = f && std::fscanf(f, "%u %u", &lo, &hi) == 2;
    if (f) std::fclose(f);
    if (!ok || lo == 0 || lo > hi || hi > 65535) return false;
    if (hi < 65535) {
        sc.ephemeral_lo = uint16_t(hi + 1);
        sc.ephemeral_hi = 65535;
    } else if (lo > 1024) {
        sc.ephemeral_lo = 1024;
        sc.ephemeral_hi = uint16_t(lo - 1);
    } else {
        return false;
    }
    return true;
}

} // namespace

uint32_t rx_ring_bytes(const mars::TcpConfig &t)
{
    uint32_t ring = t.rcvbuf;
    while (ring < t.rcvbuf_max) ring <<= 1;
    return ring;
}

dti::engine::Limits dti_limits(const Config &c)
{
    dti::engine::Limits lim;
    lim.max_attachments = c.limits.max_apps;
    lim.max_sockets = c.limits.sockets_per_app;
    // Each socket's receive ring starts at tcp.rcvbuf; with autotuning it
    // grows in place (BufferProvider::grow_rx -> Engine::grow_rx) up to the
    // power of two that holds tcp.rcvbuf_max, which every slot reserves.
    // memory_per_app bounds what the rings use, not what slots reserve.
    lim.rx_ring_size = c.tcp.rcvbuf;
    lim.rx_ring_max = rx_ring_bytes(c.tcp);
    lim.tx_ring_size = c.tcp.sndbuf;
    lim.tx_ring_max = c.tcp.sndbuf;
    while (lim.tx_ring_max < c.sndbuf_max) lim.tx_ring_max <<= 1; // SO_SNDBUF's largest ring
    lim.max_region_bytes = c.limits.memory_per_app;
    lim.allowed_uids = c.limits.allowed_uids;
    return lim;
}

void TscClock::init()
{
    hz_ = rte_get_tsc_hz();
    tsc0_ = rte_rdtsc();
    ns0_ = clock_ns(CLOCK_MONOTONIC);
    mult_ = (static_cast<u128>(1'000'000'000ull) << 32) / hz_;
}

uint64_t TscClock::now_ns() const { return ns_of_tsc(rte_rdtsc()); }

uint64_t TscClock::ns_of_tsc(uint64_t tsc) const
{
    const uint64_t d = tsc - tsc0_;
    return ns0_ + uint64_t((static_cast<u128>(d) * mult_) >> 32);
}

Engine::Engine(uint32_t index, const EngineCore &core, const Config &config, std::vector<Port> &ports,
               const stats::View &stats, const TscClock &clock, SteerMesh &mesh, PortIoMaker make_io)
    : index_(index), core_(core), config_(config), ports_(ports), stats_(stats), clock_(clock), mesh_(mesh),
      n_engines_(mesh.engines()), steering_(mesh, index), make_io_(std::move(make_io))
{}

Engine::~Engine()
{
    stop();
    if (ring_up_) io_uring_queue_exit(&ring_);
    if (kick_fd_ >= 0) close(kick_fd_);
}

bool Engine::start(std::string *error)
{
    kick_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (kick_fd_ < 0) {
        *error = std::string("eventfd: ") + std::strerror(errno);
        return false;
    }
    // Other engines ring it when they steer frames to us while we nap.
    mesh_.bell(index_).fd.store(kick_fd_, std::memory_order_relaxed);
    mesh_.bell(index_).sleeping.store(&sleeping_, std::memory_order_release);
    thread_ = std::thread([this] { thread_main(); });
    while (setup_state_.load(std::memory_order_acquire) == 0) usleep(1000); // bounded by setup itself
    if (setup_state_.load() < 0) {
        *error = setup_error_;
        thread_.join();
        return false;
    }
    return true;
}

void Engine::stop()
{
    if (!thread_.joinable()) return;
    stop_.store(true, std::memory_order_release);
    kick();
    thread_.join();
}

void Engine::kick()
{
    // Only a sleeping engine needs the syscall; a spinning one sees the
    // mailbox or the stop flag on its next iteration.
    // A read-modify-write (a full barrier) orders our mailbox push or stop
    // flag before this check, against the engine's "sleeping, then look
    // again" on the other side: one of the two always sees the other.
    if (sleeping_.fetch_add(0, std::memory_order_seq_cst)) {
        uint64_t one = 1;
        ssize_t r = write(kick_fd_, &one, sizeof one);
        (void)r; // EAGAIN: the counter is already non-zero, the engine will wake
    }
}

void Engine::thread_main()
{
    std::string err;
    if (!setup(&err)) {
        setup_error_ = err;
        setup_state_.store(-1, std::memory_order_release);
        return;
    }
    setup_state_.store(1, std::memory_order_release);
    loop();
    rte_thread_unregister();
}

bool Engine::setup(std::string *error)
{
    const std::string name = "engine " + std::to_string(index_) + " (CPU " + std::to_string(core_.pu) + ")";
    if (!pin_thread(core_.pu, error)) {
        *error = name + ": " + *error;
        return false;
    }
    if (rte_thread_register() != 0) {
        *error = name + ": DPDK has no free lcore slot for the engine thread";
        return false;
    }
    // [engine] nice (0: as inherited): below 0 the engine wins its core from
    // a CPU hog, which otherwise holds it for whole scheduler slices while
    // frames and doorbells wait (issue 35); but also from the kernel threads
    // a veth/af_packet port needs, so it is not the default.
    if (config_.nice != 0 && setpriority(PRIO_PROCESS, id_t(syscall(SYS_gettid)), config_.nice) != 0)
        log(LogLevel::kWarn, "%s: cannot set its nice value to %d (%s; needs CAP_SYS_NICE): it competes with other "
            "programs on its core as an ordinary thread", name.c_str(), config_.nice, std::strerror(errno));
    // [engine] slice_us (cpu_contention.h): a napping engine woken by a frame
    // or a doorbell runs within about a slice even beside a CPU hog.
    if (config_.slice_us != 0 && config_.idle != IdlePolicy::kSpin) {
        std::string why;
        if (!request_slice(config_.slice_us, &why))
            log(LogLevel::kInfo, "%s: keeps the kernel's scheduler slice (%s); beside a CPU hog a wake-up may wait "
                "for the hog's slice", name.c_str(), why.c_str());
    }
    int rc = io_uring_queue_init(256, &ring_, 0);
    if (rc < 0) {
        *error = name + ": io_uring: " + std::strerror(-rc);
        return false;
    }
    ring_up_ = true;

    kernel_counters_.assign(ports_.size(), stats::KernelCounters{});
    kernel_io_.assign(ports_.size(), nullptr);
    for (size_t p = 0; p < ports_.size(); p++) {
        Port &port = ports_[p];
        if (make_io_) {
            ios_.push_back(make_io_(port, uint16_t(index_), uint16_t(config_.burst)));
        } else if (port.is_vnet()) {
            ios_.push_back(std::make_unique<VnetIo>(port.vnet.fds[index_], port.vnet.rx_pools[index_],
                                                    port.pools[index_],
                                                    index_ < port.tso_pools.size() ? port.tso_pools[index_] : nullptr,
                                                    port.id, port.offloads, &port.vnet.counters[index_]));
        } else {
            auto io = std::make_unique<MbufIo>(port, uint16_t(index_), uint16_t(config_.burst));
            io->set_prefetch(config_.prefetch);
            // A port shared with the kernel (kernel_tap.h): this engine's tap
            // queue; engine 0 hands ARP on (every engine sees it).
            if (port.kernel.up()) {
                io->set_kernel(port.kernel.id(), index_ == 0, &kernel_counters_[p]);
                kernel_io_[p] = io.get();
            }
            ios_.push_back(std::move(io));
        }
        if (!ios_.back()) {
            *error = name + ": port \"" + port.config.name + "\": no packet I/O for its queue";
            return false;
        }
        mars::StackConfig sc;
        sc.mac = port.mac;
        sc.ip = port.config.ip;
        sc.prefix = port.config.prefix;
        for (const mars::Ip6Prefix &a : port.config.addr6)
            if (sc.n_addr6 < mars::StackConfig::kMaxAddr6) sc.addr6[sc.n_addr6++] = a; // (config.cc bounds it)
        sc.mtu = port.config.mtu;
        stack_routes(config_, port.config, &sc); // IPv4 and IPv6 (config.h)
        sc.max_sockets = config_.max_sockets;
        sc.ooo_pool_frames = config_.ooo_pool_frames;
        sc.ooo_frames_per_conn = config_.ooo_frames_per_conn;
        sc.arp_probes = config_.arp_probes;
        sc.arp_retrans_ns = uint64_t(config_.arp_retrans_ms) * 1'000'000;
        if (getrandom(sc.isn_secret, sizeof sc.isn_secret, 0) != sizeof sc.isn_secret) {
            *error = name + ": getrandom failed";
            return false;
        }
        // Several engines: active opens take local ports whose flows this
        // engine owns, so their segments never need a steering hop.
        sc.engine = index_;
        if (n_engines_ > 1) {
            sc.steer = flow_owner_hook;
            sc.steer6 = flow_owner6_hook;
            sc.steer_arg = const_cast<uint32_t *>(&n_engines_);
            // Every engine sees each neighbour solicitation and advertisement
            // (steer.h); the first answers them and probes for its addresses,
            // the others learn from them and run DAD silently.
            sc.nd_follower = index_ != 0;
        }
        sc.owner_of = owner_uid;
        sc.owner_arg = this;
        sc.tcp = config_.tcp;
        sc.strands = config_.strands;
        sc.prefetch = config_.prefetch;
        sc.pass_unclaimed = kernel_io_[p] != nullptr; // what no eta socket claims goes to the kernel
        if (kernel_io_[p] && ephemeral_outside_kernel(sc) && index_ == 0)
            log(LogLevel::kInfo, "port \"%s\": shared with the kernel: MARS's own ephemeral ports are %u-%u, outside "
                "the kernel's ip_local_port_range", port.config.name.c_str(), sc.ephemeral_lo, sc.ephemeral_hi);
        if (p == 0) { // application sockets live on the first port's stack
            sc.copy_engine = copy_engine_;
            sc.copy_threshold = config_.copy_threshold;
            sc.copy_drain_polls = config_.copy_drain_polls;
        }
        std::string serr;
        auto stack = mars::Stack::create(sc, *ios_.back(), buffers_, &serr);
        if (!stack) {
            *error = name + ": port \"" + port.config.name + "\": the TCP/IP stack refused its config: " + serr;
            return false;
        }
        stacks_.push_back(std::move(stack));
        if (kernel_io_[p]) has_kernel_ = true;
    }
    // DTI: applications' sockets live on the first port's stack.
    dti_stack_ = stacks_[0].get();
    transport_ = std::make_unique<MarsTransport>(dti_stack_, now_);
    dti::engine::Limits lim = dti_limits(config_);
    lim.engine_index = index_;
    lim.n_engines = n_engines_;
    lim.app_ip = ports_[0].config.ip;
    if (!ports_[0].config.addr6.empty()) std::memcpy(lim.app_ip6, ports_[0].config.addr6[0].addr.b, 16);
    {
        // The port's link-local address, as MARS makes it (RFC 4291 2.5.1:
        // fe80::/64, the MAC's modified EUI-64), for libdti's placement.
        const uint8_t *m = ports_[0].mac.b;
        const uint8_t ll[16] = {0xfe, 0x80, 0,    0,    0,    0,    0,    0,
                                uint8_t(m[0] ^ 2), m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
        std::memcpy(lim.app_ll6, ll, 16);
    }
    std::string derr;
    dti_ = dti::engine::Server::create(*transport_, lim, &derr);
    if (!dti_) {
        *error = name + ": the DTI limits are unusable ([limits] and [tcp] rcvbuf/sndbuf): " + derr;
        return false;
    }
    buffers_.engine = dti_.get();
    latency_.setup(&dti_->trace(), stats_.header()->latency_off ? stats_.latency(index_) : nullptr,
                   config_.latency_sample, &ios_[0]->tx_packets,
                   [](const void *c) { return static_cast<const TscClock *>(c)->now_ns(); }, &clock_,
                   [](const void *c, uint64_t tsc) { return static_cast<const TscClock *>(c)->ns_of_tsc(tsc); });
    counters_.pu = core_.pu;
    if (!make_io_) find_rx_wakes();
    return true;
}

void Engine::find_rx_wakes()
{
    for (const Port &port : ports_) {
        if (port.is_vnet()) { // its queue's own packet socket
            rx_wakes_.push_back(RxWake{port.vnet.fds[index_], false});
            log(LogLevel::kInfo, "engine %u: port \"%s\": frames wake the engine when it sleeps (1 vnet socket)", index_,
                port.config.name.c_str());
            continue;
        }
        RxWakeFds w = find_rx_wake_fds(port.info.driver_name, port.info.if_index, uint16_t(index_), port.queues);
        for (int fd : w.fds) rx_wakes_.push_back(RxWake{fd, false});
        // What the kernel sends on a shared port's tap ends a nap too.
        if (port.kernel.up()) {
            const int fd = port.kernel.wake_fd(uint16_t(index_));
            if (fd >= 0) rx_wakes_.push_back(RxWake{fd, false});
            else
                log(LogLevel::kInfo, "engine %u: port \"%s\": no wake-up from its kernel interface; what the kernel "
                    "sends waits for the end of a nap (max_sleep_us)", index_, port.config.name.c_str());
        }
        if (!w.fds.empty())
            log(LogLevel::kInfo, "engine %u: port \"%s\": frames wake the engine when it sleeps (%zu %s socket%s)", index_,
                     port.config.name.c_str(), w.fds.size(), w.kind.c_str(), w.fds.size() == 1 ? "" : "s");
    }
}

// One poll per queue socket, armed only while none is outstanding: it
// completes at the first frame (or at once when frames wait already).
void Engine::arm_rx_wakes()
{
    for (size_t i = 0; i < rx_wakes_.size(); i++) {
        if (rx_wakes_[i].armed) continue;
        io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
        if (!sqe) return; // full: this nap stays bounded as before
        io_uring_prep_poll_add(sqe, rx_wakes_[i].fd, POLLIN);
        io_uring_sqe_set_data64(sqe, uint64_t(i) << 8 | kTagRxWake);
        rx_wakes_[i].armed = true;
    }
}

void Engine::arm_kick_read()
{
    if (kick_read_armed_) return;
    io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
    if (!sqe) return;
    io_uring_prep_read(sqe, kick_fd_, &kick_buf_, sizeof kick_buf_, 0);
    io_uring_sqe_set_data64(sqe, kTagKick);
    kick_read_armed_ = true;
}

void Engine::drain_completions()
{
    io_uring_cqe *cqe;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&ring_, head, cqe)
    {
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        const uint64_t kind = tag & 0xff;
        if (kind == kTagKick) {
            kick_read_armed_ = false;
        } else if (kind == kTagRxWake) {
            if ((tag >> 8) < rx_wakes_.size()) rx_wakes_[tag >> 8].armed = false;
            if (cqe->res > 0 && draining_sleep_) counters_.rx_wakes++;
        } else if (kind == kTagControl || kind == kTagDoorbell) {
            // Doorbells only need to wake us; the DTI engine reads them.
            if (kind == kTagControl) on_control_ready(tag >> 8);
            if (!(cqe->flags & IORING_CQE_F_MORE) && cqe->res != -ECANCELED) rearm(tag);
        } else if (kind == kTagHello) {
            for (size_t i = 0; i < hellos_.size(); i++)
                if (hellos_[i].second == tag >> 8) {
                    const int fd = hellos_[i].first;
                    hellos_.erase(hellos_.begin() + long(i));
                    try_attach(fd);
                    break;
                }
        }
        n++;
    }
    io_uring_cq_advance(&ring_, n);
}

// Frames other engines handed us, to the stack of the port they came in on
// (mbuf->port), in runs so each stack still gets bursts.
void Engine::input_steered(mars::PacketRef *frames, uint16_t n, uint64_t now)
{
    for (uint16_t i = 0; i < n;) {
        const uint16_t port = static_cast<rte_mbuf *>(frames[i].handle)->port;
        uint16_t j = i + 1;
        while (j < n && static_cast<rte_mbuf *>(frames[j].handle)->port == port) j++;
        size_t p = 0;
        while (p < ports_.size() && ports_[p].id != port) p++;
        if (p < stacks_.size()) stacks_[p]->input(frames + i, uint16_t(j - i), now);
        else ios_[0]->release(frames + i, uint16_t(j - i)); // cannot happen: every port has a stack
        i = j;
    }
}

// Receive: first what other engines steered to us (older than our own
// queue's frames), then each port's burst, sorted by flow owner.
uint32_t Engine::receive_all(uint64_t now)
{
    uint32_t work = 0;
    mars::PacketRef burst[256];
    const uint16_t bsz = uint16_t(config_.burst);
    if (steering_.active()) {
        const uint16_t n = steering_.drain(burst, bsz);
        if (n) input_steered(burst, n, now);
        work += n;
    }
    for (size_t p = 0; p < stacks_.size(); p++) {
        const uint16_t n = ios_[p]->receive(burst, bsz);
        if (!n) continue;
        work += n;
        const uint16_t mine = steering_.sort(burst, n);
        if (!latency_.due(mine)) [[likely]] {
            if (mine) stacks_[p]->input(burst, mine, now);
        } else { // latency: one in latency_sample frames is traced (latency_sampler.h)
            latency_.input_sampled(p == 0, mine, [&] { stacks_[p]->input(burst, mine, now); });
        }
    }
    if (const uint32_t owners = steering_.flush()) wake_owners(owners);
    if (has_kernel_) work += kernel_io(now);
    return work;
}

// Ports shared with the kernel (kernel_tap.h): what the stacks handed back
// in this loop goes to the tap in one burst per port; then up to one burst
// the kernel sent comes off the tap and out the port. Reading the tap is a
// system call (net_tap's read()), so an idle tap is looked at only every
// kKernelPollNs (a busy one every loop); a napping engine is woken by its fd.
uint32_t Engine::kernel_io(uint64_t now)
{
    uint32_t work = 0;
    const bool look = kernel_busy_ || now - kernel_polled_ns_ >= kKernelPollNs;
    if (look) kernel_polled_ns_ = now;
    kernel_busy_ = false;
    for (MbufIo *io : kernel_io_) {
        if (!io) continue;
        io->flush_kernel();
        if (!look) continue;
        const uint16_t n = io->forward_from_kernel(uint16_t(config_.burst));
        if (n) kernel_busy_ = true;
        work += n;
    }
    return work;
}

// An owner that naps would find our frames only at the end of its nap (up to
// max_sleep_us): ring its kick fd, through our io_uring, submitted with this
// loop's application wakeups. The fence orders our ring enqueue before the
// look at its flag, against its "sleeping, then look at the rings"
// (idle_sleep): one of the two always sees the other.
void Engine::wake_owners(uint32_t engines)
{
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (uint32_t e = 0; e < n_engines_; e++) {
        if (!(engines >> e & 1)) continue;
        const std::atomic<uint32_t> *sleeping = mesh_.bell(e).sleeping.load(std::memory_order_acquire);
        if (!sleeping || !sleeping->load(std::memory_order_relaxed)) continue;
        io_uring_sqe *sqe = get_sqe(&ring_);
        io_uring_prep_write(sqe, mesh_.bell(e).fd.load(std::memory_order_relaxed), &kOne, sizeof kOne, 0);
        io_uring_sqe_set_data64(sqe, kTagWake);
        kicks_queued_ = true;
        counters_.owner_kicks++;
    }
}

uint32_t Engine::poll_once(uint64_t now)
{
    uint32_t work = receive_all(now);
    // Commands in, then transport events and completions out.
    const bool traced = latency_.on(); // a sampled request in flight (latency_sampler.h)
    uint64_t t_poll = 0;
    if (traced) [[unlikely]] t_poll = latency_.before_dti();
    work += dti_->poll();
    if (traced) [[unlikely]] latency_.after_dti(t_poll, !dti_->wakeups().empty());
    // An attachment detached inside poll() (broken region): drop its polls
    // before anything can reuse its fd numbers.
    if (dti_->stats().detaches != seen_detaches_) {
        seen_detaches_ = dti_->stats().detaches;
        reconcile_watches();
    }
    if (traced) [[unlikely]] latency_.before_output();
    for (auto &s : stacks_) s->poll(now);
    if (traced) [[unlikely]] latency_.after_output();
    // Stacks of other ports carry no application sockets; drain their queue.
    mars::SockEvent evs[64];
    for (auto &s : stacks_)
        if (s.get() != dti_stack_) work += s->events(evs, 64);
    // Wakeups of sleeping applications: one submission for all of them.
    const auto wake = dti_->wakeups();
    if (!wake.empty()) {
        for (int fd : wake) {
            io_uring_sqe *sqe = get_sqe(&ring_);
            io_uring_prep_write(sqe, fd, &kOne, sizeof kOne, 0);
            io_uring_sqe_set_data64(sqe, kTagWake);
        }
        io_uring_submit(&ring_); // also carries this loop's owner kicks
        kicks_queued_ = false;
        counters_.wakeups += wake.size();
        counters_.wake_submits++;
        dti_->clear_wakeups();
    }
    if (kicks_queued_) {
        io_uring_submit(&ring_);
        kicks_queued_ = false;
    }
    return work;
}

void Engine::idle_sleep(uint64_t now)
{
    // Arm, then check: announce the sleep (kick() writes the wake fd only
    // while we sleep), then look once more before blocking so a stop
    // request published meanwhile is not missed.
    sleeping_.exchange(1, std::memory_order_seq_cst);
    if (stop_.load(std::memory_order_acquire) || !inbox_.empty() || steering_.has_incoming()) {
        sleeping_.store(0, std::memory_order_relaxed);
        return;
    }
    // The same for applications: "engine sleeping" in every region, then a
    // last look at their command queues.
    if (!dti_->prepare_sleep()) {
        sleeping_.store(0, std::memory_order_relaxed);
        return;
    }
    arm_kick_read();
    arm_rx_wakes();

    // Most NICs cannot wake us (no rx interrupt DPDK hands out), so naps
    // are bounded; they double while nothing happens, from 50 us up to
    // max_sleep_us, so a long-idle engine wakes rarely. Where the port sits
    // on a kernel socket (af_packet, af_xdp) its poll above ends the nap at
    // the first frame.
    nap_ns_ = std::min<uint64_t>(nap_ns_ ? nap_ns_ * 2 : 50'000, uint64_t(config_.max_sleep_us) * 1000);
    uint64_t until = now + nap_ns_;
    for (auto &s : stacks_) until = std::min(until, s->next_deadline_ns());
    if (until > now) {
        const uint64_t d = until - now;
        __kernel_timespec ts{int64_t(d / 1'000'000'000), int64_t(d % 1'000'000'000)};
        io_uring_cqe *cqe = nullptr;
        // One syscall: submits what is queued and waits for the first
        // completion or the timeout.
        int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
        (void)rc; // -ETIME: the timer; -EINTR: a signal; both mean "poll again"
        counters_.sleeps++;
    }
    draining_sleep_ = true; // what ended this sleep
    drain_completions();
    draining_sleep_ = false;
    dti_->end_sleep();
    sleeping_.store(0, std::memory_order_relaxed);
}

void Engine::loop()
{
    for (size_t p = 0; p < stacks_.size(); p++) stacks_[p]->announce(clock_.now_ns());
    uint64_t last_work = clock_.now_ns();
    uint64_t next_publish = 0, next_conn_publish = 0, published_at = 0;
    const uint64_t spin_ns = uint64_t(config_.spin_us) * 1000;
    const uint64_t start_tsc = rte_rdtsc();
    // An adaptive engine naps at once while its CPU is shared (cpu_contention.h).
    bool yielding = false;
    if (config_.idle == IdlePolicy::kAdaptive && config_.yield_when_contended &&
        !contention_.open_for_this_thread())
        log(LogLevel::kInfo, "engine %u: no /proc/thread-self/schedstat; it spins after work even on a shared CPU", index_);
    while (!stop_.load(std::memory_order_acquire)) {
        const uint64_t t0 = rte_rdtsc();
        const uint64_t now = clock_.now_ns();
        now_ = now;
        if (!inbox_.empty()) accept_connections();
        const uint32_t work = poll_once(now);
        counters_.loops++;
        const uint64_t t1 = rte_rdtsc();
        if (work) {
            counters_.busy_polls++;
            counters_.busy_cycles += t1 - t0;
            last_work = now;
            nap_ns_ = 0;
        } else {
            counters_.idle_polls++;
        }
        if (now >= next_publish) {
            counters_.total_cycles = t1 - start_tsc;
            const bool conns = now >= next_conn_publish;
            yielding = contention_.sample(now);
            counters_.contended_windows = contention_.contended_windows();
            publish(now, conns);
            published_at = now;
            next_publish = now + 10'000'000; // 10 ms
            if (conns) next_conn_publish = now + 250'000'000;
        }
        if (!work) {
            if (config_.idle == IdlePolicy::kSleep ||
                (config_.idle == IdlePolicy::kAdaptive && (yielding || now - last_work >= spin_ns))) {
                // Work done since the last snapshot is published before the
                // nap: a sleeping engine's counters are current.
                if (last_work >= published_at) publish(now, false);
                published_at = now;
                idle_sleep(now);
            } else {
                rte_pause();
            }
        }
        // Completions of wakeup writes and re-armed reads are collected
        // without a syscall.
        if (io_uring_cq_ready(&ring_)) drain_completions();
    }
    shutdown_all(clock_.now_ns());
}

void Engine::shutdown_all(uint64_t now)
{
    // Applications first: pending commands complete with an error, their
    // sockets are aborted (RST), regions are marked gone and detached.
    now_ = now;
    dti_->shutdown();
    for (int fd; !inbox_.empty();) {
        fd = int(reinterpret_cast<intptr_t>(inbox_.pop()));
        close(fd);
    }
    for (auto &h : hellos_) close(h.first);
    hellos_.clear();
    // Reset every connection that is left, then let the RSTs leave: a few
    // bounded rounds of output.
    for (auto &s : stacks_) {
        std::vector<mars::SockId> open;
        s->for_each_socket(
            [](mars::SockId id, const mars::SockInfo &, uint64_t, void *arg) {
                static_cast<std::vector<mars::SockId> *>(arg)->push_back(id);
            },
            &open);
        for (mars::SockId id : open) s->abort(id);
    }
    mars::SockEvent evs[64];
    for (int i = 0; i < 8; i++)
        for (auto &s : stacks_) {
            s->poll(now);
            while (s->events(evs, 64)) {}
        }
    publish(clock_.now_ns(), true);
}

} // namespace ppe
