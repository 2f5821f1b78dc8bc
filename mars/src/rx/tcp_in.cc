// tcp_in.cc: the receive path, top to bottom: input() (the receive entry)
// and its per-frame loops (run to completion, strands, prefetching), the
// Ethernet demux, TCP input (validation, connection lookup) and the fast
// path. The rules for everything the fast path does not take live beside it:
// tcp_handshake.cc (LISTEN, SYN-SENT), tcp_sync.cc (the synchronized states,
// ACK processing), tcp_data.cc (data, FIN, TIME-WAIT).
//
// Every segment is validated against its frame first (lengths, data offset,
// option lengths, checksum). Then a connection lookup (last-flow cache, then
// the hash table) and Van Jacobson's header prediction: an ESTABLISHED
// connection getting the next in-order data segment with only ACK (and PSH)
// set, or a pure ACK that advances snd.una, takes a short path that verifies
// the checksum in the same pass as the copy into the receive ring. Anything
// else goes through the RFC 9293 3.10.7 segment-arrival rules.
#include "rx/fast_path.h"
#include "rx/host.h"
#include "rx/strands.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>

namespace mars::rx {

using namespace wire;

namespace {

const uint8_t kBroadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

} // namespace

// The receive entry. Run to completion (strands = 1, no prefetch): each
// frame first tries header prediction on the flow the last segment belonged
// to (tcp_express); everything else goes through the full demux
// (input_frame below: Ethernet, then arp.cc or ipv4.cc, then tcp_input).
// With strands or prefetching, the same per-frame work runs behind a pipeline that hides the memory waits
// of the lookup (input_strands, input_prefetch_ahead).
void Receiver::input(PacketRef *frames, uint16_t n, uint64_t now_ns)
{
    if (now_ns > env().now_ns_) env().now_ns_ = now_ns;
    env().stats_.rx_frames += n;
    gather_misses_ = 0; // receive coalescing's bound per burst (rx_coalesce.cc)
    if (copy_) {
        input_burst<true>(frames, n); // no coalescing: each payload is one copy of its own (rx_coalesce.cc)
    } else {
        input_burst<false>(frames, n);
    }
    if (copies_in_flight()) reap_copies(false); // the burst's copies start; earlier ones may be done
    flush_rx_done();
    // The flow table counts its last-flow cache; publish once per burst.
    env().stats_.lookup_cache_hits = flows().cache_hits;
    env().stats_.lookup_cache_misses = flows().cache_misses;
    // ACKs and data the burst made due go out together.
    env().flush_output();
    env().link_.flush();
}

void Receiver::rx_setup(const StackConfig &c)
{
    strands_ = c.strands;
    copy_ = c.copy_engine;
    copy_threshold_ = c.copy_threshold;
    if (copy_ && pending_.empty()) pending_.resize(kMaxPendingCopies);
    std::memcpy(&wire_mac_lo_, c.mac.b, 4);
    std::memcpy(&wire_mac_hi_, c.mac.b + 4, 2);
    wire_ip_ = be32(c.ip);
}

void Receiver::rx_clear()
{
    rx_done_n_ = 0;
    pending_head_ = pending_tail_ = 0;
    doorbell_due_ = false;
}

// The full demux, for every frame the express path did not take: Ethernet
// II here, then ARP (arp.cc), IPv4/ICMP (ipv4.cc), which hands TCP
// segments back to tcp_input() below, or IPv6 (ipv6.cc).
void Receiver::input_frame(PacketRef &f)
{
    // The full path may read or write any receive ring: asynchronous copies
    // land first (mars/copy.h).
    if (copies_in_flight()) reap_copies(true);
    if (f.len < kEthLen || !f.data) {
        env().stats_.drop_eth++;
        env().release(f);
        return;
    }
    const Eth *eth = reinterpret_cast<const Eth *>(f.data);
    const uint16_t type = be16(eth->type);
    if (std::memcmp(eth->dst, env().cfg_.mac.b, 6) != 0 && std::memcmp(eth->dst, kBroadcast, 6) != 0 &&
        !(env().link_.pass_unclaimed && (eth->dst[0] & 1)) && // sharing: multicast is the other stack's too
        !(type == kEtherIpv6 && ip6().accepts_mac(eth->dst)) && // all-nodes, our solicited-node groups
        !(eth->dst[0] == 0x01 && eth->dst[1] == 0 && eth->dst[2] == 0x5e)) { // IPv4 multicast: UDP decides
        env().stats_.drop_not_ours++;
        env().release(f);
        return;
    }
    switch (type) {
    case kEtherIpv4:
        env().ip_.input(f, env().now_ns_);
        return;
    case kEtherArp:
        env().arp_.input(f, env().now_ns_);
        return;
    case kEtherIpv6:
        if (tcp6_express(f)) return;
        ip6().input(f, env().now_ns_);
        return;
    default:
        // VLAN tags, anything else: not ours to handle.
        if (env().link_.pass_up(f, Unclaimed::kOther)) return;
        env().stats_.drop_eth++;
        env().release(f);
        return;
    }
}

// The per-frame loops; kAsyncCopy: in-order payloads go to the copy engine.
template <bool kAsyncCopy>
__attribute__((always_inline)) inline void Receiver::input_burst(PacketRef *frames, uint16_t n)
{
    if (strands_ > 1 || env().prefetch_) {
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
            // (IPv6 only without a copy engine: tcp6_express is the plain path's.)
            if (!tcp_express<kAsyncCopy>(frames[i]) && (kAsyncCopy || !express6_cached(frames[i]))) break;
            env().stats_.rx_bytes += len;
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
        if (!kAsyncCopy && env().cfg_.tcp.rx_coalesce && n > 1) {
            for (uint16_t i = 0; i < n;) {
                if (const uint16_t k = coalesce_run<kAsyncCopy>(frames + i, uint16_t(n - i))) {
                    i = uint16_t(i + k);
                    continue;
                }
                PacketRef &f = frames[i++];
                env().stats_.rx_bytes += f.len;
                if (!tcp_express<kAsyncCopy>(f)) input_frame(f);
            }
            return;
        }
        for (uint16_t i = 0; i < n; i++) {
            PacketRef &f = frames[i];
            env().stats_.rx_bytes += f.len;
            if (!tcp_express<kAsyncCopy>(f)) input_frame(f);
        }
    }
}

// Receive coalescing (rx_coalesce.cc) where it applies: on, and no copy
// engine (each asynchronous copy has its own completion and frame).
template <bool kAsyncCopy>
__attribute__((always_inline)) inline uint16_t Receiver::coalesce_run(PacketRef *frames, uint16_t n)
{
    if constexpr (kAsyncCopy) {
        return 0;
    } else {
        if (!env().cfg_.tcp.rx_coalesce || n < 2) return 0;
        if (const uint16_t k = input_run(frames, n)) return k;
        // Refused: perhaps only because another connection's frame follows.
        const bool look = gather_misses_ < kGatherMissesMax;
        if (look && gather_run(frames, n)) return input_run(frames, n);
        // IPv6 (rx_coalesce6.cc) after IPv4's refusal and look: a test before
        // input_run(), or in it, cost IPv4's groups +1 instruction per segment
        // (its loop's registers moved), one before the look interleaved IPv4
        // flows +1. IPv4's look fails an IPv6 frame at once: not a miss of
        // its (input_run6 looks for IPv6 segments within the same budget).
        if (frames[0].len >= kEthLen && load16(frames[0].data + 12) == kWireEtherIpv6) {
            gather_misses_ = uint8_t(gather_misses_ - look);
            return input_run6(frames, n);
        }
        return 0;
    }
}

bool Receiver::frame_flow(const PacketRef &f, FlowKey *key) const
{
    const uint8_t *d = f.data;
    if (f.len < kHeadersLen || (load32(d + 12) & kWireIpv4Mask) != kWireIpv4NoOptions) return false;
    const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(d + kEthLen);
    if (ip->proto != kProtoTcp) return false;
    const Tcp *th = reinterpret_cast<const Tcp *>(d + kEthLen + kIpLen);
    *key = FlowKey{env().cfg_.ip, be32(ip->src), be16(th->dport), be16(th->sport)};
    return true;
}

// The lines of a connection block the receive path touches: tcp::Hot's two
// (all the fast path reads for in-order data, fast_path.h) and the flow node
// after them, which the chain walk (stage 2 below) reads.
void Receiver::prefetch_conn(const Sock &s)
{
    const char *p = reinterpret_cast<const char *>(&s);
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
    __builtin_prefetch(&s.flow);
}
constexpr uint64_t kConnPrefetches = 3;

bool Receiver::frame_flow6(const PacketRef &f, FlowKey6 *key) const
{
    const uint8_t *d = f.data;
    // Our MAC too: then input_frame6() is input_frame() for it, with no
    // other destination (multicast, broadcast) to sort out.
    if (f.len < kEthLen + kIp6Len + kTcpLen || load32(d) != wire_mac_lo_ || load16(d + 4) != wire_mac_hi_ ||
        load16(d + 12) != kWireEtherIpv6 || (d[kEthLen] >> 4) != 6)
        return false;
    const Ipv6 *ip = reinterpret_cast<const Ipv6 *>(d + kEthLen);
    if (ip->next != kProtoTcp) return false;
    const Tcp *th = reinterpret_cast<const Tcp *>(d + kEthLen + kIp6Len);
    std::memcpy(key->local.b, ip->dst, 16);
    std::memcpy(key->remote.b, ip->src, 16);
    key->local_port = be16(th->dport);
    key->remote_port = be16(th->sport);
    return true;
}

// An IPv6 connection's lines from its flow node before the node is read: the
// node sits in the connection's cold IPv6 part (tcp::V6Part) at a fixed
// offset, so tcp::Hot's two lines are found without waiting for the node's
// owner. The node itself (64 bytes, not line-aligned: its owner may be on
// the next line) is what the chain walk reads.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
constexpr size_t kFlow6Offset = offsetof(tcp::Conn, v6) + offsetof(tcp::V6Part, flow);
#pragma GCC diagnostic pop
void Receiver::prefetch_conn6(const FlowNode6 *node)
{
    const char *p = reinterpret_cast<const char *>(node) - kFlow6Offset;
    __builtin_prefetch(p);
    __builtin_prefetch(p + 64);
    __builtin_prefetch(node);
    __builtin_prefetch(&node->owner);
}
constexpr uint64_t kConn6Prefetches = 4;

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
// TCP/IPv6 frames take the same stages on FlowTable6 (frame_flow6, the
// node's key re-checked at retirement: input_frame6).
template <bool kAsyncCopy>
void Receiver::input_strands(PacketRef *frames, uint16_t n)
{
    struct Ops {
        Receiver &st;
        PacketRef *frames;
        uint16_t n;
        unsigned width;
        bool prefetch;
        uint64_t prefetches = 0;
        struct State {
            // One family's key: stage 0 sets v6 and the key it parsed.
            union Key {
                uint8_t raw[sizeof(FlowKey6)];
                FlowKey v4;
                FlowKey6 v6;
                Key() : raw{} {}
            } key;
            uint32_t hash;
            bool v6;
            FlowNode *node;
            FlowNode6 *node6;
        };
        bool step(uint16_t item, uint8_t stage, State &x)
        {
            switch (stage) {
            case 0: {
                x.node = nullptr;
                x.node6 = nullptr;
                x.v6 = false;
                // The frame `width` ahead is the next to start: bring its headers in.
                if (prefetch && item + width < n) {
                    __builtin_prefetch(frames[item + width].data);
                    prefetches++;
                }
                if (!st.frame_flow(frames[item], &x.key.v4)) {
                    new (&x.key.v6) FlowKey6;
                    if (!st.frame_flow6(frames[item], &x.key.v6)) return true;
                    x.v6 = true;
                    x.hash = flow_hash6(x.key.v6);
                    if (prefetch) {
                        __builtin_prefetch(st.flows6().bucket(x.hash));
                        prefetches++;
                    }
                    return false;
                }
                x.hash = flow_hash(x.key.v4);
                if (prefetch) {
                    __builtin_prefetch(st.flows().bucket(x.hash));
                    prefetches++;
                }
                return false;
            }
            case 1:
                if (x.v6) {
                    x.node6 = *st.flows6().bucket(x.hash);
                    if (!x.node6) return true;
                    if (prefetch) {
                        st.prefetch_conn6(x.node6);
                        prefetches += kConn6Prefetches;
                    }
                    return false;
                }
                x.node = *st.flows().bucket(x.hash);
                if (!x.node) return true;
                if (prefetch) {
                    st.prefetch_conn(*tcp::Env::sock_of(x.node));
                    prefetches += kConnPrefetches;
                }
                return false;
            case 2: {
                const Sock *s;
                if (x.v6) {
                    x.node6 = FlowTable6::find_from(x.node6, x.key.v6, x.hash);
                    if (!x.node6) return true;
                    s = static_cast<const Sock *>(x.node6->owner);
                } else {
                    x.node = FlowTable::find_from(x.node, x.key.v4, x.hash);
                    if (!x.node) return true;
                    s = tcp::Env::sock_of(x.node);
                }
                if (!prefetch || !s->rx) return true;
                __builtin_prefetch(s->rx + (s->rx_tail & s->rx_mask), 1);
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
            st.env().stats_.rx_bytes += f.len;
            if (x.node6) {
                st.input_frame6(f, x.node6);
                return;
            }
            FlowNode *node = x.node;
            if (node && node->linked && st.template tcp_express_on<kAsyncCopy>(f, *tcp::Env::sock_of(node))) {
                // What the last-flow cache and the table would have counted.
                if (node == st.flows().cached()) {
                    st.flows().cache_hits++;
                } else {
                    st.flows().cache_misses++;
                    st.flows().remember(node);
                }
                return;
            }
            st.input_frame(f);
        }
    };
    Ops ops{*this, frames, n, strands_, env().prefetch_};
    StrandCounters counters;
    run_strands<StackConfig::kMaxStrands>(ops, n, strands_, counters);
    env().stats_.strand_yields += counters.yields;
    env().stats_.prefetches += ops.prefetches;
}

// Prefetching without strands: run to completion, but while frame i is
// processed the flow-table bucket of frame i+1 and the headers of frame i+2
// are already on their way.
template <bool kAsyncCopy>
void Receiver::input_prefetch_ahead(PacketRef *frames, uint16_t n)
{
    uint64_t prefetches = 0;
    for (uint16_t i = 0; i < n; i++) {
        if (i + 2 < n) {
            __builtin_prefetch(frames[i + 2].data);
            prefetches++;
        }
        FlowKey key;
        FlowKey6 key6;
        if (i + 1 < n) {
            if (frame_flow(frames[i + 1], &key)) {
                __builtin_prefetch(flows().bucket(flow_hash(key)));
                prefetches++;
            } else if (frame_flow6(frames[i + 1], &key6)) {
                __builtin_prefetch(flows6().bucket(flow_hash6(key6)));
                prefetches++;
            }
        }
        if (const uint16_t k = coalesce_run<kAsyncCopy>(frames + i, uint16_t(n - i))) {
            i = uint16_t(i + k - 1);
            continue;
        }
        PacketRef &f = frames[i];
        env().stats_.rx_bytes += f.len;
        if (!tcp_express<kAsyncCopy>(f)) input_frame(f);
    }
    env().stats_.prefetches += prefetches;
}

// Van Jacobson's header prediction taken one step further: for a frame of the
// last flow seen, every check the demux would make is done on the frame's
// bytes as loaded (no byte swapping, no per-layer calls), then the prediction
// proper. Any doubt returns false and the frame takes the full path, which
// repeats the checks and counts what it drops.
template <bool kAsyncCopy>
__attribute__((always_inline)) inline bool Receiver::tcp_express(PacketRef &f)
{
    const FlowNode *node = flows().cached();
    if (!node || !tcp_express_on<kAsyncCopy>(f, *tcp::Env::sock_of(const_cast<FlowNode *>(node)))) return false;
    flows().cache_hits++;
    return true;
}

template <bool kAsyncCopy>
__attribute__((always_inline)) inline bool Receiver::tcp_express_on(PacketRef &f, Sock &s)
{
    unsigned doff, len;
    if (!predicts(f, s, &doff, &len)) return false;
    const uint8_t *d = f.data;
    const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(d + kEthLen);
    const Tcp *th = reinterpret_cast<const Tcp *>(d + kEthLen + kIpLen);
    if (!tcp_fast_path<kAsyncCopy>(s, f, th, doff, d + kEthLen + kIpLen + doff, len - doff, be32(ip->src)))
        return false;
    env().stats_.fastpath_hits++;
    return true;
}

void Receiver::tcp_input(PacketRef &f, const Ipv4 *ip, unsigned ihl, unsigned total)
{
    const unsigned len = total - ihl;
    uint8_t *tp = f.data + kEthLen + ihl;
    if (len < kTcpLen) {
        env().stats_.drop_tcp_header++;
        env().release(f);
        return;
    }
    const Tcp *th = reinterpret_cast<const Tcp *>(tp);
    const unsigned doff = (th->doff >> 4) * 4u;
    if (doff < kTcpLen || doff > len) {
        env().stats_.drop_tcp_header++;
        env().release(f);
        return;
    }
    uint8_t *payload = tp + doff;
    const uint32_t plen = len - doff;
    const uint32_t src = be32(ip->src);
    FlowKey key{env().cfg_.ip, src, be16(th->dport), be16(th->sport)};
    FlowNode *node = flows().lookup(key);
    Sock *s = node ? tcp::Env::sock_of(node) : nullptr;
    if (s) {
        // Header prediction (seed 002): the common case costs a few compares.
        if (predicted(*s, th) && fast_options(tp, doff)) {
            // (input_frame let every asynchronous copy land: the plain path)
            if (tcp_fast_path<false>(*s, f, th, doff, payload, plen, src)) {
                env().stats_.fastpath_hits++;
                return;
            }
        }
        env().stats_.fastpath_misses++;
    }

    if (!(f.flags & kRxL4CsumGood) && !csum_ok(csum_add(pseudo_sum(src, env().cfg_.ip, kProtoTcp, uint16_t(len)), tp, len))) {
        env().stats_.drop_tcp_csum++;
        env().release(f);
        return;
    }
    TcpSegment seg;
    seg.flags = th->flags;
    if (doff > kTcpLen && !parse_tcp_options(tp + kTcpLen, doff - kTcpLen, seg.flags & kSyn, &seg.opt)) {
        env().stats_.drop_tcp_header++;
        env().release(f);
        return;
    }
    seg.src_ip = src;
    seg.dst_ip = env().cfg_.ip;
    seg.sport = key.remote_port;
    seg.dport = key.local_port;
    seg.seq = be32(th->seq);
    seg.ack = be32(th->ack);
    seg.win = be16(th->win);
    seg.payload = payload;
    seg.len = plen;
    seg.frame = &f;
    if (!tcp_dispatch(s, seg)) env().release(f);
}

// The TCP rules for a segment the fast path did not take: flag sanity, then
// by state: TIME-WAIT (tcp_data.cc), no connection (a listener,
// tcp_handshake.cc, or a RST), SYN-SENT (tcp_handshake.cc), the
// synchronized states (tcp_sync.cc).
template <bool kV6>
__attribute__((always_inline)) inline bool Receiver::tcp_dispatch(Sock *s, TcpSegment &seg)
{
    const uint8_t flags = seg.flags;
    // Flag combinations no correct TCP sends (RFC 9293 3.10.7: segments
    // without ACK other than SYN or RST are dropped in every state).
    if (((flags & kSyn) && (flags & (kFin | kRst))) || !(flags & (kAck | kSyn | kRst))) {
        env().stats_.drop_tcp_header++;
        return false;
    }
    if (s && s->state == TcpState::kTimeWait) {
        bool reopen = false;
        tcp::time_wait_input(env(), *s, seg, &reopen);
        if (!reopen) return false;
        s = nullptr; // the TIME-WAIT connection is gone; the listener takes the SYN
    }
    if (!s) {
        Sock *l;
        if constexpr (kV6) l = env().find_listener6(*seg.dst6, seg.dport, *seg.src6, seg.sport);
        else l = env().find_listener(env().cfg_.ip, seg.dport, seg.src_ip, seg.sport);
        if (l) {
            tcp::tcp_listen_input(env(), *l, seg);
        } else {
            // Sharing the address: a port of the other stack (a kernel program's).
            if (seg.frame && env().link_.pass_up(*seg.frame, Unclaimed::kTcpOtherPort)) return true;
            env().stats_.drop_tcp_no_socket++;
            if (!(flags & kRst)) tcp::send_rst_reply(env(), seg);
        }
        return false;
    }
    s->segs_in++;
    s->last_recv_ns = env().now_ns_;
    s->keep_probes = 0;
    s->probes = 0; // the peer is alive: persist probing may go on as long as it answers
    if (s->state == TcpState::kSynSent) {
        tcp::tcp_syn_sent_input(env(), *s, seg);
        return false;
    }
    // The scoreboard and the out-of-order queue empty out on the slow path
    // (an ACK past every SACKed block, a timeout): prediction again.
    if (s->flags & kFRecBusy) s->note_rec();
    bool held = false;
    tcp::tcp_sync_input(env(), *s, seg, &held);
    return held;
}

bool Receiver::tcp_rules(Sock *s, TcpSegment &seg)
{
    return seg.src6 ? tcp_dispatch<true>(s, seg) : tcp_dispatch(s, seg);
}

// ---- TCP over IPv6 -------------------------------------------------------------

bool Receiver::tcp6_input(PacketRef &f, const Ip6Rx &rx)
{
    if (!tcp6().check(f, rx)) return true; // malformed: dropped and counted
    uint8_t *tp = f.data + rx.l4_off;
    const Tcp *th = reinterpret_cast<const Tcp *>(tp);
    const unsigned doff = (th->doff >> 4) * 4u;
    FlowKey6 key;
    key.local = ip6::from(rx.ip->dst);
    key.remote = ip6::from(rx.ip->src);
    key.local_port = be16(th->dport);
    key.remote_port = be16(th->sport);
    FlowNode6 *node = flows6().lookup(key);
    Sock *s = node ? static_cast<Sock *>(node->owner) : nullptr;
    if (s) {
        // Header prediction as IPv4's (seed 002): check() summed the segment
        // over the IPv6 pseudo-header already, so the fast path is told the
        // checksum holds and copies plainly. (input_frame let every
        // asynchronous copy land: the plain path.)
        if (predicted(*s, th) && fast_options(tp, doff)) {
            f.flags |= kRxL4CsumGood;
            if (tcp_fast_path<false>(*s, f, th, doff, tp + doff, rx.l4_len - doff, 0)) {
                env().stats_.fastpath_hits++;
                return true;
            }
        }
        env().stats_.fastpath_misses++;
    }
    TcpSegment seg;
    seg.flags = th->flags;
    if (doff > kTcpLen && !parse_tcp_options(tp + kTcpLen, doff - kTcpLen, seg.flags & kSyn, &seg.opt)) {
        env().stats_.drop_tcp_header++;
        env().release(f);
        return true;
    }
    // For no connection and no listener: the reset (or, sharing, the kernel's).
    if (!s && !env().find_listener6(key.local, key.local_port, key.remote, key.remote_port))
        return tcp6().no_socket(f, rx, env().now_ns_);
    seg.src6 = &key.remote;
    seg.dst6 = &key.local;
    seg.sport = key.remote_port;
    seg.dport = key.local_port;
    seg.seq = be32(th->seq);
    seg.ack = be32(th->ack);
    seg.win = be16(th->win);
    seg.payload = tp + doff;
    seg.len = rx.l4_len - doff;
    seg.frame = &f;
    if (!tcp_dispatch<true>(s, seg)) env().release(f);
    return true;
}

// What Ipv6Layer::input, Tcp6::check and tcp6_input would find for the most
// common frame, checked on its bytes: version 6, TCP right after the IPv6
// header, lengths inside the frame, a connection for its 4-tuple (so the
// destination is the connection's own address and the source not
// multicast), the checksum (where the NIC did not verify it), then header
// prediction. Anything else, or any doubt, is the full path's, which checks
// again and counts what it drops.
bool Receiver::tcp6_express(PacketRef &f) { return tcp6_express_with<false>(f, nullptr); }

bool Receiver::express6_cached(PacketRef &f)
{
    const FlowNode6 *c = flows6().cached();
    if (!c) return false;
    FlowKey6 key;
    if (!frame_flow6(f, &key) || !(c->key == key)) return false;
    return tcp6_express(f); // its lookup is the cache's hit
}

template <bool kFound>
__attribute__((always_inline)) inline bool Receiver::tcp6_express_with(PacketRef &f, FlowNode6 *found)
{
    const uint8_t *d = f.data;
    if (f.len < kEthLen + kIp6Len + kTcpLen) return false;
    const Ipv6 *ip = reinterpret_cast<const Ipv6 *>(d + kEthLen);
    const unsigned plen = be16(ip->payload_len);
    if ((d[kEthLen] >> 4) != 6 || ip->next != kProtoTcp || plen < kTcpLen || plen > f.len - kEthLen - kIp6Len)
        return false;
    uint8_t *tp = f.data + kEthLen + kIp6Len;
    const Tcp *th = reinterpret_cast<const Tcp *>(tp);
    const unsigned doff = (th->doff >> 4) * 4u;
    if (doff > plen || !fast_options(tp, doff)) return false;
    FlowKey6 key;
    std::memcpy(key.local.b, ip->dst, 16);
    std::memcpy(key.remote.b, ip->src, 16);
    key.local_port = be16(th->dport);
    key.remote_port = be16(th->sport);
    FlowNode6 *node;
    if constexpr (kFound) {
        // An older frame of the burst may have closed the connection, or its
        // block may hold another since: the table decides then.
        if (found->linked && found->key == key) {
            // What the last-flow cache and the table would have counted.
            if (found == flows6().cached()) {
                flows6().cache_hits++;
            } else {
                flows6().cache_misses++;
                flows6().remember(found);
            }
            node = found;
        } else {
            node = flows6().lookup(key);
        }
    } else {
        node = flows6().lookup(key);
    }
    if (!node) return false;
    Sock &s = *static_cast<Sock *>(node->owner);
    if (!predicted(s, th)) return false;
    if (!(f.flags & kRxL4CsumGood)) {
        if (!tcp6::csum_good(ip, tp, plen)) return false; // the full path drops and counts it
        f.flags |= kRxL4CsumGood;
    }
    // (input_frame let every asynchronous copy land: the plain path)
    if (!tcp_fast_path<false>(s, f, th, doff, tp + doff, plen - doff, 0)) return false;
    env().stats_.ip6_in++; // as Ipv6Layer::input would have counted it
    env().stats_.fastpath_hits++;
    return true;
}

// What input_frame() does for a frame to our MAC with EtherType 86dd, the
// express path's lookup replaced by the strand's find.
void Receiver::input_frame6(PacketRef &f, FlowNode6 *found)
{
    if (copies_in_flight()) reap_copies(true);
    if (tcp6_express_with<true>(f, found)) return;
    ip6().input(f, env().now_ns_);
}

void Receiver::tcp6_error(const Icmp6Error &err)
{
    if (err.proto != kProtoTcp) return;
    FlowKey6 key;
    key.local = err.local;
    key.remote = err.remote;
    key.local_port = err.local_port;
    key.remote_port = err.remote_port;
    if (FlowNode6 *n = flows6().lookup(key)) tcp::icmp6_error(env(), *static_cast<Sock *>(n->owner), err.seq, err.type, err.code, err.mtu);
}

void Receiver::tcp_icmp_error(const IcmpTcpError &err)
{
    FlowNode *n = flows().lookup(FlowKey{env().cfg_.ip, err.remote_ip, err.local_port, err.remote_port});
    if (n) tcp::icmp_error(env(), *tcp::Env::sock_of(n), err);
}

} // namespace mars::rx
