// tcp/tcp6.cc: TCP over IPv6's own part (tcp6.h): header image, pseudo-header
// checksum, input checks, the reset for a segment nobody holds.
#include "tcp/tcp6.h"

#include "base/checksum.h"
#include "base/flow_table.h"
#include "base/secret.h"

#include <cstring>

namespace mars::tcp6 {

using namespace wire;

uint32_t flow_label(const Ip6Addr &src, const Ip6Addr &dst, uint16_t sport, uint16_t dport, const uint64_t key[2])
{
    uint32_t h = crc32c(0, src.b, 16);
    h = crc32c(h, dst.b, 16);
    const uint16_t ports[2] = {sport, dport};
    h = crc32c(h, ports, sizeof ports);
    h = crc32c(h, key, 16);
    const uint32_t label = (h ^ (h >> 20)) & 0xfffff;
    return label ? label : 1;
}

void write_headers(uint8_t *p, const MacAddr &mac, const Hdr6 &h)
{
    Eth *eth = reinterpret_cast<Eth *>(p);
    std::memset(eth->dst, 0, 6);
    std::memcpy(eth->src, mac.b, 6);
    eth->type = be16(kEtherIpv6);
    Ipv6 *ip = reinterpret_cast<Ipv6 *>(p + kEthLen);
    ip->vtf = be32((6u << 28) | (uint32_t(h.tclass) << 20) | (h.flow_label & 0xfffff));
    ip->payload_len = 0;
    ip->next = kProtoTcp;
    ip->hop_limit = h.hop_limit;
    std::memcpy(ip->src, h.src.b, 16);
    std::memcpy(ip->dst, h.dst.b, 16);
    Tcp *th = reinterpret_cast<Tcp *>(p + kEthLen + kIp6Len);
    *th = Tcp{be16(h.sport), be16(h.dport), 0, 0, 0, 0, 0, 0, 0};
}

void finish(uint8_t *p, unsigned tcp_len)
{
    Ipv6 *ip = reinterpret_cast<Ipv6 *>(p + kEthLen);
    ip->payload_len = be16(uint16_t(tcp_len));
    uint8_t *l4 = p + kEthLen + kIp6Len;
    Tcp *th = reinterpret_cast<Tcp *>(l4);
    th->csum = 0;
    th->csum = csum_finish(pseudo_sum6(ip->src, ip->dst, kProtoTcp, tcp_len) + csum_add(0, l4, tcp_len));
}

bool csum_good(const Ipv6 *ip, const uint8_t *l4, unsigned tcp_len)
{
    return csum_ok(pseudo_sum6(ip->src, ip->dst, kProtoTcp, tcp_len) + csum_add(0, l4, tcp_len));
}

FlowKey isn_key(const uint64_t secret[2], const Ip6Addr &local, const Ip6Addr &remote, uint16_t lport, uint16_t rport)
{
    uint8_t b[32];
    std::memcpy(b, local.b, 16);
    std::memcpy(b + 16, remote.b, 16);
    const uint64_t h = siphash24(secret, b, sizeof b);
    return FlowKey{uint32_t(h), uint32_t(h >> 32), lport, rport};
}

bool Tcp6::check(PacketRef &f, const Ip6Rx &rx)
{
    const uint8_t *l4 = f.data + rx.l4_off;
    const Tcp *th = reinterpret_cast<const Tcp *>(l4);
    // The data offset only once the packet holds a whole TCP header: a short
    // one may end at the frame's end (found by the fuzz target).
    if (rx.l4_len < kTcpLen || unsigned(th->doff >> 4) * 4u < kTcpLen || unsigned(th->doff >> 4) * 4u > rx.l4_len) {
        stats_.drop_tcp_header++;
        link_.release(f);
        return false;
    }
    if (!(f.flags & kRxL4CsumGood) && !csum_good(rx.ip, l4, rx.l4_len)) {
        stats_.drop_tcp_csum++;
        link_.release(f);
        return false;
    }
    return true;
}

bool Tcp6::no_socket(PacketRef &f, const Ip6Rx &rx, uint64_t now_ns)
{
    // Sharing, the kernel's (its sockets, its resets).
    if (link_.pass_unclaimed) return false;
    const Tcp *th = reinterpret_cast<const Tcp *>(f.data + rx.l4_off);
    const unsigned doff = unsigned(th->doff >> 4) * 4u;
    stats_.drop_tcp_no_socket++;
    if (!(th->flags & kRst)) send_rst_reply(rx.ip, th, rx.l4_len - doff, now_ns);
    link_.release(f);
    return true;
}

void Tcp6::send_rst_reply(const Ipv6 *ip, const Tcp *th, unsigned seg_len, uint64_t now_ns)
{
    if (ip6::is_unspecified(ip->src) || ip6::is_multicast(ip->src) || ip6::is_multicast(ip->dst)) return;
    PacketRef out;
    if (!link_.alloc(&out)) return;
    if (kHeaders6Len > out.room) {
        link_.release(out);
        return;
    }
    Hdr6 h;
    h.src = ip6::from(ip->dst);
    h.dst = ip6::from(ip->src);
    h.sport = be16(th->dport);
    h.dport = be16(th->sport);
    h.hop_limit = cfg_.hop_limit6;
    h.flow_label = flow_label(h.src, h.dst, h.sport, h.dport, cfg_.isn_secret);
    write_headers(out.data, cfg_.mac, h);
    Tcp *rt = reinterpret_cast<Tcp *>(out.data + kEthLen + kIp6Len);
    rt->doff = uint8_t((kTcpLen / 4) << 4);
    if (th->flags & kAck) {
        rt->seq = th->ack; // <SEQ=SEG.ACK><CTL=RST>
        rt->flags = kRst;
    } else {
        // <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>, SYN and FIN counted.
        const uint32_t space = seg_len + ((th->flags & kSyn) ? 1 : 0) + ((th->flags & kFin) ? 1 : 0);
        rt->ack = be32(be32(th->seq) + space);
        rt->flags = kRst | kAck;
    }
    finish(out.data, kTcpLen);
    out.len = uint16_t(kHeaders6Len);
    stats_.tcp_resets_out++;
    ip6_.send(out, now_ns);
}

void Tcp6::build_template(tcp::Conn &s) const
{
    Hdr6 h;
    h.src = s.v6.local;
    h.dst = s.v6.remote;
    h.sport = s.app.local.port;
    h.dport = s.app.remote.port;
    h.tclass = s.app.tclass;
    h.hop_limit = cfg_.hop_limit6;
    h.flow_label = flow_label(h.src, h.dst, h.sport, h.dport, cfg_.isn_secret);
    write_headers(s.v6.hdr, cfg_.mac, h);
    s.arp_gen = 0; // the destination MAC is zero: next_hop_mac() fills it
    s.v6.nd_una = s.snd_una;
}

const MacAddr *Tcp6::next_hop_mac(tcp::Conn &s, uint64_t now_ns)
{
    uint8_t *dst = reinterpret_cast<Eth *>(s.v6.hdr)->dst;
    // The next hop: the peer when on-link, else its route's gateway (the
    // routes are fixed for the stack's life: the same hop as at connect).
    Ip6Addr hop;
    const bool routed = ip6_.router().next_hop(s.v6.remote.b, &hop);
    if (routed && s.arp_gen != 0 && seq_gt(s.snd_una, s.v6.nd_una) &&
        now_ns - s.last_recv_ns < NeighborDiscovery::kReachableNs) {
        MacAddr via;
        std::memcpy(via.b, dst, 6);
        nd_.confirm(hop, now_ns, &via);
    }
    s.v6.nd_una = s.snd_una;
    s.arp_gen = 0;
    if (!routed) return nullptr; // send() drops it (no route)
    const MacAddr *mac = nd_.lookup(hop, now_ns);
    if (!mac) return nullptr;
    std::memcpy(dst, mac->b, 6);
    s.arp_gen = nd_.generation(); // after the lookup: what it did is seen
    return mac;
}

void Tcp6::send_raw(const Ip6Addr &src, const Ip6Addr &dst, uint16_t sport, uint16_t dport, uint32_t seq,
                    uint32_t ack, uint8_t flags, uint16_t win, const uint8_t *opts, unsigned opt_len, uint64_t now_ns)
{
    PacketRef out;
    if (!link_.alloc(&out)) return;
    const unsigned hlen = kTcpLen + opt_len;
    if (kEthLen + kIp6Len + hlen > out.room) {
        link_.release(out);
        return;
    }
    Hdr6 h;
    h.src = src;
    h.dst = dst;
    h.sport = sport;
    h.dport = dport;
    h.hop_limit = cfg_.hop_limit6;
    h.flow_label = flow_label(h.src, h.dst, h.sport, h.dport, cfg_.isn_secret);
    write_headers(out.data, cfg_.mac, h);
    Tcp *th = reinterpret_cast<Tcp *>(out.data + kEthLen + kIp6Len);
    th->seq = be32(seq);
    th->ack = be32(ack);
    th->doff = uint8_t((hlen / 4) << 4);
    th->flags = flags;
    th->win = be16(win);
    if (opt_len) std::memcpy(th + 1, opts, opt_len);
    finish(out.data, hlen);
    out.len = uint16_t(kEthLen + kIp6Len + hlen);
    ip6_.send(out, now_ns);
}

} // namespace mars::tcp6
