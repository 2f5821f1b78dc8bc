// IPv6 multicast receive in MARS's UDP component (mars/src/udp/mld.cc,
// udp6.cc) and the MLDv2 host side (RFC 3810) on the simulated wire: the
// peer (a host and a router on the link) is played with crafted frames
// (RawPeer, TEST FIXTURE; the IPv6 builders of ../ip6/ip6_fixture.h),
// checksums computed here with this file's own RFC 1071 sum; what the stack
// sends is parsed from its raw bytes. Covered: delivery to every socket of
// the port bound to :: or to the group that its memberships or
// kMulticastAll let in, source filters, groups nobody joined (not ours, no
// ICMPv6), bind6 to a group, the reports of joins and leaves, queries
// answered or dropped. Virtual time only.
#include "../ip6/ip6_fixture.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <tuple>

namespace {

using namespace mars;
using namespace mars::test;
using mars::sim::RawPeer;

void put16(uint8_t *p, uint16_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }
uint16_t get16(const uint8_t *p) { return uint16_t(p[0] << 8 | p[1]); }

// RFC 1071 over the RFC 8200 8.1 pseudo-header (src, dst, length, next)
// and the bytes: ~sum; 0 over a message with a valid checksum in place.
uint16_t ref_sum(const Ip6Addr &src, const Ip6Addr &dst, uint8_t next, const uint8_t *m, size_t len)
{
    std::vector<uint8_t> b(src.b, src.b + 16);
    b.insert(b.end(), dst.b, dst.b + 16);
    b.insert(b.end(), {uint8_t(len >> 24), uint8_t(len >> 16), uint8_t(len >> 8), uint8_t(len), 0, 0, 0, next});
    b.insert(b.end(), m, m + len);
    if (b.size() & 1) b.push_back(0);
    uint32_t sum = 0;
    for (size_t i = 0; i < b.size(); i += 2) sum += uint32_t(b[i]) << 8 | b[i + 1];
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(~sum);
}

Ip6Addr group(uint8_t scope, uint16_t id)
{
    Ip6Addr a;
    a.b[0] = 0xff, a.b[1] = scope;
    a.b[14] = uint8_t(id >> 8), a.b[15] = uint8_t(id);
    return a;
}
const Ip6Addr kGroup = group(0x0e, 0x123);  // ff0e::123 (global scope)
const Ip6Addr kGroup2 = group(0x0e, 0x124); // ff0e::124
const Ip6Addr kMldRouters = group(0x02, 0x16);
const Ip6Addr kSource2 = addr(3); // a second sender on the link
bool same(const Ip6Addr &a, const Ip6Addr &b) { return std::memcmp(a.b, b.b, 16) == 0; }

// One record of an MLDv2 report: type, group, sources.
using Rec = std::tuple<uint8_t, std::string, int>;
std::string hex(const Ip6Addr &a) { return std::string(reinterpret_cast<const char *>(a.b), 16); }

class Mcast6 : public ::testing::Test {
  protected:
    // A stack with 2001:2::1/64, its addresses usable (DAD done) unless
    // !dad, that knows the peer's MAC.
    void make(bool dad = true)
    {
        RawPeer::Options o;
        o.stack.addr6[0] = Ip6Prefix{kOurIp, 64};
        o.stack.n_addr6 = 1;
        o.keep_raw = true;
        peer_ = std::make_unique<RawPeer>(o);
        p().stack().announce(p().now);
        if (dad) {
            p().advance(kSec);
            const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
            p().inject(eth(ip6::multicast_mac(sn.b), ns(kPeerIp, sn, kOurIp)));
        }
        p().poll();
        p().take_raw();
        p().take();
    }
    RawPeer &p() { return *peer_; }
    UdpSockets &u() { return peer_->stack().udp(); }
    const StackStats &stats() { return peer_->stack().stats(); }

