// tcp_out (mars/src/tcp_out.cc): what the stack sends and when: SYN and
// segment sizing, closing, fast retransmit and SACK recovery, Nagle, and the
// transmit checksum-offload contract. Packetdrill style on the simulated wire
// (RawPeer). (Moved from sim/conformance_test.cc; the tests keep their names.)
#include "tcp_fixture.h"

#include <mars/checksum_offload.h>

#include <cstring>

namespace mars::sim {
namespace {

// ---- Opening ---------------------------------------------------------------

TEST_F(Tcp, ActiveOpenSendsSynAndCompletes)
{
    Conn c;
    SockId s = active(&c);
    ASSERT_NE(s, kNoSock);
    EXPECT_EQ(state(s), TcpState::kEstablished);
    EXPECT_GE(c.stack_port, 32768) << "ephemeral range";
    EXPECT_LE(c.stack_port, 60999);
    EXPECT_EQ(st().stats().tcp_active_opens, 1u);
}

// ---- Data ------------------------------------------------------------------

TEST_F(Tcp, SendSegmentsRespectPeerMssAndWindow)
{
    Conn c;
    TcpOptions o = RawPeer::full_syn_options(0);
    o.mss = 536;
    SockId s = passive(&c, 40000, o);
    EXPECT_TRUE(info(s).snd_mss == 536u || info(s).snd_mss == 524u) << info(s).snd_mss;
    auto data = bytes(20000, 8);
    ASSERT_EQ(st().send(s, data.data(), data.size()), int64_t(data.size()));
    p().poll();
    auto segs = p().take_conn(c);
    ASSERT_FALSE(segs.empty());
    // RFC 6691: options count against the MSS (12 bytes of timestamps here).
    for (auto &g : segs) EXPECT_LE(g.payload.size(), 536u - 12u);
    uint32_t window = uint32_t(c.window) << 7; // we announced wscale 7
    EXPECT_LE(payload_of(segs), window);
}

TEST_F(Tcp, MssClampedToOwnMtu)
{
    RawPeer::Options o;
    o.stack.mtu = 1000;
    make(o);
    Conn c;
    TcpOptions syn = RawPeer::full_syn_options(0);
    syn.mss = 9000;
    SockId l = p().listen(80);
    c.peer_port = 40000;
    c.stack_port = 80;
    c.peer_nxt = 1;
    TcpSpec sp = p().seg(c, kSyn);
    sp.opts = syn;
    p().inject(sp);
    auto sa = p().take_tcp();
    ASSERT_EQ(sa.size(), 1u);
    ASSERT_TRUE(sa[0].opts.mss);
    EXPECT_EQ(*sa[0].opts.mss, 960) << "MSS = MTU - 40";
    (void)l;
}

// TCP_MAXSEG set before connect() or listen() is our MSS option on the wire
// (issue 35: SYN and SYN-ACK said 1460 where 1100 was set). A listener's
// holds for the connections it accepts, as on Linux.
TEST_F(Tcp, MaxSegSetBeforeConnectIsTheSynsMss)
{
    int64_t s = st().open(7);
    ASSERT_GE(s, 0);
    ASSERT_EQ(st().set_option(SockId(s), SockOpt::kMaxSeg, 1100), 0);
    ASSERT_EQ(st().connect(SockId(s), Endpoint{p().peer_ip, 9000}, p().now), 0);
    p().poll();
    auto syn = p().take_tcp();
    ASSERT_EQ(syn.size(), 1u);
    ASSERT_TRUE(syn[0].opts.mss);
    EXPECT_EQ(*syn[0].opts.mss, 1100);
}

TEST_F(Tcp, MaxSegSetOnTheListenerIsTheSynAcksMss)
{
    listener = p().listen(80);
    ASSERT_NE(listener, kNoSock);
    ASSERT_EQ(st().set_option(listener, SockOpt::kMaxSeg, 1100), 0);
    Conn c;
    SockId s = passive(&c);
    ASSERT_NE(s, kNoSock);
    EXPECT_EQ(c.stack_mss, 1100) << "the SYN-ACK's MSS option";
    auto data = bytes(20000, 5);
    ASSERT_EQ(st().send(s, data.data(), data.size()), int64_t(data.size()));
    p().poll();
    auto segs = p().take_conn(c);
    ASSERT_FALSE(segs.empty());
    for (auto &g : segs) EXPECT_LE(g.payload.size(), 1100u) << "the connection's segments honour it too";
}

// ---- Closing ---------------------------------------------------------------

TEST_F(Tcp, ActiveCloseGoesThroughFinWaitToTimeWait)
{
    Conn c;
    SockId s = passive(&c);
    EXPECT_EQ(st().close(s), 0);
    p().poll();
    auto fin = p().take_conn(c);
    ASSERT_EQ(fin.size(), 1u);
    EXPECT_TRUE(fin[0].has(kFin | kAck));
    EXPECT_EQ(state(s), TcpState::kFinWait1);
    p().send(c, kAck);
    EXPECT_EQ(state(s), TcpState::kFinWait2);
    // Half-closed: the peer may still send, and it arrives.
    p().send(c, kAck | kPsh, bytes(200, 14));
    p().send(c, kAck | kFin);
    auto last = p().take_conn(c);
    ASSERT_FALSE(last.empty());
    EXPECT_EQ(last.back().ack, c.peer_nxt);
    EXPECT_EQ(conn_state(c), TcpState::kTimeWait);
    // A retransmitted FIN in TIME-WAIT is acked again.
    Conn again = c;
    again.peer_nxt = c.peer_nxt - 1;
    p().send(again, kAck | kFin);
    auto reack = p().take_conn(c);
    ASSERT_EQ(reack.size(), 1u);
    EXPECT_EQ(reack[0].ack, c.peer_nxt);
}

// ---- Retransmission ---------------------------------------------------------

TEST_F(Tcp, FastRetransmitOnThreeDuplicateAcks)
{
    Conn c;
    SockId s = passive(&c);
    uint32_t first_byte = c.stack_nxt;
    auto data = bytes(10 * 1448, 23);
    ASSERT_EQ(st().send(s, data.data(), data.size()), int64_t(data.size()));
    p().poll();
    auto segs = p().take_conn(c);
    ASSERT_GE(segs.size(), 4u) << "initial window of at least 4 segments (RFC 6928 allows 10)";
    // The first segment is lost: three duplicate ACKs with SACK blocks.
    Conn dup = c;
    dup.stack_nxt = first_byte;
    for (int i = 1; i <= 3; i++) {
        TcpSpec a = p().seg(dup, kAck);
        a.opts.sack = {{segs[1].seq, segs[size_t(i)].seq + uint32_t(segs[size_t(i)].payload.size())}};
        p().inject(a);
    }
    auto retx = p().take_conn(c);
    bool resent = false;
    for (auto &g : retx) resent |= g.seq == first_byte && !g.payload.empty();
    EXPECT_TRUE(resent) << "no fast retransmit after three duplicate ACKs";
    EXPECT_GE(st().stats().tcp_fast_retransmits, 1u);
}

TEST_F(Tcp, SackRecoveryStartsWhileThePeersWindowChanges)
{
    // RFC 6675 2: an ACK that SACKs new data counts as a duplicate ACK even
    // when its window differs (a Linux receiver grows its window all the
    // time); otherwise a loss waits for the retransmission timer.
    Conn c;
    SockId s = passive(&c);
    uint32_t first_byte = c.stack_nxt;
    auto data = bytes(10 * 1448, 24);
    ASSERT_EQ(st().send(s, data.data(), data.size()), int64_t(data.size()));
    p().poll();
    auto segs = p().take_conn(c);
    ASSERT_GE(segs.size(), 4u);
    Conn dup = c;
    dup.stack_nxt = first_byte;
    for (int i = 1; i <= 3; i++) {
        dup.window = uint16_t(1000 + 100 * i); // scaled by 2^7: always more than in flight
        TcpSpec a = p().seg(dup, kAck);
        a.opts.sack = {{segs[1].seq, segs[size_t(i)].seq + uint32_t(segs[size_t(i)].payload.size())}};
        p().inject(a);
    }
    bool resent = false;
    for (auto &g : p().take_conn(c)) resent |= g.seq == first_byte && !g.payload.empty();
    EXPECT_TRUE(resent) << "no fast retransmit: the changing window hid the duplicate ACKs";
    EXPECT_EQ(st().stats().tcp_fast_retransmits, 1u);
    EXPECT_EQ(st().stats().tcp_timeouts, 0u);
}

// ---- Nagle ------------------------------------------------------------------

TEST_F(Tcp, NagleHoldsSmallSegmentsUnlessNoDelay)
{
    Conn c;
    SockId s = passive(&c);
    for (int i = 0; i < 5; i++) ASSERT_EQ(st().send(s, "abcdefghij", 10), 10);
    p().poll();
    auto segs = p().take_conn(c);
    EXPECT_EQ(segs.size(), 1u) << "Nagle: one small segment in flight";
    p().send(c, kAck);
    auto rest = p().take_conn(c);
    EXPECT_EQ(payload_of(segs) + payload_of(rest), 50u);
    ASSERT_EQ(st().set_option(s, SockOpt::kNoDelay, 1), 0);
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(st().send(s, "abcdefghij", 10), 10);
        p().poll();
    }
    EXPECT_EQ(p().take_conn(c).size(), 3u) << "TCP_NODELAY sends each write";
}

// tcp(7): setting TCP_NODELAY pushes what is queued, corked or not (Linux
// pushes pending frames); TCP_CORK stays on for what follows. Clearing
// TCP_CORK sends what waits at once, also a MSG_MORE tail.
TEST_F(Tcp, NoDelayPushesCorkedDataAndUncorkSendsAtOnce)
{
    Conn c;
    SockId s = passive(&c);
    ASSERT_EQ(st().set_option(s, SockOpt::kCork, 1), 0);
    ASSERT_EQ(st().send(s, "abcdefghij", 10), 10);
    p().poll();
    EXPECT_EQ(p().take_conn(c).size(), 0u) << "corked";
    ASSERT_EQ(st().set_option(s, SockOpt::kNoDelay, 1), 0);
    p().poll();
    auto pushed = p().take_conn(c);
    ASSERT_EQ(pushed.size(), 1u) << "TCP_NODELAY pushes the corked bytes";
    EXPECT_EQ(pushed[0].payload.size(), 10u);
    p().send(c, kAck);
    ASSERT_EQ(st().send(s, "klmnopqrst", 10), 10);
    p().poll();
    EXPECT_EQ(p().take_conn(c).size(), 0u) << "still corked after the push";
    ASSERT_EQ(st().set_option(s, SockOpt::kCork, 0), 0);
    p().poll();
    auto uncorked = p().take_conn(c);
    ASSERT_EQ(uncorked.size(), 1u) << "uncork sends at once";
    EXPECT_EQ(uncorked[0].payload.size(), 10u);
    p().send(c, kAck);
    // A MSG_MORE tail, then TCP_CORK off: sent at once too.
    RingSpan span{};
    ASSERT_EQ(st().tx_view(s, &span), 0);
    ASSERT_GE(span.n[0], 5u);
    std::memcpy(span.p[0], "uvwxy", 5);
    ASSERT_EQ(st().tx_commit(s, 5, true), 0);
    p().poll();
    EXPECT_EQ(p().take_conn(c).size(), 0u) << "MSG_MORE holds the tail";
    ASSERT_EQ(st().set_option(s, SockOpt::kCork, 0), 0);
    p().poll();
    auto more = p().take_conn(c);
    ASSERT_EQ(more.size(), 1u) << "clearing TCP_CORK sends a MSG_MORE tail";
    EXPECT_EQ(more[0].payload.size(), 5u);
}

// ---- Transmit checksum offload (mars/checksum_offload.h) --------------------

// With the port offering both offloads and not completing them (as a NIC
// would), a frame leaves with the IPv4 checksum 0 and the TCP checksum
// holding the pseudo-header sum only; adding the segment's bytes and
// inverting, as DPDK's NIC does, gives the correct checksum.
TEST(TcpOutChecksumOffload, FrameCarriesThePseudoHeaderSumAsDpdkExpects)
{
    namespace co = mars::checksum_offload;
    FramePool pool(64);
    RingPool rings(4, 16384, 16384);
    std::vector<std::vector<uint8_t>> sent;
    std::vector<uint32_t> sent_flags;
    SimPort port(pool, [&](const PacketRef &f) {
        sent.emplace_back(f.data, f.data + f.len);
        sent_flags.push_back(f.flags);
        pool.put(f);
    }, kOffloadTxIpCsum | kOffloadTxTcpCsum);
    port.set_offload_emulation(false);
    const StackConfig cfg = test_stack_config(1);
    std::string err;
    auto stack = Stack::create(cfg, port, rings, &err);
    ASSERT_TRUE(stack) << err;
    const MacAddr peer_mac = mac(2);
    const uint32_t peer_ip = ipv4(198, 18, 0, 2);
    // The peer introduces itself (ARP), so the SYN goes out at connect().
    auto arp = build_arp(ArpSpec{peer_mac, MacAddr{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}, 1, peer_mac, MacAddr{}, peer_ip, cfg.ip});
    PacketRef in = pool.get_exact(arp.data(), arp.size());
    uint64_t now = 1'000'000'000;
    stack->input(&in, 1, now);
    stack->poll(now);
    sent.clear();
    sent_flags.clear();
    int64_t s = stack->open(1);
    ASSERT_GE(s, 0);
    ASSERT_EQ(stack->connect(SockId(s), Endpoint{peer_ip, 9000}, now), 0);
    stack->poll(now);
    ASSERT_EQ(sent.size(), 1u);
    const std::vector<uint8_t> &f = sent[0];
    EXPECT_EQ(sent_flags[0] & (kTxIpCsum | kTxTcpCsum), uint32_t(kTxIpCsum | kTxTcpCsum));
    ASSERT_GE(f.size(), co::kL2Len + 20 + 20);
    const size_t ihl = size_t(f[co::kL2Len] & 0xf) * 4;
    const size_t ip_total = size_t(f[co::kL2Len + 2]) << 8 | f[co::kL2Len + 3];
    const size_t tcp = co::kL2Len + ihl, tcp_len = ip_total - ihl;
    EXPECT_EQ(f[co::kL2Len + co::kIpCsumOffset], 0);
    EXPECT_EQ(f[co::kL2Len + co::kIpCsumOffset + 1], 0);
    const uint16_t seed = co::tcp_pseudo_header_seed(cfg.ip, peer_ip, uint16_t(tcp_len));
    EXPECT_EQ(uint16_t(f[tcp + co::kTcpCsumOffset] << 8 | f[tcp + co::kTcpCsumOffset + 1]), seed);
    // What the NIC does: sum the segment as it is (seed in the field), invert.
    uint32_t sum = 0;
    for (size_t i = 0; i < tcp_len; i += 2) sum += uint32_t(f[tcp + i] << 8) | (i + 1 < tcp_len ? f[tcp + i + 1] : 0);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    const uint16_t nic_csum = uint16_t(~sum);
    std::vector<uint8_t> done = f;
    fix_l4_checksum(done.data(), done.size()); // computed from scratch
    EXPECT_EQ(nic_csum, uint16_t(done[tcp + co::kTcpCsumOffset] << 8 | done[tcp + co::kTcpCsumOffset + 1]));
    Parsed check;
    done[tcp + co::kTcpCsumOffset] = uint8_t(nic_csum >> 8);
    done[tcp + co::kTcpCsumOffset + 1] = uint8_t(nic_csum);
    fix_ip_checksum(done.data(), done.size());
    parse_frame(done.data(), done.size(), &check);
    EXPECT_TRUE(check.is_tcp && check.tcp_csum_ok && check.has(kSyn));
    stack.reset();
    EXPECT_EQ(pool.in_use(), 0u);
}

} // namespace
} // namespace mars::sim
