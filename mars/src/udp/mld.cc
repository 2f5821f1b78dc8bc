// udp/mld.cc: IPv6 multicast memberships of UDP sockets (join6, leave6),
// which socket takes a datagram to an IPv6 group (mc_allow6), the groups
// the stack joined as the IPv6 layer asks about them, and the host side of
// MLDv2 (RFC 3810), igmp.cc's IPv6 twin: a state-change report when the
// stack's filter for a group changes, current-state reports answering
// queries. The stack's filter for a group is the union of its sockets'
// (RFC 3810 4.2): any member taking every source makes it EXCLUDE {}, else
// INCLUDE the sources asked for. A change of filter mode is reported as
// CHANGE_TO_EXCLUDE / CHANGE_TO_INCLUDE, a change of an INCLUDE list as
// ALLOW_NEW_SOURCES / BLOCK_OLD_SOURCES (RFC 3810 6.1); a join or leave
// that leaves the filter as it was (a second socket joining) sends nothing.
// Reports go to ff02::16 with hop limit 1 and a hop-by-hop Router Alert
// (RFC 3810 5), from our link-local address, or :: while it is tentative
// (5.2.13); link-local-scope-or-below groups and ff02::1 are never
// reported (6). Joins and leaves are not on the packet path: they walk the
// socket table.
//
// Simplifications (mars/README.md "UDP"), as igmp.cc's: a state-change
// report is sent once (not Robustness Variable times), a query is answered
// at once (not after a random delay within Maximum Response Delay), a
// group-and-source-specific query gets the group's whole current state,
// and MLDv1 queriers (24-byte queries) get v2 reports too (no v1
// compatibility mode, RFC 3810 8).
#include "udp/udp.h"

#include "base/checksum.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mars::udp {

using namespace wire;

namespace {

// ff02::16, all MLDv2-capable routers (RFC 3810 5.2.14).
constexpr Ip6Addr kAllMldv2Routers{{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x16}};
constexpr uint8_t kModeIsInclude = 1, kModeIsExclude = 2, kToInclude = 3, kToExclude = 4, kAllowNew = 5,
                  kBlockOld = 6;
constexpr unsigned kHbhLen = 8;       // hop-by-hop header: Router Alert and PadN (RFC 2711, RFC 8200 4.2)
constexpr unsigned kQueryV1Len = 24;  // RFC 2710 3
constexpr unsigned kQueryV2Len = 28;  // RFC 3810 5.1, sources follow

struct __attribute__((packed)) MldV2ReportHdr {
    uint8_t type, reserved;
    uint16_t csum;
    uint16_t reserved2;
    uint16_t n_records;
};

struct __attribute__((packed)) MldRecord {
    uint8_t type, aux_len;
    uint16_t n_sources;
    uint8_t group[16];
};

// RFC 3810 6: nothing is reported for all-nodes, nor for a group of
// reserved (0) or interface-local (1) scope: no router could want them.
bool reportable(const uint8_t *g)
{
    const unsigned scope = g[1] & 0x0f;
    return scope > 1 && !ip6::eq(g, ip6::all_nodes().b);
}

bool listed(const Ip6Addr *a, int n, const Ip6Addr &x)
{
    for (int i = 0; i < n; i++)
        if (ip6::eq(a[i], x)) return true;
    return false;
}

} // namespace

// ---- memberships -------------------------------------------------------------

int UdpLayer::join6(SockId id, const UdpGroup6 &g)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    if (!ip6::is_multicast(g.group.b)) return -EINVAL;
    for (int i = 0; i < s->n_groups6; i++)
        if (ip6::eq(s->groups6[i].group, g.group) && ip6::eq(s->groups6[i].source, g.source)) return -EADDRINUSE;
    if (s->n_groups6 == kMaxGroups) return -ENOBUFS;
    Filter6 before, after;
    group6_filter(g.group, &before);
    s->groups6[s->n_groups6++] = g;
    joined6_count(g.group, 1);
    group6_filter(g.group, &after);
    group6_changed(g.group, before, after);
    return 0;
}

int UdpLayer::leave6(SockId id, const UdpGroup6 &g_in)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    const UdpGroup6 g = g_in; // (close() passes one of the socket's own entries)
    for (int i = 0; i < s->n_groups6; i++) {
        if (!ip6::eq(s->groups6[i].group, g.group) || !ip6::eq(s->groups6[i].source, g.source)) continue;
        Filter6 before, after;
        group6_filter(g.group, &before);
        s->groups6[i] = s->groups6[--s->n_groups6];
        joined6_count(g.group, -1);
        group6_filter(g.group, &after);
        group6_changed(g.group, before, after);
        return 0;
    }
    return -EADDRNOTAVAIL;
}

