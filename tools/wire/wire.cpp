// eta-wire: a userspace impairment wire for the lab, for kernels built
// without sch_netem. It reads raw Ethernet frames from one interface through
// an AF_PACKET receive ring, applies tc-netem style impairments (impair.hpp),
// and sends the frames out of another interface with AF_PACKET, bypassing
// that interface's qdiscs and tc hooks. Frames travel as they are: no
// checksum or offload state is changed, only the bits corruption flips.
//
//   eta-wire --from IFACE --to IFACE --config FILE [--status FILE]
//            [--pidfile FILE] [--log FILE] [--daemon]
//   eta-wire --check NETEM-ARGS...     validate arguments, print them normalized
//
// The config file holds tc-netem words ("delay 5ms 1ms loss 1%"). SIGHUP
// rereads it (the queue is kept, as `tc qdisc change` keeps netem's), SIGUSR1
// writes the status file, SIGTERM/SIGINT end the wire. The status file
// (KEY=VALUE lines, replaced atomically) carries a generation number that
// each reload raises, so a caller knows when its change is in effect, and a
// report number that each write raises.
#include "impair.hpp"
#include "netem.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <string>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace
{

using namespace eta::wire;

constexpr std::size_t max_pool_bytes = 512u << 20;
constexpr unsigned tx_batch = 64;
constexpr unsigned rx_budget = 256; // frames per pass before timers get a turn
constexpr std::uint64_t signal_check_ns =
    10'000'000; // under constant load, look at signals this often

void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_line(const char *fmt, ...)
{
    std::fputs("eta-wire: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fputc('\n', stderr);
    std::fflush(stderr);
}

std::uint64_t now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

struct Options {
    std::string from, to, config, status, pidfile, log;
    bool daemon = false;
};

[[noreturn]] void usage_error(const std::string &why)
{
    std::fprintf(stderr,
                 "eta-wire: %s\n"
                 "usage: eta-wire --from IFACE --to IFACE --config FILE [--status FILE]\n"
                 "                [--pidfile FILE] [--log FILE] [--daemon]\n"
                 "       eta-wire --check NETEM-ARGS...\n",
                 why.c_str());
    std::exit(2);
}

Options parse_options(int argc, char **argv)
{
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string k = argv[i];
        if (k == "--daemon") {
            o.daemon = true;
            continue;
        }
        if (i + 1 >= argc) usage_error("'" + k + "' needs a value");
        std::string v = argv[++i];
        if (k == "--from")
            o.from = v;
        else if (k == "--to")
            o.to = v;
        else if (k == "--config")
            o.config = v;
        else if (k == "--status")
            o.status = v;
        else if (k == "--pidfile")
            o.pidfile = v;
        else if (k == "--log")
            o.log = v;
        else
            usage_error("unknown option '" + k + "'");
    }
    if (o.from.empty() || o.to.empty() || o.config.empty())
        usage_error("--from, --to and --config are required");
    if (o.from == o.to) usage_error("--from and --to must be different interfaces");
    return o;
}

bool read_file(const std::string &path, std::string &out, std::string &error)
{
    FILE *f = std::fopen(path.c_str(), "r");
    if (!f) {
        error = "cannot read " + path + ": " + std::strerror(errno);
        return false;
    }
    out.clear();
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && out.size() < (1u << 16))
        out.append(buf, n);
    std::fclose(f);
    return true;
}

bool write_file_atomically(const std::string &path, const std::string &text)
{
    std::string tmp = path + ".tmp";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ok = close(fd) == 0 && ok;
    return ok && rename(tmp.c_str(), path.c_str()) == 0;
}

int interface_index(const std::string &name)
{
    unsigned idx = if_nametoindex(name.c_str());
    if (idx == 0) {
        log_line("no interface named '%s' here: %s", name.c_str(), std::strerror(errno));
        std::exit(1);
    }
    return static_cast<int>(idx);
}

int interface_mtu(int fd, const std::string &name)
{
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name.c_str());
    if (ioctl(fd, SIOCGIFMTU, &ifr) < 0) return 1500;
    return ifr.ifr_mtu;
}

[[noreturn]] void die_errno(const char *what)
{
    log_line("%s: %s", what, std::strerror(errno));
    std::exit(1);
}

