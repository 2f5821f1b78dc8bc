// IPv6 routes (StackConfig::routes6, mars/src/ip/route.h Router6; issue 31)
// between two MARS stacks on the simulated wire (SimNet: virtual time). Host
// B plays a router that owns the address behind it: besides its on-link
// 2001:2::2/64 it holds 2001:2:0:ff::1/128, which is off-link for A, so A
// reaches it only through a route whose gateway is B (no forwarding needed:
// the destination is B's own). Checked: a connect through the default route
// (a link-local gateway, as routers advertise themselves) and a UDP exchange
// the same way, a listener answering a client behind a gateway (and, without
// the route, its SYN-ACK dropped and counted), the longest prefix winning,
// the source address chosen by the longest common prefix (RFC 6724 rule 8),
// and the stack refusing a gateway that is not a neighbour.
#include "event_net.h"
#include "sim_wire.h"

#include "ip/ipv6_wire.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace mars;
using namespace mars::sim;

constexpr uint64_t kSec = 1'000'000'000ull;

// 2001:2:0:<net>::<host> (2001:2::/48, RFC 5180).
Ip6Addr addr6(uint8_t net, uint8_t host)
{
    Ip6Addr a{};
    a.b[0] = 0x20, a.b[1] = 0x01, a.b[2] = 0x00, a.b[3] = 0x02;
    a.b[7] = net;
    a.b[15] = host;
    return a;
}

const Ip6Addr kA = addr6(0, 1), kB = addr6(0, 2);
const Ip6Addr kBehind = addr6(0xff, 1); // B's own, off A's link

bool same(const Ip6Addr &a, const Ip6Addr &b) { return std::memcmp(a.b, b.b, 16) == 0; }

Route6 route(const Ip6Addr &dest, uint8_t prefix, const Ip6Addr &gateway) { return Route6{dest, prefix, gateway}; }

// A at 2001:2::1/64, B at 2001:2::2/64 and 2001:2:0:ff::1/128.
SimNetConfig routed_config()
{
    SimNetConfig c = default_simnet_config();
    c.a.stack.addr6[0] = Ip6Prefix{kA, 64};
    c.a.stack.n_addr6 = 1;
    c.b.stack.addr6[0] = Ip6Prefix{kB, 64};
    c.b.stack.addr6[1] = Ip6Prefix{kBehind, 128};
    c.b.stack.n_addr6 = 2;
    return c;
}

using Net = EventNet;

SockId listen6(Stack &st, uint16_t port)
{
    const int64_t l = st.open(7);
    EXPECT_GE(l, 0);
    EXPECT_EQ(st.bind6(SockId(l), Endpoint6{Ip6Addr{}, port}, false), 0);
    EXPECT_EQ(st.listen(SockId(l), 16), 0);
    return SockId(l);
}

