// rx_coalesce6.cc: receive coalescing (software GRO) over IPv6 (issue 31),
// the twin of rx_coalesce.cc's input_run() for TCP straight after a 40-byte
// IPv6 header. Same rules, same commit, same ACK policy (rx_coalesce.cc's
// header says them); what differs is the frame:
//   - the first member gets the checks tcp6_express() makes on its bytes
//     (our MAC, EtherType 86dd, version 6, TCP as the next header -- so no
//     extension header --, the payload length inside the frame, a
//     connection in FlowTable6 for its 4-tuple) and header prediction;
//   - a member joins when its header equals the first's in every byte but
//     the payload length, the TCP sequence number and checksum, PSH and
//     TSval: MACs, version, traffic class (ECN included: a CE mark ends a
//     group, as Linux's GRO flushes on it), flow label, next header, hop
//     limit, addresses, ports, ACK number, data offset, flags, window,
//     urgent pointer, option layout and TSecr;
//   - IPv6 has no header checksum; the TCP checksum over the IPv6
//     pseudo-header (RFC 8200 8.1) is summed in the copy where the NIC did
//     not vouch for it.
// Kept apart from rx_coalesce.cc, and reached only once input_run() has
// refused a burst (coalesce_run, tcp_in.cc), so that IPv4's group loop stays
// the code that was measured: a test before or inside input_run() moved
// its registers (benchmarks/README.md, "Receive coalescing over IPv6").
// Interleaved IPv6 connections are gathered as IPv4's (gather_flow6: the
// segments of the first frame's connection brought next to it, frames of
// other connections after them, within IPv4's bounds).
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

constexpr unsigned kTcp6Off = kEthLen + kIp6Len; // 54: the TCP header

const Tcp *tcp6_of(const PacketRef &f) { return reinterpret_cast<const Tcp *>(f.data + kTcp6Off); }
unsigned plen_of(const uint8_t *d) { return be16(load16(d + kEthLen + 4)); }
uint32_t tsval6_of(const Tcp *th) { return be32(load32(reinterpret_cast<const uint8_t *>(th) + kTcpLen + 4)); }

inline uint64_t load64(const void *p)
{
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

// The bytes two members share, as five 16-byte lanes of the frame as loaded
// (little-endian words): 0-15 whole (MACs, EtherType, version and traffic
// class), 16-31 but the payload length (18-19), 32-47 whole (addresses),
// 48-63 but the sequence number (58-61), 64-79 but PSH (67) and the TCP
// checksum (70-71), and with timestamps the NOP NOP TS prefix (74-77) but
// TSval (78-81); TSecr (82-85) is compared apart. Without timestamps 74-79
// are payload: not compared.
constexpr unsigned kCompare6Len = 80;
constexpr unsigned kCompare6TsLen = 86;
alignas(16) constexpr uint64_t kSame6Mask[6][2] = {
    {~0ull, ~0ull},                                 // 0-15
    {0xffffffff0000ffffull, ~0ull},                 // 16-31
    {~0ull, ~0ull},                                 // 32-47
    {~0ull, 0xffff00000000ffffull},                 // 48-63
    {0x0000fffff7ffffffull, 0x0000ffffffffffffull}, // 64-79 with timestamps
    {0x0000fffff7ffffffull, 0x000000000000ffffull}, // 64-79 without
};

// The first member's header as members are compared against it (equal to
// the first's is equal to every member's before it).
#if defined(__SSE2__)
template <bool kTs> struct FirstHeader6 {
    alignas(16) __m128i ref[5];
    uint32_t tsecr; // with timestamps (82-85)
    static __m128i lane(const uint8_t *d, unsigned i) { return _mm_loadu_si128(reinterpret_cast<const __m128i *>(d + 16 * i)); }
    static __m128i mask(unsigned i)
    {
        return _mm_load_si128(reinterpret_cast<const __m128i *>(kSame6Mask[i == 4 && !kTs ? 5 : i]));
    }
    explicit FirstHeader6(const uint8_t *d0)
    {
        for (unsigned i = 0; i < 5; i++) ref[i] = _mm_and_si128(lane(d0, i), mask(i));
        tsecr = kTs ? load32(d0 + 82) : 0;
    }
    // d: a frame of at least kCompare6Len bytes (kCompare6TsLen with timestamps)
    bool matches(const uint8_t *d) const
    {
        const __m128i eq = _mm_and_si128(
            _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(lane(d, 0), ref[0]),
                                        _mm_cmpeq_epi8(_mm_and_si128(lane(d, 1), mask(1)), ref[1])),
                          _mm_and_si128(_mm_cmpeq_epi8(lane(d, 2), ref[2]),
                                        _mm_cmpeq_epi8(_mm_and_si128(lane(d, 3), mask(3)), ref[3]))),
            _mm_cmpeq_epi8(_mm_and_si128(lane(d, 4), mask(4)), ref[4]));
        return _mm_movemask_epi8(eq) == 0xffff && (!kTs || load32(d + 82) == tsecr);
    }
};
#else
template <bool kTs> struct FirstHeader6 {
    uint64_t ref[10];
    uint32_t tsecr;
    static uint64_t mask(unsigned w) { return kSame6Mask[w / 2 == 4 && !kTs ? 5 : w / 2][w & 1]; }
    explicit FirstHeader6(const uint8_t *d0)
    {
        for (unsigned w = 0; w < 10; w++) ref[w] = load64(d0 + 8 * w) & mask(w);
        tsecr = kTs ? load32(d0 + 82) : 0;
    }
    bool matches(const uint8_t *d) const
    {
        uint64_t diff = 0;
        for (unsigned w = 0; w < 10; w++) diff |= (load64(d + 8 * w) & mask(w)) ^ ref[w];
        return !diff && (!kTs || load32(d + 82) == tsecr);
    }
};
#endif

