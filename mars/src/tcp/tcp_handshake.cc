// tcp_handshake.cc: opening connections. LISTEN (a SYN for a listener: the
// SYN queue, SYN cookies when it overflows, the SO_REUSEPORT member the
// 4-tuple picks, the child connection), SYN-SENT (our active open answered),
// option negotiation and the step into ESTABLISHED (accept queue, events).
#include "tcp/input.h"
#include "base/secret.h"
#include "tcp/sender.h"
#include "tcp/timers.h"
#include "tcp/recovery.h"
#include "tcp/rcv_tune.h"
#include "tcp/tcp_rules.h"
#include "tcp/tcp6.h"

#include <algorithm>
#include <cstring>

namespace mars::tcp {

using namespace wire;

// ---- LISTEN ----------------------------------------------------------------

void negotiate(Env &e, Sock &s, const TcpOptions &opt)
{
    const TcpConfig &t = e.cfg_.tcp;
    s.peer_mss = opt.has_mss && opt.mss ? opt.mss : 536;
    if (opt.has_wscale && t.window_scaling) {
        s.flags |= kFWscaleOk;
        s.snd_wscale = opt.wscale;
    } else {
        s.snd_wscale = 0;
        s.rcv_wscale = 0;
    }
    if (opt.sack_permitted && t.sack) s.flags |= kFSackOk;
    if (opt.has_ts && t.timestamps) {
        s.flags |= kFTsOk;
        s.ts_recent = opt.tsval;
        s.ts_recent_ns = e.now_ns_;
    }
}

// What a connection born on listener l takes from it (both families).
static void inherit(Sock &l, Sock &c)
{
    c.lst.parent = l.index;
    // SO_RCVBUF set on the listener holds for its connections, as on Linux
    // (their window scale, conn_init, and ring, rcv_space_init, follow it).
    if (l.flags & kFRcvBufLocked) {
        c.flags |= kFRcvBufLocked;
        c.app.rcv_buf = l.app.rcv_buf;
    }
    // TCP_MAXSEG set on the listener holds for its connections too (Linux
    // copies the listener's user_mss): their SYN-ACK advertises it.
    c.user_mss = l.user_mss;
    // So do the other options set on the listener (Linux clones the listening
    // socket): Nagle and cork, keepalive and its timing, TCP_USER_TIMEOUT,
    // SO_LINGER (a {1, 0} listener's connections end with a reset), the TOS
    // byte, SO_RCVLOWAT and TCP_NOTSENT_LOWAT. Keepalive is armed when the connection is
    // established (established(), below).
    constexpr uint32_t kInherited = kFNoDelay | kFCork | kFKeepAlive;
    c.flags = (c.flags & ~kInherited) | (l.flags & kInherited);
    c.app.keep_idle_ns = l.app.keep_idle_ns;
    c.app.keep_intvl_ns = l.app.keep_intvl_ns;
    c.app.keep_cnt = l.app.keep_cnt;
    c.app.user_timeout_ns = l.app.user_timeout_ns;
    c.app.linger_sec = l.app.linger_sec;
    c.app.tos = l.app.tos;
    c.app.tclass = l.app.tclass;
    c.app.rcv_lowat = l.app.rcv_lowat;
    c.app.notsent_lowat = l.app.notsent_lowat;
}

// A connection born on listener l for the 4-tuple key: addresses, next hop,
// and its place in the flow table.
void adopt_child(Env &e, Sock &l, Sock &c, const FlowKey &key)
{
    inherit(l, c);
    c.app.local = Endpoint{e.cfg_.ip, key.local_port};
    c.app.remote = Endpoint{key.remote_ip, key.remote_port};
    c.next_hop = e.router_.next_hop(key.remote_ip);
    e.link_flow(c, key);
}

// The same over IPv6: the addresses seg came between, its flow in FlowTable6.
static void adopt_child6(Env &e, Sock &l, Sock &c, const TcpSegment &seg)
{
    inherit(l, c);
    c.flags |= kFV6;
    c.v6.local = *seg.dst6;
    c.v6.remote = *seg.src6;
    c.app.local = Endpoint{kNoV4, seg.dport};
    c.app.remote = Endpoint{0, seg.sport};
    e.link_flow6(c);
}

static void adopt(Env &e, Sock &l, Sock &c, const FlowKey &key, const TcpSegment &seg)
{
    if (seg.src6) adopt_child6(e, l, c, seg);
    else adopt_child(e, l, c, key);
}

void tcp_listen_input(Env &e, Sock &l, const TcpSegment &seg)
{
    const uint8_t flags = seg.flags;
    const uint32_t seq = seg.seq, ack = seg.ack, len = seg.len;
    const uint32_t src = seg.src_ip;
    const TcpOptions &opt = seg.opt;
    // The key of RFC 6528's ISN and RFC 4987's cookie (IPv6: a keyed fold).
    const FlowKey key = seg.src6 ? tcp6::isn_key(e.cfg_.isn_secret, *seg.dst6, *seg.src6, seg.dport, seg.sport)
                                 : FlowKey{e.cfg_.ip, src, seg.dport, seg.sport};
    if (flags & kRst) {
        e.stats_.drop_tcp_bad_state++;
        return;
    }
    if (!(flags & kSyn)) {
        // Possibly the ACK completing a SYN-cookie handshake (RFC 4987 3.6).
        const int idx = e.cfg_.tcp.syncookies && (flags & kAck) && !(flags & kFin)
                            ? syncookie_decode(e.cfg_.isn_secret, key, seq - 1, ack - 1, e.now_ns_)
                            : -1;
        if (idx < 0 || l.lst.accept_len >= l.lst.backlog) {
            e.stats_.drop_tcp_bad_state++;
            send_rst_reply(e, seg);
            return;
        }
        Sock *c = e.sock_alloc(l.app.user);
        if (!c) {
            e.stats_.drop_tcp_bad_state++;
            return;
        }
        adopt(e, l, *c, key, seg);
        c->irs = seq - 1;
        c->rcv_nxt = seq;
        c->iss = ack - 1;
        c->snd_una = c->snd_nxt = c->snd_max = c->snd_sml = ack;
        // Options the cookie SYN-ACK promised: encoded in our echoed TSval.
        TcpOptions o;
        o.has_mss = true;
        o.mss = kCookieMss[idx];
        if (opt.has_ts && (opt.tsecr & 0x3f) != 0x3f) {
            o.has_ts = true;
            o.tsval = opt.tsval;
            const uint32_t ws = opt.tsecr & 0xf;
            if (ws != 0xf) {
                o.has_wscale = true;
                o.wscale = uint8_t(ws);
            }
            o.sack_permitted = (opt.tsecr >> 4) & 1;
        }
        conn_init(e, *c);
        negotiate(e, *c, o);
        if (!(c->flags & kFWscaleOk)) c->rcv_wscale = 0;
        c->flags |= kFSynCookie;
        c->state = TcpState::kSynReceived;
        c->snd_wnd = uint32_t(seg.win) << c->snd_wscale;
        c->snd_wl1 = seq;
        c->snd_wl2 = ack;
        c->max_snd_wnd = c->snd_wnd;
        update_mss(e, *c);
        build_template(e, *c);
        e.stats_.tcp_syncookies_ok++;
        e.stats_.tcp_passive_opens++;
        established(e, *c);
        // The handshake's pure ACK may have been lost and this be the first
        // data segment (or a FIN): it is in order, take it now rather than
        // make the peer wait for its retransmission timer.
        if (c->used && c->state == TcpState::kEstablished && (len || (flags & kFin))) {
            c->segs_in++;
            bool held = false;
            const uint32_t room = std::min(len, c->rx_free());
            // In order by construction (rcv_nxt = seq): tcp_data never holds it.
            tcp_data(e, *c, seg.frame, seq, seg.payload, room, (flags & kFin) && room == len, &held);
        }
        return;
    }
    if (flags & kAck) {
        // A SYN-ACK to a listener: RFC 9293 says reset it.
        e.stats_.drop_tcp_bad_state++;
        send_rst_reply(e, seg);
        return;
    }
    if (l.lst.accept_len >= l.lst.backlog) {
        e.stats_.drop_tcp_bad_state++; // the application is not accepting: the peer retries
        return;
    }
    const bool queue_full = l.lst.syn_queue_len >= std::min<uint32_t>(e.cfg_.tcp.syn_backlog, l.lst.backlog * 2 + 8);
    Sock *c = queue_full ? nullptr : e.sock_alloc(l.app.user);
    if (!c) {
        if (!e.cfg_.tcp.syncookies) {
            e.stats_.drop_tcp_bad_state++;
            return;
        }
        // Stateless answer (RFC 4987 3.6): everything we must remember is in
        // our ISN and, with timestamps, in the low bits of our TSval.
        // Our MSS option, as advertised_mss() gives it (TCP_MAXSEG on the listener).
        const uint32_t net = seg.src6 ? 60 : 40;
        const uint16_t our_max = uint16_t(l.user_mss ? std::min<uint32_t>(e.cfg_.mtu - net, l.user_mss) : e.cfg_.mtu - net);
        const uint16_t mss = std::min<uint16_t>(opt.has_mss && opt.mss ? opt.mss : 536, our_max);
        const int idx = cookie_mss_index(mss);
        const uint32_t cookie = syncookie_encode(e.cfg_.isn_secret, key, seq, idx, e.now_ns_);
        uint8_t o[24];
        uint8_t *p = o;
        *p++ = kOptMss;
        *p++ = 4;
        *p++ = uint8_t(our_max >> 8);
        *p++ = uint8_t(our_max);
        const bool ts = opt.has_ts && e.cfg_.tcp.timestamps;
        uint8_t rws = 0;
        if (ts) {
            const uint32_t ws = opt.has_wscale && e.cfg_.tcp.window_scaling ? opt.wscale : 0xf;
            const uint32_t sack = opt.sack_permitted && e.cfg_.tcp.sack;
            const uint32_t tsv = (e.tsval() & ~0x3fu) | (sack << 4) | ws;
            p = write_ts_option(p, tsv, opt.tsval);
            if (ws != 0xf) {
                // As conn_init() will for the connection the cookie becomes
                // (which takes the listener's SO_RCVBUF, adopt_child).
                const uint32_t buf = rcv_buf_limit(e, l);
                while (rws < 14 && (buf >> rws) > 65535) rws++;
                *p++ = kOptNop;
                *p++ = kOptWscale;
                *p++ = 3;
                *p++ = rws;
            }
            if (sack) {
                *p++ = kOptNop;
                *p++ = kOptNop;
                *p++ = kOptSackOk;
                *p++ = 2;
            }
        }
        const uint16_t win = uint16_t(std::min<uint32_t>(e.cfg_.tcp.rcvbuf, 65535));
        send_raw_reply(e, seg, cookie, seq + 1, kSyn | kAck, win, o, unsigned(p - o));
        e.stats_.tcp_syncookies_sent++;
        return;
    }
    adopt(e, l, *c, key, seg);
    c->irs = seq;
    c->rcv_nxt = seq + 1;
    c->iss = isn_generate(e.cfg_.isn_secret, key, e.now_ns_);
    c->snd_una = c->snd_nxt = c->snd_max = c->snd_sml = c->iss;
    conn_init(e, *c);
    negotiate(e, *c, opt);
    c->snd_wnd = seg.win; // never scaled in a SYN
    c->snd_wl1 = seq;
    c->max_snd_wnd = c->snd_wnd;
    c->state = TcpState::kSynReceived;
    update_mss(e, *c);
    build_template(e, *c);
    l.lst.syn_queue_len++;
    e.stats_.tcp_passive_opens++;
    send_segment(e, *c, c->iss, 0, kSyn | kAck, false);
    c->snd_nxt = c->snd_max = c->iss + 1;
    c->rtt_start_ns = e.now_ns_;
    c->rtt_seq = c->snd_nxt;
    arm_rtx(e, *c);
}

// ---- SYN-SENT --------------------------------------------------------------

void tcp_syn_sent_input(Env &e, Sock &s, const TcpSegment &seg)
{
    const uint8_t flags = seg.flags;
    const uint32_t seq = seg.seq, ack = seg.ack;
    const TcpOptions &opt = seg.opt;
    if (flags & kAck) {
        if (seq_le(ack, s.iss) || seq_gt(ack, s.snd_max)) {
            e.stats_.drop_tcp_bad_state++;
            if (!(flags & kRst))
                send_raw_conn(e, s, ack, 0, kRst, 0, nullptr, 0);
            return;
        }
    }
    if (flags & kRst) {
        if (flags & kAck) {
            e.stats_.tcp_resets_in++;
            e.conn_drop(s, ECONNREFUSED, kEvReset);
        } else {
            e.stats_.drop_tcp_bad_state++;
        }
        return;
    }
    if (!(flags & kSyn)) {
        e.stats_.drop_tcp_bad_state++;
        return;
    }
    s.irs = seq;
    s.rcv_nxt = seq + 1;
    s.rcv_adv = s.rcv_nxt + std::min<uint32_t>(rcv_window(e, s), 65535); // as our SYN said
    negotiate(e, s, opt);
    update_mss(e, s);
    s.snd_wnd = seg.win;
    s.snd_wl1 = seq;
    s.snd_wl2 = ack;
    s.max_snd_wnd = s.snd_wnd;
    if (flags & kAck) {
        s.snd_una = ack;
        if (seq_lt(s.snd_nxt, ack)) s.snd_nxt = ack;
        if (s.rtt_start_ns && s.rtx_count == 0) rtt_sample(e, s, e.now_ns_ - s.rtt_start_ns);
        s.rtt_start_ns = 0;
        established(e, s);
        ack_now(e, s);
        return;
    }
    // Simultaneous open (RFC 9293 3.5, figure 8): SYN-RECEIVED, answer SYN-ACK.
    s.state = TcpState::kSynReceived;
    send_segment(e, s, s.iss, 0, kSyn | kAck, true);
    arm_rtx(e, s);
}

// ---- the synchronized states ---------------------------------------------------

void established(Env &e, Sock &s)
{
    const bool passive = s.lst.parent != UINT32_MAX;
    // RFC 6298 5.7: the SYN (or SYN-ACK) timed out and left no RTT sample:
    // data starts with 3 s, not the backed-off handshake timer.
    if (s.srtt_ns == 0 && s.rtx_count > 0)
        s.rto_ns = std::clamp<uint64_t>(3'000'000'000ull, e.cfg_.tcp.rto_min_ns, e.cfg_.tcp.rto_max_ns);
    s.state = TcpState::kEstablished;
    update_mss(e, s);
    s.cca->init(s.cc, s.mss, e.now_ns_);
    s.last_recv_ns = e.now_ns_;
    s.rtx_count = 0;
    s.first_rtx_ns = 0;
    e.stats_.tcp_established++;
    enter_quickack(e, s); // the first data segments are ACKed at once (Linux's quick-ACK mode)
    TimerWheel::cancel(&s.rtx_timer);
    if (passive) {
        Sock &l = e.conn_at(s.lst.parent);
        if (!(s.flags & kFSynCookie) && l.lst.syn_queue_len) l.lst.syn_queue_len--;
        if (!e.attach_rings(s, l.app.user)) {
            // No memory for this connection: refuse it rather than stall.
            e.stats_.tcp_resets_out++;
            send_raw_conn(e, s, s.snd_max, 0, kRst, 0, nullptr, 0);
            e.sock_free(s);
            return;
        }
        s.lst.queue_next = UINT32_MAX;
        if (l.lst.accept_tail == UINT32_MAX) l.lst.accept_head = s.index;
        else e.conn_at(l.lst.accept_tail).lst.queue_next = s.index;
        l.lst.accept_tail = s.index;
        l.lst.accept_len++;
        e.raise(l, kEvAcceptable);
    } else {
        e.raise(s, kEvConnected | kEvWritable);
    }
    arm_keepalive(e, s);
}

} // namespace mars::tcp
