// stack_impl.h: the inside of one MARS stack instance.
//
// StackImpl is the stack's own: ids and the socket table, the flow table,
// listeners, events (the lists the Env raises into), the Stack interface
// (stack.cc, socket_api.cc), and still the receive path (rx/: input(), the
// express path and header prediction, coalescing, strands, receive copies,
// the dispatch by state). Its parts (mars/README.md, "Module layout"):
//   tcp/env.h   tcp::Env, StackImpl's base: the narrow environment of the TCP
//               rules (clock, transmit layers, events, output list, timers,
//               rings, counters, a few socket-table services in stack.cc)
//   tcp/*.h     the TCP rules as functions of a tcp::Conn and a tcp::Env:
//               input.h, sender.h, recovery.h, timers.h, rcv_tune.h
//   ip/         the layers below TCP; base/ building blocks
//   udp/        UDP (sockets, datagram rings, multicast, IGMP): its own
//               component (udp_), reached through Stack::udp()
// Tests look inside only through testing/stack_access.h (StackAccess).
#pragma once

#include "tcp/conn.h"
#include "tcp/conn_table.h"
#include "tcp/env.h"
#include "tcp/input.h"
#include "tcp/rcv_tune.h"
#include "tcp/recovery.h"
#include "tcp/sender.h"
#include "tcp/timers.h"
#include "tcp/rack_rules.h"
#include "tcp/cc.h"
#include "ip/arp.h"
#include "base/checksum.h"
#include "base/flow_table.h"
#include "ip/ipv4.h"
#include "ip/ipv6.h"
#include "ip/nd.h"
#include "ip/link.h"
#include "tcp/ooo.h"
#include "tcp/rack.h"
#include "ip/route.h"
#include "tcp/sack.h"
#include "base/secret.h"
#include "tcp/tcp_options.h"
#include "tcp/tcp_segment.h"
#include "base/timer_wheel.h"
#include "base/wire.h"
#include "udp/udp.h"

#include <mars/copy.h>
#include <mars/stack.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

namespace mars {

class StackImpl final : public Stack, private Ipv4Upper, private Ipv6Upper, private tcp::Env {
  public:
    StackImpl(const StackConfig &config, PacketIo &io, BufferProvider &buffers);
    ~StackImpl() override;
    bool init(std::string *error);
    void reset() override;

    // Stack interface
    void input(PacketRef *frames, uint16_t n, uint64_t now_ns) override;
    void poll(uint64_t now_ns) override;
    uint64_t next_deadline_ns() const override;
    uint16_t events(SockEvent *out, uint16_t max) override;
    void announce(uint64_t now_ns) override;
    int64_t open(uint64_t user) override;
    int bind(SockId s, Endpoint local) override;
    int listen(SockId s, int backlog) override;
    int64_t accept(SockId listener, uint64_t user) override;
    int connect(SockId s, Endpoint remote, uint64_t now_ns) override;
    int shutdown(SockId s, bool rd, bool wr) override;
    int close(SockId s) override;
    int abort(SockId s) override;
    int set_option(SockId s, SockOpt opt, int64_t value) override;
    int get_option(SockId s, SockOpt opt, int64_t *value) const override;
    int info(SockId s, SockInfo *out) const override;
    void set_user(SockId s, uint64_t user) override;
    int rx_view(SockId s, RingSpan *out) const override;
    int rx_consume(SockId s, uint32_t n) override;
    int tx_view(SockId s, RingSpan *out) const override;
    int tx_commit(SockId s, uint32_t n, bool more) override;
    void ring_levels(SockId s, RingLevels *out) const override;
    int64_t send(SockId s, const void *data, size_t len) override;
    int64_t recv(SockId s, void *data, size_t len) override;
    const StackStats &stats() const override { return stats_; }
    UdpSockets &udp() override { return udp_; } // the UDP component (udp/udp.h)
    void for_each_socket(void (*fn)(SockId, const SockInfo &, uint64_t, void *), void *arg) const override;
    int set_receive_pipeline(uint32_t strands, bool prefetch) override;
    void set_copy_engine(CopyEngine *engine, uint32_t threshold) override;

  private:
    // Tests and benchmarks look inside through testing/stack_access.h only.
    friend struct StackAccess;
    friend struct tcp::Env; // its stack services (stack.cc) are the stack's

    // Everything below is the stack's own: the layers (link_, arp_, router_,
    // ip_) are reached through their types' interfaces, the TCP code's state
    // through these members, and nothing outside the stack sees any of it.

    // ---- tcp_in.cc: the Ethernet demux (everything the express path did not
    // take): IPv4 to ip_ (ipv4.cc), which hands TCP back (tcp_input), ARP to
    // arp_ (arp.cc), IPv6 to ip6_ (ipv6.cc; ND to nd_).
    void input_frame(PacketRef &f);

