// ppe/src/engine_ring.h: the engine's io_uring, as its files share it
// (engine.cc: the loop, sleeps and wakeups; engine_attach.cc: attaches and
// the watches of attached programs). Internal to the engine.
#pragma once

#include <liburing.h>

#include <cstdint>

namespace ppe::engine_ring {

// user_data of the engine's io_uring requests: kind in the low byte,
// a sequence number above it where one request must be told from another.
inline constexpr uint64_t kTagKick = 1;    // read of the kick eventfd
inline constexpr uint64_t kTagControl = 2; // multishot poll of an attachment's control socket
inline constexpr uint64_t kTagHello = 3;   // poll of a new connection that has not said HELLO yet
inline constexpr uint64_t kTagDoorbell = 4; // multishot poll of an attachment's doorbell eventfd
inline constexpr uint64_t kTagWake = 5;    // application wakeup writes (fire and forget)
inline constexpr uint64_t kTagCancel = 6;  // cancellations
inline constexpr uint64_t kTagRxWake = 7;  // poll of a queue's kernel socket (rx_wake.h); index above
inline const uint64_t kOne = 1;            // what a wakeup writes

inline io_uring_sqe *get_sqe(io_uring *ring)
{
    io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) { // full: hand what is queued to the kernel first
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    return sqe;
}

} // namespace ppe::engine_ring