    std::vector<uint8_t> eth(const MacAddr &dst, const std::vector<uint8_t> &packet)
    {
        std::vector<uint8_t> f(14 + packet.size());
        std::memcpy(f.data(), dst.b, 6);
        std::memcpy(f.data() + 6, p().peer_mac.b, 6);
        f[12] = 0x86, f[13] = 0xdd;
        std::memcpy(f.data() + 14, packet.data(), packet.size());
        return f;
    }
    // A datagram from src to dst (a group: its 33:33 MAC).
    void in6(const Ip6Addr &src, const Ip6Addr &dst, uint16_t dport, const std::string &data)
    {
        std::vector<uint8_t> u(8 + data.size());
        put16(&u[0], 40000), put16(&u[2], dport), put16(&u[4], uint16_t(u.size()));
        std::memcpy(&u[8], data.data(), data.size());
        const uint16_t c = ref_sum(src, dst, 17, u.data(), u.size());
        put16(&u[6], c ? c : 0xffff);
        const MacAddr m = ip6::is_multicast(dst.b) ? ip6::multicast_mac(dst.b) : p().stack_mac;
        p().inject(eth(m, packet6(src, dst, 17, u)));
    }
    // An MLD query from the router's link-local address: group (:: general)
    // and sources (v2), or a 24-byte MLDv1 one; with the hop-by-hop
    // Router Alert unless !ra; the checksum broken when bad.
    void query(const Ip6Addr &dst, const Ip6Addr &grp, bool v2 = true, bool ra = true, bool bad = false,
               uint8_t hop = 1, int truncate = 0, uint16_t n_src_field = 0)
    {
        std::vector<uint8_t> body(grp.b, grp.b + 16);
        if (v2) body.insert(body.end(), {2, 125, uint8_t(n_src_field >> 8), uint8_t(n_src_field)});
        auto m = icmp6(router_, dst, 130, 0, 1000u << 16, body);
        if (truncate) m.resize(m.size() - size_t(truncate)); // (checksum fixed below)
        if (truncate) {
            m[2] = m[3] = 0;
            const uint16_t c = ref_sum(router_, dst, 58, m.data(), m.size());
            put16(&m[2], c);
        }
        if (bad) m[2] ^= 0x11;
        std::vector<uint8_t> payload;
        if (ra) payload = {58, 0, 5, 2, 0, 0, 1, 0};
        payload.insert(payload.end(), m.begin(), m.end());
        p().inject(eth(ip6::multicast_mac(dst.b), packet6(router_, dst, ra ? 0 : 58, payload, hop)));
    }
    std::string recv(SockId s, UdpRecord *rec = nullptr)
    {
        std::string buf(2048, '\0');
        int64_t n = u().recv_from(s, buf.data(), buf.size(), rec, false);
        if (n < 0) return "<" + std::to_string(n) + ">";
        buf.resize(size_t(n));
        return buf;
    }
    bool empty(SockId s) { return u().recv_from(s, nullptr, 0, nullptr, false) == -EAGAIN; }
    // A socket bound to ip:port, sharing the port (kReuseAddr).
    SockId open6(uint16_t port, const Ip6Addr &ip = Ip6Addr{})
    {
        int64_t id = u().open(1);
        EXPECT_GE(id, 0);
        EXPECT_EQ(u().set_option(SockId(id), SockOpt::kReuseAddr, 1), 0);
        EXPECT_EQ(u().bind6(SockId(id), Endpoint6{ip, port}, false), 0);
        return SockId(id);
    }
    // The MLD reports sent since the last call, each checked as RFC 3810 5
    // wants it framed, as its records; other ICMPv6 counted in icmp6_out.
    // unspecified: from :: (the link-local address still tentative).
    std::vector<std::vector<Rec>> reports(bool unspecified = false)
    {
        const Ip6Addr want_src = unspecified ? Ip6Addr{} : ip6::link_local(p().stack_mac);
        std::vector<std::vector<Rec>> r;
        p().poll();
        icmp6_out = 0;
        for (auto &f : p().take_raw()) {
            if (f.size() < 54 || f[12] != 0x86 || f[13] != 0xdd) continue;
            if (f[20] == 58) icmp6_out++;
            if (f[20] != 0) continue;
            // 33:33:00:00:00:16, hop limit 1, from the link-local address to ff02::16.
            EXPECT_EQ(std::memcmp(f.data(), "\x33\x33\x00\x00\x00\x16", 6), 0);
            EXPECT_EQ(f[21], 1);
            EXPECT_TRUE(same(ip6::from(f.data() + 22), want_src));
            EXPECT_TRUE(same(ip6::from(f.data() + 38), kMldRouters));
            // Hop-by-hop: ICMPv6 next, Router Alert (MLD), PadN.
            const uint8_t hbh[8] = {58, 0, 5, 2, 0, 0, 1, 0};
            EXPECT_EQ(std::memcmp(f.data() + 54, hbh, 8), 0);
            const size_t len = get16(f.data() + 18) - 8u;
            EXPECT_EQ(f.size(), 62 + len);
            const uint8_t *m = f.data() + 62;
            EXPECT_EQ(m[0], 143);
            EXPECT_EQ(ref_sum(want_src, kMldRouters, 58, m, len), 0);
            std::vector<Rec> recs;
            size_t off = 8;
            for (int i = 0; i < get16(m + 6) && off + 20 <= len; i++) {
                const int n = get16(m + off + 2);
                recs.emplace_back(m[off], std::string(reinterpret_cast<const char *>(m + off + 4), 16), n);
                off += 20 + 16u * unsigned(n);
            }
            EXPECT_EQ(off, len);
            r.push_back(recs);
        }
        p().take();
        return r;
    }
    std::unique_ptr<RawPeer> peer_;
    Ip6Addr router_ = [] {
        Ip6Addr a;
        a.b[0] = 0xfe, a.b[1] = 0x80, a.b[15] = 0x99;
        return a;
    }();
    int icmp6_out = 0;
};

TEST_F(Mcast6, JoinedGroupGoesToEverySocketOfThePortItsRulesLetIn)
{
    make();
    const uint16_t kP = 7000;
    SockId a = open6(kP), b = open6(kP), at_group = open6(kP, kGroup);
    SockId other_group = open6(kP, kGroup2), all = open6(kP), none = open6(kP), ssm = open6(kP);
    ASSERT_EQ(u().set_option(none, SockOpt::kMulticastAll, 0), 0);
    EXPECT_EQ(u().set_option(none, SockOpt::kMulticastAll, 2), -EINVAL);
    for (SockId s : {a, b, at_group}) ASSERT_EQ(u().join6(s, UdpGroup6{kGroup, {}}), 0);
    ASSERT_EQ(u().join6(other_group, UdpGroup6{kGroup2, {}}), 0);
    ASSERT_EQ(u().join6(ssm, UdpGroup6{kGroup, kSource2}), 0); // from kSource2 only
    // The errors of join().
    EXPECT_EQ(u().join6(a, UdpGroup6{kGroup, {}}), -EADDRINUSE);
    EXPECT_EQ(u().join6(a, UdpGroup6{kOurIp, {}}), -EINVAL);
    EXPECT_EQ(u().join6(SockId(12345), UdpGroup6{kGroup, {}}), -EBADF);
    EXPECT_EQ(u().leave6(a, UdpGroup6{kGroup2, {}}), -EADDRNOTAVAIL);
    ASSERT_EQ(u().join(a, UdpGroup{0xef010203u, 0}), 0);
    UdpInfo info{};
    ASSERT_EQ(u().info(a, &info), 0);
    EXPECT_EQ(info.groups, 2u); // one of each family
    const uint64_t in0 = stats().udp_in;

    in6(kPeerIp, kGroup, kP, "to the group");
    for (SockId s : {a, b, at_group, all}) {
        UdpRecord r{};
        EXPECT_EQ(recv(s, &r), "to the group") << s;
        EXPECT_TRUE(r.flags & kUdpRecMulticast);
        EXPECT_TRUE(r.flags & kUdpRecIp6);
    }
    EXPECT_TRUE(empty(other_group)); // bound to another group
    EXPECT_TRUE(empty(none));        // no membership, kMulticastAll 0
    EXPECT_TRUE(empty(ssm));         // not its source
    EXPECT_EQ(stats().udp_mcast_in, 1u);
    EXPECT_EQ(stats().udp_in, in0 + 4);

    in6(kSource2, kGroup, kP, "from two");
    for (SockId s : {a, b, at_group, all, ssm}) EXPECT_EQ(recv(s), "from two") << s;
    EXPECT_TRUE(empty(none));
    EXPECT_EQ(stats().udp_mcast_in, 2u);

    // The other group: its socket, and by kMulticastAll every socket bound
    // to :: that holds no membership of it (a source filter of another
    // group does not count); not the one bound to kGroup.
    in6(kPeerIp, kGroup2, kP, "two");
    for (SockId s : {other_group, all, a, b, ssm}) EXPECT_EQ(recv(s), "two") << s;
    EXPECT_TRUE(empty(at_group));
    EXPECT_TRUE(empty(none));
    // kMulticastAll back on: the socket takes what the stack joined.
    ASSERT_EQ(u().set_option(none, SockOpt::kMulticastAll, 1), 0);
    in6(kPeerIp, kGroup, kP, "again");
    EXPECT_EQ(recv(none), "again");

    // Every member leaves (one by close): the group is not ours any more.
    for (SockId s : {b, at_group}) ASSERT_EQ(u().leave6(s, UdpGroup6{kGroup, {}}), 0);
    ASSERT_EQ(u().leave6(ssm, UdpGroup6{kGroup, kSource2}), 0);
    ASSERT_EQ(u().close(a), 0);
    for (SockId s : {b, at_group, all, none, ssm}) recv(s); // "again" read away
    const uint64_t not_ours = stats().drop_not_ours;
    in6(kPeerIp, kGroup, kP, "late");
    EXPECT_EQ(stats().drop_not_ours, not_ours + 1); // its MAC is not taken any more
    for (SockId s : {b, at_group, all, none, ssm}) EXPECT_TRUE(empty(s)) << s;
}

// Sending to a group over IPv6 (IPV6_MULTICAST_HOPS, IPV6_MULTICAST_LOOP),
// as IPv4's (udp_test.cc MulticastSendTtlLoopAndHostOnly): the hop limit
// is kMulticastHops (default 1), the host's members get a looped copy
// unless kMulticastLoop6 is 0, hop limit 0 stays on the host.
TEST_F(Mcast6, SendHopsLoopAndHostOnly)
{
    make();
    const uint16_t kP = 7100;
    SockId member = open6(kP);
    ASSERT_EQ(u().join6(member, UdpGroup6{kGroup, {}}), 0);
    reports();
    int64_t id = u().open(1);
    ASSERT_GE(id, 0);
    const SockId sender = SockId(id);
    ASSERT_EQ(u().bind6(sender, Endpoint6{kOurIp, 7101}, true), 0);
    EXPECT_EQ(u().set_option(sender, SockOpt::kMulticastHops, 256), -EINVAL);
    EXPECT_EQ(u().set_option(sender, SockOpt::kMulticastLoop6, -1), -EINVAL);
    auto wire = [&] { // the hop limits of the UDP datagrams sent since the last call
        std::vector<int> hops;
        p().poll();
        for (auto &f : p().take_raw())
            if (f.size() >= 62 && f[12] == 0x86 && f[13] == 0xdd && f[20] == 17) hops.push_back(f[21]);
        p().take();
        return hops;
    };
    const Endpoint6 to{kGroup, kP};
    ASSERT_EQ(u().send_to6(sender, &to, "one", 3), 3);
    EXPECT_EQ(wire(), std::vector<int>{1}) << "IPV6_MULTICAST_HOPS' default";
    UdpRecord r{};
    EXPECT_EQ(recv(member, &r), "one") << "looped back to the host's member";
    EXPECT_TRUE(r.flags & kUdpRecIp6);
    EXPECT_TRUE(r.flags & kUdpRecMulticast);
    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastHops, 9), 0);
    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastLoop6, 0), 0);
    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastLoop, 1), 0) << "IPv4's flag is another";
    ASSERT_EQ(u().send_to6(sender, &to, "two", 3), 3);
    EXPECT_EQ(wire(), std::vector<int>{9});
    EXPECT_TRUE(empty(member)) << "IPV6_MULTICAST_LOOP 0";
    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastLoop6, 1), 0);
    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastHops, 0), 0);
    ASSERT_EQ(u().send_to6(sender, &to, "three", 5), 5);
    EXPECT_TRUE(wire().empty()) << "hop limit 0: the host only";
    EXPECT_EQ(recv(member), "three");
    EXPECT_TRUE(empty(sender)) << "bound to a unicast address: takes no group";
}

