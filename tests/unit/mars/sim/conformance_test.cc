// Conformance of the TCP state machine and its odd cases, packetdrill style:
// the test plays the peer with crafted frames (RawPeer) and checks what the
// stack answers. RFC sections are cited where the behaviour comes from.
#include "malformed.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>

namespace mars::sim {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSec = 1'000'000'000;
using Conn = RawPeer::Conn;

std::vector<uint8_t> bytes(size_t n, uint8_t seed = 1)
{
    std::vector<uint8_t> v(n);
    pattern_fill(seed, 0, v.data(), n);
    return v;
}

class Tcp : public ::testing::Test {
  protected:
    void SetUp() override { make(RawPeer::Options{}); }
    void make(const RawPeer::Options &o) { peer = std::make_unique<RawPeer>(o); }
    RawPeer &p() { return *peer; }
    Stack &st() { return peer->stack(); }

    TcpState state(SockId s)
    {
        SockInfo in{};
        EXPECT_EQ(st().info(s, &in), 0);
        return in.state;
    }
    // The state of c's connection as the stack's table has it (also after the
    // application closed it and its id is gone); kClosed when not there.
    TcpState conn_state(const Conn &c)
    {
        struct Find {
            const Conn *c;
            TcpState st = TcpState::kClosed;
        } find{&c};
        st().for_each_socket(
            [](SockId, const SockInfo &in, uint64_t, void *arg) {
                auto *f = static_cast<Find *>(arg);
                if (in.remote.port == f->c->peer_port && in.local.port == f->c->stack_port) f->st = in.state;
            },
            &find);
        return find.st;
    }
    SockInfo info(SockId s)
    {
        SockInfo in{};
        EXPECT_EQ(st().info(s, &in), 0);
        return in;
    }
    // A passive connection with every option.
    SockId passive(Conn *c, uint16_t peer_port = 40000, TcpOptions opts = RawPeer::full_syn_options(0))
    {
        if (listener == kNoSock) listener = p().listen(80);
        std::string why;
        SockId s = p().open_passive(listener, 80, peer_port, c, opts, &why);
        EXPECT_NE(s, kNoSock) << why;
        return s;
    }
    SockId active(Conn *c, uint16_t peer_port = 9000, TcpOptions opts = RawPeer::full_syn_options(0))
    {
        std::string why;
        SockId s = p().open_active(peer_port, c, opts, &why);
        EXPECT_NE(s, kNoSock) << why;
        return s;
    }
    std::vector<uint8_t> read_all(SockId s)
    {
        std::vector<uint8_t> v(1 << 20);
        int64_t n = st().recv(s, v.data(), v.size());
        v.resize(n > 0 ? size_t(n) : 0);
        return v;
    }
    // Payload bytes in segments, concatenated.
    static size_t payload_of(const std::vector<Parsed> &segs)
    {
        size_t n = 0;
        for (auto &s : segs) n += s.payload.size();
        return n;
    }

