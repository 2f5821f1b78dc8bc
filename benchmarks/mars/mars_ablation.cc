// benchmarks/mars/mars_ablation.cc: the MARS latency-hiding ablation (seed
// 003, Figure 11), Google Benchmark; numbers only, nothing asserted.
//
// BM_RxAblation/<config>/<connections>/<segment_bytes>: Stack::input() of
// bursts of 32 in-order data segments, frames spread over the connections
// (a different connection every frame, drawn at random; with 1 connection
// every frame is the same flow), payload copied into the application's
// receive ring. Configurations:
//   rtc         run to completion: strands 1, no prefetch, CPU copy
//   prefetch    + software prefetch one frame ahead (strands 1)
//   strands     + the strand pipeline (kStrands in flight), no prefetch
//   async_copy  + the asynchronous copy path only (strands 1, no prefetch),
//               with mars::CpuCopyEngine: this machine has no DMA engine, so
//               the core still copies; what is measured is the cost of the
//               deferral (completions, in-order visibility)
//   async_dmadev the asynchronous copy path (strands 1, no prefetch) on a
//               real DPDK dmadev, ppe::DmaCopyEngine on the dma_skeleton
//               software device (its thread pinned to the other CPU): what
//               the engine core still spends when the copy leaves it
//               (descriptors, doorbell, completions). Untimed after each
//               burst: the copies are waited for before the application
//               reads. Skipped when the EAL or the device cannot start.
//   all         strands + prefetch, the core copying synchronously ("CPU
//               copy": with no DMA engine, the deferral only costs; this is
//               also what eta-ppe runs by default)
// BM_RxAblation6/<config>/<connections>/<segment_bytes>: the same over IPv6
// (issue 31: IPv6 frames through the strand stages and FlowTable6's split
// lookup), rtc, prefetch, strands and all, 512-byte segments: connections
// from 2001:2::2.. (64,512 ports per peer address) to [2001:2::1]:80.
// Counters: ns_per_frame (the median time of one input() burst over its 32
// frames: on a shared machine a burst the scheduler interrupted would
// otherwise dominate the mean; Google Benchmark's own time columns cover the
// whole iteration, frame preparation included, and are not the figure),
// fastpath_ratio (frames that took header prediction: 1.0 means every frame
// was delivered by the path being measured).
//
// Memory: connection blocks and the flow table (~1 GiB at 1,000,000
// connections) plus receive rings: one 64 KiB ring for 1 connection, else
// 4 KiB rings, distinct per connection up to 65,536 of them (256 MiB) and
// shared beyond that (connection i writes ring i mod 65,536: the rings still
// span far more memory than any cache, which is what matters here).
// Frames are prepared outside the timed region; after each burst, outside
// it too, the application consumes what arrived (window updates go out).
#include "bench_conn.h"
#include "bench_conn6.h"
#include "dma_copy.h"

#include <mars/copy.h>

#include <rte_eal.h>

#include <unistd.h>

#include <benchmark/benchmark.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

namespace mars::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBurst = 32;
constexpr uint32_t kDefaultStrands = 16;
constexpr uint32_t kMaxDistinctRings = 65536;
constexpr uint32_t kCopyThreshold = 0; // every payload through the copy engine

// The dmadev of async_dmadev (nullptr: not available here).
std::unique_ptr<ppe::DmaCopyEngine> g_dma;
std::string g_eal_prefix;

// EAL without hugepages and the dma_skeleton vdev, its copy thread on the
// second CPU (lcore 1) while the benchmark runs on the first.
void open_dmadev()
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
    g_eal_prefix = "mars-ablation-" + std::to_string(getpid());
    std::vector<std::string> args = {"mars_ablation", "--no-huge", "--no-shconf", "--no-pci", "--no-telemetry",
                                     "-m", "64", "--log-level=*:error", "--file-prefix", g_eal_prefix,
                                     "-l", "0,1", "--vdev", "dma_skeleton,lcore=1"};
    std::vector<char *> argv;
    for (auto &a : args) argv.push_back(a.data());
    if (rte_eal_init(int(argv.size()), argv.data()) < 0) return;
    std::string err;
    g_dma = ppe::DmaCopyEngine::open("dma_skeleton", 1024, &err);
    if (!g_dma) std::fprintf(stderr, "mars_ablation: async_dmadev skipped: %s\n", err.c_str());
}

void close_dmadev()
{
    if (g_eal_prefix.empty()) return;
    g_dma.reset();
    rte_eal_cleanup();
    std::error_code ec;
    std::filesystem::remove_all("/var/run/dpdk/" + g_eal_prefix, ec);
}

