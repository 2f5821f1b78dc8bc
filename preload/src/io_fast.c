/* The data path's fast paths and the views: read, recv, write and send
 * on a connected accelerated socket copy once between the program's buffer
 * and the socket's ring in shared memory, through the socket's receive and
 * send views, with no system call and no call out of the shim in the common
 * case; everything else falls back to the general receive (io_recv.c) and
 * send (io_send.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io.h"
#include "udp.h"
#include "real.h"

/* ---- the fast path -----------------------------------------------------
 * A one-buffer read or write on a connected accelerated socket of this
 * process, from a thread whose DTI context is cached, with no flag but
 * MSG_DONTWAIT (MSG_NOSIGNAL for writes): what a server does per request.
 * It costs one peek at the descriptor table, one reference, a few flag
 * tests and libdti's dti_recv()/dti_send(). Bytes moved, end of stream,
 * EAGAIN on a non-blocking socket and errors are answered here; whatever
 * must wait (or is unusual) returns 0 and takes the general path, which
 * starts again from the beginning: nothing was consumed. */

/* The socket behind o, referenced, when the fast path may use it. */
static inline __attribute__((always_inline)) struct eta_sock *fast_sock(struct eta_obj *o)
{
    if (ETA_UNLIKELY(o->kind != ETA_OBJ_SOCK) || !eta_obj_tryref(o))
        return NULL;
    struct eta_sock *s = (struct eta_sock *)o;
    if (ETA_LIKELY(atomic_load_explicit(&s->state, memory_order_acquire) == ETA_SOCK_ACCEL &&
                   s->generation == eta_generation && s->connect_started && !s->listening &&
                   !atomic_load_explicit(&eta_engine_dead, memory_order_relaxed)))
        return s;
    eta_obj_put(o);
    return NULL;
}

static inline bool nonblocking(struct eta_sock *s, int flags)
{
    return (flags & MSG_DONTWAIT) || atomic_load_explicit(&s->nonblock, memory_order_relaxed);
}

/* The views taken once bytes went through dti_recv()/dti_send() (sockobj.h),
 * out of line: the fast paths' prologues stay as short as the budgets want. */
static __attribute__((noinline)) void take_rx_view(dti_ctx_t *c, struct eta_sock *s)
{
    eta_take_rx_view(c, s);
}

static __attribute__((noinline)) void take_tx_view(dti_ctx_t *c, struct eta_sock *s)
{
    eta_take_tx_view(c, s);
}

/* 1 with *out set (and errno when *out is -1); 0: take the general path. */
static inline __attribute__((always_inline)) int recv_fast(struct eta_obj *o, void *buf, size_t len, int flags, ssize_t *out)
{
    dti_ctx_t *c = eta_ctx_cached();
    if (ETA_UNLIKELY(!c || (flags & ~MSG_DONTWAIT) || uptr_suspect(buf, len) || len == 0))
        return 0;
    struct eta_sock *s = fast_sock(o);
    if (ETA_UNLIKELY(!s))
        return 0;
    int done = 0;
    if (ETA_LIKELY(!atomic_load_explicit(&s->shut_rd, memory_order_relaxed))) {
        ssize_t n = 0;
        int flush = 0;
        if (ETA_LIKELY(atomic_load_explicit(&s->rxv_state, memory_order_acquire) == 2))
            n = ETA_RECV_VIEW(&s->rxv, buf, len, &flush, rx_fault);
        if (ETA_LIKELY(n > 0)) {
            if (ETA_UNLIKELY(flush))
                dti_recv_flush(c, s->h);
        } else {
            n = eta_recv_copy(c, s->h, buf, len);
            if (n > 0)
                take_rx_view(c, s);
        }
        if (ETA_LIKELY(n > 0)) {
            atomic_fetch_add_explicit(&s->rx_taken, (size_t)n, memory_order_relaxed);
            *out = n;
            done = 1;
        } else if (n == 0) {
            *out = 0; /* end of stream */
            done = 1;
        } else if (n != -EAGAIN) {
            *out = fail(eta_errno_from_dti((int)n)); /* an error libdti reports once: report it now */
            done = 1;
        } else if (nonblocking(s, flags)) {
            *out = fail(EAGAIN);
            done = 1;
        }
    }
    eta_obj_unref(&s->obj);
    return done;
rx_fault: /* the view's copy faulted, nothing taken: the general way copies again and answers */
    eta_obj_unref(&s->obj);
    return 0;
}

/* The view took bytes but could not queue their SEND (a full command
 * queue): queue it now, as commit_retrying() does. */
static int note_retrying(dti_ctx_t *c, dti_sock_t h)
{
    uint64_t since = 0;
    while (dti_send_note(c, h, 0) == -EAGAIN)
        if (queue_stuck(c, &since))
            return -ECONNRESET;
    return 0;
}