TEST_F(Mcast6, AGroupNobodyJoinedIsNotDeliveredNorAnswered)
{
    make();
    SockId s = open6(7001);
    reports();
    const uint64_t not_ours = stats().drop_not_ours;
    in6(kPeerIp, kGroup, 7001, "nobody's");
    EXPECT_TRUE(empty(s));
    EXPECT_EQ(stats().drop_not_ours, not_ours + 1); // its 33:33 MAC is nobody's
    EXPECT_TRUE(reports().empty());
    EXPECT_EQ(icmp6_out, 0); // no port unreachable
    ASSERT_EQ(u().join6(s, UdpGroup6{kGroup, {}}), 0);
    reports();
    // A group nobody joined behind the MAC of one joined (ff05::123 and
    // ff0e::123 share 33:33:00:00:01:23): the IPv6 layer's check.
    const uint64_t not_ours6 = stats().ip6_drop_not_ours;
    in6(kPeerIp, group(0x05, 0x123), 7001, "same MAC");
    EXPECT_EQ(stats().ip6_drop_not_ours, not_ours6 + 1);
    EXPECT_TRUE(empty(s));
    EXPECT_TRUE(reports().empty());
    EXPECT_EQ(icmp6_out, 0);
    // Joined, but nobody holds the port: no ICMPv6 error to a group either.
    in6(kPeerIp, kGroup, 7002, "no port");
    EXPECT_TRUE(reports().empty());
    EXPECT_EQ(icmp6_out, 0);
    EXPECT_TRUE(empty(s));
}

