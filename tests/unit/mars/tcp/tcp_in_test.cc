// tcp_in (mars/src/tcp_in.cc): what the stack does with the segments it
// receives: opening handshakes, data and reassembly, closing, timestamps and
// PAWS, SYN cookies, blind in-window attacks. Packetdrill style: the test
// plays the peer with crafted frames (RawPeer) and checks what the stack
// answers. RFC sections are cited where the behaviour comes from. (Moved
// from sim/conformance_test.cc; the tests keep their names.)
#include "tcp_fixture.h"

namespace mars::sim {
namespace {

// ---- Opening ---------------------------------------------------------------

TEST_F(Tcp, PassiveOpenNegotiatesOptions)
{
    SockId l = p().listen(80);
    ASSERT_NE(l, kNoSock);
    EXPECT_EQ(state(l), TcpState::kListen);
    Conn c;
    c.peer_port = 40000;
    c.stack_port = 80;
    c.peer_nxt = 5000;
    TcpSpec syn = p().seg(c, kSyn);
    syn.opts = RawPeer::full_syn_options(777);
    p().inject(syn);
    auto out = p().take_tcp();
    ASSERT_EQ(out.size(), 1u);
    const Parsed &sa = out[0];
    EXPECT_EQ(sa.flags, kSyn | kAck);
    EXPECT_EQ(sa.ack, 5001u);
    EXPECT_TRUE(sa.ip_csum_ok && sa.tcp_csum_ok);
    EXPECT_EQ(sa.ip_frag & 0x4000, 0x4000) << "DF must be set (TCP uses path MTU discovery)";
    ASSERT_TRUE(sa.opts.mss);
    EXPECT_EQ(*sa.opts.mss, 1460);
    EXPECT_TRUE(sa.opts.sack_permitted);
    ASSERT_TRUE(sa.opts.ts);
    EXPECT_EQ(sa.opts.ts->second, 777u) << "SYN-ACK must echo the SYN's TSval";
    EXPECT_TRUE(sa.opts.wscale);
    EXPECT_TRUE(sa.opts_ok);
    // Accept before the final ACK: nothing yet.
    EXPECT_EQ(st().accept(l, 1), -EAGAIN);
    c.peer_nxt = 5001;
    c.stack_nxt = sa.seq + 1;
    c.ts = true;
    c.stack_tsval = sa.opts.ts->first;
    p().send(c, kAck);
    EXPECT_TRUE(p().events_of(l) & kEvAcceptable);
    int64_t s = st().accept(l, 42);
    ASSERT_GE(s, 0);
    SockInfo in = info(SockId(s));
    EXPECT_EQ(in.state, TcpState::kEstablished);
    EXPECT_EQ(in.remote.ip, p().peer_ip);
    EXPECT_EQ(in.remote.port, 40000);
    EXPECT_EQ(in.local.port, 80);
    EXPECT_TRUE(in.sack_ok);
    EXPECT_TRUE(in.ts_ok);
    EXPECT_EQ(in.snd_wscale, 7);
    EXPECT_TRUE(in.snd_mss == 1460u || in.snd_mss == 1448u) << "MSS 1460, less 12 for timestamps or not: " << in.snd_mss;
    EXPECT_EQ(st().stats().tcp_passive_opens, 1u);
}

TEST_F(Tcp, ConnectToClosedPortIsRefused)
{
    int64_t s = st().open(1);
    ASSERT_EQ(st().connect(SockId(s), Endpoint{p().peer_ip, 9000}, p().now), 0);
    p().poll();
    auto syn = p().take_tcp();
    ASSERT_EQ(syn.size(), 1u);
    TcpSpec rst;
    rst.src_mac = p().peer_mac;
    rst.dst_mac = p().stack_mac;
    rst.src_ip = p().peer_ip;
    rst.dst_ip = p().stack_ip;
    rst.sport = 9000;
    rst.dport = syn[0].sport;
    rst.flags = kRst | kAck;
    rst.ack = syn[0].seq + 1;
    rst.window = 0;
    // RFC 9293 3.10.7.3: in SYN-SENT a RST is acceptable only if it acks the SYN.
    TcpSpec bad = rst;
    bad.ack = syn[0].seq + 1000;
    p().inject(bad);
    EXPECT_EQ(state(SockId(s)), TcpState::kSynSent);
    p().inject(rst);
    EXPECT_TRUE(p().events_of(SockId(s)) & kEvReset);
    EXPECT_EQ(info(SockId(s)).error, ECONNREFUSED);
}

TEST_F(Tcp, SegmentToClosedPortGetsRst)
{
    Conn c;
    c.peer_port = 41000;
    c.stack_port = 4444; // nobody listens
    c.peer_nxt = 100;
    TcpSpec syn = p().seg(c, kSyn);
    p().inject(syn);
    auto out = p().take_tcp();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].has(kRst | kAck));
    EXPECT_EQ(out[0].ack, 101u);
    EXPECT_EQ(st().stats().drop_tcp_no_socket, 1u);
    // An incoming RST never provokes a RST.
    TcpSpec rst = syn;
    rst.flags = kRst;
    p().inject(rst);
    EXPECT_TRUE(p().take_tcp().empty());
}

