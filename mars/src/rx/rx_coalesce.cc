// rx_coalesce.cc: receive coalescing, the software equivalent of GRO.
//
// In the receive loop, before a frame
// takes the express path, input_run() looks at the frames right after it: if
// they continue it (a run of in-order data segments of one connection), the
// run is taken as one group: one header prediction (for its first frame),
// one window and ring-space check, the payloads copied back to back (each
// checksummed in the same pass where the NIC did not, as the one-by-one fast
// path does), then one update of the receive state, one delayed-ACK
// decision and one readable event. What the peer sees (the bytes, the ACKs
// and their timing) is what the one-by-one path produces: the ACK still goes
// out at the end of the burst, and the delayed-ACK rule counts segments, not
// groups (RFC 5681 4.2, RFC 1122 4.2.3.2). (With interleaved connections,
// per connection: their ACKs may leave in another order across them.)
//
// A frame joins the group of the frame before it only when
//   - its header equals the previous member's in every byte but the IP total
//     length, id and checksum, the TCP sequence number and checksum, PSH and
//     TSval (compared as 64-bit words): same MACs, IPv4 without options, TOS,
//     TTL, not a fragment, addresses, ports, ACK number, window, flags, data
//     offset, option layout (none, or NOP NOP TS) and TSecr. Linux's GRO also
//     requires identical ACK, window and options; it wants TSval identical
//     too, we allow it to grow (a 1 ms clock ticks inside bursts) and apply
//     TS.Recent per member as one by one would;
//   - flags: ACK only (the first member's prediction requires it; same_header
//     then keeps every member so), or ACK+PSH, which ends the group: it may
//     be the last member. FIN, SYN, RST and URG never merge (ECE/CWR, which
//     the fast path ignores, must equal the first member's);
//   - its sequence number is exactly the end of the group (no gap, overlap
//     or duplicate), it carries data, its IP checksum holds (the NIC's
//     verdict or checked here), and the group stays within 64 KiB of
//     payload. A group never spans bursts.
// The TCP checksum is checked per member while copying; a bad one ends the
// group there (that frame is dropped and counted, the rest go on one by one,
// as they would without coalescing). The first member must pass header
// prediction and carry data acking nothing new; a window that fills inside a
// group ends it (the rest take the full path, which trims or drops).
//
// Interleaved flows (a NIC burst from several busy connections): when
// input_run() refuses a frame because the next one is another
// connection's, gather_run() looks further and brings the segments of the
// frame's connection that follow next to it, the frames they passed after
// them (a stable partition of the burst's front), then input_run() tries
// again. Only frames of different connections change places; a
// connection's segments keep their arrival order, so every rule above
// holds per connection. The look is bounded: at most kGroMaxSkip frames of
// other connections between two of its segments, within kGroWindow frames,
// stopping at anything that is not certainly another connection's TCP
// segment (ARP, ICMP, IP options, a short frame), and after
// kGatherMissesMax looks that found nothing in a burst (say every frame is
// another connection's) no more looking in it. No heap: the frames passed
// wait in an array on the stack. The single-flow path is untouched (it
// never looks); an earlier version that linked members across interleaving
// in a pre-pass over every burst cost the one-flow stream more than it
// saved (benchmarks/README.md).
// Receive strands (StackConfig::strands > 1): a burst runs to completion
// while its frames are taken by a group or the express path; the frames the
// strand pipeline takes after that are not coalesced. With a copy engine
// nothing is coalesced: each payload is one asynchronous copy with its own
// completion (copy.cc).
#include "rx/fast_path.h"
#include "rx/host.h"

#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mars::rx {

using namespace wire;

