// testing/stack_access.h: what tests and benchmarks may see inside a stack,
// and nothing else does. Included only by tests/ and benchmarks/ (through
// mars_internal_dep, which links mars_testing); production code never
// includes it, and StackImpl carries no test hooks of its own: this is its
// one friend.
#pragma once

#include "stack_impl.h"

#include <cstdint>
#include <string>

namespace mars {

struct StackAccess {
    static StackImpl &impl(Stack &s) { return static_cast<StackImpl &>(s); }
    static const StackImpl &impl(const Stack &s) { return static_cast<const StackImpl &>(s); }

    // A segment that passed every check on its frame, straight into the TCP
    // rules (connection lookup and dispatch by state, as tcp_input() does
    // after a missed header prediction), then the output it made due is
    // sent. seg.frame, when set, is consumed (released or held).
    // (tests/unit/mars/tcp/tcp_core_test.cc)
    static void segment_input(Stack &s, TcpSegment &seg, uint64_t now_ns);
    // The connection of a 4-tuple (TIME-WAIT included), or nullptr; leaves
    // the last-flow cache and its counters alone.
    static const Sock *find_conn(const Stack &s, uint32_t remote_ip, uint16_t local_port, uint16_t remote_port);
    // What reset() left different from a new stack: a list of what differs
    // ("" when nothing). Allocates. (tests/fuzz/mars/reset_test.cc)
    static std::string stale_state(const Stack &s);
    // Segments retransmitted in runs (send_rtx_run), and the TSO frames
    // among those runs' frames (StackStats, which eta-ppe publishes, keeps
    // its layout).
    static uint64_t rtx_run_segments(const Stack &s) { return impl(s).rtx_run_segments_; }
    static uint64_t rtx_tso_frames(const Stack &s) { return impl(s).rtx_tso_frames_; }
};

} // namespace mars
