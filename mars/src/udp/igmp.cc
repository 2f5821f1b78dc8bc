// udp/igmp.cc: IPv4 multicast memberships of UDP sockets, which socket
// takes a datagram to a group (mc_allow4: Linux's rule, mars/README.md
// "UDP"), and the host side of IGMPv3 (RFC 3376): a state-change report
// when the stack's filter for a group changes (a first join, a last leave,
// sources added or dropped), and current-state reports answering queries. The stack's filter for a group is
// the union of its sockets' (RFC 3376 3.2): any member without a source
// filter makes it "exclude {}" (every source), else "include" the sources
// asked for. Joins and leaves are not on the packet path: they walk the
// socket table.
//
// Simplifications (mars/README.md "UDP"): a state-change report is sent once
// (not Robustness Variable times) and a query is answered at once (not after
// a random delay within Max Resp Time); IGMPv1/v2 queriers get v3 reports.
#include "udp/udp.h"

#include "base/checksum.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mars::udp {

using namespace wire;

namespace {

constexpr uint32_t kAllV3Routers = 0xe0000016u; // 224.0.0.22
constexpr uint8_t kIgmpQuery = 0x11, kIgmpV3Report = 0x22;
constexpr uint8_t kModeIsInclude = 1, kModeIsExclude = 2, kToInclude = 3, kToExclude = 4;
constexpr int kMaxSources = 64; // per group record we send

struct __attribute__((packed)) IgmpV3ReportHdr {
    uint8_t type, reserved;
    uint16_t csum;
    uint16_t reserved2;
    uint16_t n_records;
};

struct __attribute__((packed)) IgmpGroupRecord {
    uint8_t type, aux_len;
    uint16_t n_sources;
    uint32_t group;
};

} // namespace

int UdpLayer::join(SockId id, UdpGroup g)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    if (!ipv4_multicast(g.group)) return -EINVAL;
    for (int i = 0; i < s->n_groups; i++)
        if (s->groups[i].group == g.group && s->groups[i].source == g.source) return -EADDRINUSE;
    if (s->n_groups == kMaxGroups) return -ENOBUFS;
    s->groups[s->n_groups++] = g;
    joined4_count(g.group, 1);
    group_changed(g.group);
    return 0;
}

int UdpLayer::leave(SockId id, UdpGroup g)
{
    UdpSock *s = lookup(id);
    if (!s) return -EBADF;
    for (int i = 0; i < s->n_groups; i++) {
        if (s->groups[i].group != g.group || s->groups[i].source != g.source) continue;
        s->groups[i] = s->groups[--s->n_groups];
        joined4_count(g.group, -1);
        group_changed(g.group);
        return 0;
    }
    return -EADDRNOTAVAIL;
}

void UdpLayer::joined4_count(uint32_t group, int delta)
{
    for (size_t i = 0; i < joined4_.size(); i++) {
        if (joined4_[i].group != group) continue;
        joined4_[i].refs += uint32_t(delta);
        if (joined4_[i].refs == 0) {
            joined4_[i] = joined4_.back();
            joined4_.pop_back();
        }
        return;
    }
    if (delta > 0) joined4_.push_back(Joined4{group, uint32_t(delta)});
}

bool UdpLayer::group4_joined(uint32_t group) const
{
    for (const Joined4 &j : joined4_)
        if (j.group == group) return true;
    return false;
}

bool UdpLayer::mc_allow4(const UdpSock &s, uint32_t group, uint32_t src)
{
    bool member = false;
    for (int g = 0; g < s.n_groups; g++) {
        if (s.groups[g].group != group) continue;
        if (!s.groups[g].source || s.groups[g].source == src) return true;
        member = true; // a source filter that leaves src out (unless another membership lets it in)
    }
    return !member && s.mc_all;
}

bool UdpLayer::group_filter(uint32_t group, bool *any, uint32_t *sources, int *n, int out_max) const
{
    bool joined = false;
    *any = false;
    *n = 0;
    for (const UdpSock &s : socks_) {
        if (!s.used) continue;
        for (int i = 0; i < s.n_groups; i++) {
            if (s.groups[i].group != group) continue;
            joined = true;
            if (!s.groups[i].source) {
                *any = true;
                continue;
            }
            if (std::find(sources, sources + *n, s.groups[i].source) == sources + *n && *n < out_max)
                sources[(*n)++] = s.groups[i].source;
        }
    }
    if (*any) *n = 0;
    return joined;
}

