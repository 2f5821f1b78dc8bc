// stack_impl.h: the inside of one MARS stack instance.
//
// StackImpl is the stack's own: ids and the socket table, the flow table,
// listeners, events (the lists the Env raises into), and the Stack interface
// (stack.cc, socket_api.cc). Its parts (mars/README.md, "Module layout"):
//   tcp/env.h   tcp::Env, StackImpl's base: the narrow environment of the TCP
//               rules (clock, transmit layers, events, output list, timers,
//               rings, counters, a few socket-table services in stack.cc)
//   tcp/*.h     the TCP rules as functions of a tcp::Conn and a tcp::Env:
//               input.h, sender.h, recovery.h, timers.h, rcv_tune.h
//   rx/         rx::Receiver (receiver.h), StackImpl's first base (a Stack:
//               input() is its): the receive path (the burst loops, the
//               express path and header prediction,
//               coalescing, strands, receive copies, the dispatch by state)
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
#include "base/flow_table6.h"
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
#include "tcp/tcp6.h"
#include "base/timer_wheel.h"
#include "base/wire.h"
#include "udp/udp.h"
#include "rx/receiver.h"

#include <mars/copy.h>
#include <mars/stack.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <vector>

namespace mars {

class StackImpl final : public rx::Receiver, private Ipv6Upper, private tcp::Env {
  public:
    StackImpl(const StackConfig &config, PacketIo &io, BufferProvider &buffers);
    ~StackImpl() override;
    bool init(std::string *error);
    void reset() override;

    // Stack interface
    void poll(uint64_t now_ns) override;
    uint64_t next_deadline_ns() const override;
    uint16_t events(SockEvent *out, uint16_t max) override;
    void announce(uint64_t now_ns) override;
    uint32_t addrs6_tentative() const override
    {
        uint32_t n = 0;
        for (int i = 0; i < nd_.n_addrs(); i++) n += nd_.addr(i).state == AddrState::kTentative;
        return n;
    }
    int64_t open(uint64_t user) override;
    int bind(SockId s, Endpoint local) override;
    int listen(SockId s, int backlog) override;
    int64_t accept(SockId listener, uint64_t user) override;
    int connect(SockId s, Endpoint remote, uint64_t now_ns) override;
    int bind6(SockId s, const Endpoint6 &local, bool v6only) override;      // socket_api6.cc
    int connect6(SockId s, const Endpoint6 &remote, uint64_t now_ns) override;
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
    int tx_grow(SockId s, uint32_t size) override;
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
    friend class rx::Receiver; // its accessors (rx/host.h): the Env, flows_, flows6_, ip6_, tcp6_part_

    // Everything below is the stack's own: the layers (link_, arp_, router_,
    // ip_) are reached through their types' interfaces, the TCP code's state
    // through these members, and nothing outside the stack sees any of it.

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
    void snd_tune(Sock &s); // send-buffer autotuning (socket_api.cc)
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
    void link_flow(Sock &s, const FlowKey &key);
    void link_flow6(Sock &s); // s.v6's 4-tuple into flows6_
    void unlink_flow(Sock &s); // either family's
    void quiesce(Sock &s);
    int pick_port(Sock &s, uint32_t rip, uint16_t rport);
    bool port_in_use(uint32_t lip, uint16_t port, const Sock *except) const;
    // The listener a SYN for (lip, lport) from (rip, rport) goes to: the exact
    // address before the wildcard; within a SO_REUSEPORT group, the member
    // a keyed hash of the 4-tuple picks (as Linux spreads connections).
    Sock *find_listener(uint32_t lip, uint16_t lport, uint32_t rip, uint16_t rport);
    // The same for a SYN over IPv6: IPv6 listeners only (kFV6), the exact
    // address before ::.
    Sock *find_listener6(const Ip6Addr &lip, uint16_t lport, const Ip6Addr &rip, uint16_t rport);
    // bind6's conflicts: a listener on port whose addresses overlap (IPv6
    // ones by address, :: with every one; a dual-stack :: also with IPv4's).
    bool port_in_use6(const Ip6Addr &lip, bool dual, uint16_t port, const Sock *except) const;
    // An ephemeral port for an IPv6 active open to (rip, rport).
    int pick_port6(Sock &s, const Ip6Addr &lip, const Ip6Addr &rip, uint16_t rport);
    bool same_owner(const Sock &a, const Sock &b) const;
    void abort_children(Sock &l);
    void send_abort_rst(const Sock &s); // socket_api.cc: RST of an abort (RFC 9293, RFC 7323 3.2)
    // An active open's last step, either family (socket_api.cc): from s.iss,
    // the connection and its template made, SYN-SENT and the SYN sent.
    void start_syn_sent(Sock &s);
    // Connects waiting on a neighbour ARP gave up on fail (EHOSTUNREACH).
    void fail_unreachable();
    // The same for IPv6: neighbours ND gave up on (SYN-SENT over IPv6 to them).
    void fail_unreachable6();
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
    FlowTable6 flows6_; // IPv6 connections (kFV6; base/flow_table6.h)
    std::vector<uint32_t> listeners_; // indices of listening sockets (few)

    std::vector<SockEvent> closed_events_; // kEvClosed (the id is gone once it is queued)
    size_t event_pos_ = 0;

    uint16_t next_ephemeral_ = 0;

    // ---- IPv6 (ip/ipv6.h, ip/nd.h; issue 31): beside the Env's IPv4 layers.
    // TCP over IPv6 goes to the receive path (rx::Receiver::tcp6_input: the
    // checks of tcp6_part_, FlowTable6, the TCP rules), UDP to the UDP
    // component (udp_.udp6_input); other upper protocols are not taken
    // (sharing, the kernel gets them; alone, ICMPv6 unreachable). ICMPv6
    // errors quoting our TCP reach their connection (UDP's: not yet).
    bool ip6_input(PacketRef &f, const Ip6Rx &rx) override
    {
        // A group a UDP socket joined reaches here too: TCP has nothing to
        // do with a multicast destination (RFC 9293 3.10.7.2), not taken.
        if (rx.proto == wire::kProtoTcp) return !ip6::is_multicast(rx.ip->dst) && tcp6_input(f, rx);
        return rx.proto == wire::kProtoUdp && udp_.udp6_input(f, rx);
    }
    void ip6_error(const Icmp6Error &e) override
    {
        if (e.proto == wire::kProtoUdp)
            udp_.udp6_icmp_error(e);
        else
            tcp6_error(e);
    }
    // IPv6 multicast groups are UDP's memberships (udp/mld.cc).
    bool ip6_group_joined(const uint8_t *group) const override { return udp_.group6_joined(group); }
    bool ip6_group_mac(const uint8_t *mac) const override { return udp_.group6_mac(mac); }
    void ip6_mld_query(const wire::Ipv6 *ip, const uint8_t *msg, unsigned len, bool router_alert) override
    {
        udp_.mld_query(ip, msg, len, router_alert);
    }
    NeighborDiscovery nd_{cfg_, link_, stats_, &arp_}; // our own addresses: arp_'s local loop (issue 29)
    Ipv6Layer ip6_{cfg_, link_, nd_, stats_, *this};
    tcp6::Tcp6 tcp6_part_{cfg_, ip6_, nd_, link_, stats_}; // tcp::Env::tcp6_ points here
    // UDP: its own component (sockets, ports, multicast, IGMP, IPv6);
    // Ipv4Layer hands it UDP and IGMP, ip6_input UDP over IPv6, events()
    // drains its events after TCP's.
    udp::UdpLayer udp_;
};

} // namespace mars
