// tcp_core: the TCP rules behind tcp_input()'s dispatch (mars/src/tcp_handshake.cc,
// tcp_sync.cc, tcp_data.cc) driven with parsed segments, the way smoltcp
// tests its TCP socket: a connection is put into a state, the test sends
// the peer's segments as TcpSegments straight into the rules
// (StackAccess::segment_input: no Ethernet, IPv4, checksum or header
// prediction in between) and asserts what the stack did: the segments it
// emitted (parsed back from its frames), the timers armed on the
// connection, the events posted to the application and the state.
// Transitions: LISTEN -> SYN-RECEIVED -> ESTABLISHED, SYN-SENT (SYN-ACK,
// bad ACK, RST, simultaneous open), data in and out of window, RFC 5961's
// RST/SYN/ACK rules, FIN in both orders (CLOSE-WAIT, LAST-ACK, FIN-WAIT-1/2,
// CLOSING, TIME-WAIT) and TIME-WAIT (2MSL restart, RFC 6191 reopen, RST).
#include "raw_peer.h"
#include "testing/stack_access.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace mars::sim {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint16_t kStackPort = 80, kPeerPort = 40000;
constexpr uint32_t kIrs = 1000; // the peer's initial sequence number

// A segment either way: the fields a transition test states (smoltcp's
// TcpRepr). Options: the peer's in `opt`; the stack's, parsed, in `got`.
struct Seg {
    uint32_t seq = 0, ack = 0;
    uint8_t flags = 0;
    uint16_t win = 65535;
    std::vector<uint8_t> payload = {};
    mars::TcpOptions opt = {};
    sim::TcpOptions got = {};
};

mars::TcpOptions syn_options(bool timestamps, uint32_t tsval = 0)
{
    mars::TcpOptions o;
    o.has_mss = true;
    o.mss = 1460;
    o.sack_permitted = true;
    o.has_ts = timestamps;
    o.tsval = tsval;
    return o;
}

std::vector<uint8_t> data(size_t n, uint8_t first = 'a')
{
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; i++) v[i] = uint8_t(first + i % 26);
    return v;
}

class TcpCore : public ::testing::Test {
  protected:
    TcpCore() : peer(options()) {}
    static RawPeer::Options options()
    {
        RawPeer::Options o;
        o.stack = test_stack_config(1);
        // The harness bypasses the receive pipeline: no strands, no copy engine.
        o.stack.strands = 1;
        o.stack.prefetch = false;
        o.stack.copy_engine = nullptr;
        o.pool_frames = 256; // a few segments at a time
        return o;
    }
    // Every frame a test handed in came back (released, or held and then
    // released when the stack let go of it).
    void TearDown() override
    {
        peer.destroy_stack();
        EXPECT_EQ(peer.pool().in_use(), 0u);
        EXPECT_EQ(peer.pool().bad_releases(), 0u);
    }
    Stack &st() { return peer.stack(); }

    // send!: the peer's segment into the TCP rules, then events are drained.
    void send(const Seg &s)
    {
        PacketRef frame{};
        ASSERT_TRUE(peer.pool().get(&frame));
        // The payload lies in a frame, where it would follow the headers:
        // the out-of-order queue keeps frames, not copies.
        uint8_t *payload = frame.data + wire::kHeadersLen;
        if (!s.payload.empty()) std::memcpy(payload, s.payload.data(), s.payload.size());
        frame.len = uint16_t(wire::kHeadersLen + s.payload.size());
        frame.room = 0;
        TcpSegment seg;
        seg.src_ip = peer.peer_ip;
        seg.dst_ip = peer.stack_ip;
        seg.sport = peer_port;
        seg.dport = stack_port;
        seg.seq = s.seq;
        seg.ack = s.ack;
        seg.flags = s.flags;
        seg.win = s.win;
        seg.opt = s.opt;
        seg.payload = payload;
        seg.len = uint32_t(s.payload.size());
        seg.frame = &frame;
        StackAccess::segment_input(peer.stack(), seg, peer.now);
        peer.poll(); // nothing is due at the same instant; collects events
    }
    // recv!: the TCP segments the stack emitted since the last look.
    std::vector<Seg> recv()
    {
        std::vector<Seg> out;
        for (const Parsed &p : peer.take_tcp()) {
            EXPECT_TRUE(p.tcp_csum_ok && p.ip_csum_ok && p.opts_ok);
            EXPECT_EQ(p.dst_ip, peer.peer_ip);
            Seg s;
            s.seq = p.seq;
            s.ack = p.ack;
            s.flags = p.flags;
            s.win = p.window;
            s.payload = p.payload;
            s.got = p.opts;
            out.push_back(s);
        }
        return out;
    }
    // Exactly one segment with these numbers and flags; returns it.
    Seg recv_one(uint32_t seq, uint32_t ack, uint8_t flags)
    {
        std::vector<Seg> out = recv();
        EXPECT_EQ(out.size(), 1u);
        if (out.empty()) return Seg{};
        EXPECT_EQ(out[0].seq, seq);
        EXPECT_EQ(out[0].ack, ack);
        EXPECT_EQ(out[0].flags, flags);
        return out[0];
    }
    void recv_nothing()
    {
        std::vector<Seg> out = recv();
        EXPECT_TRUE(out.empty()) << out.size() << " segment(s), the first with flags " << int(out[0].flags);
    }

