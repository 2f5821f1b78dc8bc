// net.cc: Ethernet II, ARP, IPv4 and ICMP. Input validates every length
// against the frame before reading (a frame is hostile until proven
// otherwise); output frames each IPv4 packet for its next hop, resolving the
// MAC address through ARP with a bounded queue of frames that wait.
#include "stack_impl.h"

#include <algorithm>
#include <cstring>

namespace mars {

using namespace wire;

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;
const uint8_t kBroadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

uint32_t load_be32(const void *p)
{
    uint32_t v;
    std::memcpy(&v, p, 4);
    return be32(v);
}

} // namespace

void StackImpl::input_frame(PacketRef &f)
{
    // The full path may read or write any receive ring: asynchronous copies
    // land first (mars/copy.h).
    if (copies_in_flight()) reap_copies(true);
    if (f.len < kEthLen || !f.data) {
        stats_.drop_eth++;
        release(f);
        return;
    }
    const Eth *eth = reinterpret_cast<const Eth *>(f.data);
    if (std::memcmp(eth->dst, cfg_.mac.b, 6) != 0 && std::memcmp(eth->dst, kBroadcast, 6) != 0) {
        stats_.drop_not_ours++;
        release(f);
        return;
    }
    switch (be16(eth->type)) {
    case kEtherIpv4:
        input_ipv4(f);
        return;
    case kEtherArp:
        input_arp(f);
        return;
    default:
        stats_.drop_eth++; // IPv6, VLAN tags, anything else: not ours to handle
        release(f);
        return;
    }
}

// ---- ARP -------------------------------------------------------------------

ArpEntry *StackImpl::arp_find(uint32_t ip)
{
    uint32_t h = (ip * 2654435761u) >> 24;
    for (uint32_t k = 0; k <= arp_mask_; k++) {
        ArpEntry &e = arp_[(h + k) & arp_mask_];
        if (e.ip == ip) return &e;
        if (e.ip == 0) return nullptr;
    }
    return nullptr;
}

ArpEntry *StackImpl::arp_insert(uint32_t ip)
{
    if (ArpEntry *e = arp_find(ip)) return e;
    uint32_t h = (ip * 2654435761u) >> 24;
    for (uint32_t k = 0; k <= arp_mask_; k++) {
        ArpEntry &e = arp_[(h + k) & arp_mask_];
        if (e.ip == 0) {
            e = ArpEntry{};
            e.ip = ip;
            return &e;
        }
    }
    // Full: evict the entry in the home slot (an old neighbour re-resolves).
    ArpEntry &e = arp_[h & arp_mask_];
    e = ArpEntry{};
    e.ip = ip;
    arp_gen_++;
    return &e;
}

void StackImpl::arp_learn(uint32_t ip, const MacAddr &mac, bool create)
{
    ArpEntry *e = create ? arp_insert(ip) : arp_find(ip);
    if (!e) return;
    if (!e->resolved || std::memcmp(e->mac.b, mac.b, 6) != 0) arp_gen_++;
    e->mac = mac;
    e->resolved = true;
    e->expires_ns = now_ns_ + cfg_.arp_timeout_ns;
    e->requests = 0;
    // Frames that waited for this neighbour go out now, in order.
    size_t keep = 0;
    for (size_t i = 0; i < arp_pending_.size(); i++) {
        PendingFrame &p = arp_pending_[i];
        if (p.next_hop == ip) {
            Eth *eth = reinterpret_cast<Eth *>(p.frame.data);
            std::memcpy(eth->dst, mac.b, 6);
            queue_tx(p.frame);
        } else {
            arp_pending_[keep++] = p;
        }
    }
    arp_pending_.resize(keep);
}

void StackImpl::input_arp(PacketRef &f)
{
    if (f.len < kEthLen + sizeof(Arp)) {
        stats_.drop_arp++;
        release(f);
        return;
    }
    const Arp *a = reinterpret_cast<const Arp *>(f.data + kEthLen);
    if (be16(a->htype) != 1 || be16(a->ptype) != kEtherIpv4 || a->hlen != 6 || a->plen != 4) {
        stats_.drop_arp++;
        release(f);
        return;
    }
    const uint16_t op = be16(a->op);
    const uint32_t spa = be32(a->spa), tpa = be32(a->tpa);
    MacAddr sha;
    std::memcpy(sha.b, a->sha, 6);
    const bool for_us = tpa == cfg_.ip;
    if ((op != kArpRequest && op != kArpReply) || spa == 0 || (sha.b[0] & 1)) {
        // ARP probes (sender 0.0.0.0) and bogus senders teach us nothing.
        if (!(op == kArpRequest && spa == 0)) {
            stats_.drop_arp++;
            release(f);
            return;
        }
    }
    if (op == kArpRequest) stats_.arp_requests_in++;
    else stats_.arp_replies_in++;
    // RFC 826 merge: update a known sender; add it when the packet is for us.
    if (spa != 0) arp_learn(spa, sha, for_us);
    if (op == kArpRequest && for_us) {
        if (send_arp(kArpReply, sha.b, sha, spa)) stats_.arp_replies_out++;
    }
    release(f);
}

