// udp/udp.cc: UDP sockets, receive (demux, checks, records), send; the
// IPv6 half (bind6, connect6, send_to6, udp6_input) is udp6.cc.
// Every length is checked against the frame before it is read.
#include "udp/udp.h"

#include "base/checksum.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mars::udp {

using namespace wire;

namespace {

bool power_of_two(uint32_t v) { return v && !(v & (v - 1)); }

// The group's Ethernet address (RFC 1112 6.4): 01:00:5e and the low 23 bits.
void group_mac(uint32_t group, uint8_t *out)
{
    out[0] = 0x01, out[1] = 0x00, out[2] = 0x5e;
    out[3] = uint8_t((group >> 16) & 0x7f), out[4] = uint8_t(group >> 8), out[5] = uint8_t(group);
}

} // namespace

void UdpLayer::init()
{
    std::fill(std::begin(buckets_), std::end(buckets_), UINT32_MAX);
    event_list_.reserve(kMaxSockets);
    closed_events_.reserve(kMaxSockets);
    const uint32_t span = uint32_t(e_.cfg.ephemeral_hi) - e_.cfg.ephemeral_lo + 1u;
    next_ephemeral_ = uint16_t(e_.cfg.ephemeral_lo + (e_.cfg.isn_secret[1] % span));
    hash_key_ = uint32_t(e_.cfg.isn_secret[0] >> 32) ^ 0x5bd1e995u;
    icmp_tokens_ = 50'000; // a full burst
    icmp_last_ns_ = 0;
}

void UdpLayer::release_all()
{
    for (UdpSock &s : socks_)
        if (s.used) e_.buffers.reclaim(s.user, s.mem);
    socks_.clear(); // ids start over as a new stack's (the memory stays)
    free_.clear();
    event_list_.clear();
    closed_events_.clear();
    joined4_.clear();
    joined6_.clear();
    std::fill(std::begin(buckets_), std::end(buckets_), UINT32_MAX);
    init();
}

// ---- ids and events ----------------------------------------------------------

UdpSock *UdpLayer::lookup(SockId id)
{
    return const_cast<UdpSock *>(static_cast<const UdpLayer *>(this)->lookup(id));
}

const UdpSock *UdpLayer::lookup(SockId id) const
{
    if (!is_udp_id(id)) return nullptr;
    const uint32_t i = id & (kMaxSockets - 1);
    if (i >= socks_.size()) return nullptr;
    const UdpSock &s = socks_[i];
    if (!s.used || s.gen != (id >> kIndexBits)) return nullptr;
    return &s;
}

void UdpLayer::raise(UdpSock &s, uint32_t bits)
{
    s.ev_bits |= bits;
    if (!s.in_events) {
        s.in_events = true;
        event_list_.push_back(index_of(s)); // capacity reserved at init
    }
}

uint16_t UdpLayer::events(SockEvent *out, uint16_t max)
{
    uint16_t n = 0;
    size_t k = 0;
    for (; k < event_list_.size() && n < max; k++) {
        UdpSock &s = socks_[event_list_[k]];
        s.in_events = false;
        if (!s.used || !s.ev_bits) continue;
        out[n++] = SockEvent{id_of(s), s.ev_bits, s.user};
        s.ev_bits = 0;
    }
    event_list_.erase(event_list_.begin(), event_list_.begin() + long(k));
    size_t c = 0;
    while (n < max && c < closed_events_.size()) out[n++] = closed_events_[c++];
    closed_events_.erase(closed_events_.begin(), closed_events_.begin() + long(c));
    return n;
}

// ---- sockets -------------------------------------------------------------------

