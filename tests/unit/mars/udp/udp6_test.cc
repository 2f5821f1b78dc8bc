// UDP over IPv6 in MARS (mars/src/udp/udp6.cc, issue 31) on the simulated
// wire: the peer is played with crafted frames (RawPeer, TEST FIXTURE; the
// IPv6 builders of ../ip6/ip6_fixture.h), the UDP headers and checksums
// built here from RFC 768 / RFC 8200 8.1 with this file's own RFC 1071 sum
// (not MARS's); what the stack sends is parsed from its raw bytes. Beside
// IPv6: the dual-stack, v6only and v4-mapped rules against IPv4 (Linux's
// AF_INET6 socket), records of both families in one ring, hostile records.
// Virtual time only.
#include "../ip6/ip6_fixture.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>

namespace {

using namespace mars;
using namespace mars::test;
using mars::sim::RawPeer;

void put16(uint8_t *p, uint16_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }
void put32(uint8_t *p, uint32_t v) { put16(p, uint16_t(v >> 16)), put16(p + 2, uint16_t(v)); }
uint16_t get16(const uint8_t *p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t get32(const uint8_t *p) { return uint32_t(get16(p)) << 16 | get16(p + 2); }

// RFC 1071 over a pseudo-header and the UDP bytes, written out here on
// purpose (an independent reference): ~sum. Over a whole datagram with its
// checksum field in place a valid one gives 0.
uint16_t ref_sum(const std::vector<uint8_t> &pseudo, const uint8_t *u, size_t len)
{
    std::vector<uint8_t> b(pseudo);
    b.insert(b.end(), u, u + len);
    if (b.size() & 1) b.push_back(0);
    uint32_t sum = 0;
    for (size_t i = 0; i < b.size(); i += 2) sum += uint32_t(b[i]) << 8 | b[i + 1];
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(~sum);
}
// RFC 8200 8.1: source, destination, upper-layer length (32 bits), 3 zero
// bytes, next header 17.
std::vector<uint8_t> pseudo6(const Ip6Addr &src, const Ip6Addr &dst, uint32_t len)
{
    std::vector<uint8_t> b(src.b, src.b + 16);
    b.insert(b.end(), dst.b, dst.b + 16);
    uint8_t l[4];
    put32(l, len);
    b.insert(b.end(), l, l + 4);
    b.insert(b.end(), {0, 0, 0, 17});
    return b;
}
std::vector<uint8_t> pseudo4(uint32_t src, uint32_t dst, uint16_t len)
{
    std::vector<uint8_t> b(12, 0);
    put32(&b[0], src), put32(&b[4], dst);
    b[9] = 17;
    put16(&b[10], len);
    return b;
}

Ip6Addr mapped(uint32_t v4)
{
    Ip6Addr a;
    a.b[10] = a.b[11] = 0xff;
    put32(a.b + 12, v4);
    return a;
}
bool same(const Ip6Addr &a, const Ip6Addr &b) { return std::memcmp(a.b, b.b, 16) == 0; }

// A datagram the peer sends over IPv6.
struct D6 {
    Ip6Addr src = kPeerIp, dst = kOurIp;
    uint16_t sport = 40000, dport = 0;
    std::string data;
    bool zero_csum = false, bad_csum = false;
    int len_delta = 0; // added to the UDP length field (the checksum covers the field's length when shorter)
    uint8_t tclass = 0, hop = 64;
};
// A datagram the peer sends over IPv4.
struct D4 {
    uint16_t sport = 40000, dport = 0;
    std::string data;
    uint8_t tos = 0, ttl = 64;
};

class Udp6 : public ::testing::Test {
  protected:
    // A stack with 2001:2::1/64 usable (DAD done) that knows the peer's MAC
    // (from its solicitation) unless !learn.
    void make(uint32_t rcvbuf = 4096, bool share = false, bool learn = true)
    {
        RawPeer::Options o;
        o.stack.tcp.rcvbuf = rcvbuf;
        o.stack.pass_unclaimed = share;
        o.stack.addr6[0] = Ip6Prefix{kOurIp, 64};
        o.stack.n_addr6 = 1;
        o.keep_raw = true;
        peer_ = std::make_unique<RawPeer>(o);
        p().stack().announce(p().now);
        p().advance(kSec);
        if (learn) {
            const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
            p().inject(eth(ip6::multicast_mac(sn.b), ns(kPeerIp, sn, kOurIp)));
        }
        p().poll();
        p().take_raw();
        p().take();
        p().port().unclaimed_frames.clear();
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
    std::vector<uint8_t> frame6(const D6 &d)
    {
        const size_t ulen = 8 + d.data.size();
        std::vector<uint8_t> u(ulen);
        put16(&u[0], d.sport);
        put16(&u[2], d.dport);
        const uint16_t field = uint16_t(int(ulen) + d.len_delta);
        put16(&u[4], field);
        std::memcpy(&u[8], d.data.data(), d.data.size());
        if (!d.zero_csum) {
            const size_t covered = std::min<size_t>(ulen, field >= 8 ? field : ulen);
            uint16_t c = ref_sum(pseudo6(d.src, d.dst, uint32_t(covered)), u.data(), covered);
            if (c == 0) c = 0xffff;
            if (d.bad_csum) c ^= 0x0101;
            put16(&u[6], c);
        }
        auto pk = packet6(d.src, d.dst, 17, u, d.hop);
        pk[0] = uint8_t(0x60 | d.tclass >> 4);
        pk[1] = uint8_t((d.tclass & 0xf) << 4);
        return eth(p().stack_mac, pk);
    }
    std::vector<uint8_t> frame4(const D4 &d)
    {
        const size_t ulen = 8 + d.data.size();
        std::vector<uint8_t> v(14 + 20 + ulen, 0);
        std::memcpy(v.data(), p().stack_mac.b, 6);
        std::memcpy(v.data() + 6, p().peer_mac.b, 6);
        v[12] = 0x08;
        uint8_t *ip = v.data() + 14;
        ip[0] = 0x45, ip[1] = d.tos;
        put16(ip + 2, uint16_t(20 + ulen));
        ip[6] = 0x40, ip[8] = d.ttl, ip[9] = 17;
        put32(ip + 12, p().peer_ip), put32(ip + 16, p().stack_ip);
        sim::fix_ip_checksum(v.data(), v.size());
        uint8_t *u = ip + 20;
        put16(u, d.sport), put16(u + 2, d.dport), put16(u + 4, uint16_t(ulen));
        std::memcpy(u + 8, d.data.data(), d.data.size());
        uint16_t c = ref_sum(pseudo4(p().peer_ip, p().stack_ip, uint16_t(ulen)), u, ulen);
        put16(u + 6, c ? c : 0xffff);
        return v;
    }
    void in6(const D6 &d) { p().inject(frame6(d)); }
    void in4(const D4 &d) { p().inject(frame4(d)); }

    std::string recv(SockId s, UdpRecord *rec = nullptr, size_t cap = 4096)
    {
        std::string buf(cap, '\0');
        int64_t n = u().recv_from(s, buf.data(), cap, rec, false);
        if (n < 0) return "<" + std::to_string(n) + ">";
        buf.resize(std::min<size_t>(size_t(n), cap));
        return buf;
    }
    // The front record's IPv6 addresses, read through the view (as the
    // engine reads them); false: not an IPv6 record.
    bool front6(SockId s, UdpRecord6 *a)
    {
        RingSpan v{};
        if (u().rx_view(s, &v) != 0 || v.n[0] < sizeof(UdpRecord)) return false;
        UdpRecord r;
        std::memcpy(&r, v.p[0], sizeof r);
        if (r.flags & kUdpRecPad) { // the next record is at the ring's start
            if (v.n[1] < sizeof r) return false;
            std::memcpy(&r, v.p[1], sizeof r);
            if (!(r.flags & kUdpRecIp6)) return false;
            std::memcpy(a, v.p[1] + sizeof r, sizeof *a);
            return true;
        }
        if (!(r.flags & kUdpRecIp6)) return false;
        std::memcpy(a, v.p[0] + sizeof r, sizeof *a);
        return true;
    }
    SockId open6(uint16_t port, const Ip6Addr &ip = Ip6Addr{}, bool v6only = false, bool reuse = false,
                 uint64_t user = 1)
    {
        int64_t id = u().open(user);
        EXPECT_GE(id, 0);
        if (reuse) {
            EXPECT_EQ(u().set_option(SockId(id), SockOpt::kReusePort, 1), 0);
        }
        EXPECT_EQ(u().bind6(SockId(id), Endpoint6{ip, port}, v6only), 0);
        return SockId(id);
    }
    SockId open4(uint16_t port, uint32_t ip = 0, bool reuse = false, uint64_t user = 1)
    {
        int64_t id = u().open(user);
        EXPECT_GE(id, 0);
        if (reuse) {
            EXPECT_EQ(u().set_option(SockId(id), SockOpt::kReusePort, 1), 0);
        }
        EXPECT_EQ(u().bind(SockId(id), Endpoint{ip, port}), 0);
        return SockId(id);
    }
    int bind6(uint16_t port, const Ip6Addr &ip = Ip6Addr{}, bool v6only = false)
    {
        int64_t id = u().open(1);
        EXPECT_GE(id, 0);
        return u().bind6(SockId(id), Endpoint6{ip, port}, v6only);
    }
    int bind4(uint16_t port, uint32_t ip = 0)
    {
        int64_t id = u().open(1);
        EXPECT_GE(id, 0);
        return u().bind(SockId(id), Endpoint{ip, port});
    }
    // What the stack sent since the last call, split by kind.
    struct Out {
        std::vector<std::vector<uint8_t>> udp6, icmp6, udp4;
    };
    Out sent()
    {
        Out o;
        p().poll();
        for (auto &f : p().take_raw()) {
            if (f.size() >= 54 && f[12] == 0x86 && f[13] == 0xdd) {
                if (f[20] == 17) o.udp6.push_back(f);
                if (f[20] == 58) o.icmp6.push_back(f);
            } else if (f.size() >= 42 && f[12] == 0x08 && f[13] == 0 && f[14 + 9] == 17) {
                o.udp4.push_back(f);
            }
        }
        p().take();
        return o;
    }
    std::unique_ptr<RawPeer> peer_;
};

TEST_F(Udp6, BindRulesAddressesAndConflictsWithIpv4AsLinux)
{
    make();
    // ::, our address, a foreign one, a v4-mapped one, bound twice.
    SockId any = open6(5000);
    UdpInfo in{};
    ASSERT_EQ(u().info(any, &in), 0);
    EXPECT_TRUE(in.ipv6);
    EXPECT_FALSE(in.v6only);
    EXPECT_TRUE(same(in.local6.ip, Ip6Addr{}));
    EXPECT_EQ(in.local6.port, 5000);
    EXPECT_EQ(in.local.port, 5000);
    EXPECT_EQ(u().bind6(any, Endpoint6{Ip6Addr{}, 5001}, false), -EINVAL); // bound already
    EXPECT_EQ(u().bind(any, Endpoint{0, 5001}), -EINVAL);
    EXPECT_EQ(bind6(5002, kOurIp), 0);
    EXPECT_EQ(bind6(5003, kPeerIp), -EADDRNOTAVAIL); // not ours
    EXPECT_EQ(bind6(5003, ip6::link_local(p().stack_mac)), 0); // our link-local one
    SockId m = open6(5004, mapped(p().stack_ip));
    ASSERT_EQ(u().info(m, &in), 0);
    EXPECT_TRUE(in.ipv6);
    EXPECT_EQ(in.local.ip, p().stack_ip); // the IPv4 form too
    EXPECT_TRUE(same(in.local6.ip, mapped(p().stack_ip)));
    EXPECT_EQ(bind6(5005, mapped(sim::ipv4(198, 18, 0, 77))), -EADDRNOTAVAIL);
    EXPECT_EQ(bind6(5005, mapped(p().stack_ip), true), -EINVAL); // v4-mapped on a v6only socket
    // Port 0: an ephemeral port from the one picker.
    int64_t e = u().open(1);
    ASSERT_EQ(u().bind6(SockId(e), Endpoint6{kOurIp, 0}, false), 0);
    ASSERT_EQ(u().info(SockId(e), &in), 0);
    EXPECT_GE(in.local6.port, 32768);
    EXPECT_TRUE(in.v6only) << "a specific IPv6 address takes no IPv4 (Linux's ipv6only)";

    // Conflicts with IPv4 holders of the port, both ways (inet_rcv_saddr_equal).
    EXPECT_EQ(bind4(5000), -EADDRINUSE);                 // dual [::]:P holds 0.0.0.0:P
    EXPECT_EQ(bind4(5000, p().stack_ip), -EADDRINUSE);   // ... and every IPv4 address
    EXPECT_EQ(bind6(5000, Ip6Addr{}, true), -EADDRINUSE); // :: and :: always
    EXPECT_EQ(bind6(5000, kOurIp), -EADDRINUSE);          // :: overlaps our address
    EXPECT_EQ(bind6(5004, mapped(0)), -EADDRINUSE);       // v4-mapped wildcard and v4-mapped address
    EXPECT_EQ(bind4(5004), -EADDRINUSE);                 // v4-mapped address and IPv4 wildcard
    ASSERT_EQ(bind4(6000), 0);
    EXPECT_EQ(bind6(6000), -EADDRINUSE);       // dual [::] after 0.0.0.0
    EXPECT_EQ(bind6(6000, Ip6Addr{}, true), 0); // v6only [::] beside it
    EXPECT_EQ(bind6(6000, kOurIp), -EADDRINUSE); // (:: v6only holds every IPv6 address)
    ASSERT_EQ(bind6(6001, Ip6Addr{}, true), 0);
    EXPECT_EQ(bind4(6001), 0);                  // 0.0.0.0 beside v6only [::]
    ASSERT_EQ(bind6(6002, kOurIp), 0);
    EXPECT_EQ(bind4(6002), 0);                  // an IPv6 address and IPv4's wildcard
    EXPECT_EQ(bind6(6002, ip6::link_local(p().stack_mac)), 0); // another IPv6 address
    EXPECT_EQ(bind6(6002, mapped(p().stack_ip)), -EADDRINUSE); // the IPv4 wildcard's
    ASSERT_EQ(bind6(6003, mapped(0)), 0);
    EXPECT_EQ(bind4(6003, p().stack_ip), -EADDRINUSE); // ::ffff:0.0.0.0 is IPv4's wildcard
    EXPECT_EQ(bind6(6003, Ip6Addr{}, true), 0);

    // One ephemeral picker for both families: it skips a port any family
    // holds in a way that overlaps (dual [::]), not one a v6only [::] holds
    // for an IPv4 socket.
    auto next = [](uint16_t q) { return uint16_t(q >= 60999 ? 32768 : q + 1); };
    int64_t e1 = u().open(1), e2 = u().open(1), e3 = u().open(1);
    ASSERT_EQ(u().bind(SockId(e1), Endpoint{0, 0}), 0);
    ASSERT_EQ(u().info(SockId(e1), &in), 0);
    const uint16_t p1 = in.local.port;
    ASSERT_EQ(bind6(next(p1)), 0);                         // dual [::] on the next one
    ASSERT_EQ(bind6(next(next(p1)), Ip6Addr{}, true), 0); // v6only [::] on the one after
    ASSERT_EQ(u().bind(SockId(e2), Endpoint{0, 0}), 0);
    ASSERT_EQ(u().info(SockId(e2), &in), 0);
    EXPECT_EQ(in.local.port, next(next(p1))) << "the dual-stack holder's port was picked";
    ASSERT_EQ(u().bind6(SockId(e3), Endpoint6{Ip6Addr{}, 0}, true), 0);
    ASSERT_EQ(u().info(SockId(e3), &in), 0);
    EXPECT_EQ(in.local.port, next(next(next(p1))));

        // SO_REUSEPORT across the families, one owner.
    SockId r1 = open6(7000, Ip6Addr{}, false, true);
    SockId r2 = open4(7000, 0, true);
    (void)r1, (void)r2;
    int64_t plain = u().open(1);
    EXPECT_EQ(u().bind6(SockId(plain), Endpoint6{Ip6Addr{}, 7000}, false), -EADDRINUSE);
    // A failed bind leaves the socket unbound and usable.
    EXPECT_EQ(u().bind6(SockId(plain), Endpoint6{Ip6Addr{}, 7001}, false), 0);
}

TEST_F(Udp6, SendBuildsAnIpv6FrameWithThePseudoHeaderChecksum)
{
    make();
    int64_t id = u().open(1);
    ASSERT_GE(id, 0);
    SockId s = SockId(id);
    ASSERT_EQ(u().set_option(s, SockOpt::kTclass, 0xb8), 0);
    ASSERT_EQ(u().set_option(s, SockOpt::kTos, 0x10), 0); // IPv4's, not used here
    const std::string payload = "a datagram of odd length";
    Endpoint6 dst{kPeerIp, 9999};
    EXPECT_EQ(u().send_to6(s, &dst, payload.data(), payload.size()), int64_t(payload.size()));
    auto out = sent();
    ASSERT_EQ(out.udp6.size(), 1u);
    const auto &f = out.udp6[0];
    EXPECT_EQ(std::memcmp(f.data(), p().peer_mac.b, 6), 0);
    EXPECT_EQ(std::memcmp(f.data() + 6, p().stack_mac.b, 6), 0);
    const uint8_t *ip = f.data() + 14, *uh = ip + 40;
    EXPECT_EQ(get32(ip), 0x60000000u | 0xb8u << 20); // version 6, the traffic class, flow label 0
    const uint16_t ulen = get16(ip + 4);
    EXPECT_EQ(ulen, 8 + payload.size());
    EXPECT_EQ(f.size(), 14u + 40u + ulen);
    EXPECT_EQ(ip[6], 17);
    EXPECT_EQ(ip[7], 64); // hop limit
    EXPECT_TRUE(same(ip6::from(ip + 8), kOurIp));
    EXPECT_TRUE(same(ip6::from(ip + 24), kPeerIp));
    UdpInfo in{};
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_TRUE(in.ipv6);
    EXPECT_FALSE(in.v6only); // bound :: dual-stack by the send
    EXPECT_GE(in.local6.port, 32768);
    EXPECT_EQ(get16(uh), in.local6.port);
    EXPECT_EQ(get16(uh + 2), 9999);
    EXPECT_EQ(get16(uh + 4), ulen);
    EXPECT_NE(get16(uh + 6), 0);
    EXPECT_EQ(ref_sum(pseudo6(kOurIp, kPeerIp, ulen), uh, ulen), 0); // valid
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(uh + 8), payload.size()), payload);
    EXPECT_EQ(stats().udp_out, 1u);

    // A computed zero goes out as 0xffff: the last word chosen to make the sum 0.
    std::string z = "zz\0\0";
    z.resize(4);
    ASSERT_EQ(u().send_to6(s, &dst, z.data(), z.size()), 4);
    out = sent();
    ASSERT_EQ(out.udp6.size(), 1u);
    const uint16_t c0 = get16(out.udp6[0].data() + 54 + 6);
    put16(reinterpret_cast<uint8_t *>(z.data()) + 2, c0);
    ASSERT_EQ(u().send_to6(s, &dst, z.data(), z.size()), 4);
    out = sent();
    ASSERT_EQ(out.udp6.size(), 1u);
    const uint8_t *uz = out.udp6[0].data() + 54;
    EXPECT_EQ(get16(uz + 6), 0xffff);
    EXPECT_EQ(ref_sum(pseudo6(kOurIp, kPeerIp, 12), uz, 12), 0);

    // Bad sends: too large, off-link, ::, port 0; to a link-local peer from
    // our link-local address.
    std::string big(1500 - 48 + 1, 'b');
    EXPECT_EQ(u().send_to6(s, &dst, big.data(), big.size()), -EMSGSIZE);
    big.pop_back();
    EXPECT_EQ(u().send_to6(s, &dst, big.data(), big.size()), int64_t(big.size()));
    EXPECT_EQ(sent().udp6.size(), 1u);
    Endpoint6 off{kOffLink, 53}, zero{Ip6Addr{}, 53}, port0{kPeerIp, 0};
    EXPECT_EQ(u().send_to6(s, &off, "x", 1), -ENETUNREACH);
    EXPECT_EQ(u().send_to6(s, &zero, "x", 1), -EINVAL);
    EXPECT_EQ(u().send_to6(s, &port0, "x", 1), -EINVAL);
    EXPECT_EQ(u().send_to6(s, nullptr, "x", 1), -EDESTADDRREQ);
    EXPECT_EQ(stats().udp_out, 4u);

    // From a bound address: that source.
    SockId b = open6(5555, ip6::link_local(p().stack_mac));
    ASSERT_EQ(u().send_to6(b, &dst, "x", 1), 1);
    out = sent();
    ASSERT_EQ(out.udp6.size(), 1u);
    EXPECT_TRUE(same(ip6::from(out.udp6[0].data() + 22), ip6::link_local(p().stack_mac)));
    EXPECT_EQ(get16(out.udp6[0].data() + 54), 5555);

    // To a link-scoped group (no membership needed to send): its 33:33 MAC,
    // hop limit 1, from our link-local address; no ND.
    Ip6Addr grp;
    grp.b[0] = 0xff, grp.b[1] = 0x02, grp.b[13] = 1, grp.b[15] = 5; // ff02::1:5
    Endpoint6 to_grp{grp, 9};
    ASSERT_EQ(u().send_to6(s, &to_grp, "g", 1), 1);
    out = sent();
    ASSERT_EQ(out.udp6.size(), 1u);
    const uint8_t gmac[6] = {0x33, 0x33, 0, 1, 0, 5};
    EXPECT_EQ(std::memcmp(out.udp6[0].data(), gmac, 6), 0);
    EXPECT_EQ(out.udp6[0][21], 1);
    EXPECT_TRUE(same(ip6::from(out.udp6[0].data() + 22), ip6::link_local(p().stack_mac)));
    EXPECT_EQ(ref_sum(pseudo6(ip6::link_local(p().stack_mac), grp, 9), out.udp6[0].data() + 54, 9), 0);
}

TEST_F(Udp6, ReceivesRecordsWithAddressesTrafficClassAndHopLimit)
{
    make();
    SockId s = open6(5000);
    p().take_events();
    in6(D6{.sport = 1234, .dport = 5000, .data = "hello", .tclass = 0xb8, .hop = 7});
    EXPECT_TRUE(p().events_of(s) & kEvReadable);
    RingSpan v{};
    ASSERT_EQ(u().rx_view(s, &v), 0);
    ASSERT_EQ(v.total(), udp_record_size(5, kUdpRecIp6));
    ASSERT_EQ(v.total(), 96u); // 32 + 32 + 5, padded
    UdpRecord r;
    std::memcpy(&r, v.p[0], sizeof r);
    EXPECT_EQ(r.size, 96u);
    EXPECT_EQ(r.len, 5u);
    EXPECT_EQ(r.src_ip, 0u);
    EXPECT_EQ(r.dst_ip, 0u);
    EXPECT_EQ(r.src_port, 1234);
    EXPECT_EQ(r.dst_port, 5000);
    EXPECT_EQ(r.ts_ns, p().now);
    EXPECT_EQ(r.flags, kUdpRecIp6 | 0xb8u << kUdpRecTosShift | 7u << kUdpRecTtlShift);
    UdpRecord6 a;
    std::memcpy(&a, v.p[0] + 32, sizeof a);
    EXPECT_TRUE(same(a.src, kPeerIp));
    EXPECT_TRUE(same(a.dst, kOurIp));
    EXPECT_EQ(std::memcmp(v.p[0] + 64, "hello", 5), 0);
    UdpRecord h{};
    EXPECT_EQ(recv(s, &h), "hello"); // the payload after the addresses
    EXPECT_EQ(h.flags, r.flags);
    in6(D6{.sport = 1, .dport = 5000, .data = ""}); // an empty datagram is a datagram
    EXPECT_EQ(recv(s, &h), "");
    EXPECT_EQ(h.size, 64u);
    EXPECT_EQ(recv(s), "<" + std::to_string(-EAGAIN) + ">");
    // To our link-local address: the record says which of ours it was sent to.
    const Ip6Addr ll = ip6::link_local(p().stack_mac);
    in6(D6{.src = ip6::link_local(p().peer_mac), .dst = ll, .dport = 5000, .data = "ll"});
    ASSERT_TRUE(front6(s, &a));
    EXPECT_TRUE(same(a.dst, ll));
    EXPECT_EQ(recv(s), "ll");
    // A socket on our global address does not get what goes to the link-local one.
    SockId g = open6(5001, kOurIp);
    in6(D6{.src = ip6::link_local(p().peer_mac), .dst = ll, .dport = 5001, .data = "no"});
    in6(D6{.dport = 5001, .data = "yes"});
    EXPECT_EQ(recv(g), "yes");
    EXPECT_EQ(recv(g), "<" + std::to_string(-EAGAIN) + ">");
    EXPECT_EQ(stats().udp_in, 4u);
}

TEST_F(Udp6, ZeroChecksumBadChecksumAndBadLengthsAreDropped)
{
    make();
    SockId s = open6(5000);
    in6(D6{.dport = 5000, .data = "none", .zero_csum = true}); // no "no checksum" over IPv6
    in6(D6{.dport = 5000, .data = "bad", .bad_csum = true});
    EXPECT_EQ(stats().udp_csum_errors, 2u);
    in6(D6{.dport = 5000, .data = "short", .len_delta = -6}); // length field 7 < 8
    in6(D6{.dport = 5000, .data = "long", .len_delta = 1});   // past the IPv6 payload
    auto cut = frame6(D6{.dport = 5000});
    cut.resize(14 + 40 + 6); // fewer bytes than a UDP header
    cut[14 + 5] = 6;         // payload length 6
    p().inject(cut);
    EXPECT_EQ(stats().udp_header_errors, 3u);
    // A length field shorter than the payload (but >= 8): the rest is padding.
    in6(D6{.dport = 5000, .data = "keep+pad", .len_delta = -4});
    EXPECT_EQ(recv(s), "keep");
    EXPECT_EQ(recv(s), "<" + std::to_string(-EAGAIN) + ">");
    Out o = sent();
    EXPECT_TRUE(o.icmp6.empty() && o.udp6.empty()) << "a dropped datagram was answered";
    EXPECT_EQ(stats().udp_no_port, 0u);
    // A datagram whose sum computes to zero: 0xffff on the wire is valid,
    // 0 there (which the one's complement sum alone would take too) is not.
    std::string z("zero\0\0", 6);
    const uint16_t c0 = get16(frame6(D6{.dport = 5000, .data = z}).data() + 14 + 40 + 6);
    put16(reinterpret_cast<uint8_t *>(z.data()) + 4, c0);
    auto ones = frame6(D6{.dport = 5000, .data = z});
    ASSERT_EQ(get16(ones.data() + 14 + 40 + 6), 0xffff);
    p().inject(ones);
    EXPECT_EQ(recv(s), z);
    in6(D6{.dport = 5000, .data = z, .zero_csum = true});
    EXPECT_EQ(recv(s), "<" + std::to_string(-EAGAIN) + ">");
    EXPECT_EQ(stats().udp_csum_errors, 3u);
    // The NIC's verdict is taken: a frame flagged good is not summed again;
    // but a zero field is refused all the same.
    p().inject(frame6(D6{.dport = 5000, .data = "nic", .bad_csum = true}), kRxL4CsumGood);
    EXPECT_EQ(recv(s), "nic");
    p().inject(frame6(D6{.dport = 5000, .data = "nic0", .zero_csum = true}), kRxL4CsumGood);
    EXPECT_EQ(recv(s), "<" + std::to_string(-EAGAIN) + ">");
    EXPECT_EQ(stats().udp_csum_errors, 4u);
}

TEST_F(Udp6, ConnectFiltersByPeerAndSetsTheDefaultDestination)
{
    make();
    SockId s = open6(5000);
    ASSERT_EQ(u().connect6(s, Endpoint6{kPeerIp, 7000}), 0);
    UdpInfo in{};
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_TRUE(same(in.remote6.ip, kPeerIp));
    EXPECT_EQ(in.remote6.port, 7000);
    in6(D6{.sport = 7001, .dport = 5000, .data = "other port"});
    in6(D6{.src = addr(3), .sport = 7000, .dport = 5000, .data = "other host"});
    in4(D4{.sport = 7000, .dport = 5000, .data = "ipv4"}); // the dual-stack socket's IPv4 side: not its peer
    in6(D6{.sport = 7000, .dport = 5000, .data = "peer"});
    EXPECT_EQ(recv(s), "peer");
    EXPECT_EQ(recv(s), "<" + std::to_string(-EAGAIN) + ">");
    EXPECT_EQ(stats().udp_no_port, 3u);
    sent();
    EXPECT_EQ(u().send_to6(s, nullptr, "hi", 2), 2);
    EXPECT_EQ(u().send_to(s, nullptr, "hi", 2), 2); // the same default peer
    auto out = sent();
    ASSERT_EQ(out.udp6.size(), 2u);
    for (auto &f : out.udp6) {
        EXPECT_TRUE(same(ip6::from(f.data() + 38), kPeerIp));
        EXPECT_EQ(get16(f.data() + 56), 7000);
    }
    // Bad peers.
    EXPECT_EQ(u().connect6(s, Endpoint6{kPeerIp, 0}), -EINVAL);
    EXPECT_EQ(u().connect6(s, Endpoint6{Ip6Addr{}, 7}), -EINVAL);
    EXPECT_EQ(u().connect6(s, Endpoint6{kOffLink, 7}), -ENETUNREACH);
    // Dissolved: everything again, no default destination.
    ASSERT_EQ(u().connect6(s, Endpoint6{Ip6Addr{}, 0}), 0);
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_EQ(in.remote6.port, 0);
    in6(D6{.src = addr(3), .sport = 1, .dport = 5000, .data = "any"});
    EXPECT_EQ(recv(s), "any");
    EXPECT_EQ(u().send_to6(s, nullptr, "x", 1), -EDESTADDRREQ);
    // Connected to a v4-mapped peer: only its IPv4 datagrams.
    ASSERT_EQ(u().connect6(s, Endpoint6{mapped(p().peer_ip), 7000}), 0);
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_TRUE(same(in.remote6.ip, mapped(p().peer_ip)));
    EXPECT_EQ(in.remote.ip, p().peer_ip);
    in6(D6{.sport = 7000, .dport = 5000, .data = "v6"});
    in4(D4{.sport = 7000, .dport = 5000, .data = "v4"});
    UdpRecord r{};
    EXPECT_EQ(recv(s, &r), "v4");
    EXPECT_FALSE(r.flags & kUdpRecIp6);
    EXPECT_EQ(recv(s), "<" + std::to_string(-EAGAIN) + ">");
    // An unbound socket connected over IPv6 is bound :: dual-stack.
    int64_t c = u().open(1);
    ASSERT_EQ(u().connect6(SockId(c), Endpoint6{kPeerIp, 7000}), 0);
    ASSERT_EQ(u().info(SockId(c), &in), 0);
    EXPECT_TRUE(in.ipv6);
    EXPECT_FALSE(in.v6only);
    EXPECT_GE(in.local6.port, 32768);
}

// connect fixes a wildcard socket's address to its source toward the peer,
// in its name and for what it takes (Linux's ip4/ip6_datagram_connect: the
// "connect a UDP socket, read getsockname" way programs find their own
// address); AF_UNSPEC gives the wildcard back, but not an address bind chose.
TEST_F(Udp6, ConnectFixesTheSourceAndAfUnspecForgetsIt)
{
    make();
    const SockId s = open6(5010); // [::], dual-stack
    UdpInfo in{};
    ASSERT_EQ(u().connect6(s, Endpoint6{kPeerIp, 7000}), 0);
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_TRUE(same(in.local6.ip, kOurIp)) << "the IPv6 source toward the peer";
    EXPECT_EQ(in.local6.port, 5010);
    in4(D4{.sport = 7000, .dport = 5010, .data = "v4"}); // the peer's IPv4 address: not the IPv6 peer
    in6(D6{.sport = 7000, .dport = 5010, .data = "v6"});
    EXPECT_EQ(recv(s), "v6");
    EXPECT_EQ(recv(s), "<" + std::to_string(-EAGAIN) + ">");
    ASSERT_EQ(u().connect6(s, Endpoint6{Ip6Addr{}, 0}), 0); // AF_UNSPEC
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_TRUE(same(in.local6.ip, Ip6Addr{})) << "the wildcard again";
    in4(D4{.sport = 1, .dport = 5010, .data = "v4 again"});
    EXPECT_EQ(recv(s), "v4 again") << "dual-stack again";
    // A v4-mapped peer: the IPv4 source, v4-mapped in the IPv6 name.
    ASSERT_EQ(u().connect6(s, Endpoint6{mapped(p().peer_ip), 7000}), 0);
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_EQ(in.local.ip, p().stack_ip);
    EXPECT_TRUE(same(in.local6.ip, mapped(p().stack_ip)));
    ASSERT_EQ(u().connect6(s, Endpoint6{Ip6Addr{}, 0}), 0);
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_EQ(in.local.ip, 0u);
    EXPECT_TRUE(same(in.local6.ip, Ip6Addr{}));
    // An IPv4 socket on 0.0.0.0, and one unbound (bound by connect).
    const SockId s4 = open4(5011);
    ASSERT_EQ(u().connect(s4, Endpoint{p().peer_ip, 7000}), 0);
    ASSERT_EQ(u().info(s4, &in), 0);
    EXPECT_EQ(in.local.ip, p().stack_ip);
    ASSERT_EQ(u().connect(s4, Endpoint{0, 0}), 0);
    ASSERT_EQ(u().info(s4, &in), 0);
    EXPECT_EQ(in.local.ip, 0u);
    const int64_t un = u().open(1);
    ASSERT_GE(un, 0);
    ASSERT_EQ(u().connect(SockId(un), Endpoint{p().peer_ip, 7000}), 0);
    ASSERT_EQ(u().info(SockId(un), &in), 0);
    EXPECT_EQ(in.local.ip, p().stack_ip);
    EXPECT_NE(in.local.port, 0);
    // Bound to our address by bind: kept through AF_UNSPEC.
    const SockId b6 = open6(5012, kOurIp);
    ASSERT_EQ(u().connect6(b6, Endpoint6{kPeerIp, 7000}), 0);
    ASSERT_EQ(u().connect6(b6, Endpoint6{Ip6Addr{}, 0}), 0);
    ASSERT_EQ(u().info(b6, &in), 0);
    EXPECT_TRUE(same(in.local6.ip, kOurIp));
}

TEST_F(Udp6, DualStackTakesIpv4AsIpv4RecordsV6onlyAndIpv6AddressesDoNot)
{
    make();
    SockId dual = open6(5000), only = open6(5001, Ip6Addr{}, true), addr6 = open6(5002, kOurIp);
    SockId m = open6(5003, mapped(p().stack_ip));
    in4(D4{.sport = 4000, .dport = 5000, .data = "four", .tos = 0x20, .ttl = 9});
    UdpRecord r{};
    EXPECT_EQ(recv(dual, &r), "four");
    EXPECT_FALSE(r.flags & kUdpRecIp6); // a plain IPv4 record (the reader shows it v4-mapped)
    EXPECT_EQ(r.size, 64u);
    EXPECT_EQ(r.src_ip, p().peer_ip);
    EXPECT_EQ(r.dst_ip, p().stack_ip);
    EXPECT_EQ(r.src_port, 4000);
    EXPECT_EQ(r.flags, 0x20u << kUdpRecTosShift | 9u << kUdpRecTtlShift);
    in6(D6{.dport = 5000, .data = "six"});
    EXPECT_EQ(recv(dual, &r), "six");
    EXPECT_TRUE(r.flags & kUdpRecIp6);
    sent();
    // v6only, and an IPv6 address: no IPv4 (port unreachable, ICMP).
    in4(D4{.dport = 5001, .data = "x"});
    in4(D4{.dport = 5002, .data = "x"});
    EXPECT_EQ(recv(only), "<" + std::to_string(-EAGAIN) + ">");
    EXPECT_EQ(recv(addr6), "<" + std::to_string(-EAGAIN) + ">");
    EXPECT_EQ(stats().udp_no_port, 2u);
    in6(D6{.dport = 5001, .data = "only"});
    EXPECT_EQ(recv(only), "only");
    // v4-mapped: IPv4 to that address, nothing over IPv6.
    in4(D4{.dport = 5003, .data = "mapped"});
    EXPECT_EQ(recv(m, &r), "mapped");
    EXPECT_FALSE(r.flags & kUdpRecIp6);
    in6(D6{.dport = 5003, .data = "no"});
    EXPECT_EQ(recv(m), "<" + std::to_string(-EAGAIN) + ">");
    EXPECT_EQ(stats().udp_no_port, 3u);
    // An IPv4 socket beats a dual-stack one for IPv4 (Linux's family score),
    // the dual-stack one keeps IPv6.
    SockId d2 = open6(6000, Ip6Addr{}, false, true), v4 = open4(6000, 0, true);
    for (uint16_t sp = 1; sp <= 8; sp++) in4(D4{.sport = sp, .dport = 6000, .data = "4"});
    in6(D6{.dport = 6000, .data = "6"});
    UdpInfo a{}, b{};
    ASSERT_EQ(u().info(v4, &a), 0);
    ASSERT_EQ(u().info(d2, &b), 0);
    EXPECT_EQ(a.rx_datagrams, 8u);
    EXPECT_EQ(b.rx_datagrams, 1u);
    // IPv4 sends from IPv6 sockets: v4-mapped destinations.
    sent();
    Endpoint6 to4{mapped(p().peer_ip), 53};
    EXPECT_EQ(u().send_to6(dual, &to4, "q", 1), 1);
    EXPECT_EQ(u().send_to6(only, &to4, "q", 1), -ENETUNREACH); // v6only (Linux)
    EXPECT_EQ(u().send_to6(addr6, &to4, "q", 1), -ENETUNREACH);
    Endpoint6 to6{kPeerIp, 53};
    EXPECT_EQ(u().send_to6(m, &to6, "q", 1), -EAFNOSUPPORT); // a v4-mapped source
    EXPECT_EQ(u().send_to6(m, &to4, "q", 1), 1);
    SockId plain4 = open4(5100);
    EXPECT_EQ(u().send_to6(plain4, &to6, "q", 1), -EAFNOSUPPORT); // an IPv4 socket
    EXPECT_EQ(u().connect6(plain4, Endpoint6{kPeerIp, 1}), -EAFNOSUPPORT);
    EXPECT_EQ(u().connect6(only, Endpoint6{mapped(p().peer_ip), 1}), -ENETUNREACH);
    auto out = sent();
    ASSERT_EQ(out.udp4.size(), 2u);
    EXPECT_EQ(get32(out.udp4[0].data() + 30), p().peer_ip);
    EXPECT_EQ(get16(out.udp4[0].data() + 34), 5000);
    EXPECT_EQ(get16(out.udp4[1].data() + 34), 5003);
    EXPECT_TRUE(out.udp6.empty());
    // An unbound socket's first v4-mapped send binds :: dual-stack.
    int64_t fresh = u().open(1);
    EXPECT_EQ(u().send_to6(SockId(fresh), &to4, "q", 1), 1);
    UdpInfo fi{};
    ASSERT_EQ(u().info(SockId(fresh), &fi), 0);
    EXPECT_TRUE(fi.ipv6);
    EXPECT_TRUE(same(fi.local6.ip, Ip6Addr{}));
}

TEST_F(Udp6, NobodysPortIsAnsweredWithIcmpv6UnreachableOrHandedOnWhenShared)
{
    make();
    in6(D6{.sport = 4444, .dport = 53, .data = "query"});
    auto out = sent();
    ASSERT_EQ(out.icmp6.size(), 1u);
    const Sent e{out.icmp6[0]};
    EXPECT_EQ(e.type(), wire::kIcmp6Unreach);
    EXPECT_EQ(e.code(), wire::kUnreachPort);
    EXPECT_TRUE(e.csum_good());
    EXPECT_TRUE(same(e.dst(), kPeerIp));
    // Quoting our datagram: its IPv6 header, then the UDP ports.
    EXPECT_EQ(get16(e.l4() + 8 + 40), 4444);
    EXPECT_EQ(get16(e.l4() + 8 + 42), 53);
    EXPECT_EQ(stats().udp_no_port, 1u);

    make(4096, true); // sharing: the kernel's, unanswered here
    in6(D6{.dport = 53, .data = "query"});
    out = sent();
    EXPECT_TRUE(out.icmp6.empty());
    ASSERT_EQ(p().port().unclaimed_frames.size(), 1u);
    EXPECT_EQ(p().port().unclaimed_frames[0].why, Unclaimed::kIpv6);
    EXPECT_EQ(stats().udp_no_port, 0u);
    // ... and a socket of ours takes its own.
    SockId s = open6(5000);
    in6(D6{.dport = 5000, .data = "mine"});
    EXPECT_EQ(recv(s), "mine");
    EXPECT_EQ(p().port().unclaimed_frames.size(), 1u);
}

TEST_F(Udp6, SendToAnUnresolvedNeighbourWaitsForTheAdvertisement)
{
    make(4096, false, false); // the peer's MAC unknown
    SockId s = open6(5000);
    Endpoint6 dst{kPeerIp, 9};
    ASSERT_EQ(u().send_to6(s, &dst, "held", 4), 4);
    p().poll();
    auto raw = p().take_raw();
    ASSERT_EQ(raw.size(), 1u);
    EXPECT_EQ(Sent{raw[0]}.type(), wire::kNdNeighborSolicit);
    EXPECT_TRUE(same(Sent{raw[0]}.target(), kPeerIp));
    p().inject(eth(p().stack_mac, na(kPeerIp, kOurIp, kPeerIp, wire::kNaSolicited, p().peer_mac)));
    auto out = sent();
    ASSERT_EQ(out.udp6.size(), 1u);
    EXPECT_EQ(std::memcmp(out.udp6[0].data(), p().peer_mac.b, 6), 0);
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(out.udp6[0].data() + 62), 4), "held");
}