namespace {

const Ipv4 *ip_of(const PacketRef &f) { return reinterpret_cast<const Ipv4 *>(f.data + kEthLen); }
const Tcp *tcp_of(const PacketRef &f) { return reinterpret_cast<const Tcp *>(f.data + kEthLen + kIpLen); }
// The timestamp option's TSval (NOP NOP TS layout, checked by the caller).
uint32_t tsval_of(const Tcp *th) { return be32(load32(reinterpret_cast<const uint8_t *>(th) + kTcpLen + 4)); }

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
// The words above as four 16-byte lanes (SSE2, in every x86-64): bytes
// 16-63 masked (0: not compared), bytes 0-15 compared whole, and with
// timestamps bytes 64-65 (TSecr's last two) compared apart.
alignas(16) constexpr uint64_t kSameMask[4][2] = {
    {0xffffffff00000000ull, 0xffffffffffff0000ull}, // 16-31: from the IP addresses on, not total length/id/csum
    {0x0000ffffffffffffull, 0xf7ffffffffff0000ull}, // 32-47: ports, ACK, flags but PSH; not seq
    {0xffffffff0000ffffull, 0xffff00000000ffffull}, // 48-63 with timestamps: not the TCP checksum, TSval
    {0x0000ffff0000ffffull, 0},                     // 48-63 without: window, urgent pointer
};
#if defined(__SSE2__)
inline bool same_header(const uint8_t *a, const uint8_t *b, bool ts)
{
    auto diff = [&](unsigned off) {
        return _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i *>(a + off)),
                             _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + off)));
    };
    auto mask = [](unsigned i) { return _mm_load_si128(reinterpret_cast<const __m128i *>(kSameMask[i])); };
    const __m128i d = _mm_or_si128(_mm_or_si128(diff(0), _mm_and_si128(diff(16), mask(0))),
                                   _mm_or_si128(_mm_and_si128(diff(32), mask(1)), _mm_and_si128(diff(48), mask(ts ? 2 : 3))));
    if (_mm_movemask_epi8(_mm_cmpeq_epi8(d, _mm_setzero_si128())) != 0xffff) return false;
    return !ts || load16(a + 64) == load16(b + 64);
}
#else
inline bool same_header(const uint8_t *a, const uint8_t *b, bool ts)
{
    auto diff = [&](unsigned off) { return load64(a + off) ^ load64(b + off); };
    uint64_t d = diff(0) | diff(8) | (diff(16) & kSameMask[0][0]) | (diff(24) & kSameMask[0][1]) |
                 (diff(32) & kSameMask[1][0]) | (diff(40) & kSameMask[1][1]);
    if (ts) return !(d | (diff(48) & kSameMask[2][0]) | (diff(56) & kSameMask[2][1]) | uint64_t(load16(a + 64) ^ load16(b + 64)));
    return !(d | (diff(48) & kSameMask[3][0]));
}
#endif

// The payload length of f if it may follow p (a member) in a group: the
// same header (same_header), a sane IP total length, a payload, an IP
// checksum that holds. 0: it may not.
inline uint32_t next_member_len(const PacketRef &p, const PacketRef &f, bool ts, unsigned hdr)
{
    // (p is a member: its length was checked when it joined)
    if (f.len < kFastCompareLen || (tcp_of(p)->flags & kPsh) || !same_header(p.data, f.data, ts))
        return 0;
    const unsigned total = be16(ip_of(f)->total_len);
    if (total + kEthLen > f.len || total <= hdr) return 0;
    if (!(f.flags & kRxIpCsumGood) && !csum_ok(csum_add(0, ip_of(f), kIpLen))) return 0;
    return total - hdr;
}

// A connection's addresses and ports as loaded from one of its frames.
struct WireFlow {
    uint64_t addrs; // IPv4 source and destination
    uint32_t ports;
};
constexpr unsigned kFlowBytes = kEthLen + kIpLen + 4; // through the TCP ports
inline WireFlow wire_flow_of(const uint8_t *d) { return {load64(d + kEthLen + 12), load32(d + kEthLen + kIpLen)}; }

// What a frame is to a group's connection (flow): a TCP/IPv4 segment of
// it, one of another connection, or anything else (another protocol, IP
// options, a frame too short to tell), which may concern the connection.
enum class Kin { kSame, kOther, kUnknown };
inline Kin kin_of(const PacketRef &f, const WireFlow &flow)
{
    if (f.len < kFlowBytes) return Kin::kUnknown;
    const uint8_t *d = f.data;
    if ((load32(d + 12) & kWireIpv4Mask) != kWireIpv4NoOptions || d[kEthLen + 9] != kProtoTcp) return Kin::kUnknown;
    const WireFlow w = wire_flow_of(d);
    return w.addrs == flow.addrs && w.ports == flow.ports ? Kin::kSame : Kin::kOther;
}

// Between two segments of the group's connection, at most kGroMaxSkip
// frames of other connections (8 flows interleaved round robin still
// merge, as Linux's GRO keeps 8 flows open), all within the first
// kGroWindow frames after the group's first.
constexpr unsigned kGroMaxSkip = 7;
constexpr unsigned kGroWindow = 64;

