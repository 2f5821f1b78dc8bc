// tcp/env.h: tcp::Env, the narrow environment the TCP rules run in.
//
// The TCP code (tcp/*.h: the sender, loss recovery, timers, the input rules
// by state, receive autotuning) is written as functions of a connection
// (tcp::Conn) and an Env. The Env is everything of the stack they may touch:
//
//   clock       now_ns_ (and its 1 ms / 1 us views: tsval(), now_us())
//   transmit    link_ (frames out), arp_ and router_ (the segment template's
//               next hop and MAC), ip_ (RST replies framed by IPv4), io_
//   events      raise(): coalesced per socket until the next events() drain
//   output      want_output(): the connection is flushed at the end of the
//               burst (flush_list_)
//   timers      wheel_
//   rings       buffers_ (ring growth), ooo_pool_ (out-of-order frames),
//               tx_ref_socks_ (transmit by reference)
//   config      cfg_, offloads_, the out-of-order window bounds
//   counters    stats_ and two test-visible run counters
//   the stack   the few socket-table services the rules need (a connection
//               over, a child for a listener, a listener for a SYN): declared
//               here, defined by StackImpl (stack.cc), never on the
//               per-segment path.
//
// StackImpl (stack_impl.h) is an Env (a base without virtual functions):
// Env's members are the stack's own, and calls through it are plain inline
// member accesses, so the per-segment code costs what it did as methods of
// the stack. An Ipv6Layer or a UDP component gets its own narrow view of the
// stack the same way, without touching TCP.
#pragma once

#include "tcp/conn.h"
#include "ip/arp.h"
#include "ip/ipv4.h"
#include "ip/link.h"
#include "ip/route.h"
#include "tcp/ooo.h"
#include "base/timer_wheel.h"

#include <mars/stack.h>

#include <cstdint>
#include <vector>

namespace mars::tcp6 {
class Tcp6;
}

namespace mars::tcp {

struct Env {
    Env(const StackConfig &config, PacketIo &io, BufferProvider &buffers, Ipv4Upper &upper)
        : cfg_(config), io_(io), buffers_(buffers), link_(io, stats_), arp_(cfg_, link_, stats_), router_(cfg_),
          ip_(cfg_, link_, arp_, router_, stats_, upper)
    {
    }
    Env(const Env &) = delete;
    Env &operator=(const Env &) = delete;

    // ---- clock -------------------------------------------------------------
    uint32_t tsval() const { return uint32_t(now_ns_ / 1000000); } // 1 ms clock (RFC 7323 5.4)
    uint32_t now_us() const { return uint32_t(now_ns_ / 1000); }

    // ---- events and output ---------------------------------------------------
    // (Hot's fields only: the fast path raises its events.)
    __attribute__((always_inline)) void raise(Hot &s, uint32_t bits)
    {
        s.ev_bits |= bits;
        if (!(s.flags & kFInEvents)) {
            s.flags |= kFInEvents;
            event_list_.push_back(s.index); // capacity reserved at creation
        }
    }
    void want_output(Hot &s); // tcp_out.cc (out of line: measured cheaper where recovery calls it)
    void release(PacketRef &f) { link_.release(f); }
    // A socket by table index (the table is the stack's; this is a view).
    Conn &conn_at(uint32_t index) { return conns_[index]; }
    // Sends the output of the connections that asked for it (want_output):
    // at the end of a burst or poll (tcp_out.cc).
    void flush_output();

    // ---- the stack's services (stack.cc defines them; StackImpl's tables) ---
    void conn_drop(Conn &s, int err, uint32_t ev);   // over: reset, error, timeout
    void conn_closed(Conn &s);                       // over: closed in order
    void release_user(Conn &s);                      // TIME-WAIT of a closed socket: the id goes back
    Conn *find_listener(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport);
    Conn *find_listener6(const Ip6Addr &lip, uint16_t lport, const Ip6Addr &rip, uint16_t rport);
    Conn *sock_alloc(uint64_t user);                 // a child for a listener
    void sock_free(Conn &s);
    bool attach_rings(Conn &s, uint64_t user);
    void link_flow(Conn &s, const FlowKey &key);     // into the flow table
    void link_flow6(Conn &s);                        // an IPv6 connection (s.v6) into FlowTable6

    // The connection of a flow node (Conn::flow lies right after Hot).
    static Conn *sock_of(FlowNode *n) { return reinterpret_cast<Conn *>(reinterpret_cast<char *>(n) - sizeof(Hot)); }

    StackConfig cfg_;
    Conn *conns_ = nullptr; // the stack's socket table (StackImpl::socks_), set at init
    bool prefetch_ = false; // StackConfig::prefetch: also the transmit side's
    // The most window a connection offers: what its share of the
    // out-of-order pool holds in full segments. A sender may fill the whole
    // window past a hole; segments beyond the share would be dropped, and
    // every drop costs the sender a retransmission round (with tcp.rcvbuf
    // 1M and 256 frames, a peer sending through 1% loss fell from 0.85 to
    // 0.13 Gbit/s in the lab).
    uint32_t ooo_window_cap_ = UINT32_MAX; // for ooo_frames_per_conn; a connection's own grows with its buffer (Conn::app.ooo_cap)
    uint32_t ooo_seg_bytes_ = 1448;        // a full segment's payload (mtu - 40, less 12 with timestamps)
    PacketIo &io_;
    BufferProvider &buffers_;
    uint64_t now_ns_ = 0;
    StackStats stats_{};
    uint32_t offloads_ = 0;
    // The layers below TCP (in this order: each refers to those before it).
    Link link_;          // transmit burst, frame allocation and release
    ArpResolver arp_;    // neighbours, frames waiting for them
    Router router_;      // next-hop choice
    Ipv4Layer ip_;       // IPv4 and ICMP
    // TCP over IPv6's own part (tcp/tcp6.h; StackImpl's): what an IPv6
    // connection (kFV6) asks of IPv6: its template, frames out through ND,
    // segments outside a template, the path MTU.
    tcp6::Tcp6 *tcp6_ = nullptr;

    TimerWheel wheel_;
    OooPool ooo_pool_;
    std::vector<uint32_t> event_list_; // sockets with events to report (indices)
    std::vector<uint32_t> flush_list_; // sockets with output pending (indices)
    // Transmit by reference: sockets with frames the port still reads.
    std::vector<uint32_t> tx_ref_socks_;
    // Segments retransmitted in runs, and the TSO frames among them
    // (StackAccess reads them; StackStats keeps its layout).
    uint64_t rtx_run_segments_ = 0;
    uint64_t rtx_tso_frames_ = 0;
};

} // namespace mars::tcp
