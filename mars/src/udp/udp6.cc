// udp/udp6.cc: UDP over IPv6 (RFC 8200 8.1, RFC 768), the IPv6 half of
// UdpLayer: bind6, connect6, send_to6 and udp6_input, as Linux's AF_INET6
// UDP socket behaves (multicast delivery among them; memberships and MLD
// are mld.cc's). A v4-mapped address (::ffff:a.b.c.d) goes to the IPv4
// half (udp.cc), the socket staying an IPv6 one. Sockets, the port index,
// the scoring and the records are udp.cc's, shared by both families.
// Every length is checked against the frame before it is read.
#include "udp/udp.h"

#include "base/checksum.h"

#include <cerrno>
#include <cstring>

namespace mars::udp {

using namespace wire;

int UdpLayer::bind6(SockId id, const Endpoint6 &local, bool v6only)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    if (s->bound) return -EINVAL;
    uint32_t v4;
    if (is_v4_mapped(local.ip, &v4)) {
        // The IPv4 bind (::ffff:0.0.0.0 its wildcard) for an IPv6 socket
        // that takes IPv4 datagrams only; v6only refuses it (Linux: EINVAL).
        if (v6only) return -EINVAL;
        if (v4 != 0 && v4 != e_.cfg.ip && !ipv4_multicast(v4)) return -EADDRNOTAVAIL;
        s->v6 = true;
        s->fam = kFam4;
        s->local.ip = v4;
        return bind_as(*s, local.port);
    }
    const bool any = ip6::is_unspecified(local.ip.b);
    // An address of ours that is usable (not tentative nor duplicate), as
    // Linux without IPV6_FREEBIND, or a group: the socket then takes that
    // group's datagrams only (Linux allows it; joining is join6's), as an
    // IPv4 bind to a group; port conflicts as for any specific address.
    if (!any && !ip6::is_multicast(local.ip.b) && !e_.nd.is_ours(local.ip.b)) return -EADDRNOTAVAIL;
    s->v6 = true;
    // A specific IPv6 address takes no IPv4 (Linux sets ipv6only for it).
    s->v6only = v6only || !any;
    s->fam = (any && !v6only) ? uint8_t(kFam4 | kFam6) : uint8_t(kFam6);
    s->local.ip = 0;
    s->local_ip6 = local.ip;
    return bind_as(*s, local.port);
}

int UdpLayer::connect6(SockId id, const Endpoint6 &remote)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    if (s->bound && !s->v6) return -EAFNOSUPPORT; // an IPv4 socket
    uint32_t v4;
    if (is_v4_mapped(remote.ip, &v4)) {
        if (!s->bound && !(v4 == 0 && remote.port == 0)) {
            if (int rc = autobind(*s, true); rc != 0) return rc;
        }
        return connect4(*s, Endpoint{v4, remote.port});
    }
    const bool any = ip6::is_unspecified(remote.ip.b);
    if (any && remote.port == 0) { // AF_UNSPEC: dissolve
        dissolve(*s);
        return 0;
    }
    if (any || remote.port == 0) return -EINVAL;
    if (s->bound && !(s->fam & kFam6)) return -EAFNOSUPPORT; // a v4-mapped source (Linux's ip6_dst_lookup_tail)
    // Groups, and peers on-link or through a route (routes6); one of our
    // own addresses must be usable to answer (as TCP's connect6).
    const int own = e_.nd.find_own(remote.ip.b);
    if (!ip6::is_multicast(remote.ip.b) &&
        (!e_.ip6.router().routes(remote.ip.b) || (own >= 0 && !e_.nd.is_ours(remote.ip.b))))
        return -ENETUNREACH;
    if (!s->bound) {
        if (int rc = autobind(*s, true); rc != 0) return rc;
    }
    // The source toward the peer becomes the socket's address (IPv6 only
    // then), as ip6_datagram_connect fixes it: the peer itself when it is
    // ours, else neighbour discovery's choice (link-local for link-local).
    if ((s->fam & kFam6) && ip6::is_unspecified(s->local_ip6.b)) {
        const Ip6Addr *src = own >= 0 ? &remote.ip : e_.nd.source_for(remote.ip.b);
        if (src) {
            if (!s->addr_by_connect) s->fam_unfixed = s->fam;
            s->addr_by_connect = true;
            s->local_ip6 = *src;
            s->local.ip = 0;
            s->fam = kFam6;
        }
    }
    s->remote = Endpoint{0, remote.port};
    s->remote6 = true;
    s->remote_ip6 = remote.ip;
    return 0;
}

