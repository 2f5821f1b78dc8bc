// Conformance of the IPv4, ARP and ICMP layers under TCP, packetdrill style:
// the test plays the peer with crafted frames (RawPeer) and checks what the
// stack answers. The TCP state machine's cases are in tests/unit/mars/tcp/
// (tcp_in_test.cc, tcp_out_test.cc, tcp_timer_test.cc), with this fixture.
#include "tcp_fixture.h"

#include <cstring>

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

// ---- A next hop that never answers ARP (issue 29) ------------------------------
// Linux: mcast_solicit (3) requests, retrans_time (1 s) apart; a second after
// the last the neighbour is FAILED and a SYN-SENT socket waiting on it fails
// with EHOSTUNREACH (about 3 s, not the SYN retries' two minutes).

constexpr uint32_t kSilentIp = 0xC612004D; // 198.18.0.77: nobody answers

// A RawPeer whose peer answers no ARP request (it introduces itself at start).
RawPeer::Options silent_options()
{
    RawPeer::Options o;
    o.auto_arp = false;
    return o;
}

size_t arp_requests_for(const std::vector<Parsed> &frames, uint32_t ip)
{
    return size_t(std::count_if(frames.begin(), frames.end(),
                                [&](const Parsed &f) { return f.is_arp && f.arp_op == 1 && f.arp_tpa == ip; }));
}

TEST_F(Tcp, ConnectToASilentNeighbourFailsWithEhostunreachAfterTheProbes)
{
    make(silent_options());
    int64_t s = st().open(1);
    ASSERT_GE(s, 0);
    const uint64_t t0 = p().now;
    ASSERT_EQ(st().connect(SockId(s), Endpoint{kSilentIp, 9000}, p().now), 0);
    p().poll();
    std::vector<Parsed> out = p().take();
    EXPECT_EQ(arp_requests_for(out, kSilentIp), 1u) << "the SYN waits for ARP";
    // Virtual time in 10 ms steps until the connect reports.
    while (!(p().events_of(SockId(s)) & (kEvError | kEvConnected)) && p().now - t0 < 200 * kSec) {
        p().advance(10 * kMs);
        for (auto &f : p().take()) out.push_back(f);
    }
    EXPECT_TRUE(p().events_of(SockId(s)) & kEvError);
    EXPECT_EQ(info(SockId(s)).error, EHOSTUNREACH);
    EXPECT_EQ(info(SockId(s)).state, TcpState::kClosed);
    const uint64_t took = p().now - t0;
    EXPECT_GE(took, 3 * kSec) << "three requests, a second apart, then a second for the last";
    EXPECT_LE(took, 3 * kSec + 10 * kMs) << "not the SYN retries' ~127 s";
    EXPECT_EQ(arp_requests_for(out, kSilentIp), 3u) << "arp_probes = 3";
    for (auto &f : out) EXPECT_FALSE(f.is_tcp) << "no SYN can leave without a MAC: " << f.describe();
    const StackStats &ss = st().stats();
    EXPECT_EQ(ss.arp_failed, 1u);
    EXPECT_EQ(ss.tcp_connects_unreachable, 1u);
    EXPECT_GE(ss.drop_arp_unresolved, 1u) << "the held SYN (and its retransmission) dropped, counted";
    EXPECT_EQ(ss.drop_arp_queue_full, 0u);

    // A later connect resolves again (Linux: a packet for a FAILED neighbour
    // starts probing anew), and fails the same way.
    ASSERT_EQ(st().close(SockId(s)), 0);
    int64_t s2 = st().open(2);
    ASSERT_GE(s2, 0);
    ASSERT_EQ(st().connect(SockId(s2), Endpoint{kSilentIp, 9001}, p().now), 0);
    p().poll();
    EXPECT_EQ(arp_requests_for(p().take(), kSilentIp), 1u) << "a new resolution";
    p().advance(5 * kSec);
    EXPECT_TRUE(p().events_of(SockId(s2)) & kEvError);
    EXPECT_EQ(info(SockId(s2)).error, EHOSTUNREACH);
    EXPECT_EQ(st().stats().arp_failed, 2u);
}