// A group a UDP socket joined is taken by the IPv6 layer for every upper
// protocol: TCP must still not answer it (a listener on [::] sees no SYN
// to a group; RFC 9293 3.10.7.2).
TEST_F(Mcast6, TcpToAJoinedGroupIsNotTaken)
{
    make();
    Stack &st = p().stack();
    const int64_t l = st.open(1);
    ASSERT_GE(l, 0);
    ASSERT_EQ(st.bind6(SockId(l), Endpoint6{{}, 8080}, false), 0);
    ASSERT_EQ(st.listen(SockId(l), 8), 0);
    SockId u6 = open6(7010);
    ASSERT_EQ(u().join6(u6, UdpGroup6{kGroup, {}}), 0);
    reports();
    std::vector<uint8_t> t(20, 0);
    put16(&t[0], 40000), put16(&t[2], 8080);
    t[4] = 0x12, t[7] = 0x34; // sequence number
    t[12] = 5 << 4, t[13] = 0x02, t[14] = 0xff, t[15] = 0xff; // SYN, window
    put16(&t[16], ref_sum(kPeerIp, kGroup, 6, t.data(), t.size()));
    p().inject(eth(ip6::multicast_mac(kGroup.b), packet6(kPeerIp, kGroup, 6, t)));
    p().poll();
    for (auto &f : p().take_raw()) EXPECT_FALSE(f.size() >= 54 && f[12] == 0x86 && (f[20] == 6 || f[20] == 58));
    EXPECT_LT(st.accept(SockId(l), 2), 0);
}