// A connection from host `from` (its socket bound to `src` when given) to
// host `to`'s listener at (dst, 8080), 64 KiB each way, byte-exact.
void exchange(Net &n, int from, int to, const Ip6Addr &dst, const Ip6Addr *src, const Ip6Addr &want_src)
{
    Stack &c = n.net.stack(from), &s = n.net.stack(to);
    const SockId l = listen6(s, 8080);
    const int64_t cs = c.open(1);
    ASSERT_GE(cs, 0);
    if (src) {
        ASSERT_EQ(c.bind6(SockId(cs), Endpoint6{*src, 0}, true), 0);
    }
    ASSERT_EQ(c.connect6(SockId(cs), Endpoint6{dst, 8080}, n.net.now()), 0);
    ASSERT_TRUE(n.wait(from, SockId(cs), kEvConnected)) << n.net.stall_report();
    ASSERT_TRUE(n.wait(to, l, kEvAcceptable));
    const int64_t as = s.accept(l, 2);
    ASSERT_GE(as, 0);
    SockInfo ci{}, si{};
    ASSERT_EQ(c.info(SockId(cs), &ci), 0);
    ASSERT_EQ(s.info(SockId(as), &si), 0);
    EXPECT_TRUE(same(ci.local6.ip, want_src));
    EXPECT_TRUE(same(ci.remote6.ip, dst));
    EXPECT_TRUE(same(si.local6.ip, dst));
    EXPECT_TRUE(same(si.remote6.ip, want_src));

    std::string out(64 * 1024, '\0');
    for (size_t i = 0; i < out.size(); i++) out[i] = char('a' + (i * 7) % 26);
    for (int dir = 0; dir < 2; dir++) {
        Stack &tx = dir == 0 ? c : s, &rx = dir == 0 ? s : c;
        const SockId ts = SockId(dir == 0 ? cs : as), rs = SockId(dir == 0 ? as : cs);
        size_t sent = 0;
        std::string got;
        const bool done = n.net.run_until(
            [&] {
                if (sent < out.size()) {
                    const int64_t k = tx.send(ts, out.data() + sent, out.size() - sent);
                    if (k > 0) sent += size_t(k);
                }
                char buf[8192];
                for (int64_t k; (k = rx.recv(rs, buf, sizeof buf)) > 0;) got.append(buf, size_t(k));
                return got.size() == out.size();
            },
            60 * kSec);
        ASSERT_TRUE(done) << "direction " << dir << ": " << got.size() << " of " << out.size() << " bytes; "
                          << n.net.stall_report();
        EXPECT_EQ(got, out) << "direction " << dir;
    }
    EXPECT_EQ(c.stats().ip6_drop_no_route, 0u);
    EXPECT_EQ(s.stats().ip6_drop_no_route, 0u);
    EXPECT_EQ(c.close(SockId(cs)), 0);
    EXPECT_EQ(s.close(SockId(as)), 0);
    EXPECT_EQ(s.close(l), 0);
}

// A's default route through B's link-local address (fe80:: + EUI-64 of its
// MAC): A reaches the address behind B, TCP and UDP.
TEST(Route6, DefaultRouteThroughALinkLocalGateway)
{
    SimNetConfig cfg = routed_config();
    cfg.a.stack.routes6[0] = route(Ip6Addr{}, 0, ip6::link_local(cfg.b.stack.mac));
    cfg.a.stack.n_routes6 = 1;
    Net n(cfg);
    exchange(n, 0, 1, kBehind, nullptr, kA);

    // UDP the same way: A's datagram to [2001:2:0:ff::1]:5353, B's answer back.
    UdpSockets &ua = n.net.stack(0).udp(), &ub = n.net.stack(1).udp();
    const int64_t sa = ua.open(1), sb = ub.open(2);
    ASSERT_GE(sa, 0);
    ASSERT_GE(sb, 0);
    ASSERT_EQ(ub.bind6(SockId(sb), Endpoint6{Ip6Addr{}, 5353}, true), 0);
    const Endpoint6 to{kBehind, 5353};
    ASSERT_EQ(ua.send_to6(SockId(sa), &to, "query", 5), 5);
    char buf[64];
    UdpRecord rec{};
    int64_t k = -1;
    ASSERT_TRUE(n.net.run_until([&] { return (k = ub.recv_from(SockId(sb), buf, sizeof buf, &rec, false)) >= 0; },
                                5 * kSec));
    ASSERT_EQ(k, 5);
    EXPECT_EQ(std::string(buf, 5), "query");
    const uint16_t back = rec.src_port;
    const Endpoint6 reply{kA, back};
    ASSERT_EQ(ub.send_to6(SockId(sb), &reply, "answer", 6), 6);
    ASSERT_TRUE(n.net.run_until([&] { return (k = ua.recv_from(SockId(sa), buf, sizeof buf, &rec, false)) >= 0; },
                                5 * kSec));
    ASSERT_EQ(k, 6);
    EXPECT_EQ(std::string(buf, 6), "answer");
    // connect6 takes the routed peer too (it was ENETUNREACH without routes).
    EXPECT_EQ(ua.connect6(SockId(sa), to), 0);
    EXPECT_EQ(n.net.stack(0).stats().ip6_drop_no_route, 0u);
}

