// rx_coalesce.cc: receive coalescing, the software equivalent of GRO.
//
// Before the frames of a burst go through TCP input, in-order data segments
// of one connection are linked into groups (gro_build). A group is taken at
// its first frame's place in the burst (input_group): one connection lookup,
// one header prediction, one ring-space and window check, the payloads
// copied back to back (each checksummed in the same pass, as the one-by-one
// fast path does), then one update of the receive state, one delayed-ACK
// decision and one readable event. What the peer sees (the bytes, the ACKs,
// their timing within the burst) is what the one-by-one path produces: the
// ACK still goes out at the end of the burst, and the delayed-ACK rule
// counts segments, not groups (RFC 5681 4.2, RFC 1122 4.2.3.2).
//
// Merge rules (a frame that breaks one closes its flow's open group, so a
// later frame of that flow can never be moved ahead of it):
//   - same flow (source address, both ports), our MAC and address;
//   - IPv4 without options, not a fragment, IP checksum good (checked here
//     unless the NIC did), same TOS and TTL;
//   - only ACK set, or ACK+PSH: a PSH ends its group (it may be the last
//     member); FIN, SYN, RST, URG, ECE and CWR never merge;
//   - payload not empty (pure ACKs each feed congestion control: never merged);
//   - sequence number exactly the end of the previous member (no gap, no
//     overlap, no duplicate);
//   - same ACK number and same window field: a different ACK or window
//     changes the sender-side decision, as Linux's GRO requires identical
//     ones;
//   - same header length and option layout (none, or NOP NOP TS); with
//     timestamps, the same TSecr and a TSval not older than the previous
//     member's (Linux's GRO wants the options byte-identical; a TSval that
//     ticks within a burst is common at 1 ms clocks and harmless: PAWS and
//     TS.Recent are applied per member below);
//   - at most kGroMaxBytes (64 KiB) of payload per group; a group never
//     spans bursts (nor kGroChunk frames).
// The TCP checksum is checked per member while copying; a bad one ends the
// group there (that frame is dropped and counted, the rest go one by one,
// as they would without coalescing). Frames of different flows keep their
// order relative to their own flow; a group's later members are simply taken
// earlier than frames of other flows between them.
//
// With a copy engine (StackConfig::copy_engine) nothing is grouped: each
// payload is one asynchronous copy with its own completion (copy.cc).
#include "frame_bytes.h"
#include "stack_impl.h"

#include <algorithm>
#include <cstring>