    // ---- tcp_in.cc -------------------------------------------------------
    // Header prediction straight from the frame for the last flow seen;
    // false: not predicted, the frame goes through input_frame().
    // kAsyncCopy (here and below): in-order payloads go to the copy engine
    // (StackConfig::copy_engine); false is the plain path, which the full
    // path also takes once every copy has landed.
    template <bool kAsyncCopy> __attribute__((always_inline)) bool tcp_express(PacketRef &f);
    // The express checks and fast path for a frame of connection s (found by
    // the last-flow cache or by a strand's lookup).
    template <bool kAsyncCopy> __attribute__((always_inline)) bool tcp_express_on(PacketRef &f, Sock &s);
    // The express path's checks and header prediction, without acting on
    // the frame (frame_bytes.h).
    // *doff: the TCP header length, *len: the TCP segment length.
    __attribute__((always_inline)) bool predicts(const PacketRef &f, const Sock &s, unsigned *doff,
                                                 unsigned *len) const;
    // input_run() when receive coalescing applies, else 0.
    template <bool kAsyncCopy> __attribute__((always_inline)) uint16_t coalesce_run(PacketRef *frames, uint16_t n);
    // input()'s per-frame work: run to completion, or with several frames in
    // flight (strands.h), or with prefetching.
    template <bool kAsyncCopy> __attribute__((always_inline)) void input_burst(PacketRef *frames, uint16_t n);
    template <bool kAsyncCopy> void input_strands(PacketRef *frames, uint16_t n);
    template <bool kAsyncCopy> void input_prefetch_ahead(PacketRef *frames, uint16_t n);
    // The 4-tuple hash of a TCP/IPv4 frame without IP options; false for any
    // other frame (the demux decides what it is).
    bool frame_flow(const PacketRef &f, FlowKey *key) const;
    void prefetch_conn(const Sock &s);
    void link_flow(Sock &s, const FlowKey &key);
    // Consumed received frames go back to the owner in one call per burst.
    __attribute__((always_inline)) void release_rx(PacketRef &f)
    {
        rx_done_[rx_done_n_++] = f;
        if (rx_done_n_ == kRxDoneMax) flush_rx_done();
    }
    void flush_rx_done()
    {
        if (rx_done_n_) io_.release(rx_done_, rx_done_n_);
        rx_done_n_ = 0;
    }
    // Ipv4Upper: TCP segments and ICMP errors about our segments (tcp_sync.cc).
    void tcp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) override;
    void tcp_icmp_error(const IcmpTcpError &e) override;
    template <bool kAsyncCopy>
    __attribute__((always_inline)) bool tcp_fast_path(Sock &s, PacketRef &f, const wire::Tcp *th, unsigned doff, const uint8_t *payload,
                       uint32_t len, uint32_t src_ip);
    // ---- tcp_handshake.cc --------------------------------------------------
    // The slow path: a segment the fast path did not take, for connection s
    // (nullptr: none; a listener may take it). Returns true when
    // seg.frame was kept (the out-of-order queue holds it).
    __attribute__((always_inline)) bool tcp_dispatch(Sock *s, TcpSegment &seg);
    // tcp_dispatch() out of line, for a segment that did not come from a
    // frame (StackAccess::segment_input).
    bool tcp_rules(Sock *s, TcpSegment &seg);
    // ---- copy.cc: asynchronous receive copies (mars/copy.h) --------------
    // Takes an in-order payload for the copy engine (or, behind earlier
    // copies of the socket still in flight, copies it now but keeps it
    // invisible until they complete). False: not taken, copy it at once.
    bool rx_copy(Sock &s, PacketRef &f, const uint8_t *payload, uint32_t len);
    // Rings the doorbell, applies completions in order (bytes visible,
    // readable event, frame released). wait: until nothing is in flight
    // (before the slow path, a close, or the rings going back), with a
    // bound after which the core redoes what the engine did not finish.
    void reap_copies(bool wait);
    void count_fallback(CopyFallback why);
    bool copies_in_flight() const { return pending_head_ != pending_tail_ || doorbell_due_; }
    // ---- rx_coalesce.cc: receive coalescing (software GRO) ----------------
    // A group's payload is at most kGroMaxBytes.
    static constexpr uint32_t kGroMaxBytes = 64 * 1024;
    // Takes frames[0] and the frames after it that continue it (same
    // connection, next sequence number, same ACK, window and options) as one
    // group through the fast path. Returns how many frames it consumed; 0:
    // none, frames[0] takes the per-frame path.
    uint16_t input_run(PacketRef *frames, uint16_t n);
    // When input_run() refused frames[0] because frames of other
    // connections follow it: moves the segments of its connection that come
    // after those next to it (bounded, rx_coalesce.cc), so it may reorder
    // frames[] across connections, never within one. True: input_run()
    // may try again. (Called only below kGatherMissesMax.)
    __attribute__((noinline)) bool gather_run(PacketRef *frames, uint16_t n);
    // Looks by gather_run() that moved nothing, in this burst; at
    // kGatherMissesMax, no more looking.
    static constexpr uint8_t kGatherMissesMax = 2;
    uint8_t gather_misses_ = 0;

