// Receive-buffer autotuning (mars/src/rcv_tune.cc) on the simulated wire:
// host a sends a bulk stream, host b reads it at a rate the test sets, and
// b's rings come from a provider that can grow them (GrowingRings). After
// every millisecond of virtual time the test checks the receiver's
// invariants: the buffer never exceeds tcp.rcvbuf_max or the ring, the
// window offered never exceeds what the ring has free nor what the
// out-of-order share holds in full segments; and every byte arrives intact.
#include "sim_wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

namespace mars::sim {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSeed = 77;

// Rings in plain heap blocks; grow_rx hands out a new, larger receive block
// (the old one is kept until the end so a stray write would still land in
// memory the test owns, and is checked to hold nothing unread: MARS only
// asks while the ring is empty).
class GrowingRings : public BufferProvider {
  public:
    GrowingRings(uint32_t rx, uint32_t tx, bool can_grow) : rx_(rx), tx_(tx), can_grow_(can_grow) {}
    bool provide(uint64_t, RingMemory *out) override
    {
        blocks_.push_back(std::make_unique<std::vector<uint8_t>>(rx_));
        uint8_t *rx = blocks_.back()->data();
        blocks_.push_back(std::make_unique<std::vector<uint8_t>>(tx_));
        *out = RingMemory{rx, rx_, blocks_.back()->data(), tx_};
        outstanding++;
        return true;
    }
    void reclaim(uint64_t, const RingMemory &) override { outstanding--; }
    bool grow_rx(uint64_t, RingMemory *mem, uint32_t want) override
    {
        asks++;
        if (!can_grow_) return false;
        uint32_t size = mem->rx_size;
        while (size < want) size <<= 1;
        if (size == mem->rx_size) return false;
        blocks_.push_back(std::make_unique<std::vector<uint8_t>>(size));
        mem->rx = blocks_.back()->data();
        mem->rx_size = size;
        grows++;
        biggest = std::max(biggest, size);
        return true;
    }
    uint32_t outstanding = 0, asks = 0, grows = 0, biggest = 0;

