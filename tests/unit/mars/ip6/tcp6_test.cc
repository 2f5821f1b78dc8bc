// TCP over IPv6 inside a whole stack (Stack::create, a sim::RawPeer port,
// virtual time; issue 31), its first part (mars/src/tcp/tcp6.h): a segment
// to a port nobody holds is answered with a reset as Linux answers it (not
// ICMPv6 unreachable), a malformed or corrupted one is dropped and counted,
// sharing the port hands it to the kernel. The expected frames are built
// here byte by byte, the checksum with this file's own RFC 1071 sum (not
// MARS's).
#include "ip6_fixture.h"
#include "raw_peer.h"
#include "tcp/tcp6.h"

#include <string>

namespace {

using namespace mars;
using namespace mars::test;

std::vector<uint8_t> eth6(const MacAddr &dst, const MacAddr &src, const std::vector<uint8_t> &packet)
{
    std::vector<uint8_t> f(wire::kEthLen + packet.size());
    std::memcpy(f.data(), dst.b, 6);
    std::memcpy(f.data() + 6, src.b, 6);
    f[12] = 0x86;
    f[13] = 0xdd;
    std::memcpy(f.data() + wire::kEthLen, packet.data(), packet.size());
    return f;
}

// IPv6 frames carrying TCP among those sent.
std::vector<std::vector<uint8_t>> tcp6_only(std::vector<std::vector<uint8_t>> frames)
{
    std::vector<std::vector<uint8_t>> v;
    for (auto &f : frames)
        if (f.size() >= wire::kEthLen + wire::kIp6Len && f[12] == 0x86 && f[13] == 0xdd && f[wire::kEthLen + 6] == 6)
            v.push_back(std::move(f));
    return v;
}

void put16(uint8_t *p, uint16_t v)
{
    p[0] = uint8_t(v >> 8);
    p[1] = uint8_t(v);
}
void put32(uint8_t *p, uint32_t v)
{
    put16(p, uint16_t(v >> 16));
    put16(p + 2, uint16_t(v));
}

// RFC 1071 over the IPv6 pseudo-header (RFC 8200 8.1) and the segment,
// written out here on purpose (an independent reference).
uint16_t ref_tcp6_csum(const Ip6Addr &src, const Ip6Addr &dst, const std::vector<uint8_t> &seg)
{
    std::vector<uint8_t> b(src.b, src.b + 16);
    b.insert(b.end(), dst.b, dst.b + 16);
    uint8_t len[4];
    put32(len, uint32_t(seg.size()));
    b.insert(b.end(), len, len + 4);
    b.insert(b.end(), {0, 0, 0, 6});
    b.insert(b.end(), seg.begin(), seg.end());
    if (b.size() & 1) b.push_back(0);
    uint32_t sum = 0;
    for (size_t i = 0; i < b.size(); i += 2) sum += uint32_t(b[i]) << 8 | b[i + 1];
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(~sum);
}

// A TCP segment (no options) from src to dst, checksummed.
std::vector<uint8_t> tcp6(const Ip6Addr &src, const Ip6Addr &dst, uint16_t sport, uint16_t dport, uint32_t seq,
                          uint32_t ack, uint8_t flags, const std::vector<uint8_t> &payload = {})
{
    std::vector<uint8_t> s(20);
    put16(&s[0], sport);
    put16(&s[2], dport);
    put32(&s[4], seq);
    put32(&s[8], ack);
    s[12] = 0x50;
    s[13] = flags;
    put16(&s[14], 65535);
    s.insert(s.end(), payload.begin(), payload.end());
    put16(&s[16], ref_tcp6_csum(src, dst, s));
    return s;
}

sim::RawPeer::Options options(bool shared = false, uint8_t hop_limit = 64)
{
    sim::RawPeer::Options o;
    o.stack.addr6[0] = Ip6Prefix{kOurIp, 64};
    o.stack.n_addr6 = 1;
    o.stack.pass_unclaimed = shared;
    o.stack.hop_limit6 = hop_limit;
    o.keep_raw = true;
    return o;
}

// A stack whose IPv6 address is usable (DAD done) and which knows the
// peer's MAC (from its solicitation).
struct Up {
    explicit Up(const sim::RawPeer::Options &o) : p(o)
    {
        p.stack().announce(p.now);
        p.advance(kSec);
        const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
        p.inject(eth6(ip6::multicast_mac(sn.b), p.peer_mac,
                      packet6(kPeerIp, sn, wire::kProtoIcmp6,
                              icmp6(kPeerIp, sn, wire::kNdNeighborSolicit, 0, 0,
                                    nd_body(kOurIp, wire::kNdOptSourceLla, p.peer_mac)),
                              255)));
        p.take_raw();
    }
    void in(const std::vector<uint8_t> &seg) { p.inject(eth6(p.stack_mac, p.peer_mac, packet6(kPeerIp, kOurIp, 6, seg))); }
    sim::RawPeer p;
};

// The reset the stack must send for a SYN, built here byte by byte.
std::vector<uint8_t> expected_rst(const sim::RawPeer &p, uint32_t label, uint8_t hop, uint16_t sport, uint16_t dport,
                                  uint32_t seq, uint32_t ack, uint8_t flags)
{
    std::vector<uint8_t> f(14 + 40);
    std::memcpy(&f[0], p.peer_mac.b, 6);
    std::memcpy(&f[6], p.stack_mac.b, 6);
    put16(&f[12], 0x86dd);
    put32(&f[14], 0x60000000u | label); // version 6, traffic class 0, the flow label
    put16(&f[18], 20);                  // payload: the TCP header alone
    f[20] = 6;                          // next header TCP
    f[21] = hop;
    std::memcpy(&f[22], kOurIp.b, 16);
    std::memcpy(&f[38], kPeerIp.b, 16);
    std::vector<uint8_t> seg(20);
    put16(&seg[0], sport);
    put16(&seg[2], dport);
    put32(&seg[4], seq);
    put32(&seg[8], ack);
    seg[12] = 0x50;
    seg[13] = flags;
    put16(&seg[16], ref_tcp6_csum(kOurIp, kPeerIp, seg));
    f.insert(f.end(), seg.begin(), seg.end());
    return f;
}

uint32_t label_of(const std::vector<uint8_t> &f) { return (uint32_t(f[15] & 0x0f) << 16) | uint32_t(f[16]) << 8 | f[17]; }

TEST(Tcp6, SynToClosedPortGetsResetByteExact)
{
    Up u(options());
    u.in(tcp6(kPeerIp, kOurIp, 40000, 80, 0x11223344, 0, wire::kSyn));
    auto out = tcp6_only(u.p.take_raw());
    ASSERT_EQ(out.size(), 1u) << "one reset, no ICMPv6 unreachable";
    const uint32_t label = label_of(out[0]);
    EXPECT_NE(label, 0u) << "a flow label (RFC 6437 hash of the 4-tuple)";
    EXPECT_EQ(out[0], expected_rst(u.p, label, 64, 80, 40000, 0, 0x11223345, wire::kRst | wire::kAck));
    // The label is the flow's: the same again, another for another port.
    u.in(tcp6(kPeerIp, kOurIp, 40000, 80, 0x11223344, 0, wire::kSyn));
    u.in(tcp6(kPeerIp, kOurIp, 40001, 80, 0x11223344, 0, wire::kSyn));
    out = tcp6_only(u.p.take_raw());
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(label_of(out[0]), label);
    EXPECT_NE(label_of(out[1]), label);
    const StackStats &st = u.p.stack().stats();
    EXPECT_EQ(st.tcp_resets_out, 3u);
    EXPECT_EQ(st.drop_tcp_no_socket, 3u);
    EXPECT_EQ(st.icmp6_out, 0u);
}

TEST(Tcp6, ResetRulesAsRfc9293)
{
    Up u(options(false, 33));
    // An ACK-bearing segment with data: <SEQ=SEG.ACK><CTL=RST>.
    u.in(tcp6(kPeerIp, kOurIp, 40000, 81, 7000, 0xabcdef01, wire::kAck | wire::kPsh, {'a', 'b', 'c'}));
    auto out = tcp6_only(u.p.take_raw());
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], expected_rst(u.p, label_of(out[0]), 33, 81, 40000, 0xabcdef01, 0, wire::kRst));
    // No ACK, data and FIN: ACK = SEG.SEQ + SEG.LEN (+1 for the FIN).
    u.in(tcp6(kPeerIp, kOurIp, 40000, 81, 7000, 0, wire::kFin, {'x', 'y'}));
    out = tcp6_only(u.p.take_raw());
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], expected_rst(u.p, label_of(out[0]), 33, 81, 40000, 0, 7003, wire::kRst | wire::kAck));
    // A reset is never answered.
    u.in(tcp6(kPeerIp, kOurIp, 40000, 81, 7000, 0, wire::kRst));
    EXPECT_TRUE(tcp6_only(u.p.take_raw()).empty());
    EXPECT_EQ(u.p.stack().stats().tcp_resets_out, 2u);
}

