// TCP over IPv6 through the DTI engine (issue 31, ABI 11): two DTI engines,
// each over ppe::MarsTransport on one host of the MARS simulator, each with
// an application region played by hand (region_app.h). A native IPv6 server
// (BIND6 with V6ONLY, LISTEN, ACCEPT) on host 0 and a native IPv6 client
// (CONNECT6) on host 1: the handshake, the names both sides publish
// (dti_sock_shared.name6/local6/remote6), bytes both ways byte-exact across
// ring wraps, and the close. Then a dual-stack listener (BIND6 to ::) whose
// IPv4 connection is an IPv4 socket and whose IPv6 one is an IPv6 socket,
// and the commands the engine refuses (a multicast or unspecified
// destination, unknown flags, BIND6 on a datagram socket, an off-link
// destination). No root, no DPDK, virtual time.
#include "sim_wire.h"
#include "transport.h"

#include "dti_abi.h"
#include "region_app.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

namespace de = dti::engine;
using mars::sim::SimNet;
using region_test::App;

constexpr uint64_t kSec = 1'000'000'000;
constexpr uint32_t kRing = 16384;

// 2001:2::host (RFC 5180's benchmarking prefix, as the lab's).
mars::Ip6Addr addr6(uint8_t host)
{
    mars::Ip6Addr a{};
    a.b[0] = 0x20, a.b[1] = 0x01, a.b[2] = 0x00, a.b[3] = 0x02;
    a.b[15] = host;
    return a;
}

dti_cmd cmd(uint16_t op, uint32_t sock, uint32_t a0 = 0, uint32_t a1 = 0)
{
    dti_cmd c{};
    c.op = op;
    c.sock = sock;
    c.arg0 = a0;
    c.arg1 = a1;
    return c;
}

dti_cmd cmd6(uint16_t op, uint32_t sock, const mars::Ip6Addr &ip, uint16_t port, uint32_t flags = 0)
{
    dti_cmd c = cmd(op, sock, flags, port);
    dti_cmd_addr6_set(&c, ip.b);
    return c;
}

bool same(const uint8_t *a, const mars::Ip6Addr &b) { return std::memcmp(a, b.b, 16) == 0; }

// One host's engine and application.
struct Side {
    explicit Side(const de::Limits &l) : app(l) {}
    ppe::DtiBuffers rings;
    mars::Stack *stack = nullptr;
    std::unique_ptr<ppe::MarsTransport> tr;
    App app;
    std::unique_ptr<de::Server> engine;
};

