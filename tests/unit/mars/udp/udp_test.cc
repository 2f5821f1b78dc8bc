// UDP over IPv4 in MARS (mars/src/udp, issue 31) on the simulated wire: the
// peer is played with crafted frames (RawPeer, TEST FIXTURE), built here
// from RFC 768 / RFC 3376 independently of the stack's code; what the stack
// sends is parsed from its raw bytes. Virtual time only.
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>

namespace mars::sim {
namespace {

void put16(uint8_t *p, uint16_t v) { p[0] = uint8_t(v >> 8), p[1] = uint8_t(v); }
void put32(uint8_t *p, uint32_t v) { put16(p, uint16_t(v >> 16)), put16(p + 2, uint16_t(v)); }
uint16_t get16(const uint8_t *p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t get32(const uint8_t *p) { return uint32_t(get16(p)) << 16 | get16(p + 2); }

struct Dgram {
    uint32_t src = 0, dst = 0; // 0: the peer, the stack
    uint16_t sport = 40000, dport = 0;
    std::string data;
    bool zero_csum = false;   // send checksum 0 (none, RFC 768)
    bool bad_csum = false;
    int len_delta = 0;        // added to the UDP length field
    MacAddr dst_mac{};        // zero: the stack's (or the group's for a group)
    uint8_t tos = 0, ttl = 64;
};

class Udp : public ::testing::Test {
  protected:
    void make(uint32_t rcvbuf = 4096, bool share = false)
    {
        RawPeer::Options o;
        o.stack.tcp.rcvbuf = rcvbuf;
        o.stack.pass_unclaimed = share;
        o.keep_raw = true;
        peer_ = std::make_unique<RawPeer>(o);
        peer_->port().unclaimed_frames.clear();
        peer_->take_raw();
    }
    RawPeer &p() { return *peer_; }
    UdpSockets &u() { return peer_->stack().udp(); }
    const StackStats &stats() { return peer_->stack().stats(); }

    std::vector<uint8_t> frame(const Dgram &d)
    {
        const uint32_t src = d.src ? d.src : p().peer_ip, dst = d.dst ? d.dst : p().stack_ip;
        const size_t ulen = 8 + d.data.size();
        std::vector<uint8_t> v(14 + 20 + ulen, 0);
        MacAddr dm = d.dst_mac;
        if (dm == MacAddr{}) {
            if ((dst >> 28) == 14)
                dm = MacAddr{{0x01, 0x00, 0x5e, uint8_t((dst >> 16) & 0x7f), uint8_t(dst >> 8), uint8_t(dst)}};
            else
                dm = p().stack_mac;
        }
        std::memcpy(v.data(), dm.b, 6);
        std::memcpy(v.data() + 6, p().peer_mac.b, 6);
        v[12] = 0x08;
        uint8_t *ip = v.data() + 14;
        ip[0] = 0x45;
        ip[1] = d.tos;
        put16(ip + 2, uint16_t(20 + ulen));
        ip[6] = 0x40;
        ip[8] = d.ttl;
        ip[9] = 17;
        put32(ip + 12, src);
        put32(ip + 16, dst);
        fix_ip_checksum(v.data(), v.size());
        uint8_t *u = ip + 20;
        put16(u, d.sport);
        put16(u + 2, d.dport);
        put16(u + 4, uint16_t(int(ulen) + d.len_delta));
        std::memcpy(u + 8, d.data.data(), d.data.size());
        if (!d.zero_csum) {
            // pseudo header (RFC 768) + header + data, over the real length
            uint8_t ph[12];
            put32(ph, src), put32(ph + 4, dst);
            ph[8] = 0, ph[9] = 17;
            put16(ph + 10, uint16_t(ulen));
            uint16_t c = uint16_t(~csum_fold(csum_add(csum_add(0, ph, 12), u, ulen)));
            if (c == 0) c = 0xffff;
            if (d.bad_csum) c ^= 0x0101;
            put16(u + 6, c);
        }
        return v;
    }
    void inject(const Dgram &d) { p().inject(frame(d)); }
    std::string recv(SockId s, UdpRecord *rec = nullptr, size_t cap = 4096)
    {
        std::string buf(cap, '\0');
        int64_t n = u().recv_from(s, buf.data(), cap, rec, false);
        if (n < 0) return "<" + std::to_string(n) + ">";
        buf.resize(std::min<size_t>(size_t(n), cap));
        return buf;
    }
    SockId open_bound(uint16_t port, uint32_t ip = 0, bool reuse = false, uint64_t user = 1)
    {
        int64_t id = u().open(user);
        EXPECT_GE(id, 0);
        if (reuse) {
            EXPECT_EQ(u().set_option(SockId(id), SockOpt::kReusePort, 1), 0);
        }
        EXPECT_EQ(u().bind(SockId(id), Endpoint{ip, port}), 0);
        return SockId(id);
    }
    // UDP/IGMP/ICMP frames the stack sent since the last call (ARP skipped).
    struct Out {
        uint8_t proto;
        std::vector<uint8_t> b; // from the Ethernet header
        const uint8_t *ip() const { return b.data() + 14; }
        const uint8_t *l4() const { return ip() + (ip()[0] & 0xf) * 4; }
    };
    std::vector<Out> sent()
    {
        std::vector<Out> r;
        p().poll(); // what is queued leaves with the poll's transmit burst
        for (auto &f : p().take_raw())
            if (f.size() >= 34 && f[12] == 0x08 && f[13] == 0) r.push_back(Out{f[14 + 9], f});
        p().take();
        return r;
    }
    std::unique_ptr<RawPeer> peer_;
};

TEST_F(Udp, ReceivesDatagramsAsRecordsWithTheirSource)
{
    make();
    SockId s = open_bound(5000);
    EXPECT_EQ(u().recv_from(s, nullptr, 0, nullptr, false), -EAGAIN);
    p().take_events();
    inject(Dgram{.sport = 1234, .dport = 5000, .data = "hello"});
    inject(Dgram{.sport = 1235, .dport = 5000, .data = "", .zero_csum = true}); // RFC 768: no checksum
    EXPECT_TRUE(p().events_of(s) & kEvReadable);
    UdpRecord r{};
    EXPECT_EQ(recv(s, &r), "hello");
    EXPECT_EQ(r.len, 5u);
    EXPECT_EQ(r.src_ip, p().peer_ip);
    EXPECT_EQ(r.src_port, 1234);
    EXPECT_EQ(r.dst_ip, p().stack_ip);
    EXPECT_EQ(r.dst_port, 5000);
    EXPECT_EQ(r.ts_ns, p().now);
    EXPECT_EQ(r.flags, 64u << kUdpRecTtlShift); // TOS 0, TTL 64 (IP_RECVTOS, IP_RECVTTL)
    EXPECT_EQ(recv(s, &r), ""); // an empty datagram is a datagram
    EXPECT_EQ(r.src_port, 1235);
    inject(Dgram{.sport = 1236, .dport = 5000, .data = "x", .tos = 0xb8, .ttl = 3});
    EXPECT_EQ(recv(s, &r), "x");
    EXPECT_EQ((r.flags >> kUdpRecTosShift) & 0xff, 0xb8u);
    EXPECT_EQ((r.flags >> kUdpRecTtlShift) & 0xff, 3u);
    EXPECT_FALSE(r.flags & (kUdpRecPad | kUdpRecMulticast));
    EXPECT_EQ(recv(s), "<" + std::to_string(-EAGAIN) + ">");
    EXPECT_EQ(stats().udp_in, 3u);
}

TEST_F(Udp, BoundariesKeptAcrossRingWrap)
{
    make(4096);
    SockId s = open_bound(5000);
    // Datagrams of varied sizes, read one behind, for several laps of the
    // 4 KiB ring: every one comes out whole, in order, none merged or split.
    std::vector<std::string> queue;
    int sent = 0, got = 0, pads_seen = 0; // pads_seen: views in two spans (a pad record at the end)
    for (int i = 0; i < 200; i++) {
        std::string d(size_t(1 + (i * 37) % 900), char('a' + i % 26));
        d[0] = char(i);
        inject(Dgram{.dport = 5000, .data = d});
        queue.push_back(d);
        sent++;
        if (i > 0) { // one behind: the ring holds up to two datagrams
            RingSpan v{};
            ASSERT_EQ(u().rx_view(s, &v), 0);
            if (v.n[1]) pads_seen++;
            UdpRecord r{};
            EXPECT_EQ(recv(s, &r, 1000), queue.front()) << i;
            queue.erase(queue.begin());
            got++;
        }
    }
    while (!queue.empty()) {
        EXPECT_EQ(recv(s, nullptr, 1000), queue.front());
        queue.erase(queue.begin());
        got++;
    }
    EXPECT_EQ(got, sent);
    EXPECT_EQ(stats().udp_rcvbuf_errors, 0u);
    UdpInfo in{};
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_EQ(in.rx_datagrams, 0u);
    EXPECT_GT(pads_seen, 0) << "the readable records never wrapped around the ring's end";
}

TEST_F(Udp, ZeroCopyViewShowsWholeRecordsAndConsumesWholeRecords)
{
    make(4096);
    SockId s = open_bound(5000);
    inject(Dgram{.dport = 5000, .data = "one"});
    inject(Dgram{.dport = 5000, .data = std::string(100, 'x')});
    RingSpan v{};
    ASSERT_EQ(u().rx_view(s, &v), 0);
    ASSERT_EQ(v.total(), 32u + 32u + 160u);
    UdpRecord r;
    std::memcpy(&r, v.p[0], sizeof r);
    EXPECT_EQ(r.size, 64u);
    EXPECT_EQ(r.len, 3u);
    EXPECT_EQ(std::memcmp(v.p[0] + 32, "one", 3), 0);
    EXPECT_EQ(u().rx_consume(s, 40), -EINVAL); // not a record boundary
    EXPECT_EQ(u().rx_consume(s, 64), 0);
    EXPECT_EQ(recv(s), std::string(100, 'x'));
}

TEST_F(Udp, FullRingDropsWholeDatagramsAndCountsThem)
{
    make(4096);
    SockId s = open_bound(5000);
    // 1000-byte datagrams take 1056 bytes each: three fit in 4 KiB.
    for (int i = 0; i < 5; i++) inject(Dgram{.dport = 5000, .data = std::string(1000, char('0' + i))});
    EXPECT_EQ(stats().udp_rcvbuf_errors, 2u);
    UdpInfo in{};
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_EQ(in.drops, 2u);
    EXPECT_EQ(in.rx_datagrams, 3u);
    for (int i = 0; i < 3; i++) EXPECT_EQ(recv(s, nullptr, 2000), std::string(1000, char('0' + i)));
    EXPECT_EQ(u().recv_from(s, nullptr, 0, nullptr, false), -EAGAIN);
    // Room again: the next one is taken.
    inject(Dgram{.dport = 5000, .data = "again"});
    EXPECT_EQ(recv(s), "again");
}

TEST_F(Udp, TruncationKeepsTheRealLengthAndPeekLeavesIt)
{
    make();
    SockId s = open_bound(5000);
    inject(Dgram{.dport = 5000, .data = "0123456789"});
    char buf[4];
    UdpRecord r{};
    EXPECT_EQ(u().recv_from(s, buf, 4, &r, true), 10); // peek
    EXPECT_EQ(std::string(buf, 4), "0123");
    EXPECT_EQ(u().recv_from(s, buf, 4, &r, false), 10); // MSG_TRUNC: the real length
    EXPECT_EQ(std::string(buf, 4), "0123");
    EXPECT_EQ(u().recv_from(s, buf, 4, &r, false), -EAGAIN); // the rest is gone
}

TEST_F(Udp, ConnectFiltersReceivesAndSetsTheDefaultDestination)
{
    make();
    SockId s = open_bound(5000);
    ASSERT_EQ(u().connect(s, Endpoint{p().peer_ip, 7000}), 0);
    sent();
    inject(Dgram{.sport = 7001, .dport = 5000, .data = "other port"});
    inject(Dgram{.src = ipv4(198, 18, 0, 9), .sport = 7000, .dport = 5000, .data = "other host"});
    inject(Dgram{.sport = 7000, .dport = 5000, .data = "peer"});
    EXPECT_EQ(recv(s), "peer");
    EXPECT_EQ(u().recv_from(s, nullptr, 0, nullptr, false), -EAGAIN);
    EXPECT_EQ(stats().udp_no_port, 2u); // nobody else holds the port
    sent();
    EXPECT_EQ(u().send_to(s, nullptr, "hi", 2), 2);
    p().poll();
    auto out = sent();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(get32(out[0].ip() + 16), p().peer_ip);
    EXPECT_EQ(get16(out[0].l4() + 2), 7000);
    // Dissolved: everything again, and no default destination.
    ASSERT_EQ(u().connect(s, Endpoint{0, 0}), 0);
    inject(Dgram{.sport = 7001, .dport = 5000, .data = "any"});
    EXPECT_EQ(recv(s), "any");
    EXPECT_EQ(u().send_to(s, nullptr, "x", 1), -EDESTADDRREQ);
}

TEST_F(Udp, SendBuildsOneFrameWithAValidChecksum)
{
    make();
    int64_t id = u().open(1);
    ASSERT_GE(id, 0);
    SockId s = SockId(id);
    const std::string payload = "a datagram of odd length";
    Endpoint dst{p().peer_ip, 9999};
    EXPECT_EQ(u().send_to(s, &dst, payload.data(), payload.size()), int64_t(payload.size()));
    p().poll();
    auto out = sent();
    ASSERT_EQ(out.size(), 1u);
    const Out &f = out[0];
    ASSERT_EQ(f.proto, 17);
    const uint8_t *ip = f.ip(), *uh = f.l4();
    EXPECT_EQ(csum_fold(csum_add(0, ip, 20)), 0xffff);
    EXPECT_EQ(get16(ip + 6) & 0x4000, 0x4000); // DF
    const uint16_t ulen = get16(uh + 4);
    EXPECT_EQ(ulen, 8 + payload.size());
    UdpInfo in{};
    ASSERT_EQ(u().info(s, &in), 0);
    EXPECT_EQ(get16(uh), in.local.port); // bound to an ephemeral port by the send
    EXPECT_GE(in.local.port, 32768);
    EXPECT_EQ(get16(uh + 2), 9999);
    EXPECT_NE(get16(uh + 6), 0);
    uint8_t ph[12];
    put32(ph, get32(ip + 12)), put32(ph + 4, get32(ip + 16));
    ph[8] = 0, ph[9] = 17;
    put16(ph + 10, ulen);
    EXPECT_EQ(csum_fold(csum_add(csum_add(0, ph, 12), uh, ulen)), 0xffff);
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(uh + 8), payload.size()), payload);
    EXPECT_EQ(stats().udp_out, 1u);
    // Too large for one frame (never fragmented), and bad destinations.
    std::string big(1500 - 28 + 1, 'b');
    EXPECT_EQ(u().send_to(s, &dst, big.data(), big.size()), -EMSGSIZE);
    Endpoint zero_port{p().peer_ip, 0};
    EXPECT_EQ(u().send_to(s, &zero_port, "x", 1), -EINVAL);
}

// IP_TTL (kTtl) sets the TTL of the socket's unicast datagrams (Linux's
// range, -1 the default 64); a group's keep 1. SO_REUSEADDR set after bind
// lets a later socket share the port, as on Linux.
TEST_F(Udp, TtlOfUnicastSendsAndReuseAddrAfterBind)
{
    make();
    SockId s = open_bound(6100);
    for (int64_t bad : {int64_t(0), int64_t(256), int64_t(-2)})
        EXPECT_EQ(u().set_option(s, SockOpt::kTtl, bad), -EINVAL) << bad;
    EXPECT_EQ(u().set_option(s, SockOpt::kHopLimit, 256), -EINVAL);
    EXPECT_EQ(u().set_option(s, SockOpt::kHopLimit, 0), 0);
    ASSERT_EQ(u().set_option(s, SockOpt::kTtl, 7), 0);
    Endpoint dst{p().peer_ip, 9999}, group{ipv4(239, 1, 1, 1), 9999};
    EXPECT_EQ(u().send_to(s, &dst, "t", 1), 1);
    EXPECT_EQ(u().send_to(s, &group, "g", 1), 1);
    ASSERT_EQ(u().set_option(s, SockOpt::kTtl, -1), 0);
    EXPECT_EQ(u().send_to(s, &dst, "d", 1), 1);
    p().poll();
    auto out = sent();
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].ip()[8], 7);
    EXPECT_EQ(out[1].ip()[8], 1) << "a group's TTL stays IP_MULTICAST_TTL's 1";
    EXPECT_EQ(out[2].ip()[8], 64);

    int64_t b = u().open(1);
    ASSERT_GE(b, 0);
    ASSERT_EQ(u().set_option(SockId(b), SockOpt::kReuseAddr, 1), 0);
    EXPECT_EQ(u().bind(SockId(b), Endpoint{0, 6100}), -EADDRINUSE) << "the first socket has not set it";
    ASSERT_EQ(u().set_option(s, SockOpt::kReuseAddr, 1), 0) << "after bind, as Linux";
    EXPECT_EQ(u().bind(SockId(b), Endpoint{0, 6100}), 0);
}

