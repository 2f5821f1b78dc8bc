// TCP connections over IPv6 between two MARS stacks on the simulated wire
// (sim/sim_wire.h SimNet: virtual time, seeded loss and corruption; issue
// 31): the handshake both ways after neighbour discovery (each stack
// resolves the other with NS/NA before its SYN or SYN-ACK leaves), a
// byte-exact transfer through loss (SACK and RACK at work), FIN close both
// ways, a neighbour that never answers failing the connect with
// EHOSTUNREACH, and a dual-stack listener on :: taking one IPv4 and one IPv6
// client. The frames a test builds itself are in tcp6_test.cc (SYN bytes,
// corrupted segments, packet too big).
#include "event_net.h"
#include "sim_wire.h"
#include "transfer_app.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace mars;
using namespace mars::sim;

constexpr uint64_t kSec = 1'000'000'000ull;

Ip6Addr addr6(uint8_t host)
{
    Ip6Addr a{};
    a.b[0] = 0x20, a.b[1] = 0x01, a.b[2] = 0x00, a.b[3] = 0x02; // 2001:2::/48 (RFC 5180)
    a.b[15] = host;
    return a;
}

bool same(const Ip6Addr &a, const Ip6Addr &b) { return std::memcmp(a.b, b.b, 16) == 0; }

SimNetConfig v6_config()
{
    SimNetConfig c = default_simnet_config();
    c.a.stack.addr6[0] = Ip6Prefix{addr6(1), 64};
    c.a.stack.n_addr6 = 1;
    c.b.stack.addr6[0] = Ip6Prefix{addr6(2), 64};
    c.b.stack.n_addr6 = 1;
    return c;
}

using Net = EventNet;

// A listener on host h at (ip6, port) (ip6 :: with v6only false: dual-stack).
SockId listen6(Stack &st, const Ip6Addr &ip, uint16_t port, bool v6only)
{
    const int64_t l = st.open(7);
    EXPECT_GE(l, 0);
    EXPECT_EQ(st.bind6(SockId(l), Endpoint6{ip, port}, v6only), 0);
    EXPECT_EQ(st.listen(SockId(l), 16), 0);
    return SockId(l);
}

