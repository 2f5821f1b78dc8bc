// Sharing the address with another stack (StackConfig::pass_unclaimed,
// PacketIo::unclaimed; mars/README.md "Sharing the port"), on the simulated
// wire: each class of frame the stack does not claim is handed back with its
// reason, byte for byte and unanswered, and with the option off the stack
// answers or drops it exactly as before (RST, ICMP unreachable, echo reply).
// The peer is played with crafted frames (RawPeer); the SimPort records what
// is handed back (TEST FIXTURE).
#include "tcp_fixture.h"

#include <cstring>

namespace mars::sim {
namespace {

const MacAddr kBcast{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};

class Share : public Tcp {
  protected:
    void SetUp() override {}
    void make_stack(bool share)
    {
        RawPeer::Options o;
        o.stack.pass_unclaimed = share;
        make(o);
        p().port().unclaimed_frames.clear(); // (the introducing ARP request)
    }
    std::vector<SimPort::UnclaimedFrame> &handed() { return p().port().unclaimed_frames; }
    // Injects a frame; expects it handed back once, byte for byte, for `why`,
    // and nothing sent.
    void expect_handed(const std::vector<uint8_t> &f, Unclaimed why, const char *what)
    {
        handed().clear();
        p().inject(f);
        ASSERT_EQ(handed().size(), 1u) << what;
        EXPECT_EQ(handed()[0].why, why) << what;
        EXPECT_EQ(handed()[0].bytes, f) << what;
        auto out = p().take();
        EXPECT_TRUE(out.empty()) << what << ": the stack answered " << out[0].describe();
    }
    // An IPv4 frame of protocol `proto` with `payload` after the IPv4 header.
    std::vector<uint8_t> ip_frame(uint8_t proto, const std::vector<uint8_t> &payload, uint32_t dst = 0,
                                  MacAddr dst_mac = MacAddr{}, uint16_t frag = 0x4000)
    {
        std::vector<uint8_t> v(14 + 20 + payload.size(), 0);
        const MacAddr dm = dst == 0 && dst_mac == MacAddr{} ? p().stack_mac : dst_mac;
        std::memcpy(v.data(), dm.b, 6);
        std::memcpy(v.data() + 6, p().peer_mac.b, 6);
        v[12] = 0x08;
        uint8_t *ip = v.data() + 14;
        ip[0] = 0x45;
        const uint16_t total = uint16_t(20 + payload.size());
        ip[2] = uint8_t(total >> 8);
        ip[3] = uint8_t(total);
        ip[6] = uint8_t(frag >> 8);
        ip[7] = uint8_t(frag);
        ip[8] = 64;
        ip[9] = proto;
        const uint32_t src = p().peer_ip, d = dst ? dst : p().stack_ip;
        for (int i = 0; i < 4; i++) {
            ip[12 + i] = uint8_t(src >> (24 - 8 * i));
            ip[16 + i] = uint8_t(d >> (24 - 8 * i));
        }
        if (!payload.empty()) std::memcpy(ip + 20, payload.data(), payload.size());
        fix_ip_checksum(v.data(), v.size());
        return v;
    }
    std::vector<uint8_t> udp(uint16_t dport, uint32_t dst = 0, MacAddr dst_mac = MacAddr{})
    {
        std::vector<uint8_t> u(8 + 5, 0);
        u[0] = 0x9c, u[1] = 0x40; // 40000
        u[2] = uint8_t(dport >> 8), u[3] = uint8_t(dport);
        u[5] = uint8_t(u.size());
        std::memcpy(u.data() + 8, "hello", 5);
        return ip_frame(17, u, dst, dst_mac);
    }
    std::vector<uint8_t> eth_frame(MacAddr dst, uint16_t type, size_t len = 60)
    {
        std::vector<uint8_t> v(len, 0x5a);
        std::memcpy(v.data(), dst.b, 6);
        std::memcpy(v.data() + 6, p().peer_mac.b, 6);
        v[12] = uint8_t(type >> 8);
        v[13] = uint8_t(type);
        return v;
    }
    TcpSpec tcp_to(uint16_t dport, uint8_t flags, uint16_t sport = 41000)
    {
        TcpSpec t;
        t.src_mac = p().peer_mac;
        t.dst_mac = p().stack_mac;
        t.src_ip = p().peer_ip;
        t.dst_ip = p().stack_ip;
        t.sport = sport;
        t.dport = dport;
        t.seq = 1000;
        t.ack = (flags & kAck) ? 5000 : 0;
        t.flags = flags;
        return t;
    }
    IcmpSpec ping() { return IcmpSpec{p().peer_mac, p().stack_mac, p().peer_ip, p().stack_ip, 8, 0, 0x12340001, bytes(56, 26)}; }
};

TEST_F(Share, TcpToAPortWithoutSocket)
{
    make_stack(true);
    expect_handed(build_tcp(tcp_to(22, kSyn)), Unclaimed::kTcpOtherPort, "SYN to a kernel server's port");
    // A kernel client's connection: its SYN-ACK and data come to an
    // ephemeral port MARS has no socket on.
    expect_handed(build_tcp(tcp_to(45000, kSyn | kAck)), Unclaimed::kTcpOtherPort, "SYN-ACK for a kernel client");
    auto data = tcp_to(45000, kAck | kPsh);
    data.payload = bytes(100, 3);
    expect_handed(build_tcp(data), Unclaimed::kTcpOtherPort, "data of a kernel connection");
    expect_handed(build_tcp(tcp_to(45000, kRst | kAck)), Unclaimed::kTcpOtherPort, "RST of a kernel connection");
    EXPECT_EQ(st().stats().tcp_resets_out, 0u);
    EXPECT_EQ(st().stats().drop_tcp_no_socket, 0u);

    // Off: today's behaviour, RST and nothing handed back.
    make_stack(false);
    p().inject(build_tcp(tcp_to(22, kSyn)));
    auto out = p().take();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].is_tcp && out[0].has(kRst)) << out[0].describe();
    EXPECT_TRUE(handed().empty());
    EXPECT_EQ(st().stats().drop_tcp_no_socket, 1u);
}

