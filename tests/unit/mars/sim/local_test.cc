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
//
// Over IPv6 (Local6): the same to the stack's own global address and to its
// link-local one (connect6): neighbour discovery never solicits our own
// address, the frames go through the same loop and counters; a listener on
// :: (dual-stack) and a v6only one accept, an IPv4-only one does not (RST,
// ECONNREFUSED), and a peer's IPv6 address still goes out (ND on the port).
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
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
        if (ipv6_) {
            o.stack.addr6[0] = Ip6Prefix{global6(1), 64};
            o.stack.n_addr6 = 1;
        }
        if (GetParam().offloads) o.offloads = kOffloadTxIpCsum | kOffloadTxTcpCsum | kOffloadTxTcpSeg | kOffloadTxExternal;
        peer_ = std::make_unique<RawPeer>(o);
        if (GetParam().offloads) {
            tso_pool_ = std::make_unique<FramePool>(64, 65536);
            peer_->port().enable_tso(tso_pool_.get(), 65535);
            peer_->port().enable_external(false);
        }
        peer_->poll();
        if (ipv6_) {
            // DAD (a lone stack; sharing, the addresses are usable at once):
            // nobody answers, a second later they are preferred and announced.
            st().announce(peer_->now);
            peer_->advance(2'000'000'000ull);
        }
        peer_->take(); // (the introducing ARP exchange, DAD and its announcement)
        peer_->port().unclaimed_frames.clear();
        tx0_ = st().stats().tx_frames;
    }
    // 2001:2::host (RFC 5180's benchmarking range).
    static Ip6Addr global6(uint8_t host)
    {
        Ip6Addr a{};
        a.b[0] = 0x20, a.b[1] = 0x01, a.b[3] = 0x02;
        a.b[15] = host;
        return a;
    }
    // The stack's link-local address: fe80::/64 and the modified EUI-64 of
    // its MAC (RFC 4291 2.5.1), worked out here rather than asked of it.
    Ip6Addr link_local6() const
    {
        const MacAddr &m = peer_->stack_mac;
        Ip6Addr a{};
        a.b[0] = 0xfe, a.b[1] = 0x80;
        const uint8_t iid[8] = {uint8_t(m.b[0] ^ 2), m.b[1], m.b[2], 0xff, 0xfe, m.b[3], m.b[4], m.b[5]};
        std::memcpy(a.b + 8, iid, 8);
        return a;
    }
    // An IPv6 listener on (ip, port): bind6 then listen; kNoSock on failure.
    SockId listen6(const Ip6Addr &ip, uint16_t port, bool v6only)
    {
        const int64_t l = st().open(1);
        if (l < 0 || st().bind6(SockId(l), Endpoint6{ip, port}, v6only) != 0 || st().listen(SockId(l), 16) != 0)
            return kNoSock;
        return SockId(l);
    }
    // A local connect6 to (ip, port) taken by listener l: the connected
    // client's and accepted socket's ids (the test fails when it stalls).
    void connect6_accept(const Ip6Addr &ip, uint16_t port, SockId l, SockId *c, SockId *a)
    {
        const int64_t cs = st().open(7);
        ASSERT_GE(cs, 0);
        *c = SockId(cs);
        ASSERT_EQ(st().connect6(*c, Endpoint6{ip, port}, p().now), 0);
        ASSERT_TRUE(run_until([&] { return p().events_of(*c) & kEvConnected; })) << "the local connect6 never completed";
        int64_t as = -EAGAIN;
        ASSERT_TRUE(run_until([&] { return (as = st().accept(l, 8)) >= 0; })) << "nothing to accept";
        *a = SockId(as);
    }
    // 1 MiB each way at once, byte-exact, then the client closes first and
    // the server second: FIN both ways, every socket closed.
    void transfer_and_close(SockId c, SockId a)
    {
        const size_t kBytes = 1 << 20;
        const auto up = pattern(kBytes, 1), down = pattern(kBytes, 2);
        std::vector<uint8_t> got_up, got_down;
        size_t sent_up = 0, sent_down = 0;
        std::vector<uint8_t> buf(65536);
        ASSERT_TRUE(run_until([&] {
            if (sent_up < kBytes) {
                const int64_t n = st().send(c, up.data() + sent_up, kBytes - sent_up);
                if (n > 0) sent_up += size_t(n);
            }
            if (sent_down < kBytes) {
                const int64_t n = st().send(a, down.data() + sent_down, kBytes - sent_down);
                if (n > 0) sent_down += size_t(n);
            }
            for (int64_t n; (n = st().recv(a, buf.data(), buf.size())) > 0;)
                got_up.insert(got_up.end(), buf.begin(), buf.begin() + n);
            for (int64_t n; (n = st().recv(c, buf.data(), buf.size())) > 0;)
                got_down.insert(got_down.end(), buf.begin(), buf.begin() + n);
            return got_up.size() >= kBytes && got_down.size() >= kBytes;
        })) << "transfer stalled: " << got_up.size() << " and " << got_down.size() << " bytes arrived";
        EXPECT_TRUE(got_up == up) << "client -> server bytes differ";
        EXPECT_TRUE(got_down == down) << "server -> client bytes differ";
        ASSERT_EQ(st().close(c), 0);
        ASSERT_TRUE(run_until([&] { return p().events_of(a) & kEvPeerClosed; })) << "no FIN at the server";
        ASSERT_EQ(st().close(a), 0);
        ASSERT_TRUE(run_until([&] { return (p().events_of(a) & kEvClosed) && (p().events_of(c) & kEvClosed); }))
            << "the close did not complete both ways";
        EXPECT_EQ(st().stats().tcp_resets_out, 0u);
        EXPECT_EQ(st().stats().tcp_retransmits, 0u);
        EXPECT_EQ(st().stats().drop_local_full, 0u);
        EXPECT_GT(st().stats().local_frames, 2 * kBytes / 1500);
        EXPECT_EQ(st().stats().tx_tso_frames, 0u); // local segments are plain frames (local_loop.h)
    }
    static std::vector<uint8_t> pattern(size_t n, uint32_t seed)
    {
        std::vector<uint8_t> v(n);
        uint32_t x = seed;
        for (auto &b : v) {
            x = x * 1103515245u + 12345u;
            b = uint8_t(x >> 16);
        }
        return v;
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
    bool ipv6_ = false; // Local6: the stack has an IPv6 address too, DAD done
};

