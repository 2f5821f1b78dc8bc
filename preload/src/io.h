/* What the data path's files share (io_fast.c, io_recv.c, io_send.c,
 * io_sendfile.c): errors, the checks of the program's pointers, iovecs, the
 * full command queue, and the general receive and send every call falls back
 * to. Helpers the fast paths use stay static inline here: the instruction
 * budgets (benchmarks/preload/shim-instructions) depend on their being
 * inlined. Only the data path's files include it. */
#ifndef ETA_PRELOAD_IO_H
#define ETA_PRELOAD_IO_H

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "attach.h"
#include "config.h"
#include "errno_util.h"
#include "fdtable.h"
#include "shim.h"
#include "sockobj.h"
#include "ucopy.h"
#include "wait.h"

/* EPIPE raises SIGPIPE in the calling thread, as the kernel's send does. */
static inline ssize_t fail_pipe(int flags)
{
    if (!(flags & MSG_NOSIGNAL))
        raise(SIGPIPE);
    return fail(EPIPE);
}

/* Bad user pointers. The kernel answers EFAULT for a buffer it cannot
 * reach; the shim copies in the program's own thread, where touching one
 * would kill the program (write(fd, NULL, n) did: SIGSEGV, and the PPE then
 * reset the connection). The fast paths test one range per call, a few
 * instructions: a buffer in the first page (NULL and small offsets from it:
 * never mapped, vm.mmap_min_addr), or one reaching past the lowest top of a
 * user address space, goes the general way, which answers EFAULT for a
 * non-empty one in the first page or wrapping around, before anything is
 * copied or consumed. A pointer into an unmapped hole elsewhere is caught
 * by the copies themselves (ucopy.h): each copy of the program's bytes is
 * all or nothing, as the kernel's TCP copies one segment (receive) or chunk
 * (send): a copy that faults consumes or publishes none of its bytes, and
 * the call answers the bytes of the copies before it, or EFAULT. */
#define ETA_UPTR_MIN 4096ull
#define ETA_UPTR_TOP (1ull << 47)
static inline __attribute__((always_inline)) bool uptr_suspect(const void *p, size_t len)
{
    return (uint64_t)(uintptr_t)p - ETA_UPTR_MIN >= ETA_UPTR_TOP - ETA_UPTR_MIN - (uint64_t)len;
}

static inline bool uptr_bad(const void *p, size_t len)
{
    return len && ((uintptr_t)p < ETA_UPTR_MIN || (uintptr_t)p + len < (uintptr_t)p);
}

/* Whether len bytes at p can be read (p not in the first page, every page
 * it spans mapped readable), touching one byte per page through the
 * recoverable copy: the program's structures (msghdr, iovec arrays) before
 * the shim reads their fields. (A mapping removed meanwhile by another
 * thread still faults, as it would in the program's own code.) */
static inline bool uptr_readable(const void *p, size_t len)
{
    if (uptr_bad(p, len))
        return false;
    if (len == 0)
        return true;
    const char *b = p, *last = b + len - 1;
    char t;
    for (const char *q = b; q <= last; q = (const char *)(((uintptr_t)q | 4095u) + 1))
        if (eta_ucopy(&t, q, 1) != 0)
            return false;
    return eta_ucopy(&t, last, 1) == 0;
}

/* Stores n bytes into the program's memory; false when it cannot be written
 * (the kernel's put_user answers EFAULT). */
static inline bool uput(void *dst, const void *src, size_t n)
{
    return !uptr_bad(dst, n) && eta_ucopy(dst, src, n) == 0;
}

/* An iovec array the kernel would refuse with EFAULT. */
static inline bool iov_fault(const struct iovec *iov, int n)
{
    if (n <= 0)
        return false;
    if (!uptr_readable(iov, (size_t)n * sizeof *iov))
        return true;
    for (int i = 0; i < n && i <= IOV_MAX; i++)
        if (uptr_bad(iov[i].iov_base, iov[i].iov_len))
            return true;
    return false;
}

static inline size_t iov_total(const struct iovec *iov, int n, bool *bad)
{
    size_t total = 0;
    *bad = n < 0 || n > IOV_MAX;
    for (int i = 0; i < n && !*bad; i++) {
        if (iov[i].iov_len > SSIZE_MAX - total)
            *bad = true;
        else
            total += iov[i].iov_len;
    }
    return total;
}

