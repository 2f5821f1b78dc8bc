// socket_api.cc: the socket API of a stack (open, bind, listen, accept,
// connect, shutdown, close, abort, options, info) and the data API on the
// two rings (rx_view/rx_consume, tx_view/tx_commit, send/recv). Ids are
// checked (generation and slot) before anything is touched; bad arguments
// return -errno.
#include "stack_impl.h"
#include "tcp/tcp_options.h"

#include <algorithm>
#include <cstring>

namespace mars {

// ---- socket API --------------------------------------------------------

int64_t StackImpl::open(uint64_t user)
{
    Sock *s = sock_alloc(user);
    if (!s) return -EMFILE;
    return id_of(*s);
}

int StackImpl::bind(SockId id, Endpoint local)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->state != TcpState::kClosed || (s->flags & (kFBound | kFUserClosed))) return -EINVAL;
    if (local.ip != 0 && local.ip != cfg_.ip) return -EADDRNOTAVAIL;
    if (local.port == 0) {
        if (int rc = pick_port(*s, 0, 0); rc != 0) return rc;
    } else {
        if (port_in_use(local.ip, local.port, s)) return -EADDRINUSE;
        s->app.local.port = local.port;
    }
    s->app.local.ip = local.ip;
    s->flags |= kFBound;
    return 0;
}

int StackImpl::listen(SockId id, int backlog)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->state == TcpState::kListen) {
        s->lst.backlog = uint32_t(std::clamp(backlog, 1, 65535));
        return 0;
    }
    if (s->state != TcpState::kClosed || (s->flags & kFUserClosed)) return -EINVAL;
    if (!(s->flags & kFBound)) {
        if (int rc = bind(id, Endpoint{0, 0}); rc != 0) return rc;
    }
    if ((s->flags & kFV6) ? port_in_use6(s->v6.local, s->app.local.ip == 0, s->app.local.port, s)
                          : port_in_use(s->app.local.ip, s->app.local.port, s))
        return -EADDRINUSE;
    s->lst.backlog = uint32_t(std::clamp(backlog, 1, 65535));
    s->state = TcpState::kListen;
    listeners_.push_back(s->index);
    return 0;
}

int64_t StackImpl::accept(SockId id, uint64_t user)
{
    Sock *l = lookup_id(id);
    if (!l) return -EBADF;
    if (l->state != TcpState::kListen) return -EINVAL;
    if (l->lst.accept_head == UINT32_MAX) return -EAGAIN;
    Sock &c = socks_[l->lst.accept_head];
    l->lst.accept_head = c.lst.queue_next;
    if (l->lst.accept_head == UINT32_MAX) l->lst.accept_tail = UINT32_MAX;
    l->lst.accept_len--;
    c.lst.queue_next = UINT32_MAX;
    c.lst.parent = UINT32_MAX;
    c.app.user = user;
    c.flags |= kFAccepted;
    // Whatever happened before the accept is reported now.
    uint32_t bits = kEvWritable;
    if (c.rx_readable()) bits |= kEvReadable;
    if (c.flags & kFFinReceived) bits |= kEvPeerClosed | kEvReadable;
    if (c.state == TcpState::kClosed) bits |= c.app.error == ECONNRESET ? kEvReset : kEvError;
    raise(c, bits);
    return id_of(c);
}

