// rx/receiver.h: rx::Receiver, the receive path of one stack, and nothing
// else: frames in (Stack::input) to payload in the receive rings, or to the
// TCP rules on a miss.
//
//   tcp_in.cc       receive(): the burst loops (run to completion, strands,
//                   prefetching), the express path and header prediction,
//                   the Ethernet demux for everything else, TCP input
//                   (validation, lookup), the fast path, and the dispatch by
//                   state into the TCP rules (tcp/input.h)
//   fast_path.h     the fast path on its own (predicts(), tcp_fast_path(),
//                   fast_ack()): what it takes, what it hands on; reads
//                   tcp::Hot only (two cache lines) on the data path
//   frame_bytes.h   a frame's fixed fields as loaded from the wire
//   rx_coalesce.cc  receive coalescing (software GRO) and its gathering
//   rx_coalesce6.cc the same over IPv6
//   copy.cc         asynchronous receive copies (mars/copy.h) and their
//                   in-order completion
//   strands.h       the strand scheduler the burst loop runs on
//
// What it reads of a connection: the hot part (tcp::Hot: sequence state,
// ring positions, flags, events, counters; two cache lines) for in-order
// data, and for a pure ACK the sender's part after it (fast_path.h);
// anything else is the TCP rules', which it calls on a miss.
//
// What it may touch of the stack, through three accessors (rx/host.h) and
// nothing else:
//   env()    the tcp::Env (clock, counters, config, the layers below TCP for
//            the demux, events, the output list, the connection blocks, a
//            listener for a SYN) -- and the TCP rules take it
//   flows()  the stack's flow table (lookup, the last-flow cache)
//   ip6()    the IPv6 layer (the demux hands it IPv6 frames)
// It implements the Stack interface's receive entry (input()) and is
// StackImpl's first base, so its `this` is the stack's: the accessors cost
// nothing and the receive path runs on one base pointer, as it did as
// methods of the stack (a Receiver beside the stack, at another offset,
// kept two pointers live in the burst loop: 4 instructions more per
// segment). StackImpl implements the rest of the Stack interface and calls
// the Receiver for copies to land before it touches a ring, and to set or
// reset its state.
#pragma once

#include "base/flow_table.h"
#include "ip/ipv4.h"
#include "ip/ipv6.h"
#include "tcp/conn.h"
#include "tcp/tcp_segment.h"

#include <mars/copy.h>
#include <mars/stack.h>

#include <cstdint>
#include <vector>

namespace mars {

class StackImpl;
class Ipv6Layer;
class FlowTable6;
struct StackAccess;
namespace tcp6 {
class Tcp6;
}
namespace tcp {
struct Env;
}

namespace rx {

class Receiver : public Stack, protected Ipv4Upper {
  public:
    Receiver(const Receiver &) = delete;
    Receiver &operator=(const Receiver &) = delete;

    // The receive entry (Stack::input, tcp_in.cc): the burst, then the
    // release of consumed frames, the output it made due, the transmit burst.
    void input(PacketRef *frames, uint16_t n, uint64_t now_ns) override;