// frames[1] does not continue frames[0]. If frames of other connections
// come first and then one that may (the same header), brings the segments
// of frames[0]'s connection that follow (within the bounds above, up to
// the first frame that may concern it without being its segment) to
// frames[1..], in their order, the frames they passed after them, in
// theirs. Only frames of different connections change places: each
// connection's segments keep their order, as the stack must see it.
// False: nothing moved.
bool gather_flow(PacketRef *frames, uint16_t n, bool ts_layout)
{
    const uint8_t *d = frames[0].data;
    const WireFlow flow = wire_flow_of(d);
    // The connection's next segment, past at least one frame of another.
    uint16_t j = 1;
    for (unsigned run = 0; j < n && j <= kGroWindow; j++) {
        const Kin kin = kin_of(frames[j], flow);
        if (kin == Kin::kSame) break;
        if (kin == Kin::kUnknown || ++run > kGroMaxSkip) return false;
    }
    // It must be able to join frames[0]'s group.
    if (j == 1 || j == n || j > kGroWindow || frames[j].len < kFastCompareLen || !same_header(d, frames[j].data, ts_layout))
        return false;
    // Then every segment of the connection forward, the frames of others
    // they pass behind them (gathered in `passed` meanwhile, in order).
    alignas(PacketRef) unsigned char buf[kGroWindow * sizeof(PacketRef)];
    PacketRef *passed = reinterpret_cast<PacketRef *>(buf);
    uint16_t others = 0;
    while (others < j - 1) {
        passed[others] = frames[others + 1];
        others++;
    }
    frames[1] = frames[j];
    uint16_t mine = 2;
    for (unsigned run = 0; ++j < n && j <= kGroWindow;) {
        const PacketRef &f = frames[j];
        const Kin kin = kin_of(f, flow);
        if (kin == Kin::kOther) {
            if (++run > kGroMaxSkip) break;
            passed[others++] = f;
            continue;
        }
        if (kin == Kin::kUnknown) break;
        run = 0;
        frames[mine++] = f; // mine <= j: an earlier place, or its own
    }
    for (uint16_t i = 0; i < others; i++) frames[mine + i] = passed[i]; // [mine, j)
    return true;
}

} // namespace