TEST(Tcp6, CorruptedOrMalformedDroppedAndCounted)
{
    Up u(options());
    auto seg = tcp6(kPeerIp, kOurIp, 40000, 80, 1, 0, wire::kSyn, {'d', 'a', 't', 'a'});
    seg[22] ^= 0x01; // one payload bit flipped in flight
    u.in(seg);
    EXPECT_TRUE(u.p.take_raw().empty()) << "nothing answers a corrupted segment";
    EXPECT_EQ(u.p.stack().stats().drop_tcp_csum, 1u);
    // The same segment marked checksum-good by the NIC is taken as such.
    u.p.inject(eth6(u.p.stack_mac, u.p.peer_mac, packet6(kPeerIp, kOurIp, 6, seg)), kRxL4CsumGood);
    EXPECT_EQ(tcp6_only(u.p.take_raw()).size(), 1u);
    // Shorter than a TCP header; a data offset past the packet.
    u.in(std::vector<uint8_t>(12, 0));
    auto bad_off = tcp6(kPeerIp, kOurIp, 40000, 80, 1, 0, wire::kSyn);
    bad_off[12] = 0xf0;
    u.in(bad_off);
    EXPECT_TRUE(u.p.take_raw().empty());
    const StackStats &st = u.p.stack().stats();
    EXPECT_EQ(st.drop_tcp_header, 2u);
    EXPECT_EQ(st.drop_tcp_csum, 1u);
    EXPECT_EQ(st.tcp_resets_out, 1u);
}