  protected:
    // ---- for the stack (StackImpl, and StackAccess) ---------------------------
    explicit Receiver(PacketIo &io) : rx_io_(io) {}
    // Setup (StackImpl::init, from the config) and reset() (the state init()
    // leaves, on the same memory); the receive pipeline and copy engine as
    // set between bursts (Stack::set_receive_pipeline / set_copy_engine).
    void rx_setup(const StackConfig &c);
    void rx_clear();
    void set_strands(uint32_t strands) { strands_ = strands; }
    void use_copy_engine(CopyEngine *engine, uint32_t threshold);
    // Rings the doorbell, applies completions in order (bytes visible,
    // readable event, frame released). wait: until nothing is in flight
    // (before the slow path, a close, or the rings going back), with a
    // bound after which the core redoes what the engine did not finish.
    void reap_copies(bool wait);
    bool copies_in_flight() const { return pending_head_ != pending_tail_ || doorbell_due_; }
    // Consumed received frames go back to the owner in one call per burst.
    __attribute__((always_inline)) void release_rx(PacketRef &f)
    {
        rx_done_[rx_done_n_++] = f;
        if (rx_done_n_ == kRxDoneMax) flush_rx_done();
    }
    // A run of consumed frames (a coalesced group) in one call.
    void release_rx_run(PacketRef *frames, uint16_t n) { rx_io_.release(frames, n); }
    void flush_rx_done()
    {
        if (rx_done_n_) rx_io_.release(rx_done_, rx_done_n_);
        rx_done_n_ = 0;
    }
    // The dispatch by state out of line, for a segment that did not come
    // from a frame (StackAccess::segment_input).
    bool tcp_rules(Sock *s, TcpSegment &seg);
    // TCP over IPv6 (issue 31; Ipv6Upper's, through StackImpl): a segment
    // Ipv6Layer validated, checked by tcp6::Tcp6 (header, checksum), looked
    // up in FlowTable6, header prediction (the fast path, as IPv4's), else
    // the same TCP rules as IPv4's. True: taken; false: nobody holds its
    // port and the port is shared (the layer passes it on).
    bool tcp6_input(PacketRef &f, const Ip6Rx &rx);
    // The express path over IPv6 (input_frame, before Ipv6Layer): a frame
    // with no extension header, of an IPv6 connection, that header
    // prediction takes. False: the full path's (nothing consumed).
    bool tcp6_express(PacketRef &f);
    // The pipelines' run-to-completion head for IPv6 (input_burst): a TCP/IPv6
    // frame of the connection in FlowTable6's last-flow cache (no memory wait
    // to hide) through tcp6_express(); false for any other frame, which the
    // pipeline then takes. One load and a branch while no IPv6 flow is cached.
    bool express6_cached(PacketRef &f);
    // An ICMPv6 error quoting one of our IPv6 segments, for its connection.
    void tcp6_error(const Icmp6Error &e);

  private:
    friend struct mars::StackAccess;

    // ---- the stack, as far as the receive path may see it (rx/host.h) ----
    __attribute__((always_inline)) inline tcp::Env &env();
    __attribute__((always_inline)) inline const tcp::Env &env() const;
    __attribute__((always_inline)) inline FlowTable &flows();
    __attribute__((always_inline)) inline const FlowTable &flows() const;
    __attribute__((always_inline)) inline Ipv6Layer &ip6();
    __attribute__((always_inline)) inline FlowTable6 &flows6();
    __attribute__((always_inline)) inline tcp6::Tcp6 &tcp6();

    // ---- tcp_in.cc ----------------------------------------------------------
    // kAsyncCopy (here and below): in-order payloads go to the copy engine
    // (StackConfig::copy_engine); false is the plain path, which the full
    // path also takes once every copy has landed.
    // input()'s per-frame work: run to completion, or with several frames in
    // flight (strands.h), or with prefetching.
    template <bool kAsyncCopy> __attribute__((always_inline)) void input_burst(PacketRef *frames, uint16_t n);
    template <bool kAsyncCopy> void input_strands(PacketRef *frames, uint16_t n);
    template <bool kAsyncCopy> void input_prefetch_ahead(PacketRef *frames, uint16_t n);
    // The Ethernet demux (everything the express path did not take): IPv4
    // to the Env's Ipv4Layer, which hands TCP back (tcp_input), ARP to its
    // ArpResolver, IPv6 to ip6() (after tcp6_express).
    void input_frame(PacketRef &f);
    // Header prediction straight from the frame for the last flow seen;
    // false: not predicted, the frame goes through input_frame().
    template <bool kAsyncCopy> __attribute__((always_inline)) bool tcp_express(PacketRef &f);
    // The express checks and fast path for a frame of connection s (found by
    // the last-flow cache or by a strand's lookup).
    template <bool kAsyncCopy> __attribute__((always_inline)) bool tcp_express_on(PacketRef &f, Sock &s);
    // The express path's checks and header prediction, without acting on
    // the frame (fast_path.h). *doff: the TCP header length, *len: the
    // TCP segment length.
    __attribute__((always_inline)) bool predicts(const PacketRef &f, const tcp::Hot &h, unsigned *doff,
                                                 unsigned *len) const;
    // The 4-tuple hash of a TCP/IPv4 frame without IP options; false for any
    // other frame (the demux decides what it is).
    bool frame_flow(const PacketRef &f, FlowKey *key) const;
    void prefetch_conn(const Sock &s);
    // The same for the strands' IPv6 lookup: the 4-tuple of a TCP/IPv6 frame
    // to our MAC with no extension header; false for any other frame.
    bool frame_flow6(const PacketRef &f, FlowKey6 *key) const;
    void prefetch_conn6(const FlowNode6 *node);
    // input_frame() for a frame frame_flow6() took whose connection a
    // strand found (found: as the chain walk left it; re-checked here).
    void input_frame6(PacketRef &f, FlowNode6 *found);
    // tcp6_express() with the connection found by a strand (kFound) or by
    // the table's lookup.
    template <bool kFound> __attribute__((always_inline)) bool tcp6_express_with(PacketRef &f, FlowNode6 *found);
    // Ipv4Upper: TCP segments, and ICMP errors about our segments.
    void tcp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) override;
    void tcp_icmp_error(const IcmpTcpError &e) override;
    // ---- fast_path.h: the fast path (its header says what it takes, what it
    // reads -- tcp::Hot -- and what it hands on) --------------------------------
    template <bool kAsyncCopy>
    __attribute__((always_inline)) bool tcp_fast_path(tcp::Hot &h, PacketRef &f, const wire::Tcp *th, unsigned doff,
                                                      const uint8_t *payload, uint32_t len, uint32_t src_ip);
    __attribute__((always_inline)) bool fast_ack(Sock &s, PacketRef &f, const wire::Tcp *th, unsigned doff,
                                                 uint32_t tsval, uint32_t src_ip);
    __attribute__((always_inline)) void fast_ack_part(Sock &s, uint32_t ack);
    // The slow path: a segment the fast path did not take, for connection s
    // (nullptr: none; a listener may take it), into the TCP rules by state.
    // Returns true when seg.frame was kept (the out-of-order queue holds it).
    // kV6: a segment over IPv6 (seg.src6 set): IPv6 listeners, the IPv6 reset.
    template <bool kV6 = false> __attribute__((always_inline)) bool tcp_dispatch(Sock *s, TcpSegment &seg);