TEST_F(Tcp, SimultaneousOpen)
{
    // RFC 9293 figure 8: both ends send SYN; each answers the other's SYN
    // with SYN-ACK and both reach ESTABLISHED.
    int64_t s = st().open(1);
    ASSERT_EQ(st().connect(SockId(s), Endpoint{p().peer_ip, 9000}, p().now), 0);
    p().poll();
    auto syn = p().take_tcp();
    ASSERT_EQ(syn.size(), 1u);
    Conn c;
    c.peer_port = 9000;
    c.stack_port = syn[0].sport;
    c.peer_nxt = 777000;
    p().inject(p().seg(c, kSyn));
    c.peer_nxt++;
    auto sa = p().take_tcp();
    ASSERT_EQ(sa.size(), 1u);
    EXPECT_EQ(sa[0].flags, kSyn | kAck);
    EXPECT_EQ(sa[0].seq, syn[0].seq) << "the SYN-ACK repeats our ISN";
    EXPECT_EQ(sa[0].ack, 777001u);
    EXPECT_EQ(state(SockId(s)), TcpState::kSynReceived);
    c.stack_nxt = syn[0].seq + 1;
    TcpSpec their_sa = p().seg(c, kSyn | kAck);
    their_sa.seq = 777000;
    p().inject(their_sa);
    EXPECT_EQ(state(SockId(s)), TcpState::kEstablished);
    EXPECT_TRUE(p().events_of(SockId(s)) & kEvConnected);
}

TEST_F(Tcp, RstInSynReceivedReturnsToListen)
{
    SockId l = p().listen(80);
    Conn c;
    c.peer_port = 40001;
    c.stack_port = 80;
    c.peer_nxt = 9000;
    p().send(c, kSyn);
    auto sa = p().take_conn(c);
    ASSERT_EQ(sa.size(), 1u);
    p().send(c, kRst);
    EXPECT_EQ(st().accept(l, 1), -EAGAIN);
    EXPECT_EQ(state(l), TcpState::kListen);
    p().advance(10 * kSec);
    EXPECT_TRUE(p().take_conn(c).empty()) << "no SYN-ACK retransmission after the RST";
    // The same port can connect afresh.
    Conn c2;
    std::string why;
    EXPECT_NE(p().open_passive(l, 80, 40001, &c2, RawPeer::full_syn_options(0), &why), kNoSock) << why;
}

// ---- Data ------------------------------------------------------------------

TEST_F(Tcp, InOrderDataDeliveredAndAckedWithDelayedAck)
{
    Conn c;
    SockId s = passive(&c);
    p().send(c, kAck | kPsh, bytes(100));
    EXPECT_TRUE(p().events_of(s) & kEvReadable);
    // One small segment: the ACK may be delayed, but not past delack_ns.
    auto now_acks = p().take_conn(c);
    if (now_acks.empty()) {
        p().advance(st().next_deadline_ns() - p().now);
        now_acks = p().take_conn(c);
    }
    ASSERT_FALSE(now_acks.empty()) << "never acknowledged";
    EXPECT_EQ(now_acks.back().ack, c.peer_nxt);
    EXPECT_EQ(read_all(s), bytes(100));
    // Two full-sized segments are acknowledged at once (RFC 5681 4.2).
    p().send(c, kAck, bytes(1448, 2));
    p().send(c, kAck, bytes(1448, 3));
    auto acks = p().take_conn(c);
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back().ack, c.peer_nxt);
    EXPECT_GT(st().stats().fastpath_hits, 0u);
}

// Quick-ACK mode (issue 33; mars/README.md "Quick ACKs"): the first data
// segments of a connection are ACKed at once, as Linux does, not after the
// delayed-ACK timer (40 ms that a short exchange used to pay); after 16 the
// delayed-ACK rule is back unchanged (every second segment, or the timer).
TEST_F(Tcp, FirstDataOfAFreshConnectionIsAckedAtOnce)
{
    Conn c;
    SockId s = passive(&c);
    const uint64_t t0 = p().now;
    p().send(c, kAck | kPsh, bytes(100));
    auto acks = p().take_conn(c);
    ASSERT_EQ(acks.size(), 1u) << "the first data segment waited for the delayed-ACK timer";
    EXPECT_EQ(acks[0].ack, c.peer_nxt);
    EXPECT_TRUE(acks[0].payload.empty());
    EXPECT_EQ(p().now, t0) << "no virtual time passed: no timer";
    EXPECT_EQ(read_all(s), bytes(100));
}