// The TPACKET_V2 receive ring on the --from interface.
class RxRing
{
  public:
    void open(const std::string &iface, std::size_t max_frame)
    {
        fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC,
                     0); // protocol 0: nothing arrives before bind
        if (fd_ < 0) die_errno("AF_PACKET socket (needs root or CAP_NET_RAW)");
        int version = TPACKET_V2;
        if (setsockopt(fd_, SOL_PACKET, PACKET_VERSION, &version, sizeof version) < 0)
            die_errno("PACKET_VERSION");
        int one = 1;
        // Frames the peer's own stack might send out of this interface are not ours.
        ignore_outgoing_ =
            setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) == 0;
        frame_size_ = TPACKET_ALIGN(TPACKET_ALIGN(TPACKET2_HDRLEN) + 16 + max_frame + 64);
        long page = sysconf(_SC_PAGESIZE);
        block_size_ = static_cast<std::size_t>(page);
        while (block_size_ < frame_size_ * 8)
            block_size_ *= 2;
        frames_per_block_ = block_size_ / frame_size_;
        std::size_t blocks = std::max<std::size_t>((4u << 20) / block_size_, 2);
        frame_count_ = blocks * frames_per_block_;
        tpacket_req req{};
        req.tp_block_size = static_cast<unsigned>(block_size_);
        req.tp_block_nr = static_cast<unsigned>(blocks);
        req.tp_frame_size = static_cast<unsigned>(frame_size_);
        req.tp_frame_nr = static_cast<unsigned>(frame_count_);
        if (setsockopt(fd_, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0)
            die_errno("PACKET_RX_RING");
        ring_bytes_ = blocks * block_size_;
        void *ring = mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
        if (ring == MAP_FAILED) die_errno("mmap of the receive ring");
        ring_ = static_cast<std::uint8_t *>(ring);
        sockaddr_ll sll{};
        sll.sll_family = AF_PACKET;
        sll.sll_protocol = htons(ETH_P_ALL);
        sll.sll_ifindex = interface_index(iface);
        if (bind(fd_, reinterpret_cast<sockaddr *>(&sll), sizeof sll) < 0)
            die_errno(("bind to " + iface).c_str());
    }

    int fd() const { return fd_; }
    bool ignores_outgoing() const { return ignore_outgoing_; }

    // The frame at the head when the kernel has handed it to us, else null.
    tpacket2_hdr *head()
    {
        auto *h =
            reinterpret_cast<tpacket2_hdr *>(ring_ + (head_ / frames_per_block_) * block_size_ +
                                             (head_ % frames_per_block_) * frame_size_);
        if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) return nullptr;
        return h;
    }

    void release(tpacket2_hdr *h)
    {
        __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
        head_ = (head_ + 1) % frame_count_;
    }

    // Frames the kernel dropped because the ring was full, since the last call.
    std::uint64_t ring_drops()
    {
        tpacket_stats st{};
        socklen_t len = sizeof st;
        if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &st, &len) < 0) return 0;
        return st.tp_drops;
    }

  private:
    int fd_ = -1;
    bool ignore_outgoing_ = false;
    std::uint8_t *ring_ = nullptr;
    std::size_t ring_bytes_ = 0, frame_size_ = 0, block_size_ = 0, frames_per_block_ = 0;
    std::size_t frame_count_ = 0, head_ = 0;
};

struct Counters {
    std::uint64_t frames_out = 0, overlimit = 0, truncated = 0, tx_errors = 0;
    std::uint64_t ring_drops = 0, csum_not_ready = 0;
};

class Wire
{
  public:
    Wire(const Options &opts, const NetemConfig &config, std::uint64_t seed, std::size_t slot_bytes)
        : opts_(opts), impairer_(config, seed), pool_(slot_bytes, config.limit),
          queue_(config.limit)
    {
    }

    void open(int sig_fd)
    {
        sig_fd_ = sig_fd;
        rx_.open(opts_.from, pool_.slot_bytes());
        tx_fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0); // protocol 0: receives nothing
        if (tx_fd_ < 0) die_errno("AF_PACKET socket");
        int one = 1;
        // Bypass the --to interface's qdiscs and tc hooks: the redirect that
        // feeds this wire sits there and must not see the frames again.
        if (setsockopt(tx_fd_, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) < 0)
            die_errno("PACKET_QDISC_BYPASS");
        int sndbuf = 8 << 20;
        if (setsockopt(tx_fd_, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) < 0)
            setsockopt(tx_fd_, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        sockaddr_ll sll{};
        sll.sll_family = AF_PACKET;
        sll.sll_protocol = 0;
        sll.sll_ifindex = interface_index(opts_.to);
        if (bind(tx_fd_, reinterpret_cast<sockaddr *>(&sll), sizeof sll) < 0)
            die_errno(("bind to " + opts_.to).c_str());
        for (unsigned i = 0; i < tx_batch; ++i) {
            msgs_[i].msg_hdr.msg_iov = &iovs_[i];
            msgs_[i].msg_hdr.msg_iovlen = 1;
        }
    }

