// ICMP and ICMPv6 errors about datagrams MARS's UDP sockets sent
// (mars/src/udp/udp_error.cc, issue 31) on the simulated wire: the peer is
// played with crafted frames (RawPeer, TEST FIXTURE; the IPv6 builders of
// ../ip6/ip6_fixture.h), the ICMP messages and the datagram headers they
// quote built here from RFC 792 / RFC 4443. What is checked is Linux's rule
// for a socket without IP_RECVERR (__udp4_lib_err, __udp6_lib_err): a hard
// error on a connected socket becomes its pending error (kEvError,
// UdpInfo::error and ::errors); soft errors and unconnected sockets see
// nothing. Virtual time only.
#include "../ip6/ip6_fixture.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace {

using namespace mars;
using namespace mars::test;
using mars::sim::RawPeer;

void put16(uint8_t *p, uint16_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }
void put32(uint8_t *p, uint32_t v) { put16(p, uint16_t(v >> 16)), put16(p + 2, uint16_t(v)); }

Ip6Addr mapped(uint32_t v4)
{
    Ip6Addr a;
    a.b[10] = a.b[11] = 0xff;
    put32(a.b + 12, v4);
    return a;
}

// What an ICMP error quotes: the datagram's addresses and ports, as we sent it.
struct Quoted {
    uint16_t sport = 5000, dport = 7000;
    uint32_t src4 = 0, dst4 = 0; // 0: the stack, the peer
    uint8_t proto = 17;
};

class UdpError : public ::testing::Test {
  protected:
    void make(bool share = false)
    {
        RawPeer::Options o;
        o.stack.pass_unclaimed = share;
        o.stack.addr6[0] = Ip6Prefix{kOurIp, 64};
        o.stack.n_addr6 = 1;
        o.keep_raw = true;
        peer_ = std::make_unique<RawPeer>(o);
        p().stack().announce(p().now);
        p().advance(kSec);
        p().poll();
        p().take_raw();
        p().take();
        p().take_events();
        p().port().unclaimed_frames.clear();
    }
    RawPeer &p() { return *peer_; }
    UdpSockets &u() { return peer_->stack().udp(); }

    SockId open_bound(uint16_t port)
    {
        const int64_t id = u().open(1);
        EXPECT_GE(id, 0);
        EXPECT_EQ(u().bind(SockId(id), Endpoint{0, port}), 0);
        return SockId(id);
    }
    SockId open_bound6(uint16_t port, bool v6only = false)
    {
        const int64_t id = u().open(1);
        EXPECT_GE(id, 0);
        EXPECT_EQ(u().bind6(SockId(id), Endpoint6{Ip6Addr{}, port}, v6only), 0);
        return SockId(id);
    }
    UdpInfo info(SockId s)
    {
        UdpInfo i{};
        EXPECT_EQ(u().info(s, &i), 0);
        return i;
    }

    // An ICMP message (type, code) from the peer quoting q's IPv4 header and
    // its first 8 bytes (RFC 792: enough for the ports).
    void icmp4(uint8_t type, uint8_t code, const Quoted &q = {})
    {
        std::vector<uint8_t> quoted(28, 0);
        quoted[0] = 0x45;
        put16(&quoted[2], 28 + 16);
        quoted[6] = 0x40, quoted[8] = 64, quoted[9] = q.proto;
        put32(&quoted[12], q.src4 ? q.src4 : p().stack_ip);
        put32(&quoted[16], q.dst4 ? q.dst4 : p().peer_ip);
        put16(&quoted[20], q.sport), put16(&quoted[22], q.dport), put16(&quoted[24], 8 + 16);
        const size_t ilen = 8 + quoted.size();
        std::vector<uint8_t> v(14 + 20 + ilen, 0);
        std::memcpy(v.data(), p().stack_mac.b, 6);
        std::memcpy(v.data() + 6, p().peer_mac.b, 6);
        v[12] = 0x08;
        uint8_t *ip = v.data() + 14;
        ip[0] = 0x45;
        put16(ip + 2, uint16_t(20 + ilen));
        ip[8] = 64, ip[9] = 1;
        put32(ip + 12, p().peer_ip), put32(ip + 16, p().stack_ip);
        sim::fix_ip_checksum(v.data(), v.size());
        uint8_t *ic = ip + 20;
        ic[0] = type, ic[1] = code;
        std::memcpy(ic + 8, quoted.data(), quoted.size());
        const uint16_t c = csum_finish(csum_add(0, ic, ilen)); // RFC 1071, in memory order
        std::memcpy(ic + 2, &c, 2);
        p().inject(v);
    }
    // An ICMPv6 error (type, code) from the peer quoting our IPv6 datagram
    // from port sport to the peer's dport (RFC 4443 2.4: as much as fits).
    void icmp6_error(uint8_t type, uint8_t code, uint16_t sport = 5000, uint16_t dport = 7000, uint32_t data = 0)
    {
        std::vector<uint8_t> udp(8 + 16, 0);
        put16(&udp[0], sport), put16(&udp[2], dport), put16(&udp[4], uint16_t(udp.size()));
        const std::vector<uint8_t> quoted = packet6(kOurIp, kPeerIp, 17, udp);
        const std::vector<uint8_t> pk =
            packet6(kPeerIp, kOurIp, wire::kProtoIcmp6, icmp6(kPeerIp, kOurIp, type, code, data, quoted));
        std::vector<uint8_t> f(14 + pk.size());
        std::memcpy(f.data(), p().stack_mac.b, 6);
        std::memcpy(f.data() + 6, p().peer_mac.b, 6);
        f[12] = 0x86, f[13] = 0xdd;
        std::memcpy(f.data() + 14, pk.data(), pk.size());
        p().inject(f);
    }