  private:
    uint32_t rx_, tx_;
    bool can_grow_;
    std::vector<std::unique_ptr<std::vector<uint8_t>>> blocks_;
};

struct Plan {
    uint32_t rcvbuf = 64 * 1024;
    uint32_t rcvbuf_max = 1 << 20;
    uint64_t read_per_ms = UINT64_MAX; // bytes the reader takes per ms of virtual time
    LinkParams a_to_b;
    uint64_t bytes = 8 << 20;
    bool can_grow = true;
    bool lock_rcvbuf = false; // SO_RCVBUF on the accepted socket
    uint32_t lock_bytes = 0;   // the size SO_RCVBUF sets (0: rcvbuf)
    bool lock_listener = false; // SO_RCVBUF on the listener, before listen()
    // SO_RCVBUF on the accepted socket once this many bytes were read, at a
    // moment its ring holds unread bytes; the reader is fast from then on.
    uint64_t lock_mid_stream_after = 0;
    uint32_t ooo_pool_frames = 2048;
    bool partial_reads = false; // every other read takes half of what is readable: the ring is often not empty
};

struct Result {
    uint64_t received = 0;
    uint64_t elapsed_ns = 0;
    uint32_t max_space = 0, max_ring = 0, max_window = 0, max_share = 0;
    uint32_t final_space = 0, final_share = 0, final_ring = 0;
    uint32_t ring_at_lock = 0; // the ring when SO_RCVBUF was set mid-stream (0: not set)
    StackStats stats{};
    uint32_t provider_grows = 0, provider_asks = 0;
};

class RcvTune : public ::testing::Test {
  protected:
    Result run(const Plan &plan)
    {
        SimNetConfig c = default_simnet_config();
        c.b.stack.tcp.rcvbuf = plan.rcvbuf;
        c.b.stack.tcp.rcvbuf_max = plan.rcvbuf_max;
        c.b.stack.ooo_pool_frames = plan.ooo_pool_frames;
        c.a.stack.tcp.sndbuf = 1 << 20;
        c.a.ring_slots = 4;
        c.a_to_b = plan.a_to_b;
        c.b_to_a.delay_ns = plan.a_to_b.delay_ns;
        c.b_to_a.seed = 22;
        GrowingRings rings(plan.rcvbuf, 64 * 1024, plan.can_grow);
        c.b.rings = &rings;
        SimNet net(c);
        Result r;

        int64_t l = net.stack(1).open(1);
        EXPECT_GE(l, 0);
        EXPECT_EQ(net.stack(1).bind(SockId(l), net.addr(1, 5001)), 0);
        const uint32_t lock_bytes = plan.lock_bytes ? plan.lock_bytes : plan.rcvbuf;
        if (plan.lock_listener) {
            EXPECT_EQ(net.stack(1).set_option(SockId(l), SockOpt::kRcvBuf, lock_bytes), 0);
        }
        EXPECT_EQ(net.stack(1).listen(SockId(l), 8), 0);
        int64_t a = net.stack(0).open(2);
        EXPECT_GE(a, 0);
        EXPECT_EQ(net.stack(0).connect(SockId(a), net.addr(1, 5001), net.now()), 0);
        SockId b = kNoSock;
        uint64_t sent = 0;
        std::vector<uint8_t> chunk(256 * 1024);
        auto pump = [&] {
            while (sent < plan.bytes) {
                const size_t n = size_t(std::min<uint64_t>(chunk.size(), plan.bytes - sent));
                pattern_fill(kSeed, sent, chunk.data(), n);
                const int64_t k = net.stack(0).send(SockId(a), chunk.data(), n);
                if (k <= 0) break;
                sent += uint64_t(k);
            }
        };
        uint64_t budget = 0; // bytes the reader may still take
        auto read = [&] {
            RingSpan v;
            if (b == kNoSock || net.stack(1).rx_view(b, &v) != 0) return;
            uint64_t take = std::min<uint64_t>(v.total(), budget);
            if (plan.partial_reads && (reads_++ & 1)) take /= 2;
            uint64_t done = 0;
            for (int i = 0; i < 2 && done < take; i++) {
                const uint32_t n = uint32_t(std::min<uint64_t>(v.n[i], take - done));
                const size_t bad = pattern_check(kSeed, r.received + done, v.p[i], n);
                if (bad != n) {
                    ADD_FAILURE() << "byte " << r.received + done + bad << " differs";
                    failed_ = true;
                    return;
                }
                done += n;
            }
            if (done) {
                EXPECT_EQ(net.stack(1).rx_consume(b, uint32_t(done)), 0);
                r.received += done;
                budget -= done;
            }
        };
        net.on_event = [&](int h, const SockEvent &e) {
            if (h == 0 && (e.bits & (kEvConnected | kEvWritable))) pump();
            if (h == 1 && e.sock == SockId(l) && (e.bits & kEvAcceptable)) {
                int64_t s = net.stack(1).accept(SockId(l), 3);
                if (s >= 0) {
                    b = SockId(s);
                    if (plan.lock_rcvbuf) {
                        EXPECT_EQ(net.stack(1).set_option(b, SockOpt::kRcvBuf, lock_bytes), 0);
                    }
                }
            }
            if (h == 1 && e.sock == b && (e.bits & kEvReadable) && plan.read_per_ms == UINT64_MAX) {
                budget = UINT64_MAX;
                read();
            }
        };
        bool fast = plan.read_per_ms == UINT64_MAX;
        auto lock_mid_stream = [&] {
            RingSpan v;
            if (!plan.lock_mid_stream_after || r.ring_at_lock || r.received < plan.lock_mid_stream_after ||
                net.stack(1).rx_view(b, &v) != 0 || v.total() == 0)
                return;
            SockInfo in{};
            EXPECT_EQ(net.stack(1).set_option(b, SockOpt::kRcvBuf, lock_bytes), 0);
            EXPECT_EQ(net.stack(1).info(b, &in), 0);
            r.ring_at_lock = in.rx_ring;
            fast = true;
        };
        const uint64_t start = net.now();
        for (int ms = 0; ms < 20000 && r.received < plan.bytes && !failed_; ms++) {
            net.run_for(kMs);
            lock_mid_stream();
            budget = fast ? UINT64_MAX : budget + plan.read_per_ms;
            read();
            check(net, b, plan, &r);
        }
        r.elapsed_ns = net.now() - start;
        r.stats = net.stack(1).stats();
        if (b != kNoSock) {
            SockInfo in{};
            EXPECT_EQ(net.stack(1).info(b, &in), 0);
            r.final_space = in.rcv_space;
            r.final_share = in.ooo_share;
            r.final_ring = in.rx_ring;
        }
        std::printf("received %llu in %llu ms: buffer up to %u, ring up to %u, window up to %u; grows %llu, ring grows %llu\n",
                    (unsigned long long)r.received, (unsigned long long)(r.elapsed_ns / kMs), r.max_space, r.max_ring,
                    r.max_window, (unsigned long long)r.stats.tcp_rcvbuf_grows,
                    (unsigned long long)r.stats.tcp_rx_ring_grows);
        r.provider_grows = rings.grows;
        r.provider_asks = rings.asks;
        return r;
    }

