// Receive rings that grow in place (Server::grow_rx, asked for by the
// transport's autotuning while a ring holds no unread byte): the
// application reads byte-exact across every grow, through dti_recv() and
// through the receive view the shim caches (dti_recv_view()), and a grow
// that would pass the memory limit is refused while the stream goes on.
#include "test_util.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <cstdint>
#include <thread>
#include <vector>

namespace dti::test {
namespace {

constexpr uint32_t kStart = 4096;  // each ring's starting size
constexpr uint32_t kMax = 65536;   // what each slot reserves

engine::Limits growing_limits()
{
    engine::Limits l = small_limits();
    l.rx_ring_size = kStart;
    l.rx_ring_max = kMax;
    return l;
}

uint8_t byte_at(uint64_t pos) { return uint8_t(pos * 131 + (pos >> 9) + 7); }

class DtiRingGrow : public Attached {
  protected:
    void SetUp() override {} // each test starts the fixture with its limits
    void start_growing(const engine::Limits &l)
    {
        grow_rx_to_ = kMax;
        start(l);
    }
    int64_t ring_size(dti_sock_t s)
    {
        int64_t v = 0;
        EXPECT_EQ(dti_getsockopt(c_, s, DTI_SO_RCVBUF, &v), 0);
        return v;
    }
    // One phase of a stream from cl to sv: `bytes` more sent in pieces of
    // varied sizes, read in reads of varied sizes (up to 64 through the
    // view taken when the socket was new, larger through dti_recv()), then
    // every byte released so the ring is empty (where the transport may grow
    // it). Returns the receive ring's size after the phase; *bad is the
    // first byte that differed from the pattern (UINT64_MAX: none).
    int64_t phase(dti_sock_t cl, dti_sock_t sv, const struct dti_rx_view &v, uint64_t bytes, uint64_t *bad)
    {
        const uint64_t target = sent_ + bytes;
        uint8_t out[3000], in[2000];
        for (uint32_t round = 0; got_ < target; round++) {
            if (sent_ < target) {
                uint32_t len = uint32_t(std::min<uint64_t>(1 + (round * 37) % sizeof out, target - sent_));
                for (uint32_t i = 0; i < len; i++)
                    out[i] = byte_at(sent_ + i);
                ssize_t n = dti_send(c_, cl, out, len, 0);
                EXPECT_TRUE(n > 0 || n == -EAGAIN) << n;
                if (n > 0)
                    sent_ += uint64_t(n);
            }
            uint32_t rd = round % 3 ? 1 + round % 64 : 1 + (round * 13) % sizeof in;
            int flush = 0;
            ssize_t n = rd <= 64 ? dti_recv_view(&v, in, rd, &flush) : 0;
            if (n > 0 && flush) {
                EXPECT_EQ(dti_recv_flush(c_, sv), 0);
            }
            if (n == 0)
                n = dti_recv(c_, sv, in, rd);
            if (n == -EAGAIN) {
                if (got_ == sent_)
                    continue; // nothing in flight: send more
                // A full command ring refuses the watch (the wait then
                // returns once it has room, and this comes round again).
                const int w = dti_prep_watch(c_, sv, DTI_POLLIN, 0);
                EXPECT_TRUE(w == 0 || w == -EAGAIN) << dti_strerror(w);
                dti_submit(c_);
                if (dti_wait(c_, 5000) < 1) {
                    ADD_FAILURE() << "nothing to read after " << got_ << " of " << sent_ << " bytes";
                    return -1;
                }
                continue;
            }
            if (n <= 0) {
                ADD_FAILURE() << "recv: " << n;
                return -1;
            }
            for (ssize_t i = 0; i < n && *bad == UINT64_MAX; i++)
                if (in[i] != byte_at(got_ + uint64_t(i)))
                    *bad = got_ + uint64_t(i);
            got_ += uint64_t(n);
        }
        EXPECT_EQ(dti_recv_flush(c_, sv), 0);
        return ring_size(sv); // answered after the release (one queue, in order)
    }
    // Phases until the ring is `want` bytes or `phases` ran; the sizes seen.
    std::vector<int64_t> stream(dti_sock_t cl, dti_sock_t sv, int phases, uint64_t *bad)
    {
        struct dti_rx_view v{};
        EXPECT_EQ(dti_rx_view(c_, sv, &v), 0); // cached once, as the shim does
        std::vector<int64_t> sizes;
        for (int i = 0; i < phases && !HasFailure(); i++)
            sizes.push_back(phase(cl, sv, v, 3 * kStart + 1000 * uint64_t(i) + 17, bad));
        return sizes;
    }
    uint64_t sent_ = 0, got_ = 0;
};

// The ring doubles at each empty release, 4K to 64K, while one stream runs:
// positions start at odd offsets in the fixture, so the ring's base moves
// at each grow, and every byte still reads back in order.
TEST_F(DtiRingGrow, RingGrowsMidStreamAndReadsStayByteExact)
{
    start_growing(growing_limits());
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    EXPECT_EQ(ring_size(sv), int64_t(kStart));
    uint64_t bad = UINT64_MAX;
    std::vector<int64_t> sizes = stream(cl, sv, 8, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    ASSERT_FALSE(sizes.empty());
    for (size_t i = 1; i < sizes.size(); i++)
        EXPECT_GE(sizes[i], sizes[i - 1]);
    EXPECT_EQ(sizes.back(), int64_t(kMax));
    EXPECT_EQ(ppe_->stats().rx_ring_grows, 4u); // 4K -> 8K -> 16K -> 32K -> 64K
    EXPECT_EQ(ppe_->stats().rx_grow_refusals, 0u);
    dti_limits lim{};
    dti_get_limits(d_, &lim);
    EXPECT_EQ(lim.rx_ring_size, kMax) << "libdti bounds every ring by the slot's reserve";
}

// A memory limit that leaves room for one grow (4K more): the second grow
// is refused, the ring stays at 8K and the stream goes on byte-exact. Once
// the grown socket is gone its growth is given back: the next one grows too.
TEST_F(DtiRingGrow, GrowPastTheMemoryLimitIsRefused)
{
    engine::Limits l = growing_limits();
    engine::Limits at_start = l;
    at_start.rx_ring_max = 0;
    l.max_region_bytes = engine::region_bytes(at_start) + kStart;
    ASSERT_GT(engine::region_bytes(l), l.max_region_bytes) << "the region reserves more than the limit";
    start_growing(l);
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    uint64_t bad = UINT64_MAX;
    std::vector<int64_t> sizes = stream(cl, sv, 6, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    ASSERT_FALSE(sizes.empty());
    EXPECT_EQ(sizes.back(), int64_t(2 * kStart));
    EXPECT_EQ(ppe_->stats().rx_ring_grows, 1u);
    EXPECT_GE(ppe_->stats().rx_grow_refusals, 1u);

    ASSERT_EQ(dti_close(c_, cl), 0);
    ASSERT_EQ(dti_close(c_, sv), 0);
    sent_ = got_ = 0;
    pair(&cl, &sv);
    sizes = stream(cl, sv, 6, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    ASSERT_FALSE(sizes.empty());
    EXPECT_EQ(sizes.back(), int64_t(2 * kStart)) << "the closed socket's growth was not given back";
}

// ---- SO_RCVBUF larger than the ring ------------------------------------------------------
//
// DTI_SO_RCVBUF larger than a socket's ring grows the ring (the fixture
// transport asks as MARS does: at once when the ring is empty or when the
// rings come, else at the release that empties it; once), up to the slot's
// reserve; the window (what the peer may send: the ring's free space in the
// fixture) follows, and every byte reads back in order across the grow.

constexpr uint32_t kSmall = 64 * 1024; // each ring's starting size
constexpr uint32_t kBig = 1 << 20;     // what each slot reserves

engine::Limits rcvbuf_limits()
{
    engine::Limits l = small_limits();
    l.rx_ring_size = kSmall;
    l.rx_ring_max = kBig;
    return l;
}

class DtiRcvbuf : public Attached {
  protected:
    void SetUp() override {} // each test starts the fixture with its limits (no autotuning)
    struct Stream {
        dti_sock_t from, to;
        uint64_t sent = 0, got = 0;
    };
    int64_t ring_size(dti_sock_t s)
    {
        int64_t v = 0;
        EXPECT_EQ(dti_getsockopt(c_, s, DTI_SO_RCVBUF, &v), 0);
        return v;
    }
    uint32_t readable(dti_sock_t s)
    {
        dti_sock_info in{};
        EXPECT_EQ(dti_sock_status(c_, s, &in), 0);
        return in.readable;
    }
    // Sends until `want` bytes wait unread at the receiver, reading none:
    // what the window let through. Between sends it waits for an event (new
    // bytes at the receiver, room at the sender); it ends when the bytes are
    // there, or when no event comes for 2 s (nothing moves: the window is
    // full). Returns what is readable.
    uint32_t fill(Stream &st, uint32_t want)
    {
        uint8_t out[4096];
        dti_cqe e[32];
        EXPECT_EQ(dti_prep_watch(c_, st.to, DTI_POLLIN, 0), 0); // again at every arrival
        dti_submit(c_);
        bool out_armed = false;
        for (int rounds = 0; rounds < 100000 && readable(st.to) < want; rounds++) {
            const uint64_t room = st.got + want - st.sent;
            if (room > 0) {
                const uint32_t len = uint32_t(std::min<uint64_t>(sizeof out, room));
                for (uint32_t i = 0; i < len; i++)
                    out[i] = byte_at(st.sent + i);
                const ssize_t n = dti_send(c_, st.from, out, len, 0);
                EXPECT_TRUE(n > 0 || n == -EAGAIN) << n;
                if (n > 0) {
                    st.sent += uint64_t(n);
                    continue;
                }
                if (!out_armed) { // one-shot: fires once the sender has room again
                    // (a full command ring refuses it: armed at the next round)
                    out_armed = dti_prep_watch(c_, st.from, DTI_POLLOUT, 0) == 0;
                    dti_submit(c_);
                }
            }
            if (dti_wait(c_, 2000) < 1)
                break;
            for (unsigned k = dti_reap(c_, e, 32), i = 0; i < k; i++)
                if (e[i].kind == DTI_CQE_EVENT && e[i].sock == st.from && (e[i].events & DTI_POLLOUT))
                    out_armed = false;
        }
        dti_prep_watch(c_, st.to, 0, 0);
        dti_prep_watch(c_, st.from, 0, 0);
        dti_submit(c_);
        while (dti_inflight(c_) > 0 && dti_wait(c_, 5000) == 1)
            dti_reap(c_, e, 32);
        return readable(st.to);
    }
    // Reads n bytes in reads of varied sizes (small ones through the view
    // taken when the socket was new, as the shim caches it), then releases
    // them all; *bad is the first byte that differed (UINT64_MAX: none).
    void drain(Stream &st, const struct dti_rx_view &v, uint64_t n, uint64_t *bad)
    {
        const uint64_t target = st.got + n;
        uint8_t in[3000];
        for (uint32_t round = 0; st.got < target && round < 1000000; round++) {
            uint32_t rd = uint32_t(std::min<uint64_t>(round % 3 ? 1 + round % 64 : 1 + (round * 13) % sizeof in,
                                                      target - st.got));
            int flush = 0;
            ssize_t k = rd <= 64 ? dti_recv_view(&v, in, rd, &flush) : 0;
            if (k > 0 && flush) {
                EXPECT_EQ(dti_recv_flush(c_, st.to), 0);
            }
            if (k == 0)
                k = dti_recv(c_, st.to, in, rd);
            if (k <= 0) {
                ADD_FAILURE() << "recv: " << k << " after " << st.got << " of " << st.sent;
                return;
            }
            for (ssize_t i = 0; i < k && *bad == UINT64_MAX; i++)
                if (in[i] != byte_at(st.got + uint64_t(i)))
                    *bad = st.got + uint64_t(i);
            st.got += uint64_t(k);
        }
        EXPECT_EQ(dti_recv_flush(c_, st.to), 0);
    }
};

// Set right after socket(): on the listener before listen() (its
// connections take it, as on Linux) and on a client before connect() with
// more than a slot holds (clamped to the reserve, as Linux clamps to
// rmem_max). Both rings are 1 MiB from the start, and 1 MiB crosses each
// way before the receiver reads a byte.
TEST_F(DtiRcvbuf, BeforeConnectAndListenTheRingIsBig)
{
    start(rcvbuf_limits());
    uint16_t port = 0;
    int l = dti_socket(c_);
    ASSERT_GE(l, 0);
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(l), DTI_SO_RCVBUF, kBig), 0);
    dti_addr any{0, 0};
    ASSERT_EQ(dti_bind(c_, dti_sock_t(l), &any), 0);
    ASSERT_EQ(dti_listen(c_, dti_sock_t(l), 16), 0);
    dti_addr name{};
    ASSERT_EQ(dti_getsockname(c_, dti_sock_t(l), &name), 0);
    port = name.port;
    int cs = dti_socket(c_);
    ASSERT_GE(cs, 0);
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(cs), DTI_SO_RCVBUF, 8 * kBig), 0);
    dti_addr to{0x7f000001, port};
    ASSERT_EQ(dti_connect(c_, dti_sock_t(cs), &to, 5000), 0);
    int ss = dti_accept(c_, dti_sock_t(l), nullptr, 5000);
    ASSERT_GE(ss, 0) << dti_strerror(ss);
    const dti_sock_t cl = dti_sock_t(cs), sv = dti_sock_t(ss);
    EXPECT_EQ(ring_size(cl), int64_t(kBig)) << "8 MiB is clamped to the slot's reserve";
    EXPECT_EQ(ring_size(sv), int64_t(kBig));
    EXPECT_EQ(ppe_->stats().rx_ring_grows, 2u);