class Local6 : public Local {
  protected:
    void SetUp() override
    {
        ipv6_ = true;
        Local::SetUp();
    }
};

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

    ASSERT_NO_FATAL_FAILURE(transfer_and_close(SockId(c), SockId(a)));
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

// To our own global address, taken by a dual-stack listener on :: (v6only
// false): an IPv6 connection both ways, nothing on the port, no neighbour
// solicitation for our own address.
TEST_P(Local6, ConnectToOurGlobalAddressTransferAndCloseWithoutThePort)
{
    const SockId l = listen6(Ip6Addr{}, 8080, false);
    ASSERT_NE(l, kNoSock);
    SockId c = kNoSock, a = kNoSock;
    ASSERT_NO_FATAL_FAILURE(connect6_accept(global6(1), 8080, l, &c, &a));
    SockInfo ci{}, ai{};
    ASSERT_EQ(st().info(c, &ci), 0);
    ASSERT_EQ(st().info(a, &ai), 0);
    EXPECT_EQ(ci.state, TcpState::kEstablished);
    EXPECT_EQ(ai.state, TcpState::kEstablished);
    EXPECT_TRUE(ci.ipv6 && ai.ipv6);
    EXPECT_EQ(std::memcmp(ci.local6.ip.b, global6(1).b, 16), 0) << "the source is the destination itself";
    EXPECT_EQ(std::memcmp(ci.remote6.ip.b, global6(1).b, 16), 0);
    EXPECT_EQ(std::memcmp(ai.remote6.ip.b, global6(1).b, 16), 0);
    EXPECT_EQ(ai.remote6.port, ci.local6.port);
    EXPECT_EQ(ci.remote6.port, 8080);
    EXPECT_EQ(st().stats().local_conns, 1u);
    ASSERT_NO_FATAL_FAILURE(transfer_and_close(c, a));
    EXPECT_EQ(st().stats().nd_ns_out, GetParam().shared ? 0u : 2u) << "DAD's solicitations only (link-local and global)";
    expect_nothing_on_the_port("after the IPv6 transfer");
}

// To our own link-local address (the scope is the stack's one port), taken
// by a v6only listener on ::.
TEST_P(Local6, ConnectToOurLinkLocalAddressV6onlyListener)
{
    const SockId l = listen6(Ip6Addr{}, 8081, true);
    ASSERT_NE(l, kNoSock);
    SockId c = kNoSock, a = kNoSock;
    ASSERT_NO_FATAL_FAILURE(connect6_accept(link_local6(), 8081, l, &c, &a));
    SockInfo ci{};
    ASSERT_EQ(st().info(c, &ci), 0);
    EXPECT_EQ(std::memcmp(ci.local6.ip.b, link_local6().b, 16), 0);
    EXPECT_EQ(st().stats().local_conns, 1u);
    ASSERT_NO_FATAL_FAILURE(transfer_and_close(c, a));
    expect_nothing_on_the_port("after the link-local transfer");
}

// A listener on our own global address (not ::) takes the local connection too.
TEST_P(Local6, ListenerOnTheAddressItselfAccepts)
{
    const SockId l = listen6(global6(1), 8082, false);
    ASSERT_NE(l, kNoSock);
    SockId c = kNoSock, a = kNoSock;
    ASSERT_NO_FATAL_FAILURE(connect6_accept(global6(1), 8082, l, &c, &a));
    EXPECT_EQ(st().stats().local_conns, 1u);
    expect_nothing_on_the_port("after the connect");
}

