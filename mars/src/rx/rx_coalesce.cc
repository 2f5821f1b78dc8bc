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
//     TSval (compared as SSE2 lanes against the first member's header, which
//     each member equals): same MACs, IPv4 without options, TOS,
//     TTL, not a fragment, addresses, ports, ACK number, window, flags, data
//     offset, option layout (none, or NOP NOP TS) and TSecr. Linux's GRO also
//     requires identical ACK, window and options; it wants TSval identical
//     too, we allow it to grow (a 1 ms clock ticks inside bursts) and apply
//     TS.Recent as one by one would (only the first member can qualify:
//     input_run says why);
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

// A group's first member's header as same_header() compares it: each
// member's is compared against it (equal to the first's is equal to each
// member's before it). With SSE2 the first's lanes are kept masked in aligned
// memory, so each member costs its four loads, three masks and the compares.
#if defined(__SSE2__)
template <bool kTs> struct FirstHeader {
    alignas(16) __m128i ref[4];
    uint16_t tsecr_lo; // with timestamps, TSecr's last two bytes (64-65)
    explicit FirstHeader(const uint8_t *d0)
    {
        ref[0] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(d0));
        for (unsigned i = 1; i < 4; i++) ref[i] = _mm_and_si128(lane(d0, i), mask(i));
        tsecr_lo = kTs ? load16(d0 + 64) : 0;
    }
    static __m128i lane(const uint8_t *d, unsigned i) { return _mm_loadu_si128(reinterpret_cast<const __m128i *>(d + 16 * i)); }
    static __m128i mask(unsigned i)
    {
        return _mm_load_si128(reinterpret_cast<const __m128i *>(kSameMask[i == 3 && !kTs ? 3 : i - 1]));
    }
    // d: a frame of at least kFastCompareLen bytes
    bool matches(const uint8_t *d) const
    {
        const __m128i eq = _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(lane(d, 0), ref[0]),
                                                       _mm_cmpeq_epi8(_mm_and_si128(lane(d, 1), mask(1)), ref[1])),
                                         _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(lane(d, 2), mask(2)), ref[2]),
                                                       _mm_cmpeq_epi8(_mm_and_si128(lane(d, 3), mask(3)), ref[3])));
        return _mm_movemask_epi8(eq) == 0xffff && (!kTs || load16(d + 64) == tsecr_lo);
    }
};
#else
template <bool kTs> struct FirstHeader {
    const uint8_t *d0;
    explicit FirstHeader(const uint8_t *d) : d0(d) {}
    bool matches(const uint8_t *d) const { return same_header(d0, d, kTs); }
};
#endif

// What a group's copy loop took.
struct Group {
    PacketRef *end;      // the first frame not taken (the dropped one, if dropped)
    uint32_t bytes;      // payload bytes taken
    uint64_t wire_bytes; // their frames' lengths
    bool dropped;        // *end was dropped for a bad TCP checksum
};

// Copies a member's payload (len bytes, part of them to d1, the rest to d2:
// the ring wraps there) and sums it with its header where the NIC did not
// verify the checksum. False: the checksum fails (the bytes copied stay
// invisible: nothing commits them).
__attribute__((noinline)) bool copy_summed(const PacketRef &f, unsigned doff, uint32_t src_ip, uint32_t dst_ip,
                                           uint8_t *d1, uint8_t *d2, uint32_t len, uint32_t part)
{
    const Tcp *th = tcp_of(f);
    const uint8_t *payload = reinterpret_cast<const uint8_t *>(th) + doff;
    if (f.flags & kRxL4CsumGood) {
        std::memcpy(d1, payload, part);
        if (len > part) std::memcpy(d2, payload + part, len - part);
        return true;
    }
    uint32_t sum = csum_add(pseudo_sum(src_ip, dst_ip, kProtoTcp, uint16_t(doff + len)), th, doff);
    sum = csum_combine(sum, csum_copy(d1, payload, part, 0), 0);
    if (len > part) sum = csum_combine(sum, csum_copy(d2, payload + part, len - part, 0), part);
    return csum_ok(sum);
}