    // The connection under test as the stack's table holds it (also in
    // TIME-WAIT, after its id is gone), or nullptr.
    const Sock *conn() { return StackAccess::find_conn(peer.stack(), peer.peer_ip, stack_port, peer_port); }
    TcpState state()
    {
        const Sock *c = conn();
        return c ? c->state : TcpState::kClosed;
    }
    // When c's timer t is due; 0 when it is not armed.
    static uint64_t due(const Timer &t) { return TimerWheel::armed(&t) ? t.due_ns : 0; }
    uint32_t events(SockId s) { return peer.take_events()[s]; }

    // ---- putting a connection into a state ---------------------------------
    // LISTEN, then the peer's SYN: SYN-RECEIVED. Sets iss.
    void syn_received(bool timestamps = false)
    {
        listener = peer.listen(kStackPort);
        ASSERT_NE(listener, kNoSock);
        send({.seq = kIrs, .flags = wire::kSyn, .opt = syn_options(timestamps, 100)});
        Seg sa = recv_one(conn() ? conn()->iss : 0, kIrs + 1, wire::kSyn | wire::kAck);
        iss = sa.seq;
        if (sa.got.ts) stack_tsval = sa.got.ts->first;
        ASSERT_EQ(state(), TcpState::kSynReceived);
    }
    // A passive connection, accepted: ESTABLISHED, rcv_nxt = kIrs + 1, snd_nxt = iss + 1.
    void established(bool timestamps = false)
    {
        syn_received(timestamps);
        send({.seq = kIrs + 1, .ack = iss + 1, .flags = wire::kAck, .opt = ts(timestamps, 101)});
        ASSERT_EQ(state(), TcpState::kEstablished);
        int64_t id = st().accept(listener, 7);
        ASSERT_GE(id, 0);
        sock = SockId(id);
        peer.take_events();
    }
    // An active open: SYN-SENT. Sets iss, stack_port.
    void syn_sent()
    {
        int64_t id = st().open(7);
        ASSERT_GE(id, 0);
        sock = SockId(id);
        ASSERT_EQ(st().connect(sock, Endpoint{peer.peer_ip, peer_port}, peer.now), 0);
        peer.poll();
        std::vector<Seg> out = recv();
        ASSERT_EQ(out.size(), 1u);
        ASSERT_EQ(out[0].flags, wire::kSyn);
        iss = out[0].seq;
        stack_port = uint16_t(conn_port());
        ASSERT_EQ(state(), TcpState::kSynSent);
    }
    uint32_t conn_port()
    {
        SockInfo in{};
        EXPECT_EQ(st().info(sock, &in), 0);
        return in.local.port;
    }
    mars::TcpOptions ts(bool on, uint32_t tsval)
    {
        mars::TcpOptions o;
        o.has_ts = on;
        o.tsval = tsval;
        o.tsecr = stack_tsval;
        return o;
    }

    RawPeer peer;
    uint16_t stack_port = kStackPort, peer_port = kPeerPort;
    SockId listener = kNoSock, sock = kNoSock;
    uint32_t iss = 0, stack_tsval = 0;
};

using wire::kAck;
using wire::kFin;
using wire::kRst;
using wire::kSyn;

// ---- LISTEN -> SYN-RECEIVED -> ESTABLISHED ------------------------------------

TEST_F(TcpCore, ListenSynAnswersSynAckAndArmsRetransmission)
{
    syn_received();
    const Sock *c = conn();
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->irs, kIrs);
    EXPECT_EQ(c->rcv_nxt, kIrs + 1);
    EXPECT_EQ(c->snd_nxt, iss + 1) << "the SYN takes one sequence number";
    EXPECT_EQ(due(c->rtx_timer), peer.now + test_stack_config(1).tcp.rto_initial_ns);
    EXPECT_EQ(st().stats().tcp_passive_opens, 1u);
    EXPECT_EQ(events(listener), 0u) << "nothing to accept before the handshake ends";
}

TEST_F(TcpCore, SynReceivedAckEstablishesAndPostsAcceptable)
{
    syn_received();
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kAck});
    recv_nothing();
    ASSERT_EQ(state(), TcpState::kEstablished);
    EXPECT_EQ(due(conn()->rtx_timer), 0u) << "nothing left to retransmit";
    EXPECT_EQ(conn()->snd_una, iss + 1);
    EXPECT_TRUE(events(listener) & kEvAcceptable);
    EXPECT_GE(st().accept(listener, 7), 0);
}