TEST_F(Udp6, RecordsOfBothFamiliesKeptWholeAcrossRingWrap)
{
    make(4096);
    SockId s = open6(5000);
    // Datagrams of varied sizes, the families alternating in runs, read one
    // behind for several laps of the 4 KiB ring.
    struct Want {
        bool v6;
        std::string d;
    };
    std::vector<Want> queue;
    int pads = 0, got = 0;
    auto check_front = [&](int i) {
        const Want &w = queue.front();
        RingSpan v{};
        ASSERT_EQ(u().rx_view(s, &v), 0);
        if (v.n[1]) pads++;
        UdpRecord6 a{};
        EXPECT_EQ(front6(s, &a), w.v6) << i;
        if (w.v6) {
            EXPECT_TRUE(same(a.src, kPeerIp) && same(a.dst, kOurIp)) << i;
        }
        UdpRecord r{};
        EXPECT_EQ(recv(s, &r, 1000), w.d) << i;
        EXPECT_EQ(bool(r.flags & kUdpRecIp6), w.v6) << i;
        EXPECT_EQ(r.size, udp_record_size(r.len, r.flags)) << i;
        if (!w.v6) {
            EXPECT_EQ(r.src_ip, p().peer_ip) << i;
        }
        queue.erase(queue.begin());
        got++;
    };
    for (int i = 0; i < 200; i++) {
        std::string d(size_t(1 + (i * 37) % 900), char('a' + i % 26));
        d[0] = char(i);
        const bool v6 = (i / 3) % 2 == 0;
        if (v6)
            in6(D6{.dport = 5000, .data = d});
        else
            in4(D4{.dport = 5000, .data = d});
        queue.push_back(Want{v6, d});
        if (i > 0) check_front(i);
    }
    while (!queue.empty()) check_front(999);
    EXPECT_EQ(got, 200);
    EXPECT_EQ(stats().udp_rcvbuf_errors, 0u);
    EXPECT_GT(pads, 0) << "the readable records never wrapped around the ring's end";
    // rx_consume walks IPv6 records by their size too.
    in6(D6{.dport = 5000, .data = "one"});
    in6(D6{.dport = 5000, .data = "two"});
    RingSpan v{};
    ASSERT_EQ(u().rx_view(s, &v), 0);
    UdpRecord r;
    std::memcpy(&r, v.p[0], sizeof r);
    EXPECT_EQ(r.size, 96u);
    EXPECT_EQ(u().rx_consume(s, 64), -EINVAL); // inside the record
    EXPECT_EQ(u().rx_consume(s, 96), 0);
    EXPECT_EQ(recv(s), "two");
}