    std::unique_ptr<RawPeer> peer;
    SockId listener = kNoSock;
};

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

TEST_F(Tcp, SynRetransmittedThenFailsAfterSynRetries)
{
    RawPeer::Options o;
    o.stack.tcp.syn_retries = 2;
    make(o);
    int64_t s = st().open(1);
    ASSERT_GE(s, 0);
    ASSERT_EQ(st().connect(SockId(s), Endpoint{p().peer_ip, 9000}, p().now), 0);
    p().poll();
    EXPECT_EQ(p().take_tcp().size(), 1u);
    p().advance(600 * kSec);
    auto retx = p().take_tcp();
    EXPECT_EQ(retx.size(), 2u) << "syn_retries = 2";
    for (auto &r : retx) EXPECT_EQ(r.flags, kSyn);
    EXPECT_TRUE(p().events_of(SockId(s)) & kEvError);
    EXPECT_EQ(info(SockId(s)).error, ETIMEDOUT);
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

TEST_F(Tcp, SynAckRetransmittedInSynReceived)
{
    SockId l = p().listen(80);
    (void)l;
    Conn c;
    c.peer_port = 40002;
    c.stack_port = 80;
    c.peer_nxt = 1;
    p().send(c, kSyn);
    auto first = p().take_conn(c);
    ASSERT_EQ(first.size(), 1u);
    p().advance(3 * kSec);
    auto again = p().take_conn(c);
    ASSERT_GE(again.size(), 1u);
    EXPECT_EQ(again[0].flags, kSyn | kAck);
    EXPECT_EQ(again[0].seq, first[0].seq);
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

TEST_F(Tcp, ZeroWindowPersistsForLong)
{
    Conn c;
    SockId s = passive(&c);
    const uint32_t first_byte = c.stack_nxt;
    c.window = 0;
    p().send(c, kAck); // the peer closes its window
    auto data = bytes(50000, 9);
    ASSERT_EQ(st().send(s, data.data(), data.size()), int64_t(data.size()));
    p().poll();
    std::vector<uint8_t> got;
    auto collect = [&](const std::vector<Parsed> &segs) {
        for (auto &g : segs) {
            uint32_t off = g.seq - first_byte;
            if (g.payload.empty() || off > data.size()) continue;
            if (off + g.payload.size() > got.size()) got.resize(off + g.payload.size());
            std::copy(g.payload.begin(), g.payload.end(), got.begin() + off);
        }
    };
    auto first = p().take_conn(c);
    EXPECT_LE(payload_of(first), 1u) << "nothing but a probe into a zero window";
    // Ten minutes of zero window, the peer answering every probe (acking
    // nothing new): the connection must stay (RFC 9293 3.8.6.1), probing.
    size_t probes = 0;
    Conn zero = c;
    zero.stack_nxt = first_byte;
    for (int i = 0; i < 600; i++) {
        p().advance(kSec);
        for (auto &g : p().take_conn(c)) {
            probes++;
            EXPECT_LE(g.payload.size(), 1u);
            p().send(zero, kAck);
        }
    }
    EXPECT_GE(probes, 5u) << "the persist timer must probe";
    EXPECT_EQ(state(s), TcpState::kEstablished);
    EXPECT_FALSE(p().events_of(s) & (kEvError | kEvReset));
    // The window opens: everything flows, byte exact.
    for (int i = 0; i < 400 && got.size() < data.size(); i++) {
        Conn a = c;
        a.stack_nxt = first_byte + uint32_t(got.size());
        a.window = 65535;
        p().send(a, kAck);
        p().advance(10 * kMs);
        collect(p().take_conn(c));
    }
    ASSERT_EQ(got.size(), data.size());
    EXPECT_EQ(got, data);
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

TEST_F(Tcp, TimeWaitExpiresAfterConfiguredTime)
{
    Conn c;
    SockId s = passive(&c);
    st().close(s);
    p().poll();
    p().take_conn(c);
    p().send(c, kAck | kFin);
    p().take_conn(c);
    ASSERT_EQ(conn_state(c), TcpState::kTimeWait);
    p().advance(test_stack_config(1).tcp.time_wait_ns - 100 * kMs);
    EXPECT_TRUE(p().events_of(s) & kEvClosed) << "the closed id is handed back at once, not after 2MSL";
    EXPECT_EQ(st().info(s, nullptr), -EBADF);
    EXPECT_EQ(conn_state(c), TcpState::kTimeWait) << "left TIME-WAIT early";
    p().advance(200 * kMs);
    EXPECT_EQ(conn_state(c), TcpState::kClosed);
    EXPECT_EQ(st().stats().conns_open, 1u) << "only the listener is left";
    p().send(c, kAck);
    auto out = p().take_conn(c);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(out[0].has(kRst));
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

// ---- Retransmission ---------------------------------------------------------

TEST_F(Tcp, RetransmissionTimeoutBacksOffAndFails)
{
    RawPeer::Options o;
    o.stack.tcp.max_retries = 4;
    make(o);
    Conn c;
    SockId s = passive(&c);
    auto data = bytes(1000, 22);
    ASSERT_EQ(st().send(s, data.data(), data.size()), 1000);
    p().poll();
    auto first = p().take_conn(c);
    ASSERT_EQ(first.size(), 1u);
    std::vector<uint64_t> when;
    for (int i = 0; i < 4000 && !(p().events_of(s) & kEvError); i++) {
        p().advance(50 * kMs);
        for (auto &g : p().take_conn(c)) {
            EXPECT_EQ(g.seq, first[0].seq);
            EXPECT_EQ(g.payload, data);
            when.push_back(p().now);
        }
    }
    // A tail loss probe first (RFC 8985 7: the connection has SACK), then
    // max_retries = 4 timeouts.
    EXPECT_EQ(st().stats().tcp_tlp_probes, 1u);
    ASSERT_EQ(when.size(), 5u) << "one probe + max_retries = 4";
    when.erase(when.begin());
    // RFC 6298 5.5: the timer doubles after each expiry.
    for (size_t i = 2; i < when.size(); i++) {
        uint64_t prev = when[i - 1] - when[i - 2], cur = when[i] - when[i - 1];
        EXPECT_GE(cur + 100 * kMs, 2 * prev) << "interval " << i;
    }
    EXPECT_TRUE(p().events_of(s) & kEvError);
    EXPECT_EQ(info(s).error, ETIMEDOUT);
    EXPECT_GE(st().stats().tcp_timeouts, 4u);
}

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

// ---- Keepalive and user timeout --------------------------------------------

TEST_F(Tcp, KeepaliveProbesAndFailsWhenPeerSilent)
{
    Conn c;
    SockId s = passive(&c);
    ASSERT_EQ(st().set_option(s, SockOpt::kKeepAlive, 1), 0);
    ASSERT_EQ(st().set_option(s, SockOpt::kKeepIdleSec, 10), 0);
    ASSERT_EQ(st().set_option(s, SockOpt::kKeepIntvlSec, 2), 0);
    ASSERT_EQ(st().set_option(s, SockOpt::kKeepCnt, 3), 0);
    p().advance(9 * kSec);
    EXPECT_TRUE(p().take_conn(c).empty()) << "no probe before the idle time";
    p().advance(2 * kSec);
    auto probe = p().take_conn(c);
    ASSERT_EQ(probe.size(), 1u);
    EXPECT_EQ(probe[0].seq, c.stack_nxt - 1) << "a keepalive probe carries snd.nxt - 1";
    p().send(c, kAck); // the peer answers
    p().advance(9 * kSec);
    EXPECT_EQ(state(s), TcpState::kEstablished);
    p().take_conn(c);
    // Now silence: three probes, then the connection fails.
    p().advance(60 * kSec);
    EXPECT_TRUE(p().events_of(s) & kEvError);
    EXPECT_EQ(info(s).error, ETIMEDOUT);
}

TEST_F(Tcp, KeepaliveAnsweredByDataKeepsTheConnection)
{
    // The peer answers a probe with data (header-predicted) instead of a bare
    // ACK: it is alive, and the probe count starts over.
    Conn c;
    SockId s = passive(&c);
    ASSERT_EQ(st().set_option(s, SockOpt::kKeepAlive, 1), 0);
    ASSERT_EQ(st().set_option(s, SockOpt::kKeepIdleSec, 10), 0);
    ASSERT_EQ(st().set_option(s, SockOpt::kKeepIntvlSec, 2), 0);
    ASSERT_EQ(st().set_option(s, SockOpt::kKeepCnt, 2), 0);
    p().advance(11 * kSec);
    ASSERT_EQ(p().take_conn(c).size(), 1u) << "the first probe";
    for (int i = 0; i < 4; i++) {
        p().send(c, kAck | kPsh, bytes(100, uint8_t(30 + i)));
        p().advance(1 * kSec);
    }
    EXPECT_EQ(state(s), TcpState::kEstablished);
    EXPECT_FALSE(p().events_of(s) & kEvError) << "dropped while the peer was sending";
    for (auto &g : p().take_conn(c)) EXPECT_TRUE(g.payload.empty() && g.seq == c.stack_nxt) << g.describe();
}

TEST_F(Tcp, RtoIsThreeSecondsAfterTheSynTimedOut)
{
    // RFC 6298 5.7: the SYN's retransmission leaves no RTT sample; data
    // starts with RTO = 3 s, not the backed-off SYN timer.
    // A SYN lost once: answer only the retransmission.
    int64_t id = st().open(9);
    ASSERT_GE(id, 0);
    ASSERT_EQ(st().connect(SockId(id), Endpoint{p().peer_ip, 9000}, p().now), 0);
    auto syn = p().take_tcp();
    ASSERT_EQ(syn.size(), 1u);
    p().advance(1100 * kMs);
    auto again = p().take_tcp();
    ASSERT_EQ(again.size(), 1u);
    ASSERT_TRUE(again[0].has(kSyn));
    Conn d;
    d.peer_port = 9000;
    d.stack_port = again[0].sport;
    d.peer_nxt = 777;
    d.stack_nxt = again[0].seq + 1;
    TcpSpec sa = p().seg(d, kSyn | kAck);
    sa.opts = RawPeer::full_syn_options(0);
    sa.opts.ts.reset();
    p().inject(sa);
    SockInfo after = info(SockId(id));
    ASSERT_EQ(after.state, TcpState::kEstablished);
    EXPECT_EQ(after.rto_us, 3'000'000u);
}

TEST_F(Tcp, UserTimeoutFailsUnackedConnection)
{
    Conn c;
    SockId s = passive(&c);
    ASSERT_EQ(st().set_option(s, SockOpt::kUserTimeoutMs, 5000), 0);
    int64_t v = 0;
    ASSERT_EQ(st().get_option(s, SockOpt::kUserTimeoutMs, &v), 0);
    EXPECT_EQ(v, 5000);
    ASSERT_EQ(st().send(s, "x", 1), 1);
    p().poll();
    p().advance(4900 * kMs);
    EXPECT_FALSE(p().events_of(s) & kEvError) << "failed before the user timeout";
    p().advance(60 * kSec);
    EXPECT_TRUE(p().events_of(s) & kEvError);
    EXPECT_EQ(info(s).error, ETIMEDOUT);
}

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