// One connection over IPv6 from host `from` to a listener of host `to`:
// handshake (with ND first), a few bytes each way, then both ends close.
void handshake_and_close(Net &n, int from, int to, bool v6only_listener)
{
    Stack &c = n.net.stack(from), &s = n.net.stack(to);
    const Ip6Addr cip = addr6(uint8_t(from + 1)), sip = addr6(uint8_t(to + 1));
    const uint64_t ns_before = c.stats().nd_ns_out;
    const SockId l = listen6(s, v6only_listener ? sip : Ip6Addr{}, 8080, v6only_listener);
    const int64_t cs = c.open(1);
    ASSERT_GE(cs, 0);
    ASSERT_EQ(c.connect6(SockId(cs), Endpoint6{sip, 8080}, n.net.now()), 0);
    ASSERT_TRUE(n.wait(from, SockId(cs), kEvConnected)) << n.net.stall_report();
    EXPECT_GT(c.stats().nd_ns_out, ns_before) << "the SYN waited for neighbour discovery";
    ASSERT_TRUE(n.wait(to, l, kEvAcceptable));
    const int64_t as = s.accept(l, 2);
    ASSERT_GE(as, 0);

    SockInfo ci{}, si{};
    ASSERT_EQ(c.info(SockId(cs), &ci), 0);
    ASSERT_EQ(s.info(SockId(as), &si), 0);
    EXPECT_TRUE(ci.ipv6);
    EXPECT_TRUE(si.ipv6);
    EXPECT_TRUE(same(ci.local6.ip, cip));
    EXPECT_TRUE(same(ci.remote6.ip, sip));
    EXPECT_EQ(ci.remote6.port, 8080);
    EXPECT_TRUE(same(si.local6.ip, sip));
    EXPECT_TRUE(same(si.remote6.ip, cip));
    EXPECT_EQ(si.remote6.port, ci.local6.port);
    EXPECT_EQ(ci.state, TcpState::kEstablished);
    EXPECT_EQ(ci.snd_mss, 1500u - 60 - 12) << "MSS = path MTU - 60, less the timestamp option";
    EXPECT_TRUE(ci.sack_ok);
    EXPECT_TRUE(ci.ts_ok);

    ASSERT_EQ(c.send(SockId(cs), "ping6", 5), 5);
    ASSERT_TRUE(n.wait(to, SockId(as), kEvReadable));
    char buf[16] = {};
    ASSERT_EQ(s.recv(SockId(as), buf, sizeof buf), 5);
    EXPECT_EQ(std::string(buf, 5), "ping6");
    ASSERT_EQ(s.send(SockId(as), "pong6!", 6), 6);
    ASSERT_TRUE(n.wait(from, SockId(cs), kEvReadable));
    ASSERT_EQ(c.recv(SockId(cs), buf, sizeof buf), 6);
    EXPECT_EQ(std::string(buf, 6), "pong6!");

    // FIN both ways: the client first (it ends in TIME-WAIT), then the server.
    ASSERT_EQ(c.shutdown(SockId(cs), false, true), 0);
    ASSERT_TRUE(n.wait(to, SockId(as), kEvPeerClosed));
    ASSERT_EQ(s.close(SockId(as)), 0);
    ASSERT_TRUE(n.wait(from, SockId(cs), kEvPeerClosed));
    ASSERT_TRUE(n.wait(to, SockId(as), kEvClosed)) << "the server's LAST-ACK was answered";
    ASSERT_EQ(c.info(SockId(cs), &ci), 0);
    EXPECT_EQ(ci.state, TcpState::kTimeWait);
    ASSERT_EQ(c.close(SockId(cs)), 0);
    ASSERT_TRUE(n.wait(from, SockId(cs), kEvClosed));
    EXPECT_EQ(s.close(l), 0);
    n.net.run_for(3 * kSec); // TIME-WAIT (2 s here) runs out
    EXPECT_EQ(c.stats().conns_open, 0u);
    EXPECT_EQ(s.stats().conns_open, 0u);
    EXPECT_EQ(n.net.host(from).rings->outstanding(), 0u);
    EXPECT_EQ(n.net.host(to).rings->outstanding(), 0u);
}

TEST(Conn6, HandshakeDataAndCloseAtoB)
{
    Net n(v6_config());
    handshake_and_close(n, 0, 1, false);
}

TEST(Conn6, HandshakeDataAndCloseBtoA)
{
    Net n(v6_config());
    handshake_and_close(n, 1, 0, true);
}

// Several connections moving 1 MiB each way through 2% loss both ways:
// every byte arrives in order, and the loss was repaired by SACK-driven
// recovery (RACK marked segments lost), not only by timeouts.
TEST(Conn6, TransferThroughLossByteExact)
{
    SimNetConfig cfg = v6_config();
    cfg.a_to_b.loss = cfg.b_to_a.loss = 0.02;
    Net n(cfg);
    TransferApp::Options o;
    o.conns = 3;
    o.bytes_a_to_b = o.bytes_b_to_a = 1 << 20;
    o.ipv6 = true;
    o.b6 = addr6(2);
    TransferApp app(n.net, o);
    ASSERT_TRUE(app.start()) << app.failure();
    ASSERT_TRUE(n.net.run_until([&] { return app.done(); }, 600 * kSec)) << n.net.stall_report() << "\n" << app.progress();
    ASSERT_EQ(app.failure(), "") << app.progress();
    for (auto &c : app.conns())
        for (auto &e : c.end) {
            EXPECT_EQ(e.sent, e.to_send);
            EXPECT_EQ(e.received, e.expect);
        }
    EXPECT_GT(n.net.link(0).stats().lost + n.net.link(1).stats().lost, 0u);
    for (int h = 0; h < 2; h++) {
        const StackStats &st = n.net.stack(h).stats();
        EXPECT_GT(st.tcp_rack_lost, 0u) << "host " << h << ": losses found by RACK over SACK";
        EXPECT_GT(st.tcp_retransmits, 0u) << "host " << h;
    }
    n.net.run_for(cfg.a.stack.tcp.time_wait_ns + kSec);
    for (int h = 0; h < 2; h++) {
        EXPECT_EQ(n.net.stack(h).stats().conns_open, 1u * h) << "host " << h << " (b keeps its listener)";
        EXPECT_EQ(n.net.stack(h).stats().ooo_frames_used, 0u);
        EXPECT_EQ(n.net.host(h).rings->outstanding(), 0u);
    }
}