int StackImpl::connect(SockId id, Endpoint remote, uint64_t now_ns)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->state == TcpState::kListen) return -EINVAL;
    if (s->state == TcpState::kSynSent) return -EALREADY;
    if (s->state != TcpState::kClosed || (s->flags & kFUserClosed)) return -EISCONN;
    if (s->flags & kFAccepted) return -EISCONN; // one connection per socket
    if (s->flags & kFV6) {
        // Bound by bind6: only a dual-stack :: may connect over IPv4 (to a
        // v4-mapped address, as Linux); it becomes an IPv4 socket.
        if (s->app.local.ip != 0) return -ENETUNREACH;
        s->flags &= ~kFV6;
    }
    if (remote.ip == 0 || remote.port == 0) return -EINVAL;
    if (remote.ip == 0xffffffffu || (remote.ip >> 28) == 14) return -ENETUNREACH; // broadcast, multicast
    if (now_ns > now_ns_) now_ns_ = now_ns;
    const uint32_t hop = router_.next_hop(remote.ip);
    if (hop == 0) return -ENETUNREACH;
    s->app.local.ip = cfg_.ip;
    bool recycled = false;
    uint32_t old_snd_max = 0;
    if (s->flags & kFBound) {
        if (FlowNode *n = flows_.lookup(FlowKey{cfg_.ip, remote.ip, s->app.local.port, remote.port})) {
            // The port's last connection to this remote waits in TIME-WAIT
            // here: an active open recycles it (Linux's tcp_tw_reuse), with
            // an ISN above everything the old connection sent (below). On a
            // port shared with the kernel the kernel picks the shim's ports,
            // and it cannot see MARS's TIME-WAIT (preload/README.md).
            Sock &old = *sock_of(n);
            if (old.state != TcpState::kTimeWait) return -EADDRINUSE;
            recycled = true;
            old_snd_max = old.snd_max;
            conn_closed(old);
        }
    } else if (int rc = pick_port(*s, remote.ip, remote.port); rc != 0) {
        return rc;
    }
    if (!attach_rings(*s, s->app.user)) return -ENOBUFS;
    s->app.remote = remote;
    s->next_hop = hop;
    link_flow(*s, FlowKey{cfg_.ip, remote.ip, s->app.local.port, remote.port});
    s->iss = isn_generate(cfg_.isn_secret, s->flow.key, now_ns_);
    // A recycled 4-tuple: the clock ISN (same flow, same secret) has moved
    // on only by the time elapsed, which a connection that sent more bytes
    // than that has outrun. The new SYN must lie above the old connection's
    // sequence space (RFC 1122 4.2.2.13, RFC 6191: what a peer still in
    // TIME-WAIT accepts, and no old segment falls in the new window): at
    // least a window (64 KiB) past the old snd_max, as Linux's tw_reuse.
    if (recycled && !wire::seq_gt(s->iss, old_snd_max + 65536)) s->iss = old_snd_max + 65537;
    start_syn_sent(*s);
    return 0;
}

void StackImpl::start_syn_sent(Sock &s)
{
    s.snd_una = s.snd_nxt = s.snd_max = s.snd_sml = s.iss;
    s.flags |= kFAccepted;
    tcp::conn_init(*this, s);
    tcp::build_template(*this, s);
    s.state = TcpState::kSynSent;
    stats_.tcp_active_opens++;
    s.first_rtx_ns = 0;
    // Over IPv6 the SYN is held on ND's queue until the neighbour resolves
    // (fail_unreachable6 when it does not), as ARP holds IPv4's.
    tcp::send_segment(*this, s, s.iss, 0, wire::kSyn, false);
    s.snd_nxt = s.snd_max = s.iss + 1;
    s.rtt_start_ns = now_ns_;
    s.rtt_seq = s.snd_nxt;
    s.last_recv_ns = now_ns_;
    tcp::arm_rtx(*this, s);
    link_.flush();
}

int StackImpl::shutdown(SockId id, bool rd, bool wr)
{
    if (copies_in_flight()) reap_copies(true); // the socket's bytes land before it changes
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->state == TcpState::kListen || s->state == TcpState::kClosed) {
        if (s->state == TcpState::kClosed && !(s->flags & kFAccepted)) return -ENOTCONN;
        if (s->state == TcpState::kListen) return -ENOTCONN;
    }
    if (rd) s->flags |= kFRdShut;
    if (wr && !(s->flags & kFFinQueued)) {
        s->flags |= kFFinQueued;
        want_output(*s);
        flush_output();
        link_.flush();
    }
    return 0;
}