    void write_status(const std::string &error = "")
    {
        if (opts_.status.empty()) return;
        counters_.ring_drops += rx_.ring_drops();
        const WireCounters &w = impairer_.counters();
        std::string s;
        auto kv = [&s](const char *k, const std::string &v) {
            s += std::string(k) + "=" + v + "\n";
        };
        kv("generation", std::to_string(generation_));
        kv("report", std::to_string(++reports_));
        kv("config", describe(impairer_.config()));
        kv("error", error);
        kv("from", opts_.from);
        kv("to", opts_.to);
        kv("frames_in", std::to_string(w.frames_in));
        kv("frames_out", std::to_string(counters_.frames_out));
        kv("lost", std::to_string(w.lost));
        kv("duplicated", std::to_string(w.duplicated));
        kv("corrupted", std::to_string(w.corrupted));
        kv("reordered", std::to_string(w.reordered));
        kv("overlimit", std::to_string(counters_.overlimit));
        kv("truncated", std::to_string(counters_.truncated));
        kv("tx_errors", std::to_string(counters_.tx_errors));
        kv("ring_drops", std::to_string(counters_.ring_drops));
        kv("csum_not_ready", std::to_string(counters_.csum_not_ready));
        kv("queued", std::to_string(queue_.size()));
        if (!write_file_atomically(opts_.status, s))
            log_line("cannot write status file %s: %s", opts_.status.c_str(), std::strerror(errno));
    }

    // Rereads the config file; on a bad file the old settings stay and the
    // status file says why.
    void reload()
    {
        ++generation_;
        std::string text, error;
        NetemConfig config;
        if (!read_file(opts_.config, text, error) || !parse_netem_line(text, config, error) ||
            !fits_memory(config, error)) {
            log_line("reload refused, settings unchanged: %s", error.c_str());
            write_status(error);
            return;
        }
        pool_.grow(config.limit);
        queue_.reserve(config.limit);
        impairer_.reconfigure(config);
        log_line("settings: %s", describe(config).c_str());
        write_status();
    }

    bool fits_memory(const NetemConfig &config, std::string &error) const
    {
        if (static_cast<std::size_t>(config.limit) * pool_.slot_bytes() <= max_pool_bytes)
            return true;
        error = "limit " + std::to_string(config.limit) + " with frames of " +
                std::to_string(pool_.slot_bytes()) + " bytes needs more than the " +
                std::to_string(max_pool_bytes >> 20) + " MiB the wire allows; lower the limit";
        return false;
    }