    // Transmit by reference: sockets with frames the port still reads, and
    // ring memory (and socket slots) held back for them until it has let go.
    struct TxDrain {
        uint32_t sock;
        uint64_t user;
        RingMemory mem;
        bool has_mem, slot;
    };
    std::vector<TxDrain> tx_drain_;
    void poll_tx_refs();
    void release_tx_drain();



    // ---- stack.cc (abort_children: socket_api.cc; conn_init: tcp_out.cc) ---
    Sock *lookup_id(SockId id) const;
    SockId id_of(const Sock &s) const { return (s.gen << kIndexBits) | s.index; }
    Sock *sock_alloc(uint64_t user);
    void sock_free(Sock &s);
    // The connection is over (reset, error, or closed): unhook it, tell the
    // application, free what can be freed.
    void conn_drop(Sock &s, int err, uint32_t ev);
    void conn_closed(Sock &s);
    void detach(Sock &s);
    // A user-closed connection entering TIME-WAIT: hand the id and the rings
    // back now (kEvClosed); the stack keeps the TIME-WAIT state to itself.
    void release_user(Sock &s);
    bool attach_rings(Sock &s, uint64_t user);
    void release_rings(Sock &s);
    void unlink_flow(Sock &s);
    void quiesce(Sock &s);
    int pick_port(Sock &s, uint32_t rip, uint16_t rport);
    bool port_in_use(uint32_t lip, uint16_t port, const Sock *except) const;
    // The listener a SYN for (lip, lport) from (rip, rport) goes to: the exact
    // address before the wildcard; within a SO_REUSEPORT group, the member
    // a keyed hash of the 4-tuple picks (as Linux spreads connections).
    Sock *find_listener(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport);
    bool same_owner(const Sock &a, const Sock &b) const;
    void abort_children(Sock &l);
    // Connects waiting on a neighbour ARP gave up on fail (EHOSTUNREACH).
    void fail_unreachable();
    void take_local(); // frames to our own address, back in (ip/local_loop.h)
    // Gives every buffer back (the destructor, and reset()).
    void release_buffers();
    // The state init() sets up once its tables are allocated (and reset()
    // sets up again on the same tables).
    void start_state();

    static constexpr uint32_t kIndexBits = 22;
    static constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;


    tcp::ConnTable socks_; // the connection blocks, made as they are first used
    FlowTable flows_;
    std::vector<uint32_t> listeners_; // indices of listening sockets (few)

    std::vector<SockEvent> closed_events_; // kEvClosed (the id is gone once it is queued)
    size_t event_pos_ = 0;

    // received frames consumed by the fast path, released once per burst
    static constexpr uint16_t kRxDoneMax = 64;
    PacketRef rx_done_[kRxDoneMax];
    uint16_t rx_done_n_ = 0;
    // our MAC and IPv4 address as they appear in frames
    uint32_t wire_mac_lo_ = 0, wire_ip_ = 0;
    uint16_t wire_mac_hi_ = 0;

    // asynchronous copies (StackConfig::copy_engine), oldest first, in a
    // ring indexed by marker (the submission sequence number)
    struct PendingCopy {
        PacketRef frame;       // released when the copy completes
        const uint8_t *src;    // the payload in frame, for a redo by the core
        uint32_t sock, gen;    // whose ring
        uint32_t off, len;     // where in the ring (off: ring offset)
        bool done, ok;
        CopyFallback redo_why; // when !ok: the reason the core redoes it
    };
    static constexpr uint32_t kMaxPendingCopies = 1024;
    CopyEngine *copy_ = nullptr;
    uint32_t copy_threshold_ = 0;
    std::vector<PendingCopy> pending_;
    uint64_t pending_head_ = 0, pending_tail_ = 0; // markers
    bool doorbell_due_ = false;

    // receive pipeline (StackConfig::strands; prefetch_ is the Env's)
    uint32_t strands_ = 1;

    uint16_t next_ephemeral_ = 0;

    // ---- IPv6 (ip/ipv6.h, ip/nd.h; issue 31): beside the Env's IPv4 layers.
    // No upper protocol over IPv6 yet: nothing is taken (sharing, the kernel
    // gets it; alone, ICMPv6 unreachable) and errors have no socket to reach.
    bool ip6_input(PacketRef &, const Ip6Rx &) override { return false; }
    void ip6_error(const Icmp6Error &) override {}
    NeighborDiscovery nd_{cfg_, link_, stats_};
    Ipv6Layer ip6_{cfg_, link_, nd_, stats_, *this};
    // UDP: its own component (sockets, ports, multicast, IGMP); Ipv4Layer
    // hands it UDP and IGMP, events() drains its events after TCP's.
    udp::UdpLayer udp_;
};

} // namespace mars