int64_t UdpLayer::send_to6(SockId id, const Endpoint6 *dst_in, const void *data, size_t len, int tos)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    if (s->bound && !s->v6) return -EAFNOSUPPORT; // an IPv4 socket
    Endpoint6 dst;
    if (dst_in) {
        dst = *dst_in;
    } else {
        if (!s->remote.port) return -EDESTADDRREQ;
        if (!s->remote6) return send4(*s, s->remote, data, len, tos); // a v4-mapped peer
        dst = Endpoint6{s->remote_ip6, s->remote.port};
    }
    uint32_t v4;
    if (is_v4_mapped(dst.ip, &v4)) {
        // (v6only, or bound to an IPv6 address: send4 says ENETUNREACH, as Linux)
        if (!s->bound) {
            if (int rc = autobind(*s, true); rc != 0) return rc;
        }
        return send4(*s, Endpoint{v4, dst.port}, data, len, tos);
    }
    if (ip6::is_unspecified(dst.ip.b) || dst.port == 0) return -EINVAL;
    if (s->bound && !(s->fam & kFam6)) return -EAFNOSUPPORT; // a v4-mapped source
    const bool group = ip6::is_multicast(dst.ip.b);
    const int own = e_.nd.find_own(dst.ip.b);
    if (!group && (!e_.ip6.router().routes(dst.ip.b) || (own >= 0 && !e_.nd.is_ours(dst.ip.b)))) return -ENETUNREACH;
    if (len > size_t(e_.ip6.path_mtu(dst.ip, e_.now_ns)) - kIp6Len - kUdpLen) return -EMSGSIZE;
    // The source: the bound address (not a group: Linux keeps no source
    // for a socket bound to one), else to one of ours the same address
    // (as Linux's loopback), else ND's choice for dst (link-local for a
    // link-local destination or a link-scoped group).
    Ip6Addr src;
    if (s->bound && !ip6::is_unspecified(s->local_ip6.b) && !ip6::is_multicast(s->local_ip6.b)) {
        src = s->local_ip6;
    } else if (own >= 0) {
        src = dst.ip;
    } else {
        const Ip6Addr *a = e_.nd.source_for(dst.ip.b);
        if (!a) return -EADDRNOTAVAIL;
        src = *a;
    }
    if (!s->bound) {
        if (int rc = autobind(*s, true); rc != 0) return rc;
    }
    PacketRef f;
    if (!e_.link.alloc(&f)) return -ENOBUFS;
    const unsigned ulen = kUdpLen + unsigned(len);
    if (kEthLen + kIp6Len + ulen > f.room) {
        e_.link.release(f);
        return -EMSGSIZE;
    }
    Ipv6 *ip = reinterpret_cast<Ipv6 *>(f.data + kEthLen);
    // Version 6, the traffic class (IPV6_TCLASS), flow label 0 (RFC 6437
    // allows it; a datagram socket has no flow of its own to label).
    const uint8_t tclass = tos >= 0 ? uint8_t(tos) : s->tclass;
    ip->vtf = be32(6u << 28 | uint32_t(tclass) << 20);
    ip->payload_len = be16(uint16_t(ulen));
    ip->next = kProtoUdp;
    // IPV6_MULTICAST_HOPS (default 1) to a group, else IPV6_UNICAST_HOPS.
    ip->hop_limit = group ? (s->mc_hops >= 0 ? uint8_t(s->mc_hops) : 1) : s->hops >= 0 ? uint8_t(s->hops) : e_.cfg.hop_limit6;
    std::memcpy(ip->src, src.b, 16);
    std::memcpy(ip->dst, dst.ip.b, 16);
    Udp *uh = reinterpret_cast<Udp *>(ip + 1);
    *uh = Udp{be16(s->local.port), be16(dst.port), be16(uint16_t(ulen)), 0};
    // The payload copied and summed in one pass; the checksum is mandatory
    // over IPv6 (RFC 8200 8.1), a computed zero sent as all ones.
    uint32_t sum = csum_copy(uh + 1, data, len, pseudo_sum6(src.b, dst.ip.b, kProtoUdp, ulen));
    sum = csum_combine(sum, csum_add(0, uh, kUdpLen), 0);
    const uint16_t c = csum_finish(sum);
    uh->csum = c ? c : 0xffff;
    f.len = uint16_t(kEthLen + kIp6Len + ulen);
    e_.stats.udp_out++;
    if (group && s->mc_loop6) { // IPV6_MULTICAST_LOOP: as IPv4's (send4)
        UdpRecord6 a6;
        a6.src = src;
        a6.dst = dst.ip;
        const UdpRecord hdr{0, 0, 0, 0, s->local.port, dst.port,
                            kUdpRecIp6 | kUdpRecMulticast | uint32_t(tclass) << kUdpRecTosShift |
                                uint32_t(ip->hop_limit) << kUdpRecTtlShift,
                            0};
        if (deliver_group(Tuple{true, 0, 0, src.b, dst.ip.b, s->local.port, dst.port}, hdr, &a6, uh + 1,
                          unsigned(len)))
            e_.stats.udp_mcast_in++;
    }
    if (group && ip->hop_limit == 0) { // the host only (IPV6_MULTICAST_HOPS 0)
        e_.link.release(f);
        return int64_t(len);
    }
    e_.ip6.send(f, e_.now_ns); // held by ND until the neighbour resolves
    return int64_t(len);
}