TEST_F(Tcp, QuickAcksEndAfterSixteenThenEverySecondSegment)
{
    Conn c;
    SockId s = passive(&c);
    for (int i = 0; i < 16; i++) {
        p().send(c, kAck, bytes(1448, uint8_t(i)));
        auto a = p().take_conn(c);
        ASSERT_EQ(a.size(), 1u) << "quick mode: segment " << i << " ACKed at once";
        EXPECT_EQ(a[0].ack, c.peer_nxt);
        read_all(s);
    }
    for (int i = 0; i < 8; i++) {
        p().send(c, kAck, bytes(1448, uint8_t(40 + 2 * i)));
        EXPECT_TRUE(p().take_conn(c).empty()) << "after quick mode the odd segment waits (" << i << ")";
        p().send(c, kAck, bytes(1448, uint8_t(41 + 2 * i)));
        auto a = p().take_conn(c);
        ASSERT_EQ(a.size(), 1u) << "every second segment is ACKed (" << i << ")";
        EXPECT_EQ(a[0].ack, c.peer_nxt);
        read_all(s);
    }
    // A lone segment waits for the timer, and no longer than delack_ns.
    const uint64_t t0 = p().now;
    p().send(c, kAck | kPsh, bytes(10, 9));
    EXPECT_TRUE(p().take_conn(c).empty());
    p().advance(st().next_deadline_ns() - p().now);
    auto a = p().take_conn(c);
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].ack, c.peer_nxt);
    EXPECT_EQ(p().now - t0, RawPeer::Options{}.stack.tcp.delack_ns);
}

TEST_F(Tcp, QuickAckModeAgainAfterIdle)
{
    Conn c;
    SockId s = passive(&c);
    for (int i = 0; i < 16; i++) p().send(c, kAck, bytes(1448, uint8_t(i)));
    read_all(s);
    p().take_conn(c);
    p().send(c, kAck | kPsh, bytes(10, 1));
    EXPECT_TRUE(p().take_conn(c).empty()) << "quick mode is over: the lone segment waits";
    p().advance(100 * kMs);
    ASSERT_EQ(p().take_conn(c).size(), 1u) << "the delayed ACK";
    // Idle (nothing sent for longer than the RTO): quick mode again.
    EXPECT_GT(uint64_t(2 * kSec), uint64_t(info(s).rto_us) * 1000u);
    p().advance(2 * kSec);
    p().send(c, kAck | kPsh, bytes(10, 2));
    auto a = p().take_conn(c);
    ASSERT_EQ(a.size(), 1u) << "after idle the first segment is ACKed at once";
    EXPECT_EQ(a[0].ack, c.peer_nxt);
    p().send(c, kAck | kPsh, bytes(10, 3));
    EXPECT_EQ(p().take_conn(c).size(), 1u) << "and the next ones too (quick mode)";
}

TEST_F(Tcp, OutOfOrderHeldThenDeliveredInOrder)
{
    Conn c;
    SockId s = passive(&c);
    auto a = bytes(1000, 4), b = bytes(1000, 5), d = bytes(1000, 6);
    uint32_t base = c.peer_nxt;
    // Send the second and third segments first.
    Conn later = c;
    later.peer_nxt = base + 1000;
    p().send(later, kAck, b);
    p().send(later, kAck, d);
    auto dup = p().take_conn(c);
    ASSERT_FALSE(dup.empty()) << "out-of-order data must be acknowledged at once (RFC 5681 4.2)";
    EXPECT_EQ(dup.back().ack, base);
    ASSERT_FALSE(dup.back().opts.sack.empty()) << "SACK was negotiated";
    EXPECT_EQ(dup.back().opts.sack[0].first, base + 1000);
    EXPECT_EQ(dup.back().opts.sack[0].second, base + 2000 + (dup.size() > 1 ? 1000u : 0u));
    EXPECT_EQ(info(s).rx_readable, 0u);
    EXPECT_GT(info(s).ooo_frames, 0u);
    EXPECT_EQ(st().stats().ooo_frames_used, info(s).ooo_frames);
    p().send(c, kAck, a);
    auto acks = p().take_conn(c);
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back().ack, base + 3000);
    std::vector<uint8_t> want = a;
    want.insert(want.end(), b.begin(), b.end());
    want.insert(want.end(), d.begin(), d.end());
    EXPECT_EQ(read_all(s), want);
    EXPECT_EQ(info(s).ooo_frames, 0u);
    EXPECT_EQ(st().stats().ooo_frames_used, 0u);
}

TEST_F(Tcp, OutOfOrderShareIsBounded)
{
    RawPeer::Options o;
    o.stack.ooo_frames_per_conn = 8;
    make(o);
    Conn c;
    SockId s = passive(&c);
    uint32_t base = c.peer_nxt;
    for (uint32_t i = 1; i <= 20; i++) {
        Conn hole = c;
        hole.peer_nxt = base + i * 500;
        p().send(hole, kAck, bytes(100, uint8_t(i)));
    }
    EXPECT_LE(info(s).ooo_frames, 8u);
    EXPECT_GT(st().stats().drop_tcp_ooo_full, 0u);
    EXPECT_EQ(p().pool().in_use(), st().stats().ooo_frames_used) << "frames held = frames the stack says it holds";
}