int StackImpl::close(SockId id)
{
    if (copies_in_flight()) reap_copies(true); // the socket's bytes land before it changes
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->flags & kFUserClosed) return -EBADF;
    s->flags |= kFUserClosed;
    switch (s->state) {
    case TcpState::kListen:
        abort_children(*s);
        sock_free(*s);
        break;
    case TcpState::kClosed:
    case TcpState::kSynSent:
        sock_free(*s);
        break;
    case TcpState::kTimeWait:
        release_user(*s);
        break;
    default:
        // Unread data or SO_LINGER 0: reset instead of a graceful close
        // (RFC 9293 3.10.4 permits it; data would be lost silently otherwise).
        if (s->rx_readable() || s->app.linger_sec == 0) {
            s->flags &= ~kFUserClosed;
            return abort(id);
        }
        s->flags |= kFFinQueued;
        s->flags |= kFRdShut;
        want_output(*s);
        flush_output();
        link_.flush();
        break;
    }
    return 0;
}

// The reset of an abort (close with unread data, SO_LINGER 0, a listener's
// children). RFC 9293 3.10.7's ABORT sends <SEQ=SND.NXT><CTL=RST>; from
// ESTABLISHED on it goes as RST|ACK ack=RCV.NXT with the timestamp option
// when timestamps were agreed (RFC 7323 3.2: TSopt SHOULD be in a RST),
// as Linux's tcp_send_active_reset does, so a peer that checks a reset's
// ACK or timestamp takes it. In SYN-RECEIVED the bare RST of RFC 9293.
void StackImpl::send_abort_rst(const Sock &s)
{
    uint8_t opts[12];
    unsigned opt_len = 0;
    uint32_t ack = 0;
    uint8_t flags = wire::kRst;
    if (s.state != TcpState::kSynReceived) {
        ack = s.rcv_nxt;
        flags |= wire::kAck;
        if (s.flags & kFTsOk) opt_len = unsigned(write_ts_option(opts, tsval(), s.ts_recent) - opts);
    }
    tcp::send_raw_conn(*this, s, s.snd_max, ack, flags, 0,
                  opt_len ? opts : nullptr, opt_len);
    stats_.tcp_resets_out++;
}

int StackImpl::abort(SockId id)
{
    if (copies_in_flight()) reap_copies(true); // the socket's bytes land before it changes
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    s->flags |= kFUserClosed;
    switch (s->state) {
    case TcpState::kListen:
        abort_children(*s);
        break;
    case TcpState::kSynReceived:
    case TcpState::kEstablished:
    case TcpState::kFinWait1:
    case TcpState::kFinWait2:
    case TcpState::kCloseWait:
    case TcpState::kClosing:
    case TcpState::kLastAck:
        send_abort_rst(*s);
        break;
    default:
        break;
    }
    sock_free(*s);
    link_.flush();
    return 0;
}

void StackImpl::abort_children(Sock &l)
{
    for (Sock &c : socks_) {
        if (!c.used || c.lst.parent != l.index) continue;
        if (c.state != TcpState::kClosed) send_abort_rst(c);
        sock_free(c);
    }
    l.lst.accept_head = l.lst.accept_tail = UINT32_MAX;
    l.lst.accept_len = l.lst.syn_queue_len = 0;
}

