// tcp_timer (mars/src/tcp_timer.cc): retransmission, SYN and SYN-ACK
// retries, persist, TIME-WAIT, keepalive and user timeout, driven on virtual
// time with the peer played by crafted frames (RawPeer). (Moved from
// sim/conformance_test.cc; the tests keep their names.)
#include "tcp_fixture.h"

namespace mars::sim {
namespace {

// ---- Opening ---------------------------------------------------------------

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

// ---- Closing ---------------------------------------------------------------

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
} // namespace
} // namespace mars::sim
