/* The data path: read/write and all their socket cousins, sendfile. Every
 * call on an accelerated socket copies once between the program's buffer and
 * the socket's ring in shared memory; no system call unless it must wait.
 * (~1,000 lines, over the tree's ~800: the inlined fast paths, recv_fast()
 * and send_fast(), and the general paths they tail-call share static helpers
 * the instruction budgets depend on being inlined, so they stay in one unit;
 * the posted reads, above sock_recv(), are the seam to split on next.) */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"

static ssize_t fail(int err)
{
    errno = err;
    return -1;
}

/* EPIPE raises SIGPIPE in the calling thread, as the kernel's send does. */
static ssize_t fail_pipe(int flags)
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
 * copied or consumed. (A pointer into an unmapped hole elsewhere is not
 * caught: preload/README.md, "Known limits".) */
#define ETA_UPTR_MIN 4096ull
#define ETA_UPTR_TOP (1ull << 47)
static inline __attribute__((always_inline)) bool uptr_suspect(const void *p, size_t len)
{
    return (uint64_t)(uintptr_t)p - ETA_UPTR_MIN >= ETA_UPTR_TOP - ETA_UPTR_MIN - (uint64_t)len;
}

static bool uptr_bad(const void *p, size_t len)
{
    return len && ((uintptr_t)p < ETA_UPTR_MIN || (uintptr_t)p + len < (uintptr_t)p);
}

/* An iovec array the kernel would refuse with EFAULT. */
static bool iov_fault(const struct iovec *iov, int n)
{
    if (n <= 0)
        return false;
    if (uptr_bad(iov, (size_t)n * sizeof *iov))
        return true;
    for (int i = 0; i < n && i <= IOV_MAX; i++)
        if (uptr_bad(iov[i].iov_base, iov[i].iov_len))
            return true;
    return false;
}

static size_t iov_total(const struct iovec *iov, int n, bool *bad)
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

/* Copies len bytes between src/dst memory and the iovec at byte offset off. */
static void iov_put(const struct iovec *iov, int n, size_t off, const char *src, size_t len)
{
    for (int i = 0; i < n && len; i++) {
        if (off >= iov[i].iov_len) {
            off -= iov[i].iov_len;
            continue;
        }
        size_t k = iov[i].iov_len - off < len ? iov[i].iov_len - off : len;
        memcpy((char *)iov[i].iov_base + off, src, k);
        src += k;
        len -= k;
        off = 0;
    }
}

static void iov_get(const struct iovec *iov, int n, size_t off, char *dst, size_t len)
{
    for (int i = 0; i < n && len; i++) {
        if (off >= iov[i].iov_len) {
            off -= iov[i].iov_len;
            continue;
        }
        size_t k = iov[i].iov_len - off < len ? iov[i].iov_len - off : len;
        memcpy(dst, (const char *)iov[i].iov_base + off, k);
        dst += k;
        len -= k;
        off = 0;
    }
}

static bool readable(void *arg)
{
    struct eta_sock *s = arg;
    dti_ctx_t *c = eta_ctx();
    return !c || (eta_sock_events(c, s) & (POLLIN | POLLERR | POLLHUP | POLLRDHUP));
}

static bool writable(void *arg)
{
    struct eta_sock *s = arg;
    dti_ctx_t *c = eta_ctx();
    return !c || (eta_sock_events(c, s) & (POLLOUT | POLLERR | POLLHUP));
}

/* A blocked send's wait: writable, or an event for the socket was reaped
 * since the send decided whether to watch. The engine's POLLOUT watch is
 * one-shot and eta_watch() does not send one it believes still armed; an
 * event it had not reaped yet (say the answer to the connect's watch, posted
 * before this send filled the ring) consumes that watch and leaves the
 * socket unwritable: the send must go round and arm a new one, not sleep on. */
struct send_wait {
    struct eta_sock *s;
    uint32_t ev_seq;
};

static bool writable_or_event(void *arg)
{
    struct send_wait *w = arg;
    return writable(w->s) || atomic_load_explicit(&w->s->ev_seq, memory_order_acquire) != w->ev_seq;
}

/* dti_recv_release() and dti_send_commit() refuse with -EAGAIN when the
 * context's command queue is full (a burst of work the engine has not caught
 * up with), and then nothing happened: the bytes stay borrowed / reserved.
 * Dropping that result would deliver received bytes twice or lose sent ones.
 * So publish what is queued, reap, and try again until the engine makes
 * room; a queue that stays full for a second means the engine is not
 * serving us, which the caller reports as a broken connection. */
