// IPv6 listeners as servers write them (issue 31, session 46), between two
// MARS stacks on the simulated wire: a listener bound to one of the stack's
// IPv6 addresses takes IPv6 connections to that address only (another
// address of the same stack and IPv4 get a reset) and names it as its
// children's local address; a [::] listener with IPV6_V6ONLY takes IPv6
// only and leaves the IPv4 port to an IPv4 listener, bound before or after
// it, which gets the IPv4 clients. The port conflicts Linux has: a
// dual-stack [::] against an IPv4 listener, [::] against a specific address.
#include "event_net.h"
#include "sim_wire.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
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

// Host 0 (a) holds 2001:2::1; host 1 (b) 2001:2::2 and 2001:2::3.
SimNetConfig v6_config()
{
    SimNetConfig c = default_simnet_config();
    c.a.stack.addr6[0] = Ip6Prefix{addr6(1), 64};
    c.a.stack.n_addr6 = 1;
    c.b.stack.addr6[0] = Ip6Prefix{addr6(2), 64};
    c.b.stack.addr6[1] = Ip6Prefix{addr6(3), 64};
    c.b.stack.n_addr6 = 2;
    return c;
}

struct Net : EventNet {
    using EventNet::EventNet;
    // The next connection listener l of host 1 accepts (its child's names in
    // *info), or -1 when none comes within the budget.
    int64_t accept_one(SockId l, uint64_t user, SockInfo *info)
    {
        Stack &b = net.stack(1);
        int64_t c = -1;
        net.run_until([&] { return (c = b.accept(l, user)) >= 0; }, 10 * kSec);
        if (c >= 0) b.info(SockId(c), info);
        return c;
    }
};

int bind_listen6(Stack &st, const Ip6Addr &ip, uint16_t port, bool v6only, SockId *out)
{
    const int64_t l = st.open(7);
    EXPECT_GE(l, 0);
    *out = SockId(l);
    const int rc = st.bind6(SockId(l), Endpoint6{ip, port}, v6only);
    return rc != 0 ? rc : st.listen(SockId(l), 16);
}

int bind_listen4(Stack &st, uint32_t ip, uint16_t port, SockId *out)
{
    const int64_t l = st.open(8);
    EXPECT_GE(l, 0);
    *out = SockId(l);
    const int rc = st.bind(SockId(l), Endpoint{ip, port});
    return rc != 0 ? rc : st.listen(SockId(l), 16);
}

// A client of host 0 to (ip6, port): whether it connects (false: reset).
bool connects6(Net &n, uint64_t user, const Ip6Addr &ip, uint16_t port)
{
    Stack &a = n.net.stack(0);
    const int64_t c = a.open(user);
    EXPECT_EQ(a.connect6(SockId(c), Endpoint6{ip, port}, n.net.now()), 0);
    EXPECT_TRUE(n.wait(0, SockId(c), kEvConnected | kEvReset | kEvError));
    return (n.bits(0, SockId(c)) & kEvConnected) != 0;
}

bool connects4(Net &n, uint64_t user, uint16_t port)
{
    Stack &a = n.net.stack(0);
    const int64_t c = a.open(user);
    EXPECT_EQ(a.connect(SockId(c), n.net.addr(1, port), n.net.now()), 0);
    EXPECT_TRUE(n.wait(0, SockId(c), kEvConnected | kEvReset | kEvError));
    return (n.bits(0, SockId(c)) & kEvConnected) != 0;
}