TEST_F(TcpCore, SynReceivedUnacceptableAckIsAnsweredWithRst)
{
    syn_received();
    send({.seq = kIrs + 1, .ack = iss + 9, .flags = kAck}); // acks what we never sent
    recv_one(iss + 9, 0, kRst);
    EXPECT_EQ(state(), TcpState::kSynReceived) << "the handshake may still complete";
    send({.seq = kIrs + 1, .ack = iss, .flags = kAck}); // acks nothing
    recv_one(iss, 0, kRst);
    EXPECT_EQ(state(), TcpState::kSynReceived);
}

// The peer's SYN again (our SYN-ACK was lost): the SYN-ACK goes again at
// once, as Linux does, not after our 1 s retransmission timer; copies of
// the SYN within a millisecond draw no more of them.
TEST_F(TcpCore, SynReceivedRepeatedSynResendsSynAckThrottled)
{
    syn_received();
    const uint64_t rtx_due = due(conn()->rtx_timer);
    peer.now += 10 * kMs;
    send({.seq = kIrs, .flags = kSyn, .opt = syn_options(false)});
    Seg sa = recv_one(iss, kIrs + 1, kSyn | kAck);
    EXPECT_TRUE(sa.got.mss.has_value()) << "the SYN-ACK carries its options again";
    EXPECT_EQ(state(), TcpState::kSynReceived);
    EXPECT_EQ(st().stats().tcp_retransmits, 1u);
    EXPECT_EQ(st().stats().drop_tcp_out_of_window, 0u);
    EXPECT_EQ(due(conn()->rtx_timer), rtx_due) << "the timer's backoff is its own";
    send({.seq = kIrs, .flags = kSyn, .opt = syn_options(false)}); // the same millisecond
    recv_nothing();
    peer.now += kMs;
    send({.seq = kIrs, .flags = kSyn, .opt = syn_options(false)});
    recv_one(iss, kIrs + 1, kSyn | kAck);
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kAck}); // the handshake still completes
    ASSERT_EQ(state(), TcpState::kEstablished);
}

// A SYN with another ISN is no retransmission (RFC 5961 4.2): outside the
// window it draws a bare ACK, inside it a throttled challenge ACK; neither
// sends a SYN-ACK or ends the half-open connection.
TEST_F(TcpCore, SynReceivedSynWithAnotherIsnGetsAckNotSynAck)
{
    syn_received();
    send({.seq = kIrs + 100'000'000, .flags = kSyn, .opt = syn_options(false)});
    recv_one(iss + 1, kIrs + 1, kAck);
    EXPECT_EQ(st().stats().drop_tcp_out_of_window, 1u);
    peer.now += kMs;
    send({.seq = kIrs + 5, .flags = kSyn, .opt = syn_options(false)});
    recv_one(iss + 1, kIrs + 1, kAck);
    EXPECT_EQ(st().stats().tcp_challenge_acks, 1u);
    send({.seq = kIrs + 6, .flags = kSyn, .opt = syn_options(false)}); // the same millisecond
    recv_nothing();
    EXPECT_EQ(state(), TcpState::kSynReceived);
    EXPECT_EQ(st().stats().tcp_retransmits, 0u);
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kAck});
    ASSERT_EQ(state(), TcpState::kEstablished);
}

TEST_F(TcpCore, SynReceivedRstAtRcvNxtForgetsTheConnection)
{
    syn_received();
    send({.seq = kIrs + 1, .flags = kRst});
    recv_nothing();
    EXPECT_EQ(conn(), nullptr);
    EXPECT_EQ(events(listener), 0u) << "back to LISTEN: the application never heard of it";
}

TEST_F(TcpCore, ListenerResetsSynAckAndStrayAckAndIgnoresRst)
{
    listener = peer.listen(kStackPort);
    send({.seq = kIrs, .ack = 777, .flags = kSyn | kAck});
    recv_one(777, 0, kRst);
    send({.seq = kIrs, .ack = 555, .flags = kAck}); // no SYN cookie in it
    recv_one(555, 0, kRst);
    send({.seq = kIrs, .flags = kRst});
    recv_nothing();
    EXPECT_EQ(conn(), nullptr);
    EXPECT_EQ(st().stats().drop_tcp_bad_state, 3u);
}

TEST_F(TcpCore, NoListenerAnswersRstAck)
{
    send({.seq = kIrs, .flags = kSyn});
    recv_one(0, kIrs + 1, kRst | kAck); // RFC 9293 3.10.7.1: the SYN counts one
    send({.seq = kIrs, .ack = 4242, .flags = kAck, .payload = data(10)});
    recv_one(4242, 0, kRst);
    send({.seq = kIrs, .flags = kRst});
    recv_nothing();
    EXPECT_EQ(st().stats().drop_tcp_no_socket, 3u);
}

TEST_F(TcpCore, NonsenseFlagsAreDroppedEverywhere)
{
    established();
    send({.seq = kIrs + 1, .flags = 0, .payload = data(10)}); // no ACK, no SYN, no RST
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kSyn | kFin});
    recv_nothing();
    EXPECT_EQ(state(), TcpState::kEstablished);
    EXPECT_EQ(st().stats().drop_tcp_header, 2u);
}

