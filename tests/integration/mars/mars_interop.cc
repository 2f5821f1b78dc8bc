// mars_interop: TEST HARNESS. Drives one mars::Stack on a DPDK port (the
// lab's accelerated link through net_af_packet, no hugepages) with a small
// mbuf-backed PacketIo of its own, and moves files over TCP to and from real
// kernel programs in the lab's peer namespace.
//
//   mars_interop --vdev DEVARGS --prefix P --ip A.B.C.D [--prefix-len 24]
//                [--send-to IP:PORT FILE]...   connect, send FILE, half-close, wait for the peer's FIN
//                [--recv-on PORT FILE]...      listen, accept one, write all it sends to FILE until FIN
//                [--timeout SECONDS]
//                [--tx-loss PERCENT]   drop that share of the stack's own frames before the
//                                      wire (seeded), so the stack's loss recovery meets the
//                                      kernel too (eta-lab netem impairs only the peer's egress)
//
// Prints READY once the port is up and listeners are open, then one line per
// finished job, and exits 0 when every job finished byte-complete, 1 on a
// connection error or timeout, 2 on setup errors. Polls adaptively: it sleeps
// briefly when idle (this runs beside the peer on a 2-core machine).
#include <mars/stack.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

uint64_t now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); // vDSO: no system call
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

volatile sig_atomic_t g_stop = 0;

// The harness's PacketIo: PacketRef.handle is the rte_mbuf itself.
class MbufIo : public mars::PacketIo {
  public:
    MbufIo(rte_mempool *pool, uint16_t port, double tx_loss) : pool_(pool), port_(port), tx_loss_(tx_loss) {}
    uint16_t alloc(mars::PacketRef *out, uint16_t n) override
    {
        rte_mbuf *m[64];
        uint16_t got = 0;
        while (got < n) {
            uint16_t k = uint16_t(std::min<uint16_t>(64, uint16_t(n - got)));
            if (rte_pktmbuf_alloc_bulk(pool_, m, k) != 0) break;
            for (uint16_t i = 0; i < k; i++) {
                out[got + i] = mars::PacketRef{m[i], rte_pktmbuf_mtod(m[i], uint8_t *), 0,
                                               uint16_t(rte_pktmbuf_tailroom(m[i])), 0};
            }
            got = uint16_t(got + k);
        }
        return got;
    }
    uint16_t transmit(mars::PacketRef *frames, uint16_t n) override
    {
        rte_mbuf *m[256];
        uint16_t sent = 0;
        while (sent < n) {
            uint16_t k = uint16_t(std::min<uint16_t>(256, uint16_t(n - sent)));
            uint16_t kept = 0;
            for (uint16_t i = 0; i < k; i++) {
                rte_mbuf *mb = static_cast<rte_mbuf *>(frames[sent + i].handle);
                if (tx_loss_ > 0 && loss_(rng_) < tx_loss_) {
                    rte_pktmbuf_free(mb); // impaired on purpose: the stack must recover
                    tx_impaired++;
                    continue;
                }
                mb->data_len = frames[sent + i].len;
                mb->pkt_len = frames[sent + i].len;
                m[kept++] = mb;
            }
            const uint16_t offered = k;
            k = kept;
            uint16_t done = 0;
            // A full tx ring drains quickly; retry a bounded number of times.
            for (int tries = 0; tries < 1000 && done < k; tries++) done = uint16_t(done + rte_eth_tx_burst(port_, 0, m + done, uint16_t(k - done)));
            for (uint16_t i = done; i < k; i++) rte_pktmbuf_free(m[i]);
            tx_dropped += uint64_t(k - done);
            sent = uint16_t(sent + offered);
        }
        return n;
    }
    void release(mars::PacketRef *frames, uint16_t n) override
    {
        for (uint16_t i = 0; i < n; i++) rte_pktmbuf_free(static_cast<rte_mbuf *>(frames[i].handle));
    }
    uint64_t tx_dropped = 0, tx_impaired = 0;

  private:
    rte_mempool *pool_;
    uint16_t port_;
    double tx_loss_;
    std::mt19937 rng_{20261123};
    std::uniform_real_distribution<double> loss_{0.0, 100.0};
};

// Ring memory from the ordinary heap, one block per connection.
class HeapRings : public mars::BufferProvider {
  public:
    explicit HeapRings(uint32_t size) : size_(size) {}
    bool provide(uint64_t, mars::RingMemory *out) override
    {
        auto *rx = static_cast<uint8_t *>(std::aligned_alloc(64, size_));
        auto *tx = static_cast<uint8_t *>(std::aligned_alloc(64, size_));
        if (!rx || !tx) {
            std::free(rx);
            std::free(tx);
            return false;
        }
        *out = mars::RingMemory{rx, size_, tx, size_};
        return true;
    }
    void reclaim(uint64_t, const mars::RingMemory &m) override
    {
        std::free(m.rx);
        std::free(m.tx);
    }