int64_t UdpLayer::open(uint64_t user)
{
    if (free_.empty()) {
        if (socks_.size() >= kMaxSockets || socks_.size() >= e_.cfg.max_sockets) return -EMFILE;
        socks_.emplace_back();
        free_.push_back(uint32_t(socks_.size() - 1));
    }
    RingMemory mem;
    if (!e_.buffers.provide(user, &mem)) return -ENOBUFS;
    if (!mem.rx || !power_of_two(mem.rx_size) || mem.rx_size < 2048) {
        e_.buffers.reclaim(user, mem);
        return -EINVAL;
    }
    const uint32_t i = free_.back();
    free_.pop_back();
    UdpSock &s = socks_[i];
    const uint32_t gen = (s.gen + 1) & 0xff;
    s = UdpSock{.in_events = s.in_events};
    s.gen = gen ? gen : 1;
    s.used = true;
    s.user = user;
    s.mem = mem;
    s.rx.mem = mem.rx;
    s.rx.size = mem.rx_size;
    raise(s, kEvWritable); // a send never waits for ring space
    return id_of(s);
}

bool UdpLayer::same_owner(const UdpSock &a, const UdpSock &b) const
{
    return !e_.cfg.owner_of ||
           e_.cfg.owner_of(a.user, e_.cfg.owner_arg) == e_.cfg.owner_of(b.user, e_.cfg.owner_arg);
}

bool UdpLayer::port_taken(uint16_t port, const UdpSock &by, bool wild) const
{
    const uint32_t ip = wild ? 0 : by.local.ip;
    const bool any6 = wild || ip6::is_unspecified(by.local_ip6.b);
    for (uint32_t i = buckets_[bucket(port)]; i != UINT32_MAX; i = socks_[i].next_in_port) {
        const UdpSock &o = socks_[i];
        if (&o == &by || o.local.port != port) continue;
        // Overlap per family (Linux's inet_rcv_saddr_equal for UDP): IPv4
        // addresses when both take IPv4 (0 overlaps all), IPv6 ones when both
        // take IPv6 (:: overlaps all). A dual-stack :: takes both; a v6only
        // :: or an IPv6 address only IPv6; a v4-mapped address only IPv4.
        const bool v4 = (o.fam & by.fam & kFam4) && (o.local.ip == 0 || ip == 0 || o.local.ip == ip);
        const bool v6 = (o.fam & by.fam & kFam6) &&
                        (any6 || ip6::is_unspecified(o.local_ip6.b) || ip6::eq(o.local_ip6, by.local_ip6));
        if (!v4 && !v6) continue;
        if (o.reuse_port && by.reuse_port && same_owner(o, by)) continue;
        if (o.reuse_addr && by.reuse_addr) continue; // SO_REUSEADDR on both (UDP: no owner rule, as Linux)
        return true;
    }
    return false;
}

int UdpLayer::pick_port(UdpSock &s)
{
    const uint32_t lo = e_.cfg.ephemeral_lo, span = uint32_t(e_.cfg.ephemeral_hi) - lo + 1;
    const bool reuse = s.reuse_port;
    s.reuse_port = false; // an ephemeral port is never shared
    for (uint32_t tries = 0; tries < span; tries++) {
        const uint16_t p = next_ephemeral_;
        next_ephemeral_ = uint16_t(p >= e_.cfg.ephemeral_hi ? lo : p + 1);
        if (e_.cfg.steer && e_.cfg.steer(e_.cfg.ip, p, 0, 0, e_.cfg.steer_arg) != e_.cfg.engine) continue;
        if (port_taken(p, s, true)) continue; // free for the wildcards of s's families
        s.local.port = p;
        s.reuse_port = reuse;
        return 0;
    }
    s.reuse_port = reuse;
    return -EADDRNOTAVAIL;
}

void UdpLayer::index_add(UdpSock &s)
{
    uint32_t &head = buckets_[bucket(s.local.port)];
    s.next_in_port = head;
    head = index_of(s);
}

void UdpLayer::index_remove(UdpSock &s)
{
    for (uint32_t *p = &buckets_[bucket(s.local.port)]; *p != UINT32_MAX; p = &socks_[*p].next_in_port) {
        if (*p == index_of(s)) {
            *p = s.next_in_port;
            s.next_in_port = UINT32_MAX;
            return;
        }
    }
}