TEST(Tcp6, ResetWaitsForNeighbourDiscovery)
{
    sim::RawPeer p(options());
    p.stack().announce(p.now);
    p.advance(kSec);
    p.take_raw();
    // The peer's MAC is unknown: the reset waits on the ND queue, an NS goes.
    p.inject(eth6(p.stack_mac, p.peer_mac, packet6(kPeerIp, kOurIp, 6, tcp6(kPeerIp, kOurIp, 5, 80, 9, 0, wire::kSyn))));
    auto sent = p.take_raw();
    EXPECT_TRUE(tcp6_only(sent).empty());
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(Sent{sent[0]}.type(), wire::kNdNeighborSolicit);
    p.inject(eth6(p.stack_mac, p.peer_mac, na(kPeerIp, kOurIp, kPeerIp, wire::kNaSolicited, p.peer_mac)));
    auto out = tcp6_only(p.take_raw());
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], expected_rst(p, label_of(out[0]), 64, 80, 5, 0, 10, wire::kRst | wire::kAck));
}

TEST(Tcp6, SharingHandsSegmentsToTheKernel)
{
    Up u(options(true));
    u.p.port().unclaimed_frames.clear();
    u.in(tcp6(kPeerIp, kOurIp, 40000, 22, 1, 0, wire::kSyn));
    EXPECT_TRUE(tcp6_only(u.p.take_raw()).empty()) << "the kernel answers for its ports";
    ASSERT_EQ(u.p.port().unclaimed_frames.size(), 1u);
    EXPECT_EQ(u.p.port().unclaimed_frames[0].why, Unclaimed::kIpv6);
    EXPECT_EQ(u.p.stack().stats().tcp_resets_out, 0u);
}