    struct dti_rx_view vs{}, vc{};
    ASSERT_EQ(dti_rx_view(c_, sv, &vs), 0);
    ASSERT_EQ(dti_rx_view(c_, cl, &vc), 0);
    uint64_t bad = UINT64_MAX;
    Stream up{cl, sv}, down{sv, cl};
    EXPECT_EQ(fill(up, kBig), kBig) << "the window did not grow with the ring";
    drain(up, vs, kBig, &bad);
    EXPECT_EQ(fill(down, kBig), kBig);
    drain(down, vc, kBig, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
}

// Set mid-stream while the ring holds unread bytes: the ring stays as it is
// (nothing unread moves) until the application has drained it, then grows;
// the stream reads back byte-exact across the grow, through dti_recv() and
// through the view taken before it.
TEST_F(DtiRcvbuf, MidStreamTheRingGrowsOnceDrained)
{
    start(rcvbuf_limits());
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    struct dti_rx_view v{};
    ASSERT_EQ(dti_rx_view(c_, sv, &v), 0);
    Stream st{cl, sv};
    uint64_t bad = UINT64_MAX;
    ASSERT_EQ(fill(st, 40000), 40000u);
    drain(st, v, 10000, &bad);
    ASSERT_EQ(dti_setsockopt(c_, sv, DTI_SO_RCVBUF, kBig), 0);
    EXPECT_EQ(ring_size(sv), int64_t(kSmall)) << "grown with 30000 bytes unread";
    EXPECT_EQ(ppe_->stats().rx_ring_grows, 0u);
    drain(st, v, 30000, &bad);
    EXPECT_EQ(ring_size(sv), int64_t(kBig)) << "not grown once drained"; // answered after the release
    EXPECT_EQ(ppe_->stats().rx_ring_grows, 1u);
    EXPECT_EQ(fill(st, kBig), kBig) << "the window did not grow with the ring";
    drain(st, v, kBig, &bad);
    EXPECT_EQ(fill(st, 3 * kSmall + 17), 3 * kSmall + 17);
    drain(st, v, 3 * kSmall + 17, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
}

// memory_per_app leaves room for less than the grow: it is refused and
// counted, setsockopt still succeeds (as on Linux, where a size is never
// refused), getsockopt keeps telling the ring the socket has, and the
// stream goes on in it; the transport asks once, not at every release.
TEST_F(DtiRcvbuf, PastTheMemoryLimitIsRefused)
{
    engine::Limits l = rcvbuf_limits();
    engine::Limits at_start = l;
    at_start.rx_ring_max = 0;
    l.max_region_bytes = engine::region_bytes(at_start) + kSmall; // one doubling, not 64K -> 1M
    start(l);
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    struct dti_rx_view v{};
    ASSERT_EQ(dti_rx_view(c_, sv, &v), 0);
    ASSERT_EQ(dti_setsockopt(c_, sv, DTI_SO_RCVBUF, kBig), 0);
    EXPECT_EQ(ring_size(sv), int64_t(kSmall));
    EXPECT_EQ(ppe_->stats().rx_grow_refusals, 1u);
    Stream st{cl, sv};
    uint64_t bad = UINT64_MAX;
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(fill(st, kSmall), kSmall);
        drain(st, v, kSmall, &bad);
    }
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    EXPECT_EQ(ring_size(sv), int64_t(kSmall));
    EXPECT_EQ(ppe_->stats().rx_ring_grows, 0u);
    EXPECT_EQ(ppe_->stats().rx_grow_refusals, 1u) << "asked again after the refusal";
}


// ---- SO_SNDBUF: the send ring a connection gets (dti/README.md "Send rings
// sized by SO_SNDBUF"). The fixture's window is the peer's free receive
// ring, so a sender whose peer reads nothing takes exactly its send ring
// plus the peer's receive ring before it meets -EAGAIN for good.

constexpr uint32_t kTxStart = 64 * 1024; // every send ring without SO_SNDBUF
constexpr uint32_t kTxMax = 1 << 20;     // what each slot reserves for it
constexpr uint32_t kRx = 16 * 1024;      // receive rings (small_limits)

engine::Limits sndbuf_limits()
{
    engine::Limits l = small_limits();
    l.tx_ring_size = kTxStart;
    l.tx_ring_max = kTxMax;
    return l;
}

class DtiSndbuf : public Attached {
  protected:
    void SetUp() override {} // each test starts the fixture with its limits
    int64_t sndbuf(dti_sock_t s)
    {
        int64_t v = -1;
        EXPECT_EQ(dti_getsockopt(c_, s, DTI_SO_SNDBUF, &v), 0);
        return v;
    }
    dti_sock_info status(dti_sock_t s)
    {
        dti_sock_info in{};
        EXPECT_EQ(dti_sock_status(c_, s, &in), 0);
        return in;
    }
    // Writes into `from` until the peer `to`, reading nothing, holds its
    // whole receive ring and `from` has no room left: both are the stream's
    // end state, waited for (events; bounded at 20 s, far above any honest
    // delay). Returns the bytes the sender took.
    uint64_t push_until_full(dti_sock_t from, dti_sock_t to)
    {
        static uint8_t out[8192];
        uint64_t sent = 0;
        dti_cqe e[32];
        dti_prep_watch(c_, to, DTI_POLLIN, 0);
        dti_submit(c_);
        const uint64_t deadline = now_ms() + 20000;
        while (now_ms() < deadline) {
            const ssize_t n = dti_send(c_, from, out, sizeof out, 0);
            if (n > 0) {
                sent += uint64_t(n);
                continue;
            }
            EXPECT_EQ(n, -EAGAIN);
            if (status(to).readable == kRx && status(from).writable == 0)
                break;
            dti_prep_watch(c_, from, DTI_POLLOUT, 0);
            dti_submit(c_);
            if (dti_wait(c_, 100) > 0)
                dti_reap(c_, e, 32);
        }
        dti_prep_watch(c_, to, 0, 0);
        dti_prep_watch(c_, from, 0, 0);
        dti_submit(c_);
        while (dti_inflight(c_) > 0 && dti_wait(c_, 5000) == 1)
            dti_reap(c_, e, 32);
        return sent;
    }
    static uint64_t now_ms()
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
    }
};

// Set before listen (its connections take it, as on Linux) and before
// connect: 300,000 (what Linux keeps for SO_SNDBUF 150,000) gives a 512 KiB
// ring and reads back as set; 8 MiB is clamped to the slot's reserve; a
// socket that never set it has the default ring and reads its size (0
// before its rings come). Each takes its ring plus the peer's window.
TEST_F(DtiSndbuf, BeforeConnectAndListenTheRingHoldsIt)
{
    start(sndbuf_limits());
    int l = dti_socket(c_);
    ASSERT_GE(l, 0);
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(l), DTI_SO_SNDBUF, 300000), 0);
    dti_addr any{0, 0};
    ASSERT_EQ(dti_bind(c_, dti_sock_t(l), &any), 0);
    ASSERT_EQ(dti_listen(c_, dti_sock_t(l), 16), 0);
    dti_addr name{};
    ASSERT_EQ(dti_getsockname(c_, dti_sock_t(l), &name), 0);
    int cs = dti_socket(c_), plain = dti_socket(c_);
    ASSERT_GE(cs, 0);
    ASSERT_GE(plain, 0);
    EXPECT_EQ(sndbuf(dti_sock_t(plain)), 0) << "no rings yet, nothing set";
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(cs), DTI_SO_SNDBUF, 8 * kTxMax), 0);
    dti_addr to{0x7f000001, name.port};
    ASSERT_EQ(dti_connect(c_, dti_sock_t(cs), &to, 5000), 0);
    int ss = dti_accept(c_, dti_sock_t(l), nullptr, 5000);
    ASSERT_GE(ss, 0) << dti_strerror(ss);
    ASSERT_EQ(dti_connect(c_, dti_sock_t(plain), &to, 5000), 0);
    int ps = dti_accept(c_, dti_sock_t(l), nullptr, 5000);
    ASSERT_GE(ps, 0) << dti_strerror(ps);
    const dti_sock_t cl = dti_sock_t(cs), sv = dti_sock_t(ss), pl = dti_sock_t(plain), psv = dti_sock_t(ps);
    EXPECT_EQ(sndbuf(cl), int64_t(kTxMax)) << "8 MiB is clamped to the slot's reserve";
    EXPECT_EQ(sndbuf(sv), 300000) << "the listener's SO_SNDBUF";
    EXPECT_EQ(sndbuf(pl), int64_t(kTxStart));
    EXPECT_EQ(status(cl).writable, kTxMax);
    EXPECT_EQ(status(sv).writable, 512u * 1024);
    EXPECT_EQ(status(pl).writable, kTxStart);
    EXPECT_EQ(ppe_->stats().tx_ring_sized, 3u); // cl, sv and the listener's other connection psv
    EXPECT_EQ(push_until_full(cl, sv), uint64_t(kTxMax) + kRx);
    EXPECT_EQ(push_until_full(sv, cl), 512u * 1024 + kRx);
    EXPECT_EQ(push_until_full(pl, psv), uint64_t(kTxStart) + kRx);
}