TEST_F(Udp6, HostileRecordsInTheRingAreNotFollowed)
{
    make(4096);
    SockId s = open6(5000);
    auto scribble = [&](auto change) {
        RingSpan v{};
        ASSERT_EQ(u().rx_view(s, &v), 0);
        UdpRecord r;
        std::memcpy(&r, v.p[0], sizeof r);
        change(r);
        std::memcpy(v.p[0], &r, sizeof r);
    };
    // The IPv6 flag cleared: the size no longer fits the length.
    in6(D6{.dport = 5000, .data = std::string(40, 'x')});
    in6(D6{.dport = 5000, .data = "two"});
    scribble([](UdpRecord &r) { r.flags &= ~uint32_t(kUdpRecIp6); });
    EXPECT_EQ(u().rx_consume(s, 96), -EINVAL);
    EXPECT_EQ(recv(s), "<" + std::to_string(-EAGAIN) + ">"); // dropped, no hang
    // A length whose record size wraps around 2^32 to the record's own size.
    in6(D6{.dport = 5000, .data = "three"});
    in4(D4{.dport = 5000, .data = "four"});
    scribble([](UdpRecord &r) {
        r.flags = 0;
        r.size = 32;
        r.len = 0xffffffffu; // udp_record_size: (32 + len + 31) & ~31 == 32 mod 2^32
    });
    char buf[256];
    EXPECT_EQ(u().recv_from(s, buf, sizeof buf, nullptr, false), -EAGAIN);
    // The ring works on.
    in6(D6{.dport = 5000, .data = "five"});
    EXPECT_EQ(recv(s), "five");
}