void UdpLayer::joined6_count(const Ip6Addr &group, int delta)
{
    for (size_t i = 0; i < joined6_.size(); i++) {
        if (!ip6::eq(joined6_[i].group, group)) continue;
        joined6_[i].refs += uint32_t(delta);
        if (joined6_[i].refs == 0) {
            joined6_[i] = joined6_.back();
            joined6_.pop_back();
        }
        return;
    }
    if (delta > 0) joined6_.push_back(Joined6{group, uint32_t(delta)});
}

bool UdpLayer::group6_joined(const uint8_t *group) const
{
    for (const Joined6 &j : joined6_)
        if (ip6::eq(j.group.b, group)) return true;
    return false;
}

bool UdpLayer::group6_mac(const uint8_t *mac) const
{
    // 33:33 and the group's low 32 bits (RFC 2464 7).
    if (mac[0] != 0x33 || mac[1] != 0x33) return false;
    for (const Joined6 &j : joined6_)
        if (std::memcmp(j.group.b + 12, mac + 2, 4) == 0) return true;
    return false;
}

bool UdpLayer::mc_allow6(const UdpSock &s, const uint8_t *group, const uint8_t *src)
{
    bool member = false;
    for (int g = 0; g < s.n_groups6; g++) {
        if (!ip6::eq(s.groups6[g].group.b, group)) continue;
        if (ip6::is_unspecified(s.groups6[g].source.b) || ip6::eq(s.groups6[g].source.b, src)) return true;
        member = true; // a source filter that leaves src out (unless another membership lets it in)
    }
    return !member && s.mc_all;
}

void UdpLayer::group6_filter(const Ip6Addr &group, Filter6 *out) const
{
    out->joined = out->exclude = false;
    out->n = 0;
    for (const UdpSock &s : socks_) {
        if (!s.used) continue;
        for (int i = 0; i < s.n_groups6; i++) {
            if (!ip6::eq(s.groups6[i].group, group)) continue;
            out->joined = true;
            const Ip6Addr &src = s.groups6[i].source;
            if (ip6::is_unspecified(src.b))
                out->exclude = true;
            else if (out->n < kMaxSources6 && !listed(out->src, out->n, src))
                out->src[out->n++] = src;
        }
    }
    if (out->exclude) out->n = 0;
}

// ---- reports -------------------------------------------------------------------

void UdpLayer::group6_changed(const Ip6Addr &group, const Filter6 &b, const Filter6 &a)
{
    if (!reportable(group.b)) return;
    MldReport r;
    if (a.exclude != b.exclude) {
        // The mode changed (nobody left is INCLUDE {}: the leave).
        if (a.exclude)
            mld_add(r, kToExclude, group, nullptr, 0);
        else
            mld_add(r, kToInclude, group, a.src, a.n);
    } else if (!a.exclude) {
        // INCLUDE both: the sources that came and went.
        Ip6Addr diff[kMaxSources6];
        int n = 0;
        for (int i = 0; i < a.n; i++)
            if (!listed(b.src, b.n, a.src[i])) diff[n++] = a.src[i];
        if (n) mld_add(r, kAllowNew, group, diff, n);
        n = 0;
        for (int i = 0; i < b.n; i++)
            if (!listed(a.src, a.n, b.src[i])) diff[n++] = b.src[i];
        if (n) mld_add(r, kBlockOld, group, diff, n);
    } // EXCLUDE {} both: nothing a router needs to hear
    mld_flush(r);
}

void UdpLayer::mld_current(MldReport &r, const Ip6Addr &group)
{
    Filter6 f;
    group6_filter(group, &f);
    if (!f.joined || !reportable(group.b)) return;
    if (f.exclude)
        mld_add(r, kModeIsExclude, group, nullptr, 0);
    else
        mld_add(r, kModeIsInclude, group, f.src, f.n);
}