uint32_t ablation_strands()
{
    const char *v = std::getenv("MARS_ABLATION_STRANDS");
    const unsigned long n = v ? std::strtoul(v, nullptr, 10) : 0;
    return n >= 2 && n <= StackConfig::kMaxStrands ? uint32_t(n) : kDefaultStrands;
}

// Receive rings from one anonymous mapping; the send side is never used.
class AblationRings : public BufferProvider {
  public:
    AblationRings(uint32_t rings, uint32_t ring_bytes) : rings_(rings), ring_bytes_(ring_bytes)
    {
        bytes_ = size_t(rings) * ring_bytes;
        void *p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::runtime_error("cannot map " + std::to_string(bytes_ >> 20) + " MiB of rings");
        base_ = static_cast<uint8_t *>(p);
        // Touch every page now: a first-touch page fault inside the timed
        // region would be charged to whichever configuration runs first.
        std::memset(base_, 0, bytes_);
    }
    ~AblationRings() override { munmap(base_, bytes_); }
    bool provide(uint64_t, RingMemory *out) override
    {
        *out = RingMemory{base_ + size_t(next_++ % rings_) * ring_bytes_, ring_bytes_, tx_, sizeof tx_};
        return true;
    }
    void reclaim(uint64_t, const RingMemory &) override {}

  private:
    uint32_t rings_, ring_bytes_;
    size_t bytes_ = 0;
    uint8_t *base_ = nullptr;
    uint64_t next_ = 0;
    alignas(64) uint8_t tx_[4096];
};

// The stack both worlds (IPv4, IPv6) receive with: one ring per
// connection of ring_bytes (shared past kMaxDistinctRings), no timestamps
// or SACK, room for every connection.
RawPeer::Options world_options(uint32_t conns, uint32_t ring_bytes, AblationRings *rings)
{
    RawPeer::Options o;
    o.stack.max_sockets = conns + 16;
    o.stack.tcp.rcvbuf = ring_bytes;
    o.stack.tcp.sndbuf = 4096;
    o.stack.tcp.timestamps = false;
    o.stack.tcp.sack = false;
    o.stack.tcp.syn_backlog = 64;
    o.provider = rings;
    o.pool_frames = 1024;
    return o;
}

struct World {
    struct Flow {
        uint32_t peer_ip;
        uint16_t peer_port;
        uint32_t seq, ack;
        SockId sock;
    };
    std::unique_ptr<AblationRings> rings;
    std::unique_ptr<RawPeer> peer;
    std::vector<Flow> flows;
    std::vector<uint8_t> tmpl[3]; // per segment size
    CpuCopyEngine cpu_copy;
    uint32_t n = 0;

    explicit World(uint32_t conns) : n(conns)
    {
        const uint32_t ring_bytes = conns == 1 ? 65536 : 4096;
        rings = std::make_unique<AblationRings>(std::min(conns, kMaxDistinctRings), ring_bytes);
        RawPeer::Options o = world_options(conns, ring_bytes, rings.get());
        peer = std::make_unique<RawPeer>(o);
        SockId l = peer->listen(80, 1024);
        sim::TcpOptions syn;
        syn.mss = 1460;
        flows.reserve(conns);
        for (uint32_t i = 0; i < conns; i++) {
            peer->peer_ip = sim::ipv4(198, 18, 0, uint8_t(2 + i / 64512));
            const uint16_t port = uint16_t(1024 + i % 64512);
            RawPeer::Conn c;
            std::string why;
            const SockId s = peer->open_passive(l, 80, port, &c, syn, &why);
            if (s == kNoSock) throw std::runtime_error("connection " + std::to_string(i) + ": " + why);
            flows.push_back(Flow{peer->peer_ip, port, c.peer_nxt, c.stack_nxt, s});
            if (i % 4096 == 0) {
                peer->take();
                peer->take_events();
            }
            if (i == 0) {
                const size_t sizes[3] = {64, 512, 1460};
                for (int k = 0; k < 3; k++)
                    tmpl[k] = sim::build_tcp(peer->seg(c, sim::kAck, std::vector<uint8_t>(sizes[k], 0x5a)));
            }
        }
        peer->take();
        peer->take_events();
        peer->set_capture(false);
        warm_up();
    }

