// tcp_in.cc: TCP input.
//
// Every segment is validated against its frame first (lengths, data offset,
// option lengths, checksum). Then a connection lookup (last-flow cache, then
// the hash table) and Van Jacobson's header prediction: an ESTABLISHED
// connection getting the next in-order data segment with only ACK (and PSH)
// set, or a pure ACK that advances snd.una, takes a short path that verifies
// the checksum in the same pass as the copy into the receive ring. Anything
// else goes through the RFC 9293 3.10.7 segment-arrival rules.
#include "frame_bytes.h"
#include "stack_impl.h"
#include "strands.h"

#include <algorithm>
#include <cstring>

namespace mars {

using namespace wire;

namespace {

constexpr uint64_t kPawsIdleNs = 24ull * 24 * 3600 * 1'000'000'000ull; // RFC 7323 5.5

// RFC 7323 5.3 R1 with one tick of tolerance, as Linux (TCP_PAWS_WINDOW):
// an original that was reordered or duplicated behind a fresh retransmission
// carries a TSval a tick older than TS.Recent and is still good data. A
// sequence-number wrap, which PAWS is for, is far older than that.
constexpr uint32_t kPawsWindow = 1;
inline bool paws_old(uint32_t tsval, uint32_t ts_recent) { return int32_t(ts_recent - tsval) > int32_t(kPawsWindow); }

// RFC 2883 4: the first SACK block reports a duplicate when it lies below
// the cumulative ACK or inside the second block.
inline bool is_dsack(const TcpOptions &opt, uint32_t ack)
{
    const SeqRange &d = opt.sack[0];
    if (int32_t(d.end - ack) <= 0) return true;
    return opt.n_sack > 1 && int32_t(opt.sack[1].start - d.start) <= 0 && int32_t(d.end - opt.sack[1].end) <= 0;
}

} // namespace

// The receive entry. Run to completion (strands = 1, no prefetch): each
// frame first tries header prediction on the flow the last segment belonged
// to (tcp_express); everything else goes through the full demux (net.cc
// input_frame: Ethernet, ARP, IPv4, ICMP, TCP). With strands or prefetching,
// the same per-frame work runs behind a pipeline that hides the memory waits
// of the lookup (input_strands, input_prefetch_ahead).
void StackImpl::input(PacketRef *frames, uint16_t n, uint64_t now_ns)
{
    if (now_ns > now_ns_) now_ns_ = now_ns;
    stats_.rx_frames += n;
    if (copy_) {
        input_burst<true>(frames, n); // no coalescing: each payload is one copy of its own (rx_coalesce.cc)
    } else {
        input_burst<false>(frames, n);
    }
    if (copies_in_flight()) reap_copies(false); // the burst's copies start; earlier ones may be done
    flush_rx_done();
    // The flow table counts its last-flow cache; publish once per burst.
    stats_.lookup_cache_hits = flows_.cache_hits;
    stats_.lookup_cache_misses = flows_.cache_misses;
    // ACKs and data the burst made due go out together.
    flush_output();
    flush_tx();
}

// The per-frame loops; kAsyncCopy: in-order payloads go to the copy engine.
template <bool kAsyncCopy>
__attribute__((always_inline)) inline void StackImpl::input_burst(PacketRef *frames, uint16_t n)
{
    if (strands_ > 1 || prefetch_) {
        // Frames of the flow in the last-flow cache have no memory wait to
        // hide: they run to completion until the first frame that is not
        // predicted there (nor taken by a coalesced group, rx_coalesce.cc);
        // the pipeline takes the rest of the burst.
        uint16_t i = 0;
        while (i < n) {
            if (const uint16_t k = coalesce_run<kAsyncCopy>(frames + i, uint16_t(n - i))) {
                i = uint16_t(i + k);
                continue;
            }
            const uint16_t len = frames[i].len;
            if (!tcp_express<kAsyncCopy>(frames[i])) break;
            stats_.rx_bytes += len;
            i++;
        }
        if (i < n) {
            if (strands_ > 1) {
                input_strands<kAsyncCopy>(frames + i, uint16_t(n - i));
            } else {
                input_prefetch_ahead<kAsyncCopy>(frames + i, uint16_t(n - i));
            }
        }
    } else {
        if (!kAsyncCopy && cfg_.tcp.rx_coalesce && n > 1) {
            for (uint16_t i = 0; i < n;) {
                if (const uint16_t k = coalesce_run<kAsyncCopy>(frames + i, uint16_t(n - i))) {
                    i = uint16_t(i + k);
                    continue;
                }
                PacketRef &f = frames[i++];
                stats_.rx_bytes += f.len;
                if (!tcp_express<kAsyncCopy>(f)) input_frame(f);
            }
            return;
        }
        for (uint16_t i = 0; i < n; i++) {
            PacketRef &f = frames[i];
            stats_.rx_bytes += f.len;
            if (!tcp_express<kAsyncCopy>(f)) input_frame(f);
        }
    }
}

// Receive coalescing (rx_coalesce.cc) where it applies: on, and no copy
// engine (each asynchronous copy has its own completion and frame).
template <bool kAsyncCopy>
__attribute__((always_inline)) inline uint16_t StackImpl::coalesce_run(PacketRef *frames, uint16_t n)
{
    if constexpr (kAsyncCopy) {
        return 0;
    } else {
        return cfg_.tcp.rx_coalesce && n > 1 ? input_run(frames, n) : 0;
    }
}

bool StackImpl::frame_flow(const PacketRef &f, FlowKey *key) const
{
    const uint8_t *d = f.data;
    if (f.len < kHeadersLen || (load32(d + 12) & kWireIpv4Mask) != kWireIpv4NoOptions) return false;
    const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(d + kEthLen);
    if (ip->proto != kProtoTcp) return false;
    const Tcp *th = reinterpret_cast<const Tcp *>(d + kEthLen + kIpLen);
    *key = FlowKey{cfg_.ip, be32(ip->src), be16(th->dport), be16(th->sport)};
    return true;
}

// The lines of a connection block (944 bytes) the fast path touches: the hot
// head of Sock (flow node, sequence state, ring positions: three lines), the
// SACK scoreboard's and out-of-order queue's emptiness, the delayed-ACK timer,
// the event bits and the per-connection counters.
void StackImpl::prefetch_conn(const Sock &s)
{
    const char *p = reinterpret_cast<const char *>(&s);
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
    __builtin_prefetch(p + 128);
    __builtin_prefetch(&s.sack);
    __builtin_prefetch(&s.ooo);
    __builtin_prefetch(&s.delack_timer);
    __builtin_prefetch(&s.ev_bits);
    __builtin_prefetch(&s.bytes_in);
}
constexpr uint64_t kConnPrefetches = 8;

// Strands (strands.h): each frame is a strand of four stages, each ending
// where the next would wait for memory:
//   0  parse the frame's 4-tuple, hash it, prefetch the flow-table bucket
//   1  read the bucket head, prefetch that connection block
//   2  find the connection in the chain, prefetch the receive ring's tail line
//   3  ready; retire (in arrival order) runs the run-to-completion code with
//      the connection already found and its lines in cache
// A connection found by stages 1-2 is re-checked at retirement: it must
// still be in the table, and the express path compares the frame's 4-tuple
// and state against the connection itself, so an older frame of the burst
// that closed or replaced it only sends this frame to the full path.
template <bool kAsyncCopy>
void StackImpl::input_strands(PacketRef *frames, uint16_t n)
{
    struct Ops {
        StackImpl &st;
        PacketRef *frames;
        uint16_t n;
        unsigned width;
        bool prefetch;
        uint64_t prefetches = 0;
        struct State {
            FlowKey key;
            uint32_t hash;
            FlowNode *node;
        };
        bool step(uint16_t item, uint8_t stage, State &x)
        {
            switch (stage) {
            case 0: {
                x.node = nullptr;
                // The frame `width` ahead is the next to start: bring its headers in.
                if (prefetch && item + width < n) {
                    __builtin_prefetch(frames[item + width].data);
                    prefetches++;
                }
                if (!st.frame_flow(frames[item], &x.key)) return true;
                x.hash = flow_hash(x.key);
                if (prefetch) {
                    __builtin_prefetch(st.flows_.bucket(x.hash));
                    prefetches++;
                }
                return false;
            }
            case 1:
                x.node = *st.flows_.bucket(x.hash);
                if (!x.node) return true;
                if (prefetch) {
                    st.prefetch_conn(*sock_of(x.node));
                    prefetches += kConnPrefetches;
                }
                return false;
            case 2: {
                x.node = FlowTable::find_from(x.node, x.key, x.hash);
                if (!x.node) return true;
                const Sock &s = *sock_of(x.node);
                if (!prefetch || !s.rx) return true;
                __builtin_prefetch(s.rx + (s.rx_tail & s.rx_mask), 1);
                prefetches++;
                return false;
            }
            default:
                return true;
            }
        }
        void retire(uint16_t item, State &x)
        {
            PacketRef &f = frames[item];
            st.stats_.rx_bytes += f.len;
            FlowNode *node = x.node;
            if (node && node->linked && st.template tcp_express_on<kAsyncCopy>(f, *sock_of(node))) {
                // What the last-flow cache and the table would have counted.
                if (node == st.flows_.cached()) {
                    st.flows_.cache_hits++;
                } else {
                    st.flows_.cache_misses++;
                    st.flows_.remember(node);
                }
                return;
            }
            st.input_frame(f);
        }
    };
    Ops ops{*this, frames, n, strands_, prefetch_};
    StrandCounters counters;
    run_strands<StackConfig::kMaxStrands>(ops, n, strands_, counters);
    stats_.strand_yields += counters.yields;
    stats_.prefetches += ops.prefetches;
}

// Prefetching without strands: run to completion, but while frame i is
// processed the flow-table bucket of frame i+1 and the headers of frame i+2
// are already on their way.
template <bool kAsyncCopy>
void StackImpl::input_prefetch_ahead(PacketRef *frames, uint16_t n)
{
    uint64_t prefetches = 0;
    for (uint16_t i = 0; i < n; i++) {
        if (i + 2 < n) {
            __builtin_prefetch(frames[i + 2].data);
            prefetches++;
        }
        FlowKey key;
        if (i + 1 < n && frame_flow(frames[i + 1], &key)) {
            __builtin_prefetch(flows_.bucket(flow_hash(key)));
            prefetches++;
        }
        if (const uint16_t k = coalesce_run<kAsyncCopy>(frames + i, uint16_t(n - i))) {
            i = uint16_t(i + k - 1);
            continue;
        }
        PacketRef &f = frames[i];
        stats_.rx_bytes += f.len;
        if (!tcp_express<kAsyncCopy>(f)) input_frame(f);
    }
    stats_.prefetches += prefetches;
}

void StackImpl::link_flow(Sock &s, const FlowKey &key)
{
    s.flow.key = key;
    s.wire_rip = be32(key.remote_ip);
    s.wire_ports = uint32_t(be16(key.remote_port)) | uint32_t(be16(key.local_port)) << 16;
    flows_.insert(&s.flow);
}

// Van Jacobson's header prediction taken one step further: for a frame of the
// last flow seen, every check the demux would make is done on the frame's
// bytes as loaded (no byte swapping, no per-layer calls), then the prediction
// proper. Any doubt returns false and the frame takes the full path, which
// repeats the checks and counts what it drops.
template <bool kAsyncCopy>
__attribute__((always_inline)) inline bool StackImpl::tcp_express(PacketRef &f)
{
    const FlowNode *node = flows_.cached();
    if (!node || !tcp_express_on<kAsyncCopy>(f, *sock_of(const_cast<FlowNode *>(node)))) return false;
    flows_.cache_hits++;
    return true;
}

template <bool kAsyncCopy>
__attribute__((always_inline)) inline bool StackImpl::tcp_express_on(PacketRef &f, Sock &s)
{
    unsigned doff, len;
    if (!predicts(f, s, &doff, &len)) return false;
    const uint8_t *d = f.data;
    const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(d + kEthLen);
    const Tcp *th = reinterpret_cast<const Tcp *>(d + kEthLen + kIpLen);
    if (!tcp_fast_path<kAsyncCopy>(s, f, th, doff, d + kEthLen + kIpLen + doff, len - doff, be32(ip->src)))
        return false;
    stats_.fastpath_hits++;
    return true;
}

void StackImpl::tcp_input(PacketRef &f, const Ipv4 *ip, unsigned ihl, unsigned total)
{
    const unsigned len = total - ihl;
    uint8_t *tp = f.data + kEthLen + ihl;
    if (len < kTcpLen) {
        stats_.drop_tcp_header++;
        release(f);
        return;
    }
    const Tcp *th = reinterpret_cast<const Tcp *>(tp);
    const unsigned doff = (th->doff >> 4) * 4u;
    if (doff < kTcpLen || doff > len) {
        stats_.drop_tcp_header++;
        release(f);
        return;
    }
    uint8_t *payload = tp + doff;
    const uint32_t plen = len - doff;
    const uint32_t src = be32(ip->src);
    FlowKey key{cfg_.ip, src, be16(th->dport), be16(th->sport)};
    FlowNode *node = flows_.lookup(key);
    Sock *s = node ? sock_of(node) : nullptr;
    if (s) {
        // Header prediction (seed 002): the common case costs a few compares.
        if (s->state == TcpState::kEstablished && (th->flags & (kSyn | kFin | kRst | kUrg | kAck)) == kAck &&
            be32(th->seq) == s->rcv_nxt && (doff == kTcpLen || (doff == kTcpLen + 12 && load32(tp + kTcpLen) == be32(kTsPrefixBe))) &&
            s->snd_nxt == s->snd_max && uint32_t(be16(th->win)) << s->snd_wscale == s->snd_wnd &&
            (s->flags & (kFInRecovery | kFRtoRecovery | kFTlpOut | kFRdShut | kFHasRings)) == kFHasRings && s->sack.empty() &&
            s->ooo.empty()) {
            // (input_frame let every asynchronous copy land: the plain path)
            if (tcp_fast_path<false>(*s, f, th, doff, payload, plen, src)) {
                stats_.fastpath_hits++;
                return;
            }
        }
        stats_.fastpath_misses++;
    }

    if (!(f.flags & kRxL4CsumGood) && !csum_ok(csum_add(pseudo_sum(src, cfg_.ip, kProtoTcp, uint16_t(len)), tp, len))) {
        stats_.drop_tcp_csum++;
        release(f);
        return;
    }
    const uint8_t flags = th->flags;
    TcpOptions opt;
    if (doff > kTcpLen && !parse_tcp_options(tp + kTcpLen, doff - kTcpLen, flags & kSyn, &opt)) {
        stats_.drop_tcp_header++;
        release(f);
        return;
    }
    // Flag combinations no correct TCP sends (RFC 9293 3.10.7: segments
    // without ACK other than SYN or RST are dropped in every state).
    if (((flags & kSyn) && (flags & (kFin | kRst))) || !(flags & (kAck | kSyn | kRst))) {
        stats_.drop_tcp_header++;
        release(f);
        return;
    }

    if (s && s->state == TcpState::kTimeWait) {
        bool reopen = false;
        time_wait_input(*s, th, opt, &reopen);
        if (!reopen) {
            release(f);
            return;
        }
        s = nullptr; // the TIME-WAIT connection is gone; the listener takes the SYN
    }
    if (!s) {
        Sock *l = find_listener(cfg_.ip, key.local_port, key.remote_ip, key.remote_port);
        if (l) {
            tcp_listen_input(*l, f, ip, th, opt, plen);
        } else {
            stats_.drop_tcp_no_socket++;
            if (!(flags & kRst)) send_rst_reply(ip, th, plen);
        }
        release(f);
        return;
    }
    s->segs_in++;
    s->last_recv_ns = now_ns_;
    s->keep_probes = 0;
    s->probes = 0; // the peer is alive: persist probing may go on as long as it answers
    if (s->state == TcpState::kSynSent) {
        tcp_syn_sent_input(*s, th, opt);
        release(f);
        return;
    }
    bool held = false;
    tcp_sync_input(*s, f, th, opt, payload, plen, &held);
    if (!held) release(f);
}

// ---- fast path ---------------------------------------------------------------

// The prediction held (the caller checked state, flags, sequence number,
// options layout, window and recovery). Returns false to send the segment on
// through the full rules; true once the frame is consumed (queued, or dropped
// for a bad checksum).
template <bool kAsyncCopy>
__attribute__((always_inline)) inline bool StackImpl::tcp_fast_path(Sock &s, PacketRef &f, const Tcp *th,
                                                                    unsigned doff, const uint8_t *payload,
                                                                    uint32_t len, uint32_t src_ip)
{
    uint32_t tsval = 0;
    if (doff != kTcpLen) {
        if (!(s.flags & kFTsOk)) return false;
        tsval = be32(load32(reinterpret_cast<const uint8_t *>(th) + kTcpLen + 4));
        if (seq_lt(tsval, s.ts_recent)) return false; // PAWS: the slow path decides
    }
    const uint32_t ack = be32(th->ack);
    const bool csum_done = f.flags & kRxL4CsumGood;
    if (len == 0) {
        // A pure ACK for new data.
        if (!seq_gt(ack, s.snd_una) || seq_gt(ack, s.snd_max)) return false;
        if (!csum_done && !csum_ok(csum_add(pseudo_sum(src_ip, cfg_.ip, kProtoTcp, uint16_t(doff)), th, doff)))
            return false;
        const uint32_t acked = ack - s.snd_una;
        const uint32_t in_flight = s.snd_max - s.snd_una;
        s.tx_head += acked;
        s.snd_una = ack;
        s.snd_wl2 = ack; // the window is unchanged; keep WL1/WL2 current (they are compared mod 2^32)
        s.snd_wl1 = be32(th->seq);
        uint64_t rtt = 0;
        if (s.rtt_start_ns && seq_ge(ack, s.rtt_seq)) {
            rtt = now_ns_ - s.rtt_start_ns;
            s.rtt_start_ns = 0;
            rtt_sample(s, rtt);
        }
        s.cca->on_ack(s.cc, acked, in_flight, rtt, s.min_rtt_ns, now_ns_);
        s.dupacks = 0;
        s.rtx_count = 0;
        if (s.snd_una == s.snd_max) {
            TimerWheel::cancel(&s.rtx_timer);
            s.first_rtx_ns = 0;
        } else {
            s.first_rtx_ns = now_ns_;
            wheel_.arm(&s.rtx_timer, now_ns_ + s.rto_ns);
        }
        if (doff != kTcpLen && seq_le(be32(th->seq), s.last_ack_sent)) {
            s.ts_recent = tsval;
            s.ts_recent_ns = now_ns_;
        }
        s.segs_in++;
        s.last_recv_ns = now_ns_;
        raise(s, kEvWritable);
        if (s.tx_tail != s.snd_nxt - s.iss - 1) want_output(s);
        release_rx(f);
        return true;
    }
    // In-order data that fits, acking nothing new.
    if (ack != s.snd_una || len > s.rcv_adv - s.rcv_nxt) return false;
    bool deferred = false;
    if constexpr (kAsyncCopy) {
        // Through the copy engine (copy.cc): the checksum, where the NIC did
        // not verify it, is checked before any byte can be delivered; the
        // bytes become visible when the copy completes, after those of
        // earlier deliveries.
        if (len > s.rx_free()) return false;
        if (!csum_done &&
            !csum_ok(csum_add(pseudo_sum(src_ip, cfg_.ip, kProtoTcp, uint16_t(doff + len)), th, doff + len))) {
            stats_.drop_tcp_csum++;
            release(f);
            return true;
        }
        deferred = rx_copy(s, f, payload, len);
        if (!deferred) {
            const uint32_t off = s.rx_tail & s.rx_mask;
            const uint32_t first = std::min(len, s.rx_mask + 1 - off);
            std::memcpy(s.rx + off, payload, first);
            if (len > first) std::memcpy(s.rx, payload + first, len - first);
        }
    } else {
        // (the caller checked kFHasRings: rx_free() without its test; no
        // copies are in flight on this path)
        if (len > s.rx_mask + 1 - s.rx_readable()) return false;
        const uint32_t off = s.rx_tail & s.rx_mask;
        const uint32_t first = std::min(len, s.rx_mask + 1 - off);
        if (csum_done) {
            std::memcpy(s.rx + off, payload, first);
            if (len > first) std::memcpy(s.rx, payload + first, len - first);
        } else {
            // Copy into free ring space and sum in the same pass; the bytes only
            // become readable (rx_tail) once the checksum holds.
            uint32_t c = csum_add(pseudo_sum(src_ip, cfg_.ip, kProtoTcp, uint16_t(doff + len)), th, doff);
            c = csum_combine(c, csum_copy(s.rx + off, payload, first, 0), 0);
            if (len > first) c = csum_combine(c, csum_copy(s.rx, payload + first, len - first, 0), first);
            if (!csum_ok(c)) {
                stats_.drop_tcp_csum++;
                release(f);
                return true;
            }
        }
    }
    s.snd_wl1 = s.rcv_nxt;
    if (!deferred) s.rx_tail += len;
    s.rcv_nxt += len;
    s.bytes_in += len;
    s.segs_in++;
    s.last_recv_ns = now_ns_;
    if (doff != kTcpLen && seq_le(be32(th->seq), s.last_ack_sent)) {
        s.ts_recent = tsval;
        s.ts_recent_ns = now_ns_;
    }
    // Delayed ACK: at least every second segment (RFC 5681 4.2), else the
    // timer. Segments of one burst share the ACK sent at its end.
    if (++s.segs_unacked >= 2) {
        if (!(s.flags & kFAckNow)) ack_now(s);
    } else if (!TimerWheel::armed(&s.delack_timer)) {
        wheel_.arm(&s.delack_timer, now_ns_ + cfg_.tcp.delack_ns);
    }
    if (deferred) return true; // readable and released at completion
    raise(s, kEvReadable);
    release_rx(f);
    return true;
}

// ---- LISTEN ----------------------------------------------------------------

void StackImpl::negotiate(Sock &s, const TcpOptions &opt)
{
    const TcpConfig &t = cfg_.tcp;
    s.peer_mss = opt.has_mss && opt.mss ? opt.mss : 536;
    if (opt.has_wscale && t.window_scaling) {
        s.flags |= kFWscaleOk;
        s.snd_wscale = opt.wscale;
    } else {
        s.snd_wscale = 0;
        s.rcv_wscale = 0;
    }
    if (opt.sack_permitted && t.sack) s.flags |= kFSackOk;
    if (opt.has_ts && t.timestamps) {
        s.flags |= kFTsOk;
        s.ts_recent = opt.tsval;
        s.ts_recent_ns = now_ns_;
    }
}

// A connection born on listener l for the 4-tuple key: addresses, next hop,
// and its place in the flow table.
void StackImpl::adopt_child(Sock &l, Sock &c, const FlowKey &key)
{
    c.parent = l.index;
    c.local = Endpoint{cfg_.ip, key.local_port};
    c.remote = Endpoint{key.remote_ip, key.remote_port};
    c.next_hop = route(key.remote_ip);
    link_flow(c, key);
}

void StackImpl::tcp_listen_input(Sock &l, PacketRef &f, const Ipv4 *ip, const Tcp *th, const TcpOptions &opt,
                                 uint32_t len)
{
    const uint8_t flags = th->flags;
    const uint32_t seq = be32(th->seq), ack = be32(th->ack);
    const uint32_t src = be32(ip->src);
    const FlowKey key{cfg_.ip, src, be16(th->dport), be16(th->sport)};
    if (flags & kRst) {
        stats_.drop_tcp_bad_state++;
        return;
    }
    if (!(flags & kSyn)) {
        // Possibly the ACK completing a SYN-cookie handshake (RFC 4987 3.6).
        const int idx = cfg_.tcp.syncookies && (flags & kAck) && !(flags & kFin)
                            ? syncookie_decode(cfg_.isn_secret, key, seq - 1, ack - 1, now_ns_)
                            : -1;
        if (idx < 0 || l.accept_len >= l.backlog) {
            stats_.drop_tcp_bad_state++;
            send_rst_reply(ip, th, len);
            return;
        }
        Sock *c = sock_alloc(l.user);
        if (!c) {
            stats_.drop_tcp_bad_state++;
            return;
        }
        adopt_child(l, *c, key);
        c->irs = seq - 1;
        c->rcv_nxt = seq;
        c->iss = ack - 1;
        c->snd_una = c->snd_nxt = c->snd_max = c->snd_sml = ack;
        // Options the cookie SYN-ACK promised: encoded in our echoed TSval.
        TcpOptions o;
        o.has_mss = true;
        o.mss = kCookieMss[idx];
        if (opt.has_ts && (opt.tsecr & 0x3f) != 0x3f) {
            o.has_ts = true;
            o.tsval = opt.tsval;
            const uint32_t ws = opt.tsecr & 0xf;
            if (ws != 0xf) {
                o.has_wscale = true;
                o.wscale = uint8_t(ws);
            }
            o.sack_permitted = (opt.tsecr >> 4) & 1;
        }
        conn_init(*c);
        negotiate(*c, o);
        if (!(c->flags & kFWscaleOk)) c->rcv_wscale = 0;
        c->flags |= kFSynCookie;
        c->state = TcpState::kSynReceived;
        c->snd_wnd = uint32_t(be16(th->win)) << c->snd_wscale;
        c->snd_wl1 = seq;
        c->snd_wl2 = ack;
        c->max_snd_wnd = c->snd_wnd;
        update_mss(*c);
        build_template(*c);
        stats_.tcp_syncookies_ok++;
        stats_.tcp_passive_opens++;
        established(*c);
        // The handshake's pure ACK may have been lost and this be the first
        // data segment (or a FIN): it is in order, take it now rather than
        // make the peer wait for its retransmission timer.
        if (c->used && c->state == TcpState::kEstablished && (len || (flags & kFin))) {
            c->segs_in++;
            bool held = false;
            const unsigned doff = (th->doff >> 4) * 4u;
            uint8_t *payload = const_cast<uint8_t *>(reinterpret_cast<const uint8_t *>(th)) + doff;
            const uint32_t room = std::min(len, c->rx_free());
            // In order by construction (rcv_nxt = seq): tcp_data never holds it.
            tcp_data(*c, f, seq, payload, room, (flags & kFin) && room == len, &held);
        }
        return;
    }
    if (flags & kAck) {
        // A SYN-ACK to a listener: RFC 9293 says reset it.
        stats_.drop_tcp_bad_state++;
        send_rst_reply(ip, th, len);
        return;
    }
    if (l.accept_len >= l.backlog) {
        stats_.drop_tcp_bad_state++; // the application is not accepting: the peer retries
        return;
    }
    const bool queue_full = l.syn_queue_len >= std::min<uint32_t>(cfg_.tcp.syn_backlog, l.backlog * 2 + 8);
    Sock *c = queue_full ? nullptr : sock_alloc(l.user);
    if (!c) {
        if (!cfg_.tcp.syncookies) {
            stats_.drop_tcp_bad_state++;
            return;
        }
        // Stateless answer (RFC 4987 3.6): everything we must remember is in
        // our ISN and, with timestamps, in the low bits of our TSval.
        const uint16_t our_max = uint16_t(cfg_.mtu - 40);
        const uint16_t mss = std::min<uint16_t>(opt.has_mss && opt.mss ? opt.mss : 536, our_max);
        const int idx = cookie_mss_index(mss);
        const uint32_t cookie = syncookie_encode(cfg_.isn_secret, key, seq, idx, now_ns_);
        uint8_t o[24];
        uint8_t *p = o;
        *p++ = kOptMss;
        *p++ = 4;
        *p++ = uint8_t(our_max >> 8);
        *p++ = uint8_t(our_max);
        const bool ts = opt.has_ts && cfg_.tcp.timestamps;
        uint8_t rws = 0;
        if (ts) {
            const uint32_t ws = opt.has_wscale && cfg_.tcp.window_scaling ? opt.wscale : 0xf;
            const uint32_t sack = opt.sack_permitted && cfg_.tcp.sack;
            const uint32_t tsv = (tsval() & ~0x3fu) | (sack << 4) | ws;
            p = write_ts_option(p, tsv, opt.tsval);
            if (ws != 0xf) {
                while (rws < 14 && (cfg_.tcp.rcvbuf >> rws) > 65535) rws++;
                *p++ = kOptNop;
                *p++ = kOptWscale;
                *p++ = 3;
                *p++ = rws;
            }
            if (sack) {
                *p++ = kOptNop;
                *p++ = kOptNop;
                *p++ = kOptSackOk;
                *p++ = 2;
            }
        }
        const uint16_t win = uint16_t(std::min<uint32_t>(cfg_.tcp.rcvbuf, 65535));
        send_raw(cfg_.ip, key.local_port, src, key.remote_port, cookie, seq + 1, kSyn | kAck, win, o,
                 unsigned(p - o));
        stats_.tcp_syncookies_sent++;
        return;
    }
    adopt_child(l, *c, key);
    c->irs = seq;
    c->rcv_nxt = seq + 1;
    c->iss = isn_generate(cfg_.isn_secret, key, now_ns_);
    c->snd_una = c->snd_nxt = c->snd_max = c->snd_sml = c->iss;
    conn_init(*c);
    negotiate(*c, opt);
    c->snd_wnd = be16(th->win); // never scaled in a SYN
    c->snd_wl1 = seq;
    c->max_snd_wnd = c->snd_wnd;
    c->state = TcpState::kSynReceived;
    update_mss(*c);
    build_template(*c);
    l.syn_queue_len++;
    stats_.tcp_passive_opens++;
    send_segment(*c, c->iss, 0, kSyn | kAck, false);
    c->snd_nxt = c->snd_max = c->iss + 1;
    c->rtt_start_ns = now_ns_;
    c->rtt_seq = c->snd_nxt;
    arm_rtx(*c);
}

// ---- SYN-SENT --------------------------------------------------------------

void StackImpl::tcp_syn_sent_input(Sock &s, const Tcp *th, const TcpOptions &opt)
{
    const uint8_t flags = th->flags;
    const uint32_t seq = be32(th->seq), ack = be32(th->ack);
    if (flags & kAck) {
        if (seq_le(ack, s.iss) || seq_gt(ack, s.snd_max)) {
            stats_.drop_tcp_bad_state++;
            if (!(flags & kRst))
                send_raw(s.local.ip, s.local.port, s.remote.ip, s.remote.port, ack, 0, kRst, 0, nullptr, 0);
            return;
        }
    }
    if (flags & kRst) {
        if (flags & kAck) {
            stats_.tcp_resets_in++;
            conn_drop(s, ECONNREFUSED, kEvReset);
        } else {
            stats_.drop_tcp_bad_state++;
        }
        return;
    }
    if (!(flags & kSyn)) {
        stats_.drop_tcp_bad_state++;
        return;
    }
    s.irs = seq;
    s.rcv_nxt = seq + 1;
    s.rcv_adv = s.rcv_nxt + std::min<uint32_t>(rcv_window(s), 65535); // as our SYN said
    negotiate(s, opt);
    update_mss(s);
    s.snd_wnd = be16(th->win);
    s.snd_wl1 = seq;
    s.snd_wl2 = ack;
    s.max_snd_wnd = s.snd_wnd;
    if (flags & kAck) {
        s.snd_una = ack;
        if (seq_lt(s.snd_nxt, ack)) s.snd_nxt = ack;
        if (s.rtt_start_ns && s.rtx_count == 0) rtt_sample(s, now_ns_ - s.rtt_start_ns);
        s.rtt_start_ns = 0;
        established(s);
        ack_now(s);
        return;
    }
    // Simultaneous open (RFC 9293 3.5, figure 8): SYN-RECEIVED, answer SYN-ACK.
    s.state = TcpState::kSynReceived;
    send_segment(s, s.iss, 0, kSyn | kAck, true);
    arm_rtx(s);
}

// ---- the synchronized states ---------------------------------------------------

void StackImpl::established(Sock &s)
{
    const bool passive = s.parent != UINT32_MAX;
    // RFC 6298 5.7: the SYN (or SYN-ACK) timed out and left no RTT sample:
    // data starts with 3 s, not the backed-off handshake timer.
    if (s.srtt_ns == 0 && s.rtx_count > 0)
        s.rto_ns = std::clamp<uint64_t>(3'000'000'000ull, cfg_.tcp.rto_min_ns, cfg_.tcp.rto_max_ns);
    s.state = TcpState::kEstablished;
    update_mss(s);
    s.cca->init(s.cc, s.mss, now_ns_);
    s.last_recv_ns = now_ns_;
    s.rtx_count = 0;
    s.first_rtx_ns = 0;
    stats_.tcp_established++;
    TimerWheel::cancel(&s.rtx_timer);
    if (passive) {
        Sock &l = socks_[s.parent];
        if (!(s.flags & kFSynCookie) && l.syn_queue_len) l.syn_queue_len--;
        if (!attach_rings(s, l.user)) {
            // No memory for this connection: refuse it rather than stall.
            stats_.tcp_resets_out++;
            send_raw(s.local.ip, s.local.port, s.remote.ip, s.remote.port, s.snd_max, 0, kRst, 0, nullptr, 0);
            sock_free(s);
            return;
        }
        s.queue_next = UINT32_MAX;
        if (l.accept_tail == UINT32_MAX) l.accept_head = s.index;
        else socks_[l.accept_tail].queue_next = s.index;
        l.accept_tail = s.index;
        l.accept_len++;
        raise(l, kEvAcceptable);
    } else {
        raise(s, kEvConnected | kEvWritable);
    }
    arm_keepalive(s);
}

void StackImpl::rtt_sample(Sock &s, uint64_t r)
{
    if (r == 0) r = 1000; // below our clock's resolution: call it 1 us
    if (!s.min_rtt_ns || r < s.min_rtt_ns) s.min_rtt_ns = r;
    if (s.srtt_ns == 0) {
        s.srtt_ns = r;
        s.rttvar_ns = r / 2;
    } else {
        const uint64_t diff = s.srtt_ns > r ? s.srtt_ns - r : r - s.srtt_ns;
        s.rttvar_ns = (3 * s.rttvar_ns + diff) / 4;
        s.srtt_ns = (7 * s.srtt_ns + r) / 8;
    }
    // RFC 6298 2.3 with G = 1 ms (our timer granularity).
    const uint64_t rto = s.srtt_ns + std::max<uint64_t>(1'000'000, 4 * s.rttvar_ns);
    s.rto_ns = std::clamp(rto, cfg_.tcp.rto_min_ns, cfg_.tcp.rto_max_ns);
}

// RFC 5961 3.2 / 4.2 / 5.2: an ACK that tells a blind attacker nothing.
// Throttled (RFC 5961 7) per connection, not per stack: a shared counter
// is itself a side channel (CVE-2016-5696). One per millisecond still lets
// a peer that lost its state resynchronise at once.
constexpr uint64_t kChallengeAckGapNs = 1'000'000;

static inline void challenge_ack(StackImpl &st, Sock &s)
{
    if (s.last_challenge_ns && st.now_ns_ - s.last_challenge_ns < kChallengeAckGapNs) return;
    s.last_challenge_ns = st.now_ns_;
    st.stats_.tcp_challenge_acks++;
    st.ack_now(s);
}

void StackImpl::tcp_sync_input(Sock &s, PacketRef &f, const Tcp *th, const TcpOptions &opt, uint8_t *payload,
                               uint32_t len, bool *held)
{
    uint8_t flags = th->flags;
    uint32_t seq = be32(th->seq);
    // Simultaneous open (RFC 9293 figure 8): in SYN-RECEIVED the peer's
    // SYN-ACK repeats its SYN and acks ours; treat it as the ACK it carries.
    if (s.state == TcpState::kSynReceived && s.parent == UINT32_MAX && (flags & (kSyn | kAck)) == (kSyn | kAck) &&
        seq == s.irs) {
        flags &= uint8_t(~kSyn);
        seq++;
    }

    // PAWS (RFC 7323 5.3).
    if ((s.flags & kFTsOk) && opt.has_ts && !(flags & kRst) && paws_old(opt.tsval, s.ts_recent)) {
        if (now_ns_ - s.ts_recent_ns > kPawsIdleNs) {
            s.ts_recent = opt.tsval; // idle for 24 days: the old value means nothing
        } else {
            stats_.drop_tcp_paws++;
            ack_now(s);
            return;
        }
    }

    // Acceptability (RFC 9293 3.10.7.4, first check).
    const uint32_t wnd = s.rcv_adv - s.rcv_nxt;
    const uint32_t seglen = len + ((flags & kSyn) ? 1 : 0) + ((flags & kFin) ? 1 : 0);
    bool ok;
    if (seglen == 0) {
        ok = wnd == 0 ? seq == s.rcv_nxt : (seq_ge(seq, s.rcv_nxt) && seq_lt(seq, s.rcv_nxt + wnd));
        // An ACK exactly at rcv_nxt is always fine (window updates while closed).
        ok = ok || seq == s.rcv_nxt;
    } else if (wnd == 0) {
        ok = false;
        // A zero window still takes ACKs and RSTs: handle the control part.
        if (seq == s.rcv_nxt && !(flags & kSyn)) ok = true;
    } else {
        const uint32_t end = seq + seglen - 1;
        ok = (seq_ge(seq, s.rcv_nxt) && seq_lt(seq, s.rcv_nxt + wnd)) ||
             (seq_ge(end, s.rcv_nxt) && seq_lt(end, s.rcv_nxt + wnd));
    }
    if (!ok) {
        if (!(flags & kRst)) {
            stats_.drop_tcp_out_of_window++;
            // All of it is old: report it as a D-SACK (RFC 2883 4.1).
            if (len && (s.flags & kFSackOk) && seq_lt(seq, s.rcv_nxt))
                note_dsack(s, seq, seq + std::min(len, s.rcv_nxt - seq));
            ack_now(s);
        } else {
            stats_.drop_tcp_out_of_window++;
        }
        return;
    }

    // RST (RFC 5961 3.2): exactly rcv_nxt resets, elsewhere in the window
    // gets a challenge ACK.
    if (flags & kRst) {
        if (seq != s.rcv_nxt) {
            stats_.drop_tcp_bad_state++;
            challenge_ack(*this, s);
            return;
        }
        stats_.tcp_resets_in++;
        switch (s.state) {
        case TcpState::kSynReceived:
            if (s.parent != UINT32_MAX) conn_drop(s, ECONNREFUSED, 0); // back to LISTEN: just forget it
            else conn_drop(s, ECONNREFUSED, kEvReset);
            return;
        case TcpState::kClosing:
        case TcpState::kLastAck:
            conn_closed(s);
            if (s.used && s.state == TcpState::kClosed) s.error = 0;
            return;
        default:
            conn_drop(s, ECONNRESET, kEvReset);
            return;
        }
    }

    // SYN in a synchronized state (RFC 5961 4.2): challenge ACK. A passive
    // SYN-RECEIVED connection seeing its SYN again resends the SYN-ACK.
    if (flags & kSyn) {
        if (s.state == TcpState::kSynReceived && seq == s.irs) {
            send_segment(s, s.iss, 0, kSyn | kAck, true);
            return;
        }
        stats_.drop_tcp_bad_state++;
        challenge_ack(*this, s);
        return;
    }
    if (!(flags & kAck)) {
        stats_.drop_tcp_bad_state++;
        return;
    }

    // RFC 7323 4.3 (3): remember the newest timestamp of a segment that
    // starts at or before what we last acknowledged (not one past a hole),
    // so our TSecr gives the peer true RTT samples and PAWS a current bound.
    if ((s.flags & kFTsOk) && opt.has_ts && seq_le(seq, s.last_ack_sent) && seq_ge(opt.tsval, s.ts_recent)) {
        s.ts_recent = opt.tsval;
        s.ts_recent_ns = now_ns_;
    }

    // Trim what we already have and what is beyond the window.
    if (seq_lt(seq, s.rcv_nxt)) {
        const uint32_t dup = s.rcv_nxt - seq;
        // Data we already have: the ACK reports it as a D-SACK (RFC 2883),
        // so a sender can tell a spurious retransmission (reordering, a
        // probe that crossed its original) from a loss and undo its
        // reaction. Zero-length probes carry no byte to report.
        if (len && (s.flags & kFSackOk)) note_dsack(s, seq, seq + std::min(dup, len));
        if (dup >= len) {
            if (dup > len) flags &= uint8_t(~kFin); // an old FIN
            payload += len;
            len = 0;
        } else {
            payload += dup;
            len -= dup;
        }
        seq = s.rcv_nxt;
        ack_now(s); // a duplicate: tell the peer where we are (RFC 5681 4.2)
    }
    const uint32_t room = std::min(s.rcv_adv - seq, s.rx_free() - std::min(s.rx_free(), seq - s.rcv_nxt));
    if (len > room) {
        len = room;
        flags &= uint8_t(~kFin);
        ack_now(s);
    }

    // ACK processing.
    if (s.state == TcpState::kSynReceived) {
        const uint32_t ack = be32(th->ack);
        if (seq_le(ack, s.snd_una) || seq_gt(ack, s.snd_max)) {
            stats_.drop_tcp_bad_state++;
            send_raw(s.local.ip, s.local.port, s.remote.ip, s.remote.port, ack, 0, kRst, 0, nullptr, 0);
            return;
        }
        s.snd_una = ack;
        s.snd_wnd = uint32_t(be16(th->win)) << s.snd_wscale;
        s.snd_wl1 = seq;
        s.snd_wl2 = ack;
        s.max_snd_wnd = s.snd_wnd;
        if (s.rtt_start_ns && s.rtx_count == 0) rtt_sample(s, now_ns_ - s.rtt_start_ns);
        s.rtt_start_ns = 0;
        established(s);
        if (!s.used || s.state != TcpState::kEstablished) return; // refused for lack of memory
    } else if (!tcp_ack(s, th, opt, len)) {
        return;
    }
    if (!s.used) return;

    // Data and FIN.
    const bool fin = flags & kFin;
    switch (s.state) {
    case TcpState::kEstablished:
    case TcpState::kFinWait1:
    case TcpState::kFinWait2:
        if (len || fin) {
            tcp_data(s, f, seq, payload, len, fin, held);
            // RFC 9293 3.10.4: CLOSE means "no more to send"; the peer may
            // still send. Nobody reads it any more: acknowledge and discard.
            if ((s.flags & kFUserClosed) && s.used) s.rx_head = s.rx_tail;
        }
        break;
    default:
        // CLOSE-WAIT, CLOSING, LAST-ACK: the peer already sent its FIN.
        if (len) stats_.drop_tcp_bad_state++;
        if (fin) ack_now(s);
        break;
    }
}

bool StackImpl::tcp_ack(Sock &s, const Tcp *th, const TcpOptions &opt, uint32_t len)
{
    const uint32_t ack = be32(th->ack), seq = be32(th->seq);
    if (seq_gt(ack, s.snd_max)) {
        stats_.drop_tcp_bad_state++;
        ack_now(s);
        return false;
    }
    const uint32_t horizon = std::max<uint32_t>(s.max_snd_wnd, 65535);
    if (seq_lt(ack, s.snd_una - horizon)) {
        // Too old to be real (RFC 5961 5.2): challenge, drop.
        stats_.drop_tcp_bad_state++;
        challenge_ack(*this, s);
        return false;
    }
    const uint32_t win = uint32_t(be16(th->win)) << s.snd_wscale;
    const bool sack_ok = s.flags & kFSackOk;
    const uint32_t old_una = s.snd_una, sacked_before = s.sack.sacked_bytes();
    const bool dsack = sack_ok && opt.n_sack && is_dsack(opt, ack);
    const uint32_t newly_sacked = (sack_ok && opt.n_sack) ? s.sack.update(s.snd_una, s.snd_max, opt.sack, opt.n_sack) : 0;

    const uint32_t fin_seq = s.iss + 1 + s.tx_tail; // where our FIN sits (if sent)
    const bool fin_sent = (s.flags & kFFinQueued) && seq_gt(s.snd_max, fin_seq);
    if (seq_gt(ack, s.snd_una)) {
        const uint32_t in_flight = s.snd_max - s.snd_una;
        uint32_t acked = ack - s.snd_una;
        uint32_t data = acked;
        if (fin_sent && seq_gt(ack, fin_seq)) data--;
        s.tx_head += data;
        s.snd_una = ack;
        if (seq_lt(s.snd_nxt, ack)) s.snd_nxt = ack;
        s.sack.advance(ack);
        uint64_t rtt = 0;
        if (s.rtt_start_ns && seq_ge(ack, s.rtt_seq)) {
            rtt = now_ns_ - s.rtt_start_ns;
            s.rtt_start_ns = 0;
            rtt_sample(s, rtt);
        }
        if (s.flags & kFInRecovery) {
            if (seq_ge(ack, s.recover)) {
                s.flags &= ~kFInRecovery;
                s.cca->on_recovery_exit(s.cc, now_ns_);
                // RFC 6582 3.2 step 6: deflate to min(ssthresh, FlightSize + SMSS).
                s.cc.cwnd = std::min(s.cc.ssthresh, (s.snd_max - s.snd_una) + s.mss);
                s.cc.cwnd = std::max(s.cc.cwnd, s.mss);
            } else if (!sack_ok) {
                // NewReno partial ACK: the next hole is lost too; resend it,
                // deflate by what was acked, add back one segment.
                send_segment(s, s.snd_una, std::min(s.mss, s.snd_max - s.snd_una), kAck, true);
                s.cc.cwnd = s.cc.cwnd > acked ? s.cc.cwnd - acked : s.mss;
                if (acked >= s.mss) s.cc.cwnd += s.mss;
                wheel_.arm(&s.rtx_timer, now_ns_ + s.rto_ns);
            }
        } else {
            s.cca->on_ack(s.cc, acked, in_flight, rtt, s.min_rtt_ns, now_ns_);
        }
        if ((s.flags & kFRtoRecovery) && seq_ge(ack, s.recover)) s.flags &= ~kFRtoRecovery;
        s.dupacks = 0;
        s.rtx_count = 0;
        s.probes = 0;
        if (s.snd_una == s.snd_max) {
            TimerWheel::cancel(&s.rtx_timer);
            s.first_rtx_ns = 0;
        } else if (!(s.flags & kFInRecovery) || (s.flags & kFSackOk)) {
            s.first_rtx_ns = now_ns_;
            wheel_.arm(&s.rtx_timer, now_ns_ + s.rto_ns);
        }
        raise(s, kEvWritable);
        want_output(s);
    } else if (ack == s.snd_una && len == 0 && !(th->flags & kFin) && s.snd_max != s.snd_una &&
               (win == s.snd_wnd || newly_sacked)) {
        // A duplicate ACK: RFC 5681 2 (same window), or RFC 6675 2 (it SACKs
        // new data, whatever its window: receivers move their window often).
        s.dupacks++;
        if (sack_ok) {
            // Loss detection is RACK's (rack_on_ack below); the first two
            // duplicates still let new data out (RFC 3042).
            if (!(s.flags & kFInRecovery) && s.dupacks <= 2) want_output(s);
        } else if (!(s.flags & kFInRecovery)) {
            const bool lost = s.dupacks >= 3;
            if (lost && !((s.flags & kFRtoRecovery) && seq_lt(s.snd_una, s.recover))) {
                // Fast retransmit, then fast recovery (RFC 5681 3.2, RFC 6582, RFC 6675 5).
                s.flags |= kFInRecovery;
                s.recover = s.snd_max;
                s.cca->on_congestion(s.cc, s.snd_max - s.snd_una, now_ns_);
                stats_.tcp_fast_retransmits++;
                s.rtt_start_ns = 0;
                const uint32_t n = std::min(s.mss, s.snd_max - s.snd_una);
                send_segment(s, s.snd_una, n, kAck, true);
                s.high_rxt = s.snd_una + n;
                s.cc.cwnd = s.cc.ssthresh + 3 * s.mss;
                wheel_.arm(&s.rtx_timer, now_ns_ + s.rto_ns);
            } else if (s.dupacks <= 2) {
                want_output(s); // limited transmit (RFC 3042)
            }
        } else {
            s.cc.cwnd += s.mss; // NewReno inflation
            want_output(s);
        }
    }
    // RACK-TLP and PRR look at every ACK of a SACK connection with data out
    // (or just acknowledged).
    if (sack_ok && (s.snd_una != old_una || opt.n_sack || (s.flags & kFTlpOut)))
    {
        // RFC 6937 DeliveredData: what snd_una and the SACKed bytes moved by.
        const int64_t delivered = int64_t(s.snd_una - old_una) + int64_t(s.sack.sacked_bytes()) - sacked_before;
        rack_on_ack(s, old_una, opt, uint32_t(std::max<int64_t>(delivered, 0)), dsack);
    }

    // Window update (RFC 9293 3.10.7.4, SND.WL1/WL2 rule).
    if (seq_lt(s.snd_wl1, seq) || (s.snd_wl1 == seq && seq_le(s.snd_wl2, ack))) {
        const bool opened = win > s.snd_wnd;
        s.snd_wnd = win;
        s.snd_wl1 = seq;
        s.snd_wl2 = ack;
        s.max_snd_wnd = std::max(s.max_snd_wnd, win);
        if (opened) {
            s.probes = 0;
            want_output(s);
        }
    }

    // Our FIN acknowledged?
    if (fin_sent && seq_gt(ack, fin_seq)) {
        switch (s.state) {
        case TcpState::kFinWait1:
            s.state = TcpState::kFinWait2;
            TimerWheel::cancel(&s.rtx_timer);
            // An orphaned FIN-WAIT-2 (the application closed) does not wait forever.
            if (s.flags & kFUserClosed) wheel_.arm(&s.aux_timer, now_ns_ + cfg_.tcp.time_wait_ns);
            break;
        case TcpState::kClosing:
            enter_time_wait(s);
            return false;
        case TcpState::kLastAck:
            conn_closed(s);
            return false;
        default:
            break;
        }
    }
    return true;
}

uint32_t StackImpl::deliver(Sock &s, const uint8_t *p, uint32_t n)
{
    const uint32_t off = s.rx_tail & s.rx_mask;
    const uint32_t first = std::min(n, s.rx_mask + 1 - off);
    std::memcpy(s.rx + off, p, first);
    std::memcpy(s.rx, p + first, n - first);
    s.rx_tail += n;
    s.bytes_in += n;
    return n;
}

void StackImpl::tcp_data(Sock &s, PacketRef &f, uint32_t seq, uint8_t *payload, uint32_t len, bool fin, bool *held)
{
    if (seq == s.rcv_nxt) {
        bool got_fin = fin;
        if (len) {
            deliver(s, payload, len);
            s.rcv_nxt += len;
        }
        if (!s.ooo.empty()) {
            bool ooo_fin = false;
            s.rcv_nxt = s.ooo.drain(ooo_pool_, io_, s.rcv_nxt, &ooo_fin,
                                    [&](const uint8_t *p, uint32_t n) { deliver(s, p, n); });
            stats_.ooo_frames_used = ooo_pool_.used();
            got_fin = got_fin || ooo_fin;
            ack_now(s); // a gap filled: ACK at once (RFC 5681 4.2)
        }
        if (len) raise(s, kEvReadable);
        if (got_fin) {
            tcp_fin(s);
        } else if (len) {
            if (++s.segs_unacked >= 2) ack_now(s);
            else if (!TimerWheel::armed(&s.delack_timer)) wheel_.arm(&s.delack_timer, now_ns_ + cfg_.tcp.delack_ns);
        }
        return;
    }
    // Out of order: keep the frame itself in the anonymous pool.
    if (len) {
        const uint32_t share = cfg_.ooo_frames_per_conn;
        switch (s.ooo.insert(ooo_pool_, io_, seq, payload, len, fin, f, share)) {
        case OooQueue::Insert::kQueued:
            *held = true;
            stats_.tcp_ooo_segments++;
            break;
        case OooQueue::Insert::kDuplicate:
            if (s.flags & kFSackOk) note_dsack(s, seq, seq + len); // all of it was queued already
            break;
        case OooQueue::Insert::kNoRoom:
            stats_.drop_tcp_ooo_full++;
            break;
        }
        stats_.ooo_frames_used = ooo_pool_.used();
    }
    ack_now(s); // duplicate ACK with SACK blocks: the sender learns of the hole
}

void StackImpl::tcp_fin(Sock &s)
{
    s.rcv_nxt++;
    s.flags |= kFFinReceived;
    raise(s, kEvPeerClosed | kEvReadable);
    ack_now(s);
    switch (s.state) {
    case TcpState::kEstablished:
        s.state = TcpState::kCloseWait;
        break;
    case TcpState::kFinWait1: {
        // Has our FIN been acked by this very segment? tcp_ack moved us on if so.
        s.state = TcpState::kClosing;
        break;
    }
    case TcpState::kFinWait2:
        enter_time_wait(s);
        break;
    default:
        break;
    }
}

void StackImpl::time_wait_input(Sock &s, const Tcp *th, const TcpOptions &opt, bool *reopen)
{
    const uint8_t flags = th->flags;
    const uint32_t seq = be32(th->seq);
    if (flags & kRst) {
        if (seq == s.rcv_nxt) conn_closed(s);
        else stats_.drop_tcp_bad_state++;
        if (s.used && s.state == TcpState::kClosed && !(s.flags & kFUserClosed)) s.error = 0;
        return;
    }
    if (flags & kSyn) {
        // RFC 6191: a newer timestamp, or without timestamps a higher ISN,
        // lets the SYN reopen the connection.
        const bool newer = ((s.flags & kFTsOk) && opt.has_ts) ? seq_gt(opt.tsval, s.ts_recent) : seq_gt(seq, s.rcv_nxt);
        if (newer && find_listener(cfg_.ip, s.local.port, s.remote.ip, s.remote.port)) {
            // Frees a closed socket; one the application still holds stays,
            // unlinked, in CLOSED.
            conn_closed(s);
            *reopen = true;
            return;
        }
        stats_.drop_tcp_bad_state++;
        ack_now(s);
        return;
    }
    if ((s.flags & kFTsOk) && opt.has_ts && paws_old(opt.tsval, s.ts_recent)) {
        stats_.drop_tcp_paws++;
        ack_now(s);
        return;
    }
    if (flags & kFin) {
        // The peer did not hear our last ACK: ACK again, restart 2MSL.
        ack_now(s);
        wheel_.arm(&s.aux_timer, now_ns_ + cfg_.tcp.time_wait_ns);
        return;
    }
    stats_.drop_tcp_bad_state++;
}

} // namespace mars