TEST_F(Mcast6, BindToAGroupTakesThatGroupOnly)
{
    make();
    const uint16_t kP = 7003;
    int64_t id = u().open(1);
    ASSERT_GE(id, 0);
    const SockId g = SockId(id);
    ASSERT_EQ(u().bind6(g, Endpoint6{kGroup, kP}, false), 0);
    UdpInfo info{};
    ASSERT_EQ(u().info(g, &info), 0);
    EXPECT_TRUE(info.v6only); // IPv6 only, as any specific address
    EXPECT_TRUE(same(info.local6.ip, kGroup));
    // The port conflicts as for any address: the same group or :: without
    // sharing, another group not.
    int64_t x = u().open(1), y = u().open(1), z = u().open(1);
    EXPECT_EQ(u().bind6(SockId(x), Endpoint6{kGroup, kP}, false), -EADDRINUSE);
    EXPECT_EQ(u().bind6(SockId(y), Endpoint6{{}, kP}, false), -EADDRINUSE);
    ASSERT_EQ(u().bind6(SockId(z), Endpoint6{kGroup2, kP}, false), 0);
    ASSERT_EQ(u().join6(g, UdpGroup6{kGroup, {}}), 0);
    ASSERT_EQ(u().join6(SockId(z), UdpGroup6{kGroup2, {}}), 0);
    in6(kPeerIp, kGroup, kP, "mine");
    in6(kPeerIp, kGroup2, kP, "the other group");
    in6(kPeerIp, kOurIp, kP, "unicast");
    EXPECT_EQ(recv(g), "mine");
    EXPECT_TRUE(empty(g));
    EXPECT_EQ(recv(SockId(z)), "the other group");
    // A send from it leaves from an address of ours, never from the group.
    const Endpoint6 to{kPeerIp, 9};
    ASSERT_EQ(u().send_to6(g, &to, "x", 1), 1);
    p().poll();
    bool seen = false;
    for (auto &f : p().take_raw())
        if (f.size() >= 54 && f[12] == 0x86 && f[20] == 17) {
            seen = true;
            EXPECT_TRUE(same(ip6::from(f.data() + 22), kOurIp));
        }
    EXPECT_TRUE(seen);
}

