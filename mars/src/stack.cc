// stack.cc: creating a stack, the socket table, the socket API, events and
// the poll loop. The protocol work is in net.cc, tcp_in.cc, tcp_out.cc and
// tcp_timer.cc.
#include "stack_impl.h"

#include <algorithm>
#include <cstring>

namespace mars {

namespace {

bool power_of_two(uint32_t v) { return v && !(v & (v - 1)); }

// Timer wheel geometry: 1 ms ticks, 4096 slots (a rotation every ~4 s; longer
// timers wait out whole rotations).
constexpr uint64_t kTickNs = 1'000'000;
constexpr uint32_t kWheelSlots = 4096;
constexpr uint32_t kArpSlots = 256;

} // namespace

std::unique_ptr<Stack> Stack::create(const StackConfig &config, PacketIo &io, BufferProvider &buffers,
                                     std::string *error)
{
    auto s = std::make_unique<StackImpl>(config, io, buffers);
    std::string why;
    if (!s->init(&why)) {
        if (error) *error = why;
        return nullptr;
    }
    return s;
}

StackImpl::StackImpl(const StackConfig &config, PacketIo &io, BufferProvider &buffers)
    : cfg_(config), io_(io), buffers_(buffers)
{
}

StackImpl::~StackImpl() { release_buffers(); }

void StackImpl::release_buffers()
{
    // Give every buffer back: frames waiting for ARP or in the transmit
    // burst, out-of-order frames, ring memory.
    if (copies_in_flight()) reap_copies(true);
    flush_rx_done();
    for (auto &p : arp_pending_) release(p.frame);
    arp_pending_.clear();
    if (tx_n_) io_.release(tx_burst_, tx_n_);
    tx_n_ = 0;
    for (Sock &s : socks_) {
        if (!s.used) continue;
        s.ooo.clear(ooo_pool_, io_);
        release_rings(s);
    }
}

void StackImpl::reset()
{
    release_buffers();
    // Tables keep their memory and are emptied; everything else is set as
    // init() sets it (start_state() is the part they share).
    flows_.clear();
    wheel_.clear(0);
    ooo_pool_.clear();
    listeners_.clear();
    event_list_.clear();
    closed_events_.clear();
    flush_list_.clear();
    std::fill(arp_.begin(), arp_.end(), ArpEntry{});
    now_ns_ = 0;
    stats_ = StackStats{};
    event_pos_ = 0;
    arp_gen_ = 1;
    arp_next_expire_ns_ = 0;
    rx_done_n_ = 0;
    pending_head_ = pending_tail_ = 0;
    doorbell_due_ = false;
    start_state();
}

bool StackImpl::init(std::string *error)
{
    const StackConfig &c = cfg_;
    const TcpConfig &t = c.tcp;
    auto fail = [&](const char *msg) {
        *error = msg;
        return false;
    };
    if (c.ip == 0) return fail("the stack needs an IPv4 address (StackConfig::ip is 0)");
    if (c.prefix == 0 || c.prefix > 32) return fail("prefix must be 1..32");
    if (c.mtu < 576 || c.mtu > 9216) return fail("mtu must be 576..9216");
    if (c.n_routes < 0 || c.n_routes > StackConfig::kMaxRoutes) return fail("n_routes must be 0..16");
    if (c.max_sockets == 0 || c.max_sockets > kIndexMask) return fail("max_sockets must be 1..4194303");
    if (!power_of_two(t.rcvbuf) || t.rcvbuf < 4096 || t.rcvbuf > (1u << 30))
        return fail("tcp.rcvbuf must be a power of two from 4096 to 1 GiB");
    if (!power_of_two(t.sndbuf) || t.sndbuf < 4096 || t.sndbuf > (1u << 30))
        return fail("tcp.sndbuf must be a power of two from 4096 to 1 GiB");
    if (c.ephemeral_lo == 0 || c.ephemeral_lo > c.ephemeral_hi) return fail("ephemeral port range is empty");
    if (c.ooo_pool_frames == 0) return fail("ooo_pool_frames must be at least 1");
    if (t.rto_min_ns == 0 || t.rto_min_ns > t.rto_max_ns || t.rto_initial_ns == 0)
        return fail("rto_min_ns must be > 0 and <= rto_max_ns, rto_initial_ns > 0");
    if (t.syn_backlog == 0) return fail("syn_backlog must be at least 1");
    if (c.strands == 0 || c.strands > StackConfig::kMaxStrands)
        return fail("strands must be 1..64 (1: run every frame to completion)");
    if (c.copy_engine && c.copy_drain_polls == 0) return fail("copy_drain_polls must be at least 1");
    if (c.copy_engine) pending_.resize(kMaxPendingCopies);

    std::memcpy(&wire_mac_lo_, c.mac.b, 4);
    std::memcpy(&wire_mac_hi_, c.mac.b + 4, 2);
    wire_ip_ = wire::be32(c.ip);
    subnet_mask_ = c.prefix == 32 ? ~0u : ~((1u << (32 - c.prefix)) - 1);
    offloads_ = io_.offloads();
    socks_.resize(c.max_sockets);
    free_socks_.reserve(c.max_sockets);
    event_list_.reserve(c.max_sockets);
    closed_events_.reserve(c.max_sockets);
    flush_list_.reserve(c.max_sockets);
    if (!flows_.init(c.max_sockets)) return fail("cannot allocate the connection table");
    if (!wheel_.init(kWheelSlots, kTickNs, 0)) return fail("cannot allocate the timer wheel");
    if (!ooo_pool_.init(c.ooo_pool_frames)) return fail("cannot allocate the out-of-order pool");
    ooo_window_cap_ = c.ooo_frames_per_conn ? uint32_t(std::min<uint64_t>(uint64_t(c.ooo_frames_per_conn) * (c.mtu - 40), UINT32_MAX))
                                           : UINT32_MAX; // no queue: nothing to protect
    arp_.resize(kArpSlots);
    arp_mask_ = kArpSlots - 1;
    arp_pending_.reserve(c.arp_pending_frames);
    start_state();
    return true;
}

void StackImpl::start_state()
{
    const StackConfig &c = cfg_;
    stats_.strands = strands_ = c.strands;
    prefetch_ = c.prefetch;
    copy_ = c.copy_engine;
    copy_threshold_ = c.copy_threshold;
    free_socks_.clear();
    for (uint32_t i = c.max_sockets; i-- > 0;) {
        Sock &s = socks_[i];
        s.~Sock();
        new (&s) Sock();
        s.index = i;
        s.gen = 1;
        free_socks_.push_back(i);
    }
    next_ephemeral_ = uint16_t(c.ephemeral_lo + (c.isn_secret[0] % (c.ephemeral_hi - c.ephemeral_lo + 1u)));
}

// ---- socket table ------------------------------------------------------

Sock *StackImpl::lookup_id(SockId id) const
{
    const uint32_t i = id & kIndexMask;
    if (i >= socks_.size()) return nullptr;
    Sock *s = const_cast<Sock *>(&socks_[i]);
    if (!s->used || s->gen != (id >> kIndexBits)) return nullptr;
    return s;
}

Sock *StackImpl::sock_alloc(uint64_t user)
{
    if (free_socks_.empty()) return nullptr;
    const uint32_t i = free_socks_.back();
    free_socks_.pop_back();
    Sock &s = socks_[i];
    const uint32_t gen = s.gen, in_events = s.flags & kFInEvents;
    s.~Sock();
    new (&s) Sock();
    s.index = i;
    s.gen = gen;
    s.flags = in_events;
    s.used = true;
    s.user = user;
    const TcpConfig &t = cfg_.tcp;
    s.rcv_buf = t.rcvbuf;
    s.snd_buf = t.sndbuf;
    s.keep_idle_ns = t.keepalive_idle_ns;
    s.keep_intvl_ns = t.keepalive_intvl_ns;
    s.keep_cnt = t.keepalive_probes;
    s.rtx_timer.owner = s.delack_timer.owner = s.aux_timer.owner = s.rack_timer.owner = &s;
    s.rack_timer.kind = kTimerRack;
    s.rtx_timer.kind = kTimerRtx;
    s.delack_timer.kind = kTimerDelack;
    s.aux_timer.kind = kTimerAux;
    s.rto_ns = t.rto_initial_ns;
    stats_.conns_open++;
    return &s;
}

// The connection stops: no timers, no flow entry, no held frames.
void StackImpl::quiesce(Sock &s)
{
    TimerWheel::cancel(&s.rtx_timer);
    TimerWheel::cancel(&s.delack_timer);
    TimerWheel::cancel(&s.aux_timer);
    TimerWheel::cancel(&s.rack_timer);
    unlink_flow(s);
    if (!s.ooo.empty()) {
        s.ooo.clear(ooo_pool_, io_);
        stats_.ooo_frames_used = ooo_pool_.used();
    }
}

void StackImpl::sock_free(Sock &s)
{
    quiesce(s);
    release_rings(s);
    detach(s);
    s.parent = UINT32_MAX;
    if (s.state == TcpState::kListen) {
        listeners_.erase(std::find(listeners_.begin(), listeners_.end(), s.index));
    }
    s.used = false;
    s.state = TcpState::kClosed;
    s.ev_bits = 0;
    s.flags &= kFInEvents;
    s.gen = (s.gen + 1) & ((1u << (32 - kIndexBits)) - 1);
    if (s.gen == 0) s.gen = 1;
    free_socks_.push_back(s.index);
    stats_.conns_open--;
}

bool StackImpl::attach_rings(Sock &s, uint64_t user)
{
    RingMemory m;
    if (!buffers_.provide(user, &m)) return false;
    if (!m.rx || !m.tx || !power_of_two(m.rx_size) || !power_of_two(m.tx_size)) {
        buffers_.reclaim(user, m);
        return false;
    }
    s.mem = m;
    s.rx = m.rx;
    s.rx_mask = m.rx_size - 1;
    s.tx = m.tx;
    s.tx_mask = m.tx_size - 1;
    s.rx_head = s.rx_tail = 0;
    s.tx_head = s.tx_tail = 0;
    s.flags |= kFHasRings;
    return true;
}

void StackImpl::release_rings(Sock &s)
{
    if (!(s.flags & kFHasRings)) return;
    if (s.rx_inflight) reap_copies(true); // no engine may write into memory handed back
    s.flags &= ~kFHasRings;
    buffers_.reclaim(s.user, s.mem);
    s.mem = RingMemory{};
    s.rx = s.tx = nullptr;
    s.rx_mask = s.tx_mask = 0;
    s.rx_head = s.rx_tail = s.tx_head = s.tx_tail = 0;
}

void StackImpl::unlink_flow(Sock &s)
{
    if (s.flow.linked) flows_.remove(&s.flow);
}

uint16_t StackImpl::events(SockEvent *out, uint16_t max)
{
    uint16_t n = 0;
    while (n < max && event_pos_ < event_list_.size()) {
        Sock &s = socks_[event_list_[event_pos_++]];
        s.flags &= ~kFInEvents;
        if (!s.used || !s.ev_bits || (s.flags & kFDetached)) continue;
        // Connections still in a listener's queues belong to the listener.
        if (s.parent != UINT32_MAX) {
            s.ev_bits = 0;
            continue;
        }
        out[n++] = SockEvent{id_of(s), s.ev_bits, s.user};
        s.ev_bits = 0;
    }
    if (event_pos_ == event_list_.size()) {
        event_list_.clear();
        event_pos_ = 0;
    }
    size_t k = 0;
    while (n < max && k < closed_events_.size()) out[n++] = closed_events_[k++];
    closed_events_.erase(closed_events_.begin(), closed_events_.begin() + long(k));
    return n;
}

// The application's id ends here: kEvClosed goes out with whatever else was
// pending. Connections nobody accepted yet were never visible: no event.
void StackImpl::detach(Sock &s)
{
    if (s.parent != UINT32_MAX || (s.flags & kFDetached)) return;
    closed_events_.push_back(SockEvent{id_of(s), s.ev_bits | kEvClosed, s.user});
    s.ev_bits = 0;
}

// Like the kernel, which frees the descriptor at close() and keeps TIME-WAIT
// in a small bucket: the application's id (and, in eta, its DTI socket slot)
// must not be held for 2MSL.
void StackImpl::release_user(Sock &s)
{
    release_rings(s);
    detach(s);
    s.flags |= kFDetached;
    s.user = 0; // the tag named the application's socket, which is gone (for_each_socket shows 0)
    s.gen = (s.gen + 1) & ((1u << (32 - kIndexBits)) - 1); // the old id stops working
    if (s.gen == 0) s.gen = 1;
}

// The connection ended abnormally: reset by the peer, timed out, refused.
void StackImpl::conn_drop(Sock &s, int err, uint32_t ev)
{
    quiesce(s);
    s.state = TcpState::kClosed;
    if (s.parent != UINT32_MAX) {
        // Not accepted yet: nobody knows this connection; it just goes away.
        Sock &l = socks_[s.parent];
        if (!(s.flags & kFAccepted) && (s.flags & kFHasRings)) {
            // In the accept queue: unlink it.
            uint32_t *pp = &l.accept_head, prev = UINT32_MAX;
            while (*pp != UINT32_MAX && *pp != s.index) {
                prev = *pp;
                pp = &socks_[*pp].queue_next;
            }
            if (*pp == s.index) {
                *pp = s.queue_next;
                if (l.accept_tail == s.index) l.accept_tail = prev;
                l.accept_len--;
            }
        } else if (l.syn_queue_len) {
            l.syn_queue_len--;
        }
        sock_free(s);
        return;
    }
    s.error = err;
    if (s.flags & kFUserClosed) {
        sock_free(s);
        return;
    }
    raise(s, ev);
}

// The connection reached CLOSED the orderly way.
void StackImpl::conn_closed(Sock &s)
{
    quiesce(s);
    s.state = TcpState::kClosed;
    if (s.flags & kFUserClosed) sock_free(s);
}

Sock *StackImpl::find_listener(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport)
{
    // Keyed with the stack's secret and mixed differently from the engines'
    // flow owner hash, so members are chosen evenly on every engine.
    uint32_t h = (rip ^ uint32_t(cfg_.isn_secret[1])) * 0x2545f491u;
    h ^= (uint32_t(rport) << 16 | lport) ^ uint32_t(cfg_.isn_secret[1] >> 32);
    h *= 0x27d4eb2fu;
    h ^= h >> 16;
    h *= 0x165667b1u;
    h ^= h >> 13;
    for (const bool exact : {true, false}) {
        const uint32_t want_ip = exact ? lip : 0;
        uint32_t members = 0;
        for (uint32_t i : listeners_)
            if (socks_[i].local.port == lport && socks_[i].local.ip == want_ip) members++;
        if (members == 0) continue;
        uint32_t pick = members == 1 ? 0 : h % members;
        for (uint32_t i : listeners_)
            if (socks_[i].local.port == lport && socks_[i].local.ip == want_ip && pick-- == 0) return &socks_[i];
    }
    return nullptr;
}

bool StackImpl::same_owner(const Sock &a, const Sock &b) const
{
    return !cfg_.owner_of || cfg_.owner_of(a.user, cfg_.owner_arg) == cfg_.owner_of(b.user, cfg_.owner_arg);
}

bool StackImpl::port_in_use(uint32_t lip, uint16_t port, const Sock *except) const
{
    for (uint32_t i : listeners_) {
        const Sock &l = socks_[i];
        if (&l == except || l.local.port != port) continue;
        if (l.local.ip == 0 || lip == 0 || l.local.ip == lip) {
            if ((l.flags & kFReusePort) && except && (except->flags & kFReusePort) && same_owner(l, *except)) continue;
            return true;
        }
    }
    return false;
}

int StackImpl::pick_port(Sock &s, uint32_t rip, uint16_t rport)
{
    const uint32_t lo = cfg_.ephemeral_lo, span = uint32_t(cfg_.ephemeral_hi) - lo + 1;
    for (uint32_t tries = 0; tries < span; tries++) {
        uint16_t p = next_ephemeral_;
        next_ephemeral_ = uint16_t(p >= cfg_.ephemeral_hi ? lo : p + 1);
        if (cfg_.steer && cfg_.steer(cfg_.ip, p, rip, rport, cfg_.steer_arg) != cfg_.engine) continue;
        if (port_in_use(0, p, nullptr)) continue;
        if (rip) {
            FlowKey k{cfg_.ip, rip, p, rport};
            if (flows_.lookup(k)) continue;
        }
        s.local.port = p;
        return 0;
    }
    return -EADDRNOTAVAIL;
}

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
        s->local.port = local.port;
    }
    s->local.ip = local.ip;
    s->flags |= kFBound;
    return 0;
}