// ---- SYN-SENT ---------------------------------------------------------------------

TEST_F(TcpCore, SynSentSynAckEstablishesAndAcks)
{
    syn_sent();
    EXPECT_NE(due(conn()->rtx_timer), 0u) << "the SYN is retransmitted";
    send({.seq = 5000, .ack = iss + 1, .flags = kSyn | kAck, .opt = syn_options(false)});
    recv_one(iss + 1, 5001, kAck);
    EXPECT_EQ(state(), TcpState::kEstablished);
    EXPECT_EQ(due(conn()->rtx_timer), 0u);
    EXPECT_EQ(events(sock) & (kEvConnected | kEvWritable), kEvConnected | kEvWritable);
}

TEST_F(TcpCore, SynSentUnacceptableAckIsAnsweredWithRstAndIgnored)
{
    syn_sent();
    send({.seq = 5000, .ack = iss + 7, .flags = kSyn | kAck}); // acks beyond our SYN
    recv_one(iss + 7, 0, kRst);
    send({.seq = 5000, .ack = iss, .flags = kSyn | kAck}); // acks before it
    recv_one(iss, 0, kRst);
    send({.seq = 5000, .ack = iss + 7, .flags = kRst | kAck}); // a RST is never answered
    recv_nothing();
    EXPECT_EQ(state(), TcpState::kSynSent);
    EXPECT_EQ(events(sock), 0u);
}

TEST_F(TcpCore, SynSentRstCountsOnlyWhenItAcksOurSyn)
{
    syn_sent();
    send({.seq = 0, .flags = kRst}); // RFC 9293 3.10.7.3: no ACK, drop it
    recv_nothing();
    EXPECT_EQ(state(), TcpState::kSynSent);
    send({.seq = 0, .ack = iss + 1, .flags = kRst | kAck});
    recv_nothing();
    EXPECT_EQ(conn(), nullptr);
    EXPECT_TRUE(events(sock) & kEvReset);
    SockInfo in{};
    ASSERT_EQ(st().info(sock, &in), 0);
    EXPECT_EQ(in.error, ECONNREFUSED);
}

TEST_F(TcpCore, SimultaneousOpenGoesThroughSynReceived)
{
    syn_sent();
    // RFC 9293 figure 8: the peer's SYN crosses ours.
    send({.seq = 5000, .flags = kSyn, .opt = syn_options(false)});
    recv_one(iss, 5001, kSyn | kAck);
    EXPECT_EQ(state(), TcpState::kSynReceived);
    EXPECT_EQ(events(sock), 0u);
    // Its SYN-ACK repeats the SYN and acks ours.
    send({.seq = 5000, .ack = iss + 1, .flags = kSyn | kAck, .opt = syn_options(false)});
    EXPECT_EQ(state(), TcpState::kEstablished);
    EXPECT_TRUE(events(sock) & kEvConnected);
    EXPECT_EQ(conn()->rcv_nxt, 5001u);
}

// ---- ESTABLISHED: data -------------------------------------------------------------

TEST_F(TcpCore, InOrderDataIsDeliveredAndAckedEverySecondSegment)
{
    established();
    // Quick-ACK mode (tcp/sender.h): a fresh connection's first 16 data
    // segments are ACKed at once.
    uint32_t seq = kIrs + 1;
    for (int i = 0; i < 16; i++) {
        send({.seq = seq, .ack = iss + 1, .flags = kAck, .payload = data(1, char('a' + i))});
        seq += 1;
        recv_one(iss + 1, seq, kAck);
    }
    std::vector<uint8_t> got(200);
    ASSERT_EQ(st().recv(sock, got.data(), got.size()), 16);
    // Then the delayed-ACK rule.
    send({.seq = seq, .ack = iss + 1, .flags = kAck, .payload = data(100)});
    recv_nothing();
    EXPECT_EQ(due(conn()->delack_timer), peer.now + test_stack_config(1).tcp.delack_ns);
    EXPECT_TRUE(events(sock) & kEvReadable);
    send({.seq = seq + 100, .ack = iss + 1, .flags = kAck, .payload = data(50, 'A')});
    recv_one(iss + 1, seq + 150, kAck); // RFC 5681 4.2: at least every second segment
    ASSERT_EQ(st().recv(sock, got.data(), got.size()), 150);
    got.resize(150);
    std::vector<uint8_t> want = data(100);
    std::vector<uint8_t> more = data(50, 'A');
    want.insert(want.end(), more.begin(), more.end());
    EXPECT_EQ(got, want);
}