// A clean transfer over IPv6 between two established ends: the in-order
// data segments take header prediction (the fast path) as IPv4's do, and
// the sender's pure ACKs too; byte exact. (TransferApp's receiver shuts its
// side at once, FIN-WAIT-2: never predicted, for either family.)
TEST(Conn6, InOrderDataTakesTheFastPath)
{
    Net n(v6_config());
    Stack &a = n.net.stack(0), &b = n.net.stack(1);
    const SockId l = listen6(b, Ip6Addr{}, 8081, false);
    const int64_t cs = a.open(1);
    ASSERT_GE(cs, 0);
    ASSERT_EQ(a.connect6(SockId(cs), Endpoint6{addr6(2), 8081}, n.net.now()), 0);
    ASSERT_TRUE(n.wait(0, SockId(cs), kEvConnected)) << n.net.stall_report();
    ASSERT_TRUE(n.wait(1, l, kEvAcceptable));
    const int64_t as = b.accept(l, 2);
    ASSERT_GE(as, 0);
    const uint64_t hits_b = b.stats().fastpath_hits, hits_a = a.stats().fastpath_hits;
    const size_t total = 1 << 20;
    std::vector<uint8_t> out(total), in;
    for (size_t i = 0; i < total; i++) out[i] = uint8_t(i * 131 + 7);
    size_t sent = 0;
    std::vector<uint8_t> buf(65536);
    ASSERT_TRUE(n.net.run_until(
        [&] {
            if (sent < total) {
                const int64_t k = a.send(SockId(cs), out.data() + sent, total - sent);
                if (k > 0) sent += size_t(k);
            }
            for (;;) {
                const int64_t k = b.recv(SockId(as), buf.data(), buf.size());
                if (k <= 0) break;
                in.insert(in.end(), buf.begin(), buf.begin() + k);
            }
            return in.size() >= total;
        },
        60 * kSec))
        << n.net.stall_report();
    EXPECT_TRUE(in == out) << "not byte exact";
    const uint64_t segs = total / 1428; // data segments (MSS 1428 with timestamps)
    EXPECT_GE(b.stats().fastpath_hits - hits_b, segs * 9 / 10)
        << "receiver: hits " << b.stats().fastpath_hits << " misses " << b.stats().fastpath_misses;
    EXPECT_GT(a.stats().fastpath_hits - hits_a, 0u) << "sender: its pure ACKs";
}

// Corruption on the wire (single bit flips behind the Ethernet header):
// whatever a flip hits, the transfer stays byte exact, and flips in TCP
// are caught by the checksum over the IPv6 pseudo-header and counted.
TEST(Conn6, CorruptedSegmentsDroppedAndCounted)
{
    SimNetConfig cfg = v6_config();
    cfg.a_to_b.corrupt = 0.02;
    cfg.a_to_b.corrupt_ipv6 = true;
    Net n(cfg);
    TransferApp::Options o;
    o.conns = 1;
    o.bytes_a_to_b = 1 << 20;
    o.bytes_b_to_a = 0;
    o.ipv6 = true;
    o.b6 = addr6(2);
    TransferApp app(n.net, o);
    ASSERT_TRUE(app.start()) << app.failure();
    ASSERT_TRUE(n.net.run_until([&] { return app.done(); }, 600 * kSec)) << n.net.stall_report() << "\n" << app.progress();
    ASSERT_EQ(app.failure(), "") << app.progress();
    EXPECT_EQ(app.conns()[0].end[1].received, uint64_t(1) << 20);
    EXPECT_GT(n.net.link(0).stats().corrupted, 0u);
    EXPECT_GT(n.net.stack(1).stats().drop_tcp_csum, 0u);
}

