// The MARS adapter of eta-ppe (ppe/src/transport.h) on the MARS simulator:
// the DTI engine's Transport calls reach a real mars::Stack and come back
// with the same meaning (ids, endpoints, ring spans, options, events, users,
// errors). Host 0 is driven only through ppe::MarsTransport; host 1 is a
// plain stack playing the remote end. No root, no DPDK, virtual time.
#include "sim_wire.h"
#include "transport.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <map>
#include <vector>

namespace {

using mars::sim::SimNet;
using Tev = dti::engine::TransportEvent;
namespace de = dti::engine;

constexpr uint64_t kSec = 1'000'000'000;

class MarsTransportTest : public ::testing::Test {
  protected:
    MarsTransportTest() : net_(config()), stack_(&net_.stack(0)), tr_(stack_, now_)
    {
        net_.own_events[0] = true; // host 0's events are read through the adapter
        net_.on_tick = [this] {
            now_ = net_.now();
            Tev evs[16];
            uint16_t n;
            while ((n = tr_.events(evs, 16)) > 0)
                for (uint16_t i = 0; i < n; i++) events_.push_back(evs[i]);
        };
    }
    static mars::sim::SimNetConfig config()
    {
        auto c = mars::sim::default_simnet_config();
        // Small rings with an odd-sized pattern below make the spans wrap.
        c.a.stack.tcp.rcvbuf = c.a.stack.tcp.sndbuf = 16384;
        return c;
    }
    // Runs the simulation until an event with BITS for socket S came through
    // the adapter (bounded in virtual time); returns that event's user.
    uint64_t wait_event(de::SockId s, uint32_t bits)
    {
        uint64_t user = ~0ull;
        auto seen = [&] {
            for (auto &e : events_)
                if (e.sock == s && (e.bits & bits)) {
                    user = e.user;
                    return true;
                }
            return false;
        };
        EXPECT_TRUE(net_.run_until(seen, 5 * kSec)) << "no event " << bits << " for socket " << s;
        events_.clear();
        return user;
    }
    de::Endpoint remote_of(uint16_t port) { return {net_.config(1).ip, port}; }