// A small SO_SNDBUF makes a ring smaller than the default: the sender
// stops after about that many bytes beyond the peer's window.
TEST_F(DtiSndbuf, SmallSetBeforeConnectStopsTheSenderEarly)
{
    start(sndbuf_limits());
    dti_sock_t l = 0;
    uint16_t port = 0;
    dti_sock_t unused_c, unused_s;
    pair_on_listener(&l, &port, &unused_c, &unused_s);
    int cs = dti_socket(c_);
    ASSERT_GE(cs, 0);
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(cs), DTI_SO_SNDBUF, 9216), 0); // Linux's for SO_SNDBUF 4608
    dti_addr to{0x7f000001, port};
    ASSERT_EQ(dti_connect(c_, dti_sock_t(cs), &to, 5000), 0);
    int ss = dti_accept(c_, l, nullptr, 5000);
    ASSERT_GE(ss, 0) << dti_strerror(ss);
    EXPECT_EQ(sndbuf(dti_sock_t(cs)), 9216);
    EXPECT_EQ(status(dti_sock_t(cs)).writable, 16u * 1024);
    EXPECT_EQ(push_until_full(dti_sock_t(cs), dti_sock_t(ss)), 16u * 1024 + kRx);
}

// memory_per_app leaves room for less than the larger ring: refused and
// counted, setsockopt still succeeds (Linux never refuses a size) and the
// connection gets the default ring.
TEST_F(DtiSndbuf, PastTheMemoryLimitTheDefaultRing)
{
    engine::Limits l = sndbuf_limits();
    engine::Limits at_start = l;
    at_start.tx_ring_max = 0;
    l.max_region_bytes = engine::region_bytes(at_start) + kTxStart; // one doubling, not 64K -> 1M
    start(l);
    dti_sock_t ls = 0, uc, us;
    uint16_t port = 0;
    pair_on_listener(&ls, &port, &uc, &us);
    int cs = dti_socket(c_);
    ASSERT_GE(cs, 0);
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(cs), DTI_SO_SNDBUF, kTxMax), 0);
    dti_addr to{0x7f000001, port};
    ASSERT_EQ(dti_connect(c_, dti_sock_t(cs), &to, 5000), 0);
    int ss = dti_accept(c_, ls, nullptr, 5000);
    ASSERT_GE(ss, 0) << dti_strerror(ss);
    EXPECT_EQ(status(dti_sock_t(cs)).writable, kTxStart);
    EXPECT_EQ(ppe_->stats().tx_size_refusals, 1u);
    EXPECT_EQ(ppe_->stats().tx_ring_sized, 0u);
    EXPECT_EQ(push_until_full(dti_sock_t(cs), dti_sock_t(ss)), uint64_t(kTxStart) + kRx);
}