// Sending to a group (IP_MULTICAST_TTL, IP_MULTICAST_LOOP): the TTL is the
// socket's kMulticastTtl (default 1); with kMulticastLoop (the default) the
// stack's own members of the group get a copy as if received, the sender
// too when it is one; TTL 0 keeps the datagram on the host (looped only);
// a group nobody here joined goes to the wire only.
TEST_F(Udp, MulticastSendTtlLoopAndHostOnly)
{
    make();
    const uint32_t grp = ipv4(239, 1, 1, 2);
    SockId member = open_bound(6200, 0, true);
    ASSERT_EQ(u().join(member, UdpGroup{grp, 0}), 0);
    sent(); // the IGMP report
    SockId sender = open_bound(6201, p().stack_ip); // the port's own address: takes no group
    for (int64_t bad : {int64_t(256), int64_t(-2)})
        EXPECT_EQ(u().set_option(sender, SockOpt::kMulticastTtl, bad), -EINVAL) << bad;
    EXPECT_EQ(u().set_option(sender, SockOpt::kMulticastLoop, 2), -EINVAL);
    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastTtl, 5), 0);
    Endpoint to{grp, 6200};
    ASSERT_EQ(u().send_to(sender, &to, "one", 3), 3);
    auto out = sent();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].ip()[8], 5) << "IP_MULTICAST_TTL";
    EXPECT_EQ(out[0].b[0], 0x01) << "to the group's MAC";
    EXPECT_EQ(get32(out[0].ip() + 16), grp);
    UdpRecord rec{};
    EXPECT_EQ(recv(member, &rec), "one") << "looped back to the host's member";
    EXPECT_EQ(rec.src_ip, p().stack_ip);
    EXPECT_EQ(rec.src_port, 6201);
    EXPECT_EQ((rec.flags >> kUdpRecTtlShift) & 0xff, 5u);
    EXPECT_TRUE(rec.flags & kUdpRecMulticast);
    EXPECT_EQ(u().recv_from(sender, nullptr, 0, nullptr, false), -EAGAIN);

    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastLoop, 0), 0);
    ASSERT_EQ(u().send_to(sender, &to, "two", 3), 3);
    EXPECT_EQ(sent().size(), 1u);
    EXPECT_EQ(u().recv_from(member, nullptr, 0, nullptr, false), -EAGAIN) << "IP_MULTICAST_LOOP 0: not looped";

    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastLoop, 1), 0);
    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastTtl, 0), 0);
    ASSERT_EQ(u().send_to(sender, &to, "three", 5), 5);
    EXPECT_TRUE(sent().empty()) << "TTL 0: the host only";
    EXPECT_EQ(recv(member), "three");

    // A sender on the wildcard of the group's port is a member by
    // IP_MULTICAST_ALL: it gets its own datagram back, as on Linux.
    SockId self = open_bound(6200, 0, true);
    ASSERT_EQ(u().set_option(sender, SockOpt::kMulticastTtl, -1), 0);
    ASSERT_EQ(u().send_to(self, &to, "four", 4), 4);
    out = sent();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].ip()[8], 1) << "the default IP_MULTICAST_TTL";
    EXPECT_EQ(recv(member), "four");
    EXPECT_EQ(recv(self), "four");

    // A group nobody here joined: the wire only.
    Endpoint other{ipv4(239, 1, 1, 3), 6200};
    ASSERT_EQ(u().send_to(sender, &other, "five", 4), 4);
    EXPECT_EQ(sent().size(), 1u);
    EXPECT_EQ(u().recv_from(member, nullptr, 0, nullptr, false), -EAGAIN);
    EXPECT_EQ(u().recv_from(self, nullptr, 0, nullptr, false), -EAGAIN);
}