TEST_F(Tcp, DuplicateSegmentAckedNotDeliveredTwice)
{
    Conn c;
    SockId s = passive(&c);
    Conn old = c;
    p().send(c, kAck | kPsh, bytes(300, 7));
    p().take_conn(c);
    p().send(old, kAck | kPsh, bytes(300, 7)); // the same segment again
    auto acks = p().take_conn(c);
    ASSERT_FALSE(acks.empty()) << "a duplicate gets an immediate ACK (RFC 9293 3.10.7.4)";
    EXPECT_EQ(acks.back().ack, c.peer_nxt);
    EXPECT_EQ(read_all(s).size(), 300u);
}

TEST_F(Tcp, ReceiveWindowFollowsReader)
{
    RawPeer::Options o;
    o.stack.tcp.rcvbuf = 16384;
    make(o);
    Conn c;
    TcpOptions syn = RawPeer::full_syn_options(0);
    syn.wscale.reset();
    SockId s = passive(&c, 40000, syn);
    const uint32_t start = c.peer_nxt;
    // Fill the window without reading; the stack must not accept more than it offered.
    for (int i = 0; i < 40; i++) p().send(c, kAck, bytes(1000, uint8_t(i)));
    p().advance(100 * kMs);
    auto acks = p().take_conn(c);
    ASSERT_FALSE(acks.empty());
    const uint32_t readable = info(s).rx_readable;
    EXPECT_LE(readable, 16384u);
    EXPECT_GE(readable, 8192u) << "accepted less than half of its buffer";
    EXPECT_EQ(acks.back().ack - start, readable) << "acked exactly what was queued";
    EXPECT_EQ(acks.back().window, 0u) << "a full receive ring advertises a zero window";
    uint32_t acked = acks.back().ack;
    // Read everything: a window update opens it again.
    auto got = read_all(s);
    EXPECT_EQ(got.size(), readable);
    p().poll();
    p().advance(100 * kMs);
    auto upd = p().take_conn(c);
    ASSERT_FALSE(upd.empty()) << "no window update after the reader drained the ring";
    EXPECT_GT(upd.back().window, 0u);
    EXPECT_EQ(upd.back().ack, acked);
}

TEST_F(Tcp, WindowShrinkDoesNotLoseData)
{
    Conn c;
    TcpOptions syn = RawPeer::full_syn_options(0);
    syn.wscale.reset();
    SockId s = passive(&c, 40000, syn);
    c.window = 8000;
    p().send(c, kAck);
    auto data = bytes(30000, 10);
    ASSERT_EQ(st().send(s, data.data(), data.size()), int64_t(data.size()));
    p().poll();
    std::vector<uint8_t> got;
    uint32_t iss_data = c.stack_nxt; // first data byte
    auto collect = [&](const std::vector<Parsed> &segs) {
        for (auto &g : segs) {
            uint32_t off = g.seq - iss_data;
            if (g.payload.empty() || off > data.size()) continue;
            if (off + g.payload.size() > got.size()) got.resize(off + g.payload.size());
            std::copy(g.payload.begin(), g.payload.end(), got.begin() + off);
        }
    };
    auto burst = p().take_conn(c);
    EXPECT_LE(payload_of(burst), 8000u);
    collect(burst);
    // Ack half and shrink the window to 0: the right edge moves left.
    Conn ackc = c;
    ackc.stack_nxt = iss_data + 2000;
    ackc.window = 0;
    p().send(ackc, kAck);
    p().advance(5 * kSec);
    collect(p().take_conn(c));
    // Reopen and drain the rest, acking in order.
    for (int i = 0; i < 400 && got.size() < data.size(); i++) {
        Conn a = c;
        a.stack_nxt = iss_data + uint32_t(got.size());
        a.window = 8000;
        p().send(a, kAck);
        p().advance(50 * kMs);
        collect(p().take_conn(c));
    }
    ASSERT_EQ(got.size(), data.size());
    EXPECT_EQ(got, data);
}

// ---- Closing ---------------------------------------------------------------

TEST_F(Tcp, FinCarryingData)
{
    Conn c;
    SockId s = passive(&c);
    p().send(c, kAck | kPsh | kFin, bytes(500, 11));
    auto acks = p().take_conn(c);
    ASSERT_FALSE(acks.empty());
    EXPECT_EQ(acks.back().ack, c.peer_nxt) << "the ACK covers data and FIN";
    EXPECT_EQ(state(s), TcpState::kCloseWait);
    EXPECT_TRUE(p().events_of(s) & kEvPeerClosed);
    EXPECT_TRUE(info(s).peer_closed);
    EXPECT_EQ(read_all(s), bytes(500, 11));
}