TEST_F(Tcp, ConnectProbesOnTheConfiguredSchedule)
{
    RawPeer::Options o = silent_options();
    o.stack.arp_probes = 6;
    o.stack.arp_retrans_ns = 200 * kMs;
    make(o);
    int64_t s = st().open(1);
    ASSERT_GE(s, 0);
    const uint64_t t0 = p().now;
    ASSERT_EQ(st().connect(SockId(s), Endpoint{kSilentIp, 9000}, p().now), 0);
    p().poll();
    size_t requests = arp_requests_for(p().take(), kSilentIp);
    while (!(p().events_of(SockId(s)) & kEvError) && p().now - t0 < 200 * kSec) {
        p().advance(10 * kMs);
        requests += arp_requests_for(p().take(), kSilentIp);
    }
    EXPECT_EQ(info(SockId(s)).error, EHOSTUNREACH);
    EXPECT_EQ(requests, 6u);
    EXPECT_EQ(p().now - t0, 6 * 200 * kMs) << "six requests 200 ms apart, failed 200 ms after the last";
}

TEST_F(Tcp, LateArpReplyBeforeTheLastProbeLetsTheConnectSucceed)
{
    make(silent_options());
    // The peer plays 198.18.0.77 from here on, and answers only now and then.
    p().peer_ip = kSilentIp;
    p().peer_mac = mac(77);
    Conn c;
    c.peer_port = 9000;
    int64_t s = st().open(1);
    ASSERT_GE(s, 0);
    c.sock = SockId(s);
    ASSERT_EQ(st().connect(c.sock, Endpoint{kSilentIp, 9000}, p().now), 0);
    p().poll();
    p().advance(2500 * kMs); // three requests out, the third unanswered for half a second
    EXPECT_EQ(arp_requests_for(p().take(), kSilentIp), 3u);
    EXPECT_FALSE(p().events_of(c.sock) & kEvError);
    p().inject(build_arp(ArpSpec{p().peer_mac, p().stack_mac, 2, p().peer_mac, p().stack_mac, kSilentIp, p().stack_ip}));
    std::vector<Parsed> syns = p().take_tcp();
    ASSERT_GE(syns.size(), 1u) << "the held SYN leaves at once";
    EXPECT_EQ(syns[0].flags, kSyn);
    EXPECT_TRUE(syns[0].eth_dst == mac(77));
    EXPECT_EQ(syns[0].dst_ip, kSilentIp);
    c.stack_port = syns[0].sport;
    c.stack_nxt = syns[0].seq + 1;
    c.peer_nxt = 0x31000000u;
    c.ts = false;
    TcpSpec sa = p().seg(c, kSyn | kAck);
    sa.opts.mss = 1460;
    c.peer_nxt++;
    p().inject(sa);
    EXPECT_TRUE(p().events_of(c.sock) & kEvConnected);
    EXPECT_EQ(info(c.sock).state, TcpState::kEstablished);
    p().advance(10 * kSec);
    EXPECT_FALSE(p().events_of(c.sock) & kEvError);
    EXPECT_EQ(st().stats().arp_failed, 0u);
    EXPECT_EQ(st().stats().tcp_connects_unreachable, 0u);
}