TEST_F(Udp, BindRulesEphemeralAndReusePortOwners)
{
    make();
    SockId a = open_bound(6000);
    int64_t b = u().open(1);
    EXPECT_EQ(u().bind(SockId(b), Endpoint{0, 6000}), -EADDRINUSE);
    EXPECT_EQ(u().bind(SockId(b), Endpoint{ipv4(198, 18, 0, 77), 6001}), -EADDRNOTAVAIL);
    EXPECT_EQ(u().bind(SockId(b), Endpoint{0, 0}), 0);
    UdpInfo in{};
    ASSERT_EQ(u().info(SockId(b), &in), 0);
    EXPECT_GE(in.local.port, 32768);
    EXPECT_EQ(u().bind(SockId(b), Endpoint{0, 6002}), -EINVAL); // bound already
    EXPECT_EQ(u().close(a), 0);
    EXPECT_EQ(u().info(a, &in), -EBADF); // the id is gone
    p().poll();
    EXPECT_TRUE(p().take_events()[a] & kEvClosed);
    SockId c = open_bound(6000, 0, true);
    SockId d = open_bound(6000, 0, true);
    (void)c, (void)d;
    // A reuseport socket of another owner is refused.
    RawPeer::Options o;
    o.stack.owner_of = [](uint64_t user, void *) { return uint32_t(user); };
    o.keep_raw = true;
    peer_ = std::make_unique<RawPeer>(o);
    SockId e = open_bound(6000, 0, true, 5);
    (void)e;
    int64_t f = u().open(6);
    ASSERT_EQ(u().set_option(SockId(f), SockOpt::kReusePort, 1), 0);
    EXPECT_EQ(u().bind(SockId(f), Endpoint{0, 6000}), -EADDRINUSE);
    int64_t g = u().open(5);
    ASSERT_EQ(u().set_option(SockId(g), SockOpt::kReusePort, 1), 0);
    EXPECT_EQ(u().bind(SockId(g), Endpoint{0, 6000}), 0);
    EXPECT_EQ(u().set_option(SockId(g), SockOpt::kNoDelay, 1), -ENOPROTOOPT);
}