TEST(Listen6, SpecificAddressTakesOnlyItsAddress)
{
    Net n(v6_config());
    Stack &b = n.net.stack(1);
    SockId l;
    ASSERT_EQ(bind_listen6(b, addr6(2), 9100, false, &l), 0);
    EXPECT_FALSE(connects6(n, 1, addr6(3), 9100)) << "another address of the same stack: reset";
    EXPECT_FALSE(connects4(n, 2, 9100)) << "IPv4: reset (a specific IPv6 address takes no IPv4)";
    EXPECT_TRUE(connects6(n, 3, addr6(2), 9100));
    SockInfo child{};
    ASSERT_GE(n.accept_one(l, 100, &child), 0);
    EXPECT_TRUE(child.ipv6);
    EXPECT_TRUE(same(child.local6.ip, addr6(2))) << "the child's local address is the bound one";
    EXPECT_TRUE(same(child.remote6.ip, addr6(1)));
    SockInfo li{};
    ASSERT_EQ(b.info(l, &li), 0);
    EXPECT_TRUE(same(li.local6.ip, addr6(2)));
    EXPECT_EQ(li.local6.port, 9100);

    // The other address and IPv4 are free on this port; [::] is not.
    SockId other, v4, any6;
    EXPECT_EQ(bind_listen6(b, addr6(3), 9100, true, &other), 0);
    EXPECT_EQ(bind_listen4(b, 0, 9100, &v4), 0);
    EXPECT_EQ(bind_listen6(b, Ip6Addr{}, 9100, true, &any6), -EADDRINUSE);
    EXPECT_TRUE(connects6(n, 4, addr6(3), 9100));
    SockInfo c3{};
    ASSERT_GE(n.accept_one(other, 101, &c3), 0);
    EXPECT_TRUE(same(c3.local6.ip, addr6(3)));
    EXPECT_LT(b.accept(l, 102), 0) << "the first listener took no connection to the other address";
}

TEST(Listen6, V6OnlyWildcardBesideAnIPv4Listener)
{
    Net n(v6_config());
    Stack &b = n.net.stack(1);
    // IPv4 first, then [::] IPV6_V6ONLY on the same port.
    SockId l4, l6;
    ASSERT_EQ(bind_listen4(b, 0, 9200, &l4), 0);
    ASSERT_EQ(bind_listen6(b, Ip6Addr{}, 9200, true, &l6), 0);
    EXPECT_TRUE(connects4(n, 1, 9200));
    EXPECT_TRUE(connects6(n, 2, addr6(3), 9200));
    SockInfo c4{}, c6{};
    ASSERT_GE(n.accept_one(l4, 100, &c4), 0);
    EXPECT_FALSE(c4.ipv6) << "the IPv4 client reached the IPv4 listener";
    ASSERT_GE(n.accept_one(l6, 101, &c6), 0);
    EXPECT_TRUE(c6.ipv6);
    EXPECT_TRUE(same(c6.local6.ip, addr6(3)));
    EXPECT_LT(b.accept(l4, 102), 0);
    EXPECT_LT(b.accept(l6, 103), 0);
    // A dual-stack [::] takes IPv4 too: not beside an IPv4 listener (Linux's EADDRINUSE).
    SockId dual;
    EXPECT_EQ(bind_listen6(b, Ip6Addr{}, 9201, false, &dual), 0);
    SockId l4b;
    EXPECT_EQ(bind_listen4(b, n.net.config(1).ip, 9201, &l4b), -EADDRINUSE);
    SockId l6b;
    EXPECT_EQ(bind_listen6(b, Ip6Addr{}, 9200, false, &l6b), -EADDRINUSE);

    // [::] IPV6_V6ONLY first, then IPv4 on the PPE's address: both listen.
    SockId m6, m4;
    ASSERT_EQ(bind_listen6(b, Ip6Addr{}, 9202, true, &m6), 0);
    ASSERT_EQ(bind_listen4(b, n.net.config(1).ip, 9202, &m4), 0);
    EXPECT_TRUE(connects4(n, 3, 9202));
    SockInfo d4{};
    ASSERT_GE(n.accept_one(m4, 104, &d4), 0);
    EXPECT_FALSE(d4.ipv6);
    EXPECT_LT(b.accept(m6, 105), 0) << "the IPv6-only listener took no IPv4 connection";
    // And then 0.0.0.0 on the port of an IPv6-only [::].
    SockId w6, w4;
    ASSERT_EQ(bind_listen6(b, Ip6Addr{}, 9203, true, &w6), 0);
    ASSERT_EQ(bind_listen4(b, 0, 9203, &w4), 0);
    EXPECT_TRUE(connects4(n, 4, 9203));
    SockInfo e4{};
    ASSERT_GE(n.accept_one(w4, 106, &e4), 0);
    EXPECT_LT(b.accept(w6, 107), 0);
}

} // namespace