#define ETA_QUEUE_FULL_NS 1000000000ull

static bool queue_stuck(dti_ctx_t *c, uint64_t *since)
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

static int commit_retrying(dti_ctx_t *c, dti_sock_t h, size_t n, unsigned flags)
{
    uint64_t since = 0;
    int rc;
    while ((rc = dti_send_commit(c, h, n, flags)) == -EAGAIN)
        if (queue_stuck(c, &since))
            return -ECONNRESET;
    return rc;
}

static uint64_t deadline_after(int ms)
{
    return ms < 0 ? 0 : eta_now_ns() + (uint64_t)ms * 1000000ull;
}

/* ---- posted reads ---------------------------------------------------------
 * A blocking read of at least DTI_RECV_POST_MIN bytes into one buffer, with
 * nothing in the ring, posts the buffer (dti/README.md, "Posted receive"):
 * the engine writes the bytes straight into it on its own core and answers
 * once, so the program's core copies nothing. Semantics stay the kernel's:
 * the post completes with the first bytes (MSG_WAITALL: with all of them),
 * at end of stream or with the socket's error; a timeout, a signal that ends
 * the call or shutdown(SHUT_RD) cancels it, and the answer to the cancel says
 * how many bytes landed before it (they are returned; none is lost or given
 * twice). The answer comes back through eta_pump(), whichever call of this
 * thread reaps it. Where the engine may not write into this process
 * (-EOPNOTSUPP) reads copy from the ring, as before. */

#define POST_NOT_MADE (-2)
static _Atomic uint64_t post_serial;
/* The attachment that refused posts (they are not tried again on it). */
static dti_t *_Atomic post_refused_by;

static bool post_answered_or_shut(void *arg)
{
    struct eta_sock *s = arg;
    /* Sequentially consistent with eta_recv_shutdown(): a post made as the
     * socket is shut down is cancelled by one side or the other. */
    return atomic_load_explicit(&s->post_state, memory_order_acquire) == 2 || atomic_load(&s->shut_rd);
}

/* shutdown(SHUT_RD), from any thread: a read waiting on a post returns (with
 * the bytes that landed before, or 0), as the kernel wakes its readers. */
void eta_recv_shutdown(dti_ctx_t *c, struct eta_sock *s)
{
    if (atomic_load(&s->post_state) == 1 && dti_prep_recv_cancel(c, s->h) == 0)
        dti_submit(c);
}

static bool post_answered(void *arg)
{
    struct eta_sock *s = arg;
    return atomic_load_explicit(&s->post_state, memory_order_acquire) == 2;
}

/* Cancels the post and waits for its answer, which the engine gives at once.
 * No signal ends this wait: the answer says how many bytes the engine wrote
 * into the buffer, and the call must return them. False: the PPE went. */
static bool post_cancel(dti_ctx_t *c, struct eta_sock *s)
{
    uint64_t since = 0;
    while (dti_prep_recv_cancel(c, s->h) == -EAGAIN)
        if (queue_stuck(c, &since))
            return false;
    dti_submit(c);
    for (;;) {
        int w = eta_wait(c, post_answered, s, 0, -1);
        if (w == 0)
            return true;
        if (w != -EINTR)
            return false;
    }
}

/* Returns bytes (> 0), 0 at end of stream, -1 with errno (EINTR, EAGAIN on
 * SO_RCVTIMEO, as the copying wait answers), or POST_NOT_MADE (the caller
 * copies from the ring). *cut: the wait was cut short (a signal, the
 * timeout, shutdown): MSG_WAITALL returns what came. */