struct Group6 {
    PacketRef *end;      // the first frame not taken (the dropped one, if dropped)
    uint32_t bytes;      // payload bytes taken
    uint64_t wire_bytes; // their frames' lengths
    bool dropped;        // *end was dropped for a bad TCP checksum
};

// Copies a member's payload (len bytes, part of them to d1, the rest to d2:
// the ring wraps there) and, where the NIC did not vouch for it, checks its
// TCP checksum over the IPv6 pseudo-header in the same pass. Out of line:
// a port that verifies checksums never comes here but at the ring's end.
__attribute__((noinline)) bool copy_summed6(const PacketRef &f, unsigned doff, uint8_t *d1, uint8_t *d2, uint32_t len,
                                            uint32_t part)
{
    const Tcp *th = tcp6_of(f);
    const uint8_t *payload = reinterpret_cast<const uint8_t *>(th) + doff;
    if (f.flags & kRxL4CsumGood) {
        std::memcpy(d1, payload, part);
        if (len > part) std::memcpy(d2, payload + part, len - part);
        return true;
    }
    const Ipv6 *ip = reinterpret_cast<const Ipv6 *>(f.data + kEthLen);
    uint32_t sum = csum_add(pseudo_sum6(ip->src, ip->dst, kProtoTcp, doff + len), th, doff);
    sum = csum_combine(sum, csum_copy(d1, payload, part, 0), 0);
    if (len > part) sum = csum_combine(sum, csum_copy(d2, payload + part, len - part, 0), part);
    return csum_ok(sum);
}

// The members' loop (rx_coalesce.cc's copy_group, for IPv6 frames): f[0]
// passed header prediction and carries len bytes; copies each member's
// payload after rx_tail and checks that the next joins. Stops short of
// limit bytes; writes nothing of the connection (the caller commits).
template <bool kTs>
__attribute__((always_inline)) inline Group6 copy_group6(const FirstHeader6<kTs> &first, tcp::Hot &s, PacketRef *f,
                                                         PacketRef *const end, uint32_t len, uint32_t limit,
                                                         uint32_t tsval)
{
    constexpr unsigned doff = kTs ? kTcpLen + 12 : kTcpLen;
    constexpr unsigned min_len = kTs ? kCompare6TsLen : kCompare6Len;
    uint8_t *const ring = s.rx;
    const uint32_t ring_size = s.rx_mask + 1;
    const uint32_t nxt = s.rcv_nxt;
    uint8_t *dst = ring + (s.rx_tail & s.rx_mask);
    uint32_t seq_end = nxt;
    uint32_t straight = std::min<uint32_t>(limit, uint32_t(ring + ring_size - dst));
    uint64_t wire_bytes = 0;
    bool dropped = false;
    for (;;) {
        if (len > straight) [[unlikely]] {
            if (len > limit - (seq_end - nxt)) break; // the rest one by one: the full path trims or drops it
            const uint32_t part = uint32_t(ring + ring_size - dst);
            if (!copy_summed6(*f, doff, dst, ring, len, part)) {
                dropped = true;
                break;
            }
            dst = ring + (len - part);
            straight = limit - (seq_end - nxt) - len;
        } else if (f->flags & kRxL4CsumGood) [[likely]] {
            std::memcpy(dst, f->data + kTcp6Off + doff, len);
            dst += len;
            straight -= len;
        } else {
            if (!copy_summed6(*f, doff, dst, dst, len, len)) {
                dropped = true;
                break;
            }
            dst += len;
            straight -= len;
        }
        seq_end += len;
        wire_bytes += f->len;
        if (++f == end) break;
        const PacketRef &nf = *f;
        if (nf.len < min_len || (tcp6_of(f[-1])->flags & kPsh)) break;
        if (!first.matches(nf.data)) break;
        const unsigned plen = plen_of(nf.data);
        if (plen + kTcp6Off > nf.len || plen <= doff) break;
        if (be32(tcp6_of(nf)->seq) != seq_end) break;
        if constexpr (kTs) {
            const uint32_t v = tsval6_of(tcp6_of(nf));
            if (seq_lt(v, tsval)) break;
            tsval = v;
        }
        len = plen - doff;
    }
    return Group6{f, seq_end - nxt, wire_bytes, dropped};
}

