// tx_run.cc: transmit in runs (TcpConfig::tx_batch, mars/README.md
// "Transmit in runs").
//
// When tcp_output() may send several full segments of new data, they are
// built in one pass instead of one send_segment() call each: the header
// (template, options, ACK, window, IPv4 length and checksum) is made once
// into a local image, the frames come from the owner in one call, and each
// segment is that image copied, its sequence number patched (PSH/FIN on the
// last), and its payload copied from the send ring (summed in the same pass
// unless the port offloads TCP checksums). Then one update of the
// per-connection counters, ACK state and RACK's transmission log for the
// whole run, and the frames join the transmit burst in order.
//
// Where the port offers TCP segmentation offload (kOffloadTxTcpSeg), the run
// leaves as frames of up to PacketIo::tso_max_frame() bytes that the port
// cuts into the same segments (mars/checksum_offload.h).
//
// Both families (issue 31): every function below is a template on kV6, and
// the IPv4 instance is the code this was before IPv6 (benchmarks/
// tx-instructions unchanged). An IPv6 run's header image is the connection's
// 74-byte template (Conn::v6.hdr) with the options after it; the IPv6
// payload length stands for IPv4's total length, ID and header checksum
// (IPv6 has none: no kTxIpCsum), and the pseudo-header sum is over the
// 128-bit addresses (RFC 8200 8.1). The entry points (send_run,
// send_rtx_run) pick the instance with one predicted test of kFV6 per run.
//
// The contract (tests/unit/mars/sim/tx_run_test.cc): what goes on the wire,
// in order, and every counter and state change are exactly what the one by
// one path makes. So a run is only taken when the one by one path would
// send the same header in every segment: full segments, no D-SACK to report
// (that goes in the first ACK-bearing segment alone), and the template's
// MAC current (no ARP decision). Retransmissions go in runs too
// (send_rtx_run): several consecutive segments of one lost piece in SACK
// recovery, or below snd_max in the timeout's go-back-N, with
// send_segment(rtx)'s bookkeeping per segment, as TSO frames where the port
// offers TSO; never by reference (one by one, retransmissions are copied).
#include "tcp/sender.h"
#include "base/checksum.h"
#include "ip/ipv6_wire.h"
#include "tcp/recovery.h"
#include "tcp/timers.h"

#include <algorithm>
#include <cstring>