    // One small segment on every connection, untimed, so that whichever
    // configuration runs first does not pay for first touches (pages, the
    // first data segment's state changes) that the others then skip.
    void warm_up()
    {
        Stack &st = peer->stack();
        for (uint32_t at = 0; at < n; at += 32) {
            PacketRef burst[32];
            uint16_t k = 0;
            for (uint32_t i = at; i < n && k < 32; i++, k++) {
                if (!prepare(flows[i], tmpl[0], &burst[k])) throw std::runtime_error("frame pool empty");
                flows[i].seq += 64;
            }
            st.input(burst, k, peer->now);
            for (uint32_t i = at; i < at + k; i++) {
                RingSpan sp{};
                if (st.rx_view(flows[i].sock, &sp) == 0 && sp.total()) st.rx_consume(flows[i].sock, sp.total());
            }
        }
        st.poll(peer->now);
    }

    bool prepare(const Flow &f, const std::vector<uint8_t> &t, PacketRef *out)
    {
        return prepare_flow(peer->pool(), t, f.peer_ip, f.peer_port, f.seq, f.ack, out);
    }
};

// One world at a time (the largest needs about a gigabyte): benchmarks are
// registered connections-major, so each size is built once.
std::unique_ptr<World> g_world;
struct World6;
std::unique_ptr<World6> g_world6;

World *world(uint32_t conns, std::string *err)
{
    std::unique_ptr<World> &w = g_world;
    if (!w || w->n != conns) {
        w.reset();
        g_world6.reset();
        try {
            w = std::make_unique<World>(conns);
        } catch (const std::exception &e) {
            *err = e.what();
        }
    }
    return w.get();
}

// The IPv6 world: connections over IPv6 (bench_conn6.h), 64,512 per peer
// address, each address's MAC taught by a neighbour solicitation.
struct World6 {
    struct Flow {
        Ip6Addr peer;
        uint16_t port;
        uint32_t seq, ack;
        SockId sock;
    };
    std::unique_ptr<AblationRings> rings;
    std::unique_ptr<RawPeer> peer;
    std::vector<Flow> flows;
    std::vector<uint8_t> tmpl; // 512-byte segments
    uint32_t n = 0;

    explicit World6(uint32_t conns) : n(conns)
    {
        const uint32_t ring_bytes = conns == 1 ? 65536 : 4096;
        rings = std::make_unique<AblationRings>(std::min(conns, kMaxDistinctRings), ring_bytes);
        RawPeer::Options o = world_options(conns, ring_bytes, rings.get());
        v6::options6(o);
        peer = std::make_unique<RawPeer>(o);
        const int64_t l = v6::listen6(*peer, 1024);
        if (l < 0) throw std::runtime_error("IPv6 listener");
        flows.reserve(conns);
        for (uint32_t i = 0; i < conns; i++) {
            const Ip6Addr from = v6::addr6(uint8_t(2 + i / 64512));
            if (i % 64512 == 0 && i) v6::teach6(*peer, from);
            const uint16_t port = uint16_t(1024 + i % 64512);
            v6::Conn6 c;
            if (!v6::connect_one6(*peer, l, false, port, &c, from))
                throw std::runtime_error("IPv6 connection " + std::to_string(i));
            flows.push_back(Flow{from, port, c.peer_isn + 1, c.stack_isn + 1, c.sock});
            if (i % 4096 == 0) {
                peer->take_raw();
                peer->take_events();
            }
        }
        tmpl = v6::frame6(peer->stack_mac, peer->peer_mac, v6::addr6(2), v6::addr6(1), 6, 64,
                          v6::tcp(1024, 0, 0, 0x10, {}, 512));
        peer->take_raw();
        peer->take_events();
        peer->set_keep_raw(false);
        warm_up();
    }

    void warm_up()
    {
        Stack &st = peer->stack();
        for (uint32_t at = 0; at < n; at += 32) {
            PacketRef burst[32];
            uint16_t k = 0;
            for (uint32_t i = at; i < n && k < 32; i++, k++) {
                if (!prepare(flows[i], &burst[k])) throw std::runtime_error("frame pool empty");
                flows[i].seq += 512;
            }
            st.input(burst, k, peer->now);
            for (uint32_t i = at; i < at + k; i++) {
                RingSpan sp{};
                if (st.rx_view(flows[i].sock, &sp) == 0 && sp.total()) st.rx_consume(flows[i].sock, sp.total());
            }
        }
        st.poll(peer->now);
    }

