// benchmarks/mars/mars_bench.cc: microbenchmarks of the mars packet path
// (Google Benchmark; numbers only, nothing asserted). Frames are prepared
// outside the timed region; each iteration times one call (manual time):
//   BM_RxData      input() of a burst of 32 in-order full-sized data segments
//                  on an established connection (the header-prediction path)
//   BM_RxPureAck   input() of a burst of pure ACKs each advancing snd.una
//   BM_TxSegments  tx_commit() + poll() building and emitting segments
//   BM_Lookup      input() of pure ACKs (acking nothing new) spread over N
//                  connections: same connection (last-flow cache hits) or a
//                  different one every frame (misses)
// Per-segment numbers are the items_per_second column inverted; the
// counters say how many frames took the fast path / hit the flow cache.
#include "bench_conn.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <memory>
#include <random>

namespace mars::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBurst = 32;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- receive: in-order data -----------------------------------------------

void BM_RxData(benchmark::State &state)
{
    const bool csum_good = state.range(0) != 0;
    const bool ts = state.range(1) != 0;
    RawPeer peer(bench_options(1u << 22, 4096, ts));
    RawPeer::Conn c = establish(peer, ts);
    peer.set_capture(false);
    Stack &st = peer.stack();
    const size_t payload = ts ? 1448 : 1460;
    const std::vector<uint8_t> tmpl = sim::build_tcp(peer.seg(c, sim::kAck, std::vector<uint8_t>(payload, 0x42)));
    const uint32_t tsval = c.peer_tsval + uint32_t(peer.now / 1'000'000);
    uint32_t seq = c.peer_nxt;
    const StackStats s0 = st.stats();
    for (auto _ : state) {
        PacketRef burst[kBurst];
        for (int i = 0; i < kBurst; i++) {
            if (!prepare(peer.pool(), tmpl, seq + uint32_t(i * payload), c.stack_nxt, ts, tsval, csum_good, &burst[i])) {
                state.SkipWithError("frame pool empty");
                return;
            }
        }
        auto t0 = Clock::now();
        st.input(burst, kBurst, peer.now);
        state.SetIterationTime(seconds_since(t0));
        seq += uint32_t(kBurst * payload);
        SockInfo in{};
        st.info(c.sock, &in);
        st.rx_consume(c.sock, in.rx_readable);
        st.poll(peer.now); // emits the ACKs (not timed)
    }
    const StackStats &s1 = st.stats();
    uint64_t segs = uint64_t(state.iterations()) * kBurst;
    state.SetItemsProcessed(int64_t(segs));
    state.SetBytesProcessed(int64_t(segs * payload));
    state.counters["fastpath_ratio"] = double(s1.fastpath_hits - s0.fastpath_hits) / double(segs ? segs : 1);
}
BENCHMARK(BM_RxData)->ArgNames({"csum_offloaded", "ts"})->ArgsProduct({{0, 1}, {0, 1}})->UseManualTime();

// ---- receive: pure ACKs ----------------------------------------------------

// Fills the send ring with (arbitrary) bytes so the stack always has data.
void fill_send_ring(Stack &st, SockId s)
{
    RingSpan sp{};
    if (st.tx_view(s, &sp) == 0 && sp.total() > 0) st.tx_commit(s, sp.total(), false);
}