bool UdpLayer::udp6_input(PacketRef &f, const Ip6Rx &rx)
{
    // rx: the IPv6 header and extension headers validated by Ipv6Layer,
    // l4_off + l4_len within the frame, the destination a usable address of
    // ours or a group the stack joined (group6_joined).
    const Udp *uh = reinterpret_cast<const Udp *>(f.data + rx.l4_off);
    const unsigned ulen = rx.l4_len >= kUdpLen ? be16(uh->len) : 0;
    if (ulen < kUdpLen || ulen > rx.l4_len) { // bytes past ulen are padding (ignored)
        e_.stats.udp_header_errors++;
        e_.link.release(f);
        return true;
    }
    // No "no checksum" over IPv6 (RFC 8200 8.1): zero is a bad checksum
    // whatever the NIC says (as Linux; the sum alone would take a zero
    // field where the sum computes to zero). Else summed unless the NIC
    // verified it.
    if (uh->csum == 0 || (!(f.flags & kRxL4CsumGood) &&
                          !csum_ok(csum_add(pseudo_sum6(rx.ip->src, rx.ip->dst, kProtoUdp, ulen), uh, ulen)))) {
        e_.stats.udp_csum_errors++;
        e_.link.release(f);
        return true;
    }
    const uint16_t sport = be16(uh->sport), dport = be16(uh->dport);
    // The traffic class and hop limit ride in the flags (IPV6_RECVTCLASS,
    // IPV6_RECVHOPLIMIT), the addresses after the header (kUdpRecIp6).
    const uint32_t tclass = (be32(rx.ip->vtf) >> 20) & 0xff;
    UdpRecord hdr{0, 0, 0, 0, sport, dport,
                  kUdpRecIp6 | tclass << kUdpRecTosShift | uint32_t(rx.ip->hop_limit) << kUdpRecTtlShift, 0};
    UdpRecord6 a6;
    std::memcpy(a6.src.b, rx.ip->src, 16);
    std::memcpy(a6.dst.b, rx.ip->dst, 16);
    if (ip6::is_multicast(rx.ip->dst)) {
        // As IPv4's (deliver_group): every IPv6 socket of the port bound to
        // :: or to the group, not connected elsewhere, that mc_allow6 lets in.
        hdr.flags |= kUdpRecMulticast;
        const bool any =
            deliver_group(Tuple{true, 0, 0, rx.ip->src, rx.ip->dst, sport, dport}, hdr, &a6, uh + 1, ulen - kUdpLen);
        if (!any) { // nobody of the port: no ICMPv6 error answers a group (RFC 4443 2.4 (e))
            if (!e_.link.pass_unclaimed) e_.stats.udp_no_port++;
            return false;
        }
        e_.stats.udp_mcast_in++;
        e_.link.release(f);
        return true;
    }
    UdpSock *s = match(Tuple{true, 0, 0, rx.ip->src, rx.ip->dst, sport, dport});
    if (!s) {
        // Ipv6Layer hands it on (sharing) or answers port unreachable.
        if (!e_.link.pass_unclaimed) e_.stats.udp_no_port++;
        return false;
    }
    deliver(*s, hdr, &a6, uh + 1, ulen - kUdpLen);
    e_.link.release(f);
    return true;
}

} // namespace mars::udp