int StackImpl::set_option(SockId id, SockOpt opt, int64_t v)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    auto flag = [&](uint32_t f) {
        if (v) s->flags |= f;
        else s->flags &= ~f;
    };
    switch (opt) {
    case SockOpt::kNoDelay:
        flag(kFNoDelay);
        if (v) tcp::push_pending(*this, *s); // tcp(7): an explicit push, also of corked data
        break;
    case SockOpt::kCork:
        flag(kFCork);
        if (!v) want_output(*s); // uncorking sends what waits (Linux)
        break;
    case SockOpt::kKeepAlive:
        flag(kFKeepAlive);
        tcp::arm_keepalive(*this, *s);
        break;
    case SockOpt::kKeepIdleSec:
        if (v < 1 || v > 32767) return -EINVAL;
        s->app.keep_idle_ns = uint64_t(v) * 1'000'000'000ull;
        tcp::arm_keepalive(*this, *s);
        break;
    case SockOpt::kKeepIntvlSec:
        if (v < 1 || v > 32767) return -EINVAL;
        s->app.keep_intvl_ns = uint64_t(v) * 1'000'000'000ull;
        break;
    case SockOpt::kKeepCnt:
        if (v < 1 || v > 127) return -EINVAL;
        s->app.keep_cnt = uint32_t(v);
        break;
    case SockOpt::kMaxSeg:
        if (v != 0 && (v < 88 || v > 65535)) return -EINVAL;
        s->user_mss = uint32_t(v);
        if (s->state != TcpState::kClosed && s->state != TcpState::kListen) tcp::update_mss(*this, *s);
        break;
    case SockOpt::kUserTimeoutMs:
        if (v < 0) return -EINVAL;
        s->app.user_timeout_ns = uint64_t(v) * 1'000'000ull;
        break;
    case SockOpt::kLingerSec:
        if (v < -1 || v > 65535) return -EINVAL;
        s->app.linger_sec = int32_t(v);
        break;
    case SockOpt::kReuseAddr:
        flag(kFReuseAddr);
        break;
    case SockOpt::kReusePort:
        flag(kFReusePort);
        break;
    case SockOpt::kTos:
        if (v < 0 || v > 255) return -EINVAL;
        s->app.tos = uint8_t(v & 0xfc);
        if (s->flags & kFHasRings) tcp::build_template(*this, *s);
        break;
    case SockOpt::kTclass:
        // IPV6_TCLASS: -1 is the default (0); the ECN bits are TCP's own
        // (Linux keeps them out of a stream socket's value, as for IP_TOS).
        if (v < -1 || v > 255) return -EINVAL;
        s->app.tclass = v < 0 ? 0 : uint8_t(v & 0xfc);
        if (s->flags & kFHasRings) tcp::build_template(*this, *s);
        break;
    case SockOpt::kRcvLowat:
        if (v < 1) return -EINVAL;
        s->app.rcv_lowat = uint32_t(std::min<int64_t>(v, INT32_MAX));
        break;
    case SockOpt::kNotsentLowat:
        // As Linux stores the int it is given (a negative one is a huge
        // unsigned: no limit); the shim maps 0 to its namespace's default.
        if (v < 0 || v > int64_t(UINT32_MAX)) return -EINVAL;
        s->app.notsent_lowat = uint32_t(v);
        if ((s->flags & kFHasRings) && s->tx_room()) raise(*s, kEvWritable); // Linux: sk_write_space
        break;
    case SockOpt::kRcvBuf:
        // As on Linux, SO_RCVBUF fixes the size: no autotuning. Set before
        // the connection exists, it also sets the window scale. The buffer
        // never shrinks below the window already offered (the right edge
        // never moves left; window_to_advertise keeps it).
        // A buffer larger than the ring grows the ring first (rcv_buf_fix),
        // and the larger window goes out once it has.
        if (v < 4096 || v > (1 << 30)) return -EINVAL;
        {
            const uint32_t before = tcp::rcv_window(*this, *s);
            tcp::rcv_buf_fix(*this, *s, uint32_t(v));
            tcp::window_update(*this, *s, before);
        }
        break;
    default:
        return -ENOPROTOOPT;
    }
    flush_output();
    link_.flush();
    return 0;
}