static ssize_t recv_posted(dti_ctx_t *c, struct eta_sock *s, char *buf, size_t len, size_t min, uint64_t deadline,
                           bool *cut)
{
    dti_t *d = dti_ctx_owner(c);
    if (atomic_load_explicit(&post_refused_by, memory_order_relaxed) == d)
        return POST_NOT_MADE;
    if (len > (1u << 30))
        len = 1u << 30;
    uint64_t ud = atomic_fetch_add_explicit(&post_serial, 1, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->post_ud, ud, memory_order_relaxed);
    atomic_store(&s->post_state, 1);
    int rc = dti_prep_recv_post(c, s->h, buf, (uint32_t)len, (uint32_t)(min < len ? min : len), ud);
    if (rc == -EAGAIN) { /* the command queue is full: make room once */
        dti_submit(c);
        eta_pump(c);
        rc = dti_prep_recv_post(c, s->h, buf, (uint32_t)len, (uint32_t)(min < len ? min : len), ud);
    }
    if (rc < 0) {
        atomic_store_explicit(&s->post_state, 0, memory_order_relaxed);
        return POST_NOT_MADE;
    }
    dti_submit(c);
    ETA_STAT_ADD(posted_reads, 1);
    int w = eta_wait(c, post_answered_or_shut, s, deadline, -1);
    *cut = !post_answered(s);
    if (*cut && (w == -EPIPE || !post_cancel(c, s))) {
        atomic_store_explicit(&s->post_state, 0, memory_order_relaxed); /* a late answer is dropped */
        return fail(ECONNRESET);
    }
    int32_t res = atomic_load_explicit(&s->post_res, memory_order_relaxed);
    atomic_store_explicit(&s->post_state, 0, memory_order_relaxed);
    if (res > 0) {
        ETA_STAT_ADD(posted_bytes, (uint64_t)res);
        atomic_fetch_add_explicit(&s->rx_taken, (size_t)res, memory_order_relaxed);
        return res;
    }
    if (res == 0)
        return 0;
    if (res == -EOPNOTSUPP) {
        atomic_store_explicit(&post_refused_by, d, memory_order_relaxed);
        ETA_STAT_ADD(post_refused, 1);
        return POST_NOT_MADE;
    }
    if (res == -ECANCELED) { /* nothing landed: the wait's own answer */
        if (w == -ETIMEDOUT)
            return fail(EAGAIN);
        if (w == -EINTR)
            return fail(EINTR);
        return 0; /* shut down for reading */
    }
    return fail(eta_errno_from_dti(res));
}