// A destination on the link nobody answers for: ND gives up (3 NS, 1 s
// apart) and the connect fails with EHOSTUNREACH, as IPv4's ARP failure does.
TEST(Conn6, NeighbourFailureFailsTheConnect)
{
    Net n(v6_config());
    Stack &a = n.net.stack(0);
    const int64_t s = a.open(1);
    ASSERT_GE(s, 0);
    ASSERT_EQ(a.connect6(SockId(s), Endpoint6{addr6(99), 80}, n.net.now()), 0);
    ASSERT_TRUE(n.wait(0, SockId(s), kEvError | kEvReset, 10 * kSec));
    SockInfo in{};
    ASSERT_EQ(a.info(SockId(s), &in), 0);
    EXPECT_EQ(in.error, EHOSTUNREACH);
    EXPECT_EQ(a.stats().tcp_connects_unreachable, 1u);
    EXPECT_EQ(a.stats().nd_failed, 1u);
    EXPECT_EQ(a.stats().nd_ns_out >= 3, true);
    EXPECT_EQ(a.close(SockId(s)), 0);
    // Off the link (no IPv6 routes yet), multicast, unspecified: refused at once.
    const int64_t t = a.open(1);
    Ip6Addr off{};
    off.b[0] = 0x20, off.b[1] = 0x01, off.b[2] = 0x0d, off.b[3] = 0xb8;
    off.b[15] = 1;
    EXPECT_EQ(a.connect6(SockId(t), Endpoint6{off, 80}, n.net.now()), -ENETUNREACH);
    Ip6Addr mc{};
    mc.b[0] = 0xff, mc.b[1] = 0x02, mc.b[15] = 1;
    EXPECT_EQ(a.connect6(SockId(t), Endpoint6{mc, 80}, n.net.now()), -ENETUNREACH);
    EXPECT_EQ(a.connect6(SockId(t), Endpoint6{Ip6Addr{}, 80}, n.net.now()), -EINVAL);
}