/* dti_recv_release() and dti_send_commit() refuse with -EAGAIN when the
 * context's command queue is full (a burst of work the engine has not caught
 * up with), and then nothing happened: the bytes stay borrowed / reserved.
 * Dropping that result would deliver received bytes twice or lose sent ones.
 * So publish what is queued, reap, and try again until the engine makes
 * room; a queue that stays full for a second means the engine is not
 * serving us, which the caller reports as a broken connection. */
#define ETA_QUEUE_FULL_NS 1000000000ull

static inline bool queue_stuck(dti_ctx_t *c, uint64_t *since)
{
    if (atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        return true;
    uint64_t now = eta_now_ns();
    if (!*since)
        *since = now;
    else if (now - *since > ETA_QUEUE_FULL_NS)
        return true;
    dti_submit(c);
    eta_pump(c);
    return false;
}

/* The accelerated socket behind fd (referenced), or NULL for the kernel: one
 * copy out of line per file, as the wrappers' general way wants it (inlined,
 * it costs the fast paths' prologues instructions). */
static __attribute__((noinline, unused)) struct eta_sock *io_accel(int fd)
{
    return eta_sock_accel_inline(fd);
}

/* libdti's receive view (dti_recv_view(), dti.h) with the recoverable
 * copy: > 0 taken (*flush: a release is due), 0 when it cannot take them
 * now; a fault in the copy jumps to the caller's label `fault` with nothing
 * taken (the general way copies again and answers). */
#define ETA_RECV_VIEW(view, buf, len, flush, fault)                                                              \
    __extension__({                                                                                               \
        const struct dti_rx_view *v_ = (view);                                                                    \
        size_t len_ = (len);                                                                                      \
        ssize_t r_ = 0;                                                                                           \
        uint32_t head_ = *v_->head;                                                                               \
        uint32_t n_ = __atomic_load_n(v_->tail, __ATOMIC_ACQUIRE) - head_;                                        \
        uint32_t mask_ = (__atomic_load_n(v_->size, __ATOMIC_RELAXED) - 1) & v_->max_mask;                        \
        if (!(n_ - 1 > mask_ || __atomic_load_n(v_->live_gen, __ATOMIC_RELAXED) != v_->gen || len_ == 0 ||       \
              __atomic_load_n(v_->trace, __ATOMIC_RELAXED) != *v_->trace_seen)) {                                 \
            size_t take_ = len_ < n_ ? len_ : n_;                                                                 \
            uint32_t off_ = (__atomic_load_n(v_->base, __ATOMIC_RELAXED) + head_) & mask_;                        \
            if (!(take_ > 64 || take_ > mask_ + 1 - off_)) {                                                      \
                ETA_UCOPY_SMALL((buf), v_->ring + off_, take_, fault);                                            \
                *v_->head = head_ + (uint32_t)take_;                                                              \
                *(flush) = __atomic_add_fetch(v_->owed, (uint32_t)take_, __ATOMIC_RELAXED) > mask_ >> 2;          \
                r_ = (ssize_t)take_;                                                                              \
            }                                                                                                     \
        }                                                                                                         \
        r_;                                                                                                       \
    })

/* dti_recv() and dti_send() with the recoverable copy (io_recv.c,
 * io_send.c): the same answers, and -EFAULT when the copy faulted (then
 * nothing was consumed, or published). */
ssize_t eta_recv_copy(dti_ctx_t *c, dti_sock_t h, void *buf, size_t len);
ssize_t eta_send_copy(dti_ctx_t *c, dti_sock_t h, const void *buf, size_t len);

/* io_recv.c: receives into iov. Returns bytes, 0 at EOF, or -1 with errno. */
ssize_t eta_sock_recv(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags);
/* io_send.c: sends from iov (or, when `in_fd` >= 0, from that file:
 * sendfile). Returns bytes, or -1 with errno (EPIPE raises SIGPIPE). */
ssize_t eta_sock_send(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags, int in_fd,
                      off_t *offset, size_t file_count);

#endif
