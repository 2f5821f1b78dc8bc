// ppe/src/steer.cc: software flow steering between engines (see steer.h).
#include "steer.h"

#include <dti_abi.h>

#include <cstdlib>
#include <cstring>

namespace ppe {

namespace {

uint16_t load_be16(const uint8_t *p) { return uint16_t(p[0] << 8 | p[1]); }
uint32_t load_be32(const uint8_t *p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

constexpr uint32_t kEthLen = 14;
constexpr uint16_t kEtherIpv4 = 0x0800, kEtherArp = 0x0806, kEtherIpv6 = 0x86dd;
constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;
constexpr uint8_t kProtoIgmp = 2;
constexpr uint32_t kIp6Len = 40;
constexpr uint8_t kProtoIcmp6 = 58;
// ICMPv6 types (RFC 4443, RFC 4861).
constexpr uint8_t kIcmp6Unreach = 1, kIcmp6TooBig = 2, kIcmp6TimeExceeded = 3, kIcmp6ParamProblem = 4;
constexpr uint8_t kIcmp6EchoRequest = 128, kIcmp6EchoReply = 129;
constexpr uint8_t kNdSolicit = 135, kNdAdvert = 136;

// The owner of the TCP flow whose IPv6 header is at ip (len bytes from
// there), or `none` when it is no TCP segment with its ports.
uint32_t tcp6_owner(const uint8_t *ip, uint32_t len, uint32_t n_engines, uint32_t none)
{
    if (len < kIp6Len + 4 || (ip[0] >> 4) != 6 || ip[6] != kProtoTcp) return none;
    const uint8_t *tcp = ip + kIp6Len;
    return dti_flow_owner6(ip + 8, load_be16(tcp), ip + 24, load_be16(tcp + 2), n_engines);
}

// IPv6 (Ethernet payload at ip, len bytes). TCP to its flow's owner, neighbour
// solicitations and advertisements to every engine (each stack keeps its own
// neighbour cache, as for ARP), an ICMPv6 error quoting a TCP segment to that
// flow's owner, echo where received; the rest (UDP, MLD and anything behind an
// extension header: no walk) to engine 0, which holds every datagram socket
// and the multicast memberships.
uint32_t ip6_owner(const uint8_t *ip, uint32_t len, uint32_t n_engines)
{
    if (len < kIp6Len || (ip[0] >> 4) != 6) return kUdpEngine;
    if (ip[6] == kProtoTcp) return tcp6_owner(ip, len, n_engines, kUdpEngine);
    if (ip[6] != kProtoIcmp6 || len < kIp6Len + 4) return kUdpEngine;
    switch (ip[kIp6Len]) {
    case kNdSolicit:
    case kNdAdvert:
        return kSteerEvery;
    case kIcmp6EchoRequest:
    case kIcmp6EchoReply:
        return kSteerHere;
    case kIcmp6Unreach:
    case kIcmp6TooBig:
    case kIcmp6TimeExceeded:
    case kIcmp6ParamProblem:
        // The invoking packet follows the 8-byte ICMPv6 header.
        return tcp6_owner(ip + kIp6Len + 8, len >= kIp6Len + 8 ? len - kIp6Len - 8 : 0, n_engines, kUdpEngine);
    default:
        return kUdpEngine;
    }
}

} // namespace

uint32_t frame_owner(const uint8_t *f, uint32_t len, uint32_t n_engines)
{
    if (len < kEthLen) return kSteerHere;
    const uint16_t type = load_be16(f + 12);
    if (type == kEtherArp) return n_engines > 1 ? kSteerEvery : kSteerHere;
    if (type != kEtherIpv4 || n_engines <= 1)
        return type == kEtherIpv6 && n_engines > 1 ? ip6_owner(f + kEthLen, len - kEthLen, n_engines) : kSteerHere;
    const uint8_t *ip = f + kEthLen;
    if (len < kEthLen + 20) return kSteerHere;
    const uint32_t ihl = (ip[0] & 0x0f) * 4u;
    if ((ip[0] >> 4) != 4 || ihl < 20) return kSteerHere;
    // UDP sockets, their multicast memberships and IGMP live on engine 0
    // (dti/README.md "Datagram sockets"): a datagram another engine received
    // would find no socket there and be answered port unreachable.
    if (ip[9] == kProtoUdp || ip[9] == kProtoIgmp) return kUdpEngine;
    if (ip[9] != kProtoTcp) return kSteerHere;
    // A fragment (more-fragments set or an offset): the receiving stack drops
    // it; later fragments carry no ports to steer by anyway.
    if (load_be16(ip + 6) & 0x3fff) return kSteerHere;
    if (len < kEthLen + ihl + 4) return kSteerHere;
    const uint8_t *tcp = ip + ihl;
    // Received direction: source = remote, destination = local. The owner
    // function is symmetric, so the order does not matter.
    return dti_flow_owner(load_be32(ip + 12), load_be16(tcp), load_be32(ip + 16), load_be16(tcp + 2), n_engines);
}

bool frame_for_every_engine(const uint8_t *f, uint32_t len)
{
    if (len < kEthLen) return false;
    const uint16_t type = load_be16(f + 12);
    if (type == kEtherArp) return true;
    const uint8_t *ip = f + kEthLen;
    return type == kEtherIpv6 && len >= kEthLen + kIp6Len + 1 && ip[6] == kProtoIcmp6 &&
           (ip[kIp6Len] == kNdSolicit || ip[kIp6Len] == kNdAdvert);
}

void rss_fill_key(uint8_t *key, size_t len)
{
    for (size_t i = 0; i < len; i++) key[i] = (i & 1) ? 0x5a : 0x6d;
}

uint16_t rss_queue_of_entry(uint32_t entry, uint16_t queues)
{
    return uint16_t((entry % DTI_FLOW_RETA_SPAN) % queues);
}

bool rss_table_matches_owner(uint32_t reta_size)
{
    return reta_size >= DTI_FLOW_RETA_SPAN && reta_size % DTI_FLOW_RETA_SPAN == 0;
}

uint32_t flow_owner_hook(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, void *arg)
{
    return dti_flow_owner(lip, lport, rip, rport, *static_cast<const uint32_t *>(arg));
}

uint32_t flow_owner6_hook(const uint8_t *lip, uint16_t lport, const uint8_t *rip, uint16_t rport, void *arg)
{
    return dti_flow_owner6(lip, lport, rip, rport, *static_cast<const uint32_t *>(arg));
}

HelloRoute route_hello(const void *msg, size_t len, uint32_t n_engines)
{
    dti_ctl_msg m;
    if (len < sizeof m) return {HelloRoute::kNotHello, 0};
    std::memcpy(&m, msg, sizeof m);
    // Anything but a HELLO goes to an engine as today, whose DTI engine
    // reads it and answers with the protocol's own refusal.
    if (m.magic != DTI_CTL_MAGIC || m.type != DTI_CTL_HELLO) return {HelloRoute::kNotHello, 0};
    if (m.engine == DTI_ENGINE_ANY) return {HelloRoute::kAny, 0};
    if (m.engine >= n_engines) return {HelloRoute::kNoSuchEngine, m.engine};
    return {HelloRoute::kEngine, m.engine};
}

mars::PacketRef packet_of(rte_mbuf *m)
{
    uint32_t flags = 0;
    const uint64_t ol = m->ol_flags;
    if ((ol & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD) flags |= mars::kRxIpCsumGood;
    if ((ol & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD) flags |= mars::kRxL4CsumGood;
    return mars::PacketRef{m, rte_pktmbuf_mtod(m, uint8_t *), m->data_len, 0, flags};
}

SteerMesh::~SteerMesh()
{
    for (rte_ring *r : rings_) std::free(r);
}

bool SteerMesh::create(uint32_t n_engines, uint32_t entries, std::string *error)
{
    n_ = n_engines;
    rings_.assign(size_t(n_) * n_, nullptr);
    bells_ = std::make_unique<EngineBell[]>(n_);
    if (n_ <= 1) return true;
    const ssize_t size = rte_ring_get_memsize(entries);
    if (size < 0) {
        *error = "steering rings: " + std::to_string(entries) + " entries is not a power of two";
        return false;
    }
    for (uint32_t from = 0; from < n_; from++)
        for (uint32_t to = 0; to < n_; to++) {
            if (from == to) continue;
            const size_t bytes = (size_t(size) + RTE_CACHE_LINE_SIZE - 1) & ~size_t(RTE_CACHE_LINE_SIZE - 1);
            auto *r = static_cast<rte_ring *>(std::aligned_alloc(RTE_CACHE_LINE_SIZE, bytes));
            const std::string name = "steer" + std::to_string(from) + "to" + std::to_string(to);
            if (!r || rte_ring_init(r, name.c_str(), entries, RING_F_SP_ENQ | RING_F_SC_DEQ) != 0) {
                std::free(r);
                *error = "steering rings: cannot make ring " + name;
                return false;
            }
            rings_[from * n_ + to] = r;
        }
    return true;
}

Steering::Steering(const SteerMesh &mesh, uint32_t self) : mesh_(mesh), self_(self), n_(mesh.engines()) {}

void Steering::queue(uint32_t to, rte_mbuf *m)
{
    if (pending_n_[to] == kBurst) flush_one(to);
    pending_[to][pending_n_[to]++] = m;
}

uint16_t Steering::sort(mars::PacketRef *frames, uint16_t n)
{
    if (n_ <= 1) return n;
    uint16_t keep = 0;
    for (uint16_t i = 0; i < n; i++) {
        const uint32_t owner = frame_owner(frames[i].data, frames[i].len, n_);
        if (owner == kSteerHere || owner == self_) {
            frames[keep++] = frames[i];
            continue;
        }
        auto *m = static_cast<rte_mbuf *>(frames[i].handle);
        if (owner == kSteerEvery) {
            // Every stack reads the frame and none writes it: one reference
            // per engine, each released by its stack.
            rte_mbuf_refcnt_update(m, int16_t(n_ - 1));
            for (uint32_t e = 0; e < n_; e++)
                if (e != self_) queue(e, m);
            counters_.arp_out++;
            frames[keep++] = frames[i];
            continue;
        }
        queue(owner, m);
        counters_.out++;
    }
    return keep;
}

void Steering::flush_one(uint32_t to)
{
    const uint16_t k = pending_n_[to];
    if (!k) return;
    pending_n_[to] = 0;
    const unsigned sent =
        rte_ring_sp_enqueue_burst(mesh_.ring(self_, to), reinterpret_cast<void **>(pending_[to]), k, nullptr);
    if (sent < k) {
        rte_pktmbuf_free_bulk(pending_[to] + sent, k - sent);
        counters_.drops += k - sent;
    }
    if (sent) delivered_ |= 1u << to;
}

uint32_t Steering::flush()
{
    for (uint32_t to = 0; to < n_; to++) flush_one(to);
    const uint32_t got = delivered_;
    delivered_ = 0;
    return got;
}

bool Steering::has_incoming() const
{
    for (uint32_t from = 0; from < n_; from++)
        if (from != self_ && !rte_ring_empty(mesh_.ring(from, self_))) return true;
    return false;
}

uint16_t Steering::drain(mars::PacketRef *out, uint16_t max)
{
    if (n_ <= 1) return 0;
    if (max > kBurst) max = kBurst;
    rte_mbuf *m[kBurst];
    uint16_t got = 0;
    // Round-robin start so one busy neighbour cannot starve another.
    for (uint32_t k = 0; k < n_ && got < max; k++) {
        const uint32_t from = (next_drain_ + k) % n_;
        if (from == self_) continue;
        got = uint16_t(got + rte_ring_sc_dequeue_burst(mesh_.ring(from, self_), reinterpret_cast<void **>(m + got),
                                                       max - got, nullptr));
    }
    next_drain_ = (next_drain_ + 1) % n_;
    for (uint16_t i = 0; i < got; i++) {
        out[i] = packet_of(m[i]);
        (frame_for_every_engine(out[i].data, out[i].len) ? counters_.arp_in : counters_.in)++;
    }
    return got;
}

} // namespace ppe