// One ARP frame from us: an op for target (tha, tpa), to the Ethernet
// destination dst.
bool StackImpl::send_arp(uint16_t op, const uint8_t *dst, const MacAddr &tha, uint32_t tpa)
{
    PacketRef out;
    if (!alloc_frame(&out)) return false;
    Eth *eth = reinterpret_cast<Eth *>(out.data);
    std::memcpy(eth->dst, dst, 6);
    std::memcpy(eth->src, cfg_.mac.b, 6);
    eth->type = be16(kEtherArp);
    Arp *r = reinterpret_cast<Arp *>(out.data + kEthLen);
    r->htype = be16(1);
    r->ptype = be16(kEtherIpv4);
    r->hlen = 6;
    r->plen = 4;
    r->op = be16(op);
    std::memcpy(r->sha, cfg_.mac.b, 6);
    r->spa = be32(cfg_.ip);
    std::memcpy(r->tha, tha.b, 6);
    r->tpa = be32(tpa);
    out.len = uint16_t(kEthLen + sizeof(Arp));
    queue_tx(out);
    return true;
}

void StackImpl::arp_request(uint32_t ip)
{
    if (send_arp(kArpRequest, kBroadcast, MacAddr{}, ip)) stats_.arp_requests_out++;
}

void StackImpl::announce(uint64_t now_ns)
{
    if (now_ns > now_ns_) now_ns_ = now_ns;
    arp_request(cfg_.ip); // gratuitous ARP: a request for our own address
    flush_tx();
}

const MacAddr *StackImpl::arp_lookup(uint32_t hop)
{
    ArpEntry *e = arp_find(hop);
    if (e && e->resolved) {
        if (now_ns_ < e->expires_ns) {
            // Refresh a neighbour in use before it expires (unicast would do;
            // a broadcast request keeps this simple and also works).
            if (e->expires_ns - now_ns_ < cfg_.arp_timeout_ns / 4 && now_ns_ - e->requested_ns >= kSec) {
                e->requested_ns = now_ns_;
                arp_request(hop);
            }
            return &e->mac;
        }
        e->resolved = false;
        arp_gen_++;
    }
    if (!e) e = arp_insert(hop);
    if (e->requested_ns == 0 || now_ns_ - e->requested_ns >= kSec) {
        e->requested_ns = now_ns_ ? now_ns_ : 1;
        e->requests++;
        arp_request(hop);
    }
    return nullptr;
}

void StackImpl::hold_for_arp(uint32_t hop, PacketRef &frame)
{
    if (arp_pending_.size() >= cfg_.arp_pending_frames) {
        stats_.drop_arp_queue_full++;
        release(frame);
        return;
    }
    if (arp_pending_.empty()) arp_next_expire_ns_ = now_ns_ + kSec;
    arp_pending_.push_back(PendingFrame{hop, frame});
}

// Once a second: re-ask for neighbours with frames waiting; give up on them
// (dropping the frames: TCP retransmits) after three unanswered requests.
void StackImpl::arp_expire()
{
    arp_next_expire_ns_ = now_ns_ + kSec;
    size_t keep = 0;
    for (size_t i = 0; i < arp_pending_.size(); i++) {
        PendingFrame &p = arp_pending_[i];
        ArpEntry *e = arp_find(p.next_hop);
        if (e && e->resolved) {
            std::memcpy(reinterpret_cast<Eth *>(p.frame.data)->dst, e->mac.b, 6);
            queue_tx(p.frame);
            continue;
        }
        if (!e || e->requests >= 3) {
            stats_.drop_arp_queue_full++;
            release(p.frame);
            continue;
        }
        arp_pending_[keep++] = p;
    }
    arp_pending_.resize(keep);
    for (auto &p : arp_pending_) {
        ArpEntry *e = arp_find(p.next_hop);
        if (e && now_ns_ - e->requested_ns >= kSec) {
            e->requested_ns = now_ns_;
            e->requests++;
            arp_request(p.next_hop);
        }
    }
    if (arp_pending_.empty()) arp_next_expire_ns_ = now_ns_ + 60 * kSec;
}

