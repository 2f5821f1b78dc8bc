// ppe/src/dti_echo.h: eta-perf's dti echo step, apart so unit tests can run it.
//
// dti_send_commit() returns -EAGAIN when the context's command queue is full
// (many connections served in one burst): nothing was queued. Ignoring that
// sends an echo twice or never. The step keeps what it still owes the engine
// and tells the caller to come back after reaping. (dti_recv_release() now
// batches and never fails for a full queue; the owed release stays as the
// guard should that contract change.)
#pragma once

#include <dti/dti.h>

#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

namespace ppe {

enum class EchoStatus {
    kDrained,   // nothing readable: wait for POLLIN
    kSendFull,  // the send ring is full: wait for POLLOUT
    kQueueFull, // the command queue is full: step again after the next reap
    kEof,       // the peer closed and everything was echoed
    kError,     // the socket failed
};

// What a connection still owes the engine between steps.
struct EchoState {
    size_t release_owed = 0; // bytes already echoed whose release did not fit
};

// Copies n bytes from two received pieces into two send pieces.
inline void copy_iov(const dti_iov *in, const dti_iov *out, size_t n)
{
    size_t ii = 0, io = 0, oi = 0, oo = 0;
    while (n) {
        size_t k = std::min({n, in[ii].len - io, out[oi].len - oo});
        std::memcpy(static_cast<uint8_t *>(out[oi].base) + oo, static_cast<uint8_t *>(in[ii].base) + io, k);
        n -= k;
        io += k;
        oo += k;
        if (io == in[ii].len) ii++, io = 0;
        if (oo == out[oi].len) oi++, oo = 0;
    }
}

// Releases what an earlier step could not; false while the queue is full.
inline bool settle_release(dti_ctx_t *c, dti_sock_t s, EchoState &st, int *err)
{
    if (st.release_owed == 0) return true;
    int r = dti_recv_release(c, s, st.release_owed);
    if (r == -EAGAIN) return false;
    *err = r;
    st.release_owed = 0;
    return true;
}

// Echoes s's received bytes as far as its rings and the command queue allow.
inline EchoStatus echo_some(dti_ctx_t *c, dti_sock_t s, EchoState &st)
{
    for (;;) {
        int err = 0;
        if (!settle_release(c, s, st, &err)) return EchoStatus::kQueueFull;
        if (err < 0) return EchoStatus::kError;
        dti_iov in[2], out[2];
        ssize_t n = dti_recv_borrow(c, s, in);
        if (n == -EAGAIN) return EchoStatus::kDrained;
        if (n == 0) return EchoStatus::kEof;
        if (n < 0) return EchoStatus::kError;
        ssize_t room = dti_send_reserve(c, s, out);
        if (room == -EAGAIN) return EchoStatus::kSendFull;
        if (room < 0) return EchoStatus::kError;
        size_t take = std::min(size_t(n), size_t(room));
        copy_iov(in, out, take);
        int r = dti_send_commit(c, s, take, 0);
        // Not queued: the same bytes stay borrowed and the space reserved.
        if (r == -EAGAIN) return EchoStatus::kQueueFull;
        if (r < 0) return EchoStatus::kError;
        st.release_owed = take;
    }
}

} // namespace ppe