TEST_F(TcpCore, OutOfOrderDataIsHeldAndReportedWithSack)
{
    established();
    send({.seq = kIrs + 101, .ack = iss + 1, .flags = kAck, .payload = data(100, 'A')});
    Seg dup = recv_one(iss + 1, kIrs + 1, kAck);
    ASSERT_EQ(dup.got.sack.size(), 1u);
    EXPECT_EQ(dup.got.sack[0], std::make_pair(kIrs + 101, kIrs + 201));
    EXPECT_EQ(st().stats().tcp_ooo_segments, 1u);
    EXPECT_EQ(events(sock) & kEvReadable, 0u) << "nothing in order yet";
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kAck, .payload = data(100)});
    Seg ack = recv_one(iss + 1, kIrs + 201, kAck); // the hole filled: at once
    EXPECT_TRUE(ack.got.sack.empty());
    EXPECT_TRUE(events(sock) & kEvReadable);
    std::vector<uint8_t> got(300);
    EXPECT_EQ(st().recv(sock, got.data(), got.size()), 200);
}

TEST_F(TcpCore, SegmentBeyondTheWindowIsDroppedAndAcked)
{
    established();
    const uint32_t right = conn()->rcv_adv;
    send({.seq = right, .ack = iss + 1, .flags = kAck, .payload = data(10)});
    recv_one(iss + 1, kIrs + 1, kAck);
    EXPECT_EQ(st().stats().drop_tcp_out_of_window, 1u);
    EXPECT_EQ(conn()->rcv_nxt, kIrs + 1);
    EXPECT_EQ(events(sock) & kEvReadable, 0u);
}

TEST_F(TcpCore, OldDuplicateIsAckedWithDsack)
{
    established();
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kAck, .payload = data(100)});
    recv_one(iss + 1, kIrs + 101, kAck); // quick-ACK mode: at once
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kAck, .payload = data(100)});
    Seg ack = recv_one(iss + 1, kIrs + 101, kAck);
    ASSERT_FALSE(ack.got.sack.empty());
    EXPECT_EQ(ack.got.sack[0], std::make_pair(kIrs + 1, kIrs + 101)) << "RFC 2883: the duplicate first";
    EXPECT_EQ(conn()->rcv_nxt, kIrs + 101);
}

TEST_F(TcpCore, AckOfDataSentAdvancesSndUnaAndPostsWritable)
{
    established();
    ASSERT_EQ(st().send(sock, "hello", 5), 5);
    peer.poll();
    Seg out = recv_one(iss + 1, kIrs + 1, kAck | wire::kPsh);
    EXPECT_EQ(out.payload.size(), 5u);
    EXPECT_NE(due(conn()->rtx_timer), 0u);
    peer.take_events();
    send({.seq = kIrs + 1, .ack = iss + 6, .flags = kAck});
    recv_nothing();
    EXPECT_EQ(conn()->snd_una, iss + 6);
    EXPECT_EQ(due(conn()->rtx_timer), 0u) << "everything acknowledged";
    EXPECT_TRUE(events(sock) & kEvWritable);
}

// What eta-stat shows as a connection's memory: the rings it holds now.
TEST_F(TcpCore, InfoNamesTheRingsTheConnectionHolds)
{
    established();
    SockInfo in{};
    ASSERT_EQ(st().info(sock, &in), 0);
    EXPECT_EQ(in.tx_ring, test_stack_config(1).tcp.sndbuf);
    EXPECT_EQ(in.tx_space, in.tx_ring) << "nothing written yet";
    EXPECT_GT(in.rx_ring, 0u);
    SockInfo li{};
    ASSERT_EQ(st().info(listener, &li), 0);
    EXPECT_EQ(li.tx_ring + li.rx_ring, 0u) << "a listener holds no rings";
    ASSERT_EQ(st().send(sock, "hello", 5), 5);
    ASSERT_EQ(st().info(sock, &in), 0);
    EXPECT_EQ(in.tx_space, in.tx_ring - 5);
}

TEST_F(TcpCore, AckOfUnsentDataIsAckedAndDropped)
{
    established();
    send({.seq = kIrs + 1, .ack = iss + 100, .flags = kAck, .payload = data(10)});
    recv_one(iss + 1, kIrs + 1, kAck);
    EXPECT_EQ(conn()->rcv_nxt, kIrs + 1) << "its data is not taken";
    EXPECT_EQ(conn()->snd_una, iss + 1);
}

TEST_F(TcpCore, WindowUpdatesComeFromNewerSegmentsOnly)
{
    established();
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kAck, .win = 1000});
    EXPECT_EQ(conn()->snd_wnd, 1000u) << "no window scaling was offered: taken as carried";
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kAck, .win = 2000, .payload = data(10)});
    EXPECT_EQ(conn()->snd_wnd, 2000u);
    send({.seq = kIrs + 11, .ack = iss + 1, .flags = kAck, .win = 3000});
    EXPECT_EQ(conn()->snd_wnd, 3000u);
    EXPECT_EQ(conn()->snd_wl1, kIrs + 11);
    peer.take_tcp();
    // A segment that starts before (RFC 9293 3.10.7.4: SND.WL1 < SEG.SEQ)
    // does not move it back, though its new part is taken.
    send({.seq = kIrs + 6, .ack = iss + 1, .flags = kAck, .win = 500, .payload = data(10)});
    EXPECT_EQ(conn()->rcv_nxt, kIrs + 16);
    EXPECT_EQ(conn()->snd_wnd, 3000u);
}