int UdpLayer::bind(SockId id, Endpoint local)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    if (s->bound) return -EINVAL; // (an IPv6 socket is always bound)
    if (local.ip != 0 && local.ip != e_.cfg.ip && !ipv4_multicast(local.ip)) return -EADDRNOTAVAIL;
    s->fam = kFam4;
    s->local.ip = local.ip;
    return bind_as(*s, local.port);
}

int UdpLayer::bind_as(UdpSock &s, uint16_t port)
{
    int rc = 0;
    if (port == 0)
        rc = pick_port(s);
    else if (port_taken(port, s))
        rc = -EADDRINUSE;
    else
        s.local.port = port;
    if (rc != 0) { // unbound as before, of no family
        s.fam = 0;
        s.v6 = s.v6only = false;
        s.local = Endpoint{};
        s.local_ip6 = Ip6Addr{};
        return rc;
    }
    s.bound = true;
    index_add(s);
    return 0;
}

int UdpLayer::autobind(UdpSock &s, bool v6)
{
    s.v6 = v6;
    s.fam = v6 ? uint8_t(kFam4 | kFam6) : uint8_t(kFam4);
    s.local.ip = 0;
    s.local_ip6 = Ip6Addr{};
    return bind_as(s, 0);
}

int UdpLayer::set_option(SockId id, SockOpt opt, int64_t v)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    switch (opt) {
    // Both may change after bind, as on Linux (sk_reuse, sk_reuseport): they
    // decide whether a later bind of the port conflicts with this socket.
    case SockOpt::kReusePort:
        s->reuse_port = v != 0;
        return 0;
    case SockOpt::kReuseAddr: // shares the port with other kReuseAddr sockets (multicast receivers)
        s->reuse_addr = v != 0;
        return 0;
    case SockOpt::kTos:
        if (v < 0 || v > 255) return -EINVAL;
        s->tos = uint8_t(v);
        return 0;
    case SockOpt::kTclass: // IPV6_TCLASS: the IPv6 datagrams' (kTos stays IPv4's, as Linux keeps them apart)
        if (v < -1 || v > 255) return -EINVAL;
        s->tclass = v < 0 ? 0 : uint8_t(v);
        return 0;
    case SockOpt::kTtl: // IP_TTL: 1..255 (Linux refuses 0), -1 the default
        if (v != -1 && (v < 1 || v > 255)) return -EINVAL;
        s->ttl = int16_t(v);
        return 0;
    case SockOpt::kHopLimit: // IPV6_UNICAST_HOPS: 0..255, -1 the default
        if (v < -1 || v > 255) return -EINVAL;
        s->hops = int16_t(v);
        return 0;
    case SockOpt::kMulticastAll: // one flag for both families (Linux's inet->mc_all)
        if (v != 0 && v != 1) return -EINVAL;
        s->mc_all = v != 0;
        return 0;
    case SockOpt::kMulticastTtl: // IP_MULTICAST_TTL: 0..255, -1 the default (1)
    case SockOpt::kMulticastHops: // IPV6_MULTICAST_HOPS: the same range
        if (v < -1 || v > 255) return -EINVAL;
        (opt == SockOpt::kMulticastTtl ? s->mc_ttl : s->mc_hops) = int16_t(v);
        return 0;
    case SockOpt::kMulticastLoop: // IP_MULTICAST_LOOP, IPV6_MULTICAST_LOOP: a flag per family
    case SockOpt::kMulticastLoop6:
        if (v != 0 && v != 1) return -EINVAL;
        (opt == SockOpt::kMulticastLoop ? s->mc_loop : s->mc_loop6) = v != 0;
        return 0;
    default:
        return -ENOPROTOOPT;
    }
}