TEST_F(Tcp, DataAfterFinIsNotDelivered)
{
    Conn c;
    SockId s = passive(&c);
    p().send(c, kAck | kFin);
    p().take_conn(c);
    p().send(c, kAck | kPsh, bytes(100, 12)); // beyond the FIN
    EXPECT_EQ(info(s).rx_readable, 0u);
    EXPECT_EQ(state(s), TcpState::kCloseWait);
}

TEST_F(Tcp, HalfCloseThenLastAck)
{
    Conn c;
    SockId s = passive(&c);
    p().send(c, kAck | kFin);
    p().take_conn(c);
    // The stack may still send after the peer's FIN.
    auto data = bytes(3000, 13);
    ASSERT_EQ(st().send(s, data.data(), data.size()), int64_t(data.size()));
    p().poll();
    auto segs = p().take_conn(c);
    EXPECT_EQ(payload_of(segs), 3000u);
    p().send(c, kAck);
    EXPECT_EQ(st().close(s), 0);
    p().poll();
    auto fin = p().take_conn(c);
    ASSERT_FALSE(fin.empty());
    EXPECT_TRUE(fin.back().has(kFin));
    EXPECT_EQ(state(s), TcpState::kLastAck);
    p().send(c, kAck);
    p().advance(kMs);
    EXPECT_TRUE(p().events_of(s) & kEvClosed);
    EXPECT_EQ(p().rings().outstanding(), 0u);
}

TEST_F(Tcp, SimultaneousCloseThroughClosing)
{
    Conn c;
    SockId s = passive(&c);
    st().close(s);
    p().poll();
    auto fin = p().take_conn(c);
    ASSERT_EQ(fin.size(), 1u);
    // The peer's FIN crosses ours: it does not ack our FIN.
    Conn crossing = c;
    crossing.stack_nxt = fin[0].seq; // acks up to, not including, our FIN
    p().send(crossing, kAck | kFin);
    c.peer_nxt = crossing.peer_nxt;
    EXPECT_EQ(state(s), TcpState::kClosing);
    auto ack = p().take_conn(c);
    ASSERT_FALSE(ack.empty());
    EXPECT_EQ(ack.back().ack, c.peer_nxt);
    p().send(c, kAck);
    EXPECT_EQ(conn_state(c), TcpState::kTimeWait);
}

TEST_F(Tcp, TimeWaitReusedByNewerSyn)
{
    // RFC 6191 / RFC 1122 4.2.2.13: a SYN for a TIME-WAIT connection with a
    // higher timestamp (or higher ISN) may reopen it.
    Conn c;
    SockId s = passive(&c, 40100);
    st().close(s);
    p().poll();
    p().take_conn(c);
    p().send(c, kAck | kFin);
    p().take_conn(c);
    ASSERT_EQ(conn_state(c), TcpState::kTimeWait);
    p().advance(100 * kMs);
    Conn fresh = c;
    fresh.peer_nxt = c.peer_nxt + 100000;
    TcpSpec syn = p().seg(fresh, kSyn);
    syn.opts = RawPeer::full_syn_options(c.peer_tsval + uint32_t(p().now / kMs) + 10);
    syn.ack = 0;
    p().inject(syn);
    auto sa = p().take_conn(c);
    ASSERT_EQ(sa.size(), 1u) << "a newer SYN must reopen a TIME-WAIT connection";
    EXPECT_EQ(sa[0].flags, kSyn | kAck);
    EXPECT_EQ(sa[0].ack, fresh.peer_nxt + 1);
}

TEST_F(Tcp, TimeWaitRejectsOldSyn)
{
    Conn c;
    SockId s = passive(&c, 40101, RawPeer::full_syn_options(0));
    st().close(s);
    p().poll();
    p().take_conn(c);
    p().send(c, kAck | kFin);
    p().take_conn(c);
    ASSERT_EQ(conn_state(c), TcpState::kTimeWait);
    Conn old = c;
    old.peer_nxt = c.peer_nxt - 50000; // an ISN below what we saw
    TcpSpec syn = p().seg(old, kSyn);
    syn.opts = RawPeer::full_syn_options(1); // and an old timestamp
    syn.ack = 0;
    p().inject(syn);
    for (auto &g : p().take_conn(c)) EXPECT_FALSE(g.has(kSyn)) << "an old SYN must not reopen: " << g.describe();
    EXPECT_EQ(conn_state(c), TcpState::kTimeWait);
}

// ---- Timestamps and PAWS (RFC 7323) ------------------------------------------

