// eta-perf: a ttcp/netperf-style traffic tool for eta's native API, with the
// same exchange over kernel sockets (--transport kernel) so both can be
// measured side by side against the same kernel peer.
// Files: eta_perf.h (the wire protocol, options, shared helpers), this file
// (the two transports, the client, the kernel server, main), and
// eta_perf_dti_server.cc (the dti server's event loop).
//
//   eta-perf server [--transport dti|kernel] [--port P] [--once] [--json]
//   eta-perf client --connect IP (IPv4 or IPv6) [--port P] [--transport dti|kernel]
//            [--mode stream|rr|crr] [--direction send|recv] [--size N]
//            [--duration S | --bytes N] [--verify [--digest app|engine]]
//            [--recv posted|copy] [--json]
//
// Wire protocol: the client opens with a 32-byte Hello (what to do). Stream
// client→server: the client writes the pattern of stream_pattern.h (seeded
// by the Hello's seed; only the sender computes it) and shuts down
// its write side; the server answers its byte count and CRC32C (ISA-L
// crc32_iscsi) over everything it received; the client compares. Stream
// server→client: the server writes the pattern, then its own count and
// CRC as the last 16 bytes, and shuts down; the client checks them and
// answers with what it counted, so both sides report.
// rr: the client sends `size` bytes, the server echoes them, repeated. crr:
// one connection per request/response. A server serves any number of
// connections at once; the dti server runs one event loop over them all.
// --verify --digest engine (dti client, stream, --bytes): the client takes
// the engine's CRC32C of the bytes (DTI_OP_DIGEST, chained ranges asked
// before the data moves) instead of running its own pass over them.
#include <dti/dti.h>
#include "dti_echo.h"
#include "stream_pattern.h"
#include <isa-l/crc.h>

#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "eta_perf.h"

