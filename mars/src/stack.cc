// stack.cc: creating a stack, the socket table, events and the poll loop.
// The socket API is in socket_api.cc; the protocol work in arp.cc, ipv4.cc
// and the tcp_*.cc files.
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
    : rx::Receiver(io), tcp::Env(config, io, buffers, *this),
      udp_(udp::UdpEnv{cfg_, now_ns_, offloads_, stats_, buffers_, link_, ip_, router_, ip6_, nd_})
{
    link_.pass_unclaimed = cfg_.pass_unclaimed; // sharing the address (mars/README.md "Sharing the port")
    ip_.set_datagram_upper(&udp_);               // UDP and IGMP go to the UDP component
    tcp6_ = &tcp6_part_;                         // what IPv6 connections ask of IPv6 (tcp/tcp6.h)
}

StackImpl::~StackImpl() { release_buffers(); }

void StackImpl::release_buffers()
{
    // Give every buffer back: frames waiting for ARP or in the transmit
    // burst, out-of-order frames, ring memory.
    if (copies_in_flight()) reap_copies(true);
    flush_rx_done();
    arp_.discard_waiting();
    nd_.discard_waiting();
    link_.discard();
    for (Sock &s : socks_) {
        if (!s.used) continue;
        s.rec.ooo.clear(ooo_pool_, io_);
        release_rings(s);
    }
    release_tx_drain();
    udp_.release_all();
}

// The stack goes away or starts over: its owner has stopped the port, so no
// frame points into a send ring any more.
void StackImpl::release_tx_drain()
{
    for (const TxDrain &d : tx_drain_)
        if (d.has_mem) buffers_.reclaim(d.user, d.mem);
    tx_drain_.clear();
    tx_ref_socks_.clear();
}

// Transmit by reference: the port let go of frames since the last poll.
// Sockets whose send ring grew for the application hear kEvWritable; ring
// memory and slots held back for frames in flight go back once drained.
void StackImpl::poll_tx_refs()
{
    for (size_t i = 0; i < tx_ref_socks_.size();) {
        Sock &s = socks_[tx_ref_socks_[i]];
        const uint32_t head = s.tx_refs.app_head(s.tx_head);
        if (s.used && (s.flags & kFHasRings) && head != s.tx_refs.reported) {
            s.tx_refs.reported = head;
            raise(s, kEvWritable);
        }
        if (s.tx_refs.any()) {
            i++;
            continue;
        }
        s.tx_refs.listed = false;
        tx_ref_socks_[i] = tx_ref_socks_.back();
        tx_ref_socks_.pop_back();
    }
    for (size_t i = 0; i < tx_drain_.size();) {
        const TxDrain d = tx_drain_[i];
        if (socks_[d.sock].tx_refs.any()) {
            i++;
            continue;
        }
        if (d.has_mem) buffers_.reclaim(d.user, d.mem);
        if (d.slot) socks_.release(d.sock);
        tx_drain_[i] = tx_drain_.back();
        tx_drain_.pop_back();
    }
}

