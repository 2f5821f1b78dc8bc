// tcp/input.h: the TCP input rules by state (RFC 9293 3.10.7), for a
// segment the fast path did not take (rx/ dispatches by state):
//   tcp_handshake.cc  LISTEN (SYN queue, SYN cookies, SO_REUSEPORT choice,
//                     child connections), SYN-SENT, option negotiation,
//                     entering ESTABLISHED (accept queue)
//   tcp_sync.cc       the synchronized states: PAWS, acceptability, RST and
//                     SYN with RFC 5961 challenge ACKs, ACK processing
//                     (NewReno without SACK, RACK-TLP/PRR with it)
//   tcp_data.cc       data into the receive ring or the out-of-order queue
//                     (D-SACK), FIN transitions, TIME-WAIT (RFC 6191 reuse)
//
// May call: the Env (including the stack's socket-table services: a child
// for a listener, a listener for a SYN, a connection over), the sender,
// loss recovery, the timers, receive autotuning.
#pragma once

#include "tcp/env.h"
#include "tcp/tcp_options.h"
#include "tcp/tcp_segment.h"

#include <cstdint>

namespace mars::tcp {

// ---- tcp_handshake.cc -------------------------------------------------------
void tcp_listen_input(Env &e, Sock &l, const TcpSegment &seg);
void tcp_syn_sent_input(Env &e, Sock &s, const TcpSegment &seg);
void established(Env &e, Sock &s);
void negotiate(Env &e, Sock &s, const TcpOptions &opt);
void adopt_child(Env &e, Sock &l, Sock &c, const FlowKey &key);

// ---- tcp_sync.cc ------------------------------------------------------------
// *held: seg.frame was kept (the out-of-order queue holds it).
void tcp_sync_input(Env &e, Sock &s, const TcpSegment &seg, bool *held);
// len: the payload left after trimming to the window.
bool tcp_ack(Env &e, Sock &s, const TcpSegment &seg, uint32_t len);
// RFC 5961's challenge ACK, throttled per connection.
void challenge_ack(Env &e, Sock &s);
void resend_syn_ack(Env &e, Sock &s);
// An ICMP error about our segments of s (RFC 5927 checks, path MTU, hard
// errors while connecting).
void icmp_error(Env &e, Sock &s, const IcmpTcpError &err);
// An ICMPv6 error about an IPv6 connection's segment (seq quoted): packet too
// big (type 2) lowers the path MTU and the MSS; destination unreachable
// (type 1) while connecting as icmp_error does.
void icmp6_error(Env &e, Sock &s, uint32_t seq, uint8_t type, uint8_t code, uint32_t mtu);

// ---- tcp_data.cc ------------------------------------------------------------
// frame: where payload lies (kept when out of order); may be null when len is 0.
void tcp_data(Env &e, Sock &s, PacketRef *frame, uint32_t seq, uint8_t *payload, uint32_t len, bool fin, bool *held);
void tcp_fin(Env &e, Sock &s);
// In-order bytes into the receive ring; returns how many it took.
uint32_t deliver(Env &e, Sock &s, const uint8_t *p, uint32_t n);
void time_wait_input(Env &e, Sock &s, const TcpSegment &seg, bool *reopen);

} // namespace mars::tcp