TEST_F(Mcast6, Mldv2ReportsWhenTheStacksFilterChanges)
{
    make();
    SockId a = open6(7004), b = open6(7005);
    reports();
    ASSERT_EQ(u().join6(a, UdpGroup6{kGroup, {}}), 0);
    auto r = reports();
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].size(), 1u);
    EXPECT_EQ(r[0][0], Rec(4, hex(kGroup), 0)); // CHANGE_TO_EXCLUDE {}
    EXPECT_EQ(stats().mld_out, 1u);
    // A second socket: the stack's filter is the same, nothing to say.
    ASSERT_EQ(u().join6(b, UdpGroup6{kGroup, {}}), 0);
    EXPECT_TRUE(reports().empty());
    ASSERT_EQ(u().leave6(a, UdpGroup6{kGroup, {}}), 0);
    EXPECT_TRUE(reports().empty());
    // The last one leaves (by close): CHANGE_TO_INCLUDE {}.
    ASSERT_EQ(u().close(b), 0);
    r = reports();
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].size(), 1u);
    EXPECT_EQ(r[0][0], Rec(3, hex(kGroup), 0));
    // Source-specific: ALLOW_NEW_SOURCES, then BLOCK_OLD_SOURCES.
    ASSERT_EQ(u().join6(a, UdpGroup6{kGroup2, kSource2}), 0);
    r = reports();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], std::vector<Rec>{Rec(5, hex(kGroup2), 1)});
    ASSERT_EQ(u().leave6(a, UdpGroup6{kGroup2, kSource2}), 0);
    r = reports();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], std::vector<Rec>{Rec(6, hex(kGroup2), 1)});
    // Never for all-nodes nor interface-local groups (RFC 3810 6).
    ASSERT_EQ(u().join6(a, UdpGroup6{ip6::all_nodes(), {}}), 0);
    ASSERT_EQ(u().join6(a, UdpGroup6{group(0x01, 7), {}}), 0);
    EXPECT_TRUE(reports().empty());
}