void StackImpl::reset()
{
    release_buffers();
    // Tables keep their memory and are emptied; everything else is set as
    // init() sets it (start_state() is the part they share).
    flows_.clear();
    flows6_.clear();
    wheel_.clear(0);
    ooo_pool_.clear();
    listeners_.clear();
    event_list_.clear();
    closed_events_.clear();
    flush_list_.clear();
    arp_.clear();
    nd_.clear();
    ip6_.clear();
    now_ns_ = 0;
    stats_ = StackStats{};
    rtx_run_segments_ = 0;
    rtx_tso_frames_ = 0;
    event_pos_ = 0;
    rx_clear();
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
    if (t.rcvbuf_max > (1u << 30)) return fail("tcp.rcvbuf_max must be at most 1 GiB");
    if (!power_of_two(t.sndbuf) || t.sndbuf < 4096 || t.sndbuf > (1u << 30))
        return fail("tcp.sndbuf must be a power of two from 4096 to 1 GiB");
    if (c.ephemeral_lo == 0 || c.ephemeral_lo > c.ephemeral_hi) return fail("ephemeral port range is empty");
    if (c.ooo_pool_frames == 0) return fail("ooo_pool_frames must be at least 1");
    if (t.rto_min_ns == 0 || t.rto_min_ns > t.rto_max_ns || t.rto_initial_ns == 0)
        return fail("rto_min_ns must be > 0 and <= rto_max_ns, rto_initial_ns > 0");
    if (t.syn_backlog == 0) return fail("syn_backlog must be at least 1");
    if (c.arp_probes == 0 || c.arp_probes > 255) return fail("arp_probes must be 1..255 (Linux's mcast_solicit: 3)");
    if (c.arp_retrans_ns < 1'000'000) return fail("arp_retrans_ns must be at least 1 ms (Linux's retrans_time: 1 s)");
    if (c.n_addr6 < 0 || c.n_addr6 > StackConfig::kMaxAddr6) return fail("n_addr6 must be 0..8 (IPv6 addresses of the port)");
    for (int i = 0; i < c.n_addr6; i++) {
        const uint8_t *a = c.addr6[i].addr.b;
        if (ip6::is_unspecified(a) || ip6::is_multicast(a) || ip6::is_link_local(a) || (a[0] == 0 && a[15] == 1 &&
            std::all_of(a + 1, a + 15, [](uint8_t b) { return b == 0; })))
            return fail("addr6: an IPv6 address must be a unicast global or unique-local one (not ::, ::1, fe80::/10 "
                        "or multicast; the link-local address comes from the MAC)");
        if (c.addr6[i].prefix == 0 || c.addr6[i].prefix > 128) return fail("addr6: the prefix length must be 1..128");
    }
    if (c.n_routes6 < 0 || c.n_routes6 > StackConfig::kMaxRoutes) return fail("n_routes6 must be 0..16");
    for (int i = 0; i < c.n_routes6; i++) {
        const Route6 &r = c.routes6[i];
        if (r.prefix > 128) return fail("routes6: the prefix length must be 0..128");
        if (ip6::is_multicast(r.dest.b)) return fail("routes6: a destination must not be multicast");
        const uint8_t *g = r.gateway.b;
        if (ip6::is_unspecified(g)) continue; // on-link
        bool own = false, on_link = ip6::is_link_local(g);
        for (int j = 0; j < c.n_addr6; j++) {
            own |= std::memcmp(c.addr6[j].addr.b, g, 16) == 0;
            on_link |= ip6::prefix_match(c.addr6[j].addr.b, g, c.addr6[j].prefix);
        }
        if (ip6::is_multicast(g) || own || !on_link)
            return fail("routes6: a gateway must be a unicast neighbour on the port's link (link-local, or in one of "
                        "its addr6 prefixes), not one of its own addresses");
    }
    if (c.hop_limit6 == 0) return fail("hop_limit6 must be 1..255 (the hop limit of TCP over IPv6; Linux: 64)");
    if (c.strands == 0 || c.strands > StackConfig::kMaxStrands)
        return fail("strands must be 1..64 (1: run every frame to completion)");
    if (c.copy_engine && c.copy_drain_polls == 0) return fail("copy_drain_polls must be at least 1");

    offloads_ = io_.offloads();
    if (!socks_.init(c.max_sockets)) return fail("cannot allocate the socket table");
    conns_ = socks_.data(); // never moves after this
    event_list_.reserve(c.max_sockets);
    closed_events_.reserve(c.max_sockets);
    flush_list_.reserve(c.max_sockets);
    // Transmit by reference: a socket is listed once while the port holds
    // its frames (run_fill_ref, on the packet path), and holds at most two
    // drain entries (its ring memory, its slot): no growth after this.
    tx_ref_socks_.reserve(c.max_sockets);
    tx_drain_.reserve(2 * size_t(c.max_sockets));
    if (!flows_.init(c.max_sockets)) return fail("cannot allocate the connection table");
    if (!flows6_.init(c.max_sockets)) return fail("cannot allocate the IPv6 connection table");
    if (!wheel_.init(kWheelSlots, kTickNs, 0)) return fail("cannot allocate the timer wheel");
    if (!ooo_pool_.init(c.ooo_pool_frames)) return fail("cannot allocate the out-of-order pool");
    udp_.init();
    ooo_window_cap_ = c.ooo_frames_per_conn ? uint32_t(std::min<uint64_t>(uint64_t(c.ooo_frames_per_conn) * (c.mtu - 40), UINT32_MAX))
                                           : UINT32_MAX; // no queue: nothing to protect
    // A full segment's payload: timestamps take 12 bytes of each (a share in
    // frames must hold the window in the segments a peer really sends).
    ooo_seg_bytes_ = c.mtu - 40u - (c.tcp.timestamps ? 12u : 0u);
    start_state();
    return true;
}