TEST_F(Tcp, PawsRejectsOldTimestamp)
{
    Conn c;
    SockId s = passive(&c);
    p().send(c, kAck | kPsh, bytes(100, 15));
    ASSERT_EQ(info(s).rx_readable, 100u);
    p().take_conn(c);
    uint64_t paws = st().stats().drop_tcp_paws;
    TcpSpec old = p().seg(c, kAck | kPsh, bytes(100, 16));
    old.opts.ts = {c.peer_tsval - 1000, c.stack_tsval}; // older than ts_recent
    p().inject(old);
    EXPECT_EQ(info(s).rx_readable, 100u) << "PAWS must drop the segment";
    EXPECT_EQ(st().stats().drop_tcp_paws, paws + 1);
    auto ack = p().take_conn(c);
    ASSERT_EQ(ack.size(), 1u) << "RFC 7323 5.3: send an ACK for the dropped segment";
    EXPECT_EQ(ack[0].ack, c.peer_nxt);
    // A current timestamp is fine.
    p().send(c, kAck | kPsh, bytes(100, 16));
    EXPECT_EQ(info(s).rx_readable, 200u);
    // One tick older is tolerated (a reordered original behind a retransmission).
    p().advance(5 * kMs);
    p().send(c, kAck | kPsh, bytes(100, 17));
    ASSERT_EQ(info(s).rx_readable, 300u);
    TcpSpec late = p().seg(c, kAck | kPsh, bytes(100, 18));
    late.opts.ts->first -= 1;
    p().inject(late);
    EXPECT_EQ(info(s).rx_readable, 400u) << "a TSval one tick behind TS.Recent must be accepted";
    EXPECT_EQ(st().stats().drop_tcp_paws, paws + 1);
}

TEST_F(Tcp, TimestampEchoedInAcks)
{
    Conn c;
    passive(&c);
    p().advance(5 * kMs);
    p().send(c, kAck | kPsh, bytes(1448, 17));
    p().send(c, kAck | kPsh, bytes(1448, 18));
    auto acks = p().take_conn(c);
    ASSERT_FALSE(acks.empty());
    ASSERT_TRUE(acks.back().opts.ts);
    EXPECT_EQ(acks.back().opts.ts->second, c.peer_tsval + uint32_t(p().now / kMs));
}

TEST_F(Tcp, TimestampOfSlowPathSegmentIsEchoed)
{
    // RFC 7323 4.3: TS.Recent follows every acceptable segment at the ACK
    // point, not only those the header prediction takes.
    Conn c;
    passive(&c);
    p().advance(7 * kMs);
    c.window = 30000; // a window change: not header-predicted
    const uint32_t tsval = c.peer_tsval + uint32_t(p().now / kMs);
    p().send(c, kAck | kPsh, bytes(100, 19));
    p().advance(100 * kMs); // the delayed ACK
    auto acks = p().take_conn(c);
    ASSERT_FALSE(acks.empty());
    ASSERT_TRUE(acks.back().opts.ts);
    EXPECT_EQ(acks.back().ack, c.peer_nxt);
    EXPECT_EQ(acks.back().opts.ts->second, tsval);
}

TEST_F(Tcp, FastPathAndLookupCacheAreCounted)
{
    Conn c;
    passive(&c);
    const StackStats before = st().stats();
    p().send(c, kAck | kPsh, bytes(1000, 20));
    p().send(c, kAck | kPsh, bytes(1000, 21));
    const StackStats &after = st().stats();
    EXPECT_EQ(after.fastpath_hits, before.fastpath_hits + 2);
    EXPECT_EQ(after.lookup_cache_hits, before.lookup_cache_hits + 2) << "the same flow twice: the cache hits";
    // Another connection's segment misses the one-entry cache.
    Conn d;
    passive(&d, 40001);
    const uint64_t misses = st().stats().lookup_cache_misses;
    p().send(c, kAck | kPsh, bytes(10, 22));
    EXPECT_EQ(st().stats().lookup_cache_misses, misses + 1);
}