    // The template with this flow's source address, port and numbers,
    // flagged NIC-verified.
    bool prepare(const Flow &f, PacketRef *out)
    {
        if (!peer->pool().get(out)) return false;
        std::memcpy(out->data, tmpl.data(), tmpl.size());
        out->len = uint16_t(tmpl.size());
        out->room = 0;
        std::memcpy(out->data + 22, f.peer.b, 16);
        out->data[54] = uint8_t(f.port >> 8);
        out->data[55] = uint8_t(f.port);
        set_be32(out->data + 58, f.seq);
        set_be32(out->data + 62, f.ack);
        out->flags = kRxIpCsumGood | kRxL4CsumGood;
        return true;
    }
};

World6 *world6(uint32_t conns, std::string *err)
{
    if (!g_world6 || g_world6->n != conns) {
        g_world6.reset();
        g_world.reset(); // one world at a time (memory)
        try {
            g_world6 = std::make_unique<World6>(conns);
        } catch (const std::exception &e) {
            *err = e.what();
        }
    }
    return g_world6.get();
}

void release_worlds()
{
    g_world.reset();
    g_world6.reset();
}

struct Config {
    const char *name;
    uint32_t strands;
    bool prefetch;
    bool async_copy;
    bool dmadev = false;
};

void BM_RxAblation(benchmark::State &state, Config cfg, uint32_t conns, uint32_t seg)
{
    std::string err;
    World *w = world(conns, &err);
    if (!w) {
        state.SkipWithError(("could not open the connections: " + err).c_str());
        return;
    }
    Stack &st = w->peer->stack();
    if (st.set_receive_pipeline(cfg.strands, cfg.prefetch) != 0) {
        state.SkipWithError("set_receive_pipeline refused the configuration");
        return;
    }
    if (cfg.dmadev && !g_dma) {
        state.SkipWithError("no dmadev (EAL or dma_skeleton did not start)");
        return;
    }
    CopyEngine *engine = cfg.dmadev ? static_cast<CopyEngine *>(g_dma.get()) : cfg.async_copy ? &w->cpu_copy : nullptr;
    st.set_copy_engine(engine, kCopyThreshold);
    const std::vector<uint8_t> &tmpl = w->tmpl[seg == 64 ? 0 : seg == 512 ? 1 : 2];
    std::mt19937 rng(11);
    std::vector<uint32_t> order(size_t(std::min<uint32_t>(conns, 1u << 16)) * 4);
    for (auto &x : order) x = uint32_t(rng() % conns);
    for (size_t i = 1; conns > 1 && i < order.size(); i++)
        if (order[i] == order[i - 1]) order[i] = (order[i] + 1) % conns; // never the same flow twice in a row
    size_t pos = 0;
    const StackStats s0 = st.stats();
    std::vector<double> burst_s; // per timed burst: the median is the figure
    burst_s.reserve(1u << 20);
    uint64_t frames = 0;
    for (auto _ : state) {
        PacketRef burst[kBurst];
        World::Flow *fl[kBurst];
        for (int i = 0; i < kBurst; i++) {
            fl[i] = &w->flows[order[pos]];
            pos = (pos + 1) % order.size();
            if (!w->prepare(*fl[i], tmpl, &burst[i])) {
                state.SkipWithError("frame pool empty");
                return;
            }
            fl[i]->seq += seg;
        }
        const auto t0 = Clock::now();
        st.input(burst, kBurst, w->peer->now);
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        burst_s.push_back(dt);
        frames += kBurst;
        // The device's copies land before the application reads (not timed).
        if (cfg.dmadev) {
            for (uint32_t k = 0; k < (1u << 24) && g_dma->outstanding(); k++) st.poll(w->peer->now);
            st.poll(w->peer->now);
        }
        // The application reads what arrived (not timed).
        for (int i = 0; i < kBurst; i++) {
            RingSpan sp{};
            if (st.rx_view(fl[i]->sock, &sp) == 0 && sp.total()) st.rx_consume(fl[i]->sock, sp.total());
        }
    }
    const StackStats &s1 = st.stats();
    state.SetItemsProcessed(int64_t(frames));
    state.SetBytesProcessed(int64_t(frames * seg));
    double median = 0;
    if (!burst_s.empty()) {
        std::nth_element(burst_s.begin(), burst_s.begin() + long(burst_s.size() / 2), burst_s.end());
        median = burst_s[burst_s.size() / 2];
    }
    state.counters["ns_per_frame"] = median * 1e9 / kBurst;
    state.counters["fastpath_ratio"] = double(s1.fastpath_hits - s0.fastpath_hits) / double(frames ? frames : 1);
    state.counters["strands"] = double(cfg.strands);
}