TEST_F(Udp, ReusePortSpreadsByFourTupleAndKeepsAFlowOnOneSocket)
{
    make(64 * 1024);
    std::vector<SockId> group;
    for (int i = 0; i < 4; i++) group.push_back(open_bound(7000, 0, true, uint64_t(10 + i)));
    std::map<SockId, int> count;
    for (int flow = 0; flow < 64; flow++) {
        for (int rep = 0; rep < 2; rep++)
            inject(Dgram{.sport = uint16_t(20000 + flow), .dport = 7000, .data = std::to_string(flow)});
        int holders = 0;
        for (SockId s : group) {
            UdpInfo in{};
            ASSERT_EQ(u().info(s, &in), 0);
            if (in.rx_datagrams) {
                holders++;
                EXPECT_EQ(in.rx_datagrams, 2u) << "flow " << flow << " was split";
                count[s]++;
                EXPECT_EQ(recv(s), std::to_string(flow));
                EXPECT_EQ(recv(s), std::to_string(flow));
            }
        }
        EXPECT_EQ(holders, 1) << flow;
    }
    ASSERT_EQ(count.size(), 4u) << "some member got no flow of 64";
    for (auto &[s, n] : count) EXPECT_GE(n, 4) << "member " << s << " got " << n << " of 64 flows";
}