/* Receives into iov. Returns bytes, 0 at EOF, or -1 with errno. */
static ssize_t sock_recv(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
    if (eta_sock_orphaned(s) || atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        return fail(ECONNRESET);
    if (s->listening || !s->connect_started)
        return fail(ENOTCONN);
    if (flags & MSG_OOB)
        return fail(EINVAL); /* eta carries no urgent data */
    if (iovcnt > 0 && iovcnt <= IOV_MAX && iov_fault(iov, iovcnt))
        return fail(EFAULT); /* nothing consumed: the bytes stay readable */
    bool bad;
    size_t want = iov_total(iov, iovcnt, &bad);
    if (bad)
        return fail(EINVAL);
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return fail(ECONNRESET);
    bool nonblock = atomic_load_explicit(&s->nonblock, memory_order_relaxed) || (flags & MSG_DONTWAIT);
    bool waitall = (flags & MSG_WAITALL) && !(flags & MSG_PEEK);
    bool simple = iovcnt == 1 && !(flags & (MSG_PEEK | MSG_TRUNC));
    bool postable = simple; /* one buffer the engine may write: large blocking reads are posted */
    uint64_t deadline = 0;
    size_t got = 0;
    if (want == 0)
        return 0;
    for (;;) {
        if (atomic_load_explicit(&s->shut_rd, memory_order_relaxed))
            return (ssize_t)got;
        struct dti_iov piece[2];
        ssize_t n;
        if (simple) { /* one buffer, bytes taken: libdti copies and releases in one call */
            n = dti_recv(c, s->h, (char *)iov[0].iov_base + got, want - got);
            if (n > 0) {
                atomic_fetch_add_explicit(&s->rx_taken, (size_t)n, memory_order_relaxed);
                got += (size_t)n;
                if (waitall && got < want)
                    continue;
                return (ssize_t)got;
            }
        } else if ((n = dti_recv_borrow(c, s->h, piece)) > 0) {
            size_t take = (size_t)n < want - got ? (size_t)n : want - got;
            if (!(flags & MSG_TRUNC)) {
                size_t first = take < piece[0].len ? take : piece[0].len;
                iov_put(iov, iovcnt, got, piece[0].base, first);
                if (take > first)
                    iov_put(iov, iovcnt, got + first, piece[1].base, take - first);
            }
            if (!(flags & MSG_PEEK)) {
                int rc = dti_recv_release(c, s->h, take); /* batched in libdti: never refused for a full queue */
                if (rc < 0)
                    return got ? (ssize_t)got : fail(eta_errno_from_dti(rc));
                atomic_fetch_add_explicit(&s->rx_taken, take, memory_order_relaxed);
            }
            got += take;
            if (waitall && got < want)
                continue;
            return (ssize_t)got;
        }
        if (n == 0)
            return (ssize_t)got; /* EOF */
        if (n != -EAGAIN) {
            if (got)
                return (ssize_t)got;
            return fail(eta_errno_from_dti((int)n));
        }
        if (got && !waitall)
            return (ssize_t)got;
        if (nonblock)
            return got ? (ssize_t)got : fail(EAGAIN);
        if (!deadline && s->rcvtimeo_ms >= 0)
            deadline = deadline_after(s->rcvtimeo_ms);
        if (postable && want - got >= DTI_RECV_POST_MIN) {
            bool cut = false;
            ssize_t r = recv_posted(c, s, (char *)iov[0].iov_base + got, want - got, waitall ? want - got : 1,
                                    deadline, &cut);
            if (r > 0) {
                got += (size_t)r;
                if (waitall && got < want && !cut)
                    continue;
                return (ssize_t)got;
            }
            if (r != POST_NOT_MADE) /* end of stream, or an end after the bytes that came */
                return r == 0 || got ? (ssize_t)got : -1;
        }
        eta_watch(c, s, DTI_POLLIN | DTI_POLLRDHUP);
        int w = eta_wait(c, readable, s, deadline, -1);
        if (w == -ETIMEDOUT)
            return got ? (ssize_t)got : fail(EAGAIN);
        if (w == -EINTR)
            return got ? (ssize_t)got : fail(EINTR);
        if (w == -EPIPE)
            return got ? (ssize_t)got : fail(ECONNRESET);
    }
}

/* True while a connect is still under way (send waits for it, as the
 * kernel's does). */
static bool connecting(dti_ctx_t *c, struct eta_sock *s)
{
    struct dti_sock_info ss;
    return dti_sock_status(c, s->h, &ss) == 0 && (ss.state & DTI_STATE_CONNECTING);
}

/* Sends from iov (or, when `in_fd` >= 0, from that file: sendfile). */
static ssize_t sock_send(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags, int in_fd,
                         off_t *offset, size_t file_count)
{
    if (eta_sock_orphaned(s) || atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        return fail_pipe(flags);
    if (s->listening || !s->connect_started)
        return fail(ENOTCONN);
    if (atomic_load_explicit(&s->shut_wr, memory_order_relaxed))
        return fail_pipe(flags);
    if (flags & MSG_OOB)
        return fail(EOPNOTSUPP);
    if (in_fd < 0 && iovcnt > 0 && iovcnt <= IOV_MAX && iov_fault(iov, iovcnt))
        return fail(EFAULT); /* nothing sent */
    bool bad = false;
    size_t total = in_fd >= 0 ? file_count : iov_total(iov, iovcnt, &bad);
    if (bad)
        return fail(EINVAL);
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return fail_pipe(flags);
    bool nonblock = atomic_load_explicit(&s->nonblock, memory_order_relaxed) || (flags & MSG_DONTWAIT);
    uint64_t deadline = 0;
    size_t sent = 0;
    off_t file_off = offset ? *offset : 0;
    /* One buffer, no MSG_MORE: libdti reserves, copies and commits in one
     * call. A full ring or command queue, and errors, take the general path
     * below, which tells them apart. */
    const bool simple = in_fd < 0 && iovcnt == 1 && !(flags & MSG_MORE);
    while (sent < total) {
        if (simple) {
            ssize_t k = dti_send(c, s->h, (const char *)iov[0].iov_base + sent, total - sent, 0);
            if (k > 0) {
                atomic_fetch_add_explicit(&s->tx_committed, (size_t)k, memory_order_relaxed);
                sent += (size_t)k;
                continue;
            }
        }
        struct dti_iov piece[2];
        ssize_t n = dti_send_reserve(c, s->h, piece);
        if (n > 0) {
            size_t take = (size_t)n < total - sent ? (size_t)n : total - sent;
            size_t first = take < piece[0].len ? take : piece[0].len;
            if (in_fd >= 0) {
                /* sendfile: the file's bytes land in the send ring directly. */
                size_t done = 0;
                for (int p = 0; p < 2 && done < take; p++) {
                    size_t want = p == 0 ? first : take - first;
                    ssize_t r = offset ? pread(in_fd, piece[p].base, want, file_off + (off_t)done)
                                       : real_read(in_fd, piece[p].base, want);
                    if (r < 0) {
                        if (done == 0 && sent == 0)
                            return -1; /* errno from the file */
                        break;
                    }
                    done += (size_t)r;
                    if ((size_t)r < want)
                        break;
                }
                if (done) {
                    int rc = commit_retrying(c, s->h, done, (flags & MSG_MORE) ? DTI_SEND_MORE : 0);
                    if (rc < 0)
                        return sent ? (ssize_t)sent : fail(eta_errno_from_dti(rc));
                    atomic_fetch_add_explicit(&s->tx_committed, done, memory_order_relaxed);
                }
                sent += done;
                file_off += (off_t)done;
                if (offset)
                    *offset = file_off;
                if (done < take)
                    break; /* end of file */
                continue;
            }
            iov_get(iov, iovcnt, sent, piece[0].base, first);
            if (take > first)
                iov_get(iov, iovcnt, sent + first, piece[1].base, take - first);
            /* MSG_MORE only for the last piece of what the program gave; a
             * piece cut short by a full ring goes out at once. */
            unsigned more = (flags & MSG_MORE) && sent + take == total ? DTI_SEND_MORE : 0;
            int rc = commit_retrying(c, s->h, take, more);
            if (rc < 0)
                return sent ? (ssize_t)sent : fail(eta_errno_from_dti(rc));
            atomic_fetch_add_explicit(&s->tx_committed, take, memory_order_relaxed);
            sent += take;
            continue;
        }
        if (n != -EAGAIN && !(n == -ENOTCONN && connecting(c, s))) {
            if (sent)
                return (ssize_t)sent;
            int e = eta_errno_from_dti((int)n);
            return e == EPIPE ? fail_pipe(flags) : fail(e);
        }
        if (nonblock)
            return sent ? (ssize_t)sent : fail(EAGAIN);
        if (!deadline && s->sndtimeo_ms >= 0)
            deadline = deadline_after(s->sndtimeo_ms);
        struct send_wait sw = {s, atomic_load_explicit(&s->ev_seq, memory_order_acquire)};
        eta_watch(c, s, DTI_POLLOUT);
        int w = eta_wait(c, writable_or_event, &sw, deadline, -1);
        if (w == -ETIMEDOUT)
            return sent ? (ssize_t)sent : fail(EAGAIN);
        if (w == -EINTR)
            return sent ? (ssize_t)sent : fail(EINTR);
        if (w == -EPIPE)
            return sent ? (ssize_t)sent : fail_pipe(flags);
    }
    return (ssize_t)sent;
}

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

/* Bytes came through dti_recv(): the socket is connected and its ring's
 * base fixed, so its receive view can be taken (once, by one thread). */
static void take_rx_view(dti_ctx_t *c, struct eta_sock *s)
{
    uint32_t none = 0;
    if (ETA_LIKELY(atomic_load_explicit(&s->rxv_state, memory_order_relaxed) != 0) ||
        !atomic_compare_exchange_strong(&s->rxv_state, &none, 1))
        return;
    atomic_store_explicit(&s->rxv_state, dti_rx_view(c, s->h, &s->rxv) == 0 ? 2 : 0, memory_order_release);
}

/* Bytes went through dti_send(): the socket is connected, so its send view
 * can be taken (once, by one thread). */
static void take_tx_view(dti_ctx_t *c, struct eta_sock *s)
{
    uint32_t none = 0;
    if (ETA_LIKELY(atomic_load_explicit(&s->txv_state, memory_order_relaxed) != 0) ||
        !atomic_compare_exchange_strong(&s->txv_state, &none, 1))
        return;
    atomic_store_explicit(&s->txv_state, dti_tx_view(c, s->h, &s->txv) == 0 ? 2 : 0, memory_order_release);
}

/* For readiness checks: the send view first (it is refused until the socket
 * is connected, which also fixes the receive ring's base), then the receive
 * view. */
__attribute__((noinline)) void eta_sock_take_views(dti_ctx_t *c, struct eta_sock *s)
{
    take_tx_view(c, s);
    if (atomic_load_explicit(&s->txv_state, memory_order_acquire) == 2)
        take_rx_view(c, s);
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
            n = dti_recv_view(&s->rxv, buf, len, &flush);
        if (ETA_LIKELY(n > 0)) {
            if (ETA_UNLIKELY(flush))
                dti_recv_flush(c, s->h);
        } else {
            n = dti_recv(c, s->h, buf, len);
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
}

static ssize_t sock_send(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags, int in_fd,
                         off_t *offset, size_t file_count);

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
            n = dti_send(c, s->h, buf, len, 0);
            if (n > 0)
                take_tx_view(c, s);
        } else {
            ssize_t more = dti_send(c, s->h, buf + n, len - (size_t)n, 0); /* the view took a part */
            if (more > 0)
                n += more;
        }
        if (ETA_LIKELY(n > 0)) {
            atomic_fetch_add_explicit(&s->tx_committed, (size_t)n, memory_order_relaxed);
            *out = n;
            if (ETA_UNLIKELY((size_t)n < len) && !nonblocking(s, flags)) {
                struct iovec rest = {(char *)buf + n, len - (size_t)n};
                ssize_t more = sock_send(s, &rest, 1, flags, -1, NULL, 0);
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

static struct eta_sock *accel(int fd);

/* The send fast path, inlined in write() and send(): a small write that the
 * send view takes whole while a SEND the engine has not taken yet is queued
 * for the socket (a burst: these bytes ride on it, no command). It makes no
 * call, so the wrapper saves no registers; every other case is a tail call
 * to send_slow() with what was done so far. */

/* send_slow()'s `how`: the view copied (how & SLOW_TAKEN) bytes and ... */
#define SLOW_TAKEN 0xffffu
#define SLOW_COVERED 0x10000u  /* ... published them under a queued SEND (fewer than asked) */
#define SLOW_OWED 0x20000u     /* ... published them, their SEND is owed (the engine took that SEND meanwhile) */
#define SLOW_WRITE 0x40000u    /* write(): the kernel's is real_write() */
/* (neither flag: copied, not published: dti_send_note() publishes them) */

#define SLOW_PUT 0x80000u      /* s is referenced but not for the view: drop it, go the general way */

/* A referenced socket's send view may be used: what fast_sock() checks, but
 * that a send view was taken (txv_state 2) already says the socket connected
 * (connect_started, not listening). */
static inline __attribute__((always_inline)) bool send_view_usable(struct eta_sock *s)
{
    return atomic_load_explicit(&s->txv_state, memory_order_acquire) == 2 &&
           atomic_load_explicit(&s->state, memory_order_acquire) == ETA_SOCK_ACCEL &&
           s->generation == eta_generation && !atomic_load_explicit(&s->shut_wr, memory_order_relaxed) &&
           !atomic_load_explicit(&eta_engine_dead, memory_order_relaxed);
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
        ssize_t n = how & SLOW_TAKEN;
        if (how & SLOW_OWED)
            n = -n;
        else if (!(how & SLOW_COVERED) && n > 0 && dti_send_note(c, s->h, (uint32_t)n) != 0)
            n = 0; /* no room for its SEND: nothing was published, the general way sends them */
        if (n == (ssize_t)len) {
            atomic_fetch_add_explicit(&s->tx_committed, (size_t)n, memory_order_relaxed);
            eta_obj_unref(&s->obj);
            return n;
        }
        ssize_t out;
        if (send_rest(c, s, buf, len, flags, n, &out))
            return out;
    }
    struct eta_sock *g = accel(fd);
    if (ETA_LIKELY(!g))
        return (how & SLOW_WRITE) ? real_write(fd, buf, len) : real_send(fd, buf, len, flags);
    struct iovec v = {(void *)buf, len};
    ssize_t r = sock_send(g, &v, 1, flags, -1, NULL, 0);
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
 * for write(): one value fewer to keep across the call. (The context is
 * read again rather than passed: one more live value in send_fast() would
 * make send() save registers on every call.) */
static __attribute__((noinline)) ssize_t send_noted(int fd, const void *buf, size_t len, int flags_write,
                                                    struct eta_sock *s)
{
    /* The context without the epoch check: send_fast() made it an instant
     * ago on this thread, with nothing in between that could fork. */
    if (ETA_LIKELY(dti_send_note(eta_tls_ctx, s->h, (uint32_t)len) == 0)) {
        atomic_fetch_add_explicit(&s->tx_committed, len, memory_order_relaxed);
        eta_obj_unref(&s->obj);
        return (ssize_t)len;
    }
    /* nothing published: the general way */
    return send_slow(fd, buf, len, flags_write & ~(int)SLOW_WRITE, s, (uint32_t)flags_write & SLOW_WRITE);
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
    uint32_t take = dti_send_view_copy(&s->txv, buf, len);
    int r = take ? dti_send_view_coalesce(&s->txv, take) : 0;
    if (ETA_LIKELY(r > 0 && take == len)) {
        atomic_fetch_add_explicit(&s->tx_committed, len, memory_order_relaxed);
        if (ETA_UNLIKELY(atomic_fetch_sub_explicit(&s->obj.refs, 1, memory_order_acq_rel) == 1))
            return send_last_ref(s, (ssize_t)len);
        return (ssize_t)len;
    }
    if (r == 0 && take == len)
        return send_noted(fd, buf, len, flags | (int)write, s);
    return send_slow(fd, buf, len, flags, s, take | write | (r > 0 ? SLOW_COVERED : r < 0 ? SLOW_OWED : 0));
}

/* The accelerated socket behind fd (referenced), or NULL for the kernel. */
static struct eta_sock *accel(int fd)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (ETA_LIKELY(!o))
        return NULL;
    struct eta_sock *s = eta_sock_get(fd);
    if (s && atomic_load_explicit(&s->state, memory_order_acquire) != ETA_SOCK_ACCEL &&
        atomic_load(&s->state) != ETA_SOCK_ORPHAN) {
        eta_obj_put(&s->obj);
        return NULL;
    }
    return s;
}

struct eta_sock *eta_sock_accel(int fd) { return accel(fd); }

ETA_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (ETA_LIKELY(!o))
        return real_read(fd, buf, len);
    ssize_t fast;
    if (ETA_LIKELY(recv_fast(o, buf, len, 0, &fast)))
        return fast;
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s))
        return real_read(fd, buf, len);
    struct iovec v = {buf, len};
    ssize_t r = sock_recv(s, &v, 1, 0);
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
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s))
        return real_recv(fd, buf, len, flags);
    struct iovec v = {buf, len};
    ssize_t r = sock_recv(s, &v, 1, flags);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, __SOCKADDR_ARG addr_arg, socklen_t *alen)
{
    struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s))
        return real_recvfrom(fd, buf, len, flags, addr, alen);
    if (alen && uptr_bad(alen, sizeof *alen)) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    struct iovec v = {buf, len};
    ssize_t r = sock_recv(s, &v, 1, flags);
    eta_obj_put(&s->obj);
    if (r >= 0 && alen)
        *alen = 0; /* a TCP socket reports no source address */
    return r;
}

