// socket_api6.cc: IPv6 sockets (issue 31): bind6/connect6 of the Stack
// interface, and the socket table's IPv6 services (FlowTable6 entries, IPv6
// listeners and their port conflicts, ephemeral ports for IPv6 active opens,
// connects failed by neighbour discovery). Everything after the open is the
// TCP code both families share (tcp/*.cc); what a connection asks of IPv6 is
// tcp6::Tcp6's (tcp/tcp6.h).
#include "stack_impl.h"

#include <cstring>

namespace mars {

namespace {

bool same(const Ip6Addr &a, const Ip6Addr &b) { return std::memcmp(a.b, b.b, 16) == 0; }

// ::ffff:a.b.c.d (RFC 4291 2.5.5.2): the IPv4 address, host order.
bool v4_mapped(const Ip6Addr &a, uint32_t *v4)
{
    static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(a.b, kPrefix, 12) != 0) return false;
    *v4 = uint32_t(a.b[12]) << 24 | uint32_t(a.b[13]) << 16 | uint32_t(a.b[14]) << 8 | a.b[15];
    return true;
}

} // namespace

void StackImpl::link_flow6(Sock &s)
{
    s.v6.flow.key = FlowKey6{s.v6.local, s.v6.remote, s.app.local.port, s.app.remote.port};
    s.v6.flow.owner = &s;
    flows6_.insert(&s.v6.flow);
}

Sock *StackImpl::find_listener6(const Ip6Addr &lip, uint16_t lport, const Ip6Addr &rip, uint16_t rport)
{
    // As find_listener: a keyed hash of the 4-tuple picks a SO_REUSEPORT member.
    uint32_t h = uint32_t(siphash24(cfg_.isn_secret, rip.b, 16));
    h ^= (uint32_t(rport) << 16 | lport);
    h *= 0x27d4eb2fu;
    h ^= h >> 16;
    const Ip6Addr any{};
    for (const bool exact : {true, false}) {
        const Ip6Addr &want = exact ? lip : any;
        uint32_t members = 0;
        for (uint32_t i : listeners_) {
            const Sock &l = socks_[i];
            if ((l.flags & kFV6) && l.app.local.port == lport && same(l.v6.local, want)) members++;
        }
        if (members == 0) continue;
        uint32_t pick = members == 1 ? 0 : h % members;
        for (uint32_t i : listeners_) {
            Sock &l = socks_[i];
            if ((l.flags & kFV6) && l.app.local.port == lport && same(l.v6.local, want) && pick-- == 0) return &l;
        }
    }
    return nullptr;
}

bool StackImpl::port_in_use6(const Ip6Addr &lip, bool dual, uint16_t port, const Sock *except) const
{
    const bool any = ip6::is_unspecified(lip.b);
    for (uint32_t i : listeners_) {
        const Sock &l = socks_[i];
        if (&l == except || l.app.local.port != port) continue;
        // IPv6 listeners by address (:: overlaps every one); IPv4 ones only
        // with a dual-stack :: (which takes IPv4 too), as Linux.
        const bool overlap = (l.flags & kFV6) ? any || ip6::is_unspecified(l.v6.local.b) || same(l.v6.local, lip)
                                              : dual;
        if (!overlap) continue;
        if ((l.flags & kFReusePort) && except && (except->flags & kFReusePort) && same_owner(l, *except)) continue;
        return true;
    }
    return false;
}

int StackImpl::pick_port6(Sock &s, const Ip6Addr &lip, const Ip6Addr &rip, uint16_t rport)
{
    const uint32_t lo = cfg_.ephemeral_lo, span = uint32_t(cfg_.ephemeral_hi) - lo + 1;
    const Ip6Addr any{};
    for (uint32_t tries = 0; tries < span; tries++) {
        const uint16_t p = next_ephemeral_;
        next_ephemeral_ = uint16_t(p >= cfg_.ephemeral_hi ? lo : p + 1);
        // Several engines: only a port whose flow this engine owns (a bind's
        // port, with no peer yet, is placed by libdti when it connects).
        if (rport && cfg_.steer6 && cfg_.steer6(lip.b, p, rip.b, rport, cfg_.steer_arg) != cfg_.engine) continue;
        if (port_in_use6(any, true, p, nullptr)) continue; // a listener's port, either family
        if (rport && flows6_.lookup(FlowKey6{lip, rip, p, rport})) continue;
        s.app.local.port = p;
        return 0;
    }
    return -EADDRNOTAVAIL;
}