int UdpLayer::connect(SockId id, Endpoint remote)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    return connect4(*s, remote);
}

void UdpLayer::dissolve(UdpSock &s)
{
    s.remote = Endpoint{};
    s.remote6 = false;
    s.remote_ip6 = Ip6Addr{};
    if (s.addr_by_connect) { // (Linux: unless bind chose the address, SOCK_BINDADDR_LOCK)
        s.local.ip = 0;
        s.local_ip6 = Ip6Addr{};
        s.fam = s.fam_unfixed;
        s.addr_by_connect = false;
    }
}

int UdpLayer::connect4(UdpSock &s, Endpoint remote)
{
    if (remote.ip == 0 && remote.port == 0) { // AF_UNSPEC: dissolve
        dissolve(s);
        return 0;
    }
    if (remote.ip == 0 || remote.port == 0) return -EINVAL;
    // An IPv6 socket that takes no IPv4 (v6only, or bound to an IPv6
    // address): Linux's ENETUNREACH for a v4-mapped peer.
    if (s.v6 && !(s.fam & kFam4)) return -ENETUNREACH;
    if (!s.bound) {
        if (int rc = autobind(s, false); rc != 0) return rc;
    }
    // Our source toward the peer becomes the socket's address, in its name
    // and for what it takes (a dual-stack one then takes IPv4 only), as
    // Linux's ip4_datagram_connect fixes it; not for a group.
    if (s.local.ip == 0 && !ipv4_multicast(remote.ip)) {
        if (!s.addr_by_connect) s.fam_unfixed = s.fam;
        s.addr_by_connect = true;
        s.local.ip = e_.cfg.ip;
        s.local_ip6 = Ip6Addr{};
        s.fam = kFam4;
    }
    s.remote = remote;
    s.remote6 = false;
    s.remote_ip6 = Ip6Addr{};
    return 0;
}

int UdpLayer::close(SockId id)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    // Memberships go first (IGMP/MLD leave reports for groups nobody holds now).
    while (s->n_groups > 0) leave(id, s->groups[s->n_groups - 1]);
    while (s->n_groups6 > 0) leave6(id, s->groups6[s->n_groups6 - 1]);
    if (s->bound) index_remove(*s);
    e_.buffers.reclaim(s->user, s->mem);
    closed_events_.push_back(SockEvent{id, kEvClosed, s->user});
    const uint32_t i = index_of(*s);
    // The id stops working (used = false). A slot still listed for events
    // stays marked as listed, so a socket opened on it before the next drain
    // is not listed twice (the list's capacity is one entry per slot).
    *s = UdpSock{.gen = s->gen, .in_events = s->in_events};
    free_.push_back(i);
    return 0;
}

int UdpLayer::info(SockId id, UdpInfo *out) const
{
    const UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    *out = UdpInfo{s->local, s->remote, s->reuse_port, s->rx.used(), s->rx.datagrams, s->rx.size, s->drops,
                   uint32_t(s->n_groups + s->n_groups6)};
    out->error = s->error;
    out->errors = s->errors;
    if (s->v6) {
        // The IPv6 names: an IPv4 one v4-mapped (::ffff:0.0.0.0 the IPv4
        // wildcard of a v4-mapped bind), :: the wildcard of a dual or
        // v6only one, the peer :: port 0 when not connected.
        out->ipv6 = true;
        out->v6only = s->v6only;
        out->local6 = Endpoint6{(s->fam & kFam6) ? s->local_ip6 : v4_mapped(s->local.ip), s->local.port};
        if (s->remote.port)
            out->remote6 = Endpoint6{s->remote6 ? s->remote_ip6 : v4_mapped(s->remote.ip), s->remote.port};
    }
    return 0;
}

void UdpLayer::for_each_socket(void (*fn)(SockId, const UdpInfo &, uint64_t user, void *arg), void *arg) const
{
    for (const UdpSock &s : socks_) {
        if (!s.used) continue;
        UdpInfo i;
        if (info(id_of(s), &i) == 0) fn(id_of(s), i, s.user, arg);
    }
}