int StackImpl::listen(SockId id, int backlog)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->state == TcpState::kListen) {
        s->backlog = uint32_t(std::clamp(backlog, 1, 65535));
        return 0;
    }
    if (s->state != TcpState::kClosed || (s->flags & kFUserClosed)) return -EINVAL;
    if (!(s->flags & kFBound)) {
        if (int rc = bind(id, Endpoint{0, 0}); rc != 0) return rc;
    }
    if (port_in_use(s->local.ip, s->local.port, s)) return -EADDRINUSE;
    s->backlog = uint32_t(std::clamp(backlog, 1, 65535));
    s->state = TcpState::kListen;
    listeners_.push_back(s->index);
    return 0;
}

int64_t StackImpl::accept(SockId id, uint64_t user)
{
    Sock *l = lookup_id(id);
    if (!l) return -EBADF;
    if (l->state != TcpState::kListen) return -EINVAL;
    if (l->accept_head == UINT32_MAX) return -EAGAIN;
    Sock &c = socks_[l->accept_head];
    l->accept_head = c.queue_next;
    if (l->accept_head == UINT32_MAX) l->accept_tail = UINT32_MAX;
    l->accept_len--;
    c.queue_next = UINT32_MAX;
    c.parent = UINT32_MAX;
    c.user = user;
    c.flags |= kFAccepted;
    // Whatever happened before the accept is reported now.
    uint32_t bits = kEvWritable;
    if (c.rx_readable()) bits |= kEvReadable;
    if (c.flags & kFFinReceived) bits |= kEvPeerClosed | kEvReadable;
    if (c.state == TcpState::kClosed) bits |= c.error == ECONNRESET ? kEvReset : kEvError;
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
    if (remote.ip == 0 || remote.port == 0) return -EINVAL;
    if (remote.ip == 0xffffffffu || (remote.ip >> 28) == 14) return -ENETUNREACH; // broadcast, multicast
    if (now_ns > now_ns_) now_ns_ = now_ns;
    const uint32_t hop = route(remote.ip);
    if (hop == 0) return -ENETUNREACH;
    s->local.ip = cfg_.ip;
    if (s->flags & kFBound) {
        if (flows_.lookup(FlowKey{cfg_.ip, remote.ip, s->local.port, remote.port})) return -EADDRINUSE;
    } else if (int rc = pick_port(*s, remote.ip, remote.port); rc != 0) {
        return rc;
    }
    if (!attach_rings(*s, s->user)) return -ENOBUFS;
    s->remote = remote;
    s->next_hop = hop;
    link_flow(*s, FlowKey{cfg_.ip, remote.ip, s->local.port, remote.port});
    s->iss = isn_generate(cfg_.isn_secret, s->flow.key, now_ns_);
    s->snd_una = s->snd_nxt = s->snd_max = s->snd_sml = s->iss;
    s->flags |= kFAccepted;
    conn_init(*s);
    build_template(*s);
    s->state = TcpState::kSynSent;
    stats_.tcp_active_opens++;
    s->first_rtx_ns = 0;
    send_segment(*s, s->iss, 0, wire::kSyn, false);
    s->snd_nxt = s->snd_max = s->iss + 1;
    s->rtt_start_ns = now_ns_;
    s->rtt_seq = s->snd_nxt;
    s->last_recv_ns = now_ns_;
    arm_rtx(*s);
    flush_tx();
    return 0;
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
        flush_tx();
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
        if (s->rx_readable() || s->linger_sec == 0) {
            s->flags &= ~kFUserClosed;
            return abort(id);
        }
        s->flags |= kFFinQueued;
        s->flags |= kFRdShut;
        want_output(*s);
        flush_output();
        flush_tx();
        break;
    }
    return 0;
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
        send_raw(s->local.ip, s->local.port, s->remote.ip, s->remote.port, s->snd_max, 0, wire::kRst, 0,
                 nullptr, 0);
        stats_.tcp_resets_out++;
        break;
    default:
        break;
    }
    sock_free(*s);
    flush_tx();
    return 0;
}