  private:
    uint32_t size_;
};

struct Job {
    bool sending = false; // else receiving
    std::string path;
    mars::Endpoint remote;   // sending: whom to connect to
    uint16_t listen_port = 0;
    FILE *file = nullptr;
    mars::SockId listener = mars::kNoSock, sock = mars::kNoSock;
    uint64_t bytes = 0;
    bool eof = false, shut = false, peer_fin = false, closed = false, done = false, failed = false;
    std::string error;
};

bool parse_ip(const char *s, uint32_t *ip)
{
    in_addr a;
    if (inet_pton(AF_INET, s, &a) != 1) return false;
    *ip = ntohl(a.s_addr);
    return true;
}

bool parse_ip_port(const std::string &s, mars::Endpoint *e)
{
    auto colon = s.rfind(':');
    if (colon == std::string::npos) return false;
    int port = std::atoi(s.c_str() + colon + 1);
    if (port <= 0 || port > 65535) return false;
    e->port = uint16_t(port);
    return parse_ip(s.substr(0, colon).c_str(), &e->ip);
}

// Moves file bytes straight into the send ring (the one copy).
bool pump_send(mars::Stack &st, Job &j)
{
    bool progress = false;
    for (int guard = 0; guard < 16 && !j.eof; guard++) {
        mars::RingSpan sp{};
        if (st.tx_view(j.sock, &sp) != 0 || sp.total() == 0) break;
        uint32_t n = 0;
        for (int k = 0; k < 2 && sp.n[k]; k++) {
            size_t r = std::fread(sp.p[k], 1, sp.n[k], j.file);
            n += uint32_t(r);
            if (r < sp.n[k]) {
                j.eof = true;
                break;
            }
        }
        if (n) {
            st.tx_commit(j.sock, n, false);
            j.bytes += n;
            progress = true;
        }
    }
    if (j.eof && !j.shut) {
        j.shut = true;
        st.shutdown(j.sock, false, true);
        progress = true;
    }
    return progress;
}

bool pump_recv(mars::Stack &st, Job &j)
{
    bool progress = false;
    for (int guard = 0; guard < 16; guard++) {
        mars::RingSpan sp{};
        if (st.rx_view(j.sock, &sp) != 0 || sp.total() == 0) break;
        for (int k = 0; k < 2; k++) {
            if (sp.n[k] && std::fwrite(sp.p[k], 1, sp.n[k], j.file) != sp.n[k]) {
                j.failed = true;
                j.error = "write to " + j.path + " failed";
                return true;
            }
        }
        st.rx_consume(j.sock, sp.total());
        j.bytes += sp.total();
        progress = true;
    }
    return progress;
}

} // namespace