    std::unique_ptr<RawPeer> peer_;
};

TEST_F(UdpError, PortUnreachableIsAConnectedSocketsPendingError)
{
    make();
    SockId s = open_bound(5000);
    ASSERT_EQ(u().connect(s, Endpoint{p().peer_ip, 7000}), 0);
    p().take_events();
    icmp4(3, 3); // port unreachable
    EXPECT_TRUE(p().events_of(s) & kEvError);
    UdpInfo i = info(s);
    EXPECT_EQ(i.error, ECONNREFUSED);
    EXPECT_EQ(i.errors, 1u);
    // Each error counts (the reader reports each new count once), and the
    // socket stays usable: connected, bound, its datagrams still arrive.
    icmp4(3, 3);
    EXPECT_EQ(info(s).errors, 2u);
    EXPECT_EQ(info(s).remote.port, 7000);
    // Hard ones by Linux's table: protocol unreachable, fragmentation needed
    // (IP_PMTUDISC_WANT), administratively prohibited; a parameter problem.
    icmp4(3, 2);
    EXPECT_EQ(info(s).error, ENOPROTOOPT);
    icmp4(3, 4);
    EXPECT_EQ(info(s).error, EMSGSIZE);
    icmp4(3, 13);
    EXPECT_EQ(info(s).error, EHOSTUNREACH);
    icmp4(12, 0);
    EXPECT_EQ(info(s).error, EPROTO);
    EXPECT_EQ(info(s).errors, 6u);
}

TEST_F(UdpError, SoftErrorsAndUnconnectedSocketsSeeNothing)
{
    make();
    SockId conn = open_bound(5000);
    ASSERT_EQ(u().connect(conn, Endpoint{p().peer_ip, 7000}), 0);
    SockId loose = open_bound(5001);
    p().take_events();
    icmp4(3, 0);  // net unreachable: soft
    icmp4(3, 1);  // host unreachable: soft
    icmp4(11, 0); // time exceeded: soft
    icmp4(3, 3, Quoted{.sport = 5001}); // port unreachable, but the socket is not connected
    EXPECT_EQ(info(conn).errors, 0u);
    EXPECT_EQ(info(loose).errors, 0u);
    EXPECT_FALSE(p().events_of(conn) & kEvError);
    EXPECT_FALSE(p().events_of(loose) & kEvError);
}

TEST_F(UdpError, OnlyTheSocketThatSentIt)
{
    make();
    SockId s = open_bound(5000);
    ASSERT_EQ(u().connect(s, Endpoint{p().peer_ip, 7000}), 0);
    icmp4(3, 3, Quoted{.dport = 7001});                   // to another port of the peer
    icmp4(3, 3, Quoted{.sport = 5002});                   // from a port nobody holds
    icmp4(3, 3, Quoted{.dst4 = p().peer_ip + 1});         // to another host
    icmp4(3, 3, Quoted{.src4 = p().stack_ip + 1});        // not from our address
    icmp4(3, 3, Quoted{.proto = 6});                      // a TCP segment
    EXPECT_EQ(info(s).errors, 0u);
    icmp4(3, 3);
    EXPECT_EQ(info(s).errors, 1u);
}

TEST_F(UdpError, SharedAddressStillHandsTheErrorOn)
{
    make(true);
    SockId s = open_bound(5000);
    ASSERT_EQ(u().connect(s, Endpoint{p().peer_ip, 7000}), 0);
    icmp4(3, 3);
    EXPECT_EQ(info(s).error, ECONNREFUSED);
    ASSERT_EQ(p().port().unclaimed_frames.size(), 1u); // the kernel may have a socket it is about
    EXPECT_EQ(p().port().unclaimed_frames[0].why, Unclaimed::kIcmp);
}

TEST_F(UdpError, Icmp6ByLinuxsTable)
{
    make();
    SockId s = open_bound6(5000, true);
    ASSERT_EQ(u().connect6(s, Endpoint6{kPeerIp, 7000}), 0);
    p().take_events();
    icmp6_error(wire::kIcmp6Unreach, 4); // port unreachable
    EXPECT_TRUE(p().events_of(s) & kEvError);
    EXPECT_EQ(info(s).error, ECONNREFUSED);
    icmp6_error(wire::kIcmp6Unreach, 1); // administratively prohibited: hard
    EXPECT_EQ(info(s).error, EACCES);
    icmp6_error(wire::kIcmp6PacketTooBig, 0, 5000, 7000, 1280); // IPV6_PMTUDISC_WANT: hard
    EXPECT_EQ(info(s).error, EMSGSIZE);
    icmp6_error(wire::kIcmp6ParamProblem, 0);
    EXPECT_EQ(info(s).error, EPROTO);
    EXPECT_EQ(info(s).errors, 4u);
    icmp6_error(wire::kIcmp6Unreach, 3);      // address unreachable: soft
    icmp6_error(wire::kIcmp6Unreach, 0);      // no route: soft
    icmp6_error(wire::kIcmp6TimeExceeded, 0); // soft
    icmp6_error(wire::kIcmp6Unreach, 4, 5000, 7001); // another peer port
    EXPECT_EQ(info(s).errors, 4u);
}

TEST_F(UdpError, DualStackSocketConnectedToAnIpv4Peer)
{
    make();
    SockId s = open_bound6(5000);
    ASSERT_EQ(u().connect6(s, Endpoint6{mapped(p().peer_ip), 7000}), 0);
    icmp4(3, 3);
    EXPECT_EQ(info(s).error, ECONNREFUSED);
    EXPECT_EQ(info(s).errors, 1u);
}

} // namespace
