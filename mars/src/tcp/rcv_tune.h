// tcp/rcv_tune.h: receive-buffer autotuning. The buffer a connection offers
// grows with what the application drains per round trip (dynamic
// right-sizing), the out-of-order share with it, the ring through
// BufferProvider::grow_rx. Defined in rcv_tune.cc.
//
// May call: the Env (config, clock, buffers_, counters) and nothing else.
#pragma once

#include "tcp/env.h"

#include <cstdint>

namespace mars::tcp {

inline bool autotune(const Env &e, const Sock &s)
{
    return e.cfg_.tcp.rcvbuf_max > e.cfg_.tcp.rcvbuf && !(s.flags & kFRcvBufLocked);
}
// The largest buffer a connection may come to offer (window scale).
uint32_t rcv_buf_limit(const Env &e, const Sock &s);
void ooo_share_for(Env &e, Sock &s);
// Rings attached: the buffer offered and its out-of-order share start.
void rcv_space_init(Env &e, Sock &s);
// SO_RCVBUF (SockOpt::kRcvBuf): fixes the buffer at `bytes`, the ring
// growing to hold it (now if empty, else at the release that empties it).
void rcv_buf_fix(Env &e, Sock &s, uint32_t bytes);
void rcv_set_space(Env &e, Sock &s, uint32_t bytes);
bool rx_ring_grow(Env &e, Sock &s);
// The application drained bytes (rx_consume): one DRS step.
void rcv_tune(Env &e, Sock &s);

} // namespace mars::tcp