TEST_F(Share, ListenersAndConnectionsStayTheStacks)
{
    make_stack(true);
    Conn c;
    SockId s = passive(&c); // listener on 80, a connection from the peer
    p().send(c, kAck | kPsh, bytes(300, 4));
    EXPECT_EQ(info(s).rx_readable, 300u);
    // A second SYN to the listener is answered here.
    p().inject(build_tcp(tcp_to(80, kSyn)));
    auto out = p().take_tcp();
    ASSERT_FALSE(out.empty());
    EXPECT_TRUE(out.back().has(kSyn | kAck)) << out.back().describe();
    // A stray ACK to the listener's port (no connection) is the stack's too: RST.
    p().inject(build_tcp(tcp_to(80, kAck, 41001)));
    out = p().take_tcp();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].has(kRst)) << out[0].describe();
    EXPECT_TRUE(handed().empty()) << "a frame of an eta listener or connection was handed back";
}

TEST_F(Share, UdpAndOtherProtocols)
{
    make_stack(true);
    expect_handed(udp(53), Unclaimed::kUdp, "UDP");
    expect_handed(ip_frame(47, bytes(24, 5)), Unclaimed::kOther, "GRE");
    expect_handed(udp(67, 0xffffffffu, kBcast), Unclaimed::kUdp, "UDP broadcast");
    expect_handed(udp(5353, ipv4(224, 0, 0, 251), MacAddr{{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}}), Unclaimed::kUdp,
                  "UDP multicast");
    expect_handed(ip_frame(17, bytes(16, 6), 0, MacAddr{}, 0x2000), Unclaimed::kUdp, "a UDP fragment");
    EXPECT_EQ(st().stats().icmp_out, 0u);

    make_stack(false);
    p().inject(udp(53));
    auto out = p().take();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].is_icmp && out[0].icmp_type == 3 && out[0].icmp_code == 3) << out[0].describe(); // port unreachable (mars/src/udp)
    p().inject(udp(5353, ipv4(224, 0, 0, 251), MacAddr{{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}}));
    EXPECT_TRUE(p().take().empty());
    EXPECT_TRUE(handed().empty());
    EXPECT_EQ(st().stats().drop_not_ours, 1u); // (multicast MAC: not for a lone stack)
}

