// stack_impl.h: the inside of one MARS stack instance.
//
// The stack's own: ids and the socket table, the flow table, listeners,
// events, the timer wheel, the layer objects (ip/: Link, ArpResolver,
// Router, Ipv4Layer). Its methods are still defined across the folders
// (mars/README.md, "Module layout", has the map):
//   stack.cc, socket_api.cc  creation, the socket table, events, poll();
//                            the socket API and the data API on the rings
//   rx/    input() and the receive path: express path, header prediction,
//          coalescing, strands, receive copies
//   tcp/   the connection (conn.h), the rules by state (handshake, sync,
//          data, FIN, TIME-WAIT), output and runs/TSO, timers, RACK-TLP/PRR,
//          receive autotuning
//   ip/    the layers below TCP; base/ building blocks with their own tests
// Tests look inside only through testing/stack_access.h (StackAccess).
#pragma once

#include "tcp/conn.h"
#include "tcp/env.h"
#include "tcp/rack_rules.h"
#include "tcp/cc.h"
#include "ip/arp.h"
#include "base/checksum.h"
#include "base/flow_table.h"
#include "ip/ipv4.h"
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

#include <mars/copy.h>
#include <mars/stack.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

namespace mars {

class StackImpl final : public Stack, private Ipv4Upper, private tcp::Env {
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
    // arp_ (arp.cc).
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
    void prefetch_output(const Sock &s);
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
    void tcp_listen_input(Sock &l, const TcpSegment &seg);
    void tcp_syn_sent_input(Sock &s, const TcpSegment &seg);
    // ---- tcp_sync.cc -------------------------------------------------------
    void tcp_sync_input(Sock &s, const TcpSegment &seg, bool *held);
    // len: the payload left after trimming to the window.
    bool tcp_ack(Sock &s, const TcpSegment &seg, uint32_t len);
    // RFC 5961's challenge ACK, throttled per connection.
    void challenge_ack(Sock &s);
    void resend_syn_ack(Sock &s);
    // ---- tcp_data.cc -------------------------------------------------------
    // frame: where payload lies (kept when out of order); may be null when len is 0.
    void tcp_data(Sock &s, PacketRef *frame, uint32_t seq, uint8_t *payload, uint32_t len, bool fin, bool *held);
    void tcp_fin(Sock &s);
    uint32_t deliver(Sock &s, const uint8_t *p, uint32_t n);
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
    void time_wait_input(Sock &s, const TcpSegment &seg, bool *reopen);                     // tcp_data.cc
    void rtt_sample(Sock &s, uint64_t rtt_ns);                                                 // tcp_in.cc
    void established(Sock &s);                                                                 // tcp_handshake.cc
    void negotiate(Sock &s, const TcpOptions &opt);                                            // tcp_handshake.cc
    void adopt_child(Sock &l, Sock &c, const FlowKey &key);                                    // tcp_handshake.cc

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