// Interleaved IPv6 connections (rx_coalesce.cc's gather_flow, for IPv6
// frames): what a frame is to a group's IPv6 connection: a
// TCP/IPv6 segment of it, one of another connection (addresses or ports
// differ), or anything else, which may concern it (ICMPv6, an extension
// header, a short frame) and ends the look.
enum class Kin6 { kSame, kOther, kUnknown };
// A connection's addresses and ports as loaded from one of its frames (the
// 36 bytes from the source address to the ports, 22-57), compared as words:
// a memcmp call per frame cost more than the look saved.
struct WireFlow6 {
    uint64_t w[4];
    uint32_t ports;
    explicit WireFlow6(const uint8_t *d)
    {
        for (unsigned i = 0; i < 4; i++) w[i] = load64(d + kEthLen + 8 + 8 * i);
        ports = load32(d + kTcp6Off);
    }
    // The ports first: connections from one peer differ there.
    bool same(const uint8_t *d) const
    {
        if (load32(d + kTcp6Off) != ports) return false;
        uint64_t diff = 0;
        for (unsigned i = 0; i < 4; i++) diff |= load64(d + kEthLen + 8 + 8 * i) ^ w[i];
        return diff == 0;
    }
};
inline Kin6 kin6_of(const PacketRef &f, const WireFlow6 &flow)
{
    if (f.len < kTcp6Off + 4) return Kin6::kUnknown;
    const uint8_t *d = f.data;
    if (load16(d + 12) != kWireEtherIpv6 || d[kEthLen + 6] != kProtoTcp) return Kin6::kUnknown;
    return flow.same(d) ? Kin6::kSame : Kin6::kOther;
}

// The bounds of IPv4's look (rx_coalesce.cc): at most kGroMaxSkip6 frames of
// other connections between two segments of the group's, all within the
// first kGroWindow6 frames.
constexpr unsigned kGroMaxSkip6 = 7;
constexpr unsigned kGroWindow6 = 64;

// frames[1] does not continue frames[0] (head: its header). If frames of
// other connections come first and then one that may, brings the segments
// of frames[0]'s connection that follow to frames[1..], in their order, and
// the frames they passed after them, in theirs (a stable partition: only
// frames of different connections change places). False: nothing moved.
template <bool kTs> bool gather_flow6(PacketRef *frames, uint16_t n, const FirstHeader6<kTs> &head)
{
    constexpr unsigned min_len = kTs ? kCompare6TsLen : kCompare6Len;
    const WireFlow6 flow(frames[0].data);
    uint16_t j = 1;
    for (unsigned run = 0; j < n && j <= kGroWindow6; j++) {
        const Kin6 kin = kin6_of(frames[j], flow);
        if (kin == Kin6::kSame) break;
        if (kin == Kin6::kUnknown || ++run > kGroMaxSkip6) return false;
    }
    if (j == 1 || j == n || j > kGroWindow6 || frames[j].len < min_len || !head.matches(frames[j].data)) return false;
    alignas(PacketRef) unsigned char buf[kGroWindow6 * sizeof(PacketRef)];
    PacketRef *passed = reinterpret_cast<PacketRef *>(buf);
    uint16_t others = 0;
    while (others < j - 1) {
        passed[others] = frames[others + 1];
        others++;
    }
    frames[1] = frames[j];
    uint16_t mine = 2;
    for (unsigned run = 0; ++j < n && j <= kGroWindow6;) {
        const PacketRef &f = frames[j];
        const Kin6 kin = kin6_of(f, flow);
        if (kin == Kin6::kOther) {
            if (++run > kGroMaxSkip6) break;
            passed[others++] = f;
            continue;
        }
        if (kin == Kin6::kUnknown) break;
        run = 0;
        frames[mine++] = f; // mine <= j: an earlier place, or its own
    }
    for (uint16_t i = 0; i < others; i++) frames[mine + i] = passed[i];
    return true;
}

} // namespace

