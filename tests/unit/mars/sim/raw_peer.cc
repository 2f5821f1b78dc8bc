// tests/unit/mars/sim/raw_peer.cc: TEST FIXTURE. See raw_peer.h.
#include "raw_peer.h"

#include <algorithm>

#include <cerrno>
#include <stdexcept>

namespace mars::sim {

RawPeer::RawPeer() : RawPeer(Options{}) {}

RawPeer::RawPeer(const Options &o) : opt_(o), pool_(o.pool_frames)
{
    stack_mac = o.stack.mac;
    stack_ip = o.stack.ip;
    rings_ = std::make_unique<RingPool>(o.provider ? 0 : o.ring_slots, o.stack.tcp.rcvbuf, o.stack.tcp.sndbuf);
    port_ = std::make_unique<SimPort>(pool_, [this](const PacketRef &f) { on_transmit(f); }, o.offloads);
    start();
}

RawPeer::~RawPeer() { stack_.reset(); }

void RawPeer::start()
{
    if (stack_) {
        stack_->reset();
    } else {
        std::string err;
        stack_ = Stack::create(opt_.stack, *port_, opt_.provider ? *opt_.provider : static_cast<BufferProvider &>(*rings_), &err);
        if (!stack_) throw std::runtime_error("Stack::create failed: " + err);
    }
    if (opt_.introduce) {
        inject(build_arp(ArpSpec{peer_mac, MacAddr{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}, 1, peer_mac, MacAddr{}, peer_ip, stack_ip}));
        take(); // the stack's reply, and anything it announced
    }
}

void RawPeer::restart()
{
    now = kStartNs;
    out_.clear();
    pending_.clear();
    events_.clear();
    stalled_ = false;
    digest_ = kFnvOffset;
    start();
}

void RawPeer::on_transmit(const PacketRef &f)
{
    if (opt_.digest) {
        uint64_t h = digest_;
        for (uint16_t i = 0; i < f.len; i++) h = (h ^ f.data[i]) * 0x100000001b3ull;
        digest_ = (h ^ f.len) * 0x100000001b3ull; // frame boundaries count too
    }
    if (opt_.keep_raw) raw_.emplace_back(f.data, f.data + f.len);
    if (opt_.capture) {
        Parsed p;
        parse_frame(f.data, f.len, &p);
        // The peer answers for every address but the stack's own (benchmarks
        // use many peer addresses behind the one peer MAC).
        if (opt_.auto_arp && p.is_arp && p.arp_op == 1 && p.arp_tpa != stack_ip) {
            pending_.push_back(build_arp(ArpSpec{peer_mac, p.arp_sha, 2, peer_mac, p.arp_sha, p.arp_tpa, p.arp_spa}));
        } else {
            out_.push_back(std::move(p));
        }
    }
    pool_.put(f);
}

void RawPeer::drain_events()
{
    SockEvent evs[64];
    uint16_t n;
    int rounds = 0;
    while ((n = stack_->events(evs, 64)) > 0 && rounds++ < 1000) {
        for (uint16_t i = 0; i < n; i++) events_[evs[i].sock] |= evs[i].bits;
    }
}

void RawPeer::drain_pending()
{
    // ARP replies queued while the stack was transmitting (never re-enter it).
    for (int rounds = 0; !pending_.empty() && rounds < 16; rounds++) {
        auto frames = std::move(pending_);
        pending_.clear();
        input_only(frames);
        stack_->poll(now);
    }
    drain_events();
}

void RawPeer::input_only(const std::vector<std::vector<uint8_t>> &frames, uint32_t flags)
{
    // Each frame in a block of its own exact size: AddressSanitizer then
    // catches any read past the end of what was received.
    for (const auto &fr : frames) {
        PacketRef p = pool_.get_exact(fr.data(), fr.size());
        p.flags = flags;
        stack_->input(&p, 1, now);
    }
}

void RawPeer::input_burst(const std::vector<std::vector<uint8_t>> &frames, uint32_t flags)
{
    constexpr size_t kMax = 64;
    for (size_t at = 0; at < frames.size(); at += kMax) {
        PacketRef burst[kMax];
        const size_t n = std::min(kMax, frames.size() - at);
        for (size_t i = 0; i < n; i++) {
            burst[i] = pool_.get_exact(frames[at + i].data(), frames[at + i].size());
            burst[i].flags = flags;
        }
        stack_->input(burst, uint16_t(n), now);
    }
}

void RawPeer::inject(const std::vector<uint8_t> &frame, uint32_t flags)
{
    input_only({frame}, flags);
    poll();
}

void RawPeer::poll()
{
    stack_->poll(now);
    drain_pending();
}

void RawPeer::advance(uint64_t ns)
{
    const uint64_t target = now + ns;
    int same = 0;
    for (int i = 0; i < 10'000'000; i++) {
        uint64_t d = stack_->next_deadline_ns();
        if (d > target) break;
        if (d <= now) {
            if (++same > 1000) {
                stalled_ = true;
                break;
            }
        } else {
            same = 0;
            now = d;
        }
        poll();
    }
    now = target;
    poll();
}

std::vector<Parsed> RawPeer::take()
{
    auto v = std::move(out_);
    out_.clear();
    return v;
}

std::vector<Parsed> RawPeer::take_tcp()
{
    std::vector<Parsed> v, rest;
    for (auto &p : out_) (p.is_tcp ? v : rest).push_back(std::move(p));
    out_ = std::move(rest);
    return v;
}

uint32_t RawPeer::events_of(SockId s) const
{
    auto it = events_.find(s);
    return it == events_.end() ? 0 : it->second;
}

std::map<SockId, uint32_t> RawPeer::take_events()
{
    auto e = std::move(events_);
    events_.clear();
    return e;
}

TcpSpec RawPeer::seg(const Conn &c, uint8_t flags, std::vector<uint8_t> payload) const
{
    TcpSpec s;
    s.src_mac = peer_mac;
    s.dst_mac = stack_mac;
    s.src_ip = peer_ip;
    s.dst_ip = stack_ip;
    s.sport = c.peer_port;
    s.dport = c.stack_port;
    s.seq = c.peer_nxt;
    s.ack = (flags & kAck) ? c.stack_nxt : 0;
    s.flags = flags;
    s.window = c.window;
    if (c.ts) s.opts.ts = {c.peer_tsval + uint32_t(now / 1'000'000), c.stack_tsval};
    s.payload = std::move(payload);
    return s;
}

void RawPeer::send(Conn &c, uint8_t flags, std::vector<uint8_t> payload)
{
    TcpSpec s = seg(c, flags, std::move(payload));
    c.peer_nxt += uint32_t(s.payload.size()) + ((flags & kSyn) ? 1 : 0) + ((flags & kFin) ? 1 : 0);
    inject(s);
}

void RawPeer::observe(Conn &c, const Parsed &p) const
{
    if (!p.is_tcp || p.dport != c.peer_port || p.sport != c.stack_port) return;
    uint32_t end = p.seq + p.seg_len();
    // A SYN starts the stack's sequence space (its ISN may be anywhere
    // relative to a zero-initialised Conn); after that, only forward.
    if (p.has(kSyn) || int32_t(end - c.stack_nxt) > 0) c.stack_nxt = end;
    if (p.opts.ts) c.stack_tsval = p.opts.ts->first;
    c.stack_window = p.window;
}

std::vector<Parsed> RawPeer::take_conn(Conn &c)
{
    std::vector<Parsed> mine, rest;
    for (auto &p : out_) {
        bool is_mine = p.is_tcp && p.dport == c.peer_port && p.sport == c.stack_port;
        if (is_mine) observe(c, p);
        (is_mine ? mine : rest).push_back(std::move(p));
    }
    out_ = std::move(rest);
    return mine;
}

SockId RawPeer::listen(uint16_t port, int backlog, uint64_t user)
{
    int64_t s = stack_->open(user);
    if (s < 0) return kNoSock;
    SockId id = SockId(s);
    if (stack_->bind(id, Endpoint{stack_ip, port}) != 0 || stack_->listen(id, backlog) != 0) return kNoSock;
    return id;
}

TcpOptions RawPeer::full_syn_options(uint32_t tsval)
{
    TcpOptions o;
    o.mss = 1460;
    o.sack_permitted = true;
    o.ts = {tsval, 0};
    o.wscale = 7;
    return o;
}

SockId RawPeer::open_passive(SockId listener, uint16_t stack_port, uint16_t peer_port, Conn *c, const TcpOptions &syn_opts,
                             std::string *why)
{
    c->peer_port = peer_port;
    c->stack_port = stack_port;
    c->peer_nxt = 0x10000000u + peer_port * 7919u;
    TcpSpec syn = seg(*c, kSyn);
    syn.opts = syn_opts;
    if (syn_opts.ts) syn.opts.ts = {c->peer_tsval + uint32_t(now / 1'000'000), 0};
    c->peer_nxt++;
    inject(syn);
    std::vector<Parsed> got = take_conn(*c);
    if (got.size() != 1 || !got[0].has(kSyn | kAck) || got[0].ack != c->peer_nxt) {
        *why = "expected one SYN-ACK acking " + std::to_string(c->peer_nxt) + ", got " + std::to_string(got.size()) +
               " frames" + (got.empty() ? "" : ": " + got[0].describe());
        return kNoSock;
    }
    const Parsed &sa = got[0];
    c->ts = syn_opts.ts.has_value() && sa.opts.ts.has_value();
    c->stack_wscale = sa.opts.wscale.value_or(0);
    c->stack_mss = sa.opts.mss.value_or(536);
    if (!syn_opts.wscale) c->stack_wscale = 0;
    if (opt_.handshake_rtt_ns) advance(opt_.handshake_rtt_ns);
    send(*c, kAck);
    int64_t a = stack_->accept(listener, 100 + peer_port);
    if (a < 0) {
        *why = "accept failed: " + std::to_string(a);
        return kNoSock;
    }
    c->sock = SockId(a);
    return c->sock;
}

SockId RawPeer::open_active(uint16_t peer_port, Conn *c, const TcpOptions &synack_opts, std::string *why)
{
    int64_t s = stack_->open(200 + peer_port);
    if (s < 0) {
        *why = "open failed";
        return kNoSock;
    }
    c->sock = SockId(s);
    c->peer_port = peer_port;
    int rc = stack_->connect(c->sock, Endpoint{peer_ip, peer_port}, now);
    if (rc != 0) {
        *why = "connect failed: " + std::to_string(rc);
        return kNoSock;
    }
    poll();
    std::vector<Parsed> got = take_tcp();
    if (got.size() != 1 || got[0].flags != kSyn || got[0].dport != peer_port) {
        *why = "expected one SYN, got " + std::to_string(got.size()) + (got.empty() ? "" : ": " + got[0].describe());
        return kNoSock;
    }
    const Parsed &syn = got[0];
    c->stack_port = syn.sport;
    c->stack_nxt = syn.seq + 1;
    c->ts = synack_opts.ts.has_value() && syn.opts.ts.has_value();
    if (syn.opts.ts) c->stack_tsval = syn.opts.ts->first;
    c->stack_wscale = synack_opts.wscale ? syn.opts.wscale.value_or(0) : 0;
    c->stack_mss = syn.opts.mss.value_or(536);
    c->peer_nxt = 0x20000000u + peer_port * 104729u;
    TcpSpec sa = seg(*c, kSyn | kAck);
    sa.opts = synack_opts;
    if (synack_opts.ts) sa.opts.ts = {c->peer_tsval + uint32_t(now / 1'000'000), c->stack_tsval};
    c->peer_nxt++;
    inject(sa);
    std::vector<Parsed> acks = take_conn(*c);
    if (acks.empty() || !acks[0].has(kAck) || acks[0].ack != c->peer_nxt) {
        *why = "expected the ACK of our SYN-ACK, got " + std::to_string(acks.size()) + " frames" +
               (acks.empty() ? "" : ": " + acks[0].describe());
        return kNoSock;
    }
    if (!(events_of(c->sock) & kEvConnected)) {
        *why = "no kEvConnected";
        return kNoSock;
    }
    return c->sock;
}

} // namespace mars::sim
