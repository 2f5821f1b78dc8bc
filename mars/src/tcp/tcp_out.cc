// tcp_out.cc: TCP output.
//
// Segments are built from the connection's prebuilt header template (seed
// 002: most header bytes never change) and the send ring, which keeps every
// unacknowledged byte, so retransmission needs no queue of its own. The
// payload copy into the frame computes the checksum in the same pass unless
// the NIC offers to do it. The sending policy: congestion and peer windows,
// Nagle (RFC 896) unless TCP_NODELAY, cork / MSG_MORE, sender SWS avoidance
// (RFC 9293 3.8.6.2.1), SACK-based recovery (RFC 6675) and the persist timer.
#include "tcp/sender.h"
#include "base/checksum.h"
#include "tcp/recovery.h"
#include "tcp/timers.h"
#include "tcp/rcv_tune.h"
#include "tcp/tcp6.h"

#include <mars/checksum_offload.h>

#include <algorithm>
#include <cstring>

namespace mars::tcp {

using namespace wire;

void conn_init(Env &e, Sock &s)
{
    s.cca = &cc_algo(e.cfg_.tcp.cc);
    s.rcv_wscale = 0;
    if (e.cfg_.tcp.window_scaling) {
        const uint32_t buf = std::max(rcv_buf_limit(e, s), (s.flags & kFHasRings) ? s.rx_mask + 1 : 0);
        while (s.rcv_wscale < 14 && (buf >> s.rcv_wscale) > 65535) s.rcv_wscale++;
    }
    s.rto_ns = e.cfg_.tcp.rto_initial_ns;
    // IPv6: the destination's path MTU (a packet too big may have lowered
    // it before this connection, RFC 8201).
    s.path_mtu = (s.flags & kFV6) ? e.tcp6_->path_mtu(s.v6.remote, e.now_ns_) : e.cfg_.mtu;
    s.peer_mss = 536;
    s.mss = 536;
    s.cc = CcVars{};
}

// Our MSS option: what fits our MTU, or less if the application asked.
static uint16_t advertised_mss(const StackConfig &c, const Sock &s)
{
    uint32_t m = uint32_t(c.mtu) - net_headers(s);
    if (s.user_mss) m = std::min(m, s.user_mss);
    return uint16_t(m);
}

void update_mss(Env &e, Sock &s)
{
    const uint32_t net = net_headers(s); // IPv4 + TCP, or IPv6 + TCP (MSS = path MTU - 60)
    uint32_t m = std::min<uint32_t>(s.peer_mss, s.path_mtu - net);
    m = std::min<uint32_t>(m, uint32_t(e.cfg_.mtu) - net);
    if (s.user_mss) m = std::min(m, s.user_mss);
    if (s.flags & kFTsOk) m -= 12; // every segment carries the timestamp option
    m = std::max<uint32_t>(m, 64);
    s.mss = m;
    if (s.cca && s.cc.mss && s.cc.mss != m) s.cca->on_mss_change(s.cc, m);
}

void build_template(Env &e, Sock &s)
{
    if (s.flags & kFV6) {
        e.tcp6_->build_template(s);
        return;
    }
    uint8_t *p = s.hdr;
    Eth *eth = reinterpret_cast<Eth *>(p);
    if (const MacAddr *mac = e.arp_.peek(s.next_hop)) {
        std::memcpy(eth->dst, mac->b, 6);
        s.arp_gen = e.arp_.generation();
    } else {
        std::memset(eth->dst, 0, 6);
        s.arp_gen = 0;
    }
    std::memcpy(eth->src, e.cfg_.mac.b, 6);
    eth->type = be16(kEtherIpv4);
    Ipv4 *ip = reinterpret_cast<Ipv4 *>(p + kEthLen);
    *ip = Ipv4{0x45, s.app.tos, 0, 0, be16(kIpDf), 64, kProtoTcp, 0, be32(e.cfg_.ip), be32(s.app.remote.ip)};
    Tcp *th = reinterpret_cast<Tcp *>(p + kEthLen + kIpLen);
    *th = Tcp{be16(s.app.local.port), be16(s.app.remote.port), 0, 0, 0, 0, 0, 0, 0};
}

uint32_t rcv_window(const Env &, const Sock &s)
{
    return std::min((s.flags & kFHasRings) ? s.rx_space_free() : s.app.rcv_buf, s.app.ooo_cap);
}

// The window field for the next segment. Receiver SWS avoidance (RFC 9293
// 3.8.6.2.2): the right edge moves only by min(half the buffer, one MSS) or
// more; it never moves left.
uint16_t window_to_advertise(Env &e, Sock &s)
{
    const uint32_t free = rcv_window(e, s);
    const uint32_t edge = s.rcv_nxt + free;
    if (seq_gt(edge, s.rcv_adv)) {
        const uint32_t buf = (s.flags & kFHasRings) ? s.app.rcv_space : s.app.rcv_buf;
        const uint32_t step = std::min(buf / 2, s.peer_mss);
        if (edge - s.rcv_adv >= step || seq_le(s.rcv_adv, s.rcv_nxt)) s.rcv_adv = edge;
    }
    if (seq_lt(s.rcv_adv, s.rcv_nxt)) s.rcv_adv = s.rcv_nxt;
    const uint32_t wnd = s.rcv_adv - s.rcv_nxt;
    return uint16_t(std::min<uint32_t>(wnd >> s.rcv_wscale, 65535));
}

void enter_quickack(Env &e, Sock &s)
{
    const uint32_t segs = rcv_window(e, s) / (2 * std::max<uint32_t>(s.mss, 1));
    s.quick_acks = std::clamp<uint32_t>(segs, 1, kQuickAcksMax);
    s.flags |= kFQuickAck;
}

void quick_ack(Env &e, Sock &s)
{
    if (!(s.flags & kFQuickAck)) enter_quickack(e, s); // idle: quick mode again
    if (--s.quick_acks == 0) s.flags &= ~kFQuickAck;
    ack_now(e, s);
}

void ack_now(Env &e, Hot &s)
{
    s.flags |= kFAckNow;
    e.want_output(s);
}

void Env::want_output(Hot &s)
{
    if (s.flags & kFInFlush) return;
    s.flags |= kFInFlush;
    flush_list_.push_back(s.index);
}

// Transmit-side prefetch: what send_segment() of the next connection to
// flush reads first, its template header and the send-ring line at snd_nxt,
// asked for while this one builds its segments.
void prefetch_output(Env &e, const Sock &s)
{
    __builtin_prefetch(&s.snd_nxt);
    __builtin_prefetch(s.hdr);
    if (s.tx) __builtin_prefetch(s.tx + ((s.snd_nxt - s.iss - 1) & s.tx_mask));
    e.stats_.prefetches += s.tx ? 3 : 2;
}

void Env::flush_output()
{
    for (size_t i = 0; i < flush_list_.size(); i++) {
        if (prefetch_ && i + 1 < flush_list_.size()) prefetch_output(*this, conns_[flush_list_[i + 1]]);
        Sock &s = conns_[flush_list_[i]];
        if (!(s.flags & kFInFlush)) continue;
        s.flags &= ~kFInFlush;
        if (s.used) tcp_output(*this, s);
    }
    flush_list_.clear();
}

// Writes the options of a SYN or SYN-ACK; returns their length.
static unsigned syn_options(uint8_t *o, const StackConfig &c, const Sock &s, bool synack, uint32_t tsval)
{
    uint8_t *p = o;
    const uint16_t mss = advertised_mss(c, s);
    *p++ = kOptMss;
    *p++ = 4;
    *p++ = uint8_t(mss >> 8);
    *p++ = uint8_t(mss);
    const bool sack = synack ? (s.flags & kFSackOk) : c.tcp.sack;
    const bool ts = synack ? (s.flags & kFTsOk) : c.tcp.timestamps;
    const bool ws = synack ? (s.flags & kFWscaleOk) : c.tcp.window_scaling;
    if (ts) {
        if (sack) {
            *p++ = kOptSackOk;
            *p++ = 2;
        } else {
            *p++ = kOptNop;
            *p++ = kOptNop;
        }
        *p++ = kOptTs;
        *p++ = 10;
        p = put_be32(p, tsval);
        p = put_be32(p, synack ? s.ts_recent : 0);
    } else if (sack) {
        *p++ = kOptNop;
        *p++ = kOptNop;
        *p++ = kOptSackOk;
        *p++ = 2;
    }
    if (ws) {
        *p++ = kOptNop;
        *p++ = kOptWscale;
        *p++ = 3;
        *p++ = s.rcv_wscale;
    }
    return unsigned(p - o);
}

// One segment from the template, for either family: kV6 picks the
// template, the IP header's fields and checksum, and the next hop's MAC
// (ARP's for IPv4, neighbour discovery's for IPv6: either is the template's
// while the stack's neighbour generation has not moved, arp.h/nd.h). The
// IPv4 instance is the code this was before IPv6 (the fast path's).
template <bool kV6>
__attribute__((always_inline)) static inline bool send_segment_as(Env &e, Sock &s, uint32_t seq, uint32_t len,
                                                                   uint8_t flags, bool rtx)
{
    constexpr unsigned kHdrs = kV6 ? kHeaders6Len : kHeadersLen;
    constexpr unsigned kNet = kV6 ? kIp6Len : kIpLen;
    PacketRef fr;
    if (!e.link_.alloc(&fr)) return false;
    uint8_t *p = fr.data;
    std::memcpy(p, kV6 ? s.v6.hdr : s.hdr, kHdrs);
    Tcp *th = reinterpret_cast<Tcp *>(p + kEthLen + kNet);
    uint8_t *o = p + kHdrs;
    unsigned optlen;
    if (flags & kSyn) {
        optlen = syn_options(o, e.cfg_, s, flags & kAck, e.tsval());
    } else {
        uint8_t *q = o;
        if (s.flags & kFTsOk) q = write_ts_option(q, e.tsval(), s.ts_recent);
        if ((s.flags & kFSackOk) && (!s.rec.ooo.empty() || (s.flags & kFDsack))) {
            // SACK blocks, as many as fit beside the payload in our MTU; a
            // D-SACK (RFC 2883 4) first, then the out-of-order data.
            const int room = int(s.path_mtu) - int(kNet + kTcpLen) - int(q - o) - int(len) - 4;
            int max = std::min(room / 8, (s.flags & kFTsOk) ? 3 : 4);
            if (max > 0) {
                SeqRange b[4];
                int n = 0;
                if ((s.flags & kFDsack) && (flags & kAck)) {
                    b[n++] = s.rec.dsack;
                    e.stats_.tcp_dsacks_sent++;
                    s.flags &= ~kFDsack; // reported once (RFC 2883 4.1)
                }
                n += s.rec.ooo.sack_blocks(e.ooo_pool_, b + n, max - n);
                if (n > 0) q = write_sack_option(q, b, n);
            }
        }
        optlen = unsigned(q - o);
    }
    const unsigned hlen = kTcpLen + optlen;
    if (kHdrs + optlen + len > fr.room) {
        e.release(fr);
        e.stats_.drop_tx_no_buffer++;
        return false;
    }
    th->seq = be32(seq);
    th->ack = (flags & kAck) ? be32(s.rcv_nxt) : 0;
    th->doff = uint8_t((hlen / 4) << 4);
    th->flags = flags;
    th->win = be16((flags & kSyn) ? uint16_t(std::min<uint32_t>(rcv_window(e, s), 65535)) : window_to_advertise(e, s));
    if (flags & kSyn) s.rcv_adv = s.rcv_nxt + std::min<uint32_t>(rcv_window(e, s), 65535);
    th->csum = 0;
    th->urp = 0;
    uint32_t pseudo;
    if constexpr (kV6) {
        Ipv6 *ip6 = reinterpret_cast<Ipv6 *>(p + kEthLen);
        ip6->payload_len = be16(uint16_t(hlen + len));
        pseudo = pseudo_sum6(ip6->src, ip6->dst, kProtoTcp, hlen + len);
    } else {
        reinterpret_cast<Ipv4 *>(p + kEthLen)->total_len = be16(uint16_t(kIpLen + hlen + len));
        pseudo = pseudo_sum(e.cfg_.ip, s.app.remote.ip, kProtoTcp, uint16_t(hlen + len));
    }
    uint8_t *dst = o + optlen;
    if (e.offloads_ & kOffloadTxTcpCsum) {
        if (len) {
            const uint32_t off = (seq - s.iss - 1) & s.tx_mask;
            const uint32_t first = std::min(len, s.tx_mask + 1 - off);
            std::memcpy(dst, s.tx + off, first);
            std::memcpy(dst + first, s.tx, len - first);
        }
        th->csum = csum_fold(pseudo); // the sender adds the rest: mars/checksum_offload.h
        fr.flags |= kTxTcpCsum;
    } else {
        uint32_t sum = csum_add(pseudo, th, hlen);
        if (len) {
            const uint32_t off = (seq - s.iss - 1) & s.tx_mask;
            const uint32_t first = std::min(len, s.tx_mask + 1 - off);
            sum = csum_combine(sum, csum_copy(dst, s.tx + off, first, 0), hlen);
            if (len > first) sum = csum_combine(sum, csum_copy(dst + first, s.tx, len - first, 0), hlen + first);
        }
        th->csum = csum_finish(sum);
    }
    if constexpr (!kV6) {
        Ipv4 *ip = reinterpret_cast<Ipv4 *>(p + kEthLen);
        if (e.offloads_ & kOffloadTxIpCsum) {
            ip->csum = 0;
            fr.flags |= kTxIpCsum;
        } else {
            ip->csum = csum_finish(csum_add(0, ip, kIpLen));
        }
    }
    fr.len = uint16_t(kHdrs + optlen + len);
    if (flags & kAck) {
        s.flags &= ~kFAckNow;
        TimerWheel::cancel(&s.delack_timer);
        s.segs_unacked = 0;
        s.last_ack_sent = s.rcv_nxt;
    }
    s.count.segs_out++;
    if (rtx) {
        s.count.total_retransmits++;
        e.stats_.tcp_retransmits++;
    } else {
        s.count.bytes_out += len;
    }
    if (len && (s.flags & kFSackOk)) rack_sent(e, s, seq, len, rtx);
    s.last_send_ns = e.now_ns_;
    if constexpr (kV6) {
        // The template's destination MAC is good while the neighbour
        // generation has not moved; else the neighbour cache (NUD, progress
        // confirmed) gives it, or ND holds the frame until the next hop
        // resolves (our own address: the local loop).
        if (s.arp_gen != e.arp_.generation()) {
            const MacAddr *mac = e.tcp6_->next_hop_mac(s, e.now_ns_);
            if (!mac) {
                e.tcp6_->send(fr, e.now_ns_);
                return true;
            }
            std::memcpy(reinterpret_cast<Eth *>(p)->dst, mac->b, 6);
        }
        e.link_.queue(fr);
        return true;
    }
    // The template's destination MAC is good while ARP has not changed.
    if (s.arp_gen != e.arp_.generation()) {
        const MacAddr *mac = e.arp_.lookup(s.next_hop, e.now_ns_);
        if (!mac) {
            std::memcpy(reinterpret_cast<Eth *>(p)->src, e.cfg_.mac.b, 6);
            e.arp_.hold(s.next_hop, fr, e.now_ns_);
            return true;
        }
        std::memcpy(reinterpret_cast<Eth *>(s.hdr)->dst, mac->b, 6);
        std::memcpy(reinterpret_cast<Eth *>(p)->dst, mac->b, 6);
        s.arp_gen = e.arp_.generation();
    }
    e.link_.queue(fr);
    return true;
}

// IPv6 connections' segments, out of line: the IPv4 instance below is the
// code send_segment was before IPv6, with one predicted branch in front of it
// and nothing of the IPv6 instance's in its frame (inlined side by side, the
// two cost every IPv4 ACK and response ~12 instructions: register saves and
// spills; benchmarks/README.md, "Guard rails ... seventh sitting").
__attribute__((noinline)) static bool send_segment6(Env &e, Sock &s, uint32_t seq, uint32_t len, uint8_t flags,
                                                    bool rtx)
{
    return send_segment_as<true>(e, s, seq, len, flags, rtx);
}

bool send_segment(Env &e, Sock &s, uint32_t seq, uint32_t len, uint8_t flags, bool rtx)
{
    if (__builtin_expect(s.flags & kFV6, 0)) return send_segment6(e, s, seq, len, flags, rtx);
    return send_segment_as<false>(e, s, seq, len, flags, rtx);
}

// The sequence-space bookkeeping after len bytes of new data from snd_nxt
// (one segment, or a run of full ones) and a FIN after them.
void new_data_sent(Env &e, Sock &s, uint32_t len, bool fin, uint32_t data_end)
{
    const bool first_fin = fin && !seq_gt(s.snd_max, data_end);
    if (s.rtt_start_ns == 0) {
        s.rtt_start_ns = e.now_ns_;
        s.rtt_seq = s.snd_nxt + std::min(len, s.mss); // the first segment's end
    }
    if (s.snd_nxt == s.snd_una && s.first_rtx_ns == 0) s.first_rtx_ns = e.now_ns_;
    if (len < s.mss) s.snd_sml = s.snd_nxt + len;
    s.snd_nxt += len + (fin ? 1 : 0);
    if (seq_gt(s.snd_nxt, s.snd_max)) s.snd_max = s.snd_nxt;
    if (first_fin) {
        if (s.state == TcpState::kEstablished) s.state = TcpState::kFinWait1;
        else if (s.state == TcpState::kCloseWait) s.state = TcpState::kLastAck;
    }
    if (!TimerWheel::armed(&s.rtx_timer)) arm_rtx(e, s);
}

void tcp_output(Env &e, Sock &s)
{
    switch (s.state) {
    case TcpState::kEstablished:
    case TcpState::kCloseWait:
    case TcpState::kFinWait1:
    case TcpState::kClosing:
    case TcpState::kLastAck:
        break;
    case TcpState::kFinWait2:
    case TcpState::kTimeWait:
    case TcpState::kSynReceived:
        if (s.flags & kFAckNow) send_ack(e, s);
        return;
    default:
        s.flags &= ~kFAckNow;
        return;
    }
    const uint32_t data_end = s.iss + 1 + s.tx_tail; // sequence number after the last queued byte
    const bool sack_recovery = (s.flags & (kFInRecovery | kFSackOk)) == (kFInRecovery | kFSackOk);
    uint32_t pipe = 0;
    bool sent_new = false;
    if (sack_recovery) {
        // RFC 6675 5 (C) with RACK's lost set (rack.cc): resend what RACK
        // declared lost, lowest first, while PRR's cwnd (pipe + sndcnt)
        // leaves room.
        pipe = rack_pipe(s);
        for (int guard = 0; guard < 256; guard++) {
            if (pipe + s.mss > s.cc.cwnd) break;
            SeqRange r;
            uint32_t piece_end;
            if (!rack_next_lost(s, &r, &piece_end)) break;
            if (seq_ge(r.start, data_end)) break; // only the FIN is left: rule (3) below
            if (!s.rack.log.has_room(s.snd_una)) break; // wait for ACKs to free the log
            // Several full segments of one lost piece: one run (tx_run.cc),
            // the segments one by one would send next, while cwnd allows.
            const uint32_t run_end = seq_lt(piece_end, data_end) ? piece_end : data_end;
            const uint32_t budget = std::min(s.cc.cwnd - pipe, uint32_t(256 - guard) * s.mss);
            if (const uint32_t k = rtx_run_len(e, s, r.start, run_end, budget)) {
                const uint32_t sent = send_rtx_run(e, s, r.start, k, kAck, true);
                if (sent == 0) break;
                pipe += sent * s.mss;
                if (seq_gt(r.start + sent * s.mss, s.high_rxt)) s.high_rxt = r.start + sent * s.mss;
                guard += int(sent) - 1;
                if (sent < k) break;
                continue;
            }
            const uint32_t n = std::min(r.end - r.start, data_end - r.start);
            if (!send_segment(e, s, r.start, n, kAck, true)) break;
            pipe += n;
            if (seq_gt(r.start + n, s.high_rxt)) s.high_rxt = r.start + n;
        }
    }
    for (int guard = 0; guard < 4096; guard++) {
        const uint32_t unsent = seq_lt(s.snd_nxt, data_end) ? data_end - s.snd_nxt : 0;
        const bool fin_wanted = (s.flags & kFFinQueued) != 0;
        if (unsent == 0) {
            // The FIN goes once all data has been sent (window or not).
            if (fin_wanted && s.snd_nxt == data_end) {
                const bool first_fin = !seq_gt(s.snd_max, data_end);
                if (!send_segment(e, s, s.snd_nxt, 0, kAck | kFin, !first_fin)) break;
                s.snd_nxt++;
                if (seq_gt(s.snd_nxt, s.snd_max)) s.snd_max = s.snd_nxt;
                if (first_fin) {
                    if (s.state == TcpState::kEstablished) s.state = TcpState::kFinWait1;
                    else if (s.state == TcpState::kCloseWait) s.state = TcpState::kLastAck;
                }
                if (!TimerWheel::armed(&s.rtx_timer)) arm_rtx(e, s);
            }
            break;
        }
        const uint32_t flight = sack_recovery ? pipe : s.snd_nxt - s.snd_una;
        uint32_t cwnd = s.cc.cwnd;
        if (!(s.flags & kFInRecovery) && s.dupacks && s.dupacks <= 2) cwnd += s.dupacks * s.mss; // RFC 3042
        const uint32_t by_cwnd = cwnd > flight ? cwnd - flight : 0;
        const uint32_t wnd_edge = s.snd_una + s.snd_wnd;
        const uint32_t by_wnd = seq_gt(wnd_edge, s.snd_nxt) ? wnd_edge - s.snd_nxt : 0;
        const uint32_t usable = std::min(by_cwnd, by_wnd);
        uint32_t len = std::min({s.mss, unsent, usable});
        if (len == 0) break;
        const bool rtx = seq_lt(s.snd_nxt, s.snd_max);
        if (rtx) {
            // Go-back-N after a timeout: the full segments below snd_max
            // the window allows, as one run (tx_run.cc). PSH only where the
            // data ends, as one by one; never a FIN (it goes on its own).
            const uint32_t budget = std::min(usable, uint32_t(4096 - guard) * s.mss);
            if (const uint32_t k = rtx_run_len(e, s, s.snd_nxt, s.snd_max, std::min(unsent, budget))) {
                const uint8_t last_flags = uint8_t(kAck | push_flag(s, k * s.mss == unsent));
                const uint32_t sent = send_rtx_run(e, s, s.snd_nxt, k, last_flags, false);
                if (sent == 0) break;
                if (s.snd_nxt == s.snd_una && s.first_rtx_ns == 0) s.first_rtx_ns = e.now_ns_;
                s.snd_nxt += sent * s.mss;
                if (!TimerWheel::armed(&s.rtx_timer)) arm_rtx(e, s);
                pipe += sent * s.mss;
                guard += int(sent) - 1;
                if (sent < k) break;
                continue;
            }
        }
        if (!rtx && e.cfg_.tcp.tx_batch && std::min(unsent, usable) >= 2 * s.mss) {
            // Several full segments of new data: one run (tx_run.cc), when
            // its segments would all carry the same header.
            const uint32_t n = std::min({std::min(unsent, usable) / s.mss, kRunMax, uint32_t(4096 - guard)});
            if (n >= 2 && !(s.flags & kFDsack) && s.arp_gen == e.arp_.generation()) {
                const bool fin = n * s.mss == unsent && fin_wanted;
                const uint8_t last_flags = uint8_t(kAck | push_flag(s, n * s.mss == unsent) | (fin ? kFin : 0));
                const uint32_t sent = send_run(e, s, n, last_flags);
                if (sent == 0) break;
                sent_new = true;
                new_data_sent(e, s, sent * s.mss, fin && sent == n, data_end);
                pipe += sent * s.mss;
                guard += int(sent) - 1;
                if (sent < n || fin) break;
                continue;
            }
        }
        if (len < s.mss && !rtx) {
            if (len < unsent) {
                // Window-limited: sender SWS avoidance. Send only a useful
                // piece; the persist timer overrides if nothing is in flight.
                if (len < s.max_snd_wnd / 2 || by_cwnd < by_wnd) break;
            } else {
                // The tail of the queued data.
                // Nagle with Minshall's refinement: hold a small segment
                // only while an earlier small segment is unacknowledged.
                const bool nagle = !(s.flags & kFNoDelay) && seq_gt(s.snd_sml, s.snd_una);
                const bool corked = (s.flags & (kFCork | kFMore)) && !fin_wanted;
                if (nagle || corked) break;
            }
        }
        const bool last = len == unsent;
        const bool fin = last && fin_wanted && !rtx;
        uint8_t flags = kAck;
        flags |= push_flag(s, last);
        if (fin) flags |= kFin;
        if (!send_segment(e, s, s.snd_nxt, len, flags, rtx)) break;
        pipe += len;
        sent_new = sent_new || !rtx;
        if (rtx) {
            if (s.snd_nxt == s.snd_una && s.first_rtx_ns == 0) s.first_rtx_ns = e.now_ns_;
            if (len < s.mss) s.snd_sml = s.snd_nxt + len;
            s.snd_nxt += len + (fin ? 1 : 0);
            if (seq_gt(s.snd_nxt, s.snd_max)) s.snd_max = s.snd_nxt;
            if (!TimerWheel::armed(&s.rtx_timer)) arm_rtx(e, s);
        } else {
            new_data_sent(e, s, len, fin, data_end);
        }
        if (fin) break;
    }
    // Data waits and nothing is in flight to clock it out: the persist timer
    // probes a zero window (RFC 9293 3.8.6.1) and overrides SWS avoidance.
    if (s.snd_una == s.snd_max && seq_lt(s.snd_nxt, data_end) && !TimerWheel::armed(&s.rtx_timer)) arm_rtx(e, s);
    if (sent_new && (s.flags & kFSackOk)) tlp_arm(e, s);
    if (s.flags & kFAckNow) send_ack(e, s);
}

void send_raw(Env &e, uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, uint32_t seq, uint32_t ack,
                         uint8_t flags, uint16_t win, const uint8_t *opts, unsigned opt_len)
{
    const uint32_t hop = e.router_.next_hop(rip);
    if (!hop) return;
    PacketRef fr;
    if (!e.link_.alloc(&fr)) return;
    const unsigned hlen = kTcpLen + opt_len;
    if (kEthLen + kIpLen + hlen > fr.room) {
        e.release(fr);
        return;
    }
    Ipv4 *ip = reinterpret_cast<Ipv4 *>(fr.data + kEthLen);
    *ip = Ipv4{0x45, 0, be16(uint16_t(kIpLen + hlen)), 0, be16(kIpDf), 64, kProtoTcp, 0, be32(lip ? lip : e.cfg_.ip),
               be32(rip)};
    ip->csum = csum_finish(csum_add(0, ip, kIpLen));
    Tcp *th = reinterpret_cast<Tcp *>(ip + 1);
    *th = Tcp{be16(lport), be16(rport), be32(seq), be32(ack), uint8_t((hlen / 4) << 4), flags, be16(win), 0, 0};
    if (opt_len) std::memcpy(th + 1, opts, opt_len);
    th->csum = csum_finish(csum_add(pseudo_sum(be32(ip->src), rip, kProtoTcp, uint16_t(hlen)), th, hlen));
    fr.len = uint16_t(kEthLen + kIpLen + hlen);
    e.ip_.send(fr, hop, e.now_ns_);
}

void send_raw_reply(Env &e, const TcpSegment &seg, uint32_t seq, uint32_t ack, uint8_t flags, uint16_t win,
                    const uint8_t *opts, unsigned opt_len)
{
    if (seg.src6) {
        e.tcp6_->send_raw(*seg.dst6, *seg.src6, seg.dport, seg.sport, seq, ack, flags, win, opts, opt_len, e.now_ns_);
        return;
    }
    send_raw(e, e.cfg_.ip, seg.dport, seg.src_ip, seg.sport, seq, ack, flags, win, opts, opt_len);
}

void send_raw_conn(Env &e, const Sock &s, uint32_t seq, uint32_t ack, uint8_t flags, uint16_t win,
                   const uint8_t *opts, unsigned opt_len)
{
    if (s.flags & kFV6) {
        e.tcp6_->send_raw(s.v6.local, s.v6.remote, s.app.local.port, s.app.remote.port, seq, ack, flags, win, opts,
                          opt_len, e.now_ns_);
        return;
    }
    send_raw(e, s.app.local.ip, s.app.local.port, s.app.remote.ip, s.app.remote.port, seq, ack, flags, win, opts,
             opt_len);
}

// RFC 9293 3.10.7.1: the reset for a segment nobody wants.
void send_rst_reply(Env &e, const TcpSegment &seg)
{
    if (seg.src6) {
        if (ip6::is_multicast(seg.src6->b) || ip6::is_unspecified(seg.src6->b)) return;
        e.stats_.tcp_resets_out++;
        if (seg.flags & kAck) send_raw_reply(e, seg, seg.ack, 0, kRst, 0, nullptr, 0);
        else send_raw_reply(e, seg, 0, seg.seq + seg.seq_space(), kRst | kAck, 0, nullptr, 0);
        return;
    }
    const uint32_t src = seg.src_ip;
    if (src == 0 || src == 0xffffffffu || (src >> 28) == 14) return;
    e.stats_.tcp_resets_out++;
    if (seg.flags & kAck) {
        send_raw(e, e.cfg_.ip, seg.dport, src, seg.sport, seg.ack, 0, kRst, 0, nullptr, 0);
    } else {
        send_raw(e, e.cfg_.ip, seg.dport, src, seg.sport, 0, seg.seq + seg.seq_space(), kRst | kAck, 0, nullptr, 0);
    }
}

// The window opened (from `before`) by two segments or half the buffer:
// tell the peer now (the application drained the receive ring).
void window_update(Env &e, Sock &s, uint32_t before)
{
    if (s.state != TcpState::kEstablished && s.state != TcpState::kFinWait1 && s.state != TcpState::kFinWait2)
        return;
    const uint32_t after = rcv_window(e, s);
    const uint32_t adv = s.rcv_adv - s.rcv_nxt;
    if (after > adv && (after - adv >= 2 * s.peer_mss || after - adv >= s.app.rcv_space / 2) && after > before) {
        ack_now(e, s);
        e.flush_output();
        e.link_.flush();
    }
}

// Setting TCP_NODELAY pushes what is queued now, as Linux does
// (tcp_push_pending_frames with TCP_NAGLE_PUSH): a corked tail goes out at
// once; TCP_CORK stays on for later writes. (MSG_MORE holds only inside its
// own tx_commit, so nothing it held is left to push here.)
void push_pending(Env &e, Sock &s)
{
    const uint32_t held = s.flags & kFCork;
    s.flags &= ~held;
    tcp_output(e, s);
    s.flags |= held;
}

} // namespace mars::tcp