TEST_F(Udp, MulticastFansOutToEveryMemberAndDropsUnjoinedGroups)
{
    make();
    const uint32_t grp = ipv4(239, 1, 2, 3), other = ipv4(239, 1, 2, 4);
    SockId a = open_bound(5353, 0, true), b = open_bound(5353, 0, true), c = open_bound(5353, grp, true);
    SockId nonmember = open_bound(5353, 0, true);
    SockId ssm = open_bound(5353, 0, true);
    ASSERT_EQ(u().set_option(nonmember, SockOpt::kMulticastAll, 0), 0); // its own memberships only
    sent();
    ASSERT_EQ(u().join(a, UdpGroup{grp, 0}), 0);
    EXPECT_EQ(u().join(a, UdpGroup{grp, 0}), -EADDRINUSE);
    EXPECT_EQ(u().join(a, UdpGroup{ipv4(10, 0, 0, 1), 0}), -EINVAL);
    ASSERT_EQ(u().join(b, UdpGroup{grp, 0}), 0);
    ASSERT_EQ(u().join(c, UdpGroup{grp, 0}), 0);
    ASSERT_EQ(u().join(ssm, UdpGroup{grp, ipv4(198, 18, 0, 50)}), 0); // only from .50
    inject(Dgram{.dst = grp, .dport = 5353, .data = "to the group"});
    for (SockId s : {a, b, c}) {
        UdpRecord r{};
        EXPECT_EQ(recv(s, &r), "to the group") << s;
        EXPECT_EQ(r.dst_ip, grp);
        EXPECT_TRUE(r.flags & kUdpRecMulticast);
    }
    EXPECT_EQ(u().recv_from(nonmember, nullptr, 0, nullptr, false), -EAGAIN);
    EXPECT_EQ(u().recv_from(ssm, nullptr, 0, nullptr, false), -EAGAIN); // wrong source
    EXPECT_EQ(stats().udp_in, 3u);
    EXPECT_EQ(stats().udp_mcast_in, 1u);
    inject(Dgram{.src = ipv4(198, 18, 0, 50), .dst = grp, .dport = 5353, .data = "ssm"});
    for (SockId s : {a, b, c, ssm}) EXPECT_EQ(recv(s), "ssm") << s; // any-source members too
    // A group nobody joined: dropped, nothing answered.
    const uint64_t not_ours = stats().drop_not_ours;
    sent();
    inject(Dgram{.dst = other, .dport = 5353, .data = "nobody"});
    EXPECT_EQ(stats().drop_not_ours, not_ours + 1);
    EXPECT_TRUE(sent().empty());
    // After leaving, a member without kMulticastAll gets nothing.
    ASSERT_EQ(u().leave(a, UdpGroup{grp, 0}), 0);
    EXPECT_EQ(u().leave(a, UdpGroup{grp, 0}), -EADDRNOTAVAIL);
    ASSERT_EQ(u().set_option(a, SockOpt::kMulticastAll, 0), 0);
    inject(Dgram{.dst = grp, .dport = 5353, .data = "later"});
    EXPECT_EQ(u().recv_from(a, nullptr, 0, nullptr, false), -EAGAIN);
    EXPECT_EQ(recv(b), "later");
}

