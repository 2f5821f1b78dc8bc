// Conformance of the IPv4, ARP and ICMP layers under TCP, packetdrill style:
// the test plays the peer with crafted frames (RawPeer) and checks what the
// stack answers. The TCP state machine's cases are in tests/unit/mars/tcp/
// (tcp_in_test.cc, tcp_out_test.cc, tcp_timer_test.cc), with this fixture.
#include "tcp_fixture.h"

namespace mars::sim {
namespace {

// ---- IP, ARP, ICMP ----------------------------------------------------------

TEST_F(Tcp, IpOptionsAreSkipped)
{
    Conn c;
    SockId s = passive(&c);
    auto f = build_tcp(p().seg(c, kAck | kPsh, bytes(64, 24)));
    // Insert four NOP option bytes into the IP header (IHL 6).
    f.insert(f.begin() + 14 + 20, {1, 1, 1, 0});
    f[14] = 0x46;
    uint16_t total = uint16_t((f[16] << 8 | f[17]) + 4);
    f[16] = uint8_t(total >> 8);
    f[17] = uint8_t(total);
    fix_ip_checksum(f.data(), f.size());
    p().inject(f);
    EXPECT_EQ(info(s).rx_readable, 64u);
}

TEST_F(Tcp, EthernetPaddingIgnored)
{
    Conn c;
    SockId s = passive(&c);
    auto f = build_tcp(p().seg(c, kAck | kPsh, bytes(2, 25)));
    f.resize(f.size() + 10, 0xee); // padding after the IP datagram (as short frames carry)
    p().inject(f);
    EXPECT_EQ(info(s).rx_readable, 2u);
}

TEST_F(Tcp, AnswersArpAndPing)
{
    ArpSpec req{p().peer_mac, MacAddr{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}, 1, p().peer_mac, MacAddr{}, p().peer_ip,
                p().stack_ip};
    p().inject(build_arp(req));
    auto out = p().take();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].is_arp);
    EXPECT_EQ(out[0].arp_op, 2);
    EXPECT_EQ(out[0].arp_spa, p().stack_ip);
    EXPECT_TRUE(out[0].arp_sha == p().stack_mac);
    // Someone else's address: no reply.
    req.tpa = ipv4(198, 18, 0, 77);
    p().inject(build_arp(req));
    EXPECT_TRUE(p().take().empty());
    IcmpSpec ping{p().peer_mac, p().stack_mac, p().peer_ip, p().stack_ip, 8, 0, 0x12340001, bytes(56, 26)};
    p().inject(build_icmp(ping));
    out = p().take();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].is_icmp);
    EXPECT_EQ(out[0].icmp_type, 0);
    EXPECT_EQ(out[0].payload, bytes(56, 26));
    EXPECT_EQ(st().stats().icmp_echo_in, 1u);
}

TEST_F(Tcp, FragmentationNeededLowersMss)
{
    Conn c;
    SockId s = passive(&c);
    auto data = bytes(1448, 27);
    ASSERT_EQ(st().send(s, data.data(), data.size()), 1448);
    p().poll();
    auto segs = p().take_conn(c);
    ASSERT_EQ(segs.size(), 1u);
    // RFC 1191: the quoted datagram is our IP header + 8 bytes of TCP.
    auto sent = build_tcp(p().seg(c, kAck)); // shape only; fill with what the stack sent
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
    quoted.payload = data;
    auto q = build_tcp(quoted);
    IcmpSpec fn{p().peer_mac, p().stack_mac, ipv4(198, 18, 0, 254), p().stack_ip, 3, 4, 1200,
                std::vector<uint8_t>(q.begin() + 14, q.begin() + 14 + 28)};
    (void)sent;
    p().inject(build_icmp(fn));
    EXPECT_EQ(st().stats().icmp_frag_needed_in, 1u);
    EXPECT_LE(info(s).snd_mss, 1200u - 40u);
    p().advance(2 * kSec);
    // The lost 1448 bytes are resent (RTO at the latest) in segments that
    // fit the new path MTU; an empty list would check nothing, so it fails.
    auto resent = p().take_conn(c);
    ASSERT_FALSE(resent.empty()) << "nothing was resent after the path MTU dropped";
    for (auto &g : resent) EXPECT_LE(g.len - 14, 1200u) << g.describe();
    EXPECT_EQ(resent[0].seq, segs[0].seq) << resent[0].describe();
    ASSERT_FALSE(resent[0].payload.empty());
    ASSERT_LT(resent[0].payload.size(), data.size()) << "the resent segment was not made smaller";
    EXPECT_TRUE(std::equal(resent[0].payload.begin(), resent[0].payload.end(), data.begin()))
        << "the resent segment does not carry the first bytes";
}
} // namespace
} // namespace mars::sim