// The fast path's contract (mars/src/rx/fast_path.h), by its count
// (fastpath_hits): it takes the next in-order data segment, a pure ACK of
// new data, data that acknowledges new data and a smaller (not zero)
// window; it hands on to the TCP rules a segment past a gap, an in-order
// one while the out-of-order queue holds data (the queue must drain behind
// it), an ACK of nothing new, a window that opens or is zero, and a FIN --
// and takes in-order data again once the queue has drained.
TEST_F(Tcp, FastPathTakesInOrderDataAndNewAcksAndHandsOnTheRest)
{
    Conn c;
    SockId s = passive(&c);
    auto hits = [&] { return st().stats().fastpath_hits; };
    uint64_t h = hits();
    p().send(c, kAck | kPsh, bytes(500, 30));
    EXPECT_EQ(hits(), h + 1) << "the next in-order data segment";
    p().take_conn(c);

    Conn later = c;
    later.peer_nxt = c.peer_nxt + 500;
    h = hits();
    p().send(later, kAck, bytes(500, 32));
    EXPECT_EQ(hits(), h) << "data past a gap";
    EXPECT_GT(info(s).ooo_frames, 0u);
    p().take_conn(c);
    p().send(c, kAck, bytes(500, 31));
    EXPECT_EQ(hits(), h) << "in-order data while the out-of-order queue holds data";
    EXPECT_EQ(info(s).ooo_frames, 0u) << "the queue drained behind the segment that filled the gap";
    c.peer_nxt = later.peer_nxt;
    p().take_conn(c);
    p().send(c, kAck, bytes(500, 33));
    EXPECT_EQ(hits(), h + 1) << "in-order data again once the queue drained";
    std::vector<uint8_t> want;
    for (uint8_t seed : {30, 31, 32, 33}) {
        const auto b = bytes(500, seed);
        want.insert(want.end(), b.begin(), b.end());
    }
    EXPECT_EQ(read_all(s), want);

    const auto data = bytes(1000, 34);
    ASSERT_EQ(st().send(s, data.data(), data.size()), int64_t(data.size()));
    p().poll();
    ASSERT_EQ(payload_of(p().take_conn(c)), 1000u);
    h = hits();
    p().send(c, kAck);
    EXPECT_EQ(hits(), h + 1) << "a pure ACK of new data";
    EXPECT_EQ(info(s).tx_unacked, 0u);

    // Data that also acknowledges new data (a request answering our reply):
    // both halves taken.
    ASSERT_EQ(st().send(s, data.data(), 500), 500);
    p().poll();
    ASSERT_EQ(payload_of(p().take_conn(c)), 500u);
    ASSERT_EQ(info(s).tx_unacked, 500u);
    h = hits();
    p().send(c, kAck | kPsh, bytes(200, 36));
    EXPECT_EQ(hits(), h + 1) << "data that acknowledges new data";
    EXPECT_EQ(info(s).tx_unacked, 0u);
    EXPECT_EQ(read_all(s), bytes(200, 36));
    p().take_conn(c);

    h = hits();
    p().send(c, kAck);
    EXPECT_EQ(hits(), h) << "an ACK of nothing new";
    const uint16_t wnd = c.window;
    c.window = uint16_t(wnd / 2);
    p().send(c, kAck, bytes(100, 35));
    EXPECT_EQ(hits(), h + 1) << "a smaller window (not zero)";
    EXPECT_EQ(info(s).snd_wnd, uint32_t(wnd / 2) << info(s).snd_wscale) << "the smaller window taken";
    c.window = wnd;
    p().send(c, kAck, bytes(100, 37));
    EXPECT_EQ(hits(), h + 1) << "a window that opens";
    c.window = 0;
    p().send(c, kAck, bytes(100, 38));
    EXPECT_EQ(hits(), h + 1) << "a zero window";
    c.window = wnd;
    p().send(c, kAck | kFin);
    EXPECT_EQ(hits(), h + 1) << "a FIN";
    EXPECT_EQ(state(s), TcpState::kCloseWait);
}

// ---- SYN cookies (RFC 4987) --------------------------------------------------

TEST_F(Tcp, SynCookieHandshakeWhenSynQueueOverflows)
{
    RawPeer::Options o;
    o.stack.tcp.syn_backlog = 4;
    make(o);
    SockId l = p().listen(80, 16);
    // Half-open flood from many ports: nobody completes.
    std::vector<Conn> flood(12);
    std::vector<Parsed> synacks;
    for (size_t i = 0; i < flood.size(); i++) {
        Conn &c = flood[i];
        c.peer_port = uint16_t(30000 + i);
        c.stack_port = 80;
        c.peer_nxt = 1000 * uint32_t(i + 1);
        TcpSpec syn = p().seg(c, kSyn);
        syn.opts = RawPeer::full_syn_options(50 + uint32_t(i));
        c.peer_nxt++;
        p().inject(syn);
        auto sa = p().take_conn(c);
        ASSERT_EQ(sa.size(), 1u) << "every SYN gets a SYN-ACK, cookie or not (SYN " << i << ")";
        c.ts = sa[0].opts.ts.has_value();
        c.peer_tsval = 50 + uint32_t(i);
    }
    EXPECT_GT(st().stats().tcp_syncookies_sent, 0u);
    // Complete the handshake of the last (cookie) SYN: the ACK alone must
    // create the connection.
    Conn &last = flood.back();
    p().send(last, kAck);
    EXPECT_EQ(st().stats().tcp_syncookies_ok, 1u);
    int64_t s = st().accept(l, 5);
    ASSERT_GE(s, 0) << "the cookie ACK did not create a connection";
    EXPECT_EQ(state(SockId(s)), TcpState::kEstablished);
    EXPECT_EQ(info(SockId(s)).remote.port, last.peer_port);
    // Data flows on it.
    p().send(last, kAck | kPsh, bytes(100, 19));
    EXPECT_EQ(info(SockId(s)).rx_readable, 100u);
    // The handshake's pure ACK lost: the first data segment completes it and
    // its payload is taken at once.
    Conn &other = flood[flood.size() - 3];
    p().send(other, kAck | kPsh, bytes(100, 21));
    EXPECT_EQ(st().stats().tcp_syncookies_ok, 2u);
    int64_t s2 = st().accept(l, 6);
    ASSERT_GE(s2, 0) << "the cookie data segment did not create a connection";
    EXPECT_EQ(info(SockId(s2)).rx_readable, 100u) << "the data that completed the handshake was dropped";
    // A forged ACK (wrong cookie) creates nothing.
    Conn forged = flood[flood.size() - 2];
    forged.stack_nxt += 12345;
    p().send(forged, kAck);
    EXPECT_EQ(st().stats().tcp_syncookies_ok, 2u);
}