ETA_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s))
        return real_readv(fd, iov, cnt);
    ssize_t r = sock_recv(s, iov, cnt, 0);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s)) {
        ssize_t r = real_recvmsg(fd, msg, flags);
        if (ETA_UNLIKELY(r >= 0 && msg->msg_controllen)) /* sockets passed to us (pass.c) */
            eta_claim_passed(msg);
        return r;
    }
    if (uptr_bad(msg, sizeof *msg)) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    ssize_t r = sock_recv(s, msg->msg_iov, (int)msg->msg_iovlen, flags);
    eta_obj_put(&s->obj);
    if (r >= 0) {
        msg->msg_namelen = 0;
        msg->msg_controllen = 0;
        msg->msg_flags = 0;
    }
    return r;
}

ETA_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags, struct timespec *timeout)
{
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s)) {
        int n = real_recvmmsg(fd, vec, vlen, flags, timeout);
        for (int i = 0; i < n; i++) /* sockets passed to us, as recvmsg claims them (pass.c) */
            if (ETA_UNLIKELY(vec[i].msg_hdr.msg_controllen))
                eta_claim_passed(&vec[i].msg_hdr);
        return n;
    }
    if (vlen && uptr_bad(vec, (size_t)vlen * sizeof *vec)) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    /* A stream has no message boundaries: fill entries while bytes are there. */
    int done = 0;
    for (unsigned i = 0; i < vlen; i++) {
        int f = (flags & ~MSG_WAITFORONE) | ((done && (flags & MSG_WAITFORONE)) ? MSG_DONTWAIT : 0);
        ssize_t r = sock_recv(s, vec[i].msg_hdr.msg_iov, (int)vec[i].msg_hdr.msg_iovlen, i ? f | MSG_DONTWAIT : f);
        if (r < 0) {
            if (!done) {
                eta_obj_put(&s->obj);
                return -1;
            }
            break;
        }
        vec[i].msg_len = (unsigned)r;
        vec[i].msg_hdr.msg_namelen = 0;
        vec[i].msg_hdr.msg_controllen = 0;
        vec[i].msg_hdr.msg_flags = 0;
        done++;
        if (r == 0)
            break;
    }
    eta_obj_unref(&s->obj);
    return done;
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