// Linux's IP_MULTICAST_ALL (on by default): a socket bound to the wildcard
// or to the group that holds no membership of the group still gets its
// datagrams once another socket of the stack joined it; off, it gets only
// its own memberships' (kMulticastAll 0). A source filter of its own
// decides for a member whatever the flag.
TEST_F(Udp, MulticastAllGivesJoinedGroupsToSocketsThatDidNotJoin)
{
    make();
    const uint32_t grp = ipv4(239, 7, 7, 7);
    SockId joiner = open_bound(5400, 0, true), wild = open_bound(5400, 0, true), at_grp = open_bound(5400, grp, true);
    SockId off = open_bound(5400, 0, true), ssm = open_bound(5400, 0, true);
    ASSERT_EQ(u().set_option(off, SockOpt::kMulticastAll, 0), 0);
    EXPECT_EQ(u().set_option(off, SockOpt::kMulticastAll, -1), -EINVAL);
    // Nobody joined yet: not ours, for nobody.
    inject(Dgram{.dst = grp, .dport = 5400, .data = "early"});
    for (SockId s : {joiner, wild, at_grp, off, ssm}) EXPECT_EQ(u().recv_from(s, nullptr, 0, nullptr, false), -EAGAIN);
    ASSERT_EQ(u().join(joiner, UdpGroup{grp, 0}), 0);
    ASSERT_EQ(u().join(ssm, UdpGroup{grp, ipv4(198, 18, 0, 50)}), 0);
    ASSERT_EQ(u().set_option(ssm, SockOpt::kMulticastAll, 1), 0);
    const uint64_t in0 = stats().udp_in;
    inject(Dgram{.dst = grp, .dport = 5400, .data = "feed"});
    for (SockId s : {joiner, wild, at_grp}) EXPECT_EQ(recv(s), "feed") << s;
    EXPECT_EQ(u().recv_from(off, nullptr, 0, nullptr, false), -EAGAIN);
    EXPECT_EQ(u().recv_from(ssm, nullptr, 0, nullptr, false), -EAGAIN); // its filter decides
    EXPECT_EQ(stats().udp_in, in0 + 3);
    EXPECT_EQ(stats().udp_mcast_in, 1u);
    // The last member leaves: the group is nobody's again.
    ASSERT_EQ(u().leave(joiner, UdpGroup{grp, 0}), 0);
    ASSERT_EQ(u().leave(ssm, UdpGroup{grp, ipv4(198, 18, 0, 50)}), 0);
    const uint64_t not_ours = stats().drop_not_ours;
    inject(Dgram{.dst = grp, .dport = 5400, .data = "late"});
    EXPECT_EQ(stats().drop_not_ours, not_ours + 1);
    EXPECT_EQ(u().recv_from(wild, nullptr, 0, nullptr, false), -EAGAIN);
}