    SimNet net_;
    mars::Stack *stack_;
    uint64_t now_ = 0;
    ppe::MarsTransport tr_;
    std::vector<Tev> events_;
};

TEST_F(MarsTransportTest, PassiveOpenDataBothWaysAndClose)
{
    const int64_t l = tr_.open(0x1111);
    ASSERT_GE(l, 0);
    ASSERT_EQ(tr_.bind(de::SockId(l), {0, 5000}), 0);
    ASSERT_EQ(tr_.listen(de::SockId(l), 8), 0);

    mars::Stack &peer = net_.stack(1);
    const int64_t c = peer.open(7);
    ASSERT_GE(c, 0);
    ASSERT_EQ(peer.connect(mars::SockId(c), net_.addr(0, 5000), net_.now()), 0);
    EXPECT_EQ(wait_event(de::SockId(l), de::kEvAcceptable), 0x1111u) << "the listener's user";

    const int64_t a = tr_.accept(de::SockId(l), 0x2222);
    ASSERT_GE(a, 0);
    de::SockInfo info;
    ASSERT_EQ(tr_.info(de::SockId(a), &info), 0);
    EXPECT_EQ(info.local.ip, net_.config(0).ip);
    EXPECT_EQ(info.local.port, 5000);
    EXPECT_EQ(info.remote.ip, net_.config(1).ip);
    EXPECT_EQ(info.error, 0);
    EXPECT_FALSE(info.peer_closed);

    // Peer -> adapter: 100,000 bytes in 7,001-byte pieces through a 16 KiB
    // ring, read through rx_view's two spans; the ring must wrap.
    const size_t total = 100000;
    size_t sent = 0, got = 0;
    bool wrapped_rx = false;
    std::vector<uint8_t> in;
    while (got < total) {
        if (sent < total) {
            std::vector<uint8_t> piece(std::min<size_t>(7001, total - sent));
            mars::sim::pattern_fill(1, sent, piece.data(), piece.size());
            const int64_t w = peer.send(mars::SockId(c), piece.data(), piece.size());
            ASSERT_GE(w, 0);
            sent += size_t(w);
        }
        net_.run_for(1'000'000);
        de::RingSpan span;
        const int r = tr_.rx_view(de::SockId(a), &span);
        ASSERT_GE(r, 0);
        if (span.n[1]) wrapped_rx = true;
        for (int k = 0; k < 2; k++) in.insert(in.end(), span.p[k], span.p[k] + span.n[k]);
        ASSERT_EQ(tr_.rx_consume(de::SockId(a), span.total()), 0);
        got += span.total();
    }
    ASSERT_EQ(in.size(), total);
    EXPECT_EQ(mars::sim::pattern_check(1, 0, in.data(), in.size()), total) << "bytes differ";
    EXPECT_TRUE(wrapped_rx) << "the receive ring never wrapped: the second span went untested";

    // Adapter -> peer: written into tx_view's spans and committed.
    size_t put = 0;
    bool wrapped_tx = false;
    std::vector<uint8_t> out;
    for (int round = 0; round < 1000 && out.size() < total; round++) {
        de::RingSpan span;
        ASSERT_GE(tr_.tx_view(de::SockId(a), &span), 0);
        uint32_t n = 0;
        for (int k = 0; k < 2 && put + n < total; k++) {
            const uint32_t take = uint32_t(std::min<size_t>(span.n[k], std::min<size_t>(5003, total - put - n)));
            if (k == 1 && take) wrapped_tx = true;
            mars::sim::pattern_fill(2, put + n, span.p[k], take);
            n += take;
            if (take < span.n[k]) break;
        }
        if (n) {
            ASSERT_EQ(tr_.tx_commit(de::SockId(a), n, false), 0);
        }
        put += n;
        net_.run_for(1'000'000);
        uint8_t buf[65536];
        int64_t r;
        while ((r = peer.recv(mars::SockId(c), buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + r);
    }
    ASSERT_EQ(out.size(), total);
    EXPECT_EQ(mars::sim::pattern_check(2, 0, out.data(), out.size()), total) << "bytes differ";
    EXPECT_TRUE(wrapped_tx) << "the send ring never wrapped: the second span went untested";

    // The peer's FIN shows as peer_closed; our close ends with kEvClosed
    // carrying the accepted socket's user.
    ASSERT_EQ(peer.shutdown(mars::SockId(c), false, true), 0);
    wait_event(de::SockId(a), de::kEvPeerClosed);
    ASSERT_EQ(tr_.info(de::SockId(a), &info), 0);
    EXPECT_TRUE(info.peer_closed);
    ASSERT_EQ(tr_.close(de::SockId(a)), 0);
    EXPECT_EQ(wait_event(de::SockId(a), de::kEvClosed), 0x2222u);
}

TEST_F(MarsTransportTest, ActiveOpenUsesTheEngineClockAndReportsRefusal)
{
    const int64_t s = tr_.open(0x3333);
    ASSERT_GE(s, 0);
    now_ = net_.now();
    // Nothing listens on the peer: the SYN is answered by a RST.
    ASSERT_EQ(tr_.connect(de::SockId(s), remote_of(6000)), 0);
    EXPECT_EQ(wait_event(de::SockId(s), de::kEvReset | de::kEvError), 0x3333u);
    de::SockInfo info;
    ASSERT_EQ(tr_.info(de::SockId(s), &info), 0);
    EXPECT_EQ(info.error, ECONNREFUSED);
    EXPECT_EQ(tr_.abort(de::SockId(s)), 0);

    // A listener on the peer: connected, and the user set later is the one
    // events carry.
    mars::Stack &peer = net_.stack(1);
    const int64_t l = peer.open(1);
    ASSERT_GE(l, 0);
    ASSERT_EQ(peer.bind(mars::SockId(l), net_.addr(1, 6001)), 0);
    ASSERT_EQ(peer.listen(mars::SockId(l), 4), 0);
    const int64_t s2 = tr_.open(0x4444);
    ASSERT_GE(s2, 0);
    tr_.set_user(de::SockId(s2), 0x5555);
    now_ = net_.now();
    ASSERT_EQ(tr_.connect(de::SockId(s2), remote_of(6001)), 0);
    EXPECT_EQ(wait_event(de::SockId(s2), de::kEvConnected), 0x5555u);
}

TEST_F(MarsTransportTest, OptionsReachTheStackUnderTheirOwnNames)
{
    const int64_t s = tr_.open(1);
    ASSERT_GE(s, 0);
    // Each DTI option, set through the adapter, is the MARS option of the
    // same name: a reordering of either enum would show here.
    const std::map<de::Option, std::pair<mars::SockOpt, int64_t>> same = {
        {de::Option::kNoDelay, {mars::SockOpt::kNoDelay, 1}},
        {de::Option::kKeepAlive, {mars::SockOpt::kKeepAlive, 1}},
        {de::Option::kKeepIdleSec, {mars::SockOpt::kKeepIdleSec, 77}},
        {de::Option::kKeepIntvlSec, {mars::SockOpt::kKeepIntvlSec, 13}},
        {de::Option::kKeepCnt, {mars::SockOpt::kKeepCnt, 5}},
        {de::Option::kUserTimeoutMs, {mars::SockOpt::kUserTimeoutMs, 12345}},
        {de::Option::kRcvLowat, {mars::SockOpt::kRcvLowat, 321}},
        {de::Option::kNotsentLowat, {mars::SockOpt::kNotsentLowat, 16384}},
    };
    for (auto &[dopt, m] : same) {
        ASSERT_EQ(tr_.set_option(de::SockId(s), dopt, m.second), 0) << int(dopt);
        int64_t v = -1;
        ASSERT_EQ(stack_->get_option(mars::SockId(s), m.first, &v), 0) << int(dopt);
        EXPECT_EQ(v, m.second) << "DTI option " << int(dopt) << " landed elsewhere";
        v = -1;
        ASSERT_EQ(tr_.get_option(de::SockId(s), dopt, &v), 0);
        EXPECT_EQ(v, m.second);
    }
}

TEST_F(MarsTransportTest, ErrorsComeBackAsTheStackGivesThem)
{
    const de::SockId bogus = 999; // never opened
    de::SockInfo info;
    de::RingSpan span;
    int64_t v;
    EXPECT_EQ(tr_.bind(bogus, {0, 1}), stack_->bind(bogus, {0, 1}));
    EXPECT_LT(tr_.bind(bogus, {0, 1}), 0);
    EXPECT_LT(tr_.listen(bogus, 1), 0);
    EXPECT_LT(tr_.accept(bogus, 1), 0);
    EXPECT_LT(tr_.info(bogus, &info), 0);
    EXPECT_LT(tr_.rx_view(bogus, &span), 0);
    EXPECT_LT(tr_.tx_view(bogus, &span), 0);
    EXPECT_LT(tr_.get_option(bogus, de::Option::kNoDelay, &v), 0);
    // Two binds to one port: the second is refused as by the stack.
    const int64_t a = tr_.open(1), b = tr_.open(2);
    ASSERT_GE(a, 0);
    ASSERT_GE(b, 0);
    ASSERT_EQ(tr_.bind(de::SockId(a), {0, 7000}), 0);
    ASSERT_EQ(tr_.listen(de::SockId(a), 1), 0);
    EXPECT_EQ(tr_.bind(de::SockId(b), {0, 7000}), -EADDRINUSE);
}

// ring_levels() (one lookup) says what rx_view() and tx_view() say, through
// a socket's life: the engine's refresh relies on it in place of the views.
// Transport's own default (the two views) is the reference. Also the rule
// commit_to() relies on: tx_commit() refuses more than the free space.
TEST_F(MarsTransportTest, RingLevelsSayWhatTheViewsSay)
{
    auto same = [&](int64_t id, const char *when) {
        de::RingLevels got, want;
        tr_.ring_levels(de::SockId(id), &got);
        tr_.de::Transport::ring_levels(de::SockId(id), &want);
        EXPECT_EQ(got.rx_rc, want.rx_rc) << when;
        EXPECT_EQ(got.tx_rc, want.tx_rc) << when;
        EXPECT_EQ(got.readable, want.readable) << when;
        EXPECT_EQ(got.writable, want.writable) << when;
        return got;
    };
    EXPECT_EQ(same(999, "never opened").rx_rc, -EBADF);
    const int64_t l = tr_.open(1);
    ASSERT_GE(l, 0);
    EXPECT_LT(same(l, "opened, no rings").tx_rc, 0);
    ASSERT_EQ(tr_.bind(de::SockId(l), {0, 5100}), 0);
    ASSERT_EQ(tr_.listen(de::SockId(l), 4), 0);
    EXPECT_EQ(same(l, "listening").rx_rc, -EINVAL);

    mars::Stack &peer = net_.stack(1);
    const int64_t c = peer.open(7);
    ASSERT_GE(c, 0);
    ASSERT_EQ(peer.connect(mars::SockId(c), net_.addr(0, 5100), net_.now()), 0);
    wait_event(de::SockId(l), de::kEvAcceptable);
    const int64_t a = tr_.accept(de::SockId(l), 2);
    ASSERT_GE(a, 0);
    const de::RingLevels fresh = same(a, "accepted");
    EXPECT_EQ(fresh.rx_rc, 0);
    EXPECT_EQ(fresh.readable, 0u);
    EXPECT_GT(fresh.writable, 0u);

    uint8_t data[3000];
    mars::sim::pattern_fill(3, 0, data, sizeof data);
    ASSERT_EQ(peer.send(mars::SockId(c), data, sizeof data), int64_t(sizeof data));
    net_.run_for(1'000'000);
    ASSERT_EQ(tr_.tx_commit(de::SockId(a), 1000, false), 0);
    const de::RingLevels busy = same(a, "bytes readable, bytes queued to send");
    EXPECT_EQ(busy.readable, sizeof data);
    EXPECT_EQ(tr_.tx_commit(de::SockId(a), busy.writable + 1, false), -EINVAL) << "more than the free space";
    EXPECT_EQ(same(a, "after a refused commit").writable, busy.writable) << "a refused commit queued bytes";

    ASSERT_EQ(peer.shutdown(mars::SockId(c), false, true), 0);
    wait_event(de::SockId(a), de::kEvPeerClosed);
    same(a, "peer closed");
    ASSERT_EQ(tr_.shutdown(de::SockId(a), false, true), 0);
    EXPECT_EQ(same(a, "our FIN queued").tx_rc, -EPIPE);
    ASSERT_EQ(peer.abort(mars::SockId(c)), 0);
    net_.run_for(1'000'000);
    same(a, "reset by the peer");
}

TEST(DtiBuffers, WithoutAnEngineProvidesNothing)
{
    ppe::DtiBuffers b;
    mars::RingMemory m{};
    EXPECT_FALSE(b.provide(1, &m)) << "ring memory must come from an attached application's region";
}

} // namespace