// ---- IPv4 ------------------------------------------------------------------

uint32_t StackImpl::route(uint32_t dst) const
{
    if ((dst & subnet_mask_) == (cfg_.ip & subnet_mask_)) return dst;
    const Route *best = nullptr;
    for (int i = 0; i < cfg_.n_routes; i++) {
        const Route &r = cfg_.routes[i];
        const uint32_t m = r.prefix == 0 ? 0 : (r.prefix >= 32 ? ~0u : ~((1u << (32 - r.prefix)) - 1));
        if ((dst & m) == (r.dest & m) && (!best || r.prefix > best->prefix)) best = &r;
    }
    if (!best) return 0;
    return best->gateway ? best->gateway : dst;
}

void StackImpl::input_ipv4(PacketRef &f)
{
    const unsigned avail = f.len - kEthLen;
    if (avail < kIpLen) {
        stats_.drop_ip_header++;
        release(f);
        return;
    }
    const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(f.data + kEthLen);
    const unsigned ihl = (ip->ver_ihl & 0xf) * 4u;
    const unsigned total = be16(ip->total_len);
    if ((ip->ver_ihl >> 4) != 4 || ihl < kIpLen || ihl > avail || total < ihl || total > avail) {
        stats_.drop_ip_header++;
        release(f);
        return;
    }
    if (!(f.flags & kRxIpCsumGood) && !csum_ok(csum_add(0, ip, ihl))) {
        stats_.drop_ip_csum++;
        release(f);
        return;
    }
    if (be32(ip->dst) != cfg_.ip) {
        stats_.drop_not_ours++;
        release(f);
        return;
    }
    if (be16(ip->frag) & (kIpMf | kIpOffsetMask)) {
        stats_.drop_ip_fragment++; // TCP uses path MTU discovery; we never reassemble
        release(f);
        return;
    }
    if (ip->ttl == 0) {
        stats_.drop_ip_ttl++;
        release(f);
        return;
    }
    switch (ip->proto) {
    case kProtoTcp:
        tcp_input(f, ip, ihl, total);
        return;
    case kProtoIcmp:
        input_icmp(f, ip, ihl, total);
        return;
    default:
        stats_.drop_ip_proto++;
        // RFC 1122 3.2.2.1: protocol unreachable.
        send_icmp_unreach(f.data + kEthLen, total, 2);
        release(f);
        return;
    }
}

void StackImpl::queue_tx(PacketRef &frame)
{
    if (tx_n_ == kTxBurst) flush_tx();
    stats_.tx_frames++;
    stats_.tx_bytes += frame.len;
    tx_burst_[tx_n_++] = frame;
}

void StackImpl::flush_tx()
{
    if (!tx_n_) return;
    io_.transmit(tx_burst_, tx_n_);
    tx_n_ = 0;
}

bool StackImpl::alloc_frame(PacketRef *out)
{
    if (io_.alloc(out, 1) != 1) {
        stats_.drop_tx_no_buffer++;
        return false;
    }
    out->flags = 0;
    out->len = 0;
    return true;
}

void StackImpl::send_ipv4_frame(PacketRef &frame, uint32_t hop)
{
    Eth *eth = reinterpret_cast<Eth *>(frame.data);
    std::memcpy(eth->src, cfg_.mac.b, 6);
    eth->type = be16(kEtherIpv4);
    const MacAddr *mac = arp_lookup(hop);
    if (!mac) {
        hold_for_arp(hop, frame);
        return;
    }
    std::memcpy(eth->dst, mac->b, 6);
    queue_tx(frame);
}

// ---- ICMP ------------------------------------------------------------------

void StackImpl::send_icmp_unreach(const uint8_t *orig, unsigned len, uint8_t code)
{
    const Ipv4 *oip = reinterpret_cast<const Ipv4 *>(orig);
    const uint32_t dst = be32(oip->src);
    const uint32_t hop = route(dst);
    if (!hop || dst == 0 || (dst >> 28) == 14 || dst == 0xffffffffu) return;
    PacketRef out;
    if (!alloc_frame(&out)) return;
    // RFC 1812 4.3.2.3: as much of the original as fits in 576 bytes; we
    // quote the header and 8 bytes (RFC 792), enough for TCP to match.
    const unsigned quote = std::min<unsigned>(len, (oip->ver_ihl & 0xf) * 4u + 8);
    const unsigned ip_len = kIpLen + sizeof(Icmp) + quote;
    if (kEthLen + ip_len > out.room) {
        release(out);
        return;
    }
    Ipv4 *ip = reinterpret_cast<Ipv4 *>(out.data + kEthLen);
    *ip = Ipv4{0x45, 0, be16(uint16_t(ip_len)), 0, 0, 64, kProtoIcmp, 0, be32(cfg_.ip), oip->src};
    ip->csum = csum_finish(csum_add(0, ip, kIpLen));
    Icmp *ic = reinterpret_cast<Icmp *>(ip + 1);
    *ic = Icmp{kIcmpUnreach, code, 0, 0, 0};
    std::memcpy(ic + 1, orig, quote);
    ic->csum = csum_finish(csum_add(0, ic, sizeof(Icmp) + quote));
    out.len = uint16_t(kEthLen + ip_len);
    stats_.icmp_out++;
    send_ipv4_frame(out, hop);
}