namespace eta_perf {

dti_t *g_dti = nullptr;
// --spin-us / --spin-fixed: how this program's DTI contexts wait (libdti's
// adaptive policy by default).
int64_t g_spin_us = -1;
bool g_spin_fixed = false;

// What a sender prints about the receiver's report.
const char *peer_verdict(const Trailer &peer, uint64_t sent, uint32_t crc)
{
    if (peer.bytes != sent) return "MISMATCH (byte count)";
    if (!(peer.flags & kTrailerHasCrc)) return "bytes match (the peer did not digest them)";
    return peer.crc == crc ? "verified" : "MISMATCH (crc32c)";
}

uint64_t now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

double cpu_seconds()
{
    rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

[[noreturn]] void die(const std::string &msg)
{
    std::fprintf(stderr, "eta-perf: %s\n", msg.c_str());
    std::exit(1);
}

dti_ctx_t *dti_context()
{
    if (!g_dti) {
        dti_attach_opts o{nullptr, "eta-perf"};
        char why[256];
        int r = dti_attach(&o, &g_dti, why, sizeof why);
        if (r < 0) die(std::string("cannot attach to the PPE: ") + why);
    }
    int err = 0;
    dti_ctx_t *c = dti_ctx_get(g_dti, &err);
    if (!c) die(std::string("no DTI context: ") + dti_strerror(err));
    thread_local bool spin_set = false; // once per context: setting it resets the adaptive budget
    if (!spin_set) {
        if (g_spin_us >= 0) dti_ctx_set_spin(c, uint64_t(g_spin_us) * 1000);
        dti_ctx_set_spin_fixed(c, g_spin_fixed);
        spin_set = true;
    }
    return c;
}

} // namespace eta_perf

namespace {

using namespace eta_perf;


// ---- one blocking connection, over either transport ------------------------

class Conn {
  public:
    virtual ~Conn() = default;
    virtual ssize_t send(const void *p, size_t n) = 0; // all of it, or < 0
    virtual ssize_t recv(void *p, size_t n) = 0;       // some, 0 at EOF, < 0 error
    virtual void shutdown_write() = 0;
    virtual std::string error_text(ssize_t r) const = 0; // for a negative send/recv result
    // --digest engine: the engine's CRC32C of the next n bytes this side will
    // receive (tx false) or send (tx true), asked before they move; end()
    // waits for it. Only the DTI transport has one.
    virtual int digest_begin(bool, uint64_t) { return -EOPNOTSUPP; }
    virtual int digest_end(uint32_t *) { return -EOPNOTSUPP; }
    // Takes up to max received bytes off the stream without looking at them
    // (with the engine's digest the application need not); 0 at EOF.
    virtual ssize_t consume(size_t max)
    {
        uint8_t scratch[65536];
        return recv(scratch, std::min(max, sizeof scratch));
    }
    bool recv_all(void *p, size_t n)
    {
        auto *b = static_cast<uint8_t *>(p);
        while (n) {
            ssize_t r = recv(b, n);
            if (r <= 0) return false;
            b += r;
            n -= size_t(r);
        }
        return true;
    }
};

class KernelConn final : public Conn {
  public:
    explicit KernelConn(int fd) : fd_(fd)
    {
        int one = 1;
        setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    ~KernelConn() override { close(fd_); }
    ssize_t send(const void *p, size_t n) override
    {
        size_t done = 0;
        while (done < n) {
            ssize_t r = ::send(fd_, static_cast<const uint8_t *>(p) + done, n - done, MSG_NOSIGNAL);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return -errno;
            done += size_t(r);
        }
        return ssize_t(n);
    }
    ssize_t recv(void *p, size_t n) override
    {
        for (;;) {
            ssize_t r = ::recv(fd_, p, n, 0);
            if (r < 0 && errno == EINTR) continue;
            return r < 0 ? -errno : r;
        }
    }
    void shutdown_write() override { ::shutdown(fd_, SHUT_WR); }
    std::string error_text(ssize_t r) const override { return std::strerror(int(-r)); }

  private:
    int fd_;
};

bool g_recv_posted = true; // --recv posted|copy

class DtiConn final : public Conn {
  public:
    DtiConn(dti_ctx_t *c, dti_sock_t s) : c_(c), s_(s) {}
    ~DtiConn() override { dti_close(c_, s_); }
    ssize_t send(const void *p, size_t n) override { return dti_send_all(c_, s_, p, n, 60'000); }
    // --recv posted (default): a read of DTI_RECV_POST_MIN bytes or more is
    // posted, and eta-ppe writes the bytes into our buffer (this core copies
    // nothing); it completes when the buffer is full or the stream ends, as
    // MSG_WAITALL would. --recv copy: we copy them out of the ring.
    ssize_t recv(void *p, size_t n) override
    {
        if (g_recv_posted) return dti_recv_posted(c_, s_, p, n, n, 60'000);
        return dti_recv_wait(c_, s_, p, n, 60'000);
    }
    void shutdown_write() override { dti_shutdown(c_, s_, DTI_SHUT_WR); }
    std::string error_text(ssize_t r) const override { return dti_strerror(int(r)); }
    // Chained ranges of up to 1 GiB (at most 8 wait per direction): the last
    // completion carries the CRC32C of all n bytes.
    int digest_begin(bool tx, uint64_t n) override
    {
        constexpr uint64_t kPiece = 1ull << 30;
        if (n == 0 || n > 8 * kPiece) return -E2BIG;
        uint64_t at = 0;
        while (at < n) {
            const uint32_t len = uint32_t(std::min(kPiece, n - at));
            const uint64_t ud = 0xd16e57000000ull + digest_uds_.size();
            int r = dti_prep_digest(c_, s_, (tx ? DTI_DIGEST_TX : DTI_DIGEST_RX) | DTI_DIGEST_CHAIN, uint32_t(at),
                                    len, 0, ud);
            if (r < 0) return r;
            digest_uds_.push_back(ud);
            at += len;
        }
        return dti_submit(c_) < 0 ? -EIO : 0;
    }
    int digest_end(uint32_t *crc) override
    {
        for (uint64_t ud : digest_uds_) {
            dti_cqe e{};
            if (auto it = digest_done_.find(ud); it != digest_done_.end()) {
                e = it->second;
            } else {
                int w = dti_wait_cqe(c_, ud, &e, 60'000);
                if (w != 1) return w < 0 ? w : -ETIMEDOUT;
            }
            if (e.res < 0) return e.res;
            *crc = ~uint32_t(e.value); // the standard CRC32C; our states are its complement
        }
        digest_uds_.clear();
        digest_done_.clear();
        return 0;
    }
    // Zero-copy: borrow and release in place. Waits on a standing POLLIN
    // watch; digest completions reaped meanwhile are kept for digest_end().
    ssize_t consume(size_t max) override
    {
        for (;;) {
            dti_iov in[2];
            ssize_t n = dti_recv_borrow(c_, s_, in);
            if (n > 0) {
                const size_t k = std::min(size_t(n), max);
                int r = dti_recv_release(c_, s_, k);
                return r < 0 ? r : ssize_t(k);
            }
            if (n != -EAGAIN) return n;
            if (!watching_) {
                if (int r = dti_prep_watch(c_, s_, DTI_POLLIN, 0); r < 0) return r;
                dti_submit(c_);
                watching_ = true;
            }
            int w = dti_wait(c_, 60'000);
            if (w <= 0) return w < 0 ? w : -ETIMEDOUT;
            dti_cqe e[16];
            unsigned got;
            while ((got = dti_reap(c_, e, 16)) > 0)
                for (unsigned i = 0; i < got; i++)
                    if (e[i].kind == DTI_CQE_COMPLETION && e[i].op == DTI_OP_DIGEST) digest_done_[e[i].user_data] = e[i];
        }
    }

  private:
    dti_ctx_t *c_;
    dti_sock_t s_;
    std::vector<uint64_t> digest_uds_;
    std::unordered_map<uint64_t, dti_cqe> digest_done_;
    bool watching_ = false;
};

// Where the client connects: --connect's address, either family (an IPv6
// literal reaches eta through DTI_OP_CONNECT6 and the kernel through
// AF_INET6, so the same exchange can be measured over both).
struct Target {
    bool v6 = false;
    uint32_t ip = 0; // IPv4, host order
    uint8_t ip6[16] = {};
};

// out_of_ports: a connect that found no local port free (EADDRNOTAVAIL:
// every one held by the connections this run closed, TIME-WAIT's 60 s) sets
// it and returns null instead of dying (crr, which makes connections faster
// than TIME-WAIT frees their ports); null: die as for any other error.
std::unique_ptr<Conn> open_conn(const Options &o, const Target &t, bool *out_of_ports = nullptr)
{
    if (o.transport == "kernel") {
        int fd = socket(t.v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_storage ss{};
        socklen_t sl;
        if (t.v6) {
            auto *sa = reinterpret_cast<sockaddr_in6 *>(&ss);
            sa->sin6_family = AF_INET6;
            sa->sin6_port = htons(o.port);
            std::memcpy(&sa->sin6_addr, t.ip6, 16);
            sl = sizeof *sa;
        } else {
            auto *sa = reinterpret_cast<sockaddr_in *>(&ss);
            sa->sin_family = AF_INET;
            sa->sin_port = htons(o.port);
            sa->sin_addr.s_addr = htonl(t.ip);
            sl = sizeof *sa;
        }
        int half = int(o.sndbuf / 2); // the kernel keeps twice what is set
        if (fd >= 0 && o.sndbuf && setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &half, sizeof half) != 0 &&
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &half, sizeof half) != 0)
            die(std::string("SO_SNDBUF: ") + std::strerror(errno));
        if (fd < 0) die("connect " + o.connect + ": " + std::strerror(errno));
        if (::connect(fd, reinterpret_cast<sockaddr *>(&ss), sl) != 0) {
            const int err = errno;
            ::close(fd);
            if (err == EADDRNOTAVAIL && out_of_ports) {
                *out_of_ports = true;
                return nullptr;
            }
            die("connect " + o.connect + ": " + std::strerror(err));
        }
        return std::make_unique<KernelConn>(fd);
    }
    dti_ctx_t *c = dti_context();
    int s = dti_socket(c);
    if (s < 0) die(std::string("socket: ") + dti_strerror(s));
    if (o.sndbuf) {
        int r = dti_setsockopt(c, dti_sock_t(s), DTI_SO_SNDBUF, o.sndbuf);
        if (r < 0) die(std::string("DTI_SO_SNDBUF: ") + dti_strerror(r));
    }
    int r;
    if (t.v6) {
        dti_addr6 a{};
        std::memcpy(a.ip, t.ip6, 16);
        a.port = o.port;
        r = dti_connect6(c, dti_sock_t(s), &a, 10'000);
    } else {
        dti_addr a{t.ip, o.port};
        r = dti_connect(c, dti_sock_t(s), &a, 10'000);
    }
    if (r < 0) {
        dti_close(c, dti_sock_t(s));
        if (r == -EADDRNOTAVAIL && out_of_ports) {
            *out_of_ports = true;
            return nullptr;
        }
        die("connect " + o.connect + ": " + dti_strerror(r));
    }
    return std::make_unique<DtiConn>(c, dti_sock_t(s));
}

// ---- client ---------------------------------------------------------------

struct Result {
    uint64_t bytes = 0, transactions = 0;
    double seconds = 0, cpu = 0;
    std::vector<uint64_t> lat_ns;
    bool verified = false, mismatch = false;
    bool out_of_ports = false; // crr: stopped early, no local port free (open_conn)
    uint32_t crc = 0, peer_crc = 0;
    uint64_t peer_bytes = 0;
};

// SIGUSR1 ends a client's --duration early, as if its time were up: a
// stream it sends ends, is reported and verified as usual; an rr/crr run
// stops after the exchange in progress. A test stops a transfer when what it
// checks beside it is done, not after a duration guessed long enough.
volatile sig_atomic_t g_stop_early = 0;
void on_stop_early(int) { g_stop_early = 1; }
bool time_left(uint64_t deadline) { return !g_stop_early && now_ns() < deadline; }

void client_stream(const Options &o, const Target &t, Result *res)
{
    auto conn = open_conn(o, t);
    const bool send_side = o.direction == "send";
    Hello h{kHelloMagic, send_side ? kSink : kSource, {}, o.size, uint32_t(o.duration * 1000), o.bytes, now_ns()};
    if (conn->send(&h, sizeof h) < 0) die("send hello failed");
    std::vector<uint8_t> buf(o.size);
    Pattern pat(h.seed);
    const uint64_t t0 = now_ns(), deadline = t0 + uint64_t(o.duration * 1e9);
    const double c0 = cpu_seconds();
    uint32_t crc = kCrcSeed;
    // The engine's digest instead of our own pass over the bytes.
    const bool engine_digest = o.verify && o.digest == "engine";
    if (engine_digest) {
        if (int r = conn->digest_begin(send_side, o.bytes); r < 0)
            die(std::string("--digest engine: ") + dti_strerror(r));
    }
    const bool app_crc = o.verify && !engine_digest;
    if (send_side) {
        uint64_t off = 0;
        while (o.bytes ? off < o.bytes : time_left(deadline)) {
            size_t n = o.bytes ? size_t(std::min<uint64_t>(o.size, o.bytes - off)) : o.size;
            pat.fill(off, buf.data(), n);
            if (app_crc) crc = crc32_iscsi(buf.data(), int(n), crc);
            if (ssize_t r = conn->send(buf.data(), n); r < 0)
                die("send failed after " + std::to_string(off) + " bytes: " + conn->error_text(r));
            off += n;
        }
        if (engine_digest) {
            if (int r = conn->digest_end(&crc); r < 0) die(std::string("--digest engine: ") + dti_strerror(r));
        }
        conn->shutdown_write();
        Trailer t{};
        if (!conn->recv_all(&t, sizeof t)) die("the server did not report what it received");
        res->bytes = off;
        res->peer_bytes = t.bytes;
        res->peer_crc = t.crc;
    } else {
        // The last 16 bytes are the sender's trailer: CRC everything but
        // the 16 most recent bytes, which wait in `tail`.
        uint64_t got = 0;
        uint8_t tail[sizeof(Trailer)];
        size_t tail_n = 0;
        // With the engine's digest the length is known (--bytes): the data
        // is taken in place, unseen, and the trailer read after it.
        while (engine_digest && got < o.bytes) {
            ssize_t n = conn->consume(size_t(std::min<uint64_t>(o.bytes - got, SIZE_MAX)));
            if (n <= 0) die("recv failed after " + std::to_string(got) + " bytes: " + conn->error_text(n ? n : -EPIPE));
            got += uint64_t(n);
        }
        for (;;) {
            ssize_t n = conn->recv(buf.data(), buf.size());
            if (n < 0) die("recv failed after " + std::to_string(got) + " bytes: " + conn->error_text(n));
            if (n == 0) break;
            const size_t total = tail_n + size_t(n), keep = std::min(total, sizeof tail);
            size_t flush = total - keep; // bytes leaving the lag window: tail first, then buf
            const size_t from_tail = std::min(flush, tail_n);
            if (app_crc && from_tail) crc = crc32_iscsi(tail, int(from_tail), crc);
            const size_t from_buf = flush - from_tail;
            if (app_crc && from_buf) crc = crc32_iscsi(buf.data(), int(from_buf), crc);
            got += flush;
            uint8_t next[sizeof tail];
            const size_t old_keep = tail_n - from_tail;
            std::memcpy(next, tail + from_tail, old_keep);
            std::memcpy(next + old_keep, buf.data() + from_buf, size_t(n) - from_buf);
            tail_n = keep;
            std::memcpy(tail, next, keep);
        }
        if (tail_n != sizeof(Trailer)) die("the stream ended without the sender's trailer");
        if (engine_digest) {
            if (got != o.bytes) die("--digest engine: received " + std::to_string(got) + " bytes, not --bytes");
            if (int r = conn->digest_end(&crc); r < 0) die(std::string("--digest engine: ") + dti_strerror(r));
        }
        Trailer t{};
        std::memcpy(&t, tail, sizeof t);
        Trailer mine{got, crc, o.verify ? kTrailerHasCrc : 0};
        conn->send(&mine, sizeof mine);
        res->bytes = got;
        res->peer_bytes = t.bytes;
        res->peer_crc = t.crc;
    }
    res->seconds = double(now_ns() - t0) / 1e9;
    res->cpu = cpu_seconds() - c0;
    res->crc = crc;
    res->verified = o.verify;
    res->mismatch = res->peer_bytes != res->bytes || (o.verify && res->peer_crc != crc);
}

void client_rr(const Options &o, const Target &t, bool crr, Result *res)
{
    std::vector<uint8_t> req(o.size), rsp(o.size);
    Pattern pat(now_ns());
    const uint64_t t0 = now_ns(), deadline = t0 + uint64_t(o.duration * 1e9);
    const double c0 = cpu_seconds();
    std::unique_ptr<Conn> conn;
    uint64_t off = 0;
    auto hello = [&](Conn &c) {
        Hello h{kHelloMagic, kEcho, {}, o.size, 0, 0, 0};
        if (c.send(&h, sizeof h) < 0) die("send hello failed");
    };
    while (time_left(deadline) && (!o.bytes || res->transactions < o.bytes)) {
        const uint64_t s = now_ns();
        if (crr || !conn) {
            conn = open_conn(o, t, crr ? &res->out_of_ports : nullptr);
            if (!conn) break; // out of local ports: the rate is over the time before
            hello(*conn);
        }
        pat.fill(off, req.data(), req.size());
        if (conn->send(req.data(), req.size()) < 0 || !conn->recv_all(rsp.data(), rsp.size()))
            die("request " + std::to_string(res->transactions) + " failed");
        if (o.verify && crc32_iscsi(req.data(), int(req.size()), 0) != crc32_iscsi(rsp.data(), int(rsp.size()), 0))
            res->mismatch = true;
        if (crr) conn.reset();
        res->lat_ns.push_back(now_ns() - s);
        res->transactions++;
        off += o.size;
    }
    res->bytes = res->transactions * o.size;
    res->seconds = double(now_ns() - t0) / 1e9;
    res->cpu = cpu_seconds() - c0;
    res->verified = o.verify;
}

double pct(std::vector<uint64_t> &v, double p)
{
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return double(v[std::min(v.size() - 1, size_t(p * double(v.size())))]) / 1000.0;
}

int run_client(const Options &o)
{
    Target t;
    in_addr a;
    if (inet_pton(AF_INET, o.connect.c_str(), &a) == 1) t.ip = ntohl(a.s_addr);
    else if (inet_pton(AF_INET6, o.connect.c_str(), t.ip6) == 1) t.v6 = true;
    else die("--connect: \"" + o.connect + "\" is not an IPv4 or IPv6 address");
    struct sigaction sa{};
    sa.sa_handler = on_stop_early;
    sa.sa_flags = SA_RESTART; // a blocked send or recv goes on; the loop looks at the flag
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, nullptr);
    Result r;
    if (o.mode == "stream") client_stream(o, t, &r);
    else client_rr(o, t, o.mode == "crr", &r);
    const double gbps = r.seconds > 0 ? double(r.bytes) * 8 / r.seconds / 1e9 : 0;
    const double gib = double(r.bytes) / double(1ull << 30);
    const double p50 = pct(r.lat_ns, 0.5), p99 = pct(r.lat_ns, 0.99);
    if (r.out_of_ports)
        std::fprintf(stderr,
                     "eta-perf: crr: no local port free after %" PRIu64 " connections in %.2f s (each closed one "
                     "holds its port in TIME-WAIT for 60 s); the rate is over that time\n",
                     r.transactions, r.seconds);
    if (o.json) {
        // The latency distribution at fixed quantiles (1.0: the slowest), for
        // CDF plots (benchmarks/report); pct() has sorted lat_ns above.
        std::string quantiles;
        for (double q : {0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999,
                         0.9999, 1.0}) {
            if (r.lat_ns.empty()) break;
            char b[64];
            std::snprintf(b, sizeof b, "%s[%g,%.1f]", quantiles.empty() ? "" : ",", q, pct(r.lat_ns, q));
            quantiles += b;
        }
        std::printf("{\"latency_us_quantiles\":[%s],", quantiles.c_str());
        std::printf("\"transport\":\"%s\",\"mode\":\"%s\",\"direction\":\"%s\",\"size\":%u,\"bytes\":%" PRIu64
                    ",\"seconds\":%.3f,\"gbit_per_s\":%.3f,\"transactions\":%" PRIu64 ",\"tps\":%.1f,\"p50_us\":%.1f,"
                    "\"p99_us\":%.1f,\"cpu_s\":%.3f,\"cpu_s_per_gib\":%.4f,\"cpu_us_per_txn\":%.2f,\"verified\":%s,"
                    "\"ok\":%s,\"crc32c\":\"%08x\",\"peer_crc32c\":\"%08x\",\"peer_bytes\":%" PRIu64
                    ",\"digest\":\"%s\",\"out_of_ports\":%s}\n",
                    o.transport.c_str(), o.mode.c_str(), o.direction.c_str(), o.size, r.bytes, r.seconds, gbps,
                    r.transactions, r.seconds > 0 ? double(r.transactions) / r.seconds : 0, p50, p99, r.cpu,
                    gib > 0 ? r.cpu / gib : 0, r.transactions ? r.cpu * 1e6 / double(r.transactions) : 0,
                    r.verified ? "true" : "false", r.mismatch ? "false" : "true", r.crc, r.peer_crc, r.peer_bytes,
                    o.verify ? o.digest.c_str() : "none", r.out_of_ports ? "true" : "false");
    } else if (o.mode == "stream") {
        std::printf("%s stream %s: %" PRIu64 " bytes in %.2f s = %.3f Gbit/s, app CPU %.3f s (%.3f s/GiB)%s\n",
                    o.transport.c_str(), o.direction.c_str(), r.bytes, r.seconds, gbps, r.cpu, gib > 0 ? r.cpu / gib : 0,
                    r.mismatch ? "  MISMATCH" : "");
        if (o.verify)
            std::printf("crc32c %08x (%s), peer %08x over %" PRIu64 " bytes: %s\n", r.crc,
                        o.digest == "engine" ? "the engine's digest" : "computed here", r.peer_crc, r.peer_bytes,
                        r.mismatch ? "MISMATCH" : "verified");
    } else {
        std::printf("%s %s size %u: %" PRIu64 " transactions in %.2f s = %.0f/s, p50 %.1f us, p99 %.1f us, app CPU "
                    "%.2f us/txn%s\n",
                    o.transport.c_str(), o.mode.c_str(), o.size, r.transactions, r.seconds,
                    r.seconds > 0 ? double(r.transactions) / r.seconds : 0, p50, p99,
                    r.transactions ? r.cpu * 1e6 / double(r.transactions) : 0, r.mismatch ? "  MISMATCH" : "");
    }
    return r.mismatch ? 3 : 0;
}

// ---- kernel server: one thread per connection -----------------------------

void serve_kernel_conn(std::unique_ptr<Conn> conn, bool verbose)
{
    Hello h{};
    if (!conn->recv_all(&h, sizeof h) || h.magic != kHelloMagic) return;
    std::vector<uint8_t> buf(std::max<uint32_t>(h.size, 4096));
    if (h.mode == kEcho) {
        while (conn->recv_all(buf.data(), h.size) && conn->send(buf.data(), h.size) >= 0) {}
    } else if (h.mode == kSink) {
        uint64_t got = 0;
        uint32_t crc = kCrcSeed;
        for (ssize_t n; (n = conn->recv(buf.data(), buf.size())) > 0;) {
            crc = crc32_iscsi(buf.data(), int(n), crc);
            got += uint64_t(n);
        }
        Trailer t{got, crc, kTrailerHasCrc};
        conn->send(&t, sizeof t);
        if (verbose) std::printf("received %" PRIu64 " bytes crc32c %08x\n", got, crc);
    } else {
        Pattern pat(h.seed);
        const uint64_t deadline = now_ns() + uint64_t(h.duration_ms) * 1'000'000;
        uint64_t off = 0;
        uint32_t crc = kCrcSeed;
        while (h.bytes ? off < h.bytes : now_ns() < deadline) {
            size_t n = h.bytes ? size_t(std::min<uint64_t>(h.size, h.bytes - off)) : h.size;
            pat.fill(off, buf.data(), n);
            crc = crc32_iscsi(buf.data(), int(n), crc);
            if (conn->send(buf.data(), n) < 0) return;
            off += n;
        }
        Trailer t{off, crc, kTrailerHasCrc};
        conn->send(&t, sizeof t);
        conn->shutdown_write();
        Trailer peer{};
        conn->recv_all(&peer, sizeof peer);
        if (verbose)
            std::printf("sent %" PRIu64 " bytes crc32c %08x; peer got %" PRIu64 " crc32c %08x: %s\n", off, crc,
                        peer.bytes, peer.crc, peer_verdict(peer, off, crc));
    }
    std::fflush(stdout);
}

int run_kernel_server(const Options &o)
{
    // [::] with IPV6_V6ONLY off: one listener for IPv4 and IPv6 clients (an
    // IPv4-only kernel falls back to 0.0.0.0).
    int l = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    sockaddr_storage ss{};
    socklen_t sl;
    if (l >= 0) {
        setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        auto *sa = reinterpret_cast<sockaddr_in6 *>(&ss);
        sa->sin6_family = AF_INET6;
        sa->sin6_port = htons(o.port);
        sl = sizeof *sa;
    } else {
        l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        auto *sa = reinterpret_cast<sockaddr_in *>(&ss);
        sa->sin_family = AF_INET;
        sa->sin_port = htons(o.port);
        sl = sizeof *sa;
    }
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, reinterpret_cast<sockaddr *>(&ss), sl) != 0 || listen(l, 4096) != 0)
        die("listen on port " + std::to_string(o.port) + ": " + std::strerror(errno));
    std::printf("listening on port %u (kernel)\n", o.port);
    std::fflush(stdout);
    for (;;) {
        int fd = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        auto conn = std::make_unique<KernelConn>(fd);
        if (o.once) {
            serve_kernel_conn(std::move(conn), true);
            return 0;
        }
        std::thread(serve_kernel_conn, std::move(conn), !o.json).detach();
    }
}

} // namespace

int main(int argc, char **argv)
{
    CLI::App app{"eta-perf: traffic over eta's native API (dti) or kernel sockets, against any eta-perf peer"};
    app.require_subcommand(1);
    Options o;
    auto common = [&](CLI::App *sub) {
        sub->add_option("-t,--transport", o.transport, "dti (through eta-ppe) or kernel")
            ->check(CLI::IsMember({"dti", "kernel"}))
            ->capture_default_str();
        sub->add_option("-p,--port", o.port, "TCP port")->capture_default_str();
        sub->add_flag("-j,--json", o.json, "machine-readable output");
        sub->add_option("--spin-us", g_spin_us, "dti: the most a wait spins before it sleeps (default: libdti's)")
            ->check(CLI::Range(0, 1000000));
        sub->add_flag("--spin-fixed", g_spin_fixed, "dti: always spin the whole --spin-us (default: adaptive)");
        sub->add_option_function<std::string>(
               "--recv", [](const std::string &v) { g_recv_posted = v == "posted"; },
               "dti client: posted (eta-ppe writes large reads into our buffer; default) or copy (we copy from the "
               "receive ring)")
            ->check(CLI::IsMember({"posted", "copy"}));
    };
    CLI::App *server = app.add_subcommand("server", "serve any number of clients");
    common(server);
    server->add_flag("--once", o.once, "exit after the first connection (after every accepted one is done, for dti)");
    CLI::App *client = app.add_subcommand("client", "run one test against a server");
    common(client);
    client->add_option("-c,--connect", o.connect, "server address (IPv4 or IPv6)")->required();
    client->add_option("-m,--mode", o.mode, "stream, rr (request/response) or crr (connect/request/response)")
        ->check(CLI::IsMember({"stream", "rr", "crr"}))
        ->capture_default_str();
    client->add_option("-d,--direction", o.direction, "stream: send (client to server) or recv")
        ->check(CLI::IsMember({"send", "recv"}))
        ->capture_default_str();
    client->add_option("-s,--size", o.size, "bytes per write (stream) or per request (rr, crr)")
        ->check(CLI::Range(1u, 16u << 20))
        ->capture_default_str();
    client->add_option("--duration", o.duration,
                       "seconds (SIGUSR1 ends them early: a stream sent ends and is verified as usual)")->check(CLI::Range(0.01, 3600.0))->capture_default_str();
    client->add_option("-n,--bytes", o.bytes, "stream: exact bytes instead of a duration; rr/crr: transactions");
    client->add_option("--sndbuf", o.sndbuf,
                       "the send buffer, set before connect as iperf3 -w does (dti: DTI_SO_SNDBUF, the send ring "
                       "that holds it; kernel: SO_SNDBUFFORCE of half, which the kernel doubles); default: none")
        ->check(CLI::Range(4096u, 64u << 20));
    client->add_flag("--verify", o.verify, "CRC32C (ISA-L) over every byte, compared end to end");
    client->add_option("--digest", o.digest,
                       "--verify: app (this program runs CRC32C over the bytes) or engine (eta-ppe's digest of "
                       "them, DTI_OP_DIGEST; needs --transport dti, --mode stream and --bytes)")
        ->check(CLI::IsMember({"app", "engine"}))
        ->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e);
    }
    if (*client && o.digest == "engine" &&
        (!o.verify || o.transport != "dti" || o.mode != "stream" || o.bytes == 0)) {
        std::fprintf(stderr, "eta-perf: --digest engine needs --verify, --transport dti, --mode stream and --bytes N\n");
        return 2;
    }
    int rc;
    if (*client) rc = run_client(o);
    else if (o.transport == "kernel") rc = run_kernel_server(o);
    else rc = eta_perf::run_dti_server(o);
    if (g_dti) dti_detach(g_dti);
    return rc;
}