void StackImpl::abort_children(Sock &l)
{
    for (Sock &c : socks_) {
        if (!c.used || c.parent != l.index) continue;
        if (c.state != TcpState::kClosed) {
            send_raw(c.local.ip, c.local.port, c.remote.ip, c.remote.port, c.snd_max, 0, wire::kRst, 0, nullptr, 0);
            stats_.tcp_resets_out++;
        }
        sock_free(c);
    }
    l.accept_head = l.accept_tail = UINT32_MAX;
    l.accept_len = l.syn_queue_len = 0;
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
        if (v) want_output(*s);
        break;
    case SockOpt::kCork:
        flag(kFCork);
        if (!v) want_output(*s);
        break;
    case SockOpt::kKeepAlive:
        flag(kFKeepAlive);
        arm_keepalive(*s);
        break;
    case SockOpt::kKeepIdleSec:
        if (v < 1 || v > 32767) return -EINVAL;
        s->keep_idle_ns = uint64_t(v) * 1'000'000'000ull;
        arm_keepalive(*s);
        break;
    case SockOpt::kKeepIntvlSec:
        if (v < 1 || v > 32767) return -EINVAL;
        s->keep_intvl_ns = uint64_t(v) * 1'000'000'000ull;
        break;
    case SockOpt::kKeepCnt:
        if (v < 1 || v > 127) return -EINVAL;
        s->keep_cnt = uint32_t(v);
        break;
    case SockOpt::kMaxSeg:
        if (v != 0 && (v < 88 || v > 65535)) return -EINVAL;
        s->user_mss = uint32_t(v);
        if (s->state != TcpState::kClosed && s->state != TcpState::kListen) update_mss(*s);
        break;
    case SockOpt::kUserTimeoutMs:
        if (v < 0) return -EINVAL;
        s->user_timeout_ns = uint64_t(v) * 1'000'000ull;
        break;
    case SockOpt::kLingerSec:
        if (v < -1 || v > 65535) return -EINVAL;
        s->linger_sec = int32_t(v);
        break;
    case SockOpt::kReuseAddr:
        flag(kFReuseAddr);
        break;
    case SockOpt::kReusePort:
        flag(kFReusePort);
        break;
    case SockOpt::kTos:
        if (v < 0 || v > 255) return -EINVAL;
        s->tos = uint8_t(v & 0xfc);
        if (s->flags & kFHasRings) build_template(*s);
        break;
    case SockOpt::kRcvLowat:
        if (v < 1) return -EINVAL;
        s->rcv_lowat = uint32_t(std::min<int64_t>(v, INT32_MAX));
        break;
    default:
        return -ENOPROTOOPT;
    }
    flush_output();
    flush_tx();
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
    case SockOpt::kKeepIdleSec: *v = int64_t(s->keep_idle_ns / 1'000'000'000ull); break;
    case SockOpt::kKeepIntvlSec: *v = int64_t(s->keep_intvl_ns / 1'000'000'000ull); break;
    case SockOpt::kKeepCnt: *v = s->keep_cnt; break;
    case SockOpt::kMaxSeg: *v = s->state == TcpState::kClosed || s->state == TcpState::kListen
                                    ? (s->user_mss ? s->user_mss : 536) : s->mss;
        break;
    case SockOpt::kUserTimeoutMs: *v = int64_t(s->user_timeout_ns / 1'000'000ull); break;
    case SockOpt::kLingerSec: *v = s->linger_sec; break;
    case SockOpt::kReuseAddr: *v = (s->flags & kFReuseAddr) != 0; break;
    case SockOpt::kReusePort: *v = (s->flags & kFReusePort) != 0; break;
    case SockOpt::kTos: *v = s->tos; break;
    case SockOpt::kRcvLowat: *v = s->rcv_lowat; break;
    default: return -ENOPROTOOPT;
    }
    return 0;
}