ETA_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags, __CONST_SOCKADDR_ARG addr_arg,
                          socklen_t alen)
{
    const struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s)) {
        if (addr)
            eta_warn_datagrams_to_ppe(fd, addr, alen);
        return real_sendto(fd, buf, len, flags, addr, alen);
    }
    struct iovec v = {(void *)buf, len};
    ssize_t r = sock_send(s, &v, 1, flags, -1, NULL, 0); /* a connected stream ignores the address */
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s))
        return real_writev(fd, iov, cnt);
    ssize_t r = sock_send(s, iov, cnt, 0, -1, NULL, 0);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s)) {
        if (ETA_UNLIKELY(msg && msg->msg_controllen)) { /* passing sockets (pass.c) */
            if (eta_passes_accelerated(msg))
                return -1;
            ssize_t r = real_sendmsg(fd, msg, flags);
            if (r < 0)
                eta_pass_withdraw(msg);
            return r;
        }
        return real_sendmsg(fd, msg, flags);
    }
    if (uptr_bad(msg, sizeof *msg)) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    ssize_t r = sock_send(s, msg->msg_iov, (int)msg->msg_iovlen, flags, -1, NULL, 0);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
    struct eta_sock *s = accel(fd);
    if (ETA_LIKELY(!s)) {
        unsigned n = vlen;
        for (unsigned i = 0; vec && i < vlen; i++)
            if (ETA_UNLIKELY(vec[i].msg_hdr.msg_controllen) && eta_passes_accelerated(&vec[i].msg_hdr)) {
                if (i == 0)
                    return -1;
                n = i; /* the messages before it go, as the kernel would */
                break;
            }
        int r = real_sendmmsg(fd, vec, n, flags);
        for (unsigned i = r < 0 ? 0 : (unsigned)r; vec && i < n; i++)
            if (ETA_UNLIKELY(vec[i].msg_hdr.msg_controllen))
                eta_pass_withdraw(&vec[i].msg_hdr); /* not sent: not in flight (pass.c) */
        return r;
    }
    if (vlen && uptr_bad(vec, (size_t)vlen * sizeof *vec)) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    int done = 0;
    for (unsigned i = 0; i < vlen; i++) {
        ssize_t r = sock_send(s, vec[i].msg_hdr.msg_iov, (int)vec[i].msg_hdr.msg_iovlen, flags, -1, NULL, 0);
        if (r < 0) {
            if (!done) {
                eta_obj_put(&s->obj);
                return -1;
            }
            break;
        }
        vec[i].msg_len = (unsigned)r;
        done++;
    }
    eta_obj_unref(&s->obj);
    return done;
}