// BM_RxAblation's timed loop over IPv6 (no copy engine configurations).
void BM_RxAblation6(benchmark::State &state, Config cfg, uint32_t conns)
{
    std::string err;
    World6 *w = world6(conns, &err);
    if (!w) {
        state.SkipWithError(("could not open the connections: " + err).c_str());
        return;
    }
    Stack &st = w->peer->stack();
    if (st.set_receive_pipeline(cfg.strands, cfg.prefetch) != 0) {
        state.SkipWithError("set_receive_pipeline refused the configuration");
        return;
    }
    st.set_copy_engine(nullptr, kCopyThreshold);
    std::mt19937 rng(11);
    std::vector<uint32_t> order(size_t(std::min<uint32_t>(conns, 1u << 16)) * 4);
    for (auto &x : order) x = uint32_t(rng() % conns);
    for (size_t i = 1; conns > 1 && i < order.size(); i++)
        if (order[i] == order[i - 1]) order[i] = (order[i] + 1) % conns;
    size_t pos = 0;
    const StackStats s0 = st.stats();
    std::vector<double> burst_s;
    burst_s.reserve(1u << 20);
    uint64_t frames = 0;
    for (auto _ : state) {
        PacketRef burst[kBurst];
        World6::Flow *fl[kBurst];
        for (int i = 0; i < kBurst; i++) {
            fl[i] = &w->flows[order[pos]];
            pos = (pos + 1) % order.size();
            if (!w->prepare(*fl[i], &burst[i])) {
                state.SkipWithError("frame pool empty");
                return;
            }
            fl[i]->seq += 512;
        }
        const auto t0 = Clock::now();
        st.input(burst, kBurst, w->peer->now);
        burst_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        frames += kBurst;
        for (int i = 0; i < kBurst; i++) {
            RingSpan sp{};
            if (st.rx_view(fl[i]->sock, &sp) == 0 && sp.total()) st.rx_consume(fl[i]->sock, sp.total());
        }
    }
    const StackStats &s1 = st.stats();
    state.SetItemsProcessed(int64_t(frames));
    state.SetBytesProcessed(int64_t(frames * 512));
    double median = 0;
    if (!burst_s.empty()) {
        std::nth_element(burst_s.begin(), burst_s.begin() + long(burst_s.size() / 2), burst_s.end());
        median = burst_s[burst_s.size() / 2];
    }
    state.counters["ns_per_frame"] = median * 1e9 / kBurst;
    state.counters["fastpath_ratio"] = double(s1.fastpath_hits - s0.fastpath_hits) / double(frames ? frames : 1);
    state.counters["strand_yields_per_frame"] = double(s1.strand_yields - s0.strand_yields) / double(frames ? frames : 1);
    state.counters["strands"] = double(cfg.strands);
}

void register_all()
{
    const uint32_t s = ablation_strands();
    const Config configs[] = {
        {"rtc", 1, false, false},  {"prefetch", 1, true, false}, {"strands", s, false, false},
        {"async_copy", 1, false, true}, {"async_dmadev", 1, false, true, true}, {"all", s, true, false},
    };
    for (uint32_t conns : {1u, 10000u, 1000000u}) {
        for (uint32_t seg : {64u, 512u, 1460u}) {
            for (const Config &c : configs) {
                const std::string name =
                    std::string("BM_RxAblation/") + c.name + "/" + std::to_string(conns) + "/" + std::to_string(seg);
                // No UseManualTime(): it would append "/manual_time" to the
                // name, which report tools match exactly. The time columns
                // therefore include the untimed preparation; ns_per_frame is
                // the figure.
                benchmark::RegisterBenchmark(name.c_str(), BM_RxAblation, c, conns, seg)->Unit(benchmark::kNanosecond);
            }
        }
    }
    for (uint32_t conns : {1u, 10000u, 1000000u}) {
        for (const Config &c : configs) {
            if (c.async_copy) continue;
            const std::string name = std::string("BM_RxAblation6/") + c.name + "/" + std::to_string(conns) + "/512";
            benchmark::RegisterBenchmark(name.c_str(), BM_RxAblation6, c, conns)->Unit(benchmark::kNanosecond);
        }
    }
}

} // namespace
} // namespace mars::bench

int main(int argc, char **argv)
{
    mars::bench::register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    mars::bench::open_dmadev();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    // Every stack (they live in static worlds) is gone before the device.
    mars::bench::release_worlds();
    mars::bench::close_dmadev();
    return 0;
}