void UdpLayer::group_changed(uint32_t group)
{
    // 224.0.0.0/24 (link-local control groups) are never reported (RFC 3376 5).
    if ((group >> 8) == 0xe00000u) return;
    send_report(&group, 1, true);
}

void UdpLayer::send_report(const uint32_t *groups, int n_groups, bool change)
{
    int g = 0;
    while (g < n_groups) {
        PacketRef f;
        if (!e_.link.alloc(&f)) return;
        const unsigned ip_hlen = kIpLen + 4; // with the Router Alert option (RFC 2113)
        const unsigned room = std::min<unsigned>(f.room, kEthLen + e_.cfg.mtu);
        uint8_t *p = f.data + kEthLen + ip_hlen;
        unsigned len = sizeof(IgmpV3ReportHdr);
        uint16_t records = 0;
        for (; g < n_groups; g++) {
            uint32_t src[kMaxSources];
            int n = 0;
            bool any = false;
            const bool joined = group_filter(groups[g], &any, src, &n, kMaxSources);
            const unsigned rec_len = sizeof(IgmpGroupRecord) + 4u * unsigned(n);
            if (kEthLen + ip_hlen + len + rec_len > room) break;
            IgmpGroupRecord *r = reinterpret_cast<IgmpGroupRecord *>(p + len);
            uint8_t type;
            if (change)
                type = joined && any ? kToExclude : kToInclude; // nobody: TO_IN {} (a leave)
            else
                type = any ? kModeIsExclude : kModeIsInclude;
            *r = IgmpGroupRecord{type, 0, be16(uint16_t(n)), be32(groups[g])};
            for (int i = 0; i < n; i++) {
                const uint32_t v = be32(src[i]);
                std::memcpy(p + len + sizeof(IgmpGroupRecord) + 4u * unsigned(i), &v, 4);
            }
            len += rec_len;
            records++;
        }
        if (records == 0) { // one record alone does not fit: nothing sensible to send
            e_.link.release(f);
            return;
        }
        IgmpV3ReportHdr *h = reinterpret_cast<IgmpV3ReportHdr *>(p);
        *h = IgmpV3ReportHdr{kIgmpV3Report, 0, 0, 0, be16(records)};
        h->csum = csum_finish(csum_add(0, p, len));
        Ipv4 *ip = reinterpret_cast<Ipv4 *>(f.data + kEthLen);
        *ip = Ipv4{0x46, 0xc0, be16(uint16_t(ip_hlen + len)), 0, be16(kIpDf), 1, kProtoIgmp, 0, be32(e_.cfg.ip),
                   be32(kAllV3Routers)};
        const uint8_t ra[4] = {0x94, 0x04, 0, 0};
        std::memcpy(ip + 1, ra, 4);
        ip->csum = csum_finish(csum_add(0, ip, ip_hlen));
        f.len = uint16_t(kEthLen + ip_hlen + len);
        e_.stats.igmp_out++;
        send_group_frame(f, kAllV3Routers);
    }
}

void UdpLayer::igmp_input(PacketRef &f, const Ipv4 *ip, unsigned ihl, unsigned total)
{
    const unsigned len = total - ihl;
    const uint8_t *p = f.data + kEthLen + ihl;
    if (len < 8 || !csum_ok(csum_add(0, p, len))) {
        e_.stats.drop_ip_proto++;
        if (!e_.link.pass_up(f, Unclaimed::kOther)) e_.link.release(f);
        return;
    }
    e_.stats.igmp_in++;
    if (p[0] == kIgmpQuery) {
        uint32_t group;
        std::memcpy(&group, p + 4, 4);
        group = be32(group);
        if (group) { // group-specific (or group-and-source-specific): that group, if joined
            bool any;
            uint32_t src[1];
            int n;
            if (group_filter(group, &any, src, &n, 1)) send_report(&group, 1, false);
        } else { // general: every group joined (but the link-local control groups)
            uint32_t groups[256];
            int n = 0;
            for (const UdpSock &s : socks_) {
                if (!s.used) continue;
                for (int i = 0; i < s.n_groups && n < 256; i++) {
                    const uint32_t gr = s.groups[i].group;
                    if ((gr >> 8) != 0xe00000u && std::find(groups, groups + n, gr) == groups + n) groups[n++] = gr;
                }
            }
            if (n) send_report(groups, n, false);
        }
    }
    (void)ip;
    // Sharing: the other stack keeps its own memberships and answers for them.
    if (!e_.link.pass_up(f, Unclaimed::kOther)) e_.link.release(f);
}

} // namespace mars::udp