void UdpLayer::mld_add(MldReport &r, uint8_t type, const Ip6Addr &group, const Ip6Addr *src, int n)
{
    const unsigned rec_len = unsigned(sizeof(MldRecord)) + 16u * unsigned(n);
    for (int tries = 0; tries < 2; tries++) {
        if (!r.open) {
            if (!e_.link.alloc(&r.f)) return; // no frame: the record is lost (a router's next query asks again)
            r.open = true;
            r.len = 0;
            r.records = 0;
        }
        const unsigned room = std::min<unsigned>(r.f.room, kEthLen + e_.cfg.mtu);
        const unsigned head = kEthLen + kIp6Len + kHbhLen + unsigned(sizeof(MldV2ReportHdr));
        if (head + r.len + rec_len <= room) {
            uint8_t *p = r.f.data + head + r.len;
            MldRecord rec{type, 0, be16(uint16_t(n)), {}};
            std::memcpy(rec.group, group.b, 16);
            std::memcpy(p, &rec, sizeof rec);
            for (int i = 0; i < n; i++) std::memcpy(p + sizeof rec + 16u * unsigned(i), src[i].b, 16);
            r.len += rec_len;
            r.records++;
            return;
        }
        if (r.records == 0) return; // one record alone does not fit: nothing sensible to send
        mld_flush(r);               // a full frame goes; the record starts the next
    }
}

void UdpLayer::mld_flush(MldReport &r)
{
    if (!r.open) return;
    r.open = false;
    if (r.records == 0) {
        e_.link.release(r.f);
        return;
    }
    const unsigned icmp_len = unsigned(sizeof(MldV2ReportHdr)) + r.len;
    Ipv6 *ip = reinterpret_cast<Ipv6 *>(r.f.data + kEthLen);
    ip->vtf = be32(6u << 28);
    ip->payload_len = be16(uint16_t(kHbhLen + icmp_len));
    ip->next = kNextHopByHop;
    ip->hop_limit = 1;
    // RFC 3810 5.2.13: from the link-local address, :: while it has none
    // that is valid (tentative, or a duplicate).
    const OwnAddr6 &ll = e_.nd.link_local();
    const Ip6Addr src = ll.state == AddrState::kPreferred ? ll.addr : Ip6Addr{};
    std::memcpy(ip->src, src.b, 16);
    std::memcpy(ip->dst, kAllMldv2Routers.b, 16);
    // Hop-by-hop: next header ICMPv6, length 0 (8 bytes), Router Alert
    // (type 5, length 2, value 0: MLD), PadN of 0 bytes.
    uint8_t *h = r.f.data + kEthLen + kIp6Len;
    const uint8_t hbh[kHbhLen] = {kProtoIcmp6, 0, 5, 2, 0, 0, 1, 0};
    std::memcpy(h, hbh, kHbhLen);
    uint8_t *m = h + kHbhLen;
    MldV2ReportHdr hdr{kMldV2Report, 0, 0, 0, be16(r.records)};
    std::memcpy(m, &hdr, sizeof hdr);
    // The pseudo-header carries the final destination and ICMPv6 as next
    // header, whatever extension headers come between (RFC 8200 8.1).
    const uint16_t c =
        csum_finish(pseudo_sum6(src.b, kAllMldv2Routers.b, kProtoIcmp6, icmp_len) + csum_add(0, m, icmp_len));
    std::memcpy(m + 2, &c, 2);
    r.f.len = uint16_t(kEthLen + kIp6Len + kHbhLen + icmp_len);
    e_.stats.mld_out++;
    e_.ip6.send(r.f, e_.now_ns); // a group: its 33:33 MAC, no ND
}

// ---- queries -------------------------------------------------------------------

void UdpLayer::mld_query(const Ipv6 *ip, const uint8_t *msg, unsigned len, bool router_alert)
{
    // RFC 3810 5.1.14 and 8.1: from a link-local source, hop limit 1, with
    // the Router Alert option; 24 bytes (MLDv1) or 28 and its sources
    // (MLDv2); anything else is not a query a router of this link sent.
    // The destination is not checked (the IPv6 layer took it as ours: all
    // nodes, or a group joined).
    const bool v2 = len >= kQueryV2Len;
    if (!ip6::is_link_local(ip->src) || ip->hop_limit != 1 || !router_alert || (len != kQueryV1Len && !v2) ||
        (v2 && kQueryV2Len + 16u * (unsigned(msg[26]) << 8 | msg[27]) > len)) {
        e_.stats.mld_drop++;
        return;
    }
    const uint8_t *group = msg + 8;
    if (!ip6::is_unspecified(group) && !ip6::is_multicast(group)) {
        e_.stats.mld_drop++;
        return;
    }
    e_.stats.mld_query_in++;
    MldReport r;
    if (ip6::is_unspecified(group)) { // general: every group joined
        for (const Joined6 &j : joined6_) mld_current(r, j.group);
    } else { // group (and source) specific: that group's state, when joined
        mld_current(r, ip6::from(group));
    }
    mld_flush(r);
}

} // namespace mars::udp
