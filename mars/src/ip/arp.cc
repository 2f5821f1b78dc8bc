// arp.cc: ARP (RFC 826). The cache is open-addressed with linear probing;
// input validates every length against the frame before reading (a frame is
// hostile until proven otherwise).
#include "ip/arp.h"

#include <algorithm>

#include "base/wire.h"

#include <cstring>

namespace mars {

using namespace wire;

namespace {

constexpr uint64_t kSec = 1'000'000'000ull;
const uint8_t kBroadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

uint32_t home_slot(uint32_t ip) { return (ip * 2654435761u) >> 24; }

} // namespace

ArpResolver::ArpResolver(const StackConfig &c, Link &link, StackStats &stats)
    : ip_(c.ip), mac_(c.mac), timeout_ns_(c.arp_timeout_ns), max_pending_(c.arp_pending_frames),
      probes_(c.arp_probes ? c.arp_probes : 1), retrans_ns_(c.arp_retrans_ns ? c.arp_retrans_ns : kSec), link_(link),
      stats_(stats), local_(stats)
{
    cache_.resize(kSlots);
    pending_.reserve(c.arp_pending_frames);
    failed_.reserve(kSlots);
}

ArpResolver::~ArpResolver() { discard_waiting(); }

void ArpResolver::discard_waiting()
{
    for (auto &p : pending_) link_.release(p.frame);
    pending_.clear();
    local_.discard(link_);
    next_expire_ns_ = resolve_next_ns_;
}

void ArpResolver::clear()
{
    discard_waiting();
    std::fill(cache_.begin(), cache_.end(), ArpEntry{});
    failed_.clear();
    gen_ = 1;
    set_resolve_next(UINT64_MAX);
    resolving_ = 0;
}

bool ArpResolver::is_clear() const
{
    for (const ArpEntry &e : cache_) {
        const bool has_mac = std::any_of(e.mac.b, e.mac.b + 6, [](uint8_t b) { return b != 0; });
        if (e.ip != 0 || e.resolved || e.failed || e.expires_ns != 0 || e.requested_ns != 0 || e.requests != 0 ||
            has_mac)
            return false;
    }
    return pending_.empty() && failed_.empty() && gen_ == 1 && next_expire_ns_ == UINT64_MAX && resolve_next_ns_ == UINT64_MAX &&
           local_.empty() && resolving_ == 0;
}

const ArpEntry *ArpResolver::find(uint32_t ip) const
{
    uint32_t h = home_slot(ip);
    for (uint32_t k = 0; k <= mask_; k++) {
        const ArpEntry &e = cache_[(h + k) & mask_];
        if (e.ip == ip) return &e;
        if (e.ip == 0) return nullptr;
    }
    return nullptr;
}

ArpEntry *ArpResolver::find(uint32_t ip) { return const_cast<ArpEntry *>(static_cast<const ArpResolver *>(this)->find(ip)); }

const MacAddr *ArpResolver::peek(uint32_t hop) const
{
    const ArpEntry *e = find(hop);
    return e && e->resolved ? &e->mac : nullptr;
}

ArpEntry *ArpResolver::insert(uint32_t ip)
{
    if (ArpEntry *e = find(ip)) return e;
    uint32_t h = home_slot(ip);
    for (uint32_t k = 0; k <= mask_; k++) {
        ArpEntry &e = cache_[(h + k) & mask_];
        if (e.ip == 0) {
            e = ArpEntry{};
            e.ip = ip;
            return &e;
        }
    }
    // Full: evict the entry in the home slot (an old neighbour re-resolves).
    ArpEntry &e = cache_[h & mask_];
    if (e.requests && --resolving_ == 0) set_resolve_next(UINT64_MAX);
    e = ArpEntry{};
    e.ip = ip;
    gen_++;
    return &e;
}

void ArpResolver::learn(uint32_t ip, const MacAddr &mac, bool create, uint64_t now_ns)
{
    if (ip == ip_) return; // our own address (another stack's claim to it, sharing): never a neighbour
    ArpEntry *e = create ? insert(ip) : find(ip);
    if (!e) return;
    if (!e->resolved || std::memcmp(e->mac.b, mac.b, 6) != 0) gen_++;
    e->mac = mac;
    e->resolved = true;
    e->failed = false;
    e->expires_ns = now_ns + timeout_ns_;
    // The last resolution in progress answered: nothing for poll() to do.
    if (e->requests && --resolving_ == 0) set_resolve_next(UINT64_MAX);
    e->requests = 0;
    // Frames that waited for this neighbour go out now, in order.
    size_t keep = 0;
    for (size_t i = 0; i < pending_.size(); i++) {
        PendingFrame &p = pending_[i];
        if (p.next_hop == ip) {
            Eth *eth = reinterpret_cast<Eth *>(p.frame.data);
            std::memcpy(eth->dst, mac.b, 6);
            link_.queue(p.frame);
        } else {
            pending_[keep++] = p;
        }
    }
    pending_.resize(keep);
}

void ArpResolver::input(PacketRef &f, uint64_t now_ns)
{
    if (f.len < kEthLen + sizeof(wire::Arp)) {
        stats_.drop_arp++;
        link_.release(f);
        return;
    }
    const wire::Arp *a = reinterpret_cast<const wire::Arp *>(f.data + kEthLen);
    if (be16(a->htype) != 1 || be16(a->ptype) != kEtherIpv4 || a->hlen != 6 || a->plen != 4) {
        stats_.drop_arp++;
        link_.release(f);
        return;
    }
    const uint16_t op = be16(a->op);
    const uint32_t spa = be32(a->spa), tpa = be32(a->tpa);
    MacAddr sha;
    std::memcpy(sha.b, a->sha, 6);
    const bool for_us = tpa == ip_;
    if ((op != kArpRequest && op != kArpReply) || spa == 0 || (sha.b[0] & 1)) {
        // ARP probes (sender 0.0.0.0) and bogus senders teach us nothing.
        if (!(op == kArpRequest && spa == 0)) {
            stats_.drop_arp++;
            link_.release(f);
            return;
        }
    }
    if (op == kArpRequest) stats_.arp_requests_in++;
    else stats_.arp_replies_in++;
    // RFC 826 merge: update a known sender; add it when the packet is for us.
    if (spa != 0) learn(spa, sha, for_us, now_ns);
    if (op == kArpRequest && for_us) {
        if (send(kArpReply, sha.b, sha, spa)) stats_.arp_replies_out++;
    }
    // Sharing the address: the other stack learns from it too (one MAC).
    if (!link_.pass_up(f, Unclaimed::kArp)) link_.release(f);
}

// One ARP frame from us: an op for target (tha, tpa), to the Ethernet
// destination dst.
bool ArpResolver::send(uint16_t op, const uint8_t *dst, const MacAddr &tha, uint32_t tpa)
{
    PacketRef out;
    if (!link_.alloc(&out)) return false;
    Eth *eth = reinterpret_cast<Eth *>(out.data);
    std::memcpy(eth->dst, dst, 6);
    std::memcpy(eth->src, mac_.b, 6);
    eth->type = be16(kEtherArp);
    wire::Arp *r = reinterpret_cast<wire::Arp *>(out.data + kEthLen);
    r->htype = be16(1);
    r->ptype = be16(kEtherIpv4);
    r->hlen = 6;
    r->plen = 4;
    r->op = be16(op);
    std::memcpy(r->sha, mac_.b, 6);
    r->spa = be32(ip_);
    std::memcpy(r->tha, tha.b, 6);
    r->tpa = be32(tpa);
    out.len = uint16_t(kEthLen + sizeof(wire::Arp));
    link_.queue(out);
    return true;
}

void ArpResolver::request(uint32_t ip)
{
    if (send(kArpRequest, kBroadcast, MacAddr{}, ip)) stats_.arp_requests_out++;
}

void ArpResolver::announce()
{
    request(ip_); // gratuitous ARP: a request for our own address
}

void ArpResolver::start(ArpEntry &e, uint64_t now_ns)
{
    e.failed = false;
    e.requests = 1;
    resolving_++;
    e.requested_ns = now_ns;
    request(e.ip);
    set_resolve_next(std::min(resolve_next_ns_, now_ns + retrans_ns_));
}

const MacAddr *ArpResolver::lookup(uint32_t hop, uint64_t now_ns)
{
    ArpEntry *e = find(hop);
    if (e && e->resolved) {
        if (now_ns < e->expires_ns) {
            // Refresh a neighbour in use before it expires (unicast would do;
            // a broadcast request keeps this simple and also works).
            if (e->expires_ns - now_ns < timeout_ns_ / 4 && now_ns - e->requested_ns >= kSec) {
                e->requested_ns = now_ns;
                request(hop);
            }
            return &e->mac;
        }
        e->resolved = false;
        e->requests = 0;
        gen_++;
    }
    if (hop == ip_) return nullptr; // ourselves: hold() loops the frame (local_loop.h)
    if (!e) e = insert(hop);
    // In progress: poll() sends the next request on schedule. Unknown,
    // expired or FAILED: a new resolution (Linux: a packet for a FAILED
    // neighbour starts probing again).
    if (e->requests == 0) start(*e, now_ns);
    return nullptr;
}

void ArpResolver::hold(uint32_t hop, PacketRef &frame, uint64_t)
{
    if (hop == ip_) {
        loop(frame);
        return;
    }
    if (pending_.size() >= max_pending_) {
        stats_.drop_arp_queue_full++;
        link_.release(frame);
        return;
    }
    pending_.push_back(PendingFrame{hop, frame});
}

// The neighbour did not answer: FAILED. Its frames are dropped (TCP
// retransmits, or the stack fails the connect that waits: failed_).
void ArpResolver::fail(ArpEntry &e)
{
    e.failed = true;
    e.requests = 0;
    resolving_--;
    stats_.arp_failed++;
    size_t keep = 0;
    for (size_t i = 0; i < pending_.size(); i++) {
        PendingFrame &p = pending_[i];
        if (p.next_hop == e.ip) {
            stats_.drop_arp_unresolved++;
            link_.release(p.frame);
        } else {
            pending_[keep++] = p;
        }
    }
    pending_.resize(keep);
    if (failed_.size() < failed_.capacity()) failed_.push_back(e.ip);
}

// The resolutions in progress: the next request of each that is due, and the
// failure of each whose last request went unanswered for arp_retrans_ns. A
// scan of the cache (256 entries), only while some resolution is in progress.
void ArpResolver::expire(uint64_t now_ns)
{
    uint64_t next = UINT64_MAX;
    for (ArpEntry &e : cache_) {
        if (e.ip == 0 || e.resolved || e.requests == 0) continue;
        if (now_ns - e.requested_ns >= retrans_ns_) {
            if (e.requests >= probes_) {
                fail(e);
                continue;
            }
            e.requests++;
            e.requested_ns = now_ns;
            request(e.ip);
        }
        next = std::min(next, e.requested_ns + retrans_ns_);
    }
    // Frames for a neighbour no longer in the cache (evicted while it
    // resolved) have nobody to wait for.
    size_t keep = 0;
    for (size_t i = 0; i < pending_.size(); i++) {
        PendingFrame &p = pending_[i];
        const ArpEntry *e = find(p.next_hop);
        if (e && e->resolved) {
            std::memcpy(reinterpret_cast<Eth *>(p.frame.data)->dst, e->mac.b, 6);
            link_.queue(p.frame);
        } else if (!e || e->requests == 0) {
            stats_.drop_arp_unresolved++;
            link_.release(p.frame);
        } else {
            pending_[keep++] = p;
        }
    }
    pending_.resize(keep);
    set_resolve_next(next);
}

} // namespace mars
