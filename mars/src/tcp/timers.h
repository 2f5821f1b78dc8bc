// tcp/timers.h: the per-connection timers, all on the Env's hashed timing
// wheel, and the RTT estimator they run on. Defined in tcp_timer.cc.
//   rtx_timer    retransmission (RFC 6298, Karn, exponential backoff), SYN and
//                SYN-ACK retries, and the persist timer (zero-window probes)
//   delack_timer delayed ACK
//   aux_timer    keepalive, TIME-WAIT (2MSL) and orphaned FIN-WAIT-2
//   rack_timer   RACK's reordering timer and the tail loss probe (recovery.h)
//
// May call: the Env (clock, wheel, the stack's conn_drop/conn_closed/
// release_user), the sender and loss recovery.
#pragma once

#include "tcp/env.h"

#include <cstdint>

namespace mars::tcp {

// The wheel's callback for every connection timer: dispatch by kind.
void timer_fire(Env &e, Timer *t);
void arm_rtx(Env &e, Sock &s);
void rtx_timeout(Env &e, Sock &s);
void arm_keepalive(Env &e, Sock &s);
void aux_timeout(Env &e, Sock &s);
void enter_time_wait(Env &e, Sock &s);
// An RTT measurement (RFC 6298 2, the minimum for RACK): srtt, rttvar, rto.
void rtt_sample(Env &e, Sock &s, uint64_t rtt_ns);

} // namespace mars::tcp