class Ip6OverMars : public ::testing::Test {
  protected:
    Ip6OverMars() : a_(limits()), b_(limits()), net_(config(&a_.rings, &b_.rings))
    {
        Side *sides[2] = {&a_, &b_};
        for (int h = 0; h < 2; h++) {
            Side &s = *sides[h];
            s.stack = &net_.stack(h);
            s.tr = std::make_unique<ppe::MarsTransport>(s.stack, now_);
            std::string why;
            s.engine = de::Server::create(*s.tr, limits(), &why);
            EXPECT_TRUE(s.engine) << why;
            s.rings.engine = s.engine.get();
            EXPECT_GE(s.engine->attach_memory(s.app.base(), s.app.hdr->region_size, 1), 0);
            net_.own_events[h] = true;
        }
        net_.on_tick = [this] {
            now_ = net_.now();
            for (Side *s : {&a_, &b_}) {
                s->engine->poll();
                s->stack->poll(now_);
            }
            if (tick)
                tick();
        };
        net_.run_for(2 * kSec); // DAD: the addresses become preferred
    }
    ~Ip6OverMars() override
    {
        for (Side *s : {&a_, &b_}) {
            s->rings.engine = nullptr;
            s->engine.reset();
        }
    }
    static de::Limits limits()
    {
        de::Limits l;
        l.max_contexts = 1;
        l.max_sockets = 8;
        l.cmdq_entries = 64;
        l.evq_entries = 128;
        l.rx_ring_size = l.tx_ring_size = kRing;
        l.pool_size = 4096;
        return l;
    }
    static mars::sim::SimNetConfig config(ppe::DtiBuffers *ra, ppe::DtiBuffers *rb)
    {
        auto c = mars::sim::default_simnet_config();
        c.a.stack.tcp.rcvbuf = c.a.stack.tcp.sndbuf = kRing;
        c.b.stack.tcp.rcvbuf = c.b.stack.tcp.sndbuf = kRing;
        c.a.stack.addr6[0] = mars::Ip6Prefix{addr6(1), 64};
        c.a.stack.n_addr6 = 1;
        c.b.stack.addr6[0] = mars::Ip6Prefix{addr6(2), 64};
        c.b.stack.n_addr6 = 1;
        c.a.rings = ra;
        c.b.rings = rb;
        return c;
    }
    // Pushes c on side s and waits for its completion.
    dti_ev run(Side &s, dti_cmd c)
    {
        const uint32_t tag = s.app.push(c);
        dti_ev got{};
        bool done = false;
        EXPECT_TRUE(net_.run_until(
            [&] {
                for (auto &e : s.app.take())
                    if (e.kind == DTI_CQE_COMPLETION && e.events == tag) {
                        got = e;
                        done = true;
                    }
                return done;
            },
            10 * kSec))
            << "op " << c.op << " not answered";
        return got;
    }
    uint32_t socket(Side &s, uint32_t kind = DTI_SOCK_STREAM)
    {
        const dti_ev e = run(s, cmd(DTI_OP_SOCKET, DTI_SOCK_INVALID, kind));
        EXPECT_GE(e.res, 0);
        return uint32_t(e.res);
    }
    uint32_t listener6(const mars::Ip6Addr &ip, uint16_t port, uint32_t flags)
    {
        const uint32_t l = socket(a_);
        EXPECT_EQ(run(a_, cmd6(DTI_OP_BIND6, l, ip, port, flags)).res, 0);
        EXPECT_EQ(run(a_, cmd(DTI_OP_LISTEN, l, 8)).res, 0);
        return l;
    }
    uint32_t accept(uint32_t l)
    {
        const dti_ev e = run(a_, cmd(DTI_OP_ACCEPT, l, 1, DTI_ACCEPT_WAIT));
        EXPECT_EQ(e.res, 1);
        return e.accepted[0];
    }
    // Sockets a stack holds that are neither closed nor in TIME-WAIT.
    static uint32_t open_conns(mars::Stack &st)
    {
        uint32_t n = 0;
        st.for_each_socket(
            [](mars::SockId, const mars::SockInfo &in, uint64_t, void *arg) {
                if (in.state != mars::TcpState::kClosed && in.state != mars::TcpState::kTimeWait)
                    ++*static_cast<uint32_t *>(arg);
            },
            &n);
        return n;
    }
    static uint32_t name6(Side &s, uint32_t h) { return __atomic_load_n(&s.app.sock(h)->name6, __ATOMIC_ACQUIRE); }

    // Moves `data` from socket `from` (side fs) to socket `to` (side ts)
    // through both send and receive rings: what `to` reads.
    std::vector<uint8_t> stream(Side &fs, uint32_t from, Side &ts, uint32_t to, const std::vector<uint8_t> &data)
    {
        std::vector<uint8_t> got;
        uint32_t &put = tx_put_[&fs == &a_ ? 0 : 1], &head = rx_head_[&ts == &a_ ? 0 : 1];
        const uint32_t put0 = put;
        tick = [&] {
            const size_t done = put - put0;
            const uint32_t released = __atomic_load_n(&fs.app.sock(from)->tx_head, __ATOMIC_ACQUIRE);
            const uint32_t room = kRing - (put - released);
            const uint32_t n = uint32_t(std::min<size_t>(room, data.size() - done));
            if (n) {
                const uint32_t base = fs.app.sock(from)->tx_base;
                for (uint32_t i = 0; i < n; i++)
                    fs.app.tx_ring(from)[(base + put + i) & (kRing - 1)] = data[done + i];
                fs.app.push(cmd(DTI_OP_SEND, from, n));
                put += n;
            }
            dti_sock_shared *sh = ts.app.sock(to);
            const uint32_t tail = __atomic_load_n(&sh->rx_tail, __ATOMIC_ACQUIRE);
            const uint32_t k = tail - head;
            for (uint32_t i = 0; i < k; i++)
                got.push_back(ts.app.rx_ring(to)[(sh->rx_base + head + i) & (kRing - 1)]);
            if (k) {
                ts.app.push(cmd(DTI_OP_RECV_RELEASE, to, k));
                head += k;
            }
        };
        EXPECT_TRUE(net_.run_until([&] { return got.size() >= data.size(); }, 60 * kSec))
            << "read " << got.size() << " of " << data.size();
        tick = nullptr;
        return got;
    }

    Side a_, b_;
    SimNet net_;
    uint64_t now_ = 0;
    std::function<void()> tick;
    uint32_t rx_head_[2] = {0, 0}, tx_put_[2] = {0, 0}; // per side: one connection's stream positions
};