TEST_F(Udp6, ReusePortSpreadsIpv6FlowsAndKeepsEachOnOneSocket)
{
    make(64 * 1024);
    std::vector<SockId> group;
    for (int i = 0; i < 4; i++) group.push_back(open6(7000, Ip6Addr{}, true, true, 1));
    std::map<SockId, int> count;
    for (int flow = 0; flow < 64; flow++) {
        for (int rep = 0; rep < 2; rep++)
            in6(D6{.sport = uint16_t(20000 + flow), .dport = 7000, .data = std::to_string(flow)});
        int holders = 0;
        for (SockId s : group) {
            UdpInfo in{};
            ASSERT_EQ(u().info(s, &in), 0);
            if (in.rx_datagrams) {
                holders++;
                EXPECT_EQ(in.rx_datagrams, 2u) << "flow " << flow << " was split";
                count[s]++;
                recv(s), recv(s);
            }
        }
        EXPECT_EQ(holders, 1) << flow;
    }
    ASSERT_EQ(count.size(), 4u) << "some member got no flow of 64";
}

TEST_F(Udp6, CloseAndTheStacksEndGiveEveryRingBack)
{
    make();
    SockId a = open6(5000);
    SockId b = open6(5001, kOurIp, true);
    in6(D6{.dport = 5000, .data = "queued"});
    ASSERT_EQ(u().close(a), 0);
    EXPECT_EQ(u().close(a), -EBADF);
    EXPECT_EQ(u().send_to6(a, nullptr, "x", 1), -EBADF);
    EXPECT_EQ(u().bind6(a, Endpoint6{}, false), -EBADF);
    EXPECT_EQ(u().connect6(a, Endpoint6{kPeerIp, 1}), -EBADF);
    EXPECT_EQ(bind6(5000), 0); // the port is free again
    (void)b;
    peer_->destroy_stack();
    EXPECT_EQ(peer_->rings().outstanding(), 0u);
}

} // namespace