void StackImpl::start_state()
{
    const StackConfig &c = cfg_;
    stats_.strands = c.strands;
    prefetch_ = c.prefetch;
    rx_setup(c); // strands, copy engine, our addresses as they appear in frames
    socks_.reset(); // blocks are made again as they are first used
    next_ephemeral_ = uint16_t(c.ephemeral_lo + (c.isn_secret[0] % (c.ephemeral_hi - c.ephemeral_lo + 1u)));
}

// ---- socket table ------------------------------------------------------

Sock *StackImpl::lookup_id(SockId id) const
{
    const uint32_t i = id & kIndexMask;
    if (i >= socks_.made()) return nullptr;
    Sock *s = const_cast<Sock *>(&socks_[i]);
    if (!s->used || s->gen != (id >> kIndexBits)) return nullptr;
    return s;
}

Sock *StackImpl::sock_alloc(uint64_t user)
{
    Sock *made = socks_.alloc(kFInEvents);
    if (!made) return nullptr;
    Sock &s = *made;
    s.used = true;
    s.app.user = user;
    const TcpConfig &t = cfg_.tcp;
    s.app.rcv_buf = t.rcvbuf;
    s.app.ooo_share = cfg_.ooo_frames_per_conn;
    s.app.ooo_cap = ooo_window_cap_;
    s.app.snd_buf = t.sndbuf; // until the rings come (attach_rings: the ring's size)
    s.app.keep_idle_ns = t.keepalive_idle_ns;
    s.app.keep_intvl_ns = t.keepalive_intvl_ns;
    s.app.keep_cnt = t.keepalive_probes;
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
    if (!s.rec.ooo.empty()) {
        s.rec.ooo.clear(ooo_pool_, io_);
        stats_.ooo_frames_used = ooo_pool_.used();
    }
}

void StackImpl::sock_free(Sock &s)
{
    quiesce(s);
    release_rings(s);
    detach(s);
    s.lst.parent = UINT32_MAX;
    if (s.state == TcpState::kListen) {
        // A listener not in the list must not take another with it (erase(end)
        // would be undefined; libstdc++ drops the last listener).
        auto it = std::find(listeners_.begin(), listeners_.end(), s.index);
        if (it != listeners_.end()) listeners_.erase(it);
    }
    s.used = false;
    s.state = TcpState::kClosed;
    s.ev_bits = 0;
    s.flags &= kFInEvents;
    s.gen = (s.gen + 1) & ((1u << (32 - kIndexBits)) - 1);
    if (s.gen == 0) s.gen = 1;
    stats_.conns_open--;
    if (s.tx_refs.any()) {
        // The port still decrements this slot's counters: reuse it later.
        tx_drain_.push_back(TxDrain{s.index, 0, RingMemory{}, false, true});
        return;
    }
    socks_.release(s.index);
}