    int run()
    {
        std::uint64_t last_signal_check = now_ns();
        for (;;) {
            std::uint64_t now = now_ns();
            unsigned got = drain_rx(now);
            flush_due(now_ns());
            now = now_ns();
            bool busy = got == rx_budget;
            if (busy && now - last_signal_check < signal_check_ns) continue;
            last_signal_check = now;
            // Idle (or time to look at signals): sleep until a frame arrives,
            // the next queued frame is due, or a signal comes.
            timespec ts{}, *timeout = nullptr;
            if (busy) {
                timeout = &ts;
            } else if (!queue_.empty()) {
                std::uint64_t due = queue_.top().due_ns;
                std::uint64_t wait = due > now ? due - now : 0;
                ts.tv_sec = static_cast<time_t>(wait / 1'000'000'000ULL);
                ts.tv_nsec = static_cast<long>(wait % 1'000'000'000ULL);
                timeout = &ts;
            }
            pollfd fds[2] = {{rx_.fd(), POLLIN, 0}, {sig_fd_, POLLIN, 0}};
            if (ppoll(fds, 2, timeout, nullptr) < 0 && errno != EINTR) die_errno("ppoll");
            if (fds[1].revents & POLLIN) {
                if (!handle_signal()) return 0;
            }
            if (fds[0].revents & (POLLERR | POLLNVAL)) {
                if (!handle_socket_error()) return 1;
            }
        }
    }

  private:
    unsigned drain_rx(std::uint64_t now)
    {
        unsigned n = 0;
        while (n < rx_budget) {
            tpacket2_hdr *h = rx_.head();
            if (!h) break;
            admit(h, now);
            rx_.release(h);
            ++n;
        }
        return n;
    }

    void admit(const tpacket2_hdr *h, std::uint64_t now)
    {
        const auto *base = reinterpret_cast<const std::uint8_t *>(h);
        if (!rx_.ignores_outgoing()) {
            const auto *sll =
                reinterpret_cast<const sockaddr_ll *>(base + TPACKET_ALIGN(sizeof *h));
            if (sll->sll_pkttype == PACKET_OUTGOING) return;
        }
        // The ring hands VLAN tags over separately; put them back so the
        // frame leaves as it came.
        bool tagged = h->tp_status & TP_STATUS_VLAN_VALID;
        std::uint32_t len = h->tp_snaplen + (tagged ? 4 : 0);
        if (h->tp_len != h->tp_snaplen || len > pool_.slot_bytes() || h->tp_snaplen < 12) {
            ++counters_.truncated;
            return;
        }
        if (h->tp_status & TP_STATUS_CSUMNOTREADY) ++counters_.csum_not_ready;
        Verdict v = impairer_.admit(now, len);
        for (std::uint32_t c = 0; c < v.count; ++c) {
            if (queue_.size() >= impairer_.config().limit || pool_.empty()) {
                ++counters_.overlimit;
                continue;
            }
            std::uint32_t slot = pool_.take();
            std::uint8_t *dst = pool_.data(slot);
            const std::uint8_t *src = base + h->tp_mac;
            if (tagged) {
                std::uint16_t tpid =
                    (h->tp_status & TP_STATUS_VLAN_TPID_VALID) ? h->tp_vlan_tpid : ETH_P_8021Q;
                std::uint16_t tag[2] = {htons(tpid), htons(h->tp_vlan_tci)};
                std::memcpy(dst, src, 12);
                std::memcpy(dst + 12, tag, 4);
                std::memcpy(dst + 16, src + 12, h->tp_snaplen - 12);
            } else {
                std::memcpy(dst, src, len);
            }
            if (v.copies[c].corrupt) impairer_.corrupt({dst, len});
            queue_.push(v.copies[c].due_ns, slot, len);
        }
    }

    void flush_due(std::uint64_t now)
    {
        unsigned n = 0;
        while (!queue_.empty() && queue_.top().due_ns <= now) {
            DelayQueue::Entry e = queue_.pop();
            batch_slots_[n] = e.slot;
            iovs_[n].iov_base = pool_.data(e.slot);
            iovs_[n].iov_len = e.len;
            if (++n == tx_batch) {
                send_batch(n);
                n = 0;
            }
        }
        if (n > 0) send_batch(n);
    }

    void send_batch(unsigned n)
    {
        unsigned i = 0;
        while (i < n) {
            int sent = sendmmsg(tx_fd_, msgs_ + i, n - i, MSG_DONTWAIT);
            if (sent > 0) {
                i += static_cast<unsigned>(sent);
                counters_.frames_out += static_cast<unsigned>(sent);
                continue;
            }
            if (sent < 0 && errno == EINTR) continue;
            // The receiver's backlog is full or the link is down: the frame
            // is lost, as on a real wire. Never retry in a loop.
            ++counters_.tx_errors;
            ++i;
        }
        for (unsigned k = 0; k < n; ++k)
            pool_.give(batch_slots_[k]);
    }

    bool handle_signal()
    {
        signalfd_siginfo si;
        while (read(sig_fd_, &si, sizeof si) == sizeof si) {
            switch (si.ssi_signo) {
            case SIGHUP:
                reload();
                break;
            case SIGUSR1:
                write_status();
                break;
            default:
                write_status();
                log_line("stopping on signal %u", si.ssi_signo);
                return false;
            }
        }
        return true;
    }

    // A packet socket reports ENETDOWN when its interface goes down or away.
    // Down is survivable (it may come back up); gone ends the wire.
    bool handle_socket_error()
    {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(rx_.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (if_nametoindex(opts_.from.c_str()) == 0 || if_nametoindex(opts_.to.c_str()) == 0) {
            log_line("interface %s or %s went away; stopping", opts_.from.c_str(),
                     opts_.to.c_str());
            write_status("interface went away");
            return false;
        }
        if (err != 0) log_line("receive socket error: %s", std::strerror(err));
        // Do not spin while the interface stays down.
        timespec pause{0, 50'000'000};
        nanosleep(&pause, nullptr);
        return true;
    }

    const Options &opts_;
    Impairer impairer_;
    FramePool pool_;
    DelayQueue queue_;
    RxRing rx_;
    int tx_fd_ = -1;
    int sig_fd_ = -1;
    std::uint64_t generation_ = 1; // raised by each reload
    std::uint64_t reports_ = 0;    // raised by each status write
    Counters counters_;
    mmsghdr msgs_[tx_batch]{};
    iovec iovs_[tx_batch]{};
    std::uint32_t batch_slots_[tx_batch]{};
};

int check_mode(int argc, char **argv)
{
    std::vector<std::string_view> words(argv + 2, argv + argc);
    NetemConfig config;
    std::string error;
    if (!parse_netem(words, config, error)) {
        std::fprintf(stderr, "eta-wire: %s\n", error.c_str());
        return 2;
    }
    std::printf("%s\n", describe(config).c_str());
    return 0;
}

void become_daemon(const Options &opts)
{
    pid_t pid = fork();
    if (pid < 0) die_errno("fork");
    if (pid > 0) {
        // The parent reports the child's PID and leaves: everything that can
        // fail has been set up, so the caller may rely on the wire now.
        if (!opts.pidfile.empty() &&
            !write_file_atomically(opts.pidfile, std::to_string(pid) + "\n")) {
            log_line("cannot write %s: %s", opts.pidfile.c_str(), std::strerror(errno));
            kill(pid, SIGTERM);
            std::exit(1);
        }
        std::_Exit(0);
    }
    setsid();
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    int log_fd = opts.log.empty()
                     ? -1
                     : open(opts.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (null_fd >= 0) {
        dup2(null_fd, STDIN_FILENO);
        dup2(null_fd, STDOUT_FILENO);
        dup2(log_fd >= 0 ? log_fd : null_fd, STDERR_FILENO);
    }
    if (chdir("/") != 0) log_line("chdir /: %s", std::strerror(errno));
}

} // namespace

int main(int argc, char **argv)
{
    if (argc >= 2 && std::string_view(argv[1]) == "--check") return check_mode(argc, argv);
    Options opts = parse_options(argc, argv);

    std::string text, error;
    NetemConfig config;
    if (!read_file(opts.config, text, error) || !parse_netem_line(text, config, error)) {
        log_line("%s", error.c_str());
        return 2;
    }
    std::uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = now_ns();

    int probe = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int mtu = std::max(interface_mtu(probe, opts.from), interface_mtu(probe, opts.to));
    close(probe);
    // Room for the Ethernet header and one VLAN tag, in whole cache lines.
    std::size_t slot_bytes = (static_cast<std::size_t>(mtu) + 14 + 4 + 63) & ~std::size_t{63};

    sigset_t sigs;
    sigemptyset(&sigs);
    for (int s : {SIGHUP, SIGTERM, SIGINT, SIGUSR1})
        sigaddset(&sigs, s);
    sigprocmask(SIG_BLOCK, &sigs, nullptr);
    int sig_fd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sig_fd < 0) die_errno("signalfd");
    // Timers wake the wire close to when frames are due.
    prctl(PR_SET_TIMERSLACK, 10'000UL, 0, 0, 0);

    if (static_cast<std::size_t>(config.limit) * slot_bytes > max_pool_bytes) {
        log_line("limit %u with frames of %zu bytes needs more than %zu MiB; lower the limit",
                 config.limit, slot_bytes, max_pool_bytes >> 20);
        return 2;
    }
    Wire wire(opts, config, seed, slot_bytes);
    wire.open(sig_fd);
    wire.write_status();
    log_line("%s -> %s: %s", opts.from.c_str(), opts.to.c_str(), describe(config).c_str());
    if (opts.daemon)
        become_daemon(opts);
    else if (!opts.pidfile.empty())
        write_file_atomically(opts.pidfile, std::to_string(getpid()) + "\n");
    return wire.run();
}