// Data of an established connection over IPv6, checksums summed in
// software (no NIC flag): in-order segments are taken and queued (the
// express path before Ipv6Layer, counted in ip6_in as the layer would and in
// fastpath_hits), a corrupted one is dropped and counted without a byte
// queued, and one behind a hop-by-hop header (no express path) takes the
// layer's path and is queued too. Byte exact.
TEST(Tcp6, DataOfAConnectionTakenByteExact)
{
    Up u(options());
    Stack &st = u.p.stack();
    const int64_t l = st.open(1);
    ASSERT_GE(l, 0);
    ASSERT_EQ(st.bind6(SockId(l), Endpoint6{Ip6Addr{}, 80}, false), 0);
    ASSERT_EQ(st.listen(SockId(l), 4), 0);
    u.in(tcp6(kPeerIp, kOurIp, 40000, 80, 1000, 0, wire::kSyn));
    auto out = tcp6_only(u.p.take_raw());
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0][67], wire::kSyn | wire::kAck);
    const uint32_t isn = uint32_t(out[0][58]) << 24 | uint32_t(out[0][59]) << 16 | uint32_t(out[0][60]) << 8 | out[0][61];
    u.in(tcp6(kPeerIp, kOurIp, 40000, 80, 1001, isn + 1, wire::kAck));
    const int64_t c = st.accept(SockId(l), 2);
    ASSERT_GE(c, 0);
    const StackStats before = st.stats();
    std::string sent;
    uint32_t seq = 1001;
    for (int i = 0; i < 3; i++) {
        const std::vector<uint8_t> data(700, uint8_t('a' + i));
        u.in(tcp6(kPeerIp, kOurIp, 40000, 80, seq, isn + 1, wire::kAck, data));
        sent.append(data.begin(), data.end());
        seq += 700;
    }
    EXPECT_EQ(st.stats().ip6_in - before.ip6_in, 3u);
    EXPECT_EQ(st.stats().fastpath_hits - before.fastpath_hits, 3u);
    // Corrupted in flight: dropped and counted, nothing queued.
    auto bad = tcp6(kPeerIp, kOurIp, 40000, 80, seq, isn + 1, wire::kAck, std::vector<uint8_t>(500, 'x'));
    bad[100] ^= 0x04;
    u.in(bad);
    EXPECT_EQ(st.stats().drop_tcp_csum - before.drop_tcp_csum, 1u);
    // Behind a hop-by-hop options header (Pad1 x6): the layer's path.
    const std::vector<uint8_t> data(300, 'h');
    std::vector<uint8_t> hbh{6, 0, 0, 0, 0, 0, 0, 0};
    const auto seg = tcp6(kPeerIp, kOurIp, 40000, 80, seq, isn + 1, wire::kAck, data);
    hbh.insert(hbh.end(), seg.begin(), seg.end());
    u.p.inject(eth6(u.p.stack_mac, u.p.peer_mac, packet6(kPeerIp, kOurIp, 0, hbh)));
    sent.append(data.begin(), data.end());
    std::string got(4096, '\0');
    const int64_t n = st.recv(SockId(c), got.data(), got.size());
    ASSERT_EQ(n, int64_t(sent.size()));
    got.resize(size_t(n));
    EXPECT_EQ(got, sent);
    EXPECT_EQ(st.stats().ip6_in - before.ip6_in, 5u);
}

TEST(Tcp6, HopLimitZeroRefused)
{
    StackConfig c = sim::test_stack_config(1);
    c.hop_limit6 = 0;
    sim::FramePool pool(16);
    sim::SimPort port(pool, [](const PacketRef &) {});
    sim::RingPool rings(1, c.tcp.rcvbuf, c.tcp.sndbuf);
    std::string err;
    EXPECT_EQ(Stack::create(c, port, rings, &err), nullptr);
    EXPECT_NE(err.find("hop_limit6 must be 1..255"), std::string::npos) << err;
}

// ---- connections (issue 31: Stack::connect6 / bind6) ---------------------------