void StackImpl::input_icmp(PacketRef &f, const Ipv4 *ip, unsigned ihl, unsigned total)
{
    const unsigned len = total - ihl;
    uint8_t *p = f.data + kEthLen + ihl;
    if (len < sizeof(Icmp) || !csum_ok(csum_add(0, p, len))) {
        stats_.drop_icmp++;
        release(f);
        return;
    }
    const Icmp *ic = reinterpret_cast<const Icmp *>(p);
    if (ic->type == kIcmpEcho && ic->code == 0) {
        stats_.icmp_echo_in++;
        const uint32_t src = be32(ip->src);
        const uint32_t hop = route(src);
        PacketRef out;
        if (hop && kEthLen + total <= 65535 && alloc_frame(&out)) {
            if (kEthLen + kIpLen + len > out.room) {
                release(out);
            } else {
                Ipv4 *oip = reinterpret_cast<Ipv4 *>(out.data + kEthLen);
                *oip = Ipv4{0x45, ip->tos, be16(uint16_t(kIpLen + len)), 0, 0, 64, kProtoIcmp, 0,
                            be32(cfg_.ip), ip->src};
                oip->csum = csum_finish(csum_add(0, oip, kIpLen));
                Icmp *r = reinterpret_cast<Icmp *>(oip + 1);
                std::memcpy(r, p, len);
                r->type = kIcmpEchoReply;
                r->csum = 0;
                r->csum = csum_finish(csum_add(0, r, len));
                out.len = uint16_t(kEthLen + kIpLen + len);
                stats_.icmp_out++;
                send_ipv4_frame(out, hop);
            }
        }
        release(f);
        return;
    }
    if (ic->type == kIcmpUnreach && len >= sizeof(Icmp) + kIpLen + 8) {
        stats_.icmp_unreach_in++;
        const Ipv4 *oip = reinterpret_cast<const Ipv4 *>(ic + 1);
        const unsigned oihl = (oip->ver_ihl & 0xf) * 4u;
        if (oip->proto == kProtoTcp && oihl >= kIpLen && len >= sizeof(Icmp) + oihl + 8 &&
            be32(oip->src) == cfg_.ip) {
            const Tcp *th = reinterpret_cast<const Tcp *>(reinterpret_cast<const uint8_t *>(oip) + oihl);
            FlowKey k{cfg_.ip, be32(oip->dst), be16(th->sport), be16(th->dport)};
            FlowNode *n = flows_.lookup(k);
            Sock *s = n ? sock_of(n) : nullptr;
            const uint32_t seq = load_be32(&th->seq);
            // RFC 5927: only believe ICMP about data we have in flight.
            if (s && seq_ge(seq, s->snd_una) && seq_le(seq, s->snd_max)) {
                if (ic->code == kIcmpCodeFragNeeded) {
                    stats_.icmp_frag_needed_in++;
                    uint32_t mtu = be16(ic->seq_or_mtu);
                    if (mtu == 0) mtu = 576; // RFC 1191 5: old routers leave it 0
                    mtu = std::max<uint32_t>(mtu, 576);
                    if (mtu < s->path_mtu) {
                        s->path_mtu = mtu;
                        update_mss(*s);
                        // Resend what was lost to the smaller path at once.
                        s->snd_nxt = s->snd_una;
                        want_output(*s);
                    }
                } else if (s->state == TcpState::kSynSent && (ic->code == 2 || ic->code == kIcmpCodePort)) {
                    // RFC 1122 4.2.3.9: a hard error while connecting aborts.
                    conn_drop(*s, ECONNREFUSED, kEvError);
                } else if (s->state == TcpState::kSynSent) {
                    s->error = EHOSTUNREACH; // soft error: reported if the open times out
                }
            }
        }
        release(f);
        return;
    }
    // Echo replies, time exceeded and the rest: nothing to do.
    release(f);
}

} // namespace mars