    // ---- rx_coalesce.cc: receive coalescing (software GRO) ----------------
    // input_run() when receive coalescing applies, else 0.
    template <bool kAsyncCopy> __attribute__((always_inline)) uint16_t coalesce_run(PacketRef *frames, uint16_t n);
    // A group's payload is at most kGroMaxBytes.
    static constexpr uint32_t kGroMaxBytes = 64 * 1024;
    // Takes frames[0] and the frames after it that continue it (same
    // connection, next sequence number, same ACK, window and options) as one
    // group through the fast path. Returns how many frames it consumed; 0:
    // none, frames[0] takes the per-frame path.
    uint16_t input_run(PacketRef *frames, uint16_t n);
    // When input_run() refused frames[0] because frames of other
    // connections follow it: moves the segments of its connection that come
    // after those next to it (bounded), so it may reorder frames[] across
    // connections, never within one. True: input_run() may try again.
    // (Called only below kGatherMissesMax.)
    __attribute__((noinline)) bool gather_run(PacketRef *frames, uint16_t n);
    // ---- rx_coalesce6.cc: the same over IPv6 (coalesce_run() hands it a
    // burst input_run() refused whose first frame's EtherType is 86dd): TCP
    // right after the IPv6 header, a connection of FlowTable6; interleaved
    // connections gathered as IPv4's (gather_misses_ bounds both). Returns
    // what input_run() returns.
    uint16_t input_run6(PacketRef *frames, uint16_t n);
    template <bool kTs> uint16_t input_run6_as(PacketRef *frames, uint16_t n);
    // Looks by gather_run() that moved nothing, in this burst; at
    // kGatherMissesMax, no more looking.
    static constexpr uint8_t kGatherMissesMax = 2;
    uint8_t gather_misses_ = 0;

    // ---- copy.cc: asynchronous receive copies (mars/copy.h) --------------
    // Takes an in-order payload for the copy engine (or, behind earlier
    // copies of the socket still in flight, copies it now but keeps it
    // invisible until they complete). False: not taken, copy it at once.
    bool rx_copy(Sock &s, PacketRef &f, const uint8_t *payload, uint32_t len);
    void count_fallback(CopyFallback why);

    // received frames consumed by the fast path, released once per burst
    // to their owner
    PacketIo &rx_io_;
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

    // receive pipeline (StackConfig::strands; prefetch is the Env's)
    uint32_t strands_ = 1;
};

} // namespace rx
} // namespace mars