TEST_F(Ip6OverMars, NativeClientAndServerHandshakeBytesBothWaysAndClose)
{
    const uint32_t l = listener6(addr6(1), 5000, DTI_BIND6_V6ONLY);
    EXPECT_EQ(name6(a_, l), DTI_NAME6_IPV6 | DTI_NAME6_V6ONLY) << "the listener's names";
    EXPECT_TRUE(same(a_.app.sock(l)->local6, addr6(1)));
    EXPECT_EQ(a_.app.sock(l)->local_port, 5000);

    const uint32_t c = socket(b_);
    ASSERT_EQ(run(b_, cmd6(DTI_OP_CONNECT6, c, addr6(1), 5000)).res, 0) << "the connection did not come up";
    dti_sock_shared *cs = b_.app.sock(c);
    ASSERT_TRUE(cs->state & DTI_STATE_CONNECTED) << std::hex << cs->state;
    ASSERT_EQ(name6(b_, c), DTI_NAME6_IPV6);
    EXPECT_TRUE(same(cs->local6, addr6(2)));
    EXPECT_TRUE(same(cs->remote6, addr6(1)));
    EXPECT_EQ(cs->remote_port, 5000);
    EXPECT_NE(cs->local_port, 0);
    EXPECT_EQ(cs->local_ip, 0u);
    EXPECT_EQ(cs->remote_ip, 0u);

    const uint32_t s = accept(l);
    dti_sock_shared *ss = a_.app.sock(s);
    ASSERT_EQ(name6(a_, s), DTI_NAME6_IPV6) << "the accepted socket's peer is not published as IPv6";
    EXPECT_TRUE(same(ss->local6, addr6(1)));
    EXPECT_TRUE(same(ss->remote6, addr6(2)));
    EXPECT_EQ(ss->local_port, 5000);
    EXPECT_EQ(ss->remote_port, cs->local_port);

    // Several rings' worth each way (wrapping both rings several times).
    std::vector<uint8_t> up(5 * kRing + 123), down(3 * kRing + 45);
    mars::sim::pattern_fill(7, 0, up.data(), up.size());
    mars::sim::pattern_fill(9, 0, down.data(), down.size());
    EXPECT_TRUE(stream(b_, c, a_, s, up) == up) << "client to server differs";
    EXPECT_TRUE(stream(a_, s, b_, c, down) == down) << "server to client differs";

    // The client closes; the server reads the end, closes; both go.
    EXPECT_EQ(run(b_, cmd(DTI_OP_CLOSE, c)).res, 0);
    ASSERT_TRUE(net_.run_until([&] { return (ss->state & DTI_STATE_RD_CLOSED) != 0; }, 10 * kSec))
        << "the server did not see the FIN";
    EXPECT_EQ(run(a_, cmd(DTI_OP_CLOSE, s)).res, 0);
    // Both ends finish the close: host 0 keeps only its listener, host 1
    // at most a TIME-WAIT (the active closer's).
    EXPECT_TRUE(net_.run_until([&] { return open_conns(*a_.stack) == 1 && open_conns(*b_.stack) == 0; }, 30 * kSec))
        << "host 0: " << open_conns(*a_.stack) << " sockets, host 1: " << open_conns(*b_.stack);
    EXPECT_EQ(a_.engine->stats().rejected_commands, 0u);
    EXPECT_EQ(b_.engine->stats().rejected_commands, 0u);
}