TEST_F(TcpCore, PawsDropsAnOldTimestampAndAcks)
{
    established(true);
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kAck, .payload = data(10), .opt = ts(true, 500)});
    EXPECT_EQ(conn()->ts_recent, 500u);
    peer.take_tcp();
    send({.seq = kIrs + 11, .ack = iss + 1, .flags = kAck, .payload = data(10), .opt = ts(true, 400)});
    recv_one(iss + 1, kIrs + 11, kAck); // RFC 7323 5.3: drop, and acknowledge
    EXPECT_EQ(st().stats().drop_tcp_paws, 1u);
    EXPECT_EQ(conn()->rcv_nxt, kIrs + 11);
}

// ---- RFC 5961: blind RST, SYN and ACK ---------------------------------------------

TEST_F(TcpCore, RstAtRcvNxtResetsTheConnection)
{
    established();
    send({.seq = kIrs + 1, .flags = kRst});
    recv_nothing();
    EXPECT_EQ(conn(), nullptr);
    EXPECT_TRUE(events(sock) & kEvReset);
    SockInfo in{};
    ASSERT_EQ(st().info(sock, &in), 0);
    EXPECT_EQ(in.error, ECONNRESET);
}

TEST_F(TcpCore, RstInWindowElsewhereGetsAThrottledChallengeAck)
{
    established();
    send({.seq = kIrs + 2, .flags = kRst});
    recv_one(iss + 1, kIrs + 1, kAck);
    EXPECT_EQ(state(), TcpState::kEstablished);
    send({.seq = kIrs + 3, .flags = kRst}); // within the same millisecond: no second ACK
    recv_nothing();
    peer.now += kMs;
    send({.seq = kIrs + 3, .flags = kRst});
    recv_one(iss + 1, kIrs + 1, kAck);
    EXPECT_EQ(st().stats().tcp_challenge_acks, 2u);
    EXPECT_EQ(events(sock) & kEvReset, 0u);
}

TEST_F(TcpCore, RstOutsideTheWindowIsIgnoredSilently)
{
    established();
    send({.seq = conn()->rcv_adv + 1, .flags = kRst});
    send({.seq = kIrs, .flags = kRst}); // one before rcv_nxt
    recv_nothing();
    EXPECT_EQ(state(), TcpState::kEstablished);
}

TEST_F(TcpCore, SynInEstablishedGetsChallengeAck)
{
    established();
    send({.seq = kIrs + 50, .flags = kSyn});
    recv_one(iss + 1, kIrs + 1, kAck);
    EXPECT_EQ(state(), TcpState::kEstablished);
    EXPECT_EQ(st().stats().tcp_challenge_acks, 1u);
}

TEST_F(TcpCore, AckFarBehindSndUnaGetsChallengeAck)
{
    established();
    send({.seq = kIrs + 1, .ack = iss - 200'000, .flags = kAck, .payload = data(10)}); // RFC 5961 5.2
    recv_one(iss + 1, kIrs + 1, kAck);
    EXPECT_EQ(conn()->rcv_nxt, kIrs + 1);
    EXPECT_EQ(st().stats().tcp_challenge_acks, 1u);
}

// ---- FIN, both orders ---------------------------------------------------------------

TEST_F(TcpCore, PeerClosesFirstCloseWaitThenLastAck)
{
    established();
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kFin | kAck});
    recv_one(iss + 1, kIrs + 2, kAck);
    EXPECT_EQ(state(), TcpState::kCloseWait);
    EXPECT_TRUE(events(sock) & kEvPeerClosed);
    ASSERT_EQ(st().close(sock), 0);
    peer.poll();
    recv_one(iss + 1, kIrs + 2, kFin | kAck);
    EXPECT_EQ(state(), TcpState::kLastAck);
    EXPECT_NE(due(conn()->rtx_timer), 0u) << "the FIN is retransmitted";
    send({.seq = kIrs + 2, .ack = iss + 2, .flags = kAck});
    recv_nothing();
    EXPECT_EQ(conn(), nullptr);
    EXPECT_TRUE(events(sock) & kEvClosed);
}