TEST_F(Mcast6, Mldv2ReportFromUnspecifiedWhileTheLinkLocalIsTentative)
{
    make(false);
    SockId a = open6(7006);
    ASSERT_EQ(u().join6(a, UdpGroup6{kGroup, {}}), 0);
    auto r = reports(true);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], std::vector<Rec>{Rec(4, hex(kGroup), 0)});
}

TEST_F(Mcast6, Mldv2QueriesAnsweredAndBadOnesDropped)
{
    make();
    SockId a = open6(7007), b = open6(7008);
    ASSERT_EQ(u().join6(a, UdpGroup6{kGroup, {}}), 0);
    ASSERT_EQ(u().join6(b, UdpGroup6{kGroup2, kSource2}), 0);
    ASSERT_EQ(u().join6(b, UdpGroup6{ip6::all_nodes(), {}}), 0); // never reported
    reports();
    // General: every group joined, its current state.
    query(ip6::all_nodes(), Ip6Addr{});
    auto r = reports();
    ASSERT_EQ(r.size(), 1u);
    ASSERT_EQ(r[0].size(), 2u);
    std::sort(r[0].begin(), r[0].end());
    EXPECT_EQ(r[0][0], Rec(1, hex(kGroup2), 1)); // MODE_IS_INCLUDE {kSource2}
    EXPECT_EQ(r[0][1], Rec(2, hex(kGroup), 0));  // MODE_IS_EXCLUDE {}
    EXPECT_EQ(stats().mld_query_in, 1u);
    // Group-specific, to the group: that group only; an MLDv1 query too.
    query(kGroup, kGroup);
    r = reports();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], std::vector<Rec>{Rec(2, hex(kGroup), 0)});
    query(kGroup2, kGroup2, false);
    r = reports();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], std::vector<Rec>{Rec(1, hex(kGroup2), 1)});
    EXPECT_EQ(stats().mld_query_in, 3u);
    // For a group not joined: not answered (to the group: not ours; to
    // all-nodes: nothing to report).
    const Ip6Addr other = group(0x0e, 0x999);
    query(other, other);
    query(ip6::all_nodes(), other);
    EXPECT_TRUE(reports().empty());
    // Bad ones: dropped, counted, unanswered.
    const uint64_t drops = stats().mld_drop;
    query(ip6::all_nodes(), Ip6Addr{}, true, true, true);       // bad checksum
    query(ip6::all_nodes(), Ip6Addr{}, true, false);            // no Router Alert
    query(ip6::all_nodes(), Ip6Addr{}, true, true, false, 2);   // hop limit 2
    query(ip6::all_nodes(), Ip6Addr{}, true, true, false, 1, 2); // 26 bytes
    query(ip6::all_nodes(), Ip6Addr{}, true, true, false, 1, 0, 3); // 3 sources it does not hold
    EXPECT_TRUE(reports().empty());
    EXPECT_EQ(stats().mld_drop, drops + 5);
    EXPECT_EQ(stats().mld_query_in, 4u);
    // Another listener's report: ignored, counted.
    std::vector<uint8_t> rep = {0, 0, 0, 1, 4, 0, 0, 0};
    rep.insert(rep.end(), kGroup.b, kGroup.b + 16);
    auto m = icmp6(router_, kMldRouters, 143, 0, 0, {});
    m.resize(4); // type, code, checksum; then reserved, count, record
    m.insert(m.end(), rep.begin(), rep.end());
    m[2] = m[3] = 0;
    put16(&m[2], ref_sum(router_, kMldRouters, 58, m.data(), m.size()));
    std::vector<uint8_t> payload = {58, 0, 5, 2, 0, 0, 1, 0};
    payload.insert(payload.end(), m.begin(), m.end());
    ASSERT_EQ(u().join6(a, UdpGroup6{kMldRouters, {}}), 0); // (so that ff02::16 is ours to read)
    reports();
    p().inject(eth(ip6::multicast_mac(kMldRouters.b), packet6(router_, kMldRouters, 0, payload, 1)));
    EXPECT_TRUE(reports().empty());
    EXPECT_EQ(stats().mld_report_in, 1u);
}

} // namespace