namespace mars::tcp {

using namespace wire;

// The largest header of a run: Ethernet, IPv4 (IPv6), TCP and 40 bytes of
// options.
constexpr unsigned kRunHeaderMax = kHeadersLen + 40;
constexpr unsigned kRunHeaderMax6 = kHeaders6Len + 40;

// What differs between the families' runs: the template, the IP header's
// length, the largest header image, the IP length fields, the pseudo-header.
template <bool kV6> struct Fam;
template <> struct Fam<false> {
    static constexpr unsigned kHdrs = kHeadersLen, kNet = kIpLen, kMax = kRunHeaderMax;
    static const uint8_t *tmpl(const Sock &s) { return s.hdr; }
    // The pseudo-header sum for tcp_len bytes of TCP (0: a TSO frame's).
    static uint32_t pseudo(const Env &e, const Sock &s, uint32_t tcp_len)
    {
        return pseudo_sum(e.cfg_.ip, s.app.remote.ip, kProtoTcp, uint16_t(tcp_len));
    }
    // The IP header's length fields (and IPv4's checksum) for tcp_len bytes
    // of TCP: a run's segments.
    static void set_len(const Env &e, uint8_t *h, uint32_t tcp_len)
    {
        Ipv4 *ip = reinterpret_cast<Ipv4 *>(h + kEthLen);
        ip->total_len = be16(uint16_t(kIpLen + tcp_len));
        ip->csum = (e.offloads_ & kOffloadTxIpCsum) ? 0 : csum_finish(csum_add(0, ip, kIpLen));
    }
    // A TSO frame's: the length of all of it, the checksum the port's.
    static void set_tso_len(uint8_t *h, uint32_t tcp_len)
    {
        Ipv4 *ip = reinterpret_cast<Ipv4 *>(h + kEthLen);
        ip->total_len = be16(uint16_t(kIpLen + tcp_len));
        ip->csum = 0;
    }
    static constexpr uint32_t kIpCsumFlag = kTxIpCsum;
    static constexpr uint32_t kTsoNeeds = kOffloadTxTcpSeg | kOffloadTxIpCsum | kOffloadTxTcpCsum;
};
template <> struct Fam<true> {
    static constexpr unsigned kHdrs = kHeaders6Len, kNet = kIp6Len, kMax = kRunHeaderMax6;
    static const uint8_t *tmpl(const Sock &s) { return s.v6.hdr; }
    static uint32_t pseudo(const Env &, const Sock &s, uint32_t tcp_len)
    {
        return pseudo_sum6(s.v6.local.b, s.v6.remote.b, kProtoTcp, tcp_len);
    }
    static void set_len(const Env &, uint8_t *h, uint32_t tcp_len) { set_tso_len(h, tcp_len); }
    static void set_tso_len(uint8_t *h, uint32_t tcp_len)
    {
        reinterpret_cast<Ipv6 *>(h + kEthLen)->payload_len = be16(uint16_t(tcp_len));
    }
    static constexpr uint32_t kIpCsumFlag = 0; // no IPv6 header checksum
    static constexpr uint32_t kTsoNeeds = kOffloadTxTcpSeg | kOffloadTxTcpCsum;
};

// The header every segment of a run carries, with payload bytes each: the
// template, the timestamp option and SACK blocks as send_segment() writes
// them, ACK, window, IP length (IPv4: and checksum). Returns its length. The
// sequence number and TCP checksum are left for each segment.
template <bool kV6> unsigned run_header(Env &e, Sock &s, uint8_t *h, uint32_t payload)
{
    using F = Fam<kV6>;
    std::memcpy(h, F::tmpl(s), F::kHdrs);
    Tcp *th = reinterpret_cast<Tcp *>(h + kEthLen + F::kNet);
    uint8_t *o = h + F::kHdrs;
    uint8_t *q = o;
    if (s.flags & kFTsOk) q = write_ts_option(q, e.tsval(), s.ts_recent);
    if ((s.flags & kFSackOk) && !s.rec.ooo.empty()) {
        const int room = int(s.path_mtu) - int(F::kNet + kTcpLen) - int(q - o) - int(payload) - 4;
        const int max = std::min(room / 8, (s.flags & kFTsOk) ? 3 : 4);
        if (max > 0) {
            SeqRange b[4];
            const int n = s.rec.ooo.sack_blocks(e.ooo_pool_, b, max);
            if (n > 0) q = write_sack_option(q, b, n);
        }
    }
    const unsigned optlen = unsigned(q - o);
    const unsigned hlen = kTcpLen + optlen;
    th->ack = be32(s.rcv_nxt);
    th->doff = uint8_t((hlen / 4) << 4);
    th->flags = kAck;
    th->win = be16(window_to_advertise(e, s));
    th->csum = 0;
    th->urp = 0;
    F::set_len(e, h, hlen + payload);
    return F::kHdrs + optlen;
}

// One segment of a run into fr: the header image, its sequence number, the
// payload from the send ring and the TCP checksum (or the offload's seed,
// `pseudo` folded, mars/checksum_offload.h).
template <bool kV6>
void run_fill(Env &e, Sock &s, PacketRef &fr, const uint8_t *h, unsigned hdr_len, uint32_t seq, uint32_t len,
              uint32_t pseudo)
{
    using F = Fam<kV6>;
    uint8_t *p = fr.data;
    // A fixed size, so the copy is a few vector moves rather than a call; the
    // bytes past hdr_len are overwritten by the payload (a segment carries
    // at least 64 bytes, and the caller checked the frame's room).
    static_assert(F::kMax <= F::kHdrs + 64);
    std::memcpy(p, h, F::kMax);
    Tcp *th = reinterpret_cast<Tcp *>(p + kEthLen + F::kNet);
    th->seq = be32(seq);
    uint8_t *dst = p + hdr_len;
    const uint32_t off = (seq - s.iss - 1) & s.tx_mask;
    const uint32_t first = std::min(len, s.tx_mask + 1 - off);
    if (e.offloads_ & kOffloadTxTcpCsum) {
        std::memcpy(dst, s.tx + off, first);
        std::memcpy(dst + first, s.tx, len - first);
        th->csum = csum_fold(pseudo);
        fr.flags |= kTxTcpCsum;
    } else {
        const unsigned hlen = hdr_len - kEthLen - F::kNet;
        uint32_t sum = csum_add(pseudo, th, hlen);
        sum = csum_combine(sum, csum_copy(dst, s.tx + off, first, 0), hlen);
        if (len > first) sum = csum_combine(sum, csum_copy(dst + first, s.tx, len - first, 0), hlen + first);
        th->csum = csum_finish(sum);
    }
    if (!kV6 && (e.offloads_ & kOffloadTxIpCsum)) fr.flags |= F::kIpCsumFlag;
    fr.len = uint16_t(hdr_len + len);
}

// One segment of a run into fr with its payload attached from the send ring
// in place (kOffloadTxExternal): the frame's buffer holds the header image
// only. The TCP checksum still reads the payload unless the port offloads
// it. False, with fr untouched, where the payload wraps around the ring's
// end (two pieces) or the port has nothing to attach it with: the caller
// copies instead. The frame takes a reference on the socket's TxRefs, which
// the port drops when it lets go of the frame.
template <bool kV6>
bool run_fill_ref(Env &e, Sock &s, PacketRef &fr, const uint8_t *h, unsigned hdr_len, uint32_t seq, uint32_t len,
                  uint32_t pseudo)
{
    using F = Fam<kV6>;
    const uint32_t off = (seq - s.iss - 1) & s.tx_mask;
    if (off + len > s.tx_mask + 1 || F::kMax > fr.room) return false;
    const uint8_t *payload = s.tx + off;
    if (!e.io_.attach_external(fr, payload, uint16_t(len), s.tx_refs.take(s.tx_head))) return false;
    s.tx_refs.refs[s.tx_refs.current]++;
    if (!s.tx_refs.listed) {
        s.tx_refs.listed = true;
        e.tx_ref_socks_.push_back(s.index);
    }
    uint8_t *p = fr.data;
    std::memcpy(p, h, F::kMax); // a fixed size: a few vector moves (run_fill)
    Tcp *th = reinterpret_cast<Tcp *>(p + kEthLen + F::kNet);
    th->seq = be32(seq);
    if (e.offloads_ & kOffloadTxTcpCsum) {
        th->csum = csum_fold(pseudo);
        fr.flags |= kTxTcpCsum;
    } else {
        const unsigned hlen = hdr_len - kEthLen - F::kNet;
        th->csum = csum_finish(csum_combine(csum_add(pseudo, th, hlen), csum_add(0, payload, len), hlen));
    }
    if (!kV6 && (e.offloads_ & kOffloadTxIpCsum)) fr.flags |= F::kIpCsumFlag;
    fr.len = uint16_t(hdr_len);
    e.stats_.tx_ref_frames++;
    e.stats_.tx_ref_bytes += len;
    return true;
}

// What send_segment() does per segment, once for a run of `sent` segments
// from seq.
void run_sent(Env &e, Sock &s, uint32_t seq, uint32_t sent)
{
    s.flags &= ~kFAckNow;
    TimerWheel::cancel(&s.delack_timer);
    s.segs_unacked = 0;
    s.last_ack_sent = s.rcv_nxt;
    s.count.segs_out += sent;
    s.count.bytes_out += uint64_t(sent) * s.mss;
    if (s.flags & kFSackOk) rack_sent(e, s, seq, sent * s.mss, false); // back to back: one log entry
    s.last_send_ns = e.now_ns_;
    e.stats_.tx_runs++;
    e.stats_.tx_run_segments += sent;
}

// TSO: the port takes frames of several segments and offloads checksums
// (IPv4: both; IPv6 has no header checksum). 0 where it does not, or a frame
// would not hold two segments.
template <bool kV6> [[gnu::always_inline]] inline uint32_t tso_per_frame(const Env &e, const Sock &s)
{
    using F = Fam<kV6>;
    constexpr uint32_t kTsoNeeds = F::kTsoNeeds;
    if (!e.cfg_.tcp.tso || (e.offloads_ & kTsoNeeds) != kTsoNeeds) return 0;
    const uint32_t max_frame = std::min<uint32_t>(e.io_.tso_max_frame(), 65535);
    const uint32_t hdr_max = F::kMax;
    const uint32_t per_frame = max_frame > hdr_max ? (max_frame - hdr_max) / s.mss : 0;
    return per_frame >= 2 ? per_frame : 0;
}

template <bool kV6> uint32_t send_tso(Env &e, Sock &s, uint32_t n, uint8_t last_flags, uint32_t per_frame);
template <bool kV6> uint32_t send_run_sw(Env &e, Sock &s, uint32_t seq, uint32_t n, uint8_t last_flags);

template <bool kV6> uint32_t send_run_as(Env &e, Sock &s, uint32_t n, uint8_t last_flags)
{
    if (const uint32_t per_frame = tso_per_frame<kV6>(e, s)) return send_tso<kV6>(e, s, n, last_flags, per_frame);
    return send_run_sw<kV6>(e, s, s.snd_nxt, n, last_flags);
}

// IPv6 runs out of line (as send_segment6): the IPv4 instance is inlined
// into send_run as before.
__attribute__((noinline)) static uint32_t send_run6(Env &e, Sock &s, uint32_t n, uint8_t last_flags)
{
    return send_run_as<true>(e, s, n, last_flags);
}

uint32_t send_run(Env &e, Sock &s, uint32_t n, uint8_t last_flags)
{
    if (__builtin_expect(s.flags & kFV6, 0)) return send_run6(e, s, n, last_flags);
    return send_run_as<false>(e, s, n, last_flags);
}

// What a run segmented here starts with, new data or retransmitted: its
// frames from the owner in one call (fr), the header image every segment
// copies (h, Fam::kMax bytes) and its length, and the pseudo-header sum
// of one full segment. Returns how many frames the owner gave (0: nothing
// to send, the rest unset). Inlined into both callers: their locals stay in
// registers, as before it was shared (instruction counts unchanged).
template <bool kV6>
[[gnu::always_inline]] inline uint32_t run_start(Env &e, Sock &s, uint32_t n, PacketRef *fr, uint8_t *h,
                                                 unsigned *hdr_len, uint32_t *pseudo)
{
    using F = Fam<kV6>;
    const uint32_t got = e.link_.alloc_run(fr, uint16_t(n));
    if (got == 0) return 0;
    *hdr_len = run_header<kV6>(e, s, h, s.mss);
    const unsigned tcp_len = *hdr_len - kEthLen - F::kNet + s.mss;
    *pseudo = F::pseudo(e, s, tcp_len);
    return got;
}

// n segments from seq, segmented here.
template <bool kV6> uint32_t send_run_sw(Env &e, Sock &s, uint32_t seq, uint32_t n, uint8_t last_flags)
{
    using F = Fam<kV6>;
    const uint32_t mss = s.mss;
    PacketRef fr[kRunMax];
    alignas(8) uint8_t h[F::kMax] = {}; // run_fill copies all of it: no stale bytes
    unsigned hdr_len;
    uint32_t pseudo;
    const uint32_t got = run_start<kV6>(e, s, n, fr, h, &hdr_len, &pseudo);
    if (got == 0) return 0;
    const bool by_ref = e.cfg_.tcp.tx_zerocopy && (e.offloads_ & kOffloadTxExternal);
    uint32_t sent = 0;
    for (uint32_t q = seq; sent < got; sent++, q += mss) {
        if (sent + 1 == n) reinterpret_cast<Tcp *>(h + kEthLen + F::kNet)->flags = last_flags;
        if (by_ref && run_fill_ref<kV6>(e, s, fr[sent], h, hdr_len, q, mss, pseudo)) continue;
        if (hdr_len + mss > fr[sent].room) {
            e.stats_.drop_tx_no_buffer++; // as send_segment(): the frame is too small
            break;
        }
        run_fill<kV6>(e, s, fr[sent], h, hdr_len, q, mss, pseudo);
    }
    if (sent < got) e.io_.release(fr + sent, uint16_t(got - sent));
    if (sent == 0) return 0;
    run_sent(e, s, seq, sent);
    // Every frame is one segment of hdr_len + mss bytes on the wire (one by
    // reference holds only its header: its payload is attached).
    e.link_.queue_run(fr, sent, uint64_t(sent) * (hdr_len + mss));
    return sent;
}

uint32_t rtx_run_len(const Env &e, const Sock &s, uint32_t seq, uint32_t end, uint32_t budget)
{
    if (!e.cfg_.tcp.tx_batch || (s.flags & kFDsack) || s.arp_gen != e.arp_.generation() || !seq_lt(seq, end)) return 0;
    const uint32_t n = std::min({(end - seq) / s.mss, budget / s.mss, kRunMax});
    return n >= 2 ? n : 0;
}

// Recovery's rule before the run's i-th segment (log_room): RACK's log has
// room for its record; the caller checked before the first.
[[gnu::always_inline]] inline bool rtx_log_room(Env &, Sock &s, uint32_t i, bool log_room)
{
    return !log_room || i == 0 || s.rack.log.has_room(s.snd_una);
}

// What send_segment(rtx) does per segment besides RACK's log, once for the
// `sent` segments of a run.
[[gnu::always_inline]] inline void rtx_run_sent(Env &e, Sock &s, uint32_t sent)
{
    s.flags &= ~kFAckNow;
    TimerWheel::cancel(&s.delack_timer);
    s.segs_unacked = 0;
    s.last_ack_sent = s.rcv_nxt;
    s.count.segs_out += sent;
    s.count.total_retransmits += sent;
    e.stats_.tcp_retransmits += sent;
    s.last_send_ns = e.now_ns_;
    e.stats_.tx_runs++;
    e.stats_.tx_run_segments += sent;
    e.rtx_run_segments_ += sent;
}

// Segments done..n of the run from seq, segmented here. (The three above
// are inlined into send_rtx_run: as calls they cost a copied run ~24
// instructions per segment, benchmarks/rtx-instructions.)
template <bool kV6>
[[gnu::always_inline]] inline uint32_t send_rtx_sw(Env &e, Sock &s, uint32_t seq, uint32_t n, uint32_t done,
                                                   uint8_t last_flags, bool log_room)
{
    using F = Fam<kV6>;
    const uint32_t mss = s.mss;
    PacketRef fr[kRunMax];
    alignas(8) uint8_t h[F::kMax] = {}; // run_fill copies all of it: no stale bytes
    unsigned hdr_len;
    uint32_t pseudo;
    const uint32_t got = run_start<kV6>(e, s, n - done, fr, h, &hdr_len, &pseudo);
    if (got == 0) return 0;
    Tcp *th = reinterpret_cast<Tcp *>(h + kEthLen + F::kNet);
    uint32_t sent = 0;
    const bool sack = s.flags & kFSackOk;
    for (uint32_t q = seq + done * mss; sent < got; sent++, q += mss) {
        if (!rtx_log_room(e, s, done + sent, log_room)) break;
        if (hdr_len + mss > fr[sent].room) {
            e.stats_.drop_tx_no_buffer++; // as send_segment(): the frame is too small
            break;
        }
        if (done + sent + 1 == n) th->flags = last_flags;
        run_fill<kV6>(e, s, fr[sent], h, hdr_len, q, mss, pseudo);
        if (sack) rack_sent(e, s, q, mss, true);
    }
    if (sent < got) e.io_.release(fr + sent, uint16_t(got - sent));
    e.link_.queue_run(fr, sent, uint64_t(sent) * (hdr_len + mss));
    return sent;
}

template <bool kV6>
uint32_t send_rtx_tso(Env &e, Sock &s, uint32_t seq, uint32_t n, uint8_t last_flags, bool log_room,
                      uint32_t per_frame, bool *stop);

// Retransmissions in one pass. The segments, in order, are what n calls of
// send_segment(s, seq + i * mss, mss, flags, true) put on the wire: the same
// header image (no D-SACK waits, so every segment's options are the same),
// PSH only where the caller says the last one ends the data. Where the port
// offers TSO they leave as TSO frames (the port cuts the same segments),
// the rest, or all, segmented here. Each segment is recorded in RACK's log
// as send_segment() records it (back to back, the records extend one entry),
// after the room check recovery makes per retransmission, so the log ends
// exactly as one by one leaves it and a full log ends the run there.
template <bool kV6>
[[gnu::always_inline]] inline uint32_t send_rtx_run_as(Env &e, Sock &s, uint32_t seq, uint32_t n,
                                                       uint8_t last_flags, bool log_room)
{
    uint32_t sent;
    if (const uint32_t per_frame = tso_per_frame<kV6>(e, s)) {
        bool stop = false;
        sent = send_rtx_tso<kV6>(e, s, seq, n, last_flags, log_room, per_frame, &stop);
        if (!stop && sent < n) sent += send_rtx_sw<kV6>(e, s, seq, n, sent, last_flags, log_room);
    } else {
        sent = send_rtx_sw<kV6>(e, s, seq, n, 0, last_flags, log_room); // done = 0: the copying path's code as before
    }
    if (sent > 0) rtx_run_sent(e, s, sent);
    return sent;
}

__attribute__((noinline)) static uint32_t send_rtx_run6(Env &e, Sock &s, uint32_t seq, uint32_t n,
                                                        uint8_t last_flags, bool log_room)
{
    return send_rtx_run_as<true>(e, s, seq, n, last_flags, log_room);
}

uint32_t send_rtx_run(Env &e, Sock &s, uint32_t seq, uint32_t n, uint8_t last_flags, bool log_room)
{
    if (__builtin_expect(s.flags & kFV6, 0)) return send_rtx_run6(e, s, seq, n, last_flags, log_room);
    return send_rtx_run_as<false>(e, s, seq, n, last_flags, log_room);
}

// Segments done.. of the run as TSO frames of up to per_frame segments. The
// segments of a frame are logged in RACK's log before it is filled: where the
// log has no room for one, the frame carries those before it (one alone
// goes as an ordinary frame) and the run stops. A last piece of one segment,
// a port without a large buffer left or one too small: the rest is
// segmented here (send_rtx_sw).
template <bool kV6>
uint32_t send_rtx_tso(Env &e, Sock &s, uint32_t seq, uint32_t n, uint8_t last_flags, bool log_room,
                      uint32_t per_frame, bool *stop)
{
    using F = Fam<kV6>;
    const uint32_t mss = s.mss;
    const bool sack = s.flags & kFSackOk;
    alignas(8) uint8_t h[F::kMax] = {};
    unsigned hdr_len = 0;
    uint32_t one_seg_pseudo = 0;
    Tcp *th = reinterpret_cast<Tcp *>(h + kEthLen + F::kNet);
    uint32_t sent = 0;
    while (n - sent >= 2) {
        uint32_t k = std::min(per_frame, n - sent);
        PacketRef fr;
        if (!e.link_.alloc_tso(&fr)) break;
        if (hdr_len == 0) {
            hdr_len = run_header<kV6>(e, s, h, mss);
            one_seg_pseudo = F::pseudo(e, s, hdr_len - kEthLen - F::kNet + mss);
        }
        if (hdr_len + k * mss > fr.room) {
            e.io_.release(&fr, 1);
            break;
        }
        const uint32_t q = seq + sent * mss;
        uint32_t logged = 0;
        for (; logged < k && rtx_log_room(e, s, sent + logged, log_room); logged++)
            if (sack) rack_sent(e, s, q + logged * mss, mss, true);
        *stop = logged < k;
        k = logged;
        if (k == 0) {
            e.io_.release(&fr, 1);
            break;
        }
        // One header for the frame: the IP length of all of it (for one
        // segment, that segment's), IPv4's checksum 0 (offloaded).
        F::set_tso_len(h, hdr_len - kEthLen - F::kNet + k * mss);
        th->flags = sent + k == n ? last_flags : kAck;
        if (k >= 2) {
            run_fill<kV6>(e, s, fr, h, hdr_len, q, k * mss, F::pseudo(e, s, 0));
            fr.flags |= kTxTcpSeg | tx_seg_flags(uint16_t(mss));
            e.stats_.tx_tso_frames++;
            e.rtx_tso_frames_++;
        } else {
            run_fill<kV6>(e, s, fr, h, hdr_len, q, mss, one_seg_pseudo);
        }
        e.link_.queue(fr, k, k * (hdr_len + mss));
        sent += k;
        if (*stop) break;
    }
    return sent;
}

// The run as TSO frames of up to per_frame segments each. A last piece of
// one segment is an ordinary frame; where the port has no large buffer
// left, the rest is segmented here. By reference (tx_zerocopy and the
// port's kOffloadTxExternal) a frame's buffer holds its header only and
// the payload is attached from the send ring in place (run_fill_ref: one
// frame whose payload wraps around the ring's end is copied as before).
template <bool kV6> uint32_t send_tso(Env &e, Sock &s, uint32_t n, uint8_t last_flags, uint32_t per_frame)
{
    using F = Fam<kV6>;
    const uint32_t mss = s.mss;
    uint32_t sent = 0;
    alignas(8) uint8_t h[F::kMax] = {};
    unsigned hdr_len = 0;
    const bool by_ref = e.cfg_.tcp.tx_zerocopy && (e.offloads_ & kOffloadTxExternal);
    while (n - sent >= 2) {
        const uint32_t k = std::min(per_frame, n - sent);
        PacketRef fr;
        if (!e.link_.alloc_tso(&fr)) break;
        if (hdr_len == 0) hdr_len = run_header<kV6>(e, s, h, mss);
        if (hdr_len + k * mss > fr.room) {
            e.io_.release(&fr, 1);
            break;
        }
        Tcp *th = reinterpret_cast<Tcp *>(h + kEthLen + F::kNet);
        F::set_tso_len(h, hdr_len - kEthLen - F::kNet + k * mss);
        th->flags = sent + k == n ? last_flags : kAck;
        const uint32_t seq = s.snd_nxt + sent * mss;
        if (!(by_ref && run_fill_ref<kV6>(e, s, fr, h, hdr_len, seq, k * mss, F::pseudo(e, s, 0))))
            run_fill<kV6>(e, s, fr, h, hdr_len, seq, k * mss, F::pseudo(e, s, 0));
        fr.flags |= kTxTcpSeg | F::kIpCsumFlag | kTxTcpCsum | tx_seg_flags(uint16_t(mss));
        e.link_.queue(fr, k, k * (hdr_len + mss));
        e.stats_.tx_tso_frames++;
        sent += k;
    }
    if (sent > 0) run_sent(e, s, s.snd_nxt, sent);
    const uint32_t seq = s.snd_nxt + sent * mss;
    if (n - sent == 1) return sent + (send_segment(e, s, seq, mss, last_flags, false) ? 1 : 0);
    if (n > sent) sent += send_run_sw<kV6>(e, s, seq, n - sent, last_flags);
    return sent;
}

} // namespace mars::tcp