/* send_fast()'s every other case: n bytes (maybe 0) already went through
 * the send view (-n: taken, their SEND still owed). Drops the reference
 * send_fast() took. */
static __attribute__((noinline)) int send_rest(dti_ctx_t *c, struct eta_sock *s, const char *buf, size_t len,
                                               int flags, ssize_t n, ssize_t *out)
{
    int done = 0;
    if (ETA_UNLIKELY(n < 0)) {
        n = -n;
        if (note_retrying(c, s->h) != 0) {
            *out = fail(ECONNRESET); /* the engine does not serve us */
            eta_obj_unref(&s->obj);
            return 1;
        }
    }
    if (ETA_LIKELY(!atomic_load_explicit(&s->shut_wr, memory_order_relaxed))) {
        if (n == 0) {
            n = eta_send_copy(c, s->h, buf, len);
            if (n > 0)
                take_tx_view(c, s);
        } else {
            ssize_t more = eta_send_copy(c, s->h, buf + n, len - (size_t)n); /* the view took a part */
            if (more > 0) {
                n += more;
                take_tx_view(c, s); /* again, if its ring grew */
            }
        }
        if (ETA_LIKELY(n > 0)) {
            atomic_fetch_add_explicit(&s->tx_committed, (size_t)n, memory_order_relaxed);
            *out = n;
            if (ETA_UNLIKELY((size_t)n < len) && !nonblocking(s, flags)) {
                struct iovec rest = {(char *)buf + n, len - (size_t)n};
                ssize_t more = eta_sock_send(s, &rest, 1, flags, -1, NULL, 0);
                if (more > 0)
                    *out += more;
            }
            done = 1;
        } else if (n == -EPIPE) {
            *out = fail_pipe(flags);
            done = 1;
        } else if (n < 0 && n != -EAGAIN && n != -ENOTCONN) {
            *out = fail(eta_errno_from_dti((int)n)); /* reported once by libdti */
            done = 1;
        } else if (n == -EAGAIN && nonblocking(s, flags)) {
            *out = fail(EAGAIN);
            done = 1;
        }
    }
    eta_obj_unref(&s->obj);
    return done;
}

/* The send fast path, inlined in write() and send(): a small write that the
 * send view takes whole while a SEND the engine has not taken yet is queued
 * for the socket (a burst: these bytes ride on it, no command). It makes no
 * call, so the wrapper saves no registers; every other case is a tail call
 * to send_slow() with what was done so far. */

/* send_slow()'s `how` for a referenced socket: nothing published (the
 * general way sends the bytes), or SLOW_OWED: the view took all the bytes
 * and published them, their SEND is owed (the engine took the queued SEND
 * meanwhile). */
#define SLOW_OWED 0x20000u
#define SLOW_WRITE 0x40000u    /* write(): the kernel's is real_write() */
#define SLOW_PUT 0x80000u      /* s is referenced but not for the view: drop it, go the general way */

/* A referenced socket's send view may be used: its fast word (sockobj.h
 * tx_fast: the view taken, accelerated, not shut for writing, this
 * attachment's), and the PPE is there; then the view's own checks. */
static inline __attribute__((always_inline)) bool send_view_usable(struct eta_sock *s)
{
    return eta_tx_fast_ok(s);
}

/* The kernel's calls out of line: the wrappers' fast path then makes only
 * tail calls and saves no registers. */
static __attribute__((noinline)) ssize_t kernel_send(int fd, const void *buf, size_t len, int flags)
{
    return real_send(fd, buf, len, flags);
}

static __attribute__((noinline)) ssize_t kernel_write(int fd, const void *buf, size_t len)
{
    return real_write(fd, buf, len);
}

static __attribute__((noinline)) ssize_t send_last_ref(struct eta_sock *s, ssize_t n)
{
    eta_obj_destroy(&s->obj);
    return n;
}

/* Everything send_fast() did not finish. s: NULL (nothing done), or the
 * referenced socket with the view's result in `how`. */