int StackImpl::get_option(SockId id, SockOpt opt, int64_t *v) const
{
    const Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (!v) return -EINVAL;
    switch (opt) {
    case SockOpt::kNoDelay: *v = (s->flags & kFNoDelay) != 0; break;
    case SockOpt::kCork: *v = (s->flags & kFCork) != 0; break;
    case SockOpt::kKeepAlive: *v = (s->flags & kFKeepAlive) != 0; break;
    case SockOpt::kKeepIdleSec: *v = int64_t(s->app.keep_idle_ns / 1'000'000'000ull); break;
    case SockOpt::kKeepIntvlSec: *v = int64_t(s->app.keep_intvl_ns / 1'000'000'000ull); break;
    case SockOpt::kKeepCnt: *v = s->app.keep_cnt; break;
    // Closed or listening: the MSS asked for, else the last connection's
    // (a socket reset before or after accept() still answers the MSS it had,
    // Linux's mss_cache), else 536 (RFC 9293 3.7.1's default).
    case SockOpt::kMaxSeg: *v = s->state == TcpState::kClosed || s->state == TcpState::kListen
                                    ? (s->user_mss ? s->user_mss : s->mss ? s->mss : 536) : s->mss;
        break;
    case SockOpt::kUserTimeoutMs: *v = int64_t(s->app.user_timeout_ns / 1'000'000ull); break;
    case SockOpt::kLingerSec: *v = s->app.linger_sec; break;
    case SockOpt::kReuseAddr: *v = (s->flags & kFReuseAddr) != 0; break;
    case SockOpt::kReusePort: *v = (s->flags & kFReusePort) != 0; break;
    case SockOpt::kTos: *v = s->app.tos; break;
    case SockOpt::kTclass: *v = s->app.tclass; break;
    case SockOpt::kRcvLowat: *v = s->app.rcv_lowat; break;
    case SockOpt::kNotsentLowat: *v = s->app.notsent_lowat; break;
    case SockOpt::kRcvBuf: *v = (s->flags & kFHasRings) ? s->app.rcv_space : s->app.rcv_buf; break;
    default: return -ENOPROTOOPT;
    }
    return 0;
}

static void fill_info(const Sock &s, SockInfo *o)
{
    *o = SockInfo{};
    o->state = s.state;
    o->local = s.app.local;
    o->remote = s.app.remote;
    if (s.flags & kFV6) { // an IPv6 socket (socket_api6.cc)
        o->ipv6 = true;
        o->local.ip = o->remote.ip = 0;
        o->local6 = Endpoint6{s.v6.local, s.app.local.port};
        o->remote6 = Endpoint6{s.v6.remote, s.app.remote.port};
    }
    o->rx_readable = s.rx_readable();
    o->tx_space = s.tx_free();
    o->tx_unacked = s.snd_max - s.snd_una;
    o->error = s.app.error;
    o->peer_closed = (s.flags & kFFinReceived) != 0;
    o->snd_mss = s.mss;
    o->rcv_mss = s.peer_mss;
    o->cwnd = s.cc.cwnd;
    o->ssthresh = s.cc.ssthresh;
    o->srtt_us = uint32_t(s.srtt_ns / 1000);
    o->rttvar_us = uint32_t(s.rttvar_ns / 1000);
    o->rto_us = uint32_t(s.rto_ns / 1000);
    o->snd_wnd = s.snd_wnd;
    o->rcv_wnd = s.rcv_adv - s.rcv_nxt;
    o->snd_wscale = s.snd_wscale;
    o->rcv_wscale = s.rcv_wscale;
    o->sack_ok = (s.flags & kFSackOk) != 0;
    o->ts_ok = (s.flags & kFTsOk) != 0;
    o->retransmits = s.rtx_count;
    o->total_retransmits = s.count.total_retransmits;
    o->bytes_in = s.bytes_in;
    o->bytes_out = s.count.bytes_out;
    o->segs_in = s.segs_in;
    o->segs_out = s.count.segs_out;
    o->ooo_frames = s.rec.ooo.frames();
    o->rcv_space = (s.flags & kFHasRings) ? s.app.rcv_space : s.app.rcv_buf;
    o->rx_ring = (s.flags & kFHasRings) ? s.rx_mask + 1 : 0;
    o->tx_ring = (s.flags & kFHasRings) ? s.tx_mask + 1 : 0;
    o->ooo_share = s.app.ooo_share;
}

int StackImpl::info(SockId id, SockInfo *out) const
{
    const Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (!out) return -EINVAL;
    fill_info(*s, out);
    return 0;
}

void StackImpl::set_user(SockId id, uint64_t user)
{
    if (Sock *s = lookup_id(id)) s->app.user = user;
}

void StackImpl::for_each_socket(void (*fn)(SockId, const SockInfo &, uint64_t, void *), void *arg) const
{
    for (const Sock &s : socks_) {
        if (!s.used) continue;
        SockInfo in;
        fill_info(s, &in);
        fn(id_of(s), in, s.app.user, arg);
    }
}

// ---- data ----------------------------------------------------------------

static void ring_span(uint8_t *base, uint32_t mask, uint32_t pos, uint32_t n, RingSpan *out)
{
    const uint32_t off = pos & mask;
    const uint32_t first = std::min(n, mask + 1 - off);
    out->p[0] = base + off;
    out->n[0] = first;
    out->p[1] = base;
    out->n[1] = n - first;
}

// What rx_view() and tx_view() return for a socket without rings (0: an
// empty view), shared with ring_levels().
static int rx_no_rings(const Sock &s) { return s.state == TcpState::kListen ? -EINVAL : 0; }
static int tx_refused(const Sock &s)
{
    if (s.app.error) return -s.app.error;
    if (s.flags & kFFinQueued) return -EPIPE;
    if (!(s.flags & kFHasRings)) return s.state == TcpState::kClosed ? -ENOTCONN : -EINVAL;
    return 0;
}

int StackImpl::rx_view(SockId id, RingSpan *out) const
{
    const Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (!out) return -EINVAL;
    *out = RingSpan{{nullptr, nullptr}, {0, 0}};
    if (!(s->flags & kFHasRings)) return rx_no_rings(*s);
    ring_span(s->rx, s->rx_mask, s->rx_head, s->rx_readable(), out);
    return 0;
}

int StackImpl::rx_consume(SockId id, uint32_t n)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (n > s->rx_readable()) return -EINVAL;
    if (n == 0) return 0;
    const uint32_t before = tcp::rcv_window(*this, *s);
    s->rx_head += n;
    tcp::rcv_tune(*this, *s); // may grow the buffer (and the ring, now empty): the window update tells the peer
    tcp::window_update(*this, *s, before);
    return 0;
}

// Window update (RFC 9293 3.8.6.2.2 / RFC 1122 4.2.3.3): tell the peer once
// the window has opened by two segments or half the buffer.

int StackImpl::tx_view(SockId id, RingSpan *out) const
{
    const Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (!out) return -EINVAL;
    *out = RingSpan{{nullptr, nullptr}, {0, 0}};
    if (const int rc = tx_refused(*s)) return rc;
    // The ring's free space, TCP_NOTSENT_LOWAT or not: the engine finds a new
    // connection's ring (and its base) by it; what the application may write
    // is ring_levels().writable (and send()), which honour the mark.
    ring_span(s->tx, s->tx_mask, s->tx_tail, s->tx_free(), out);
    return 0;
}

void StackImpl::ring_levels(SockId id, RingLevels *out) const
{
    const Sock *s = lookup_id(id);
    if (!s) {
        *out = RingLevels{-EBADF, -EBADF, 0, 0};
        return;
    }
    const bool rings = (s->flags & kFHasRings) != 0;
    out->rx_rc = rings ? 0 : rx_no_rings(*s);
    out->readable = rings ? s->rx_readable() : 0;
    out->tx_rc = tx_refused(*s);
    out->writable = out->tx_rc == 0 ? s->tx_room() : 0; // what the engine offers the application
}

int StackImpl::tx_commit(SockId id, uint32_t n, bool more)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->app.error) return -s->app.error;
    if (s->flags & kFFinQueued) return -EPIPE;
    if (!(s->flags & kFHasRings)) return -ENOTCONN;
    const uint32_t free = s->tx_free();
    if (n > free) return -EINVAL;
    // The application keeps the ring nearly full (less than a quarter
    // free after these bytes): send-buffer autotuning may want it larger.
    if (free - n < (s->tx_mask >> 2)) [[unlikely]]
        snd_tune(*s);
    s->tx_tail += n;
    // MSG_MORE holds a sub-MSS tail only while this call's output runs, as
    // Linux's tcp_sendmsg pushes with TCP_NAGLE_CORK for the call that says
    // MORE; output clocked later by ACKs sends the tail by the usual rules
    // (Nagle, TCP_CORK). A tail written with MSG_MORE carries no PSH (Linux
    // skips tcp_mark_push), until a write without it ends the data.
    if (more) s->flags |= kFMore | kFTailMore;
    else if (n) s->flags &= ~kFTailMore;
    if (n && (s->state == TcpState::kEstablished || s->state == TcpState::kCloseWait)) {
        tcp::tcp_output(*this, *s);
        link_.flush();
    }
    s->flags &= ~kFMore;
    return 0;
}