bool StackImpl::attach_rings(Sock &s, uint64_t user)
{
    RingMemory m;
    if (!buffers_.provide(user, &m)) return false;
    if (!m.rx || !m.tx || !power_of_two(m.rx_size) || !power_of_two(m.tx_size)) {
        buffers_.reclaim(user, m);
        return false;
    }
    s.app.mem = m;
    s.rx = m.rx;
    s.rx_mask = m.rx_size - 1;
    s.tx = m.tx;
    s.tx_mask = m.tx_size - 1;
    s.app.snd_buf = m.tx_size; // per connection: SO_SNDBUF or the default (the provider's choice)
    s.rx_head = s.rx_tail = 0;
    s.tx_head = s.tx_tail = 0;
    s.flags |= kFHasRings;
    tcp::rcv_space_init(*this, s);
    return true;
}

void StackImpl::release_rings(Sock &s)
{
    if (!(s.flags & kFHasRings)) return;
    if (s.rx_inflight) reap_copies(true); // no engine may write into memory handed back
    s.flags &= ~kFHasRings;
    // Frames the port still reads point into the send ring: the memory (and
    // with it, in eta, the application's mapped region) goes back only once
    // the port has let go of them (poll_tx_refs).
    if (s.tx_refs.any()) tx_drain_.push_back(TxDrain{s.index, s.app.user, s.app.mem, true, false});
    else buffers_.reclaim(s.app.user, s.app.mem);
    s.app.mem = RingMemory{};
    s.rx = s.tx = nullptr;
    s.rx_mask = s.tx_mask = 0;
    s.rx_head = s.rx_tail = s.tx_head = s.tx_tail = 0;
}

void StackImpl::link_flow(Sock &s, const FlowKey &key)
{
    s.flow.key = key;
    s.wire_rip = wire::be32(key.remote_ip);
    s.wire_ports = uint32_t(wire::be16(key.remote_port)) | uint32_t(wire::be16(key.local_port)) << 16;
    flows_.insert(&s.flow);
}

void StackImpl::unlink_flow(Sock &s)
{
    if (s.flow.linked) flows_.remove(&s.flow);
    if (s.v6.flow.linked) flows6_.remove(&s.v6.flow);
}

uint16_t StackImpl::events(SockEvent *out, uint16_t max)
{
    if (event_list_.empty() && closed_events_.empty()) { // the engine asks on every poll
        return udp_.has_events() ? udp_.events(out, max) : 0;
    }
    uint16_t n = 0;
    while (n < max && event_pos_ < event_list_.size()) {
        Sock &s = socks_[event_list_[event_pos_++]];
        s.flags &= ~kFInEvents;
        if (!s.used || !s.ev_bits || (s.flags & kFDetached)) continue;
        // Connections still in a listener's queues belong to the listener.
        if (s.lst.parent != UINT32_MAX) {
            s.ev_bits = 0;
            continue;
        }
        uint32_t bits = s.ev_bits;
        s.ev_bits = 0;
        // Under TCP_NOTSENT_LOWAT "writable" means unsent bytes below the
        // mark, judged now, after this poll's output (the ACK that raised
        // it may have let more go); the next ACK raises it again.
        if ((bits & kEvWritable) && (s.flags & kFHasRings) && s.app.notsent_lowat != UINT32_MAX && !s.tx_room())
            bits &= ~kEvWritable;
        if (bits) out[n++] = SockEvent{id_of(s), bits, s.app.user};
    }
    if (event_pos_ == event_list_.size()) {
        event_list_.clear();
        event_pos_ = 0;
    }
    size_t k = 0;
    while (n < max && k < closed_events_.size()) out[n++] = closed_events_[k++];
    closed_events_.erase(closed_events_.begin(), closed_events_.begin() + long(k));
    if (n < max && udp_.has_events()) n = uint16_t(n + udp_.events(out + n, uint16_t(max - n)));
    return n;
}