static __attribute__((noinline)) ssize_t send_slow(int fd, const void *buf, size_t len, int flags, struct eta_sock *s,
                                                   uint32_t how)
{
    if (s && (how & SLOW_PUT)) {
        /* no send view yet (or something changed): as recv_fast() does,
         * dti_send() first (it takes the view), else the general way */
        ssize_t out;
        if (atomic_load_explicit(&s->state, memory_order_acquire) == ETA_SOCK_ACCEL &&
            s->generation == eta_generation && s->connect_started && !s->listening &&
            !atomic_load_explicit(&eta_engine_dead, memory_order_relaxed)) {
            if (send_rest(eta_ctx_cached(), s, buf, len, flags, 0, &out))
                return out;
        } else {
            eta_obj_put(&s->obj);
        }
    } else if (s) {
        dti_ctx_t *c = eta_ctx_cached(); /* not NULL: send_fast() checked */
        ssize_t n = (how & SLOW_OWED) ? -(ssize_t)len : 0;
        if (n == (ssize_t)len) { /* (a send of 0 bytes) */
            atomic_fetch_add_explicit(&s->tx_committed, (size_t)n, memory_order_relaxed);
            eta_obj_unref(&s->obj);
            return n;
        }
        ssize_t out;
        if (send_rest(c, s, buf, len, flags, n, &out))
            return out;
    }
    struct eta_sock *g = io_accel(fd);
    if (ETA_LIKELY(!g))
        return (how & SLOW_WRITE) ? real_write(fd, buf, len) : real_send(fd, buf, len, flags);
    struct iovec v = {(void *)buf, len};
    ssize_t r = eta_sock_send(g, &v, 1, flags, -1, NULL, 0);
    eta_obj_put(&g->obj);
    return r;
}

/* Called through the GOT, not a PLT stub: one jump fewer on send1's path
 * (the shim is loaded with its libdti bound at load time). */
extern int dti_send_note(dti_ctx_t *c, dti_sock_t s, uint32_t n) __attribute__((noplt));

/* The view copied all len bytes and no SEND of the socket is queued (the
 * engine took the last: one SEND per call, as a request/response server's
 * writes are): publish them with their own SEND. flags_write: the call's
 * flags (MSG_DONTWAIT and MSG_NOSIGNAL only, on this path) with SLOW_WRITE
 * for write(): one value fewer to keep across the call. Not a candidate
 * for GCC's interprocedural changes (noipa): a clone without arguments it
 * does not use on the common path made send() move registers before the
 * tail call. (The context is read again rather than passed: one more live
 * value in send_fast() would make send() save registers on every call.) */
static __attribute__((noinline)) ssize_t send_note_call(int fd, const void *buf, size_t len, int flags_write,
                                                        struct eta_sock *s)
{
    /* The context without the epoch check: send_fast() made it an instant
     * ago on this thread, with nothing in between that could fork. */
    if (ETA_LIKELY(dti_send_note(eta_tls_ctx, s->h, (uint32_t)len) == 0)) {
        atomic_fetch_add_explicit(&s->tx_committed, len, memory_order_relaxed);
        eta_obj_unref(&s->obj);
        return (ssize_t)len;
    }
    /* nothing published (a full command queue; with several engines, a
     * handle dti_send_note() does not route): the general way copies again */
    return send_slow(fd, buf, len, flags_write & ~(int)SLOW_WRITE, s, (uint32_t)flags_write & SLOW_WRITE);
}

/* The SEND queued, the engine asleep: its doorbell, then as send_noted(). */
static __attribute__((noinline)) ssize_t send_doorbell(size_t len, struct eta_sock *s)
{
    dti_note_doorbell(eta_tls_ctx);
    atomic_fetch_add_explicit(&s->tx_committed, len, memory_order_relaxed);
    eta_obj_unref(&s->obj);
    return (ssize_t)len;
}

/* The SEND written into this thread's command queue here, through libdti's
 * dti_send_view_note() (issue 33: no call, no frame; the thread's queue
 * view eta_tls_note is its context's, which send_fast() checked). Every
 * case it does not take (a staged command, a queue full as last seen, a
 * traced reply, several engines) publishes nothing and goes through
 * dti_send_note() (send_note_call()). */
static __attribute__((noipa)) ssize_t send_noted(int fd, const void *buf, size_t len, int flags_write,
                                                 struct eta_sock *s)
{
    if (ETA_UNLIKELY(!dti_send_view_note_ok(&s->txv, &eta_tls_note)))
        return send_note_call(fd, buf, len, flags_write, s);
    if (ETA_UNLIKELY(dti_send_view_note(&s->txv, &eta_tls_note, s->h, (uint32_t)len)))
        return send_doorbell(len, s);
    atomic_fetch_add_explicit(&s->tx_committed, len, memory_order_relaxed);
    if (ETA_UNLIKELY(atomic_fetch_sub_explicit(&s->obj.refs, 1, memory_order_acq_rel) == 1))
        return send_last_ref(s, (ssize_t)len);
    return (ssize_t)len;
}

