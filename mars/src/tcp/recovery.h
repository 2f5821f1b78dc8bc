// tcp/recovery.h: loss recovery of a SACK connection: RACK-TLP (RFC 8985:
// time-based loss detection with a reordering window, the tail loss probe)
// and PRR (RFC 6937) pacing what recovery sends. Defined in rack.cc; the
// questions it asks of a connection alone are tcp/rack_rules.h. Connections
// without SACK keep NewReno (tcp_sync.cc's tcp_ack).
//
// May call: the Env (clock, timers, counters), the sender (tcp/sender.h:
// the probe and what recovery resends).
#pragma once

#include "tcp/env.h"
#include "tcp/rack_rules.h"
#include "tcp/tcp_options.h"

#include <cstdint>

namespace mars::tcp {

// The sender sent [seq, seq + len) (rtx: again).
void rack_sent(Env &e, Sock &s, uint32_t seq, uint32_t len, bool rtx);
void rack_update(Env &e, Sock &s, uint32_t old_una, const TcpOptions &opt);
bool rack_detect(Env &e, Sock &s);
void enter_sack_recovery(Env &e, Sock &s);
void prr_on_ack(Env &e, Sock &s, uint32_t delivered, bool entering);
// An ACK of a SACK connection (tcp_ack): RACK's reference, loss detection,
// recovery's entry and PRR's budget, the probe's answer.
void rack_on_ack(Env &e, Sock &s, uint32_t old_una, const TcpOptions &opt, uint32_t delivered, bool dsack);
// rack_timer fired: the reordering window ran out, or the probe is due.
void rack_timeout(Env &e, Sock &s);
void tlp_arm(Env &e, Sock &s);
void tlp_fire(Env &e, Sock &s);
void tlp_on_ack(Env &e, Sock &s, const TcpOptions &opt, bool dsack);

} // namespace mars::tcp