static void fill_info(const Sock &s, SockInfo *o)
{
    *o = SockInfo{};
    o->state = s.state;
    o->local = s.local;
    o->remote = s.remote;
    o->rx_readable = s.rx_readable();
    o->tx_space = s.tx_free();
    o->tx_unacked = s.snd_max - s.snd_una;
    o->error = s.error;
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
    o->total_retransmits = s.total_retransmits;
    o->bytes_in = s.bytes_in;
    o->bytes_out = s.bytes_out;
    o->segs_in = s.segs_in;
    o->segs_out = s.segs_out;
    o->ooo_frames = s.ooo.frames();
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
    if (Sock *s = lookup_id(id)) s->user = user;
}

void StackImpl::for_each_socket(void (*fn)(SockId, const SockInfo &, uint64_t, void *), void *arg) const
{
    for (const Sock &s : socks_) {
        if (!s.used) continue;
        SockInfo in;
        fill_info(s, &in);
        fn(id_of(s), in, s.user, arg);
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

int StackImpl::rx_view(SockId id, RingSpan *out) const
{
    const Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (!out) return -EINVAL;
    *out = RingSpan{{nullptr, nullptr}, {0, 0}};
    if (!(s->flags & kFHasRings)) return s->state == TcpState::kListen ? -EINVAL : 0;
    ring_span(s->rx, s->rx_mask, s->rx_head, s->rx_readable(), out);
    return 0;
}

int StackImpl::rx_consume(SockId id, uint32_t n)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (n > s->rx_readable()) return -EINVAL;
    if (n == 0) return 0;
    const uint32_t before = rcv_window(*s);
    s->rx_head += n;
    // Window update (RFC 9293 3.8.6.2.2 / RFC 1122 4.2.3.3): tell the peer
    // once the window has opened by two segments or half the buffer.
    const uint32_t after = rcv_window(*s);
    const uint32_t adv = s->rcv_adv - s->rcv_nxt;
    if (s->state == TcpState::kEstablished || s->state == TcpState::kFinWait1 || s->state == TcpState::kFinWait2) {
        if (after > adv && (after - adv >= 2 * s->peer_mss || after - adv >= (s->rx_mask + 1) / 2) &&
            after > before) {
            ack_now(*s);
            flush_output();
            flush_tx();
        }
    }
    return 0;
}

int StackImpl::tx_view(SockId id, RingSpan *out) const
{
    const Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (!out) return -EINVAL;
    *out = RingSpan{{nullptr, nullptr}, {0, 0}};
    if (s->error) return -s->error;
    if (s->flags & kFFinQueued) return -EPIPE;
    if (!(s->flags & kFHasRings)) return s->state == TcpState::kClosed ? -ENOTCONN : -EINVAL;
    ring_span(s->tx, s->tx_mask, s->tx_tail, s->tx_free(), out);
    return 0;
}

int StackImpl::tx_commit(SockId id, uint32_t n, bool more)
{
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->error) return -s->error;
    if (s->flags & kFFinQueued) return -EPIPE;
    if (!(s->flags & kFHasRings)) return -ENOTCONN;
    if (n > s->tx_free()) return -EINVAL;
    s->tx_tail += n;
    if (more) s->flags |= kFMore;
    else s->flags &= ~kFMore;
    if (n && (s->state == TcpState::kEstablished || s->state == TcpState::kCloseWait)) {
        tcp_output(*s);
        flush_tx();
    }
    return 0;
}