// ---- RFC 5961 blind in-window attacks -----------------------------------------

TEST_F(Tcp, InWindowRstNotExactGetsChallengeAck)
{
    Conn c;
    SockId s = passive(&c);
    uint64_t ch = st().stats().tcp_challenge_acks;
    Conn blind = c;
    blind.peer_nxt = c.peer_nxt + 100; // in window, not exact
    TcpSpec rst = p().seg(blind, kRst);
    rst.opts = TcpOptions{};
    p().inject(rst);
    EXPECT_EQ(state(s), TcpState::kEstablished);
    EXPECT_EQ(st().stats().tcp_challenge_acks, ch + 1);
    auto out = p().take_conn(c);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].flags & (kRst | kSyn | kFin), 0);
    EXPECT_EQ(out[0].ack, c.peer_nxt);
    // Out of window: silently dropped.
    blind.peer_nxt = c.peer_nxt + 0x40000000u;
    rst = p().seg(blind, kRst);
    rst.opts = TcpOptions{};
    p().inject(rst);
    EXPECT_EQ(state(s), TcpState::kEstablished);
    EXPECT_TRUE(p().take_conn(c).empty());
    // Exactly rcv.nxt: the connection is reset.
    rst = p().seg(c, kRst);
    rst.opts = TcpOptions{};
    p().inject(rst);
    EXPECT_TRUE(p().events_of(s) & kEvReset);
    EXPECT_EQ(info(s).error, ECONNRESET);
}

TEST_F(Tcp, ChallengeAcksAreThrottledPerConnection)
{
    // RFC 5961 7: a flood of in-window RSTs does not become a flood of ACKs.
    Conn c;
    SockId s = passive(&c);
    Conn d;
    passive(&d, 40001);
    const uint64_t ch = st().stats().tcp_challenge_acks;
    Conn blind = c;
    for (uint32_t i = 0; i < 50; i++) {
        blind.peer_nxt = c.peer_nxt + 100 + i;
        TcpSpec rst = p().seg(blind, kRst);
        rst.opts = TcpOptions{};
        p().inject(rst);
    }
    EXPECT_EQ(state(s), TcpState::kEstablished);
    EXPECT_EQ(st().stats().tcp_challenge_acks, ch + 1);
    EXPECT_EQ(p().take_conn(c).size(), 1u);
    // Another connection is not starved by the first one's flood.
    Conn blind_d = d;
    blind_d.peer_nxt = d.peer_nxt + 100;
    TcpSpec rst = p().seg(blind_d, kRst);
    rst.opts = TcpOptions{};
    p().inject(rst);
    EXPECT_EQ(p().take_conn(d).size(), 1u);
    // A little later the first connection may challenge again.
    p().advance(2 * kMs);
    p().take_conn(c);
    blind.peer_nxt = c.peer_nxt + 7;
    rst = p().seg(blind, kRst);
    rst.opts = TcpOptions{};
    p().inject(rst);
    EXPECT_EQ(st().stats().tcp_challenge_acks, ch + 3);
    EXPECT_EQ(p().take_conn(c).size(), 1u);
}

TEST_F(Tcp, SynInEstablishedGetsChallengeAck)
{
    Conn c;
    SockId s = passive(&c);
    uint64_t ch = st().stats().tcp_challenge_acks;
    Conn blind = c;
    blind.peer_nxt = c.peer_nxt + 10;
    TcpSpec syn = p().seg(blind, kSyn);
    syn.ack = 0;
    p().inject(syn);
    EXPECT_EQ(state(s), TcpState::kEstablished);
    EXPECT_EQ(st().stats().tcp_challenge_acks, ch + 1);
    auto out = p().take_conn(c);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].flags & (kRst | kSyn), 0);
    EXPECT_EQ(out[0].ack, c.peer_nxt);
}

TEST_F(Tcp, DataWithBadAckIsNotDelivered)
{
    // RFC 5961 5.2: ACK outside [snd.una - max.snd.wnd, snd.nxt] -> drop
    // (and challenge ACK).
    Conn c;
    SockId s = passive(&c);
    Conn blind = c;
    blind.stack_nxt = c.stack_nxt + 0x20000000u; // acks data never sent
    p().send(blind, kAck | kPsh, bytes(100, 20));
    EXPECT_EQ(info(s).rx_readable, 0u);
    blind = c;
    blind.stack_nxt = c.stack_nxt - 0x20000000u; // far in the past
    p().send(blind, kAck | kPsh, bytes(100, 21));
    EXPECT_EQ(info(s).rx_readable, 0u);
    EXPECT_EQ(state(s), TcpState::kEstablished);
}
} // namespace
} // namespace mars::sim
