// ipv4.cc: IPv4 and ICMP. Input validates every length against the frame
// before reading (a frame is hostile until proven otherwise).
#include "ip/ipv4.h"

#include "base/checksum.h"

#include <algorithm>
#include <cstring>

namespace mars {

using namespace wire;

namespace {

uint32_t load_be32(const void *p)
{
    uint32_t v;
    std::memcpy(&v, p, 4);
    return be32(v);
}

// Why a datagram no socket here claims goes to the other stack (sharing).
Unclaimed unclaimed_reason(uint8_t proto)
{
    return proto == kProtoUdp ? Unclaimed::kUdp : proto == kProtoIcmp ? Unclaimed::kIcmp : Unclaimed::kOther;
}

} // namespace

Ipv4Layer::Ipv4Layer(const StackConfig &c, Link &link, ArpResolver &arp, const Router &router, StackStats &stats,
                     Ipv4Upper &upper)
    : ip_(c.ip), mac_(c.mac), link_(link), arp_(arp), router_(router), stats_(stats), upper_(upper)
{
}

void Ipv4Layer::input(PacketRef &f, uint64_t now_ns)
{
    const unsigned avail = f.len - kEthLen;
    if (avail < kIpLen) {
        stats_.drop_ip_header++;
        link_.release(f);
        return;
    }
    const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(f.data + kEthLen);
    const unsigned ihl = (ip->ver_ihl & 0xf) * 4u;
    const unsigned total = be16(ip->total_len);
    if ((ip->ver_ihl >> 4) != 4 || ihl < kIpLen || ihl > avail || total < ihl || total > avail) {
        stats_.drop_ip_header++;
        link_.release(f);
        return;
    }
    if (!(f.flags & kRxIpCsumGood) && !csum_ok(csum_add(0, ip, ihl))) {
        stats_.drop_ip_csum++;
        link_.release(f);
        return;
    }
    if (be32(ip->dst) != ip_ &&
        !(ipv4_multicast(be32(ip->dst)) && datagram_ && (ip->proto == kProtoUdp || ip->proto == kProtoIgmp))) {
        // (A UDP or IGMP datagram to a group goes on: UDP decides who joined.)
        if (link_.pass_up(f, unclaimed_reason(ip->proto))) return; // broadcast, multicast, the other stack's addresses
        stats_.drop_not_ours++;
        link_.release(f);
        return;
    }
    if (be16(ip->frag) & (kIpMf | kIpOffsetMask)) {
        if (link_.pass_up(f, unclaimed_reason(ip->proto))) return; // the other stack reassembles
        stats_.drop_ip_fragment++; // TCP uses path MTU discovery; we never reassemble
        link_.release(f);
        return;
    }
    if (ip->ttl == 0) {
        stats_.drop_ip_ttl++;
        link_.release(f);
        return;
    }
    switch (ip->proto) {
    case kProtoTcp:
        upper_.tcp_input(f, ip, ihl, total);
        return;
    case kProtoIcmp:
        input_icmp(f, ip, ihl, total, now_ns);
        return;
    case kProtoUdp:
        if (!datagram_) break;
        datagram_->udp_input(f, ip, ihl, total);
        return;
    case kProtoIgmp:
        if (!datagram_) break;
        datagram_->igmp_input(f, ip, ihl, total);
        return;
    default:
        break;
    }
    if (link_.pass_up(f, unclaimed_reason(ip->proto))) return;
    stats_.drop_ip_proto++;
    // RFC 1122 3.2.2.1: protocol unreachable.
    send_icmp_unreach(f.data + kEthLen, total, 2, now_ns);
    link_.release(f);
}

void Ipv4Layer::send(PacketRef &frame, uint32_t hop, uint64_t now_ns)
{
    Eth *eth = reinterpret_cast<Eth *>(frame.data);
    std::memcpy(eth->src, mac_.b, 6);
    eth->type = be16(kEtherIpv4);
    const MacAddr *mac = arp_.lookup(hop, now_ns);
    if (!mac) {
        arp_.hold(hop, frame, now_ns);
        return;
    }
    std::memcpy(eth->dst, mac->b, 6);
    link_.queue(frame);
}

// ---- ICMP ------------------------------------------------------------------

void Ipv4Layer::send_icmp_unreach(const uint8_t *orig, unsigned len, uint8_t code, uint64_t now_ns)
{
    const Ipv4 *oip = reinterpret_cast<const Ipv4 *>(orig);
    const uint32_t dst = be32(oip->src);
    const uint32_t hop = router_.next_hop(dst);
    if (!hop || dst == 0 || (dst >> 28) == 14 || dst == 0xffffffffu) return;
    PacketRef out;
    if (!link_.alloc(&out)) return;
    // RFC 1812 4.3.2.3: as much of the original as fits in 576 bytes; we
    // quote the header and 8 bytes (RFC 792), enough for TCP to match.
    const unsigned quote = std::min<unsigned>(len, (oip->ver_ihl & 0xf) * 4u + 8);
    const unsigned ip_len = kIpLen + sizeof(Icmp) + quote;
    if (kEthLen + ip_len > out.room) {
        link_.release(out);
        return;
    }
    Ipv4 *ip = reinterpret_cast<Ipv4 *>(out.data + kEthLen);
    *ip = Ipv4{0x45, 0, be16(uint16_t(ip_len)), 0, 0, 64, kProtoIcmp, 0, be32(ip_), oip->src};
    ip->csum = csum_finish(csum_add(0, ip, kIpLen));
    Icmp *ic = reinterpret_cast<Icmp *>(ip + 1);
    *ic = Icmp{kIcmpUnreach, code, 0, 0, 0};
    std::memcpy(ic + 1, orig, quote);
    ic->csum = csum_finish(csum_add(0, ic, sizeof(Icmp) + quote));
    out.len = uint16_t(kEthLen + ip_len);
    stats_.icmp_out++;
    send(out, hop, now_ns);
}

void Ipv4Layer::input_icmp(PacketRef &f, const Ipv4 *ip, unsigned ihl, unsigned total, uint64_t now_ns)
{
    const unsigned len = total - ihl;
    uint8_t *p = f.data + kEthLen + ihl;
    if (len < sizeof(Icmp) || !csum_ok(csum_add(0, p, len))) {
        stats_.drop_icmp++;
        link_.release(f);
        return;
    }
    const Icmp *ic = reinterpret_cast<const Icmp *>(p);
    if (ic->type == kIcmpEcho && ic->code == 0) {
        stats_.icmp_echo_in++;
        // Sharing the address: one stack answers pings, the other one.
        if (link_.pass_up(f, Unclaimed::kIcmp)) return;
        const uint32_t src = be32(ip->src);
        const uint32_t hop = router_.next_hop(src);
        PacketRef out;
        if (hop && kEthLen + total <= 65535 && link_.alloc(&out)) {
            if (kEthLen + kIpLen + len > out.room) {
                link_.release(out);
            } else {
                Ipv4 *oip = reinterpret_cast<Ipv4 *>(out.data + kEthLen);
                *oip = Ipv4{0x45, ip->tos, be16(uint16_t(kIpLen + len)), 0, 0, 64, kProtoIcmp, 0,
                            be32(ip_), ip->src};
                oip->csum = csum_finish(csum_add(0, oip, kIpLen));
                Icmp *r = reinterpret_cast<Icmp *>(oip + 1);
                std::memcpy(r, p, len);
                r->type = kIcmpEchoReply;
                r->csum = 0;
                r->csum = csum_finish(csum_add(0, r, len));
                out.len = uint16_t(kEthLen + kIpLen + len);
                stats_.icmp_out++;
                send(out, hop, now_ns);
            }
        }
        link_.release(f);
        return;
    }
    if ((ic->type == kIcmpUnreach || ic->type == kIcmpParamProblem) && len >= sizeof(Icmp) + kIpLen + 8) {
        if (ic->type == kIcmpUnreach) stats_.icmp_unreach_in++;
        const Ipv4 *oip = reinterpret_cast<const Ipv4 *>(ic + 1);
        const unsigned oihl = (oip->ver_ihl & 0xf) * 4u;
        const bool ours = oihl >= kIpLen && len >= sizeof(Icmp) + oihl + 8 && be32(oip->src) == ip_;
        const uint8_t *l4 = reinterpret_cast<const uint8_t *>(oip) + oihl;
        if (ours && oip->proto == kProtoTcp && ic->type == kIcmpUnreach) {
            const Tcp *th = reinterpret_cast<const Tcp *>(l4);
            upper_.tcp_icmp_error(IcmpTcpError{be32(oip->dst), be16(th->sport), be16(th->dport),
                                               load_be32(&th->seq), ic->code, be16(ic->seq_or_mtu)});
        } else if (ours && oip->proto == kProtoUdp && datagram_) {
            const Udp *uh = reinterpret_cast<const Udp *>(l4);
            datagram_->udp_icmp_error(
                IcmpUdpError{ip_, be32(oip->dst), be16(uh->sport), be16(uh->dport), ic->type, ic->code});
        }
        // Sharing: the other stack gets it too (an error about one of its
        // connections; one about ours it finds no socket for and ignores).
        if (!link_.pass_up(f, Unclaimed::kIcmp)) link_.release(f);
        return;
    }
    // Echo replies, time exceeded and the rest: nothing to do (the other stack's, sharing).
    if (!link_.pass_up(f, Unclaimed::kIcmp)) link_.release(f);
}

} // namespace mars