static ssize_t sendfile_impl(int out_fd, int in_fd, off_t *offset, size_t count)
{
    struct eta_sock *s = accel(out_fd);
    if (ETA_LIKELY(!s)) {
        struct eta_sock *in = accel(in_fd);
        if (in) { /* the kernel cannot read a PPE socket */
            eta_obj_put(&in->obj);
            return eta_bypass_refused("sendfile", in_fd, 2);
        }
        return real_sendfile(out_fd, in_fd, offset, count);
    }
    ssize_t r = sock_send(s, NULL, 0, 0, in_fd, offset, count);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t eta_sendfile_export(int out_fd, int in_fd, off_t *offset, size_t count) __asm__("sendfile");
ETA_EXPORT ssize_t eta_sendfile_export(int out_fd, int in_fd, off_t *offset, size_t count)
{
    return sendfile_impl(out_fd, in_fd, offset, count);
}

ETA_EXPORT ssize_t eta_sendfile64_export(int out_fd, int in_fd, off_t *offset, size_t count) __asm__("sendfile64");
ETA_EXPORT ssize_t eta_sendfile64_export(int out_fd, int in_fd, off_t *offset, size_t count)
{
    return sendfile_impl(out_fd, in_fd, offset, count);
}

/* _FORTIFY_SOURCE builds (Debian's) call these instead of read/recv. */
extern void __chk_fail(void) __attribute__((noreturn));

ETA_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen);
ETA_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
    if (len > buflen)
        __chk_fail();
    return read(fd, buf, len);
}

ETA_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ETA_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
    if (len > buflen)
        __chk_fail();
    return recv(fd, buf, len, flags);
}

ETA_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags, struct sockaddr *addr,
                                  socklen_t *alen);
ETA_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags, struct sockaddr *addr,
                                  socklen_t *alen)
{
    if (len > buflen)
        __chk_fail();
    return recvfrom(fd, buf, len, flags, addr, alen);
}