TEST_F(TcpCore, WeCloseFirstFinWait1ThenFinWait2ThenTimeWait)
{
    established();
    ASSERT_EQ(st().shutdown(sock, false, true), 0);
    peer.poll();
    recv_one(iss + 1, kIrs + 1, kFin | kAck);
    EXPECT_EQ(state(), TcpState::kFinWait1);
    EXPECT_NE(due(conn()->rtx_timer), 0u);
    send({.seq = kIrs + 1, .ack = iss + 2, .flags = kAck});
    recv_nothing();
    EXPECT_EQ(state(), TcpState::kFinWait2);
    EXPECT_EQ(due(conn()->rtx_timer), 0u);
    send({.seq = kIrs + 1, .ack = iss + 2, .flags = kFin | kAck});
    recv_one(iss + 2, kIrs + 2, kAck);
    EXPECT_EQ(state(), TcpState::kTimeWait);
    EXPECT_EQ(due(conn()->aux_timer), peer.now + test_stack_config(1).tcp.time_wait_ns) << "2MSL";
    EXPECT_TRUE(events(sock) & kEvPeerClosed);
}

TEST_F(TcpCore, SimultaneousCloseGoesThroughClosing)
{
    established();
    ASSERT_EQ(st().shutdown(sock, false, true), 0);
    peer.poll();
    recv_one(iss + 1, kIrs + 1, kFin | kAck);
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kFin | kAck}); // crossed ours: does not ack it
    recv_one(iss + 2, kIrs + 2, kAck);
    EXPECT_EQ(state(), TcpState::kClosing);
    send({.seq = kIrs + 2, .ack = iss + 2, .flags = kAck});
    recv_nothing();
    EXPECT_EQ(state(), TcpState::kTimeWait);
    EXPECT_NE(due(conn()->aux_timer), 0u);
}

TEST_F(TcpCore, FinThatAcksOurFinGoesStraightToTimeWait)
{
    established();
    ASSERT_EQ(st().shutdown(sock, false, true), 0);
    peer.poll();
    recv_one(iss + 1, kIrs + 1, kFin | kAck);
    send({.seq = kIrs + 1, .ack = iss + 2, .flags = kFin | kAck});
    recv_one(iss + 2, kIrs + 2, kAck);
    EXPECT_EQ(state(), TcpState::kTimeWait);
}

TEST_F(TcpCore, DataAfterThePeersFinIsNotTaken)
{
    established();
    send({.seq = kIrs + 1, .ack = iss + 1, .flags = kFin | kAck});
    recv_one(iss + 1, kIrs + 2, kAck);
    const uint64_t drops = st().stats().drop_tcp_bad_state;
    send({.seq = kIrs + 2, .ack = iss + 1, .flags = kAck, .payload = data(10)});
    EXPECT_EQ(st().stats().drop_tcp_bad_state, drops + 1);
    EXPECT_EQ(state(), TcpState::kCloseWait);
    EXPECT_EQ(conn()->rcv_nxt, kIrs + 2);
}

// ---- TIME-WAIT ---------------------------------------------------------------------

class TcpCoreTimeWait : public TcpCore {
  protected:
    // The stack closed first, then the peer: TIME-WAIT, rcv_nxt = kIrs + 2.
    void time_wait(bool timestamps = false)
    {
        established(timestamps);
        ASSERT_EQ(st().shutdown(sock, false, true), 0);
        peer.poll();
        std::vector<Seg> fin = recv();
        ASSERT_EQ(fin.size(), 1u);
        if (fin[0].got.ts) stack_tsval = fin[0].got.ts->first;
        send({.seq = kIrs + 1, .ack = iss + 2, .flags = kFin | kAck, .opt = ts(timestamps, 200)});
        recv_one(iss + 2, kIrs + 2, kAck);
        ASSERT_EQ(state(), TcpState::kTimeWait);
    }
};

TEST_F(TcpCoreTimeWait, RetransmittedFinIsAckedAndRestarts2Msl)
{
    time_wait();
    peer.now += 500 * kMs;
    send({.seq = kIrs + 1, .ack = iss + 2, .flags = kFin | kAck});
    recv_one(iss + 2, kIrs + 2, kAck);
    EXPECT_EQ(due(conn()->aux_timer), peer.now + test_stack_config(1).tcp.time_wait_ns);
    EXPECT_EQ(state(), TcpState::kTimeWait);
}

TEST_F(TcpCoreTimeWait, SynWithHigherSequenceReopens)
{
    time_wait();
    const uint32_t isn = kIrs + 100'000; // RFC 6191 without timestamps: above rcv_nxt
    send({.seq = isn, .flags = kSyn, .opt = syn_options(false)});
    std::vector<Seg> out = recv();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].flags, kSyn | kAck);
    EXPECT_EQ(out[0].ack, isn + 1);
    EXPECT_EQ(state(), TcpState::kSynReceived) << "a new connection on the same 4-tuple";
    EXPECT_EQ(conn()->irs, isn);
}

TEST_F(TcpCoreTimeWait, SynWithOlderSequenceIsAckedNotReopened)
{
    time_wait();
    send({.seq = kIrs - 5, .flags = kSyn, .opt = syn_options(false)});
    recv_one(iss + 2, kIrs + 2, kAck);
    EXPECT_EQ(state(), TcpState::kTimeWait);
}