TEST_F(Udp, ReuseAddrSocketsShareAPortAndEachMemberGetsTheGroup)
{
    make();
    const uint32_t grp = ipv4(239, 5, 5, 5);
    std::vector<SockId> s;
    for (uint64_t user : {1, 2}) { // different owners: SO_REUSEADDR has no owner rule
        int64_t id = u().open(user);
        ASSERT_GE(id, 0);
        ASSERT_EQ(u().set_option(SockId(id), SockOpt::kReuseAddr, 1), 0);
        ASSERT_EQ(u().bind(SockId(id), Endpoint{0, 6100}), 0);
        ASSERT_EQ(u().join(SockId(id), UdpGroup{grp, 0}), 0);
        s.push_back(SockId(id));
    }
    int64_t plain = u().open(3);
    EXPECT_EQ(u().bind(SockId(plain), Endpoint{0, 6100}), -EADDRINUSE); // one without it
    inject(Dgram{.dst = grp, .dport = 6100, .data = "feed"});
    EXPECT_EQ(recv(s[0]), "feed");
    EXPECT_EQ(recv(s[1]), "feed");
    inject(Dgram{.dport = 6100, .data = "unicast"}); // one of them
    UdpInfo a{}, b{};
    ASSERT_EQ(u().info(s[0], &a), 0);
    ASSERT_EQ(u().info(s[1], &b), 0);
    EXPECT_EQ(a.rx_datagrams + b.rx_datagrams, 1u);
}

TEST_F(Udp, Igmpv3ReportsOnJoinLeaveAndQueries)
{
    make();
    const uint32_t grp = ipv4(239, 9, 9, 9);
    SockId a = open_bound(5000), b = open_bound(5001);
    sent();
    // A record of the report: type, sources, group.
    auto records = [&](const Out &f) {
        std::vector<std::tuple<uint8_t, uint16_t, uint32_t>> r;
        const uint8_t *ip = f.ip();
        EXPECT_EQ(ip[0], 0x46); // with the Router Alert option
        EXPECT_EQ(get32(ip + 20), 0x94040000u);
        EXPECT_EQ(ip[8], 1); // TTL 1
        EXPECT_EQ(get32(ip + 16), ipv4(224, 0, 0, 22));
        EXPECT_EQ(std::memcmp(f.b.data(), "\x01\x00\x5e\x00\x00\x16", 6), 0);
        const uint8_t *g = f.l4();
        const size_t len = get16(ip + 2) - 24;
        EXPECT_EQ(csum_fold(csum_add(0, g, len)), 0xffff);
        EXPECT_EQ(g[0], 0x22);
        const uint8_t *rec = g + 8;
        for (int i = 0; i < get16(g + 6); i++) {
            r.emplace_back(rec[0], get16(rec + 2), get32(rec + 4));
            rec += 8 + 4 * get16(rec + 2);
        }
        return r;
    };
    ASSERT_EQ(u().join(a, UdpGroup{grp, 0}), 0);
    auto out = sent();
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].proto, 2);
    auto r = records(out[0]);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], std::make_tuple(uint8_t(4), uint16_t(0), grp)); // CHANGE_TO_EXCLUDE {}
    ASSERT_EQ(u().join(b, UdpGroup{grp, 0}), 0);
    EXPECT_EQ(sent().size(), 1u); // (the filter is unchanged; a report all the same)
    // A general query (IGMPv3, 12 bytes) to 224.0.0.1: a current-state report.
    std::vector<uint8_t> q(14 + 20 + 12, 0);
    const uint8_t qmac[6] = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x01};
    std::memcpy(q.data(), qmac, 6);
    std::memcpy(q.data() + 6, p().peer_mac.b, 6);
    q[12] = 0x08;
    uint8_t *ip = q.data() + 14;
    ip[0] = 0x45, ip[8] = 1, ip[9] = 2;
    put16(ip + 2, 32);
    put32(ip + 12, p().peer_ip), put32(ip + 16, ipv4(224, 0, 0, 1));
    fix_ip_checksum(q.data(), q.size());
    uint8_t *g = ip + 20;
    g[0] = 0x11, g[1] = 100;
    put16(g + 2, uint16_t(~csum_fold(csum_add(0, g, 12))));
    p().inject(q);
    out = sent();
    ASSERT_EQ(out.size(), 1u);
    r = records(out[0]);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], std::make_tuple(uint8_t(2), uint16_t(0), grp)); // MODE_IS_EXCLUDE {}
    EXPECT_EQ(stats().igmp_in, 1u);
    // The last member leaves (by close): CHANGE_TO_INCLUDE {}.
    ASSERT_EQ(u().leave(a, UdpGroup{grp, 0}), 0);
    sent();
    ASSERT_EQ(u().close(b), 0);
    out = sent();
    ASSERT_EQ(out.size(), 1u);
    r = records(out[0]);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], std::make_tuple(uint8_t(3), uint16_t(0), grp));
}

TEST_F(Udp, BadChecksumAndMalformedLengthsAreDroppedAndCounted)
{
    make();
    SockId s = open_bound(5000);
    inject(Dgram{.dport = 5000, .data = "bad", .bad_csum = true});
    EXPECT_EQ(stats().udp_csum_errors, 1u);
    inject(Dgram{.dport = 5000, .data = "short", .zero_csum = true, .len_delta = -6}); // length field 7 < 8
    inject(Dgram{.dport = 5000, .data = "long", .zero_csum = true, .len_delta = 1});   // past the IPv4 payload
    EXPECT_EQ(stats().udp_header_errors, 2u);
    // A length field shorter than the payload (but >= 8): the rest is padding.
    inject(Dgram{.dport = 5000, .data = "keep+pad", .zero_csum = true, .len_delta = -4});
    EXPECT_EQ(recv(s), "keep");
    EXPECT_EQ(u().recv_from(s, nullptr, 0, nullptr, false), -EAGAIN);
    EXPECT_TRUE(sent().empty()) << "a dropped datagram was answered";
    // The NIC's verdict is taken: a frame flagged good is not summed again.
    auto f = frame(Dgram{.dport = 5000, .data = "nic", .bad_csum = true});
    p().inject(f, kRxL4CsumGood | kRxIpCsumGood);
    EXPECT_EQ(recv(s), "nic");
}