// ---- receive: the application's side ---------------------------------------------

int64_t UdpLayer::recv_from(SockId id, void *data, size_t len, UdpRecord *rec, bool peek)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    const UdpRecord *r = s->rx.front();
    if (!r) return -EAGAIN;
    const UdpRecord h = *r;
    // An IPv6 record's addresses are not copied out: the caller reads them
    // through rx_view (a UdpRecord6 right after the header) before this.
    if (len && h.len) std::memcpy(data, DgramRing::payload(r), std::min<size_t>(len, h.len));
    if (rec) *rec = h;
    if (!peek) s->rx.pop(r);
    return h.len;
}

int UdpLayer::rx_view(SockId id, RingSpan *out) const
{
    const UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    const DgramRing &r = s->rx;
    const uint32_t off = r.head & (r.size - 1), used = r.used();
    const uint32_t first = std::min(used, r.size - off);
    *out = RingSpan{{r.mem + off, r.mem}, {first, used - first}};
    return 0;
}

int UdpLayer::rx_consume(SockId id, uint32_t n)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    DgramRing &r = s->rx;
    if (n > r.used()) return -EINVAL;
    // Whole records only: walk them (checking each as front() does).
    uint32_t pos = r.head, dgrams = 0;
    while (pos - r.head < n) {
        const UdpRecord *rec = r.at(pos);
        const uint32_t saved = r.head;
        r.head = pos; // sane() checks against the record's own offset
        const bool ok = r.sane(rec);
        r.head = saved;
        if (!ok) return -EINVAL;
        if (!(rec->flags & kUdpRecPad)) dgrams++;
        pos += rec->size;
    }
    if (pos - r.head != n) return -EINVAL;
    r.head = pos;
    r.datagrams -= std::min(r.datagrams, dgrams);
    return 0;
}

// ---- receive: the wire's side ----------------------------------------------------

int UdpLayer::score(const UdpSock &s, const Tuple &t)
{
    // Linux's scoring (compute_score): a bound address and a connected peer
    // each make a socket a better match; for an IPv4 datagram an IPv4 socket
    // beats an IPv6 (dual-stack or v4-mapped) one that is otherwise as good
    // (udp.c's PF_INET 2, PF_INET6 1), which also keeps the families'
    // reuseport groups apart as Linux does.
    if (s.local.port != t.dport) return -1;
    int score = 0;
    if (!t.v6) {
        if (!(s.fam & kFam4)) return -1;
        if (s.local.ip) {
            if (s.local.ip != t.dst4) return -1;
            score += 4;
        }
        if (s.remote.port) {
            if (s.remote6 || s.remote.ip != t.src4 || s.remote.port != t.sport) return -1;
            score += 8;
        }
        if (!s.v6) score += 1;
    } else {
        if (!(s.fam & kFam6)) return -1;
        if (!ip6::is_unspecified(s.local_ip6.b)) {
            if (!ip6::eq(s.local_ip6.b, t.dst6)) return -1;
            score += 4;
        }
        if (s.remote.port) { // a v4-mapped peer: no IPv6 datagram is from it
            if (!s.remote6 || !ip6::eq(s.remote_ip6.b, t.src6) || s.remote.port != t.sport) return -1;
            score += 8;
        }
    }
    return score;
}