// ---- Send rings that grow (dti/README.md "Send rings that grow"): the
// fixture transport asks for twice the ring whenever a commit leaves it less
// than a quarter free (as MARS's autotuning asks, from the congestion window),
// rereads every byte it delivered once more from the ring at its size then
// before acknowledging it (a retransmission stand-in), and the writer grows
// the ring (TX_GROW) while it keeps writing.

class DtiSndGrow : public DtiSndbuf {
  protected:
    // Sends `bytes` more of the pattern from cl to sv in pieces of varied
    // sizes (small ones through send's fast path, large ones the general
    // way) until the ring is full each round, and reads them at sv in reads
    // of varied sizes; *bad: the first byte that differed (UINT64_MAX: none).
    void stream(dti_sock_t cl, dti_sock_t sv, uint64_t bytes, uint64_t *bad)
    {
        static uint8_t out[20000], in[9000];
        const uint64_t target = sent_ + bytes;
        dti_cqe e[32];
        uint64_t busy_since = 0; // since when writes find the command ring full
        for (uint32_t round = 0; got_ < target; round++) {
            while (sent_ < target) { // until the ring is full (or all is sent)
                const uint32_t len = uint32_t(std::min<uint64_t>(round % 4 ? 1 + (round * 7919 + sent_) % sizeof out : 1 + sent_ % 64,
                                                                 target - sent_));
                for (uint32_t i = 0; i < len; i++)
                    out[i] = byte_at(sent_ + i);
                const ssize_t n = dti_send(c_, cl, out, len, 0);
                if (n == -EAGAIN && status(cl).writable > 0) {
                    // The command ring is full, not the send ring (one SEND
                    // per write while a grow is pending), or room came since:
                    // write again once the engine took some (a wait returns
                    // then: libdti does not sleep while the ring is full;
                    // bounded far above any honest delay).
                    if (!busy_since)
                        busy_since = now_ms();
                    ASSERT_LT(now_ms() - busy_since, 20000u) << "no room in the command ring after " << sent_ << " bytes";
                    ASSERT_GE(dti_wait(c_, 1), 0);
                    dti_reap(c_, e, 32);
                    continue;
                }
                busy_since = 0;
                if (n == -EAGAIN)
                    break;
                ASSERT_GT(n, 0) << dti_strerror(int(n));
                sent_ += uint64_t(n);
            }
            const ssize_t n = dti_recv(c_, sv, in, 1 + (round * 131) % sizeof in);
            if (n > 0) {
                for (ssize_t i = 0; i < n; i++)
                    if (in[i] != byte_at(got_ + uint64_t(i)) && *bad == UINT64_MAX)
                        *bad = got_ + uint64_t(i);
                got_ += uint64_t(n);
                continue;
            }
            ASSERT_EQ(n, -EAGAIN);
            // Nothing to read: wait for bytes (or for room to send more). A
            // full command ring refuses the watches: the wait then returns
            // once it has room (and sends the reads' owed releases first).
            const int w1 = dti_prep_watch(c_, sv, DTI_POLLIN, 0);
            const int w2 = dti_prep_watch(c_, cl, sent_ < target ? DTI_POLLOUT : 0, 0);
            ASSERT_TRUE((w1 == 0 || w1 == -EAGAIN) && (w2 == 0 || w2 == -EAGAIN)) << w1 << " " << w2;
            dti_submit(c_);
            ASSERT_GE(dti_wait(c_, 5000), 1) << "nothing readable after " << got_ << " of " << sent_ << " bytes";
            dti_reap(c_, e, 32);
        }
        dti_prep_watch(c_, sv, 0, 0);
        dti_prep_watch(c_, cl, 0, 0);
        dti_submit(c_);
        while (dti_inflight(c_) > 0 && dti_wait(c_, 5000) == 1)
            dti_reap(c_, e, 32);
    }
    // The send ring's size now (the writable room of an empty ring is the
    // ring; SO_SNDBUF reads it while none was set).
    uint32_t ring_of(dti_sock_t s) { return uint32_t(sndbuf(s)); }
    uint64_t sent_ = 0, got_ = 0;
};