static inline __attribute__((always_inline)) ssize_t send_fast(int fd, struct eta_obj *o, const void *buf,
                                                                size_t len, int flags, uint32_t write)
{
    _Static_assert(((MSG_DONTWAIT | MSG_NOSIGNAL) & SLOW_WRITE) == 0, "send_noted() carries SLOW_WRITE in flags");
    if (ETA_UNLIKELY(!eta_ctx_cached() || (flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL)) || uptr_suspect(buf, len)))
        return send_slow(fd, buf, len, flags, NULL, write);
    if (ETA_UNLIKELY(o->kind != ETA_OBJ_SOCK) || !eta_obj_tryref(o))
        return send_slow(fd, buf, len, flags, NULL, write);
    struct eta_sock *s = (struct eta_sock *)o;
    if (ETA_UNLIKELY(!send_view_usable(s)))
        return send_slow(fd, buf, len, flags, s, write | SLOW_PUT);
    /* libdti's dti_send_view_copy() (dti.h) with the recoverable copy, for
     * the whole write only: 1 to 64 bytes that fit before the ring's end.
     * A write the ring cannot take whole (full, or nearly) or that would
     * wrap goes the general way, which takes what fits (nothing was copied
     * or published): fewer values to keep than a part taken here, so
     * send() saves fewer registers. */
    const struct dti_tx_view *v = &s->txv;
    const uint32_t stop = DTI_STATE_CONNECTED | DTI_STATE_WR_CLOSED | DTI_STATE_RESET | DTI_STATE_FAILED |
                          DTI_STATE_CONNECTING;
    if (ETA_UNLIKELY((__atomic_load_n(v->state, __ATOMIC_ACQUIRE) & stop) != DTI_STATE_CONNECTED ||
                     __atomic_load_n(v->live_gen, __ATOMIC_RELAXED) != v->gen ||
                     __atomic_load_n(v->error, __ATOMIC_RELAXED) || *v->shut_gen == v->gen ||
                     *v->busy_gen == v->gen || len - 1 >= 64))
        return send_slow(fd, buf, len, flags, s, write);
    const uint32_t size = v->size, tail = *v->tail;
    if (ETA_UNLIKELY(tail - __atomic_load_n(v->head, __ATOMIC_ACQUIRE) > size - (uint32_t)len))
        return send_slow(fd, buf, len, flags, s, write); /* no room for it all (or a confused engine) */
    const uint32_t off = (v->base + tail) & (size - 1);
    if (ETA_UNLIKELY((uint32_t)len > size - off))
        return send_slow(fd, buf, len, flags, s, write); /* it would wrap */
    ETA_UCOPY_SMALL(v->ring + off, buf, len, tx_fault);
    int r = dti_send_view_coalesce(v, (uint32_t)len);
    /* s "changed" for the compiler: the reference's address is taken from
     * it again below, not kept in a register since the reference was taken
     * (that register made send() save one of its own). */
    __asm__("" : "+r"(s));
    if (ETA_LIKELY(r > 0)) {
        atomic_fetch_add_explicit(&s->tx_committed, len, memory_order_relaxed);
        if (ETA_UNLIKELY(atomic_fetch_sub_explicit(&s->obj.refs, 1, memory_order_acq_rel) == 1))
            return send_last_ref(s, (ssize_t)len);
        return (ssize_t)len;
    }
    if (r == 0)
        return send_noted(fd, buf, len, flags | (int)write, s);
    return send_slow(fd, buf, len, flags, s, write | SLOW_OWED);
tx_fault: /* the view's copy faulted, nothing published: the general way copies again and answers */
    return send_slow(fd, buf, len, flags, s, write | SLOW_PUT);
}

ETA_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (ETA_LIKELY(!o))
        return real_read(fd, buf, len);
    ssize_t fast;
    if (ETA_LIKELY(recv_fast(o, buf, len, 0, &fast)))
        return fast;
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s))
        return real_read(fd, buf, len);
    struct iovec v = {buf, len};
    ssize_t r = s->dgram ? eta_udp_recv(fd, s, &v, 1, 0, NULL, NULL, NULL, NULL, NULL) : eta_sock_recv(s, &v, 1, 0);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (ETA_LIKELY(!o))
        return real_recv(fd, buf, len, flags);
    ssize_t fast;
    if (ETA_LIKELY(recv_fast(o, buf, len, flags, &fast)))
        return fast;
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s))
        return real_recv(fd, buf, len, flags);
    struct iovec v = {buf, len};
    ssize_t r = s->dgram ? eta_udp_recv(fd, s, &v, 1, flags, NULL, NULL, NULL, NULL, NULL)
                         : eta_sock_recv(s, &v, 1, flags);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (ETA_LIKELY(!o))
        return kernel_write(fd, buf, len);
    return send_fast(fd, o, buf, len, 0, SLOW_WRITE);
}

ETA_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (ETA_LIKELY(!o))
        return kernel_send(fd, buf, len, flags);
    return send_fast(fd, o, buf, len, flags, 0);
}