// A TCP segment with options (a multiple of 4 bytes) from src to dst, checksummed.
std::vector<uint8_t> tcp6o(const Ip6Addr &src, const Ip6Addr &dst, uint16_t sport, uint16_t dport, uint32_t seq,
                           uint32_t ack, uint8_t flags, const std::vector<uint8_t> &opts,
                           const std::vector<uint8_t> &payload = {})
{
    std::vector<uint8_t> s(20);
    put16(&s[0], sport);
    put16(&s[2], dport);
    put32(&s[4], seq);
    put32(&s[8], ack);
    s[12] = uint8_t(((20 + opts.size()) / 4) << 4);
    s[13] = flags;
    put16(&s[14], 65535);
    s.insert(s.end(), opts.begin(), opts.end());
    s.insert(s.end(), payload.begin(), payload.end());
    put16(&s[16], ref_tcp6_csum(src, dst, s));
    return s;
}

uint16_t get16(const std::vector<uint8_t> &f, size_t o) { return uint16_t(f[o] << 8 | f[o + 1]); }
uint32_t get32(const std::vector<uint8_t> &f, size_t o) { return uint32_t(get16(f, o)) << 16 | get16(f, o + 2); }

// The SYN of an active open over IPv6, against a frame built here field by
// field: Ethernet to the peer's MAC (ND learnt it), IPv6 version 6, traffic
// class 0, a non-zero flow label, payload length 40, next header TCP, hop
// limit 64, our address to the peer's; TCP to port 443 with SYN alone,
// window 65535 and the options MSS 1440 (MTU 1500 - 60), SACK permitted,
// timestamps (TSecr 0), NOP, window scale; the checksum over the IPv6
// pseudo-header by this file's own sum. What the stack picks (source port,
// ISN, TSval, flow label, window scale) is read from the frame and checked
// for range.
TEST(Tcp6Conn, SynByteExact)
{
    Up u(options());
    Stack &st = u.p.stack();
    const int64_t s = st.open(1);
    ASSERT_GE(s, 0);
    ASSERT_EQ(st.connect6(SockId(s), Endpoint6{kPeerIp, 443}, u.p.now), 0);
    auto out = tcp6_only(u.p.take_raw());
    ASSERT_EQ(out.size(), 1u);
    const std::vector<uint8_t> &f = out[0];
    ASSERT_EQ(f.size(), 14u + 40 + 40);
    const uint32_t label = label_of(f);
    const uint16_t sport = get16(f, 54);
    const uint32_t isn = get32(f, 58);
    const uint32_t tsval = get32(f, 54 + 20 + 8);
    const uint8_t wscale = f[54 + 20 + 19];
    EXPECT_NE(label, 0u);
    EXPECT_GE(sport, 32768);
    EXPECT_LE(sport, 60999);
    EXPECT_LE(wscale, 14);

    std::vector<uint8_t> want(14 + 40);
    std::memcpy(&want[0], u.p.peer_mac.b, 6);
    std::memcpy(&want[6], u.p.stack_mac.b, 6);
    put16(&want[12], 0x86dd);
    put32(&want[14], 0x60000000u | label);
    put16(&want[18], 40);
    want[20] = 6;
    want[21] = 64;
    std::memcpy(&want[22], kOurIp.b, 16);
    std::memcpy(&want[38], kPeerIp.b, 16);
    std::vector<uint8_t> opts = {2, 4, 0x05, 0xa0, 4, 2, 8, 10};
    opts.insert(opts.end(), {uint8_t(tsval >> 24), uint8_t(tsval >> 16), uint8_t(tsval >> 8), uint8_t(tsval), 0, 0, 0, 0});
    opts.insert(opts.end(), {1, 3, 3, wscale});
    const auto seg = tcp6o(kOurIp, kPeerIp, sport, 443, isn, 0, wire::kSyn, opts);
    want.insert(want.end(), seg.begin(), seg.end());
    EXPECT_EQ(f, want);

    SockInfo in{};
    ASSERT_EQ(st.info(SockId(s), &in), 0);
    EXPECT_EQ(in.state, TcpState::kSynSent);
    EXPECT_TRUE(in.ipv6);
    EXPECT_EQ(in.local6.port, sport);
    EXPECT_EQ(st.stats().tcp_active_opens, 1u);
}