void BM_RxPureAck(benchmark::State &state)
{
    RawPeer peer(bench_options(1u << 22, 8192, false));
    RawPeer::Conn c = establish(peer, false);
    peer.set_capture(false);
    Stack &st = peer.stack();
    fill_send_ring(st, c.sock);
    st.poll(peer.now);
    SockInfo in{};
    st.info(c.sock, &in);
    const uint32_t mss = in.snd_mss ? in.snd_mss : 1460;
    const std::vector<uint8_t> tmpl = sim::build_tcp(peer.seg(c, sim::kAck));
    uint32_t una = c.stack_nxt;
    const StackStats s0 = st.stats();
    uint64_t acks = 0;
    for (auto _ : state) {
        int k = 0;
        for (int tries = 0; tries < 100 && k == 0; tries++) {
            st.info(c.sock, &in);
            k = int(std::min<uint32_t>(kBurst, in.tx_unacked / mss));
            if (k == 0) {
                fill_send_ring(st, c.sock);
                peer.now += 1'000'000;
                st.poll(peer.now);
            }
        }
        if (k == 0) {
            state.SkipWithError("the stack sends nothing to acknowledge");
            return;
        }
        PacketRef burst[kBurst];
        for (int i = 0; i < k; i++) {
            if (!prepare(peer.pool(), tmpl, c.peer_nxt, una + uint32_t(i + 1) * mss, false, 0, true, &burst[i])) {
                state.SkipWithError("frame pool empty");
                return;
            }
        }
        auto t0 = Clock::now();
        st.input(burst, uint16_t(k), peer.now);
        state.SetIterationTime(seconds_since(t0) * kBurst / k); // normalised to a burst of 32
        una += uint32_t(k) * mss;
        acks += uint64_t(k);
        fill_send_ring(st, c.sock);
        st.poll(peer.now); // sends what the ACKs allowed (not timed)
    }
    const StackStats &s1 = st.stats();
    state.SetItemsProcessed(int64_t(state.iterations()) * kBurst);
    state.counters["fastpath_ratio"] = double(s1.fastpath_hits - s0.fastpath_hits) / double(acks ? acks : 1);
}
BENCHMARK(BM_RxPureAck)->UseManualTime();

// ---- send ------------------------------------------------------------------

void BM_TxSegments(benchmark::State &state)
{
    const bool offload = state.range(0) != 0;
    RawPeer::Options o = bench_options(1u << 22, 8192, false);
    if (offload) o.offloads = kOffloadTxIpCsum | kOffloadTxTcpCsum;
    RawPeer peer(o);
    peer.port().set_offload_emulation(false);
    RawPeer::Conn c = establish(peer, false);
    peer.set_capture(false);
    Stack &st = peer.stack();
    SockInfo in{};
    st.info(c.sock, &in);
    const uint32_t mss = in.snd_mss ? in.snd_mss : 1460;
    const std::vector<uint8_t> tmpl = sim::build_tcp(peer.seg(c, sim::kAck));
    uint32_t snd_nxt = c.stack_nxt;
    uint64_t segs = 0;
    for (auto _ : state) {
        RingSpan sp{};
        st.tx_view(c.sock, &sp);
        uint32_t n = std::min<uint32_t>(sp.total(), kBurst * mss);
        uint64_t tx0 = st.stats().tx_frames;
        auto t0 = Clock::now();
        st.tx_commit(c.sock, n, false);
        st.poll(peer.now);
        double dt = seconds_since(t0);
        uint64_t sent = st.stats().tx_frames - tx0;
        state.SetIterationTime(sent ? dt * kBurst / double(sent) : dt); // normalised to 32 segments
        segs += sent;
        // Acknowledge everything sent so the windows stay open (not timed).
        st.info(c.sock, &in);
        snd_nxt += in.tx_unacked;
        PacketRef ack;
        prepare(peer.pool(), tmpl, c.peer_nxt, snd_nxt, false, 0, true, &ack);
        st.input(&ack, 1, peer.now);
        peer.now += 100'000;
        st.poll(peer.now);
    }
    state.SetItemsProcessed(int64_t(state.iterations()) * kBurst);
    state.counters["segments"] = double(segs);
}
BENCHMARK(BM_TxSegments)->ArgName("csum_offloaded")->Arg(0)->Arg(1)->UseManualTime();

// ---- lookup ------------------------------------------------------------------

// Ring memory for connections that never carry data: every one gets the same
// small block (only pure ACKs flow in this benchmark).
class SharedRings : public BufferProvider {
  public:
    bool provide(uint64_t, RingMemory *out) override
    {
        *out = RingMemory{rx_, sizeof rx_, tx_, sizeof tx_};
        return true;
    }
    void reclaim(uint64_t, const RingMemory &) override {}

  private:
    alignas(64) uint8_t rx_[4096];
    alignas(64) uint8_t tx_[4096];
};

struct LookupWorld {
    struct Flow {
        uint32_t peer_ip;
        uint16_t peer_port;
        uint32_t seq, ack;
    };
    SharedRings rings;
    std::unique_ptr<RawPeer> peer;
    std::vector<Flow> flows;
    std::vector<uint8_t> tmpl;
    double setup_s = 0;