UdpSock *UdpLayer::match(const Tuple &t)
{
    // The best score wins; among reuseport members of the best score, one
    // by a hash of the 4-tuple. Connected sockets are never in a spread
    // (Linux leaves them out of the reuseport choice too).
    int best = -1;
    uint32_t members = 0;
    UdpSock *pick = nullptr;
    for (uint32_t i = buckets_[bucket(t.dport)]; i != UINT32_MAX; i = socks_[i].next_in_port) {
        UdpSock &s = socks_[i];
        const int sc = score(s, t);
        if (sc < 0) continue;
        if (sc > best) {
            best = sc;
            pick = &s;
            members = (s.reuse_port && !s.remote.port) ? 1 : 0;
        } else if (sc == best && s.reuse_port && !s.remote.port) {
            members++;
        }
    }
    if (members <= 1) return pick;
    // IPv6 addresses folded to 32 bits (the flow's own; the key is the secret).
    uint32_t src = t.src4, dst = t.dst4;
    if (t.v6) {
        src = dst = 0;
        for (int w = 0; w < 16; w += 4) {
            uint32_t a, b;
            std::memcpy(&a, t.src6 + w, 4);
            std::memcpy(&b, t.dst6 + w, 4);
            src ^= a, dst ^= b;
        }
    }
    uint32_t h = (src ^ hash_key_) * 0x2545f491u;
    h ^= (uint32_t(t.sport) << 16 | t.dport) ^ dst;
    h *= 0x27d4eb2fu;
    h ^= h >> 16;
    h *= 0x165667b1u;
    h ^= h >> 13;
    uint32_t k = h % members;
    for (uint32_t i = buckets_[bucket(t.dport)]; i != UINT32_MAX; i = socks_[i].next_in_port) {
        UdpSock &s = socks_[i];
        if (!s.reuse_port || s.remote.port) continue;
        if (score(s, t) == best && k-- == 0) return &s;
    }
    return pick;
}

bool UdpLayer::deliver(UdpSock &s, UdpRecord hdr, const UdpRecord6 *a6, const void *payload, unsigned len)
{
    const uint32_t need = DgramRing::record_size(len, hdr.flags);
    UdpRecord *r = s.rx.reserve(need);
    if (!r) {
        s.drops++;
        e_.stats.udp_rcvbuf_errors++;
        return false;
    }
    hdr.size = need;
    hdr.len = len;
    hdr.ts_ns = e_.now_ns;
    *r = hdr;
    uint8_t *p = reinterpret_cast<uint8_t *>(r + 1);
    if (a6) {
        std::memcpy(p, a6, sizeof *a6);
        p += sizeof *a6;
    }
    std::memcpy(p, payload, len);
    s.rx.commit(need);
    e_.stats.udp_in++;
    raise(s, kEvReadable);
    return true;
}

bool UdpLayer::deliver_group(const Tuple &t, const UdpRecord &hdr, const UdpRecord6 *a6, const void *payload,
                             unsigned len)
{
    // Members by their source filters, the others by kMulticastAll.
    const bool joined = t.v6 ? group6_joined(t.dst6) : group4_joined(t.dst4);
    bool any = false;
    for (uint32_t i = joined ? buckets_[bucket(t.dport)] : UINT32_MAX; i != UINT32_MAX; i = socks_[i].next_in_port) {
        UdpSock &s = socks_[i];
        if (s.local.port != t.dport) continue;
        if (t.v6) {
            if (!(s.fam & kFam6) || (!ip6::is_unspecified(s.local_ip6.b) && !ip6::eq(s.local_ip6.b, t.dst6))) continue;
            if (s.remote.port && (!s.remote6 || !ip6::eq(s.remote_ip6.b, t.src6) || s.remote.port != t.sport)) continue;
            if (!mc_allow6(s, t.dst6, t.src6)) continue;
        } else {
            if (!(s.fam & kFam4) || (s.local.ip && s.local.ip != t.dst4)) continue;
            if (s.remote.port && (s.remote6 || s.remote.ip != t.src4 || s.remote.port != t.sport)) continue;
            if (!mc_allow4(s, t.dst4, t.src4)) continue;
        }
        any = true;
        deliver(s, hdr, a6, payload, len);
    }
    return any;
}