// The application's id ends here: kEvClosed goes out with whatever else was
// pending. Connections nobody accepted yet were never visible: no event.
void StackImpl::detach(Sock &s)
{
    if (s.lst.parent != UINT32_MAX || (s.flags & kFDetached)) return;
    closed_events_.push_back(SockEvent{id_of(s), s.ev_bits | kEvClosed, s.app.user});
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
    s.app.user = 0; // the tag named the application's socket, which is gone (for_each_socket shows 0)
    s.gen = (s.gen + 1) & ((1u << (32 - kIndexBits)) - 1); // the old id stops working
    if (s.gen == 0) s.gen = 1;
}

// The connection ended abnormally: reset by the peer, timed out, refused.
void StackImpl::conn_drop(Sock &s, int err, uint32_t ev)
{
    quiesce(s);
    s.state = TcpState::kClosed;
    if (s.lst.parent != UINT32_MAX) {
        Sock &l = socks_[s.lst.parent];
        if (!(s.flags & kFAccepted) && (s.flags & kFHasRings)) {
            // Established and in the accept queue: it stays there, closed
            // with its error, as Linux keeps a reset child in the queue:
            // accept() returns it and reports the error (kEvReset/kEvError;
            // a read then fails ECONNRESET). Before, it was unlinked and a
            // blocking accept() waited for the next connection.
            s.app.error = err;
            return;
        }
        // Still in the SYN queue: nobody knows this connection; it goes away.
        if (l.lst.syn_queue_len) l.lst.syn_queue_len--;
        sock_free(s);
        return;
    }
    s.app.error = err;
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
            if (socks_[i].app.local.port == lport && socks_[i].app.local.ip == want_ip) members++;
        if (members == 0) continue;
        uint32_t pick = members == 1 ? 0 : h % members;
        for (uint32_t i : listeners_)
            if (socks_[i].app.local.port == lport && socks_[i].app.local.ip == want_ip && pick-- == 0) return &socks_[i];
    }
    return nullptr;
}

bool StackImpl::same_owner(const Sock &a, const Sock &b) const
{
    return !cfg_.owner_of || cfg_.owner_of(a.app.user, cfg_.owner_arg) == cfg_.owner_of(b.app.user, cfg_.owner_arg);
}

bool StackImpl::port_in_use(uint32_t lip, uint16_t port, const Sock *except) const
{
    for (uint32_t i : listeners_) {
        const Sock &l = socks_[i];
        // (An IPv6 listener on an address, or IPV6_V6ONLY, takes no IPv4: kNoV4.)
        if (&l == except || l.app.local.port != port || l.app.local.ip == kNoV4) continue;
        if (l.app.local.ip == 0 || lip == 0 || l.app.local.ip == lip) {
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
        s.app.local.port = p;
        return 0;
    }
    return -EADDRNOTAVAIL;
}

// ---- poll ------------------------------------------------------------------

// ARP gave up on next hops (arp.cc): connects whose SYN waits on one fail
// with EHOSTUNREACH, as Linux fails a SYN-SENT socket when the neighbour of
// its queued SYN fails. Other connections keep TCP's own timers (for them
// Linux reports only a soft error). Rare: a walk of the socket table.
void StackImpl::fail_unreachable()
{
    take_local();
    for (size_t i = 0; i < arp_.failed_count(); i++) {
        const uint32_t hop = arp_.failed_at(i);
        for (Sock &s : socks_) {
            if (!s.used || s.state != TcpState::kSynSent || s.next_hop != hop) continue;
            stats_.tcp_connects_unreachable++;
            conn_drop(s, EHOSTUNREACH, kEvError);
        }
    }
    arp_.clear_failed();
}

// Local connections (issue 29, ip/local_loop.h): what the stack sent to its
// own address since the last poll comes back in as received frames, a burst
// at a time, with sharing off: a local SYN for a port without a listener gets
// RST here (the shim then tries the kernel), never the other stack. What this
// input sends to ourselves waits for the next poll.
void StackImpl::take_local()
{
    PacketRef burst[Link::kTxBurst];
    const bool shared = link_.pass_unclaimed;
    link_.pass_unclaimed = false;
    for (uint16_t n; (n = arp_.take_local(burst, Link::kTxBurst)) != 0;) {
        input(burst, n, now_ns_);
        if (n < Link::kTxBurst) break;
    }
    link_.pass_unclaimed = shared;
}

void StackImpl::announce(uint64_t now_ns)
{
    if (now_ns > now_ns_) now_ns_ = now_ns;
    arp_.announce(); // gratuitous ARP: a request for our own address
    nd_.start(now_ns_); // IPv6: DAD, then an unsolicited NA (lone stack; nd.h)
    link_.flush();
}

void StackImpl::poll(uint64_t now_ns)
{
    if (now_ns > now_ns_) now_ns_ = now_ns;
    if (copies_in_flight()) {
        reap_copies(false);
        flush_rx_done();
    }
    wheel_.advance(now_ns_, [this](Timer *t) { tcp::timer_fire(*this, t); });
    if (arp_.poll(now_ns_)) fail_unreachable();
    if (nd_.poll(now_ns_)) fail_unreachable6();
    flush_output();
    link_.flush();
    if (!tx_ref_socks_.empty() || !tx_drain_.empty()) poll_tx_refs();
}

uint64_t StackImpl::next_deadline_ns() const
{
    uint64_t d = wheel_.next_due_ns();
    d = std::min(d, arp_.next_deadline_ns());
    d = std::min(d, nd_.next_deadline_ns());
    if (!flush_list_.empty() || link_.pending()) d = now_ns_;
    return d;
}

} // namespace mars