// Autotuning: the ring grows 64K -> 1M while the writer keeps writing and
// the transport reads again, after each grow, bytes it had sent before it;
// the fixture asks for more than the slot holds, and the ring stops at the
// reserve. Every byte arrives as written, every reread matches.
TEST_F(DtiSndGrow, AutotuningGrowsTheRingWhileTheWriterWrites)
{
    grow_tx_to_ = 8 * kTxMax; // asks past the reserve: the engine stops at it
    reread_sent_ = true;
    start(sndbuf_limits());
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    EXPECT_EQ(ring_of(cl), kTxStart);
    uint64_t bad = UINT64_MAX;
    stream(cl, sv, 6u << 20, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    EXPECT_EQ(ring_of(cl), kTxMax);
    engine::Stats st = ppe_->stats();
    EXPECT_EQ(st.tx_ring_grows, 4u) << "64K -> 128K -> 256K -> 512K -> 1M";
    EXPECT_EQ(st.tx_grow_refusals, 0u);
    EXPECT_GT(ppe_->reread_bytes(), 0u);
    EXPECT_EQ(ppe_->reread_mismatches(), 0u) << "a byte the transport read again had moved";
}

// SO_SNDBUF set: no autotuning (Linux's SOCK_SNDBUF_LOCK), the ring stays
// the size it was given.
TEST_F(DtiSndGrow, NoAutotuningOnceSoSndbufIsSet)
{
    grow_tx_to_ = kTxMax;
    start(sndbuf_limits());
    dti_sock_t ls = 0, uc, us;
    uint16_t port = 0;
    pair_on_listener(&ls, &port, &uc, &us);
    int cs = dti_socket(c_);
    ASSERT_GE(cs, 0);
    ASSERT_EQ(dti_setsockopt(c_, dti_sock_t(cs), DTI_SO_SNDBUF, 100000), 0);
    dti_addr to{0x7f000001, port};
    ASSERT_EQ(dti_connect(c_, dti_sock_t(cs), &to, 5000), 0);
    int ss = dti_accept(c_, ls, nullptr, 5000);
    ASSERT_GE(ss, 0) << dti_strerror(ss);
    uint64_t bad = UINT64_MAX;
    stream(dti_sock_t(cs), dti_sock_t(ss), 2u << 20, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    EXPECT_EQ(status(dti_sock_t(cs)).writable, 128u * 1024) << "the ring SO_SNDBUF gave, not grown";
    EXPECT_EQ(ppe_->stats().tx_ring_grows, 0u);
}

// SO_SNDBUF on a connected socket whose ring holds unsent bytes grows the
// ring at the writer's next write: the bytes queued before it arrive in
// order with those after, and the sender then takes the new ring plus the
// peer's window.
TEST_F(DtiSndGrow, SoSndbufOnAConnectedSocketGrowsTheRing)
{
    start(sndbuf_limits());
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    // Fill the ring and the peer's window with the pattern.
    static uint8_t out[8192];
    for (const uint64_t deadline = now_ms() + 20000; now_ms() < deadline;) { // (bounded far above any honest delay)
        for (uint32_t i = 0; i < sizeof out; i++)
            out[i] = byte_at(sent_ + i);
        const ssize_t n = dti_send(c_, cl, out, sizeof out, 0);
        if (n == -EAGAIN && status(sv).readable == kRx && status(cl).writable == 0)
            break;
        if (n > 0)
            sent_ += uint64_t(n);
    }
    EXPECT_EQ(sent_, uint64_t(kTxStart) + kRx);
    ASSERT_EQ(dti_setsockopt(c_, cl, DTI_SO_SNDBUF, 600000), 0); // the ring that holds it: 1M
    EXPECT_EQ(sndbuf(cl), 600000);
    // The next write finds the ring full and grows it; room comes with the
    // engine's answer, which may already be there when the write looks again
    // (the engine's thread took the grow meanwhile): then the byte is taken.
    const ssize_t first = dti_send(c_, cl, out, 1, 0);
    ASSERT_TRUE(first == -EAGAIN || first == 1) << dti_strerror(int(first));
    if (first == 1) {
        sent_ += 1;
    } else {
        dti_cqe e[8];
        ASSERT_EQ(dti_prep_watch(c_, cl, DTI_POLLOUT, 0), 0);
        dti_submit(c_);
        ASSERT_GE(dti_wait(c_, 5000), 1) << "no room after the grow";
        dti_reap(c_, e, 8);
    }
    EXPECT_EQ(status(cl).writable, kTxMax - kTxStart - uint64_t(first == 1));
    EXPECT_EQ(ppe_->stats().tx_ring_grows, 1u);
    // The rest of the stream through the grown ring, read byte-exact.
    uint64_t bad = UINT64_MAX;
    stream(cl, sv, 3u << 20, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    EXPECT_EQ(ring_of(cl), 600000u) << "reads back as set";
    EXPECT_EQ(status(cl).writable, kTxMax);
    EXPECT_EQ(ppe_->stats().tx_ring_grows, 1u);
}

// The shim caches a send view (dti_tx_view()) for send()/write() and sends
// writev, sendmsg and sendfile through dti_send_reserve()/dti_send_commit(),
// which grow the ring when the engine wishes it. A view taken before that
// grow holds the old size: it must take nothing (busy) while the grow is
// pending and after it was answered, until it is taken again; taken again,
// it writes at the new size, and every byte arrives in order (issue 30).
TEST_F(DtiSndGrow, AViewTakenBeforeAGrowTakesNothingUntilTakenAgain)
{
    start(sndbuf_limits());
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    struct dti_tx_view v;
    ASSERT_EQ(dti_tx_view(c_, cl, &v), 0);
    EXPECT_EQ(v.size, kTxStart);
    uint8_t out[64];
    const auto general_write = [&](uint32_t len) { // reserve, copy, commit: the shim's writev
        for (uint32_t i = 0; i < len; i++)
            out[i] = byte_at(sent_ + i);
        struct dti_iov iov[2];
        const ssize_t room = dti_send_reserve(c_, cl, iov);
        ASSERT_GE(room, ssize_t(len)) << dti_strerror(int(room));
        const size_t first = std::min<size_t>(len, iov[0].len);
        std::memcpy(iov[0].base, out, first);
        std::memcpy(iov[1].base, out + first, len - first);
        ASSERT_EQ(dti_send_commit(c_, cl, len, 0), 0);
        sent_ += len;
    };
    general_write(64);
    ASSERT_EQ(dti_setsockopt(c_, cl, DTI_SO_SNDBUF, 600000), 0); // the engine wishes 1M
    general_write(64); // grows the ring: TX_GROW queued
    out[0] = byte_at(sent_);
    EXPECT_EQ(dti_send_view_copy(&v, out, 1), 0u) << "a grow pending: the view takes nothing";
    for (const uint64_t deadline = now_ms() + 20000; ppe_->stats().tx_ring_grows == 0 && now_ms() < deadline;)
        std::this_thread::yield(); // until the engine's thread answered TX_GROW (bounded far above any honest delay)
    ASSERT_EQ(ppe_->stats().tx_ring_grows, 1u);
    general_write(64); // answered: writes at the new size alone
    EXPECT_EQ(dti_send_view_copy(&v, out, 1), 0u) << "answered, but the view still holds the old size";
    ASSERT_EQ(dti_tx_view(c_, cl, &v), 0);
    EXPECT_EQ(v.size, kTxMax);
    for (uint32_t i = 0; i < 64; i++)
        out[i] = byte_at(sent_ + i);
    const ssize_t took = dti_send_view(c_, cl, &v, out, 64);
    ASSERT_EQ(took, 64) << "taken again, the view writes at the new size";
    sent_ += 64;
    uint64_t bad = UINT64_MAX;
    stream(cl, sv, 1u << 20, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    EXPECT_EQ(ppe_->stats().tx_ring_grows, 1u);
}

// A transport that refuses (frames in flight pointing into the ring, as
// MARS on a port that transmits by reference): counted, the wish withdrawn,
// the stream goes on byte-exact at the size it has.
TEST_F(DtiSndGrow, RefusedByTheTransportTheStreamGoesOn)
{
    grow_tx_to_ = kTxMax;
    start(sndbuf_limits());
    ppe_->set_tx_grow_busy(true);
    dti_sock_t cl, sv;
    pair(&cl, &sv);
    uint64_t bad = UINT64_MAX;
    stream(cl, sv, 1u << 20, &bad);
    EXPECT_EQ(bad, UINT64_MAX) << "byte " << bad << " differs";
    EXPECT_EQ(ring_of(cl), kTxStart);
    EXPECT_EQ(ppe_->stats().tx_ring_grows, 0u);
    EXPECT_EQ(ppe_->stats().tx_grow_refusals, 1u) << "asked once for 128K, then not again";
}

} // namespace
} // namespace dti::test