// One listener on [::]:port (not v6only) accepts an IPv4 client and an IPv6
// client; each accepted socket is of its client's family. A v6only listener,
// or one on a specific IPv6 address, takes no IPv4 (RST) and leaves the
// IPv4 port free.
TEST(Conn6, DualStackListenerTakesBothFamilies)
{
    Net n(v6_config());
    Stack &a = n.net.stack(0), &b = n.net.stack(1);
    const SockId l = listen6(b, Ip6Addr{}, 9000, false);
    // Both families' marks on the listener: its children inherit both.
    ASSERT_EQ(b.set_option(l, SockOpt::kTos, 0x20), 0);
    ASSERT_EQ(b.set_option(l, SockOpt::kTclass, 0x60), 0);
    const int64_t c4 = a.open(1), c6 = a.open(2);
    ASSERT_EQ(a.connect(SockId(c4), n.net.addr(1, 9000), n.net.now()), 0);
    ASSERT_EQ(a.connect6(SockId(c6), Endpoint6{addr6(2), 9000}, n.net.now()), 0);
    // A v4-mapped address (::ffff:198.18.0.2) is IPv4: connect6 connects over IPv4.
    Ip6Addr mapped{};
    mapped.b[10] = mapped.b[11] = 0xff;
    const uint32_t b4 = n.net.config(1).ip;
    mapped.b[12] = uint8_t(b4 >> 24), mapped.b[13] = uint8_t(b4 >> 16), mapped.b[14] = uint8_t(b4 >> 8), mapped.b[15] = uint8_t(b4);
    const int64_t cm = a.open(3);
    ASSERT_EQ(a.connect6(SockId(cm), Endpoint6{mapped, 9000}, n.net.now()), 0);
    ASSERT_TRUE(n.wait(0, SockId(c4), kEvConnected));
    ASSERT_TRUE(n.wait(0, SockId(c6), kEvConnected));
    ASSERT_TRUE(n.wait(0, SockId(cm), kEvConnected));
    SockInfo im{};
    ASSERT_EQ(a.info(SockId(cm), &im), 0);
    EXPECT_FALSE(im.ipv6);
    EXPECT_EQ(im.remote.ip, b4);
    // Both handshakes completed at b: both children wait in the accept queue.
    std::vector<SockInfo> got;
    ASSERT_TRUE(n.net.run_until([&] {
        for (int64_t c; (c = b.accept(l, 100 + got.size())) >= 0;) {
            SockInfo x{};
            b.info(SockId(c), &x);
            got.push_back(x);
            int64_t tos = -1, tclass = -1;
            EXPECT_EQ(b.get_option(SockId(c), SockOpt::kTos, &tos), 0);
            EXPECT_EQ(b.get_option(SockId(c), SockOpt::kTclass, &tclass), 0);
            EXPECT_EQ(tos, 0x20) << "IP_TOS inherited";
            EXPECT_EQ(tclass, 0x60) << "IPV6_TCLASS inherited";
        }
        return got.size() == 3;
    }, 10 * kSec));
    int n6 = 0;
    for (auto &g : got) n6 += g.ipv6;
    EXPECT_EQ(n6, 1) << "two IPv4 children (one from a v4-mapped connect6), one IPv6";
    std::sort(got.begin(), got.end(), [](const SockInfo &x, const SockInfo &y) { return x.ipv6 < y.ipv6; });
    const SockInfo &g6 = got[2];
    const SockInfo &g4 = got[0].remote.port == im.local.port ? got[1] : got[0];
    EXPECT_FALSE(g4.ipv6) << "the IPv4 client's connection is an IPv4 socket";
    EXPECT_EQ(g4.remote.ip, n.net.config(0).ip);
    EXPECT_EQ(g4.local.ip, n.net.config(1).ip);
    EXPECT_TRUE(g6.ipv6);
    EXPECT_TRUE(same(g6.remote6.ip, addr6(1)));
    EXPECT_TRUE(same(g6.local6.ip, addr6(2)));
    SockInfo i4{}, i6{};
    ASSERT_EQ(a.info(SockId(c4), &i4), 0);
    ASSERT_EQ(a.info(SockId(c6), &i6), 0);
    EXPECT_FALSE(i4.ipv6);
    EXPECT_TRUE(i6.ipv6);
    EXPECT_EQ(g4.remote.port, i4.local.port);
    EXPECT_EQ(g6.remote6.port, i6.local6.port);

    // A v6only listener on another port: IPv4 gets a reset, IPv6 connects;
    // the IPv4 wildcard port is still free for an IPv4 listener.
    listen6(b, Ip6Addr{}, 9001, true);
    const int64_t r4 = a.open(3);
    ASSERT_EQ(a.connect(SockId(r4), n.net.addr(1, 9001), n.net.now()), 0);
    ASSERT_TRUE(n.wait(0, SockId(r4), kEvReset | kEvError));
    const int64_t l4 = b.open(4);
    EXPECT_EQ(b.bind(SockId(l4), Endpoint{0, 9001}), 0);
    EXPECT_EQ(b.listen(SockId(l4), 4), 0);
    // And the dual-stack :: port is not free for an IPv4 listener.
    const int64_t l4b = b.open(5);
    EXPECT_EQ(b.bind(SockId(l4b), Endpoint{0, 9000}), -EADDRINUSE);
}

} // namespace
