// tcp/rack_rules.h: what RACK-TLP and PRR ask of one connection (RFC 8985,
// RFC 6675's SetPipe with RACK's lost set), as functions of the connection
// alone: answering needs nothing of the stack. Defined in rack.cc; the
// stack's recovery steps (rack_update, rack_detect, prr_on_ack, tlp_arm ...)
// call them, and so may a test.
#pragma once

#include "tcp/conn.h"

#include <cstdint>

namespace mars::tcp {

// RFC 8985 6.2 step 4: the reordering window (0 once recovery or
// DupThresh SACKed bytes say reordering is unlikely, before any was seen).
uint64_t rack_reo_wnd(const Conn &s);
// Bytes RACK holds lost and not yet resent.
uint32_t rack_lost_bytes(const Conn &s);
// Outstanding bytes neither SACKed nor lost-and-not-yet-resent.
uint32_t rack_pipe(const Conn &s);
// The lowest lost byte range not yet resent, at most one MSS; *piece_end
// (when given): where the lost piece ends past that MSS.
bool rack_next_lost(const Conn &s, SeqRange *out, uint32_t *piece_end = nullptr);
// RFC 8985 7.2: the probe timeout, and whether a probe may be armed now.
uint64_t tlp_pto(const Conn &s);
bool tlp_allowed(const Conn &s);

} // namespace mars::tcp