// An open connection to the raw peer over IPv6: SYN out, SYN-ACK (MSS 1440,
// no other option) in, ACK out.
struct Open6 {
    Open6() : u(options())
    {
        Stack &st = u.p.stack();
        sock = SockId(st.open(1));
        EXPECT_EQ(st.connect6(sock, Endpoint6{kPeerIp, 443}, u.p.now), 0);
        auto syn = tcp6_only(u.p.take_raw());
        EXPECT_EQ(syn.size(), 1u);
        sport = get16(syn[0], 54);
        iss = get32(syn[0], 58);
        u.in(tcp6o(kPeerIp, kOurIp, 443, sport, peer_seq - 1, iss + 1, wire::kSyn | wire::kAck, {2, 4, 0x05, 0xa0}));
        auto ack = tcp6_only(u.p.take_raw());
        EXPECT_EQ(ack.size(), 1u);
        EXPECT_EQ(u.p.take_events()[sock] & kEvConnected, kEvConnected);
    }
    Up u;
    SockId sock = kNoSock;
    uint16_t sport = 0;
    uint32_t iss = 0, peer_seq = 5001; // the peer's next sequence number
};

// A corrupted data segment of an open connection is dropped and counted and
// delivers nothing; the same segment intact is delivered.
TEST(Tcp6Conn, CorruptedSegmentDroppedAndCounted)
{
    Open6 o;
    Stack &st = o.u.p.stack();
    auto seg = tcp6o(kPeerIp, kOurIp, 443, o.sport, o.peer_seq, o.iss + 1, wire::kAck | wire::kPsh, {}, {'d', 'a', 't', 'a'});
    auto bad = seg;
    bad[21] ^= 0x04; // one payload bit flipped in flight
    const uint64_t csum_before = st.stats().drop_tcp_csum;
    o.u.in(bad);
    EXPECT_EQ(st.stats().drop_tcp_csum, csum_before + 1);
    SockInfo in{};
    ASSERT_EQ(st.info(o.sock, &in), 0);
    EXPECT_EQ(in.rx_readable, 0u);
    EXPECT_EQ(in.bytes_in, 0u);
    o.u.in(seg);
    ASSERT_EQ(st.info(o.sock, &in), 0);
    EXPECT_EQ(in.rx_readable, 4u);
    char buf[8] = {};
    EXPECT_EQ(st.recv(o.sock, buf, sizeof buf), 4);
    EXPECT_EQ(std::string(buf, 4), "data");
}

// ICMPv6 packet too big (RFC 8201) quoting a data segment of a connection:
// its path MTU falls to 1280, its MSS to 1280 - 60, and what was in flight
// goes again in segments that fit.
TEST(Tcp6Conn, PacketTooBigLowersTheMss)
{
    Open6 o;
    Stack &st = o.u.p.stack();
    SockInfo in{};
    ASSERT_EQ(st.info(o.sock, &in), 0);
    EXPECT_EQ(in.snd_mss, 1440u);
    std::vector<uint8_t> data(3000, 'z');
    ASSERT_EQ(st.send(o.sock, data.data(), data.size()), 3000);
    o.u.p.poll();
    auto sent = tcp6_only(o.u.p.take_raw());
    ASSERT_GE(sent.size(), 2u);
    ASSERT_EQ(sent[0].size(), 14u + 40 + 20 + 1440) << "full segments before the report";
    // The report quotes as much of the first segment as fits in 1280 bytes.
    std::vector<uint8_t> quoted(sent[0].begin() + 14, sent[0].end());
    quoted.resize(1280 - 40 - 8);
    const Ip6Addr router = kPeerIp;
    o.u.p.inject(eth6(o.u.p.stack_mac, o.u.p.peer_mac,
                      packet6(router, kOurIp, wire::kProtoIcmp6,
                              icmp6(router, kOurIp, wire::kIcmp6PacketTooBig, 0, 1280, quoted))));
    o.u.p.poll();
    ASSERT_EQ(st.info(o.sock, &in), 0);
    EXPECT_EQ(in.snd_mss, 1280u - 60);
    EXPECT_EQ(st.stats().icmp6_ptb_in, 1u);
    auto again = tcp6_only(o.u.p.take_raw());
    ASSERT_FALSE(again.empty()) << "what the smaller path lost goes again at once";
    for (auto &f : again) EXPECT_LE(f.size() - 14, 1280u) << "every packet fits the new path MTU";
    EXPECT_EQ(get32(again[0], 58), o.iss + 1) << "from the first unacknowledged byte";
}