namespace mars {

int StackImpl::set_receive_pipeline(uint32_t strands, bool prefetch)
{
    if (strands == 0 || strands > StackConfig::kMaxStrands) return -EINVAL;
    cfg_.strands = strands;
    cfg_.prefetch = prefetch;
    stats_.strands = strands;
    set_strands(strands);
    prefetch_ = prefetch;
    return 0;
}

void StackImpl::set_copy_engine(CopyEngine *engine, uint32_t threshold)
{
    cfg_.copy_engine = engine;
    cfg_.copy_threshold = threshold;
    use_copy_engine(engine, threshold); // lets the copies in flight land first
}

// ---- tcp::Env's stack services (tcp/env.h): what the TCP rules ask of the
// socket table and listeners. Never on the per-segment path.
void tcp::Env::conn_drop(Sock &s, int err, uint32_t ev) { static_cast<StackImpl &>(*this).conn_drop(s, err, ev); }
void tcp::Env::conn_closed(Sock &s) { static_cast<StackImpl &>(*this).conn_closed(s); }
void tcp::Env::release_user(Sock &s) { static_cast<StackImpl &>(*this).release_user(s); }
Sock *tcp::Env::find_listener(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport)
{
    return static_cast<StackImpl &>(*this).find_listener(lip, lport, rip, rport);
}
Sock *tcp::Env::sock_alloc(uint64_t user) { return static_cast<StackImpl &>(*this).sock_alloc(user); }
void tcp::Env::sock_free(Sock &s) { static_cast<StackImpl &>(*this).sock_free(s); }
bool tcp::Env::attach_rings(Sock &s, uint64_t user) { return static_cast<StackImpl &>(*this).attach_rings(s, user); }
void tcp::Env::link_flow(Sock &s, const FlowKey &key) { static_cast<StackImpl &>(*this).link_flow(s, key); }
void tcp::Env::link_flow6(Sock &s) { static_cast<StackImpl &>(*this).link_flow6(s); }
Sock *tcp::Env::find_listener6(const Ip6Addr &lip, uint16_t lport, const Ip6Addr &rip, uint16_t rport)
{
    return static_cast<StackImpl &>(*this).find_listener6(lip, lport, rip, rport);
}

} // namespace mars