void UdpLayer::udp_input(PacketRef &f, const Ipv4 *ip, unsigned ihl, unsigned total)
{
    const unsigned avail = total - ihl;
    const Udp *uh = reinterpret_cast<const Udp *>(f.data + kEthLen + ihl);
    const unsigned ulen = avail >= kUdpLen ? be16(uh->len) : 0;
    if (ulen < kUdpLen || ulen > avail) { // bytes past ulen are padding (ignored)
        e_.stats.udp_header_errors++;
        e_.link.release(f);
        return;
    }
    const uint32_t src = be32(ip->src), dst = be32(ip->dst);
    // RFC 768: a zero checksum means none was computed (IPv4 only).
    if (uh->csum != 0 && !(f.flags & kRxL4CsumGood) &&
        !csum_ok(csum_add(pseudo_sum(src, dst, kProtoUdp, uint16_t(ulen)), uh, ulen))) {
        e_.stats.udp_csum_errors++;
        e_.link.release(f);
        return;
    }
    const unsigned len = ulen - kUdpLen;
    const uint16_t sport = be16(uh->sport), dport = be16(uh->dport);
    // The header's TOS and TTL ride in the flags (IP_RECVTOS, IP_RECVTTL).
    UdpRecord hdr{0, 0, src, dst, sport, dport,
                  uint32_t(ip->tos) << kUdpRecTosShift | uint32_t(ip->ttl) << kUdpRecTtlShift, 0};
    if (ipv4_multicast(dst)) {
        hdr.flags |= kUdpRecMulticast;
        if (deliver_group(Tuple{false, src, dst, nullptr, nullptr, sport, dport}, hdr, nullptr, uh + 1, len)) {
            e_.stats.udp_mcast_in++;
            e_.link.release(f);
            return;
        }
        // A group nobody here joined: the other stack's, or nobody's.
        if (e_.link.pass_up(f, Unclaimed::kUdp)) return;
        e_.stats.drop_not_ours++;
        e_.link.release(f);
        return;
    }
    UdpSock *s = match(Tuple{false, src, dst, nullptr, nullptr, sport, dport});
    if (!s) {
        if (e_.link.pass_up(f, Unclaimed::kUdp)) return;
        e_.stats.udp_no_port++;
        port_unreachable(f.data + kEthLen, total);
        e_.link.release(f);
        return;
    }
    deliver(*s, hdr, nullptr, uh + 1, len); // a plain IPv4 record, to an IPv6 socket too
    e_.link.release(f);
}

void UdpLayer::port_unreachable(const uint8_t *ip_packet, unsigned len)
{
    // Token bucket: 1000 messages a second, bursts of 50 (Linux's
    // icmp_msgs_per_sec and icmp_msgs_burst), in milli-tokens.
    const uint64_t now = e_.now_ns;
    if (now > icmp_last_ns_) {
        icmp_tokens_ = std::min<uint64_t>(50'000, icmp_tokens_ + (now - icmp_last_ns_) / 1000);
        icmp_last_ns_ = now;
    }
    if (icmp_tokens_ < 1000) {
        e_.stats.udp_unreach_limited++;
        return;
    }
    icmp_tokens_ -= 1000;
    e_.ip.send_icmp_unreach(ip_packet, len, kIcmpCodePort, now);
}

// ---- send ------------------------------------------------------------------------

void UdpLayer::send_group_frame(PacketRef &f, uint32_t group)
{
    Eth *eth = reinterpret_cast<Eth *>(f.data);
    group_mac(group, eth->dst);
    std::memcpy(eth->src, e_.cfg.mac.b, 6);
    eth->type = be16(kEtherIpv4);
    e_.link.queue(f);
}

int64_t UdpLayer::send_to(SockId id, const Endpoint *dst_in, const void *data, size_t len, int tos)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    Endpoint dst;
    if (dst_in) {
        dst = *dst_in;
    } else {
        if (!s->remote.port) return -EDESTADDRREQ;
        if (s->remote6) return send_to6(id, nullptr, data, len, tos); // connected over IPv6
        dst = s->remote;
    }
    return send4(*s, dst, data, len, tos);
}