TEST_F(Share, IcmpEchoGoesToTheOtherStackErrorsToBoth)
{
    make_stack(true);
    expect_handed(build_icmp(ping()), Unclaimed::kIcmp, "echo request");
    IcmpSpec reply = ping();
    reply.type = 0;
    expect_handed(build_icmp(reply), Unclaimed::kIcmp, "echo reply");
    // An error quoting an eta connection: the stack uses it (path MTU) and
    // hands a copy on.
    Conn c;
    SockId s = passive(&c);
    auto data = bytes(1448, 27);
    ASSERT_EQ(st().send(s, data.data(), data.size()), 1448);
    p().poll();
    auto segs = p().take_conn(c);
    ASSERT_EQ(segs.size(), 1u);
    TcpSpec quoted;
    quoted.src_mac = p().stack_mac;
    quoted.dst_mac = p().peer_mac;
    quoted.src_ip = p().stack_ip;
    quoted.dst_ip = p().peer_ip;
    quoted.sport = c.stack_port;
    quoted.dport = c.peer_port;
    quoted.seq = segs[0].seq;
    quoted.ack = segs[0].ack;
    quoted.flags = kAck;
    auto q = build_tcp(quoted);
    IcmpSpec fn{p().peer_mac, p().stack_mac, ipv4(198, 18, 0, 254), p().stack_ip, 3, 4, 1200,
                std::vector<uint8_t>(q.begin() + 14, q.begin() + 14 + 28)};
    handed().clear();
    const auto fnf = build_icmp(fn);
    p().inject(fnf);
    EXPECT_EQ(st().stats().icmp_frag_needed_in, 1u);
    EXPECT_LE(info(s).snd_mss, 1200u - 40u);
    ASSERT_EQ(handed().size(), 1u);
    EXPECT_EQ(handed()[0].why, Unclaimed::kIcmp);
    EXPECT_EQ(handed()[0].bytes, fnf);
    // A malformed one (bad checksum) is dropped either way.
    auto bad = build_icmp(ping());
    bad[14 + 20 + 2] ^= 0xff;
    handed().clear();
    p().inject(bad);
    EXPECT_TRUE(handed().empty());

    make_stack(false);
    p().inject(build_icmp(ping()));
    auto out = p().take();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].is_icmp && out[0].icmp_type == 0) << out[0].describe();
    EXPECT_TRUE(handed().empty());
}

TEST_F(Share, ArpIsAnsweredAndHandedOn)
{
    make_stack(true);
    ArpSpec req{p().peer_mac, kBcast, 1, p().peer_mac, MacAddr{}, p().peer_ip, p().stack_ip};
    const auto reqf = build_arp(req);
    handed().clear();
    p().inject(reqf);
    auto out = p().take();
    ASSERT_EQ(out.size(), 1u) << "the stack answers ARP for its address";
    EXPECT_TRUE(out[0].is_arp && out[0].arp_op == 2 && out[0].arp_sha == p().stack_mac);
    ASSERT_EQ(handed().size(), 1u) << "the other stack gets the request too";
    EXPECT_EQ(handed()[0].why, Unclaimed::kArp);
    EXPECT_EQ(handed()[0].bytes, reqf);
    // A reply (to the other stack's request): both learn from it. The stack
    // then connects to that host without asking.
    const uint32_t other = ipv4(198, 18, 0, 9);
    const MacAddr other_mac = mac(9);
    const auto repf = build_arp(ArpSpec{other_mac, p().stack_mac, 2, other_mac, p().stack_mac, other, p().stack_ip});
    expect_handed(repf, Unclaimed::kArp, "ARP reply");
    int64_t sk = st().open(7);
    ASSERT_GE(sk, 0);
    ASSERT_EQ(st().connect(SockId(sk), Endpoint{other, 80}, p().now), 0);
    p().poll();
    out = p().take();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].is_tcp && out[0].has(kSyn)) << out[0].describe();
    EXPECT_TRUE(out[0].eth_dst == other_mac) << "the stack did not learn from the reply";
    // A request for someone else's address: no answer here, the other stack sees it.
    expect_handed(build_arp(ArpSpec{p().peer_mac, kBcast, 1, p().peer_mac, MacAddr{}, p().peer_ip, other}),
                  Unclaimed::kArp, "ARP request for another host");

    make_stack(false);
    p().inject(reqf);
    EXPECT_EQ(p().take().size(), 1u);
    EXPECT_TRUE(handed().empty());
}