// The members' loop of a group whose first frame (f[0], len bytes of
// payload) passed header prediction; kTs: the NOP NOP TS layout (the data
// offset is then 32, else 20). Copies each member's payload into the free
// ring space after rx_tail and checks the next frame joins: its header
// equals the first member's in every byte same_header() compares (so equal
// to each member's before it), the member before it has no PSH, its IP
// lengths and checksum hold, its sequence number is the group's end, its
// TSval does not go back. Stops short of limit bytes. Nothing of the
// connection is written; the caller commits.
// Written for the registers a call leaves: across each memcpy only the frame
// pointer, the end, the ring destination, the group's sequence end, the
// bytes left before the ring's end or the limit, and the wire bytes are
// live; the rest is reloaded on the rare paths.
template <bool kTs>
__attribute__((always_inline)) inline Group copy_group(tcp::Env &e, tcp::Hot &s, PacketRef *f, PacketRef *const end,
                                                       uint32_t len, uint32_t limit, uint32_t src_ip, uint32_t tsval)
{
    constexpr unsigned doff = kTs ? kTcpLen + 12 : kTcpLen;
    constexpr unsigned hdr = kIpLen + doff;
    const FirstHeader<kTs> first(f->data);
    uint8_t *const ring = s.rx;
    const uint32_t ring_size = s.rx_mask + 1;
    const uint32_t nxt = s.rcv_nxt;
    uint8_t *dst = ring + (s.rx_tail & s.rx_mask);
    uint32_t seq_end = nxt; // the group's end: nxt + the bytes taken
    // Bytes the loop may copy straight to dst before it reaches the ring's
    // end or the limit (the ring then wraps once at most: limit <= its free space).
    uint32_t straight = std::min<uint32_t>(limit, uint32_t(ring + ring_size - dst));
    uint64_t wire_bytes = 0;
    bool dropped = false;
    for (;;) {
        if (len > straight) [[unlikely]] {
            if (len > limit - (seq_end - nxt)) break; // the rest one by one: the full path trims or drops it
            // The ring's end is inside this payload (or at its start).
            const uint32_t part = uint32_t(ring + ring_size - dst);
            if (!copy_summed(*f, doff, src_ip, e.cfg_.ip, dst, ring, len, part)) {
                dropped = true;
                break;
            }
            dst = ring + (len - part);
            straight = limit - (seq_end - nxt) - len;
        } else if (f->flags & kRxL4CsumGood) [[likely]] {
            std::memcpy(dst, f->data + kEthLen + hdr, len);
            dst += len;
            straight -= len;
        } else {
            // Copied into free ring space and summed in one pass; the bytes
            // become readable only with the group's commit.
            const Tcp *th = tcp_of(*f);
            uint32_t sum = csum_add(pseudo_sum(src_ip, e.cfg_.ip, kProtoTcp, uint16_t(doff + len)), th, doff);
            sum = csum_combine(sum, csum_copy(dst, reinterpret_cast<const uint8_t *>(th) + doff, len, 0), 0);
            if (!csum_ok(sum)) {
                dropped = true;
                break;
            }
            dst += len;
            straight -= len;
        }
        seq_end += len;
        wire_bytes += f->len;
        if (++f == end) break;
        // The next frame joins if it continues this one (above).
        const PacketRef &nf = *f;
        if (nf.len < kFastCompareLen || (tcp_of(f[-1])->flags & kPsh)) break;
        if (!first.matches(nf.data)) break;
        const unsigned total = be16(ip_of(nf)->total_len);
        if (total + kEthLen > nf.len || total <= hdr) break;
        if (!(nf.flags & kRxIpCsumGood) && !csum_ok(csum_add(0, ip_of(nf), kIpLen))) break;
        if (be32(tcp_of(nf)->seq) != seq_end) break;
        if constexpr (kTs) {
            const uint32_t v = tsval_of(tcp_of(nf));
            if (seq_lt(v, tsval)) break;
            tsval = v;
        }
        len = total - hdr;
    }
    return Group{f, seq_end - nxt, wire_bytes, dropped};
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
    const uint32_t tsval = ts ? tsval_of(th0) : 0;
    if (total0 <= hdr || be32(th0->ack) != s.snd_una || (ts && (!(s.flags & kFTsOk) || seq_lt(tsval, s.ts_recent))))
        return 0;
    const uint32_t src_ip = be32(ip_of(first)->src);
    // Room: the window offered and the ring's free space (kFHasRings was
    // predicted; no copies are in flight without a copy engine).
    const uint32_t room = std::min(s.rcv_adv - s.rcv_nxt, s.rx_mask + 1 - s.rx_readable());
    // The group stops short of the room and of 64 KiB, whichever is less.
    const uint32_t limit = std::min(room, kGroMaxBytes);
    const Group g = ts ? copy_group<true>(e, s, frames, frames + n, total0 - hdr, limit, src_ip, tsval)
                       : copy_group<false>(e, s, frames, frames + n, total0 - hdr, limit, src_ip, tsval);
    const uint16_t taken = uint16_t(g.end - frames); // (the dropped frame, if any, is g.end: not taken)
    if (g.dropped) {
        e.stats_.drop_tcp_csum++;
        e.stats_.rx_bytes += g.end->len;
        e.release(*g.end);
    }
    e.stats_.rx_bytes += g.wire_bytes;
    e.stats_.fastpath_hits += taken + g.dropped; // a bad checksum is the fast path's drop too
    if (hit && (taken || g.dropped)) flows().cache_hits++;
    if (taken == 0) return g.dropped ? 1 : 0;
    // (read before the frames go back: the window, every member's
    // (same_header), as predicted(); the last member's sequence number)
    const uint32_t win = seg_window(s, th0);
    const uint32_t last_seq = be32(tcp_of(g.end[-1])->seq);
    // The group's frames back to their owner in one call (none is read after this).
    release_rx_run(frames, taken);
    commit_group(e, s, g.bytes, taken, win, last_seq, ts, tsval);
    return uint16_t(taken + g.dropped);
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