    explicit LookupWorld(uint32_t n)
    {
        auto t0 = Clock::now();
        RawPeer::Options o;
        o.stack.max_sockets = n + 16;
        o.stack.tcp.rcvbuf = o.stack.tcp.sndbuf = 4096;
        o.stack.tcp.timestamps = false;
        o.stack.tcp.sack = false;
        o.stack.tcp.syn_backlog = 64;
        o.provider = &rings;
        o.pool_frames = 1024;
        peer = std::make_unique<RawPeer>(o);
        SockId l = peer->listen(80, 1024);
        sim::TcpOptions syn;
        syn.mss = 1460;
        flows.reserve(n);
        for (uint32_t i = 0; i < n; i++) {
            peer->peer_ip = sim::ipv4(198, 18, 0, uint8_t(2 + i / 64512));
            uint16_t port = uint16_t(1024 + i % 64512);
            RawPeer::Conn c;
            std::string why;
            if (peer->open_passive(l, 80, port, &c, syn, &why) == kNoSock)
                throw std::runtime_error("connection " + std::to_string(i) + ": " + why);
            flows.push_back(Flow{peer->peer_ip, port, c.peer_nxt, c.stack_nxt});
            if (i % 4096 == 0) {
                peer->take();
                peer->take_events();
            }
            if (i == 0) tmpl = sim::build_tcp(peer->seg(c, sim::kAck));
        }
        peer->take();
        peer->take_events();
        peer->set_capture(false);
        setup_s = seconds_since(t0);
    }

    bool prepare(const Flow &f, PacketRef *out)
    {
        return prepare_flow(peer->pool(), tmpl, f.peer_ip, f.peer_port, f.seq, f.ack, out);
    }
};

std::unique_ptr<LookupWorld> &lookup_world(uint32_t n, std::string *err)
{
    static std::unique_ptr<LookupWorld> world;
    static uint32_t world_n = 0;
    if (!world || world_n != n) {
        world.reset(); // free the previous table first
        try {
            world = std::make_unique<LookupWorld>(n);
            world_n = n;
        } catch (const std::exception &e) {
            *err = e.what();
            world.reset();
        }
    }
    return world;
}

void BM_Lookup(benchmark::State &state)
{
    const uint32_t n = uint32_t(state.range(0));
    const bool spread = state.range(1) != 0;
    std::string err;
    auto &w = lookup_world(n, &err);
    if (!w) {
        state.SkipWithError(("could not open the connections: " + err).c_str());
        return;
    }
    Stack &st = w->peer->stack();
    std::mt19937 rng(7);
    std::vector<uint32_t> order(std::min<uint32_t>(n, 1u << 16) * 4);
    for (auto &x : order) x = spread ? uint32_t(rng() % n) : n / 2;
    if (spread && n > 1) {
        for (size_t i = 1; i < order.size(); i++) {
            if (order[i] == order[i - 1]) order[i] = (order[i] + 1) % n; // never the same flow twice in a row
        }
    }
    size_t pos = 0;
    const StackStats s0 = st.stats();
    for (auto _ : state) {
        PacketRef burst[kBurst];
        for (int i = 0; i < kBurst; i++) {
            if (!w->prepare(w->flows[order[pos]], &burst[i])) {
                state.SkipWithError("frame pool empty");
                return;
            }
            pos = (pos + 1) % order.size();
        }
        auto t0 = Clock::now();
        st.input(burst, kBurst, w->peer->now);
        state.SetIterationTime(seconds_since(t0));
    }
    const StackStats &s1 = st.stats();
    uint64_t frames = uint64_t(state.iterations()) * kBurst;
    state.SetItemsProcessed(int64_t(frames));
    state.counters["cache_hit_ratio"] = double(s1.lookup_cache_hits - s0.lookup_cache_hits) / double(frames ? frames : 1);
    state.counters["setup_s"] = w->setup_s;
    state.counters["dropped"] = double((s1.drop_tcp_no_socket - s0.drop_tcp_no_socket));
}
BENCHMARK(BM_Lookup)
    ->ArgNames({"conns", "spread"})
    ->ArgsProduct({{1, 10000, 1000000}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kNanosecond);

} // namespace
} // namespace mars::bench

BENCHMARK_MAIN();