TEST_F(Share, Ipv6AndOtherEtherTypes)
{
    make_stack(true);
    expect_handed(eth_frame(p().stack_mac, 0x86dd, 78), Unclaimed::kIpv6, "IPv6 to our MAC");
    // Neighbour solicitation goes to a solicited-node multicast MAC.
    expect_handed(eth_frame(MacAddr{{0x33, 0x33, 0xff, 0x00, 0x00, 0x01}}, 0x86dd, 86), Unclaimed::kIpv6,
                  "IPv6 multicast");
    expect_handed(eth_frame(MacAddr{{0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e}}, 0x88cc), Unclaimed::kOther, "LLDP");
    expect_handed(eth_frame(p().stack_mac, 0x8100), Unclaimed::kOther, "a VLAN tag");
    // Unicast to another host's MAC is nobody's here (either way).
    handed().clear();
    p().inject(eth_frame(mac(77), 0x86dd, 78));
    p().inject(udp(53, 0, mac(77)));
    EXPECT_TRUE(handed().empty());
    EXPECT_EQ(st().stats().drop_not_ours, 2u);
    // Malformed IPv4 (bad header checksum) is dropped, not handed on.
    auto bad = udp(53);
    bad[14 + 10] ^= 0xff;
    p().inject(bad);
    EXPECT_TRUE(handed().empty());
    EXPECT_EQ(st().stats().drop_ip_csum, 1u);

    make_stack(false);
    p().inject(eth_frame(p().stack_mac, 0x86dd, 78));
    p().inject(eth_frame(MacAddr{{0x33, 0x33, 0xff, 0x00, 0x00, 0x01}}, 0x86dd, 86));
    EXPECT_TRUE(p().take().empty());
    EXPECT_TRUE(handed().empty());
    // Alone, the stack handles IPv6 (issue 31): both are malformed IPv6
    // (version 5), the second to our link-local address's solicited-node MAC.
    EXPECT_EQ(st().stats().ip6_drop_header, 2u);
    EXPECT_EQ(st().stats().drop_eth, 0u);
    EXPECT_EQ(st().stats().drop_not_ours, 0u);
}

// A burst mixing the stack's segments and the other stack's frames: each
// kind goes its own way, in order, with the data delivered byte-exact.
TEST_F(Share, MixedBurst)
{
    make_stack(true);
    Conn c;
    SockId s = passive(&c);
    std::vector<std::vector<uint8_t>> burst;
    std::vector<uint8_t> want;
    for (int i = 0; i < 6; i++) {
        auto d = bytes(500, uint8_t(40 + i));
        want.insert(want.end(), d.begin(), d.end());
        burst.push_back(build_tcp(p().seg(c, kAck, d)));
        c.peer_nxt += 500;
        burst.push_back(i % 2 ? udp(uint16_t(1000 + i)) : build_tcp(tcp_to(uint16_t(2000 + i), kSyn)));
    }
    handed().clear();
    p().input_burst(burst);
    p().poll();
    ASSERT_EQ(handed().size(), 6u);
    for (int i = 0; i < 6; i++) {
        EXPECT_EQ(handed()[i].bytes, burst[2 * i + 1]) << i;
        EXPECT_EQ(handed()[i].why, i % 2 ? Unclaimed::kUdp : Unclaimed::kTcpOtherPort) << i;
    }
    EXPECT_EQ(read_all(s), want);
}

} // namespace
} // namespace mars::sim