namespace mars {

using namespace wire;

namespace {

const Ipv4 *ip_of(const PacketRef &f) { return reinterpret_cast<const Ipv4 *>(f.data + kEthLen); }
const Tcp *tcp_of(const PacketRef &f) { return reinterpret_cast<const Tcp *>(f.data + kEthLen + kIpLen); }
unsigned doff_of(const Tcp *th) { return (th->doff >> 4) * 4u; }
uint32_t payload_len(const PacketRef &f) { return be16(ip_of(f)->total_len) - kIpLen - doff_of(tcp_of(f)); }
// The timestamp option's TSval / TSecr (NOP NOP TS layout, checked by the caller).
uint32_t tsval_of(const Tcp *th) { return be32(load32(reinterpret_cast<const uint8_t *>(th) + kTcpLen + 4)); }
uint32_t tsecr_wire(const Tcp *th) { return load32(reinterpret_cast<const uint8_t *>(th) + kTcpLen + 8); }

// The flow a frame belongs to as (source address, port pair), for any TCP
// over IPv4 frame (IP options too: such a frame must still close its flow's
// group). False for everything else.
bool flow_key(const PacketRef &f, uint64_t *key)
{
    const uint8_t *d = f.data;
    if (f.len < kEthLen + kIpLen + 4 || load16(d + 12) != kWireEtherIpv4) return false;
    const unsigned ihl = (d[kEthLen] & 0xf) * 4u;
    if (d[kEthLen + 9] != kProtoTcp || ihl < kIpLen || f.len < kEthLen + ihl + 4) return false;
    *key = uint64_t(load32(d + kEthLen + 12)) << 32 | load32(d + kEthLen + ihl);
    return true;
}

inline uint64_t load64(const void *p)
{
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

// The header bytes two consecutive members of a group must share, compared
// as 64-bit words of the frames as loaded (little-endian): everything from
// the Ethernet header to the end of the TCP options except the IP total
// length, id and checksum, the TCP sequence number and checksum, the PSH bit
// and the TSval. Equal words mean equal MACs, IP version/length/TOS,
// fragment field, TTL, protocol, addresses, ports, ACK number, data offset,
// flags (but PSH), window, urgent pointer, option layout and TSecr. Both
// frames hold at least kFastCompareLen bytes.
constexpr unsigned kFastCompareLen = 66;
bool same_header(const uint8_t *a, const uint8_t *b, bool ts)
{
    auto diff = [&](unsigned off) { return load64(a + off) ^ load64(b + off); };
    uint64_t d = diff(0) | diff(8) | (diff(16) & 0xffffffff00000000ull) | (diff(24) & 0xffffffffffff0000ull) |
                 (diff(32) & 0x0000ffffffffffffull) | (diff(40) & 0xf7ffffffffff0000ull);
    if (ts) return !(d | (diff(48) & 0xffffffff0000ffffull) | (diff(56) & 0xffff00000000ffffull) | (load16(a + 64) ^ load16(b + 64)));
    return !(d | (diff(48) & 0x0000ffff0000ffffull));
}

struct OpenGroup {
    uint64_t key;
    uint32_t next_seq; // the sequence number the next member must carry
    uint32_t bytes;
    uint32_t tsval;    // the last member's (timestamps only)
    uint8_t head, tail;
    bool ts;           // NOP NOP TS layout
};

} // namespace

// Whether f, a frame with a flow key, may be a group member at all: the
// express path's frame checks (frame_bytes.h predicts()) that do not need
// the connection, plus the flags and a non-empty payload.
static bool gro_candidate(const PacketRef &f, uint32_t mac_lo, uint16_t mac_hi, uint32_t ip)
{
    const uint8_t *d = f.data;
    if (f.len < kHeadersLen || load32(d) != mac_lo || load16(d + 4) != mac_hi ||
        (load32(d + 12) & kWireIpv4Mask) != kWireIpv4NoOptions)
        return false;
    const Ipv4 *iph = ip_of(f);
    const Tcp *th = tcp_of(f);
    const unsigned total = be16(iph->total_len);
    if (iph->dst != ip || total + kEthLen > f.len || total < kIpLen + kTcpLen || (iph->frag & kWireFragMask) ||
        iph->ttl == 0)
        return false;
    if ((th->flags & ~kPsh) != kAck) return false;
    const unsigned doff = doff_of(th);
    if (doff != kTcpLen && (doff != kTcpLen + 12 || load32(th + 1) != kWireTsPrefix)) return false;
    if (doff >= total - kIpLen) return false; // no payload (or a data offset past the segment)
    return (f.flags & kRxIpCsumGood) || csum_ok(csum_add(0, iph, kIpLen));
}

// Whether candidate f continues the open group o whose last member is p.
static bool gro_continues(const OpenGroup &o, const PacketRef &p, const PacketRef &f)
{
    const Ipv4 *pi = ip_of(p), *fi = ip_of(f);
    const Tcp *pt = tcp_of(p), *ft = tcp_of(f);
    if (pi->tos != fi->tos || pi->ttl != fi->ttl || pt->ack != ft->ack || pt->win != ft->win || pt->doff != ft->doff ||
        be32(ft->seq) != o.next_seq || o.bytes + payload_len(f) > StackImpl::kGroMaxBytes)
        return false;
    if (doff_of(ft) == kTcpLen) return true;
    return tsecr_wire(pt) == tsecr_wire(ft) && seq_ge(tsval_of(ft), o.tsval);
}

// The common case, checked first: f continues the group the frame before it
// joined or opened (a flow's segments back to back). Every rule of
// gro_candidate and gro_continues, with the header compared as a whole
// against the last member's (which passed them). Returns f's payload length,
// 0 when the full classification must decide.
static uint32_t gro_next_in_run(const OpenGroup &o, const PacketRef &p, const PacketRef &f)
{
    if (f.len < kFastCompareLen || p.len < kFastCompareLen || !same_header(p.data, f.data, o.ts)) return 0;
    const unsigned total = be16(ip_of(f)->total_len);
    const unsigned hdr = kIpLen + (o.ts ? kTcpLen + 12 : kTcpLen);
    if (total + kEthLen > f.len || total <= hdr || be32(tcp_of(f)->seq) != o.next_seq) return 0;
    const uint32_t len = total - hdr;
    if (o.bytes + len > StackImpl::kGroMaxBytes) return 0;
    if (o.ts && !seq_ge(tsval_of(tcp_of(f)), o.tsval)) return 0;
    if (!(f.flags & kRxIpCsumGood) && !csum_ok(csum_add(0, ip_of(f), kIpLen))) return 0;
    return len;
}

void StackImpl::gro_build(PacketRef *frames, uint16_t n)
{
    constexpr unsigned kNone = ~0u;
    OpenGroup open[kGroOpenFlows];
    unsigned n_open = 0, last = kNone; // last: the group the previous frame joined or opened
    bool any = false;
    std::memset(gro_role_, kGroSingle, n);
    for (uint16_t j = 0; j < n; j++) {
        const PacketRef &f = frames[j];
        unsigned g = last;
        uint32_t len = g != kNone ? gro_next_in_run(open[g], frames[open[g].tail], f) : 0;
        bool push = false;
        if (!len) {
            uint64_t key;
            last = kNone;
            if (!flow_key(f, &key)) continue; // not TCP: no flow order to keep
            g = 0;
            while (g < n_open && open[g].key != key) g++;
            const bool candidate = gro_candidate(f, wire_mac_lo_, wire_mac_hi_, wire_ip_);
            push = candidate && (tcp_of(f)->flags & kPsh);
            if (g < n_open && !(candidate && gro_continues(open[g], frames[open[g].tail], f))) {
                open[g] = open[--n_open]; // closed: nothing later of this flow may join it
                g = n_open;
            }
            if (g == n_open) { // no open group of this flow: f may open one
                if (!candidate || push) continue;
                if (n_open == kGroOpenFlows) { // too many flows at once: the oldest group is closed
                    std::copy(open + 1, open + n_open, open);
                    n_open--;
                }
                const Tcp *th = tcp_of(f);
                const bool ts = doff_of(th) != kTcpLen;
                len = payload_len(f);
                open[n_open] = OpenGroup{key, be32(th->seq) + len, len, ts ? tsval_of(th) : 0, uint8_t(j), uint8_t(j), ts};
                gro_next_[j] = kGroEnd;
                gro_len_[j] = uint16_t(len);
                last = n_open++;
                continue;
            }
            len = payload_len(f);
        } else {
            push = tcp_of(f)->flags & kPsh;
        }
        OpenGroup &o = open[g];
        gro_next_[o.tail] = uint8_t(j);
        gro_next_[j] = kGroEnd;
        gro_len_[j] = uint16_t(len);
        gro_role_[o.head] = kGroHead;
        gro_role_[j] = kGroMember;
        o.tail = uint8_t(j);
        o.bytes += len;
        o.next_seq += len;
        if (o.ts) o.tsval = tsval_of(tcp_of(f));
        any = true;
        last = g;
        if (push) { // a PSH ends the group
            open[g] = open[--n_open];
            last = kNone;
        }
    }
    gro_frames_ = frames;
    gro_active_ = any;
}

void StackImpl::input_group(uint16_t head)
{
    uint8_t idx[kGroChunk];
    uint16_t c = 0;
    for (uint8_t j = uint8_t(head); j != kGroEnd; j = gro_next_[j]) idx[c++] = j;
    uint16_t k = 0;
    while (k < c) {
        if (c - k >= 2) {
            const uint16_t used = group_fast(idx + k, uint16_t(c - k));
            if (used) {
                k = uint16_t(k + used);
                continue;
            }
        }
        // Not predicted (another ACK number, the window full, a state the
        // fast path does not handle): this member alone, then the rest of
        // the group may be predicted again (e.g. after an ACK advanced snd_una).
        input_one(gro_frames_[idx[k++]]);
    }
}

uint16_t StackImpl::group_fast(const uint8_t *idx, uint16_t c)
{
    PacketRef &first = gro_frames_[idx[0]];
    FlowKey key;
    if (!frame_flow(first, &key)) return 0;
    FlowNode *node = flows_.lookup(key);
    if (!node) return 0;
    Sock &s = *sock_of(node);
    if (!predicts(first, s)) return 0;
    const Tcp *th0 = tcp_of(first);
    const unsigned doff = doff_of(th0); // the same in every member
    const bool ts = doff != kTcpLen;
    // As tcp_fast_path: timestamps only when agreed, PAWS left to the full
    // path, in-order data acking nothing new. (Members' TSvals do not go
    // down, so if the first passes PAWS, all do.)
    if (ts && (!(s.flags & kFTsOk) || seq_lt(tsval_of(th0), s.ts_recent))) return 0;
    if (be32(th0->ack) != s.snd_una) return 0;
    const uint32_t src_ip = be32(ip_of(first)->src);
    // Room: the window offered and the ring's free space (kFHasRings was
    // predicted; no copies are in flight without a copy engine).
    const uint32_t room = std::min(s.rcv_adv - s.rcv_nxt, s.rx_mask + 1 - s.rx_readable());
    uint32_t bytes = 0, last_seq = 0;
    uint16_t taken = 0;
    bool dropped = false;
    for (; taken < c; taken++) {
        PacketRef &f = gro_frames_[idx[taken]];
        const Tcp *th = tcp_of(f);
        const uint32_t len = gro_len_[idx[taken]];
        if (len > room - bytes) break; // the rest one by one: the full path trims or drops it
        const uint8_t *payload = f.data + kEthLen + kIpLen + doff;
        const uint32_t off = (s.rx_tail + bytes) & s.rx_mask;
        const uint32_t part = std::min(len, s.rx_mask + 1 - off);
        if (f.flags & kRxL4CsumGood) {
            std::memcpy(s.rx + off, payload, part);
            if (len > part) std::memcpy(s.rx, payload + part, len - part);
        } else {
            // Copied into free ring space and summed in one pass; the bytes
            // become readable only with the group's commit below.
            uint32_t sum = csum_add(pseudo_sum(src_ip, cfg_.ip, kProtoTcp, uint16_t(doff + len)), th, doff);
            sum = csum_combine(sum, csum_copy(s.rx + off, payload, part, 0), 0);
            if (len > part) sum = csum_combine(sum, csum_copy(s.rx, payload + part, len - part, 0), part);
            if (!csum_ok(sum)) {
                stats_.drop_tcp_csum++;
                release(f);
                dropped = true;
                break;
            }
        }
        last_seq = be32(th->seq);
        if (ts && seq_le(last_seq, s.last_ack_sent)) { // RFC 7323 4.3, per segment as one by one
            s.ts_recent = tsval_of(th);
            s.ts_recent_ns = now_ns_;
        }
        bytes += len;
        release_rx(f);
    }
    stats_.fastpath_hits += taken + dropped; // a bad checksum is the fast path's drop too
    if (taken == 0) return dropped ? 1 : 0;
    s.snd_wl1 = last_seq;
    s.rx_tail += bytes;
    s.rcv_nxt += bytes;
    s.bytes_in += bytes;
    s.segs_in += taken;
    s.last_recv_ns = now_ns_;
    // The delayed-ACK rule counts segments (at least every second one,
    // RFC 5681 4.2); the ACK itself goes out at the end of the burst.
    s.segs_unacked += taken;
    if (s.segs_unacked >= 2) {
        if (!(s.flags & kFAckNow)) ack_now(s);
    } else if (!TimerWheel::armed(&s.delack_timer)) {
        wheel_.arm(&s.delack_timer, now_ns_ + cfg_.tcp.delack_ns);
    }
    raise(s, kEvReadable);
    if (taken >= 2) {
        stats_.rx_coalesce_groups++;
        stats_.rx_coalesce_segments += taken;
    }
    return uint16_t(taken + dropped);
}

} // namespace mars