// A listener answers a client behind a gateway: B's client bound to its
// address behind itself connects to A; A's SYN-ACK and data to it go through
// its route via B's global address. Without the route the SYN-ACK is dropped
// (ip6_drop_no_route) and the client never connects.
TEST(Route6, ListenerAnswersAClientBehindAGateway)
{
    SimNetConfig cfg = routed_config();
    cfg.a.stack.routes6[0] = route(addr6(0xff, 0), 64, kB);
    cfg.a.stack.n_routes6 = 1;
    {
        Net n(cfg);
        exchange(n, 1, 0, kA, &kBehind, kBehind);
    }
    cfg.a.stack.n_routes6 = 0;
    Net n(cfg);
    Stack &a = n.net.stack(0), &b = n.net.stack(1);
    const SockId l = listen6(a, 8080);
    const int64_t cs = b.open(1);
    ASSERT_GE(cs, 0);
    ASSERT_EQ(b.bind6(SockId(cs), Endpoint6{kBehind, 0}, true), 0);
    ASSERT_EQ(b.connect6(SockId(cs), Endpoint6{kA, 8080}, n.net.now()), 0);
    n.net.run_for(5 * kSec);
    EXPECT_EQ(n.bits(1, SockId(cs)) & kEvConnected, 0u);
    EXPECT_GT(a.stats().ip6_drop_no_route, 0u) << "the SYN-ACK had no route";
    EXPECT_EQ(n.bits(0, l) & kEvAcceptable, 0u);
}

// The longest matching prefix wins over the default route (whose gateway,
// 2001:2::3, nobody answers); with only the specific route, other
// destinations are refused at once.
TEST(Route6, LongestPrefixWinsAndTheUnroutedAreRefused)
{
    SimNetConfig cfg = routed_config();
    cfg.a.stack.routes6[0] = route(Ip6Addr{}, 0, addr6(0, 3));
    cfg.a.stack.routes6[1] = route(addr6(0xff, 0), 64, kB);
    cfg.a.stack.n_routes6 = 2;
    {
        Net n(cfg);
        exchange(n, 0, 1, kBehind, nullptr, kA);
    }
    cfg.a.stack.routes6[0] = cfg.a.stack.routes6[1];
    cfg.a.stack.n_routes6 = 1;
    Net n(cfg);
    Stack &a = n.net.stack(0);
    const int64_t s = a.open(1);
    Ip6Addr off{};
    off.b[0] = 0x20, off.b[1] = 0x01, off.b[2] = 0x0d, off.b[3] = 0xb8;
    off.b[15] = 1;
    EXPECT_EQ(a.connect6(SockId(s), Endpoint6{off, 80}, n.net.now()), -ENETUNREACH);
    const int64_t u = a.udp().open(1);
    const Endpoint6 to{off, 53};
    EXPECT_EQ(a.udp().send_to6(SockId(u), &to, "x", 1), -ENETUNREACH);
    EXPECT_EQ(a.udp().connect6(SockId(u), to), -ENETUNREACH);
}