TEST_F(TcpCoreTimeWait, SynWithNewerTimestampReopensWhateverItsSequence)
{
    time_wait(true);
    send({.seq = kIrs - 5, .flags = kSyn, .opt = syn_options(true, 300)}); // RFC 6191: TSval decides
    std::vector<Seg> out = recv();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].flags, kSyn | kAck);
    EXPECT_EQ(state(), TcpState::kSynReceived);
}

TEST_F(TcpCoreTimeWait, SynWithOlderTimestampIsAckedNotReopened)
{
    time_wait(true);
    send({.seq = kIrs + 100'000, .flags = kSyn, .opt = syn_options(true, 50)});
    std::vector<Seg> out = recv();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].flags, kAck);
    EXPECT_EQ(state(), TcpState::kTimeWait);
}

TEST_F(TcpCoreTimeWait, RstAtRcvNxtEndsIt)
{
    time_wait();
    send({.seq = kIrs + 3, .flags = kRst}); // not rcv_nxt: ignored
    EXPECT_EQ(state(), TcpState::kTimeWait);
    send({.seq = kIrs + 2, .flags = kRst});
    recv_nothing();
    EXPECT_EQ(conn(), nullptr);
}

// An active open from a bound port whose last connection to the same peer
// waits in TIME-WAIT here recycles that connection (Linux's tcp_tw_reuse)
// instead of failing EADDRINUSE. The new SYN's sequence number lies above
// everything the old connection sent (RFC 1122 4.2.2.13, RFC 6191: what a
// peer still in TIME-WAIT accepts; the old connection's segments are not in
// the new one's window), also when the clock ISN has not moved past them.
TEST_F(TcpCoreTimeWait, ConnectFromTheBoundPortRecyclesOurTimeWait)
{
    constexpr uint16_t kPort = 45123;
    stack_port = kPort;
    int64_t id = st().open(7);
    ASSERT_GE(id, 0);
    sock = SockId(id);
    ASSERT_EQ(st().bind(sock, Endpoint{0, kPort}), 0);
    ASSERT_EQ(st().connect(sock, Endpoint{peer.peer_ip, peer_port}, peer.now), 0);
    peer.poll();
    std::vector<Seg> syn = recv();
    ASSERT_EQ(syn.size(), 1u);
    iss = syn[0].seq;
    send({.seq = kIrs, .ack = iss + 1, .flags = kSyn | kAck, .opt = syn_options(false)});
    recv_one(iss + 1, kIrs + 1, kAck);
    ASSERT_EQ(state(), TcpState::kEstablished);
    // More bytes than the ISN clock advances in the time the test takes.
    const std::vector<uint8_t> bytes = data(3000);
    ASSERT_EQ(st().send(sock, bytes.data(), uint32_t(bytes.size())), 3000);
    peer.poll();
    recv();
    send({.seq = kIrs + 1, .ack = iss + 3001, .flags = kAck});
    ASSERT_EQ(st().shutdown(sock, false, true), 0);
    peer.poll();
    recv_one(iss + 3001, kIrs + 1, kFin | kAck);
    send({.seq = kIrs + 1, .ack = iss + 3002, .flags = kFin | kAck});
    recv_one(iss + 3002, kIrs + 2, kAck);
    ASSERT_EQ(state(), TcpState::kTimeWait);
    const uint32_t old_nxt = conn()->snd_nxt;
    ASSERT_EQ(old_nxt, iss + 3002);
    ASSERT_EQ(st().close(sock), 0);
    peer.take_events();
    ASSERT_EQ(st().stats().conns_open, 1u) << "the TIME-WAIT block";

    peer.now += kMs;
    int64_t id2 = st().open(8);
    ASSERT_GE(id2, 0);
    ASSERT_EQ(st().bind(SockId(id2), Endpoint{0, kPort}), 0);
    ASSERT_EQ(st().connect(SockId(id2), Endpoint{peer.peer_ip, peer_port}, peer.now), 0)
        << "our own TIME-WAIT on the 4-tuple is recycled, not EADDRINUSE";
    peer.poll();
    std::vector<Seg> syn2 = recv();
    ASSERT_EQ(syn2.size(), 1u);
    EXPECT_EQ(syn2[0].flags, kSyn);
    EXPECT_GT(int32_t(syn2[0].seq - old_nxt), 0)
        << "new ISN " << syn2[0].seq << " not above the old connection's snd_nxt " << old_nxt;
    ASSERT_NE(conn(), nullptr);
    EXPECT_EQ(state(), TcpState::kSynSent) << "the 4-tuple is the new connection's";
    EXPECT_EQ(conn()->iss, syn2[0].seq);
    EXPECT_EQ(st().stats().conns_open, 1u) << "the old connection's block is gone";
    // The peer answers the new connection, which establishes.
    send({.seq = kIrs + 500'000, .ack = syn2[0].seq + 1, .flags = kSyn | kAck, .opt = syn_options(false)});
    recv_one(syn2[0].seq + 1, kIrs + 500'001, kAck);
    EXPECT_EQ(state(), TcpState::kEstablished);
}

} // namespace
} // namespace mars::sim