// Send-buffer autotuning, as Linux's tcp_sndbuf_expand: a sender limited by
// its buffer gets about twice the congestion window (Linux: 2 * cwnd segments
// of its per-segment memory), up to the ring owner's limit (eta: the slot's
// reserve, tcp.sndbuf_max), as the power of two a ring needs: asked once per
// size (a doubling of the window), not at every commit; the owner ignores it
// when SO_SNDBUF was set.
void StackImpl::snd_tune(Sock &s)
{
    const uint64_t need = 2ull * std::max<uint32_t>(s.cc.cwnd, 10 * s.mss);
    uint64_t want = uint64_t(s.tx_mask) + 1;
    while (want < need && want < (1ull << 31))
        want <<= 1;
    if (want <= uint64_t(s.tx_mask) + 1 || want <= s.app.snd_wanted) return;
    s.app.snd_wanted = uint32_t(want);
    buffers_.want_tx(s.app.user, s.app.mem, uint32_t(want));
}

int StackImpl::tx_grow(SockId id, uint32_t size)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (!(s->flags & kFHasRings)) return -ENOTCONN;
    if ((size & (size - 1)) || size <= s->tx_mask + 1) return -EINVAL;
    if (s->tx_refs.any()) return -EBUSY; // frames in flight point at the old offsets
    s->tx_mask = size - 1;
    s->app.snd_buf = size;
    s->app.mem.tx_size = size; // reclaim() hands back the grown ring
    return 0;
}