TEST_F(Udp, PortUnreachableForNobodysPortRateLimitedAndNotWhenShared)
{
    make();
    inject(Dgram{.sport = 4444, .dport = 53, .data = "query"});
    auto out = sent();
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].proto, 1);
    EXPECT_EQ(out[0].l4()[0], 3); // destination unreachable
    EXPECT_EQ(out[0].l4()[1], 3); // port
    // Quoting our datagram's header: the UDP ports after the IPv4 header.
    EXPECT_EQ(get16(out[0].l4() + 8 + 20), 4444);
    EXPECT_EQ(get16(out[0].l4() + 8 + 22), 53);
    EXPECT_EQ(stats().udp_no_port, 1u);
    // A flood at one instant: the burst (50) and no more.
    for (int i = 0; i < 100; i++) inject(Dgram{.dport = 53, .data = "q"});
    out = sent();
    EXPECT_EQ(out.size(), 49u); // the first of the burst went above
    EXPECT_EQ(stats().udp_unreach_limited, 51u);
    // A second later the bucket has refilled.
    p().advance(1'000'000'000);
    inject(Dgram{.dport = 53, .data = "q"});
    EXPECT_EQ(sent().size(), 1u);

    make(4096, true); // sharing: handed to the other stack, unanswered
    inject(Dgram{.dport = 53, .data = "query"});
    EXPECT_TRUE(sent().empty());
    ASSERT_EQ(p().port().unclaimed_frames.size(), 1u);
    EXPECT_EQ(p().port().unclaimed_frames[0].why, Unclaimed::kUdp);
    EXPECT_EQ(stats().udp_no_port, 0u);
}

TEST_F(Udp, ClosedIdsAndBadArgumentsAreRefused)
{
    make();
    SockId s = open_bound(5000);
    ASSERT_EQ(u().close(s), 0);
    EXPECT_EQ(u().close(s), -EBADF);
    EXPECT_EQ(u().send_to(s, nullptr, "x", 1), -EBADF);
    EXPECT_EQ(u().recv_from(s, nullptr, 0, nullptr, false), -EBADF);
    EXPECT_EQ(u().bind(kNoSock, Endpoint{0, 1}), -EBADF);
    // A TCP id is not a UDP id and the other way round.
    int64_t t = p().stack().open(1);
    ASSERT_GE(t, 0);
    EXPECT_EQ(u().close(SockId(t)), -EBADF);
    SockId s2 = open_bound(5001);
    EXPECT_EQ(p().stack().close(s2), -EBADF);
    // The socket's ring came back at close; every ring at the stack's end.
    peer_->destroy_stack();
    EXPECT_EQ(peer_->rings().outstanding(), 0u);
}

TEST_F(Udp, EventsOfAClosedSocketAndOfItsSlotsNextSocket)
{
    make();
    SockId a = open_bound(5000);
    p().poll();
    p().take_events();
    p().input_only({frame(Dgram{.dport = 5000, .data = "for a"})}); // a is listed, not drained
    ASSERT_EQ(u().close(a), 0);
    int64_t b = u().open(2); // the same slot, another id
    ASSERT_GE(b, 0);
    ASSERT_NE(SockId(b), a);
    ASSERT_EQ(u().bind(SockId(b), Endpoint{0, 5000}), 0);
    p().input_only({frame(Dgram{.dport = 5000, .data = "for b"})});
    p().poll();
    auto ev = p().take_events();
    EXPECT_EQ(ev[a], uint32_t(kEvClosed));
    EXPECT_EQ(ev[SockId(b)], uint32_t(kEvWritable | kEvReadable));
    EXPECT_EQ(recv(SockId(b)), "for b");
}

TEST_F(Udp, ScribbledRecordInTheRingIsNotFollowed)
{
    make(4096);
    SockId s = open_bound(5000);
    inject(Dgram{.dport = 5000, .data = "one"});
    inject(Dgram{.dport = 5000, .data = "two"});
    RingSpan v{};
    ASSERT_EQ(u().rx_view(s, &v), 0);
    UdpRecord r;
    std::memcpy(&r, v.p[0], sizeof r);
    r.size = 0; // the application's memory: it may write anything
    std::memcpy(v.p[0], &r, sizeof r);
    EXPECT_EQ(u().recv_from(s, nullptr, 0, nullptr, false), -EAGAIN); // dropped, no hang
    EXPECT_EQ(u().rx_consume(s, 64), -EINVAL);
    inject(Dgram{.dport = 5000, .data = "three"});
    EXPECT_EQ(recv(s), "three");
}

} // namespace
} // namespace mars::sim