// Neighbour discovery gave up on next hops (nd.cc): connects over IPv6 whose
// SYN waits on one fail with EHOSTUNREACH, as fail_unreachable() does for
// ARP. The next hop is the remote address when on-link, else its route's
// gateway (a dead router fails every connect through it, as on Linux).
void StackImpl::fail_unreachable6()
{
    for (size_t i = 0; i < nd_.failed_count(); i++) {
        const Ip6Addr &hop = nd_.failed_at(i);
        for (Sock &s : socks_) {
            if (!s.used || !(s.flags & kFV6) || s.state != TcpState::kSynSent) continue;
            Ip6Addr via;
            if (!ip6_.router().next_hop(s.v6.remote.b, &via) || !same(via, hop)) continue;
            stats_.tcp_connects_unreachable++;
            conn_drop(s, EHOSTUNREACH, kEvError);
        }
    }
    nd_.clear_failed();
}

int StackImpl::bind6(SockId id, const Endpoint6 &local, bool v6only)
{
    uint32_t v4;
    if (v4_mapped(local.ip, &v4)) return bind(id, Endpoint{v4, local.port});
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->state != TcpState::kClosed || (s->flags & (kFBound | kFUserClosed))) return -EINVAL;
    const bool any = ip6::is_unspecified(local.ip.b);
    if (!any) {
        const int i = nd_.find_own(local.ip.b);
        if (i < 0 || nd_.addr(i).state == AddrState::kDuplicate) return -EADDRNOTAVAIL;
    }
    const bool dual = any && !v6only;
    if (local.port == 0) {
        if (int rc = pick_port6(*s, local.ip, Ip6Addr{}, 0); rc != 0) return rc;
    } else {
        if (port_in_use6(local.ip, dual, local.port, s)) return -EADDRINUSE;
        s->app.local.port = local.port;
    }
    s->v6.local = local.ip;
    // A dual-stack :: takes IPv4 arrivals as IPv4's wildcard does (find_listener).
    s->app.local.ip = dual ? 0 : kNoV4;
    s->flags |= kFBound | kFV6 | (v6only ? uint32_t(kFV6Only) : 0u);
    return 0;
}

int StackImpl::connect6(SockId id, const Endpoint6 &remote, uint64_t now_ns)
{
    uint32_t v4;
    if (v4_mapped(remote.ip, &v4)) return connect(id, Endpoint{v4, remote.port}, now_ns);
    Sock *s = lookup_id(id);
    if (!s) return -EBADF;
    if (s->state == TcpState::kListen) return -EINVAL;
    if (s->state == TcpState::kSynSent) return -EALREADY;
    if (s->state != TcpState::kClosed || (s->flags & kFUserClosed)) return -EISCONN;
    if (s->flags & kFAccepted) return -EISCONN;
    if ((s->flags & kFBound) && !(s->flags & kFV6)) return -EAFNOSUPPORT; // bound to an IPv4 address
    if (ip6::is_unspecified(remote.ip.b) || remote.port == 0) return -EINVAL;
    if (ip6::is_multicast(remote.ip.b)) return -ENETUNREACH;
    // On-link, or through a route (routes6). One of our own addresses is a
    // local connection (issue 29: both ends here, its frames through the
    // local loop, ip/local_loop.h) once the address is usable; a tentative or
    // duplicate one of ours cannot answer (ENETUNREACH, as before).
    const int own = nd_.find_own(remote.ip.b);
    if (!ip6_.router().routes(remote.ip.b) || (own >= 0 && nd_.addr(own).state != AddrState::kPreferred)) return -ENETUNREACH;
    if (now_ns > now_ns_) now_ns_ = now_ns;
    Ip6Addr src;
    if ((s->flags & kFBound) && !ip6::is_unspecified(s->v6.local.b)) {
        src = s->v6.local;
    } else if (own >= 0) {
        src = remote.ip; // to ourselves: from the same address (RFC 6724 rule 1, as Linux's loopback)
    } else if (const Ip6Addr *a = nd_.source_for(remote.ip.b)) {
        src = *a;
    } else {
        return -EADDRNOTAVAIL;
    }
    if (s->flags & kFBound) {
        if (flows6_.lookup(FlowKey6{src, remote.ip, s->app.local.port, remote.port})) return -EADDRINUSE;
    } else if (int rc = pick_port6(*s, src, remote.ip, remote.port); rc != 0) {
        return rc;
    }
    if (!attach_rings(*s, s->app.user)) return -ENOBUFS;
    s->flags |= kFV6;
    s->v6.local = src;
    s->v6.remote = remote.ip;
    s->app.local.ip = kNoV4;
    s->app.remote = Endpoint{0, remote.port};
    link_flow6(*s);
    s->iss = isn_generate(cfg_.isn_secret, tcp6::isn_key(cfg_.isn_secret, src, remote.ip, s->app.local.port, remote.port),
                          now_ns_);
    start_syn_sent(*s);
    return 0;
}

} // namespace mars
