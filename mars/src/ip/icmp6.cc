// icmp6.cc: ICMPv6 (RFC 4443) of the IPv6 layer: input (checksum with the
// pseudo-header, echo, errors, ND to nd.cc, MLD queries to the upper
// layer), error generation with a rate limit, the path MTU table (RFC 8201).
#include "ip/icmp6.h"

#include "base/checksum.h"
#include "ip/ipv6.h"

#include <algorithm>
#include <cstring>

namespace mars {

using namespace wire;

// ---- path MTU ---------------------------------------------------------------

uint32_t PathMtu6::get(const uint8_t *dst, uint64_t now_ns) const
{
    for (const Entry &e : e_)
        if (e.mtu && now_ns < e.expires_ns && ip6::eq(e.dst.b, dst)) return e.mtu;
    return link_mtu_;
}

uint32_t PathMtu6::lower(const uint8_t *dst, uint32_t mtu, uint64_t now_ns)
{
    if (mtu < kMinMtu) mtu = kMinMtu; // RFC 8201 4: never below the IPv6 minimum
    const uint32_t cur = get(dst, now_ns);
    if (mtu >= cur) return cur; // a report never raises it (RFC 8201 4)
    Entry *slot = nullptr;
    for (Entry &e : e_)
        if (e.mtu && ip6::eq(e.dst.b, dst)) {
            slot = &e;
            break;
        }
    if (!slot) {
        // A free or expired entry, else the one that expires first.
        for (Entry &e : e_) {
            if (!e.mtu || now_ns >= e.expires_ns) {
                slot = &e;
                break;
            }
            if (!slot || e.expires_ns < slot->expires_ns) slot = &e;
        }
    }
    slot->dst = ip6::from(dst);
    slot->mtu = mtu;
    slot->expires_ns = now_ns + kAgeNs;
    return mtu;
}

void PathMtu6::clear()
{
    for (Entry &e : e_) e = Entry{};
}

// ---- input -------------------------------------------------------------------

void Ipv6Layer::input_icmp(PacketRef &f, unsigned off, unsigned len, bool router_alert, uint64_t now_ns)
{
    const Ipv6 *ip = reinterpret_cast<const Ipv6 *>(f.data + kEthLen);
    const uint8_t *msg = f.data + off;
    if (len < sizeof(Icmp6) || !csum_ok(pseudo_sum6(ip->src, ip->dst, kProtoIcmp6, len) + csum_add(0, msg, len))) {
        if (len >= 1 && msg[0] == kMldQuery) stats_.mld_drop++; // the MLD counters see every query
        pass_or_drop(f, &stats_.icmp6_drop);
        return;
    }
    stats_.icmp6_in++;
    const uint8_t type = msg[0];
    switch (type) {
    case kNdNeighborSolicit:
    case kNdNeighborAdvert: {
        // RFC 4861 7.1: hop limit 255 (nobody routed it here), code 0.
        if (ip->hop_limit != 255 || msg[1] != 0) {
            stats_.nd_drop_invalid++;
        } else if (type == kNdNeighborSolicit) {
            nd_.input_ns(ip, msg, len, reinterpret_cast<const Eth *>(f.data)->src, now_ns);
        } else {
            nd_.input_na(ip, msg, len, now_ns);
        }
        // Sharing: the kernel learns from it and answers (as for ARP).
        pass_or_drop(f, nullptr);
        return;
    }
    case kIcmp6EchoRequest:
        stats_.icmp6_echo_in++;
        if (link_.pass_up(f, Unclaimed::kIpv6)) return; // the kernel answers pings when it shares the address
        if (nd_.is_ours(ip->dst)) echo_reply(ip, msg, len, now_ns);
        link_.release(f);
        return;
    case kIcmp6Unreach:
        stats_.icmp6_unreach_in++;
        input_icmp_error(msg, len, now_ns);
        break;
    case kIcmp6PacketTooBig:
        stats_.icmp6_ptb_in++;
        input_icmp_error(msg, len, now_ns);
        break;
    case kIcmp6TimeExceeded:
        stats_.icmp6_time_exceeded_in++;
        input_icmp_error(msg, len, now_ns);
        break;
    case kIcmp6ParamProblem:
        stats_.icmp6_param_problem_in++;
        input_icmp_error(msg, len, now_ns);
        break;
    case kMldQuery:
        // Memberships are UDP's: the upper layer validates and answers.
        // Sharing, the kernel answers for its own memberships too.
        upper_.ip6_mld_query(ip, msg, len, router_alert);
        break;
    case kMldV1Report:
    case kMldV1Done:
    case kMldV2Report:
        stats_.mld_report_in++; // other listeners': a host has nothing to do with them (RFC 3810 6.2, no suppression)
        break;
    default:
        break; // echo replies, router advertisements, ...: nothing to do here
    }
    // Sharing: the kernel gets it too (an error about one of its sockets).
    pass_or_drop(f, nullptr);
}

void Ipv6Layer::input_icmp_error(const uint8_t *msg, unsigned len, uint64_t now_ns)
{
    if (len < sizeof(Icmp6) + kIp6Len) return;
    const Ipv6 *oip = reinterpret_cast<const Ipv6 *>(msg + sizeof(Icmp6));
    if (nd_.find_own(oip->src) < 0) return; // not a packet of ours
    Icmp6Error e{};
    e.local = ip6::from(oip->src);
    e.remote = ip6::from(oip->dst);
    e.proto = oip->next;
    e.type = msg[0];
    e.code = msg[1];
    if (e.type == kIcmp6PacketTooBig) {
        uint32_t mtu;
        std::memcpy(&mtu, msg + 4, 4);
        e.mtu = pmtu_.lower(oip->dst, be32(mtu), now_ns);
    }
    // The quoted upper header (we send no extension headers: it follows).
    const unsigned l4 = sizeof(Icmp6) + kIp6Len;
    if ((e.proto == kProtoTcp || e.proto == kProtoUdp) && len >= l4 + 8) {
        uint16_t sp, dp;
        std::memcpy(&sp, msg + l4, 2);
        std::memcpy(&dp, msg + l4 + 2, 2);
        e.local_port = be16(sp);
        e.remote_port = be16(dp);
        if (e.proto == kProtoTcp) {
            uint32_t seq;
            std::memcpy(&seq, msg + l4 + 4, 4);
            e.seq = be32(seq);
        }
    }
    upper_.ip6_error(e);
}

// ---- output ------------------------------------------------------------------

void Ipv6Layer::echo_reply(const Ipv6 *ip, const uint8_t *msg, unsigned len, uint64_t now_ns)
{
    PacketRef out;
    if (!link_.alloc(&out)) return;
    if (kEthLen + kIp6Len + len > out.room) {
        link_.release(out);
        return;
    }
    Ipv6 *oip = reinterpret_cast<Ipv6 *>(out.data + kEthLen);
    oip->vtf = be32(6u << 28);
    oip->payload_len = be16(uint16_t(len));
    oip->next = kProtoIcmp6;
    oip->hop_limit = 64;
    std::memcpy(oip->src, ip->dst, 16);
    std::memcpy(oip->dst, ip->src, 16);
    uint8_t *r = out.data + kEthLen + kIp6Len;
    std::memcpy(r, msg, len);
    Icmp6 *ic = reinterpret_cast<Icmp6 *>(r);
    ic->type = kIcmp6EchoReply;
    ic->csum = 0;
    ic->csum = csum_finish(pseudo_sum6(oip->src, oip->dst, kProtoIcmp6, len) + csum_add(0, r, len));
    out.len = uint16_t(kEthLen + kIp6Len + len);
    stats_.icmp6_out++;
    send(out, now_ns);
}

void Ipv6Layer::send_error(const uint8_t *orig, unsigned len, uint8_t type, uint8_t code, uint32_t param,
                           uint64_t now_ns)
{
    if (len < kIp6Len) return;
    const Ipv6 *oip = reinterpret_cast<const Ipv6 *>(orig);
    // RFC 4443 2.4 (e).
    if (ip6::is_unspecified(oip->src) || ip6::is_multicast(oip->src)) return;
    if (ip6::is_multicast(oip->dst) && type != kIcmp6PacketTooBig && !(type == kIcmp6ParamProblem && code == kParamOption))
        return;
    if (oip->next == kProtoIcmp6 && len > kIp6Len && orig[kIp6Len] < 128) return; // never about an error
    const Ip6Addr *src = nd_.is_ours(oip->dst) ? nullptr : nd_.source_for(oip->src);
    Ip6Addr own;
    if (!src) {
        if (!nd_.is_ours(oip->dst)) return;
        own = ip6::from(oip->dst);
        src = &own;
    }
    if (!rate_.allow(now_ns)) { // RFC 4443 2.4 (f)
        stats_.icmp6_rate_limited++;
        return;
    }
    PacketRef out;
    if (!link_.alloc(&out)) return;
    // As much of the original as fits in the minimum MTU (RFC 4443 2.4 (c)).
    const unsigned room = out.room - kEthLen - kIp6Len - sizeof(Icmp6);
    const unsigned quote = std::min({len, 1280u - kIp6Len - unsigned(sizeof(Icmp6)), room});
    const unsigned plen = sizeof(Icmp6) + quote;
    Ipv6 *ip = reinterpret_cast<Ipv6 *>(out.data + kEthLen);
    ip->vtf = be32(6u << 28);
    ip->payload_len = be16(uint16_t(plen));
    ip->next = kProtoIcmp6;
    ip->hop_limit = 64;
    std::memcpy(ip->src, src->b, 16);
    std::memcpy(ip->dst, oip->src, 16);
    uint8_t *m = out.data + kEthLen + kIp6Len;
    Icmp6 *ic = reinterpret_cast<Icmp6 *>(m);
    ic->type = type;
    ic->code = code;
    ic->csum = 0;
    ic->data = be32(param);
    std::memmove(m + sizeof(Icmp6), orig, quote);
    ic->csum = csum_finish(pseudo_sum6(ip->src, ip->dst, kProtoIcmp6, plen) + csum_add(0, m, plen));
    out.len = uint16_t(kEthLen + kIp6Len + plen);
    stats_.icmp6_out++;
    send(out, now_ns);
}

} // namespace mars