uint16_t Receiver::input_run(PacketRef *frames, uint16_t n)
{
    tcp::Env &e = env();
    if (n < 2) return 0;
    PacketRef &first = frames[0];
    const uint8_t *d = first.data;
    // Cheap refusals first (the frame after must look like the next member),
    // then the full prediction for the first frame.
    if (first.len < kFastCompareLen || frames[1].len < kFastCompareLen || (d[kEthLen + kIpLen + 13] & kPsh) ||
        !same_header(d, frames[1].data, d[kEthLen + kIpLen + 12] != (kTcpLen / 4) << 4))
        return 0;
    // The connection: the last-flow cache's, else a table lookup (which
    // makes it the cached one, as the full path's lookup would).
    FlowNode *node = const_cast<FlowNode *>(flows().cached());
    const Sock *cached = node ? tcp::Env::sock_of(node) : nullptr;
    const bool hit = cached && load32(d + kEthLen + 12) == cached->wire_rip &&
                     load32(d + kEthLen + kIpLen) == cached->wire_ports;
    if (!hit) {
        FlowKey key; // (the lookup counts the cache miss)
        if (!frame_flow(first, &key) || !(node = flows().lookup(key))) return 0;
    }
    tcp::Hot &s = *tcp::Env::sock_of(node); // the fast path's part of it (fast_path.h)
    unsigned doff, seg_len; // doff: the same in every member
    if (!predicts(first, s, &doff, &seg_len)) return 0;
    const Tcp *th0 = tcp_of(first);
    const bool ts = doff != kTcpLen;
    const unsigned hdr = kIpLen + doff;
    const unsigned total0 = kIpLen + seg_len;
    // As tcp_fast_path: timestamps only when agreed, PAWS left to the full
    // path, in-order data (not a pure ACK) acking nothing new. Members'
    // TSvals do not go down, so if the first passes PAWS, all do.
    uint32_t tsval = ts ? tsval_of(th0) : 0;
    if (total0 <= hdr || be32(th0->ack) != s.snd_una || (ts && (!(s.flags & kFTsOk) || seq_lt(tsval, s.ts_recent))))
        return 0;
    const uint32_t src_ip = be32(ip_of(first)->src);
    // Room: the window offered and the ring's free space (kFHasRings was
    // predicted; no copies are in flight without a copy engine).
    const uint32_t room = std::min(s.rcv_adv - s.rcv_nxt, s.rx_mask + 1 - s.rx_readable());
    // The group stops short of the room and of 64 KiB, whichever is less.
    const uint32_t limit = std::min(room, kGroMaxBytes);
    uint32_t bytes = 0, len = total0 - hdr, last_len = 0;
    bool dropped = false;
    // The connection's fields the loop reads, in registers: the payload
    // copies may write anywhere as far as the compiler knows.
    uint8_t *const ring = s.rx;
    const uint32_t mask = s.rx_mask, tail = s.rx_tail, nxt = s.rcv_nxt, last_ack_sent = s.last_ack_sent;
    uint64_t wire_bytes = 0;
    PacketRef *f = frames;
    PacketRef *const end = frames + n;
    for (;;) {
        if (len > limit - bytes) break; // the rest one by one: the full path trims or drops it
        const Tcp *th = tcp_of(*f);
        const uint8_t *payload = f->data + kEthLen + hdr;
        const uint32_t off = (tail + bytes) & mask;
        const uint32_t part = std::min(len, mask + 1 - off);
        if (f->flags & kRxL4CsumGood) {
            std::memcpy(ring + off, payload, part);
            if (len > part) std::memcpy(ring, payload + part, len - part);
        } else {
            // Copied into free ring space and summed in one pass; the bytes
            // become readable only with the group's commit below.
            uint32_t sum = csum_add(pseudo_sum(src_ip, e.cfg_.ip, kProtoTcp, uint16_t(doff + len)), th, doff);
            sum = csum_combine(sum, csum_copy(ring + off, payload, part, 0), 0);
            if (len > part) sum = csum_combine(sum, csum_copy(ring, payload + part, len - part, 0), part);
            if (!csum_ok(sum)) {
                e.stats_.drop_tcp_csum++;
                e.stats_.rx_bytes += f->len;
                e.release(*f);
                dropped = true;
                break;
            }
        }
        // RFC 7323 4.3, per segment as one by one (in practice the first).
        if (ts && seq_le(nxt + bytes, last_ack_sent)) {
            s.ts_recent = tsval;
            s.ts_recent_ns = e.now_ns_;
        }
        bytes += len;
        last_len = len;
        wire_bytes += f->len;
        if (++f == end) break;
        // The next frame joins if it continues this one: same header, the
        // next sequence number, a TSval not going back.
        len = next_member_len(f[-1], *f, ts, hdr);
        if (!len || be32(tcp_of(*f)->seq) != nxt + bytes) break;
        if (ts) {
            const uint32_t v = tsval_of(tcp_of(*f));
            if (seq_lt(v, tsval)) break;
            tsval = v;
        }
    }
    const uint16_t taken = uint16_t(f - frames); // (the dropped frame, if any, is f: not taken)
    e.stats_.rx_bytes += wire_bytes;
    const uint32_t win = seg_window(s, th0); // (read before the frames go back)
    // The group's frames back to their owner in one call (each header was
    // compared with the next before; none is read after this).
    if (taken) release_rx_run(frames, taken);
    e.stats_.fastpath_hits += taken + dropped; // a bad checksum is the fast path's drop too
    if (hit && (taken || dropped)) flows().cache_hits++;
    if (taken == 0) return dropped ? 1 : 0;
    s.snd_wl1 = s.rcv_nxt + bytes - last_len;
    s.snd_wnd = win; // every member's (same_header), as predicted()
    s.rx_tail += bytes;
    s.rcv_nxt += bytes;
    s.bytes_in += bytes;
    s.segs_in += taken;
    s.last_recv_ns = e.now_ns_;
    // The delayed-ACK rule counts segments (at least every second one,
    // RFC 5681 4.2); the ACK itself goes out at the end of the burst. LRO
    // frames count as the MSS segments they hold: for the burst as a whole
    // (its bytes in MSS segments where that is more than its frames), so
    // the loop above pays nothing per frame for it.
    fast_ack_rule(e, s, bytes > taken * s.mss ? tcp::rx_segments(bytes, s.mss) : uint32_t(taken));
    e.raise(s, kEvReadable);
    if (taken >= 2) {
        e.stats_.rx_coalesce_groups++;
        e.stats_.rx_coalesce_segments += taken;
    }
    return uint16_t(taken + dropped);
}

// input_run() refused frames[0]: if the reason is that the frame after it
// is another connection's, brings the segments of frames[0]'s connection
// that follow next to it (gather_flow) so that input_run() may take them.
// Bounded per burst: after kGatherMissesMax looks that moved nothing (every
// frame another connection's, say), the rest of the burst goes without.
bool Receiver::gather_run(PacketRef *frames, uint16_t n)
{
    const PacketRef &first = frames[0];
    const uint8_t *d = first.data;
    if (first.len >= kFastCompareLen && !(d[kEthLen + kIpLen + 13] & kPsh) &&
        gather_flow(frames, n, d[kEthLen + kIpLen + 12] != (kTcpLen / 4) << 4))
        return true;
    gather_misses_++;
    return false;
}

} // namespace mars::rx