// input_run() for a burst whose first frame is IPv6: frames[0] and the
// frames after it that continue it as one group (the same commit as
// input_run's). 0: refused, frames[0] takes the per-frame path.
uint16_t Receiver::input_run6(PacketRef *frames, uint16_t n)
{
    const PacketRef &first = frames[0];
    const uint8_t *d = first.data;
    // The first frame's layout (as tcp6_express reads it), long enough for
    // the header compare of its option layout; the rest per layout.
    if (first.len < kCompare6Len || load16(d + 12) != kWireEtherIpv6 || d[kEthLen + 6] != kProtoTcp ||
        (d[kEthLen] >> 4) != 6 || load32(d) != wire_mac_lo_ || load16(d + 4) != wire_mac_hi_ ||
        (d[kTcp6Off + 13] & kPsh))
        return 0;
    const unsigned doff = (d[kTcp6Off + 12] >> 4) * 4u;
    if (doff == kTcpLen) return input_run6_as<false>(frames, n);
    if (doff != kTcpLen + 12 || load32(d + kTcp6Off + kTcpLen) != kWireTsPrefix || first.len < kCompare6TsLen)
        return 0;
    return input_run6_as<true>(frames, n);
}

// kTs: the NOP NOP TS layout (the data offset 32), else none (20); frames[0]
// is long enough for FirstHeader6<kTs>.
template <bool kTs> uint16_t Receiver::input_run6_as(PacketRef *frames, uint16_t n)
{
    constexpr unsigned doff = kTs ? kTcpLen + 12 : kTcpLen;
    constexpr unsigned min_len = kTs ? kCompare6TsLen : kCompare6Len;
    tcp::Env &e = env();
    PacketRef &first = frames[0];
    const uint8_t *d = first.data;
    const unsigned plen = plen_of(d);
    if (plen <= doff || plen + kTcp6Off > first.len) return 0; // data, inside the frame
    const FirstHeader6<kTs> head(d);
    if (frames[1].len < min_len || !head.matches(frames[1].data)) {
        // Perhaps only because another connection's frame follows: its
        // segments after that are brought next to it (bounded per burst as
        // IPv4's look: gather_misses_).
        if (gather_misses_ >= kGatherMissesMax) return 0;
        if (!gather_flow6<kTs>(frames, n, head)) {
            gather_misses_++;
            return 0;
        }
    }
    const Tcp *th0 = tcp6_of(first);
    FlowKey6 key;
    std::memcpy(key.local.b, d + kEthLen + 24, 16);
    std::memcpy(key.remote.b, d + kEthLen + 8, 16);
    key.local_port = be16(th0->dport);
    key.remote_port = be16(th0->sport);
    FlowNode6 *node = flows6().lookup(key);
    if (!node) return 0;
    tcp::Hot &s = *static_cast<Sock *>(node->owner);
    if (!predicted(s, th0)) return 0;
    // As input_run: timestamps only when agreed, PAWS left to the full path,
    // data acking nothing new.
    const uint32_t tsval = kTs ? tsval6_of(th0) : 0;
    if (be32(th0->ack) != s.snd_una || (kTs && (!(s.flags & kFTsOk) || seq_lt(tsval, s.ts_recent)))) return 0;
    const uint32_t room = std::min(s.rcv_adv - s.rcv_nxt, s.rx_mask + 1 - s.rx_readable());
    const uint32_t limit = std::min(room, kGroMaxBytes);
    const Group6 g = copy_group6<kTs>(head, s, frames, frames + n, plen - doff, limit, tsval);
    const uint16_t taken = uint16_t(g.end - frames);
    if (g.dropped) {
        e.stats_.drop_tcp_csum++;
        e.stats_.rx_bytes += g.end->len;
        e.release(*g.end);
    }
    e.stats_.rx_bytes += g.wire_bytes;
    // As one by one: the layer counts a packet before TCP's checksum check,
    // and a bad checksum over IPv6 is Tcp6::check's drop, not the fast path's.
    e.stats_.ip6_in += taken + g.dropped;
    e.stats_.fastpath_hits += taken;
    if (taken == 0) return g.dropped ? 1 : 0;
    const uint32_t win = seg_window(s, th0);
    const uint32_t last_seq = be32(tcp6_of(g.end[-1])->seq);
    release_rx_run(frames, taken);
    commit_group(e, s, g.bytes, taken, win, last_seq, kTs, tsval); // as input_run
    return uint16_t(taken + g.dropped);
}

} // namespace mars::rx