// A listener bound to :: without V6ONLY is one listener for both families:
// its IPv4 connection is an IPv4 socket (name6 0: local_ip/remote_ip, as
// Linux shows it v4-mapped), its IPv6 one an IPv6 socket.
TEST_F(Ip6OverMars, DualStackListenerAcceptsBothFamilies)
{
    const uint32_t l = listener6(mars::Ip6Addr{}, 5001, 0);
    EXPECT_EQ(name6(a_, l), DTI_NAME6_IPV6);
    EXPECT_EQ(a_.app.sock(l)->local_port, 5001);

    const uint32_t c4 = socket(b_);
    ASSERT_EQ(run(b_, cmd(DTI_OP_CONNECT, c4, net_.addr(0, 5001).ip, 5001)).res, 0);
    EXPECT_EQ(name6(b_, c4), 0u);
    const uint32_t s4 = accept(l);
    EXPECT_EQ(name6(a_, s4), 0u) << "an IPv4 connection of a dual-stack listener is an IPv4 socket";
    EXPECT_EQ(a_.app.sock(s4)->remote_ip, net_.addr(1, 0).ip);
    EXPECT_EQ(a_.app.sock(s4)->local_ip, net_.addr(0, 0).ip);
    EXPECT_EQ(a_.app.sock(s4)->remote_port, b_.app.sock(c4)->local_port);

    const uint32_t c6 = socket(b_);
    ASSERT_EQ(run(b_, cmd6(DTI_OP_CONNECT6, c6, addr6(1), 5001)).res, 0);
    const uint32_t s6 = accept(l);
    ASSERT_EQ(name6(a_, s6), DTI_NAME6_IPV6);
    EXPECT_TRUE(same(a_.app.sock(s6)->remote6, addr6(2)));
    EXPECT_TRUE(same(a_.app.sock(s6)->local6, addr6(1)));
    EXPECT_EQ(a_.app.sock(s6)->remote_port, b_.app.sock(c6)->local_port);

    // Bytes over the IPv4 one (the accepted sockets' slots are told apart).
    std::vector<uint8_t> v(2 * kRing + 7);
    mars::sim::pattern_fill(3, 0, v.data(), v.size());
    EXPECT_TRUE(stream(b_, c4, a_, s4, v) == v);
    EXPECT_EQ(a_.engine->stats().rejected_commands, 0u);
}

// What the decoder refuses is answered -EINVAL and counted (so is a stream
// socket's bind to a group, the engine's refusal); what the stack
// refuses is the stack's answer; a datagram socket takes no IPv6 command.
// The engine stays sound: a good connect after them comes up.
TEST_F(Ip6OverMars, RefusedIpv6Commands)
{
    const uint32_t c = socket(b_);
    mars::Ip6Addr mcast{};
    mcast.b[0] = 0xff, mcast.b[1] = 0x02, mcast.b[15] = 1;
    EXPECT_EQ(run(b_, cmd6(DTI_OP_CONNECT6, c, mcast, 80)).res, -EINVAL);
    EXPECT_EQ(run(b_, cmd6(DTI_OP_CONNECT6, c, mars::Ip6Addr{}, 80)).res, -EINVAL);
    EXPECT_EQ(run(b_, cmd6(DTI_OP_CONNECT6, c, addr6(1), 80, DTI_BIND6_V6ONLY)).res, -EINVAL);
    EXPECT_EQ(run(b_, cmd6(DTI_OP_BIND6, c, addr6(2), 80, 4)).res, -EINVAL);
    EXPECT_EQ(run(b_, cmd6(DTI_OP_BIND6, c, mcast, 80)).res, -EINVAL);
    EXPECT_EQ(b_.engine->stats().rejected_commands, 5u);
    EXPECT_EQ(b_.app.sock(c)->state & DTI_STATE_FAILED, 0u) << "a refused command changed the socket";

    // Not one of host 1's addresses: the stack's answer.
    EXPECT_EQ(run(b_, cmd6(DTI_OP_BIND6, c, addr6(1), 80)).res, -EADDRNOTAVAIL);
    // Off-link (no route over IPv6 but the prefixes): refused at once, the
    // socket failed as a connect Linux refuses.
    mars::Ip6Addr far{};
    far.b[0] = 0x20, far.b[1] = 0x01, far.b[2] = 0x0d, far.b[3] = 0xb8, far.b[15] = 1;
    EXPECT_EQ(run(b_, cmd6(DTI_OP_CONNECT6, c, far, 80)).res, -ENETUNREACH);
    EXPECT_TRUE(b_.app.sock(c)->state & DTI_STATE_FAILED);

    // A datagram socket takes both (ABI 12: UDP over IPv6; CONNECT6 answers at once).
    const uint32_t d = socket(b_, DTI_SOCK_DGRAM);
    EXPECT_EQ(run(b_, cmd6(DTI_OP_BIND6, d, addr6(2), 53)).res, 0);
    EXPECT_EQ(run(b_, cmd6(DTI_OP_CONNECT6, d, addr6(1), 53)).res, 0);
    EXPECT_EQ(name6(b_, d), DTI_NAME6_IPV6);

    const uint32_t l = listener6(addr6(1), 5002, 0);
    const uint32_t ok = socket(b_);
    EXPECT_EQ(run(b_, cmd6(DTI_OP_CONNECT6, ok, addr6(1), 5002)).res, 0);
    EXPECT_EQ(name6(a_, accept(l)), DTI_NAME6_IPV6);
}

} // namespace