TEST_F(Tcp, EstablishedConnectionOutlivesItsNeighbourFailing)
{
    RawPeer::Options o = silent_options();
    o.stack.arp_timeout_ns = 5 * kSec;
    make(o);
    Conn c;
    SockId s = active(&c);
    ASSERT_NE(s, kNoSock);
    p().advance(6 * kSec); // the peer's cache entry expires (arp_timeout_ns)
    // Someone else's request for us adds a neighbour: the generation moves,
    // so the connection's next segment asks ARP again, which finds the
    // peer's entry expired and probes; the peer answers nothing.
    p().inject(build_arp(ArpSpec{mac(9), MacAddr{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}, 1, mac(9), MacAddr{},
                                 0xC6120009, p().stack_ip}));
    p().take();
    auto data = bytes(100, 3);
    ASSERT_EQ(st().send(s, data.data(), data.size()), 100);
    p().poll();
    std::vector<Parsed> out = p().take();
    EXPECT_EQ(arp_requests_for(out, p().peer_ip), 1u);
    p().advance(5 * kSec);
    EXPECT_GE(st().stats().arp_failed, 1u) << "the neighbour FAILED";
    EXPECT_GE(st().stats().drop_arp_unresolved, 1u);
    EXPECT_EQ(st().stats().tcp_connects_unreachable, 0u);
    EXPECT_FALSE(p().events_of(s) & kEvError) << "only a connect fails on it; TCP's own timers rule here";
    EXPECT_EQ(info(s).state, TcpState::kEstablished);
    EXPECT_EQ(info(s).error, 0);
    // The peer answers again: the retransmission gets through.
    p().inject(build_arp(ArpSpec{p().peer_mac, p().stack_mac, 2, p().peer_mac, p().stack_mac, p().peer_ip,
                                 p().stack_ip}));
    p().advance(10 * kSec);
    auto segs = p().take_conn(c);
    EXPECT_GE(payload_of(segs), 100u) << "TCP retransmitted once the neighbour answered";
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

// ---- MSG_MORE (packetdrill nagle/sendmsg_msg_more) --------------------------

// Writes `n` bytes through the ring, as send(MSG_MORE) does when `more`.
static void write_more(Stack &st, SockId s, size_t n, bool more, uint8_t seed)
{
    RingSpan span{};
    ASSERT_EQ(st.tx_view(s, &span), 0);
    auto data = bytes(n, seed);
    size_t done = 0;
    for (int i = 0; i < 2 && done < n; i++) {
        const size_t k = std::min<size_t>(span.n[i], n - done);
        std::memcpy(span.p[i], data.data() + done, k);
        done += k;
    }
    ASSERT_EQ(done, n);
    ASSERT_EQ(st.tx_commit(s, uint32_t(n), more), 0);
}

// MSG_MORE holds the sub-MSS tail only during the call that carries it
// (Linux: tcp_push with TCP_NAGLE_CORK for that call); an ACK that arrives
// later sends the tail at once, without PSH (Linux skips tcp_mark_push under
// MSG_MORE), and nothing is retransmitted. Before this, the tail waited for
// the retransmission timer, which resent a full segment (the packetdrill
// script's "payload 1000, expected 150").
TEST_F(Tcp, MsgMoreHoldsTheTailOnlyDuringItsOwnCall)
{
    Conn c;
    TcpOptions o = RawPeer::full_syn_options(0);
    o.mss = 1000;
    o.ts.reset(); // segments of 1000 bytes of payload
    SockId s = passive(&c, 40000, o);
    ASSERT_EQ(st().set_option(s, SockOpt::kNoDelay, 1), 0);
    const uint32_t start = c.stack_nxt;
    write_more(st(), s, 3100, true, 41);
    p().poll();
    auto first = p().take_conn(c);
    ASSERT_EQ(payload_of(first), 3000u) << "three full segments; the 100-byte tail waits (MSG_MORE)";
    write_more(st(), s, 50, true, 42);
    p().poll();
    EXPECT_EQ(p().take_conn(c).size(), 0u) << "the second MSG_MORE call holds the 150-byte tail";
    TcpSpec ack2 = p().seg(c, kAck);
    ack2.ack = start + 2000; // two of the three segments
    p().inject(ack2);
    auto tail = p().take_conn(c);
    ASSERT_EQ(tail.size(), 1u) << "the ACK sends the held tail at once";
    EXPECT_EQ(tail[0].seq, start + 3000);
    EXPECT_EQ(tail[0].payload.size(), 150u);
    EXPECT_FALSE(tail[0].has(kPsh)) << "a tail written with MSG_MORE carries no PSH";
    p().send(c, kAck);
    p().advance(5 * kSec);
    auto later = p().take_conn(c);
    EXPECT_EQ(payload_of(later), 0u) << "no retransmission";
    EXPECT_EQ(info(s).state, TcpState::kEstablished);

    // Small MSG_MORE writes while a segment is in flight leave together
    // when its ACK comes, as one segment.
    write_more(st(), s, 1000, false, 43);
    p().poll();
    auto full = p().take_conn(c);
    ASSERT_EQ(full.size(), 1u);
    EXPECT_TRUE(full[0].has(kPsh)) << "a write without MSG_MORE ends with PSH";
    for (uint8_t k = 1; k <= 4; k++) {
        write_more(st(), s, k, true, uint8_t(50 + k));
        p().poll();
    }
    EXPECT_EQ(p().take_conn(c).size(), 0u) << "each MSG_MORE call holds its tail";
    p().send(c, kAck);
    auto ten = p().take_conn(c);
    ASSERT_EQ(ten.size(), 1u) << "the ACK sends the four small writes as one segment";
    EXPECT_EQ(ten[0].payload.size(), 10u);
    EXPECT_FALSE(ten[0].has(kPsh));
}

// ---- The reset of an abort (packetdrill ts_recent/reset_tsval) --------------

// close() with unread data aborts: the RST goes as RST|ACK ack=RCV.NXT with
// the timestamp option (RFC 7323 3.2: TSopt SHOULD be in a RST once agreed;
// Linux's tcp_send_active_reset), seq SND.NXT (RFC 9293 3.10.7). Before,
// a bare RST without ACK or options.
TEST_F(Tcp, AbortResetCarriesAckAndTimestamp)
{
    Conn c;
    SockId s = passive(&c);
    ASSERT_TRUE(c.ts);
    p().advance(30 * kMs);
    TcpSpec data = p().seg(c, kAck | kPsh, bytes(100, 61));
    const uint32_t peer_tsval = data.opts.ts->first;
    c.peer_nxt += 100;
    p().inject(data);
    p().advance(7 * kMs);
    p().take_conn(c);
    ASSERT_EQ(st().close(s), 0) << "unread data: close aborts";
    p().poll();
    auto out = p().take_conn(c);
    ASSERT_EQ(out.size(), 1u);
    const Parsed &r = out[0];
    EXPECT_EQ(r.flags, kRst | kAck) << r.describe();
    EXPECT_EQ(r.seq, c.stack_nxt) << r.describe();
    EXPECT_EQ(r.ack, c.peer_nxt) << "RCV.NXT, the unread bytes included: " << r.describe();
    ASSERT_TRUE(r.opts.ts.has_value()) << "TSopt in the RST: " << r.describe();
    EXPECT_EQ(r.opts.ts->first, uint32_t(p().now / kMs)) << "TSval: the stack's 1 ms clock now";
    EXPECT_EQ(r.opts.ts->second, peer_tsval) << "TSecr: TS.Recent";
}

// A listener closed with children: an established child not yet accepted
// is reset as above; one in SYN-RECEIVED with the bare <SEQ=SND.NXT><CTL=RST>
// of RFC 9293 (3.10.7, ABORT).
TEST_F(Tcp, ListenerCloseResetsItsChildren)
{
    SockId l = p().listen(80);
    ASSERT_NE(l, kNoSock);
    Conn half, est;
    for (Conn *c : {&half, &est}) {
        c->peer_port = c == &half ? 41001 : 41002;
        c->stack_port = 80;
        c->peer_nxt = 0x30000000u + c->peer_port;
        TcpSpec syn = p().seg(*c, kSyn);
        syn.opts = RawPeer::full_syn_options(c->peer_tsval + uint32_t(p().now / kMs));
        c->peer_nxt++;
        p().inject(syn);
        auto sa = p().take_conn(*c);
        ASSERT_EQ(sa.size(), 1u);
        ASSERT_TRUE(sa[0].has(kSyn | kAck));
        c->ts = true;
    }
    p().advance(5 * kMs);
    p().send(est, kAck); // established, waiting in the accept queue
    ASSERT_EQ(p().take_conn(est).size(), 0u);
    ASSERT_EQ(st().close(l), 0);
    p().poll();
    auto h = p().take_conn(half);
    ASSERT_EQ(h.size(), 1u);
    EXPECT_EQ(h[0].flags, kRst) << h[0].describe();
    EXPECT_EQ(h[0].seq, half.stack_nxt) << h[0].describe();
    EXPECT_FALSE(h[0].opts.ts.has_value()) << h[0].describe();
    auto e = p().take_conn(est);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_EQ(e[0].flags, kRst | kAck) << e[0].describe();
    EXPECT_EQ(e[0].seq, est.stack_nxt) << e[0].describe();
    EXPECT_EQ(e[0].ack, est.peer_nxt) << e[0].describe();
    EXPECT_TRUE(e[0].opts.ts.has_value()) << e[0].describe();
}

// ---- TCP_NOTSENT_LOWAT (packetdrill notsent_lowat/*) ------------------------

// With TCP_NOTSENT_LOWAT the socket takes only what brings the written and
// unsent bytes up to the mark (Linux's tcp_stream_memory_free): a writer
// that writes until EAGAIN gets what the windows let go plus the mark, and
// writable (tx_view, ring_levels, kEvWritable) comes back only once the
// unsent bytes are below the mark again, not on an ACK that sends nothing.
// Before, the option was a no-op: the whole send ring was taken.
TEST_F(Tcp, NotsentLowatLimitsWhatAWriteTakesAndWhenItIsWritable)
{
    Conn c;
    TcpOptions o = RawPeer::full_syn_options(0);
    o.mss = 1000;
    o.ts.reset(); // segments of 1000 bytes of payload
    o.wscale.reset(); // windows in bytes: the test places the right edge exactly
    c.window = 10000;
    SockId s = passive(&c, 40000, o);
    int64_t v = 0;
    ASSERT_EQ(st().get_option(s, SockOpt::kNotsentLowat, &v), 0);
    EXPECT_EQ(v, int64_t(UINT32_MAX)) << "no limit unless set";
    ASSERT_EQ(st().set_option(s, SockOpt::kNotsentLowat, 4000), 0);
    ASSERT_EQ(st().get_option(s, SockOpt::kNotsentLowat, &v), 0);
    EXPECT_EQ(v, 4000);
    const uint32_t start = c.stack_nxt;
    auto data = bytes(59000, 71);
    const int64_t first = st().send(s, data.data(), data.size());
    EXPECT_EQ(first, 14000) << "10000 the windows let go (IW10, the peer's 10000) + 4000 unsent: the mark";
    p().poll();
    size_t total = first > 0 ? size_t(first) : 0;
    EXPECT_EQ(st().send(s, data.data() + total, data.size() - total), -EAGAIN) << "at the mark";
    EXPECT_EQ(payload_of(p().take_conn(c)), 10000u);
    RingLevels l{};
    st().ring_levels(s, &l);
    EXPECT_EQ(l.tx_rc, 0);
    EXPECT_EQ(l.writable, 0u) << "not writable at the mark (the ring has room)";
    EXPECT_GT(info(s).tx_space, 100000u);
    p().take_events();

    // An ACK that frees ring space but lets nothing more go (the right edge
    // stays): still 4000 unsent, no writable event.
    TcpSpec a1 = p().seg(c, kAck);
    a1.ack = start + 1000;
    a1.window = 9000;
    p().inject(a1);
    EXPECT_EQ(payload_of(p().take_conn(c)), 0u);
    EXPECT_FALSE(p().events_of(s) & kEvWritable) << "unsent still at the mark";
    st().ring_levels(s, &l);
    EXPECT_EQ(l.writable, 0u);
    EXPECT_EQ(st().send(s, data.data() + total, 1000), -EAGAIN);

    // The window opens by 2000: two segments go, 2000 unsent, under the mark.
    TcpSpec a2 = p().seg(c, kAck);
    a2.ack = start + 2000;
    a2.window = 10000;
    p().inject(a2);
    EXPECT_EQ(payload_of(p().take_conn(c)), 2000u);
    EXPECT_TRUE(p().events_of(s) & kEvWritable) << "unsent fell below the mark";
    st().ring_levels(s, &l);
    EXPECT_EQ(l.writable, 2000u) << "up to the mark again";
    EXPECT_EQ(st().send(s, data.data() + total, 5000), 2000);

    // Off again (UINT32_MAX): the ring's room.
    ASSERT_EQ(st().set_option(s, SockOpt::kNotsentLowat, int64_t(UINT32_MAX)), 0);
    st().ring_levels(s, &l);
    EXPECT_EQ(l.writable, info(s).tx_space);
    EXPECT_EQ(st().set_option(s, SockOpt::kNotsentLowat, -1), -EINVAL);
}

// ---- A reset before accept() (packetdrill mss/mss-getsockopt-tcp_maxseg-server)

// A connection reset while it waits in the accept queue stays there, as
// Linux keeps it: accept() returns it and reports the reset, and a read
// fails ECONNRESET. Before, MARS unlinked it and a blocking accept() waited
// for the next connection (the packetdrill script hung there).
TEST_F(Tcp, ResetBeforeAcceptStillAccepted)
{
    SockId l = p().listen(80);
    ASSERT_NE(l, kNoSock);
    Conn c;
    c.peer_port = 41003;
    c.stack_port = 80;
    c.peer_nxt = 0x31000000u;
    TcpSpec syn = p().seg(c, kSyn);
    syn.opts = RawPeer::full_syn_options(c.peer_tsval + uint32_t(p().now / kMs));
    c.peer_nxt++;
    p().inject(syn);
    auto sa = p().take_conn(c);
    ASSERT_EQ(sa.size(), 1u);
    c.ts = true;
    p().send(c, kAck);
    p().send(c, kRst | kAck);
    const int64_t a = st().accept(l, 7);
    ASSERT_GE(a, 0) << "the reset connection is still in the accept queue";
    const SockId s = SockId(a);
    EXPECT_EQ(info(s).state, TcpState::kClosed);
    EXPECT_EQ(info(s).error, ECONNRESET);
    int64_t mss = 0;
    EXPECT_EQ(st().get_option(s, SockOpt::kMaxSeg, &mss), 0);
    EXPECT_EQ(mss, 1460 - 12) << "TCP_MAXSEG answers the connection's MSS (the peer's less the timestamp option), "
                                 "as Linux does after a reset; before, 536";
    p().poll();
    EXPECT_TRUE(p().events_of(s) & kEvReset);
    uint8_t b[16];
    EXPECT_EQ(st().send(s, b, sizeof b), -ECONNRESET);
    EXPECT_EQ(st().accept(l, 8), -EAGAIN) << "one connection, accepted once";
    EXPECT_EQ(st().close(s), 0);
    EXPECT_EQ(p().take_conn(c).size(), 0u) << "nothing to say to a peer that reset";
}
} // namespace
} // namespace mars::sim