int64_t StackImpl::send(SockId id, const void *data, size_t len)
{
    RingSpan sp;
    if (int rc = tx_view(id, &sp); rc != 0) return rc;
    const auto *src = static_cast<const uint8_t *>(data);
    size_t done = 0;
    const size_t asked = len;
    if (const Sock *s = lookup_id(id)) len = std::min<size_t>(len, s->tx_room()); // TCP_NOTSENT_LOWAT
    for (int i = 0; i < 2 && done < len; i++) {
        const size_t k = std::min<size_t>(sp.n[i], len - done);
        std::memcpy(sp.p[i], src + done, k);
        done += k;
    }
    if (done == 0) return asked == 0 ? 0 : -EAGAIN;
    if (int rc = tx_commit(id, uint32_t(done), false); rc != 0) return rc;
    return int64_t(done);
}

int64_t StackImpl::recv(SockId id, void *data, size_t len)
{
    RingSpan sp;
    if (int rc = rx_view(id, &sp); rc != 0) return rc;
    auto *dst = static_cast<uint8_t *>(data);
    size_t done = 0;
    for (int i = 0; i < 2 && done < len; i++) {
        const size_t k = std::min<size_t>(sp.n[i], len - done);
        std::memcpy(dst + done, sp.p[i], k);
        done += k;
    }
    if (done) {
        rx_consume(id, uint32_t(done));
        return int64_t(done);
    }
    const Sock *s = lookup_id(id);
    if (s->flags & kFFinReceived) return 0;
    if (s->app.error) return -s->app.error;
    return len == 0 ? 0 : -EAGAIN;
}

} // namespace mars