int main(int argc, char **argv)
{
    std::string vdev, prefix;
    uint32_t ip = 0;
    uint8_t prefix_len = 24;
    double timeout_s = 60;
    double tx_loss = 0;
    std::vector<Job> jobs;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto need = [&](int k) { return i + k < argc; };
        if (a == "--vdev" && need(1)) {
            vdev = argv[++i];
        } else if (a == "--prefix" && need(1)) {
            prefix = argv[++i];
        } else if (a == "--ip" && need(1)) {
            if (!parse_ip(argv[++i], &ip)) ip = 0;
        } else if (a == "--prefix-len" && need(1)) {
            prefix_len = uint8_t(std::atoi(argv[++i]));
        } else if (a == "--timeout" && need(1)) {
            timeout_s = std::atof(argv[++i]);
        } else if (a == "--tx-loss" && need(1)) {
            tx_loss = std::atof(argv[++i]);
        } else if (a == "--send-to" && need(2)) {
            Job j;
            j.sending = true;
            if (!parse_ip_port(argv[++i], &j.remote)) ip = 0;
            j.path = argv[++i];
            jobs.push_back(j);
        } else if (a == "--recv-on" && need(2)) {
            Job j;
            j.listen_port = uint16_t(std::atoi(argv[++i]));
            j.path = argv[++i];
            jobs.push_back(j);
        } else {
            ip = 0;
            break;
        }
    }
    if (vdev.empty() || prefix.empty() || ip == 0 || jobs.empty() || timeout_s <= 0) {
        std::fprintf(stderr, "usage: mars_interop --vdev DEVARGS --prefix P --ip A.B.C.D [--prefix-len N] "
                             "[--send-to IP:PORT FILE]... [--recv-on PORT FILE]... [--timeout S] [--tx-loss PERCENT]\n");
        return 2;
    }
    for (auto &j : jobs) {
        j.file = std::fopen(j.path.c_str(), j.sending ? "rb" : "wb");
        if (!j.file) {
            std::fprintf(stderr, "mars_interop: cannot open %s: %s\n", j.path.c_str(), std::strerror(errno));
            return 2;
        }
    }
    std::signal(SIGTERM, [](int) { g_stop = 1; });
    std::signal(SIGINT, [](int) { g_stop = 1; });

    // --no-huge with --in-memory is refused by EAL; --no-shconf keeps the
    // runtime directory small, and the script removes it at exit.
    std::vector<std::string> eal = {"mars_interop", "-l", "0", "--no-huge", "-m", "256", "--no-shconf", "--no-telemetry",
                                    "--no-pci", "--file-prefix", prefix, "--vdev", vdev, "--log-level", "*:warning"};
    std::vector<char *> eal_argv;
    for (auto &s : eal) eal_argv.push_back(s.data());
    if (rte_eal_init(int(eal_argv.size()), eal_argv.data()) < 0) {
        std::fprintf(stderr, "mars_interop: EAL init failed: %s\n", rte_strerror(rte_errno));
        return 2;
    }
    int rc = 2;
    const uint16_t port = 0;
    rte_mempool *pool = rte_pktmbuf_pool_create("interop", 16383, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    rte_eth_conf conf{};
    if (rte_eth_dev_count_avail() != 1 || pool == nullptr || rte_eth_dev_configure(port, 1, 1, &conf) < 0 ||
        rte_eth_rx_queue_setup(port, 0, 1024, SOCKET_ID_ANY, nullptr, pool) < 0 ||
        rte_eth_tx_queue_setup(port, 0, 1024, SOCKET_ID_ANY, nullptr) < 0 || rte_eth_dev_start(port) < 0) {
        std::fprintf(stderr, "mars_interop: could not start port %s\n", vdev.c_str());
        rte_eal_cleanup();
        return 2;
    }
    {
        MbufIo io(pool, port, tx_loss);
        HeapRings rings(1u << 20);
        mars::StackConfig cfg;
        rte_ether_addr mac;
        rte_eth_macaddr_get(port, &mac);
        std::memcpy(cfg.mac.b, mac.addr_bytes, 6);
        cfg.ip = ip;
        cfg.prefix = prefix_len;
        cfg.max_sockets = 64;
        cfg.tcp.rcvbuf = cfg.tcp.sndbuf = 1u << 20;
        std::random_device rd;
        cfg.isn_secret[0] = (uint64_t(rd()) << 32) | rd();
        cfg.isn_secret[1] = (uint64_t(rd()) << 32) | rd();
        std::string err;
        auto stack = mars::Stack::create(cfg, io, rings, &err);
        if (!stack) {
            std::fprintf(stderr, "mars_interop: Stack::create: %s\n", err.c_str());
        } else {
            mars::Stack &st = *stack;
            uint64_t t = now_ns();
            st.announce(t);
            bool setup_ok = true;
            for (size_t i = 0; i < jobs.size() && setup_ok; i++) {
                Job &j = jobs[i];
                int64_t s = st.open(i);
                if (s < 0) {
                    setup_ok = false;
                    break;
                }
                if (j.sending) {
                    j.sock = mars::SockId(s);
                    setup_ok = st.connect(j.sock, j.remote, t) == 0;
                } else {
                    j.listener = mars::SockId(s);
                    setup_ok = st.bind(j.listener, mars::Endpoint{ip, j.listen_port}) == 0 && st.listen(j.listener, 4) == 0;
                }
            }
            if (!setup_ok) {
                std::fprintf(stderr, "mars_interop: could not open the sockets\n");
            } else {
                std::printf("READY\n");
                std::fflush(stdout);
                const uint64_t deadline = t + uint64_t(timeout_s * 1e9);
                uint32_t idle = 0;
                rc = 1;
                while (!g_stop && (t = now_ns()) < deadline) {
                    bool progress = false;
                    rte_mbuf *m[64];
                    mars::PacketRef frames[64];
                    uint16_t n = rte_eth_rx_burst(port, 0, m, 64);
                    for (uint16_t i = 0; i < n; i++)
                        frames[i] = mars::PacketRef{m[i], rte_pktmbuf_mtod(m[i], uint8_t *), m[i]->data_len, 0, 0};
                    if (n) {
                        st.input(frames, n, t);
                        progress = true;
                    }
                    st.poll(t);
                    mars::SockEvent ev[32];
                    uint16_t ne;
                    while ((ne = st.events(ev, 32)) > 0) {
                        progress = true;
                        for (uint16_t e = 0; e < ne; e++) {
                            Job &j = jobs[ev[e].user < jobs.size() ? ev[e].user : 0];
                            if (ev[e].sock == j.listener && (ev[e].bits & mars::kEvAcceptable) && j.sock == mars::kNoSock) {
                                int64_t a = st.accept(j.listener, ev[e].user);
                                if (a >= 0) j.sock = mars::SockId(a);
                                continue;
                            }
                            if (ev[e].sock != j.sock) continue;
                            if (ev[e].bits & (mars::kEvReset | mars::kEvError)) {
                                mars::SockInfo in{};
                                st.info(j.sock, &in);
                                j.failed = true;
                                j.error = std::string((ev[e].bits & mars::kEvReset) ? "reset" : "error") + " (errno " +
                                          std::to_string(in.error) + ") after " + std::to_string(j.bytes) + " bytes";
                            }
                            if (ev[e].bits & mars::kEvPeerClosed) j.peer_fin = true;
                            if (ev[e].bits & mars::kEvClosed) j.closed = true;
                        }
                    }
                    bool all_done = true, any_failed = false;
                    for (auto &j : jobs) {
                        if (j.sock != mars::kNoSock && !j.failed && !j.done) {
                            progress |= j.sending ? pump_send(st, j) : pump_recv(st, j);
                            if (j.peer_fin && !j.sending) pump_recv(st, j);
                            mars::SockInfo in{};
                            st.info(j.sock, &in);
                            bool finished = j.sending ? (j.shut && in.tx_unacked == 0 && j.peer_fin)
                                                      : (j.peer_fin && in.rx_readable == 0);
                            if (finished) {
                                j.done = true;
                                st.close(j.sock);
                                std::printf("%s %s: %llu bytes\n", j.sending ? "sent" : "received", j.path.c_str(),
                                            (unsigned long long)j.bytes);
                                std::fflush(stdout);
                            }
                        }
                        all_done &= j.done;
                        any_failed |= j.failed;
                    }
                    if (any_failed) break;
                    if (all_done) {
                        // Let the final ACKs and FINs go out before leaving.
                        uint64_t linger_until = now_ns() + 200'000'000ull;
                        while ((t = now_ns()) < linger_until) {
                            uint16_t k = rte_eth_rx_burst(port, 0, m, 64);
                            for (uint16_t i = 0; i < k; i++)
                                frames[i] = mars::PacketRef{m[i], rte_pktmbuf_mtod(m[i], uint8_t *), m[i]->data_len, 0, 0};
                            if (k) st.input(frames, k, t);
                            st.poll(t);
                            while (st.events(ev, 32) > 0) {
                            }
                            if (!k) usleep(200);
                        }
                        rc = 0;
                        break;
                    }
                    // Adaptive polling: spin while busy, nap when idle, never past a timer.
                    if (progress) {
                        idle = 0;
                    } else if (++idle > 64) {
                        uint64_t next = st.next_deadline_ns();
                        uint64_t nap = 100'000; // 100 us
                        if (next > t && next - t < nap) nap = next - t;
                        if (next > t || next == UINT64_MAX) usleep(useconds_t(nap / 1000 ? nap / 1000 : 1));
                    }
                }
                for (auto &j : jobs) {
                    if (!j.done)
                        std::fprintf(stderr, "mars_interop: %s %s unfinished after %llu bytes%s%s\n",
                                     j.sending ? "send" : "receive", j.path.c_str(), (unsigned long long)j.bytes,
                                     j.error.empty() ? "" : ": ", j.error.c_str());
                }
                const mars::StackStats &s = st.stats();
                std::printf("stats: rx_frames %llu tx_frames %llu retransmits %llu fast_retransmits %llu timeouts %llu "
                            "fastpath_hits %llu misses %llu drop_tcp_csum %llu ooo_segments %llu tx_dropped %llu "
                            "tx_impaired %llu rack_lost %llu tlp_probes %llu dsacks_in %llu dsacks_sent %llu\n",
                            (unsigned long long)s.rx_frames, (unsigned long long)s.tx_frames,
                            (unsigned long long)s.tcp_retransmits, (unsigned long long)s.tcp_fast_retransmits,
                            (unsigned long long)s.tcp_timeouts, (unsigned long long)s.fastpath_hits,
                            (unsigned long long)s.fastpath_misses, (unsigned long long)s.drop_tcp_csum,
                            (unsigned long long)s.tcp_ooo_segments, (unsigned long long)io.tx_dropped,
                            (unsigned long long)io.tx_impaired, (unsigned long long)s.tcp_rack_lost,
                            (unsigned long long)s.tcp_tlp_probes, (unsigned long long)s.tcp_dsacks_in,
                            (unsigned long long)s.tcp_dsacks_sent);
                if (g_stop) std::fprintf(stderr, "mars_interop: stopped by signal\n");
                else if (rc != 0 && now_ns() >= deadline) std::fprintf(stderr, "mars_interop: timed out\n");
            }
        }
        stack.reset();
    }
    for (auto &j : jobs) std::fclose(j.file);
    rte_eth_dev_stop(port);
    rte_eth_dev_close(port);
    rte_mempool_free(pool);
    rte_eal_cleanup();
    return rc;
}