int64_t UdpLayer::send4(UdpSock &s, Endpoint dst, const void *data, size_t len, int tos)
{
    if (s.v6 && !(s.fam & kFam4)) return -ENETUNREACH; // no IPv4 from this IPv6 socket (Linux)
    if (dst.ip == 0 || dst.port == 0 || dst.ip == 0xffffffffu) return -EINVAL;
    if (len > size_t(e_.cfg.mtu) - kIpLen - kUdpLen) return -EMSGSIZE;
    const bool group = ipv4_multicast(dst.ip);
    const uint32_t hop = group ? dst.ip : e_.router.next_hop(dst.ip);
    if (!hop) return -ENETUNREACH;
    if (!s.bound) {
        if (int rc = autobind(s, false); rc != 0) return rc;
    }
    PacketRef f;
    if (!e_.link.alloc(&f)) return -ENOBUFS;
    const unsigned ulen = kUdpLen + unsigned(len);
    if (kEthLen + kIpLen + ulen > f.room) {
        e_.link.release(f);
        return -EMSGSIZE;
    }
    Ipv4 *ip = reinterpret_cast<Ipv4 *>(f.data + kEthLen);
    const uint8_t tos_v = tos >= 0 ? uint8_t(tos) : s.tos;
    const uint8_t ttl = uint8_t(group ? (s.mc_ttl >= 0 ? s.mc_ttl : 1) : s.ttl >= 0 ? s.ttl : 64);
    *ip = Ipv4{0x45, tos_v, be16(uint16_t(kIpLen + ulen)), 0, be16(kIpDf), ttl, kProtoUdp, 0, be32(e_.cfg.ip), be32(dst.ip)};
    if (e_.offloads & kOffloadTxIpCsum)
        f.flags |= kTxIpCsum;
    else
        ip->csum = csum_finish(csum_add(0, ip, kIpLen));
    Udp *uh = reinterpret_cast<Udp *>(ip + 1);
    *uh = Udp{be16(s.local.port), be16(dst.port), be16(uint16_t(ulen)), 0};
    // The payload is copied and summed in one pass (no UDP offload flag:
    // one datagram's sum is cheap next to its copy).
    uint32_t sum = csum_copy(uh + 1, data, len, pseudo_sum(e_.cfg.ip, dst.ip, kProtoUdp, uint16_t(ulen)));
    sum = csum_combine(sum, csum_add(0, uh, kUdpLen), 0);
    uint16_t c = csum_finish(sum);
    uh->csum = c ? c : 0xffff; // RFC 768: a computed zero is sent as all ones
    f.len = uint16_t(kEthLen + kIpLen + ulen);
    e_.stats.udp_out++;
    if (!group) {
        e_.ip.send(f, hop, e_.now_ns);
        return int64_t(len);
    }
    // IP_MULTICAST_LOOP: the host's members get it as if received (Linux's
    // ip_mc_output loops a copy when the device joined the group).
    if (s.mc_loop) {
        const UdpRecord hdr{0, 0, e_.cfg.ip, dst.ip, s.local.port, dst.port,
                            kUdpRecMulticast | uint32_t(tos_v) << kUdpRecTosShift | uint32_t(ttl) << kUdpRecTtlShift, 0};
        if (deliver_group(Tuple{false, e_.cfg.ip, dst.ip, nullptr, nullptr, s.local.port, dst.port}, hdr, nullptr,
                          uh + 1, unsigned(len)))
            e_.stats.udp_mcast_in++;
    }
    if (ttl == 0) { // the host only (IP_MULTICAST_TTL 0)
        e_.link.release(f);
        return int64_t(len);
    }
    send_group_frame(f, dst.ip);
    return int64_t(len);
}

} // namespace mars::udp