// A gateway that never answers neighbour discovery fails a connect through
// it with EHOSTUNREACH once its solicitations run out (as a neighbour that
// never answers fails an on-link connect), not after the SYN's retries.
TEST(Route6, DeadGatewayFailsTheConnectAsUnreachable)
{
    SimNetConfig cfg = routed_config();
    cfg.a.stack.routes6[0] = route(Ip6Addr{}, 0, addr6(0, 3)); // nobody holds 2001:2::3
    cfg.a.stack.n_routes6 = 1;
    Net n(cfg);
    Stack &a = n.net.stack(0);
    const int64_t s = a.open(1);
    ASSERT_GE(s, 0);
    ASSERT_EQ(a.connect6(SockId(s), Endpoint6{kBehind, 80}, n.net.now()), 0);
    ASSERT_TRUE(n.wait(0, SockId(s), kEvError | kEvReset, 10 * kSec)) << "still waiting after 10 s";
    SockInfo in{};
    ASSERT_EQ(a.info(SockId(s), &in), 0);
    EXPECT_EQ(in.error, EHOSTUNREACH);
    EXPECT_EQ(a.stats().tcp_connects_unreachable, 1u);
    EXPECT_EQ(a.stats().nd_failed, 1u);
    EXPECT_EQ(a.close(SockId(s)), 0);
}

// Through a route, the source is the address sharing the longest prefix
// with the destination (RFC 6724 rule 8), the first one on ties.
TEST(Route6, SourceSharesTheLongestPrefixWithTheDestination)
{
    SimNetConfig cfg = routed_config();
    cfg.a.stack.addr6[1] = Ip6Prefix{addr6(0xf0, 1), 64};
    cfg.a.stack.n_addr6 = 2;
    cfg.a.stack.routes6[0] = route(Ip6Addr{}, 0, kB);
    cfg.a.stack.n_routes6 = 1;
    Net n(cfg);
    Stack &a = n.net.stack(0);
    Ip6Addr far{};
    far.b[0] = 0x20, far.b[1] = 0x01, far.b[2] = 0x0d, far.b[3] = 0xb8, far.b[15] = 1; // 2001:db8::1
    struct Case {
        Ip6Addr dst, want;
    } cases[] = {{kBehind, addr6(0xf0, 1)}, {far, kA}, {addr6(0, 9), kA}};
    for (const Case &k : cases) {
        const int64_t s = a.open(1);
        ASSERT_GE(s, 0);
        ASSERT_EQ(a.connect6(SockId(s), Endpoint6{k.dst, 80}, n.net.now()), 0);
        SockInfo in{};
        ASSERT_EQ(a.info(SockId(s), &in), 0);
        EXPECT_TRUE(same(in.local6.ip, k.want)) << "destination byte 7 " << int(k.dst.b[7]);
        EXPECT_EQ(a.close(SockId(s)), 0);
    }
}

// A gateway must be a neighbour: link-local or in one of the port's
// prefixes, not one of the port's own addresses, not multicast.
TEST(Route6, GatewayThatIsNoNeighbourRefused)
{
    const Ip6Addr own = kA, off = addr6(0xff, 1);
    Ip6Addr mc{};
    mc.b[0] = 0xff, mc.b[1] = 0x02, mc.b[15] = 1;
    for (const Ip6Addr &gw : {own, off, mc}) {
        StackConfig c = test_stack_config(1);
        c.addr6[0] = Ip6Prefix{kA, 64};
        c.n_addr6 = 1;
        c.routes6[0] = route(Ip6Addr{}, 0, gw);
        c.n_routes6 = 1;
        FramePool pool(16);
        SimPort port(pool, [](const PacketRef &) {});
        RingPool rings(1, c.tcp.rcvbuf, c.tcp.sndbuf);
        std::string err;
        EXPECT_EQ(Stack::create(c, port, rings, &err), nullptr);
        EXPECT_NE(err.find("routes6: a gateway must be a unicast neighbour"), std::string::npos) << err;
    }
    StackConfig c = test_stack_config(1);
    c.n_routes6 = StackConfig::kMaxRoutes + 1;
    FramePool pool(16);
    SimPort port(pool, [](const PacketRef &) {});
    RingPool rings(1, c.tcp.rcvbuf, c.tcp.sndbuf);
    std::string err;
    EXPECT_EQ(Stack::create(c, port, rings, &err), nullptr);
    EXPECT_NE(err.find("n_routes6 must be 0..16"), std::string::npos) << err;
}

} // namespace
