// ipv6.cc: IPv6 input (header, destination, extension headers per RFC 8200)
// and output framing. Every length is checked against the frame before it
// is read (a frame is hostile until proven otherwise). ICMPv6: icmp6.cc.
#include "ip/ipv6.h"

#include <cstring>

namespace mars {

using namespace wire;

namespace {

constexpr int kMaxExtHeaders = 16; // a chain longer than this is refused (no legitimate packet has one)

} // namespace

Ipv6Layer::Ipv6Layer(const StackConfig &c, Link &link, NeighborDiscovery &nd, StackStats &stats, Ipv6Upper &upper)
    : mac_(c.mac), link_(link), nd_(nd), stats_(stats), upper_(upper), router_(c, nd), pmtu_(c.mtu)
{
}

void Ipv6Layer::clear()
{
    pmtu_.clear();
    rate_.clear();
}

bool Ipv6Layer::accepts_mac(const uint8_t *d) const
{
    if (d[0] != 0x33 || d[1] != 0x33) return false;
    if (d[2] == 0 && d[3] == 0 && d[4] == 0 && d[5] == 1) return true; // all-nodes
    if (d[2] == 0xff)
        for (int i = 0; i < nd_.n_addrs(); i++)
            if (std::memcmp(nd_.addr(i).addr.b + 13, d + 3, 3) == 0) return true; // a solicited-node group of ours
    return upper_.ip6_group_mac(d); // a group a socket joined
}

void Ipv6Layer::pass_or_drop(PacketRef &f, uint64_t *counter)
{
    if (link_.pass_up(f, Unclaimed::kIpv6)) return;
    if (counter) (*counter)++;
    link_.release(f);
}

void Ipv6Layer::input(PacketRef &f, uint64_t now_ns)
{
    const unsigned avail = f.len - kEthLen;
    if (avail < kIp6Len) {
        pass_or_drop(f, &stats_.ip6_drop_header);
        return;
    }
    const Ipv6 *ip = reinterpret_cast<const Ipv6 *>(f.data + kEthLen);
    const unsigned plen = be16(ip->payload_len);
    // Payload length 0 is a jumbogram's (RFC 2675): not on this link.
    if ((be32(ip->vtf) >> 28) != 6 || plen == 0 || plen > avail - kIp6Len || ip6::is_multicast(ip->src)) {
        pass_or_drop(f, &stats_.ip6_drop_header);
        return;
    }
    const bool ours = nd_.find_own(ip->dst) >= 0;
    const bool joined = ip6::is_multicast(ip->dst) && upper_.ip6_group_joined(ip->dst);
    if (!ours && !joined && !nd_.is_our_solicited_node(ip->dst) && !ip6::eq(ip->dst, ip6::all_nodes().b)) {
        pass_or_drop(f, &stats_.ip6_drop_not_ours); // the other stack's addresses and groups, sharing
        return;
    }
    stats_.ip6_in++;
    uint8_t next = ip->next;
    unsigned off = kEthLen + kIp6Len, nh_ptr = 6;
    const unsigned end = kEthLen + kIp6Len + plen;
    bool router_alert = false;
    if (!walk_ext(f, &next, &off, end, &nh_ptr, &router_alert, now_ns)) return;
    if (next == kProtoIcmp6) {
        input_icmp(f, off, end - off, router_alert, now_ns);
        return;
    }
    // Upper protocols only to an address of ours that is usable (RFC 4862
    // 5.4: nothing but ND for a tentative one) or to a group joined (no
    // ICMPv6 error answers a group: send_error refuses, RFC 4443 2.4 (e)).
    const bool usable = nd_.is_ours(ip->dst) || joined;
    if (usable && upper_.ip6_input(f, Ip6Rx{ip, off, end - off, next})) return;
    if (link_.pass_up(f, Unclaimed::kIpv6)) return; // TCP/UDP over IPv6 are the kernel's, sharing
    stats_.ip6_drop_proto++;
    if (usable && next != kNextNone) {
        if (next == kProtoTcp || next == kProtoUdp) send_error(f.data + kEthLen, end - kEthLen, kIcmp6Unreach, kUnreachPort, 0, now_ns);
        else send_error(f.data + kEthLen, end - kEthLen, kIcmp6ParamProblem, kParamNextHeader, nh_ptr, now_ns);
    }
    link_.release(f);
}

bool Ipv6Layer::walk_ext(PacketRef &f, uint8_t *next, unsigned *off, unsigned end, unsigned *nh_ptr, bool *router_alert,
                         uint64_t now_ns)
{
    const uint8_t *d = f.data;
    auto refuse = [&](uint8_t code, unsigned ptr, uint64_t *counter) {
        if (link_.pass_up(f, Unclaimed::kIpv6)) return false;
        (*counter)++;
        send_error(d + kEthLen, end - kEthLen, kIcmp6ParamProblem, code, ptr, now_ns);
        link_.release(f);
        return false;
    };
    for (int n = 0;; n++) {
        const uint8_t h = *next;
        if (h != kNextHopByHop && h != kNextDestOpts && h != kNextRouting && h != kNextFragment) return true;
        if (h == kNextHopByHop && n > 0) // RFC 8200 4.1: hop-by-hop only right after the IPv6 header
            return refuse(kParamNextHeader, *nh_ptr, &stats_.ip6_drop_ext);
        if (h == kNextFragment) {
            // Nothing here reassembles: TCP uses path MTU discovery and the
            // peer's fragments are the kernel's when it shares the port.
            pass_or_drop(f, &stats_.ip6_drop_fragment);
            return false;
        }
        if (n >= kMaxExtHeaders || end - *off < 8) {
            pass_or_drop(f, &stats_.ip6_drop_ext);
            return false;
        }
        const uint8_t *p = d + *off;
        const unsigned hlen = (p[1] + 1u) * 8u;
        if (hlen > end - *off) {
            pass_or_drop(f, &stats_.ip6_drop_ext);
            return false;
        }
        if (h == kNextRouting) {
            // Segments left: we would have to forward it. No routing type is
            // processed here (type 0 is deprecated, RFC 5095): refused as
            // unrecognised, pointing at the type (RFC 8200 4.4).
            if (p[3] != 0) return refuse(kParamHeader, *off - kEthLen + 2, &stats_.ip6_drop_routing);
        } else if (!options_ok(f, *off, hlen, end, now_ns, h == kNextHopByHop ? router_alert : nullptr)) {
            return false;
        }
        *nh_ptr = *off - kEthLen;
        *next = p[0];
        *off += hlen;
    }
}

// Hop-by-hop or destination options (RFC 8200 4.2): Pad1 and PadN skipped,
// any other option handled as unrecognised by its two high bits: 00 skip,
// 01 discard, 10 discard and parameter problem, 11 the same unless the
// destination is multicast.
bool Ipv6Layer::options_ok(PacketRef &f, unsigned off, unsigned hlen, unsigned end, uint64_t now_ns,
                           bool *router_alert)
{
    const uint8_t *d = f.data;
    const unsigned stop = off + hlen;
    const bool mcast = ip6::is_multicast(reinterpret_cast<const Ipv6 *>(d + kEthLen)->dst);
    for (unsigned i = off + 2; i < stop;) {
        const uint8_t type = d[i];
        if (type == 0) { // Pad1
            i++;
            continue;
        }
        if (stop - i < 2 || d[i + 1] > stop - i - 2) {
            pass_or_drop(f, &stats_.ip6_drop_ext);
            return false;
        }
        const unsigned olen = 2u + d[i + 1];
        if (type == 5 && router_alert) { // Router Alert (RFC 2711): MLD's is value 0 (the MLD code checks it)
            if (olen == 4 && d[i + 2] == 0 && d[i + 3] == 0) *router_alert = true;
        } else if (type != 1) { // not PadN: unrecognised
            const unsigned action = type >> 6;
            if (action != 0) { // discard; 10, and 11 to a unicast destination, answer
                if (link_.pass_up(f, Unclaimed::kIpv6)) return false;
                stats_.ip6_drop_ext++;
                if (action == 2 || (action == 3 && !mcast))
                    send_error(d + kEthLen, end - kEthLen, kIcmp6ParamProblem, kParamOption, i - kEthLen, now_ns);
                link_.release(f);
                return false;
            }
        }
        i += olen;
    }
    return true;
}

bool Ipv6Layer::send(PacketRef &frame, uint64_t now_ns)
{
    Eth *eth = reinterpret_cast<Eth *>(frame.data);
    std::memcpy(eth->src, mac_.b, 6);
    eth->type = be16(kEtherIpv6);
    const Ipv6 *ip = reinterpret_cast<const Ipv6 *>(frame.data + kEthLen);
    if (ip6::is_multicast(ip->dst)) {
        const MacAddr m = ip6::multicast_mac(ip->dst);
        std::memcpy(eth->dst, m.b, 6);
        link_.queue(frame);
        return true;
    }
    Ip6Addr hop;
    if (!router_.next_hop(ip->dst, &hop)) {
        stats_.ip6_drop_no_route++;
        link_.release(frame);
        return false;
    }
    const MacAddr *mac = nd_.lookup(hop, now_ns);
    if (!mac) {
        nd_.hold(hop, frame);
        return true;
    }
    std::memcpy(eth->dst, mac->b, 6);
    link_.queue(frame);
    return true;
}

} // namespace mars
