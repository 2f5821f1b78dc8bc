// nd.cc: IPv6 neighbour discovery and DAD (RFC 4861, RFC 4862 5.4). The
// cache is open-addressed with linear probing, like ArpResolver's; every
// option length is checked against the message before it is read.
#include "ip/nd.h"

#include "ip/arp.h"

#include "base/checksum.h"

#include <algorithm>
#include <cstring>

namespace mars {

using namespace wire;

namespace {

constexpr unsigned kNdLen = sizeof(NdNeighbor); // 24
constexpr unsigned kLlaOptLen = 8;              // type, length (1 = 8 bytes), MAC

uint32_t home_slot(const uint8_t *ip)
{
    uint32_t w;
    std::memcpy(&w, ip + 12, 4);
    uint32_t v;
    std::memcpy(&v, ip + 8, 4);
    return ((w ^ (v * 31u)) * 2654435761u) >> 24;
}

// The link-layer address option of type `want` in the options after an NS
// or NA: *mac points at it (nullptr when absent). False: an option of length
// 0 or running past the message (RFC 4861 7.1.1: invalid).
bool find_lla(const uint8_t *opt, unsigned len, uint8_t want, const uint8_t **mac)
{
    *mac = nullptr;
    while (len > 0) {
        if (len < 2) return false;
        const unsigned olen = opt[1] * 8u;
        if (olen == 0 || olen > len) return false;
        if (opt[0] == want && olen >= kLlaOptLen) *mac = opt + 2;
        opt += olen;
        len -= olen;
    }
    return true;
}

} // namespace

NeighborDiscovery::NeighborDiscovery(const StackConfig &c, Link &link, StackStats &stats, ArpResolver *local)
    : cfg_(c), mac_(c.mac), max_pending_(c.arp_pending_frames), probes_(c.arp_probes ? c.arp_probes : 1),
      retrans_ns_(c.arp_retrans_ns ? c.arp_retrans_ns : 1'000'000'000ull), link_(link), stats_(stats), local_(local)
{
    cache_.resize(kSlots);
    pending_.reserve(c.arp_pending_frames);
    failed_.reserve(kSlots);
    reset_addrs();
}

NeighborDiscovery::~NeighborDiscovery() { discard_waiting(); }

void NeighborDiscovery::reset_addrs()
{
    // Sharing, the kernel has done DAD for the same addresses.
    const AddrState initial = cfg_.pass_unclaimed ? AddrState::kPreferred : AddrState::kTentative;
    n_addrs_ = 0;
    addrs_[n_addrs_++] = OwnAddr6{ip6::link_local(mac_), 64, initial};
    for (int i = 0; i < cfg_.n_addr6 && i < StackConfig::kMaxAddr6; i++)
        addrs_[n_addrs_++] = OwnAddr6{cfg_.addr6[i].addr, cfg_.addr6[i].prefix, initial};
    dad_running_ = false;
    dad_due_ns_ = UINT64_MAX;
}

void NeighborDiscovery::discard_waiting()
{
    for (auto &p : pending_) link_.release(p.frame);
    pending_.clear();
}

void NeighborDiscovery::clear()
{
    discard_waiting();
    std::fill(cache_.begin(), cache_.end(), Neighbor6{});
    failed_.clear();
    next_due_ns_ = UINT64_MAX;
    own_gen_ = 1; // a stack's: ArpResolver::clear()
    reset_addrs();
}

uint32_t NeighborDiscovery::generation() const { return local_ ? local_->generation() : own_gen_; }

void NeighborDiscovery::bump()
{
    if (local_) local_->bump_generation();
    else own_gen_++;
}

// ---- our addresses -----------------------------------------------------------

int NeighborDiscovery::find_own(const uint8_t *a) const
{
    for (int i = 0; i < n_addrs_; i++)
        if (ip6::eq(addrs_[i].addr.b, a)) return i;
    return -1;
}

bool NeighborDiscovery::is_our_solicited_node(const uint8_t *a) const
{
    // ff02::1:ffXX:XXXX with the last 24 bits of one of ours (tentative
    // ones included: DAD listens there, RFC 4862 5.4.2).
    static const uint8_t head[13] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff};
    if (std::memcmp(a, head, 13) != 0) return false;
    for (int i = 0; i < n_addrs_; i++)
        if (std::memcmp(addrs_[i].addr.b + 13, a + 13, 3) == 0) return true;
    return false;
}

const Ip6Addr *NeighborDiscovery::source_for(const uint8_t *dst) const
{
    if (ip6::is_link_local(dst) || (ip6::is_multicast(dst) && (dst[1] & 0x0f) <= 2))
        return addrs_[0].state == AddrState::kPreferred ? &addrs_[0].addr : nullptr;
    // On dst's prefix; else (off-link, through a route) the one sharing the
    // longest prefix with dst (RFC 6724 rule 8; off-link, that is always
    // shorter than the address's own prefix, the rule's bound), the first on
    // ties, as the shim's eta_net_source6 picks.
    const Ip6Addr *best = nullptr;
    unsigned best_len = 0;
    for (int i = 1; i < n_addrs_; i++) {
        if (addrs_[i].state != AddrState::kPreferred) continue;
        if (ip6::prefix_match(addrs_[i].addr.b, dst, addrs_[i].prefix)) return &addrs_[i].addr;
        const unsigned len = ip6::common_prefix_len(addrs_[i].addr.b, dst);
        if (!best || len > best_len) best = &addrs_[i].addr, best_len = len;
    }
    return best;
}

bool NeighborDiscovery::on_link(const uint8_t *dst) const
{
    if (ip6::is_link_local(dst)) return true;
    for (int i = 1; i < n_addrs_; i++)
        if (ip6::prefix_match(addrs_[i].addr.b, dst, addrs_[i].prefix)) return true;
    return false;
}

void NeighborDiscovery::start(uint64_t now_ns)
{
    if (cfg_.pass_unclaimed) return; // the kernel does DAD for the addresses it shares
    bool any = false;
    for (int i = 0; i < n_addrs_; i++) {
        if (addrs_[i].state != AddrState::kTentative) continue;
        const Ip6Addr group = ip6::solicited_node(addrs_[i].addr.b);
        send_ns(addrs_[i].addr.b, group.b, nullptr, true);
        any = true;
    }
    if (!any) return;
    dad_running_ = true;
    dad_due_ns_ = now_ns + retrans_ns_; // DupAddrDetectTransmits 1, RetransTimer
    next_due_ns_ = std::min(next_due_ns_, dad_due_ns_);
}

void NeighborDiscovery::duplicate(int i)
{
    if (addrs_[i].state == AddrState::kDuplicate) return;
    addrs_[i].state = AddrState::kDuplicate;
    stats_.nd_dad_duplicates++;
}

// ---- cache -------------------------------------------------------------------

const Neighbor6 *NeighborDiscovery::find(const uint8_t *ip) const
{
    const uint32_t h = home_slot(ip);
    for (uint32_t k = 0; k < kSlots; k++) {
        const Neighbor6 &e = cache_[(h + k) & (kSlots - 1)];
        if (e.state == NudState::kNone) return nullptr;
        if (ip6::eq(e.ip.b, ip)) return &e;
    }
    return nullptr;
}

Neighbor6 *NeighborDiscovery::find(const uint8_t *ip)
{
    return const_cast<Neighbor6 *>(static_cast<const NeighborDiscovery *>(this)->find(ip));
}

const Neighbor6 *NeighborDiscovery::peek(const Ip6Addr &hop) const { return find(hop.b); }

Neighbor6 *NeighborDiscovery::insert(const uint8_t *ip)
{
    if (Neighbor6 *e = find(ip)) return e;
    const uint32_t h = home_slot(ip);
    for (uint32_t k = 0; k < kSlots; k++) {
        Neighbor6 &e = cache_[(h + k) & (kSlots - 1)];
        if (e.state == NudState::kNone) {
            e = Neighbor6{};
            e.ip = ip6::from(ip);
            e.state = NudState::kFailed; // the caller sets the real state
            return &e;
        }
    }
    // Full: the entry in the home slot goes (its waiting frames with it).
    Neighbor6 &e = cache_[h & (kSlots - 1)];
    release_waiting(e.ip, false);
    bump();
    e = Neighbor6{};
    e.ip = ip6::from(ip);
    e.state = NudState::kFailed;
    return &e;
}

void NeighborDiscovery::set_state(Neighbor6 &e, NudState s, uint64_t due_ns)
{
    if (s == NudState::kStale && e.state != NudState::kStale) bump(); // the next use goes through lookup()
    e.state = s;
    e.due_ns = due_ns;
    if (due_ns) next_due_ns_ = std::min(next_due_ns_, due_ns);
}

void NeighborDiscovery::set_mac(Neighbor6 &e, const uint8_t *mac)
{
    if (std::memcmp(e.mac.b, mac, 6) != 0) bump();
    std::memcpy(e.mac.b, mac, 6);
}

// Frames waiting for hop: out now with its MAC (send), or dropped and counted.
void NeighborDiscovery::release_waiting(const Ip6Addr &hop, bool send)
{
    const Neighbor6 *e = send ? find(hop.b) : nullptr;
    size_t keep = 0;
    for (size_t i = 0; i < pending_.size(); i++) {
        PendingFrame &p = pending_[i];
        if (!ip6::eq(p.hop, hop)) {
            pending_[keep++] = p;
        } else if (e) {
            std::memcpy(reinterpret_cast<Eth *>(p.frame.data)->dst, e->mac.b, 6);
            link_.queue(p.frame);
        } else {
            stats_.nd_drop_unresolved++;
            link_.release(p.frame);
        }
    }
    pending_.resize(keep);
}

void NeighborDiscovery::resolve(Neighbor6 &e, uint64_t now_ns)
{
    e.probes = 1;
    set_state(e, NudState::kIncomplete, now_ns + retrans_ns_);
    const Ip6Addr group = ip6::solicited_node(e.ip.b);
    send_ns(e.ip.b, group.b, nullptr, false);
}

const MacAddr *NeighborDiscovery::lookup(const Ip6Addr &hop, uint64_t now_ns)
{
    Neighbor6 *e = find(hop.b);
    if (!e) {
        if (find_own(hop.b) >= 0) return nullptr; // ourselves: hold() loops the frame (local_loop.h)
        e = insert(hop.b);
        resolve(*e, now_ns);
        return nullptr;
    }
    switch (e->state) {
    case NudState::kReachable:
        if (now_ns < e->due_ns) return &e->mac;
        [[fallthrough]]; // its timer ran out and poll() has not seen it yet: STALE
    case NudState::kStale:
        e->probes = 0;
        set_state(*e, NudState::kDelay, now_ns + kDelayNs);
        return &e->mac;
    case NudState::kDelay:
    case NudState::kProbe:
        return &e->mac;
    case NudState::kFailed: // Linux: traffic for a FAILED neighbour starts over
        resolve(*e, now_ns);
        return nullptr;
    default: // INCOMPLETE: poll() sends the next solicitation
        return nullptr;
    }
}

void NeighborDiscovery::confirm(const Ip6Addr &hop, uint64_t now_ns, const MacAddr *mac)
{
    Neighbor6 *e = find(hop.b);
    if (!e || e->state == NudState::kIncomplete || e->state == NudState::kFailed) return;
    if (mac && std::memcmp(e->mac.b, mac->b, 6) != 0) return; // the traffic went elsewhere: NUD decides
    e->probes = 0;
    set_state(*e, NudState::kReachable, now_ns + kReachableNs);
}

void NeighborDiscovery::hold(const Ip6Addr &hop, PacketRef &frame)
{
    if (find_own(hop.b) >= 0) {
        if (local_) {
            local_->loop(frame);
        } else {
            stats_.nd_drop_unresolved++;
            link_.release(frame);
        }
        return;
    }
    if (pending_.size() >= max_pending_) {
        stats_.nd_drop_queue_full++;
        link_.release(frame);
        return;
    }
    pending_.push_back(PendingFrame{hop, frame});
}

void NeighborDiscovery::fail(Neighbor6 &e)
{
    e.state = NudState::kFailed;
    e.due_ns = 0;
    e.probes = 0;
    bump(); // a PROBE entry's MAC was in use
    stats_.nd_failed++;
    release_waiting(e.ip, false);
    if (failed_.size() < failed_.capacity()) failed_.push_back(e.ip);
}

void NeighborDiscovery::expire(uint64_t now_ns)
{
    uint64_t next = UINT64_MAX;
    if (dad_running_) {
        if (now_ns >= dad_due_ns_) {
            // Nobody claimed them: ours, announced (RFC 4861 7.2.6).
            dad_running_ = false;
            dad_due_ns_ = UINT64_MAX;
            const Ip6Addr all = ip6::all_nodes();
            for (int i = 0; i < n_addrs_; i++) {
                if (addrs_[i].state != AddrState::kTentative) continue;
                addrs_[i].state = AddrState::kPreferred;
                send_na(addrs_[i].addr.b, all.b, ip6::multicast_mac(all.b), kNaOverride);
            }
        } else {
            next = dad_due_ns_;
        }
    }
    for (Neighbor6 &e : cache_) {
        if (e.state == NudState::kNone || e.due_ns == 0) continue;
        if (now_ns >= e.due_ns) {
            switch (e.state) {
            case NudState::kIncomplete:
                if (e.probes >= probes_) {
                    fail(e);
                    continue;
                }
                e.probes++;
                e.due_ns = now_ns + retrans_ns_;
                send_ns(e.ip.b, ip6::solicited_node(e.ip.b).b, nullptr, false);
                break;
            case NudState::kReachable:
                set_state(e, NudState::kStale, 0); // no timer: the next use moves it on (through lookup)
                continue;
            case NudState::kDelay:
                e.state = NudState::kProbe;
                e.probes = 1;
                e.due_ns = now_ns + retrans_ns_;
                send_ns(e.ip.b, e.ip.b, &e.mac, false);
                break;
            case NudState::kProbe:
                if (e.probes >= probes_) {
                    fail(e);
                    continue;
                }
                e.probes++;
                e.due_ns = now_ns + retrans_ns_;
                send_ns(e.ip.b, e.ip.b, &e.mac, false);
                break;
            default:
                e.due_ns = 0;
                continue;
            }
        }
        next = std::min(next, e.due_ns);
    }
    next_due_ns_ = next;
}

// ---- input -------------------------------------------------------------------

bool NeighborDiscovery::input_ns(const Ipv6 *ip, const uint8_t *msg, unsigned len, const uint8_t *eth_src,
                                 uint64_t)
{
    const NdNeighbor *ns = reinterpret_cast<const NdNeighbor *>(msg);
    const uint8_t *slla = nullptr;
    const bool from_dad = ip6::is_unspecified(ip->src);
    // RFC 4861 7.1.1 (hop limit 255 and code 0 are checked by the caller).
    if (len < kNdLen || ip6::is_multicast(ns->target) || !find_lla(msg + kNdLen, len - kNdLen, kNdOptSourceLla, &slla) ||
        (from_dad && (slla || !ip6::eq(ip->dst, ip6::solicited_node(ns->target).b)))) {
        stats_.nd_drop_invalid++;
        return false;
    }
    stats_.nd_ns_in++;
    const int own = find_own(ns->target);
    if (own < 0) return true; // not for us: nothing to learn or answer
    OwnAddr6 &a = addrs_[own];
    if (a.state == AddrState::kTentative) {
        // Another node's DAD for our tentative address: it is duplicate
        // (RFC 4862 5.4.3); a solicitation from a real source is ignored.
        if (from_dad && !cfg_.pass_unclaimed) duplicate(own);
        return true;
    }
    if (a.state == AddrState::kDuplicate) return true;
    // Never our own address (a solicitation from it: the kernel sharing it).
    if (!from_dad && slla && find_own(ip->src) < 0) {
        // RFC 4861 7.2.3: create or update the sender's entry (STALE when new or changed).
        Neighbor6 *e = insert(ip->src);
        const bool had_mac = e->state != NudState::kIncomplete && e->state != NudState::kFailed;
        if (!had_mac || std::memcmp(e->mac.b, slla, 6) != 0) {
            set_mac(*e, slla);
            e->probes = 0;
            set_state(*e, NudState::kStale, 0);
            if (!had_mac) release_waiting(e->ip, true);
        }
    }
    if (cfg_.pass_unclaimed) return true; // the kernel answers for the addresses it shares
    if (from_dad) {
        // Someone probes an address we hold: defend it (RFC 4861 7.2.4).
        const Ip6Addr all = ip6::all_nodes();
        send_na(ns->target, all.b, ip6::multicast_mac(all.b), kNaOverride);
        return true;
    }
    MacAddr to;
    const Neighbor6 *e = find(ip->src);
    if (slla) std::memcpy(to.b, slla, 6);
    else if (e && e->state != NudState::kIncomplete && e->state != NudState::kFailed) to = e->mac;
    else std::memcpy(to.b, eth_src, 6);
    send_na(ns->target, ip->src, to, kNaSolicited | kNaOverride);
    return true;
}

bool NeighborDiscovery::input_na(const Ipv6 *ip, const uint8_t *msg, unsigned len, uint64_t now_ns)
{
    const NdNeighbor *na = reinterpret_cast<const NdNeighbor *>(msg);
    const uint8_t *tlla = nullptr;
    const uint32_t flags = be32(na->flags);
    // RFC 4861 7.1.2.
    if (len < kNdLen || ip6::is_multicast(na->target) || !find_lla(msg + kNdLen, len - kNdLen, kNdOptTargetLla, &tlla) ||
        (ip6::is_multicast(ip->dst) && (flags & kNaSolicited))) {
        stats_.nd_drop_invalid++;
        return false;
    }
    stats_.nd_na_in++;
    const int own = find_own(na->target);
    if (own >= 0) {
        // Someone else answers for an address of ours: while it is tentative
        // that is a DAD conflict (RFC 4862 5.4.4); afterwards it is counted as
        // one too, and the address kept (RFC 4862 5.4.4: no automatic action).
        if (cfg_.pass_unclaimed) return true; // sharing: the kernel's own NA, seen on the wire
        if (addrs_[own].state == AddrState::kTentative) duplicate(own);
        else stats_.nd_dad_duplicates++;
        return true;
    }
    Neighbor6 *e = find(na->target);
    if (!e) return true; // unsolicited for a stranger: nothing to update (RFC 4861 7.2.5)
    const bool solicited = flags & kNaSolicited, override = flags & kNaOverride;
    if (e->state == NudState::kIncomplete || e->state == NudState::kFailed) {
        if (!tlla) return true;
        set_mac(*e, tlla);
        e->probes = 0;
        if (solicited) set_state(*e, NudState::kReachable, now_ns + kReachableNs);
        else set_state(*e, NudState::kStale, 0);
        release_waiting(e->ip, true);
        return true;
    }
    const bool differs = tlla && std::memcmp(e->mac.b, tlla, 6) != 0;
    if (!override && differs) {
        if (e->state == NudState::kReachable) set_state(*e, NudState::kStale, 0);
        return true;
    }
    if (differs) set_mac(*e, tlla);
    e->probes = 0;
    if (solicited) set_state(*e, NudState::kReachable, now_ns + kReachableNs);
    else if (differs) set_state(*e, NudState::kStale, 0);
    return true;
}

// ---- output ------------------------------------------------------------------

namespace {

// An NS or NA frame; opt_type 0: no link-layer option.
bool build_nd(Link &link, const MacAddr &our_mac, uint8_t type, const uint8_t *src, const uint8_t *dst,
              const MacAddr &dst_mac, uint32_t flags, const uint8_t *target, uint8_t opt_type)
{
    PacketRef out;
    if (!link.alloc(&out)) return false;
    const unsigned len = kNdLen + (opt_type ? kLlaOptLen : 0);
    Eth *eth = reinterpret_cast<Eth *>(out.data);
    std::memcpy(eth->dst, dst_mac.b, 6);
    std::memcpy(eth->src, our_mac.b, 6);
    eth->type = be16(kEtherIpv6);
    Ipv6 *ip = reinterpret_cast<Ipv6 *>(out.data + kEthLen);
    ip->vtf = be32(6u << 28);
    ip->payload_len = be16(uint16_t(len));
    ip->next = kProtoIcmp6;
    ip->hop_limit = 255;
    std::memcpy(ip->src, src, 16);
    std::memcpy(ip->dst, dst, 16);
    uint8_t *msg = out.data + kEthLen + kIp6Len;
    NdNeighbor *nd = reinterpret_cast<NdNeighbor *>(msg);
    nd->type = type;
    nd->code = 0;
    nd->csum = 0;
    nd->flags = be32(flags);
    std::memcpy(nd->target, target, 16);
    if (opt_type) {
        msg[kNdLen] = opt_type;
        msg[kNdLen + 1] = 1;
        std::memcpy(msg + kNdLen + 2, our_mac.b, 6);
    }
    nd->csum = csum_finish(pseudo_sum6(src, dst, kProtoIcmp6, len) + csum_add(0, msg, len));
    out.len = uint16_t(kEthLen + kIp6Len + len);
    link.queue(out);
    return true;
}

} // namespace

bool NeighborDiscovery::send_ns(const uint8_t *target, const uint8_t *dst_ip, const MacAddr *dst_mac, bool dad)
{
    // Another engine on the port probes (StackConfig::nd_follower): this one
    // runs DAD's timer and sees what conflicts, silently.
    if (dad && cfg_.nd_follower) return true;
    static const uint8_t unspecified[16] = {};
    const uint8_t *src = unspecified;
    if (!dad) {
        const Ip6Addr *s = source_for(target);
        if (!s) return false; // no usable address yet (DAD in progress): the next probe tries again
        src = s->b;
    }
    const MacAddr to = dst_mac ? *dst_mac : ip6::multicast_mac(dst_ip);
    if (!build_nd(link_, mac_, kNdNeighborSolicit, src, dst_ip, to, 0, target, dad ? 0 : kNdOptSourceLla))
        return false;
    stats_.nd_ns_out++;
    return true;
}

bool NeighborDiscovery::send_na(const uint8_t *target, const uint8_t *dst_ip, const MacAddr &dst_mac, uint32_t flags)
{
    // Every advertisement is an answer, a defence or an announcement: the
    // first engine's alone (StackConfig::nd_follower), so one per solicitation.
    if (cfg_.nd_follower) return false;
    if (!build_nd(link_, mac_, kNdNeighborAdvert, target, dst_ip, dst_mac, flags, target, kNdOptTargetLla))
        return false;
    stats_.nd_na_out++;
    return true;
}

} // namespace mars