// IPV6_TCLASS (SockOpt::kTclass) is an IPv6 connection's traffic class and
// IP_TOS (kTos) an IPv4 one's: a dual-stack socket keeps both, each for its
// family, as Linux does. The SYN carries the class set before connect (its
// ECN bits dropped: TCP's own), the TOS changes nothing on IPv6; set on an
// open connection it marks the next segment; -1 is the default (0);
// outside -1..255 is EINVAL, the value unchanged.
uint8_t tclass_of(const std::vector<uint8_t> &f) { return uint8_t((f[14] & 0x0f) << 4 | f[15] >> 4); }

TEST(Tcp6Conn, TrafficClassIsIpv6TclassNotIpTos)
{
    Up u(options());
    Stack &st = u.p.stack();
    const SockId s = SockId(st.open(1));
    ASSERT_EQ(st.set_option(s, SockOpt::kTos, 0x28), 0);
    ASSERT_EQ(st.set_option(s, SockOpt::kTclass, 0xb8 | 0x3), 0);
    int64_t v = -5;
    ASSERT_EQ(st.get_option(s, SockOpt::kTclass, &v), 0);
    EXPECT_EQ(v, 0xb8);
    ASSERT_EQ(st.get_option(s, SockOpt::kTos, &v), 0);
    EXPECT_EQ(v, 0x28);
    EXPECT_EQ(st.set_option(s, SockOpt::kTclass, 256), -EINVAL);
    EXPECT_EQ(st.set_option(s, SockOpt::kTclass, -2), -EINVAL);
    ASSERT_EQ(st.get_option(s, SockOpt::kTclass, &v), 0);
    EXPECT_EQ(v, 0xb8) << "a refused value changes nothing";
    ASSERT_EQ(st.connect6(s, Endpoint6{kPeerIp, 443}, u.p.now), 0);
    auto syn = tcp6_only(u.p.take_raw());
    ASSERT_EQ(syn.size(), 1u);
    EXPECT_EQ(tclass_of(syn[0]), 0xb8);
    EXPECT_NE(label_of(syn[0]), 0u) << "the flow label beside it is kept";

    Open6 o;
    Stack &st2 = o.u.p.stack();
    ASSERT_EQ(st2.set_option(o.sock, SockOpt::kNoDelay, 1), 0); // the second write goes out unacknowledged
    ASSERT_EQ(st2.set_option(o.sock, SockOpt::kTos, 0x10), 0);
    std::vector<uint8_t> data(100, 'q');
    ASSERT_EQ(st2.send(o.sock, data.data(), data.size()), 100);
    o.u.p.poll();
    auto sent = tcp6_only(o.u.p.take_raw());
    ASSERT_FALSE(sent.empty());
    EXPECT_EQ(tclass_of(sent[0]), 0) << "IP_TOS is not an IPv6 connection's";
    ASSERT_EQ(st2.set_option(o.sock, SockOpt::kTclass, 0x48), 0);
    ASSERT_EQ(st2.send(o.sock, data.data(), data.size()), 100);
    o.u.p.poll();
    sent = tcp6_only(o.u.p.take_raw());
    ASSERT_FALSE(sent.empty());
    EXPECT_EQ(tclass_of(sent[0]), 0x48);
    ASSERT_EQ(st2.set_option(o.sock, SockOpt::kTclass, -1), 0);
    ASSERT_EQ(st2.get_option(o.sock, SockOpt::kTclass, &v), 0);
    EXPECT_EQ(v, 0);
}

} // namespace