int64_t StackImpl::send(SockId id, const void *data, size_t len)
{
    RingSpan sp;
    if (int rc = tx_view(id, &sp); rc != 0) return rc;
    const auto *src = static_cast<const uint8_t *>(data);
    size_t done = 0;
    for (int i = 0; i < 2 && done < len; i++) {
        const size_t k = std::min<size_t>(sp.n[i], len - done);
        std::memcpy(sp.p[i], src + done, k);
        done += k;
    }
    if (done == 0) return len == 0 ? 0 : -EAGAIN;
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
    if (s->error) return -s->error;
    return len == 0 ? 0 : -EAGAIN;
}

// ---- poll ------------------------------------------------------------------

void StackImpl::poll(uint64_t now_ns)
{
    if (now_ns > now_ns_) now_ns_ = now_ns;
    if (copies_in_flight()) {
        reap_copies(false);
        flush_rx_done();
    }
    wheel_.advance(now_ns_, [this](Timer *t) { timer_fire(t); });
    if (now_ns_ >= arp_next_expire_ns_) arp_expire();
    flush_output();
    flush_tx();
}

uint64_t StackImpl::next_deadline_ns() const
{
    uint64_t d = wheel_.next_due_ns();
    if (!arp_pending_.empty()) d = std::min(d, arp_next_expire_ns_);
    if (!flush_list_.empty() || tx_n_) d = now_ns_;
    return d;
}

} // namespace mars

namespace mars {

int StackImpl::set_receive_pipeline(uint32_t strands, bool prefetch)
{
    if (strands == 0 || strands > StackConfig::kMaxStrands) return -EINVAL;
    cfg_.strands = strands;
    cfg_.prefetch = prefetch;
    stats_.strands = strands_ = strands;
    prefetch_ = prefetch;
    return 0;
}

void StackImpl::set_copy_engine(CopyEngine *engine, uint32_t threshold)
{
    if (copies_in_flight()) reap_copies(true);
    flush_rx_done();
    cfg_.copy_engine = copy_ = engine;
    cfg_.copy_threshold = copy_threshold_ = threshold;
    if (copy_ && pending_.empty()) pending_.resize(kMaxPendingCopies); // setup, not the packet path
}

} // namespace mars