// The dual-stack listener also takes an IPv4 local connection (the IPv4
// path, unchanged) beside the IPv6 one: two local connections.
TEST_P(Local6, DualStackListenerTakesBothFamilies)
{
    const SockId l = listen6(Ip6Addr{}, 8083, false);
    ASSERT_NE(l, kNoSock);
    SockId c6 = kNoSock, a6 = kNoSock;
    ASSERT_NO_FATAL_FAILURE(connect6_accept(global6(1), 8083, l, &c6, &a6));
    const int64_t c4 = st().open(9);
    ASSERT_GE(c4, 0);
    ASSERT_EQ(st().connect(SockId(c4), Endpoint{p().stack_ip, 8083}, p().now), 0);
    ASSERT_TRUE(run_until([&] { return p().events_of(SockId(c4)) & kEvConnected; }));
    int64_t a4 = -EAGAIN;
    ASSERT_TRUE(run_until([&] { return (a4 = st().accept(l, 10)) >= 0; }));
    SockInfo i6{}, i4{};
    ASSERT_EQ(st().info(a6, &i6), 0);
    ASSERT_EQ(st().info(SockId(a4), &i4), 0);
    EXPECT_TRUE(i6.ipv6);
    EXPECT_FALSE(i4.ipv6);
    EXPECT_EQ(st().stats().local_conns, 2u);
    expect_nothing_on_the_port("after both connects");
}

// Nobody listens on the port: the SYN is answered with RST through the loop
// (ECONNREFUSED); sharing, nothing goes to the other stack.
TEST_P(Local6, ConnectToAPortWithoutListenerIsReset)
{
    const int64_t c = st().open(7);
    ASSERT_GE(c, 0);
    ASSERT_EQ(st().connect6(SockId(c), Endpoint6{global6(1), 9}, p().now), 0);
    ASSERT_TRUE(run_until([&] { return p().events_of(SockId(c)) & (kEvReset | kEvError); }))
        << "the connect6 was never answered";
    SockInfo ci{};
    ASSERT_EQ(st().info(SockId(c), &ci), 0);
    EXPECT_EQ(ci.error, ECONNREFUSED);
    EXPECT_EQ(st().stats().tcp_resets_out, 1u);
    EXPECT_EQ(st().stats().local_conns, 0u);
    EXPECT_GE(st().stats().local_frames, 2u); // the SYN and the RST
    expect_nothing_on_the_port("after the refused connect6");
}

// An IPv4-only listener (on the stack's IPv4 address) takes no IPv6
// connection: RST, ECONNREFUSED.
TEST_P(Local6, Ipv4OnlyListenerRefusesAnIpv6Connection)
{
    const SockId l = p().listen(8084);
    ASSERT_NE(l, kNoSock);
    const int64_t c = st().open(7);
    ASSERT_GE(c, 0);
    ASSERT_EQ(st().connect6(SockId(c), Endpoint6{global6(1), 8084}, p().now), 0);
    ASSERT_TRUE(run_until([&] { return p().events_of(SockId(c)) & (kEvReset | kEvError); }))
        << "the connect6 was never answered";
    SockInfo ci{};
    ASSERT_EQ(st().info(SockId(c), &ci), 0);
    EXPECT_EQ(ci.error, ECONNREFUSED);
    EXPECT_EQ(st().accept(l, 8), -EAGAIN);
    EXPECT_EQ(st().stats().local_conns, 0u);
    expect_nothing_on_the_port("after the refused connect6");
}

// Another address on our prefix still leaves through the port: a neighbour
// solicitation for it, nothing looped.
TEST_P(Local6, OtherIpv6DestinationsStillLeaveThroughThePort)
{
    const int64_t c = st().open(7);
    ASSERT_GE(c, 0);
    const uint64_t ns0 = st().stats().nd_ns_out;
    ASSERT_EQ(st().connect6(SockId(c), Endpoint6{global6(2), 80}, p().now), 0);
    p().poll();
    EXPECT_EQ(st().stats().nd_ns_out, ns0 + 1) << "the peer is solicited";
    EXPECT_GT(st().stats().tx_frames, tx0_);
    EXPECT_EQ(st().stats().local_frames, 0u);
}

INSTANTIATE_TEST_SUITE_P(Mars, Local6,
                         ::testing::Values(Variant{"plain", false, false}, Variant{"offloads", true, false},
                                           Variant{"shared", false, true}),
                         [](const auto &info) { return std::string(info.param.name); });

INSTANTIATE_TEST_SUITE_P(Mars, Local,
                         ::testing::Values(Variant{"plain", false, false}, Variant{"offloads", true, false},
                                           Variant{"shared", false, true}),
                         [](const auto &info) { return std::string(info.param.name); });

} // namespace
} // namespace mars::sim