    // The receiver's invariants, every millisecond.
    void check(SimNet &net, SockId b, const Plan &plan, Result *r)
    {
        if (b == kNoSock) return;
        SockInfo in{};
        if (net.stack(1).info(b, &in) != 0) return;
        const uint32_t mtu_payload = net.config(1).mtu - 40;
        r->max_space = std::max(r->max_space, in.rcv_space);
        r->max_ring = std::max(r->max_ring, in.rx_ring);
        r->max_window = std::max(r->max_window, in.rcv_wnd);
        r->max_share = std::max(r->max_share, in.ooo_share);
        const uint32_t limit = std::max({plan.rcvbuf, plan.rcvbuf_max, plan.lock_bytes});
        if (in.rcv_space > limit || in.rcv_space > in.rx_ring ||
            in.rcv_wnd > in.rx_ring - in.rx_readable ||
            uint64_t(in.rcv_wnd) > uint64_t(in.ooo_share) * mtu_payload) {
            ADD_FAILURE() << "invariant broken at " << net.now() << " ns: rcv_space " << in.rcv_space << " (limit "
                          << limit << ") ring " << in.rx_ring << " readable " << in.rx_readable << " window "
                          << in.rcv_wnd << " ooo_share " << in.ooo_share;
            failed_ = true;
        }
    }
    bool failed_ = false;
    uint64_t reads_ = 0;
};

LinkParams fast_link()
{
    LinkParams p;
    p.delay_ns = 1 * kMs; // RTT 2 ms
    p.rate_bps = 2'000'000'000;
    return p;
}

TEST_F(RcvTune, GrowsUnderAFastReader)
{
    Plan plan;
    plan.a_to_b = fast_link();
    Result r = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(r.received, plan.bytes);
    EXPECT_GT(r.stats.tcp_rcvbuf_grows, 0u);
    EXPECT_GT(r.stats.tcp_rx_ring_grows, 0u);
    EXPECT_EQ(r.stats.tcp_rx_ring_grows, r.provider_grows);
    EXPECT_GE(r.max_space, 4 * plan.rcvbuf) << "the buffer should grow well past where it started";
    EXPECT_GT(r.max_window, plan.rcvbuf) << "a window past the initial buffer was offered";
    EXPECT_LE(r.max_space, plan.rcvbuf_max);
    // The out-of-order share grew with the buffer (the pool has room): it
    // holds the whole buffer in full segments, past the 256 frames it had.
    EXPECT_GT(r.max_share, 256u);
    EXPECT_GE(uint64_t(r.max_share) * 1460, r.max_space);
}

TEST_F(RcvTune, FasterThanWithoutAutotuning)
{
    Plan plan;
    plan.a_to_b = fast_link();
    Result tuned = run(plan);
    plan.rcvbuf_max = 0;
    Result fixed = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(fixed.stats.tcp_rcvbuf_grows, 0u);
    EXPECT_EQ(fixed.provider_asks, 0u);
    EXPECT_EQ(fixed.max_space, plan.rcvbuf);
    // 64 KiB per 2 ms RTT is ~0.26 Gbit/s on a 2 Gbit/s link: the grown
    // window must let it run clearly faster.
    EXPECT_LT(tuned.elapsed_ns * 2, fixed.elapsed_ns)
        << "tuned " << tuned.elapsed_ns / kMs << " ms, fixed " << fixed.elapsed_ns / kMs << " ms";
}

TEST_F(RcvTune, SlowReaderKeepsItsBuffer)
{
    Plan plan;
    plan.a_to_b = fast_link();
    plan.read_per_ms = 4096; // 4 KiB per ms: 8 KiB per RTT against a 64 KiB buffer
    plan.bytes = 4 << 20;
    Result r = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(r.received, plan.bytes);
    EXPECT_EQ(r.stats.tcp_rcvbuf_grows, 0u);
    EXPECT_EQ(r.provider_asks, 0u);
    EXPECT_EQ(r.max_space, plan.rcvbuf);
    EXPECT_EQ(r.max_ring, plan.rcvbuf);
}

TEST_F(RcvTune, NeverPastTheCap)
{
    Plan plan;
    plan.a_to_b = fast_link();
    plan.rcvbuf_max = 192 * 1024; // not a power of two: the ring is 256 KiB, the buffer 192 KiB
    Result r = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(r.received, plan.bytes);
    EXPECT_EQ(r.max_space, plan.rcvbuf_max);
    EXPECT_EQ(r.max_ring, 256u * 1024);
    EXPECT_LE(r.max_window, plan.rcvbuf_max);
}

TEST_F(RcvTune, SoRcvbufFixesTheSize)
{
    Plan plan;
    plan.a_to_b = fast_link();
    plan.lock_rcvbuf = true;
    plan.bytes = 8 << 20;
    Result r = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(r.received, plan.bytes);
    EXPECT_EQ(r.stats.tcp_rcvbuf_grows, 0u);
    EXPECT_EQ(r.provider_asks, 0u);
    EXPECT_EQ(r.final_space, plan.rcvbuf);
}

// SO_RCVBUF larger than the ring, set on the listener before listen() (the
// common case: right after socket()), without autotuning: each connection
// takes it (as on Linux), its ring grows to hold it before any byte
// arrives, its window scale is chosen for it, and the window goes past
// the starting ring.
TEST_F(RcvTune, SoRcvbufOnTheListenerGrowsTheRing)
{
    Plan plan;
    plan.a_to_b = fast_link();
    plan.rcvbuf_max = 0;
    plan.lock_listener = true;
    plan.lock_bytes = 1 << 20;
    Result r = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(r.received, plan.bytes);
    EXPECT_EQ(r.provider_grows, 1u);
    EXPECT_EQ(r.stats.tcp_rx_ring_grows, 1u);
    EXPECT_EQ(r.stats.tcp_rcvbuf_grows, 0u) << "SO_RCVBUF's size is not autotuning's growth";
    EXPECT_EQ(r.final_ring, plan.lock_bytes);
    EXPECT_EQ(r.final_space, plan.lock_bytes);
    EXPECT_GT(r.max_window, 4 * plan.rcvbuf) << "the window did not grow with the ring";
    // The share holds the window in full segments (the invariant checked
    // every ms); here it had to grow past the configured 256 frames.
    EXPECT_GT(r.max_share, 256u);
}

// SO_RCVBUF larger than the ring set mid-stream while the ring holds unread
// bytes: the ring cannot grow then (nothing unread moves) and the window
// stays within it (checked every ms); it grows at the release that empties
// the ring, and the larger window follows.
TEST_F(RcvTune, SoRcvbufMidStreamGrowsTheRingOnceDrained)
{
    Plan plan;
    plan.a_to_b = fast_link();
    plan.rcvbuf_max = 2 << 20; // window scale for 2 MiB; the slow start below never grows it
    plan.read_per_ms = 4096;
    plan.lock_mid_stream_after = 128 * 1024;
    plan.lock_bytes = 1 << 20;
    Result r = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(r.received, plan.bytes);
    EXPECT_EQ(r.ring_at_lock, plan.rcvbuf) << "set with unread bytes: the ring must not grow at once";
    EXPECT_EQ(r.stats.tcp_rcvbuf_grows, 0u);
    EXPECT_EQ(r.provider_grows, 1u);
    EXPECT_EQ(r.final_ring, plan.lock_bytes);
    EXPECT_EQ(r.final_space, plan.lock_bytes);
    EXPECT_GT(r.max_window, 4 * plan.rcvbuf);
}

// The provider refuses (eta: the application's memory_per_app): the buffer
// and the window stay at the ring the socket has; the stream goes on.
TEST_F(RcvTune, SoRcvbufGrowRefusedKeepsTheRing)
{
    Plan plan;
    plan.a_to_b = fast_link();
    plan.rcvbuf_max = 0;
    plan.lock_listener = true;
    plan.lock_bytes = 1 << 20;
    plan.can_grow = false;
    plan.bytes = 4 << 20;
    Result r = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(r.received, plan.bytes);
    EXPECT_EQ(r.provider_asks, 1u) << "asked once, then the socket keeps its ring";
    EXPECT_EQ(r.max_ring, plan.rcvbuf);
    EXPECT_EQ(r.final_space, plan.rcvbuf);
    EXPECT_LE(r.max_window, plan.rcvbuf);
}

TEST_F(RcvTune, RingThatCannotGrowCapsTheBuffer)
{
    Plan plan;
    plan.a_to_b = fast_link();
    plan.can_grow = false;
    plan.bytes = 8 << 20;
    Result r = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(r.received, plan.bytes);
    EXPECT_GT(r.provider_asks, 0u);
    EXPECT_EQ(r.stats.tcp_rx_ring_grows, 0u);
    EXPECT_EQ(r.max_space, plan.rcvbuf);
}

// A pool smaller than the buffer wants: the share stops at the pool and the
// window at what the share holds, while the buffer goes on growing.
TEST_F(RcvTune, PoolCapsTheWindow)
{
    Plan plan;
    plan.a_to_b = fast_link();
    plan.ooo_pool_frames = 200;
    plan.partial_reads = true;
    Result r = run(plan);
    ASSERT_FALSE(failed_);
    EXPECT_EQ(r.received, plan.bytes);
    EXPECT_EQ(r.final_share, 200u) << "the share stops at the pool";
    EXPECT_GT(r.max_space, 200u * 1460);
    EXPECT_LE(r.max_window, 200u * 1460);
}

// Loss, reordering and duplication while the buffer grows: every byte
// intact, and the window never past the out-of-order share (a share that
// stops at the pool: 300 frames hold less than rcvbuf_max).
TEST_F(RcvTune, ByteExactUnderLossAndReorderWhileGrowing)
{
    for (uint64_t seed : {1, 2, 3}) {
        Plan plan;
        plan.a_to_b = fast_link();
        plan.a_to_b.loss = 0.01;
        plan.a_to_b.reorder = 0.02;
        plan.a_to_b.duplicate = 0.01;
        plan.a_to_b.reorder_extra_ns = 500'000;
        plan.a_to_b.seed = seed;
        plan.bytes = 6 << 20;
        plan.ooo_pool_frames = seed == 3 ? 300 : 2048;
        plan.partial_reads = seed != 1;
        Result r = run(plan);
        ASSERT_FALSE(failed_) << "seed " << seed;
        EXPECT_EQ(r.received, plan.bytes) << "seed " << seed;
        EXPECT_GT(r.stats.tcp_rcvbuf_grows, 0u) << "seed " << seed;
        EXPECT_GT(r.stats.tcp_ooo_segments, 0u) << "seed " << seed;
        if (seed == 3) {
            EXPECT_LE(r.max_window, 300u * 1460) << "the pool caps the window";
        }
    }
}

} // namespace
} // namespace mars::sim