    // ---- tcp_out.cc ------------------------------------------------------
    void tcp_output(Sock &s);
    bool send_segment(Sock &s, uint32_t seq, uint32_t len, uint8_t flags, bool rtx);
    // A run of n full new segments from snd_nxt built in one pass (tx_run.cc);
    // returns how many went out.
    static constexpr uint32_t kRunMax = 64;
    void new_data_sent(Sock &s, uint32_t len, bool fin, uint32_t data_end);
    uint32_t send_run(Sock &s, uint32_t n, uint8_t last_flags);
    // How many full segments one TSO frame may carry (0: no TSO here).
    uint32_t tso_per_frame(const Sock &s) const;
    // The start every software-segmented run shares (tx_run.cc).
    uint32_t run_start(Sock &s, uint32_t n, PacketRef *fr, uint8_t *h, unsigned *hdr_len, uint32_t *pseudo);
    unsigned run_header(Sock &s, uint8_t *h, uint32_t payload);
    void run_fill(Sock &s, PacketRef &fr, const uint8_t *h, unsigned hdr_len, uint32_t seq, uint32_t len,
                  uint32_t pseudo);
    uint32_t send_tso(Sock &s, uint32_t n, uint8_t last_flags, uint32_t per_frame);
    uint32_t send_run_sw(Sock &s, uint32_t seq, uint32_t n, uint8_t last_flags);
    // A run of n full segments from seq that were sent before (SACK
    // recovery's lost bytes, go-back-N after a timeout), built in one pass
    // as send_run_sw() builds new data, with send_segment(rtx)'s bookkeeping
    // per segment. log_room: recovery's rule that each retransmission finds
    // room in RACK's log first (checked before every segment but the first,
    // which the caller checked). Returns how many went out.
    // Where the port offers TSO, the run leaves as TSO frames (the segments
    // the port cuts from them are those one by one would send).
    uint32_t send_rtx_run(Sock &s, uint32_t seq, uint32_t n, uint8_t last_flags, bool log_room);
    // The pieces of send_rtx_run: the run's segments from the done-th on as
    // TSO frames, or segmented here; each returns how many more went out
    // (*stop: RACK's log had no room, the run ends there).
    uint32_t send_rtx_tso(Sock &s, uint32_t seq, uint32_t n, uint8_t last_flags, bool log_room, uint32_t per_frame,
                          bool *stop);
    uint32_t send_rtx_sw(Sock &s, uint32_t seq, uint32_t n, uint32_t done, uint8_t last_flags, bool log_room);
    bool rtx_log_room(Sock &s, uint32_t i, bool log_room);
    void rtx_run_sent(Sock &s, uint32_t sent);
    // How many full segments from seq a retransmission run may take (0: send
    // one by one): runs on, no D-SACK waiting, the template's MAC current.
    uint32_t rtx_run_len(const Sock &s, uint32_t seq, uint32_t end, uint32_t budget) const;
    bool run_fill_ref(Sock &s, PacketRef &fr, const uint8_t *h, unsigned hdr_len, uint32_t seq, uint32_t len,
                      uint32_t pseudo);
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
    void run_sent(Sock &s, uint32_t seq, uint32_t sent);
    // A pure ACK carries the highest sequence number sent (RFC 9293's SND.NXT;
    // our snd_nxt goes back after a timeout, and an older sequence number
    // would make the peer drop the ACK as unacceptable).
    void send_ack(Sock &s) { send_segment(s, s.snd_max, 0, wire::kAck, false); }
    void send_rst_reply(const TcpSegment &seg);
    void send_raw(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport, uint32_t seq, uint32_t ack,
                  uint8_t flags, uint16_t win, const uint8_t *opts, unsigned opt_len);
    void build_template(Sock &s);
    uint16_t window_to_advertise(Sock &s);
    uint32_t rcv_window(const Sock &s) const;
    // ---- rcv_tune.cc: receive-buffer autotuning -------------------------
    bool autotune(const Sock &s) const
    {
        return cfg_.tcp.rcvbuf_max > cfg_.tcp.rcvbuf && !(s.flags & kFRcvBufLocked);
    }
    // The largest buffer a connection may come to offer (window scale).
    uint32_t rcv_buf_limit(const Sock &s) const;
    // Rings attached: the buffer offered and its out-of-order share start.
    void rcv_space_init(Sock &s);
    // The application drained bytes (rx_consume): one DRS step.
    void rcv_tune(Sock &s);
    void rcv_set_space(Sock &s, uint32_t bytes);
    bool rx_ring_grow(Sock &s);
    void ooo_share_for(Sock &s);
    // SO_RCVBUF (SockOpt::kRcvBuf): fixes the buffer at `bytes`, the ring
    // growing to hold it (now if empty, else at the release that empties it).
    void rcv_buf_fix(Sock &s, uint32_t bytes);
    // The window opened (from `before`) by two segments or half the buffer:
    // tell the peer now.
    void window_update(Sock &s, uint32_t before);
    void ack_now(Sock &s);
    // Remembers a duplicate [start, end) for the next ACK's D-SACK block.
    // One is pending at a time: an earlier one still waiting goes out first
    // in its own ACK, so every duplicate of a burst is reported (a sender
    // undoes a spurious retransmission only on its D-SACK, RFC 2883).
    void note_dsack(Sock &s, uint32_t start, uint32_t end) {
        if (s.flags & kFDsack) send_ack(s);
        s.rec.dsack = SeqRange{start, end};
        s.flags |= kFDsack;
    }
    void push_pending(Sock &s);
    void flush_output();
    void update_mss(Sock &s);

    // ---- tcp_timer.cc ----------------------------------------------------
    void timer_fire(Timer *t);
    void rtx_timeout(Sock &s);
    void aux_timeout(Sock &s);
    void arm_rtx(Sock &s);
    void arm_keepalive(Sock &s);
    void enter_time_wait(Sock &s);

    // ---- rack.cc: RACK-TLP (RFC 8985) and PRR (RFC 6937), SACK only ---------
    // (its questions about a connection alone: tcp/rack_rules.h)
    void rack_sent(Sock &s, uint32_t seq, uint32_t len, bool rtx);
    void rack_update(Sock &s, uint32_t old_una, const TcpOptions &opt);
    bool rack_detect(Sock &s);
    void enter_sack_recovery(Sock &s);
    void prr_on_ack(Sock &s, uint32_t delivered, bool entering);
    void rack_on_ack(Sock &s, uint32_t old_una, const TcpOptions &opt, uint32_t delivered, bool dsack);
    void rack_timeout(Sock &s);
    void tlp_arm(Sock &s);
    void tlp_fire(Sock &s);
    void tlp_on_ack(Sock &s, const TcpOptions &opt, bool dsack);

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
    void conn_init(Sock &s);
    // Gives every buffer back (the destructor, and reset()).
    void release_buffers();
    // The state init() sets up once its tables are allocated (and reset()
    // sets up again on the same tables).
    void start_state();

    static constexpr uint32_t kIndexBits = 22;
    static constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;


    std::vector<Sock> socks_;
    std::vector<uint32_t> free_socks_;
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

    // receive pipeline (StackConfig::strands / prefetch)
    uint32_t strands_ = 1;
    bool prefetch_ = false;

    uint16_t next_ephemeral_ = 0;
};

} // namespace mars
