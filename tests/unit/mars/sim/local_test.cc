// Local connections inside one stack (issue 29; mars/src/ip/local_loop.h,
// mars/README.md "Local connections"), on the simulated port (TEST FIXTURE:
// RawPeer plays nobody here; it only owns the frame pool and the port and
// records whatever the stack transmits). A socket of the stack connects to
// the stack's own address: the handshake, a byte-exact transfer both ways and
// the close both ways happen without a frame reaching the port; a connect to
// a port with no listener is reset (ECONNREFUSED), also when the stack shares
// its address with another (nothing of it is handed over). With the port's
// offloads on (checksums, TSO, payload by reference) the local frames are
// still plain segments the receive path takes.
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

namespace mars::sim {
namespace {

struct Variant {
    const char *name;
    bool offloads;
    bool shared;
};

class Local : public ::testing::TestWithParam<Variant> {
  protected:
    void SetUp() override
    {
        RawPeer::Options o;
        o.stack.pass_unclaimed = GetParam().shared;
        if (GetParam().offloads) o.offloads = kOffloadTxIpCsum | kOffloadTxTcpCsum | kOffloadTxTcpSeg | kOffloadTxExternal;
        peer_ = std::make_unique<RawPeer>(o);
        if (GetParam().offloads) {
            tso_pool_ = std::make_unique<FramePool>(64, 65536);
            peer_->port().enable_tso(tso_pool_.get(), 65535);
            peer_->port().enable_external(false);
        }
        peer_->poll();
        peer_->take(); // (the introducing ARP exchange)
        peer_->port().unclaimed_frames.clear();
        tx0_ = st().stats().tx_frames;
    }
    Stack &st() { return peer_->stack(); }
    RawPeer &p() { return *peer_; }
    // Polls (virtual time moving on by 10 us) until pred holds; bounded far
    // above what any honest exchange needs.
    template <class F> bool run_until(F pred)
    {
        for (int i = 0; i < 200000; i++) {
            if (pred()) return true;
            p().advance(10'000);
            p().poll();
        }
        return pred();
    }
    // What the port saw: no frame may leave for a local connection.
    void expect_nothing_on_the_port(const char *when)
    {
        EXPECT_EQ(st().stats().tx_frames, tx0_) << when;
        auto out = p().take();
        EXPECT_TRUE(out.empty()) << when << ": the port saw " << out[0].describe();
        EXPECT_TRUE(p().port().unclaimed_frames.empty()) << when << ": a frame was handed to the other stack";
    }

    std::unique_ptr<FramePool> tso_pool_;
    std::unique_ptr<RawPeer> peer_;
    uint64_t tx0_ = 0;
};

std::vector<uint8_t> pattern(size_t n, uint32_t seed)
{
    std::vector<uint8_t> v(n);
    uint32_t x = seed;
    for (auto &b : v) {
        x = x * 1103515245u + 12345u;
        b = uint8_t(x >> 16);
    }
    return v;
}

TEST_P(Local, ConnectTransferAndCloseBothWaysWithoutThePort)
{
    const uint16_t port = 8080;
    const SockId l = p().listen(port);
    ASSERT_NE(l, kNoSock);
    const int64_t c = st().open(7);
    ASSERT_GE(c, 0);
    ASSERT_EQ(st().connect(SockId(c), Endpoint{p().stack_ip, port}, p().now), 0);
    ASSERT_TRUE(run_until([&] { return p().events_of(SockId(c)) & kEvConnected; })) << "the local connect never completed";
    int64_t a = -EAGAIN;
    ASSERT_TRUE(run_until([&] { return (a = st().accept(l, 8)) >= 0; })) << "nothing to accept";
    SockInfo ci{}, ai{};
    ASSERT_EQ(st().info(SockId(c), &ci), 0);
    ASSERT_EQ(st().info(SockId(a), &ai), 0);
    EXPECT_EQ(ci.state, TcpState::kEstablished);
    EXPECT_EQ(ai.state, TcpState::kEstablished);
    EXPECT_EQ(ci.remote.ip, p().stack_ip);
    EXPECT_EQ(ai.remote.ip, p().stack_ip);
    EXPECT_EQ(ai.remote.port, ci.local.port);
    EXPECT_EQ(st().stats().local_conns, 1u);

    // 1 MiB each way at once, byte-exact.
    const size_t kBytes = 1 << 20;
    const auto up = pattern(kBytes, 1), down = pattern(kBytes, 2);
    std::vector<uint8_t> got_up, got_down;
    size_t sent_up = 0, sent_down = 0;
    std::vector<uint8_t> buf(65536);
    ASSERT_TRUE(run_until([&] {
        if (sent_up < kBytes) {
            const int64_t n = st().send(SockId(c), up.data() + sent_up, kBytes - sent_up);
            if (n > 0) sent_up += size_t(n);
        }
        if (sent_down < kBytes) {
            const int64_t n = st().send(SockId(a), down.data() + sent_down, kBytes - sent_down);
            if (n > 0) sent_down += size_t(n);
        }
        for (int64_t n; (n = st().recv(SockId(a), buf.data(), buf.size())) > 0;)
            got_up.insert(got_up.end(), buf.begin(), buf.begin() + n);
        for (int64_t n; (n = st().recv(SockId(c), buf.data(), buf.size())) > 0;)
            got_down.insert(got_down.end(), buf.begin(), buf.begin() + n);
        return got_up.size() >= kBytes && got_down.size() >= kBytes;
    })) << "transfer stalled: " << got_up.size() << " and " << got_down.size() << " bytes arrived";
    EXPECT_TRUE(got_up == up) << "client -> server bytes differ";
    EXPECT_TRUE(got_down == down) << "server -> client bytes differ";

    // The client closes first, then the server: FIN both ways.
    ASSERT_EQ(st().close(SockId(c)), 0);
    ASSERT_TRUE(run_until([&] { return p().events_of(SockId(a)) & kEvPeerClosed; })) << "no FIN at the server";
    ASSERT_EQ(st().close(SockId(a)), 0);
    ASSERT_TRUE(run_until([&] {
        return (p().events_of(SockId(a)) & kEvClosed) && (p().events_of(SockId(c)) & kEvClosed);
    })) << "the close did not complete both ways";
    EXPECT_EQ(st().stats().tcp_resets_out, 0u);
    EXPECT_EQ(st().stats().tcp_retransmits, 0u);
    EXPECT_EQ(st().stats().drop_local_full, 0u);
    EXPECT_GT(st().stats().local_frames, 2 * kBytes / 1500);
    EXPECT_EQ(st().stats().tx_tso_frames, 0u); // local segments are plain frames (local_loop.h)
    expect_nothing_on_the_port("after the transfer");
}

TEST_P(Local, ConnectToAPortWithoutListenerIsReset)
{
    const int64_t c = st().open(7);
    ASSERT_GE(c, 0);
    ASSERT_EQ(st().connect(SockId(c), Endpoint{p().stack_ip, 9}, p().now), 0);
    ASSERT_TRUE(run_until([&] { return p().events_of(SockId(c)) & (kEvReset | kEvError); }))
        << "the connect was never answered";
    SockInfo ci{};
    ASSERT_EQ(st().info(SockId(c), &ci), 0);
    EXPECT_EQ(ci.error, ECONNREFUSED);
    EXPECT_EQ(st().stats().tcp_resets_out, 1u);
    EXPECT_EQ(st().stats().local_conns, 0u);
    expect_nothing_on_the_port("after the refused connect");
}

// A connection to the peer still leaves through the port (the local loop
// takes only our own address).
TEST_P(Local, OtherDestinationsStillLeaveThroughThePort)
{
    const int64_t c = st().open(7);
    ASSERT_GE(c, 0);
    ASSERT_EQ(st().connect(SockId(c), Endpoint{p().peer_ip, 80}, p().now), 0);
    p().poll();
    auto out = p().take_tcp();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(st().stats().local_frames, 0u);
}

INSTANTIATE_TEST_SUITE_P(Mars, Local,
                         ::testing::Values(Variant{"plain", false, false}, Variant{"offloads", true, false},
                                           Variant{"shared", false, true}),
                         [](const auto &info) { return std::string(info.param.name); });

} // namespace
} // namespace mars::sim
