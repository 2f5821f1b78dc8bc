/* Receiving: the general receive every read falls back to, posted reads
 * (the engine writes into the program's buffer), recvfrom, readv, recvmsg,
 * recvmmsg and the _FORTIFY_SOURCE variants of read, recv and recvfrom. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io.h"
#include "real.h"
#include "pass_fds.h"
#include "udp.h"

/* dti_recv() with the recoverable copy: borrow, copy, release. A copy that
 * faults releases nothing (the bytes stay readable): -EFAULT. */
ssize_t eta_recv_copy(dti_ctx_t *c, dti_sock_t h, void *buf, size_t len)
{
    struct dti_iov piece[2];
    ssize_t n = dti_recv_borrow(c, h, piece);
    if (n <= 0 || len == 0)
        return n < 0 ? n : 0;
    size_t take = len < (size_t)n ? len : (size_t)n;
    size_t first = take < piece[0].len ? take : piece[0].len;
    if (eta_ucopy(buf, piece[0].base, first) != 0 ||
        (take > first && eta_ucopy((char *)buf + first, piece[1].base, take - first) != 0))
        return -EFAULT;
    int rc = dti_recv_release(c, h, take);
    return rc < 0 ? rc : (ssize_t)take;
}

static bool readable(void *arg)
{
    struct eta_sock *s = arg;
    dti_ctx_t *c = eta_ctx();
    return !c || (eta_sock_events(c, s) & (POLLIN | POLLERR | POLLHUP | POLLRDHUP));
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
        struct eta_sig_mark now = eta_sig_mark_now(); /* signals do not end it: each round from now */
        int w = eta_wait(c, post_answered, s, 0, -1, &now);
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
                           struct eta_sig_mark *since, bool *cut)
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
    eta_sig_test_hook();
    int w = eta_wait(c, post_answered_or_shut, s, deadline, -1, since);
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
ssize_t eta_sock_recv(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
    if (s->dgram)
        return eta_udp_recv(-1, s, iov, iovcnt, flags, NULL, NULL, NULL, NULL, NULL);
    struct eta_sig_mark since = eta_sig_mark_now(); /* the call began: signals from here on count */
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
        struct dti_iov piece[2];
        ssize_t n;
        if (simple) { /* one buffer, bytes taken: libdti copies and releases in one call */
            n = eta_recv_copy(c, s->h, (char *)iov[0].iov_base + got, want - got);
            if (n == -EFAULT)
                return got ? (ssize_t)got : fail(EFAULT); /* nothing of this copy consumed */
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
                if (!eta_ucopy_iov(iov, iovcnt, got, piece[0].base, first, true) ||
                    (take > first && !eta_ucopy_iov(iov, iovcnt, got + first, piece[1].base, take - first, true)))
                    return got ? (ssize_t)got : fail(EFAULT); /* nothing of this copy consumed */
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
        /* After shutdown(SHUT_RD) what is queued is still read (the engine
         * ACKs and queues what arrives, as Linux's tcp_recvmsg reads it);
         * end of stream only once the queue is empty. Returning 0 before
         * left those bytes unreadable, and close() then reset the
         * connection for unread data instead of sending a FIN. */
        if (atomic_load_explicit(&s->shut_rd, memory_order_relaxed))
            return (ssize_t)got;
        if (got && !waitall)
            return (ssize_t)got;
        if (nonblock)
            return got ? (ssize_t)got : fail(EAGAIN);
        if (!deadline && s->rcvtimeo_ms >= 0)
            deadline = deadline_after(s->rcvtimeo_ms);
        if (postable && want - got >= DTI_RECV_POST_MIN) {
            bool cut = false;
            ssize_t r = recv_posted(c, s, (char *)iov[0].iov_base + got, want - got, waitall ? want - got : 1,
                                    deadline, &since, &cut);
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
        eta_sig_test_hook();
        int w = eta_wait(c, readable, s, deadline, -1, &since);
        if (w == -ETIMEDOUT)
            return got ? (ssize_t)got : fail(EAGAIN);
        if (w == -EINTR)
            return got ? (ssize_t)got : fail(EINTR);
        if (w == -EPIPE)
            return got ? (ssize_t)got : fail(ECONNRESET);
    }
}


ETA_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, __SOCKADDR_ARG addr_arg, socklen_t *alen)
{
    struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s))
        return real_recvfrom(fd, buf, len, flags, addr, alen);
    if (addr && alen && !uptr_readable(alen, sizeof *alen)) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    struct iovec v = {buf, len};
    if (s->dgram) {
        ssize_t d = eta_udp_recv(fd, s, &v, 1, flags, addr, alen, NULL, NULL, NULL);
        eta_obj_put(&s->obj);
        return d;
    }
    ssize_t r = eta_sock_recv(s, &v, 1, flags);
    eta_obj_put(&s->obj);
    static const socklen_t none = 0; /* a TCP socket reports no source address */
    if (r >= 0 && addr && alen && !uput(alen, &none, sizeof none))
        return fail(EFAULT); /* as the kernel's put_user after the bytes were taken */
    return r;
}

ETA_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s))
        return real_readv(fd, iov, cnt);
    ssize_t r = s->dgram ? eta_udp_recv(fd, s, iov, cnt, 0, NULL, NULL, NULL, NULL, NULL) : eta_sock_recv(s, iov, cnt, 0);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s)) {
        ssize_t r = real_recvmsg(fd, msg, flags);
        if (ETA_UNLIKELY(r >= 0 && msg->msg_controllen)) /* sockets passed to us (pass_fds.c) */
            eta_claim_passed(msg);
        return r;
    }
    struct msghdr m;
    if (uptr_bad(msg, sizeof *msg) || eta_ucopy(&m, msg, sizeof m) != 0) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    if (s->dgram) {
        int mf = 0;
        socklen_t nl = m.msg_name ? m.msg_namelen : 0;
        size_t cl = m.msg_controllen; /* in: the room; out: the control messages written (udp.c) */
        ssize_t d = eta_udp_recv(fd, s, m.msg_iov, (int)m.msg_iovlen, flags, m.msg_name, m.msg_name ? &nl : NULL, &mf,
                                 m.msg_control, &cl);
        eta_obj_put(&s->obj);
        if (d >= 0) {
            m.msg_namelen = nl;
            m.msg_controllen = cl;
            m.msg_flags = mf;
            if (!uput(&msg->msg_namelen, &m.msg_namelen, sizeof m.msg_namelen) ||
                !uput(&msg->msg_controllen, &m.msg_controllen, sizeof m.msg_controllen) ||
                !uput(&msg->msg_flags, &m.msg_flags, sizeof m.msg_flags))
                return fail(EFAULT);
        }
        return d;
    }
    ssize_t r = eta_sock_recv(s, m.msg_iov, (int)m.msg_iovlen, flags);
    eta_obj_put(&s->obj);
    if (r >= 0) {
        m.msg_namelen = 0;
        m.msg_controllen = 0;
        m.msg_flags = 0;
        if (!uput(&msg->msg_namelen, &m.msg_namelen, sizeof m.msg_namelen) ||
            !uput(&msg->msg_controllen, &m.msg_controllen, sizeof m.msg_controllen) ||
            !uput(&msg->msg_flags, &m.msg_flags, sizeof m.msg_flags))
            return fail(EFAULT); /* a msghdr the program cannot have written either */
    }
    return r;
}

ETA_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags, struct timespec *timeout)
{
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s)) {
        int n = real_recvmmsg(fd, vec, vlen, flags, timeout);
        for (int i = 0; i < n; i++) /* sockets passed to us, as recvmsg claims them (pass_fds.c) */
            if (ETA_UNLIKELY(vec[i].msg_hdr.msg_controllen))
                eta_claim_passed(&vec[i].msg_hdr);
        return n;
    }
    if (vlen && !uptr_readable(vec, (size_t)vlen * sizeof *vec)) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    /* A stream has no message boundaries: fill entries while bytes are there. */
    int done = 0;
    for (unsigned i = 0; i < vlen; i++) {
        int f = (flags & ~MSG_WAITFORONE) | ((done && (flags & MSG_WAITFORONE)) ? MSG_DONTWAIT : 0);
        /* A UDP socket: one datagram per entry, its sender and MSG_TRUNC. */
        int mf = 0;
        socklen_t nl = vec[i].msg_hdr.msg_name ? vec[i].msg_hdr.msg_namelen : 0;
        size_t cl = vec[i].msg_hdr.msg_controllen;
        ssize_t r = s->dgram ? eta_udp_recv(fd, s, vec[i].msg_hdr.msg_iov, (int)vec[i].msg_hdr.msg_iovlen,
                                            i ? f | MSG_DONTWAIT : f, vec[i].msg_hdr.msg_name,
                                            vec[i].msg_hdr.msg_name ? &nl : NULL, &mf, vec[i].msg_hdr.msg_control, &cl)
                             : eta_sock_recv(s, vec[i].msg_hdr.msg_iov, (int)vec[i].msg_hdr.msg_iovlen,
                                             i ? f | MSG_DONTWAIT : f);
        if (r < 0) {
            if (!done) {
                eta_obj_put(&s->obj);
                return -1;
            }
            break;
        }
        /* the answers, stored as the kernel's put_user stores them: a vector
         * the program cannot write is EFAULT (the bytes were taken, as there) */
        struct mmsghdr out = vec[i];
        out.msg_len = (unsigned)r;
        out.msg_hdr.msg_namelen = s->dgram ? nl : 0;
        out.msg_hdr.msg_controllen = s->dgram ? cl : 0;
        out.msg_hdr.msg_flags = s->dgram ? mf : 0;
        if (!uput(&vec[i], &out, sizeof out)) {
            if (!done) {
                eta_obj_put(&s->obj);
                return (int)fail(EFAULT);
            }
            break;
        }
        done++;
        if (r == 0 && !s->dgram) /* end of stream (an empty datagram is not) */
            break;
    }
    eta_obj_unref(&s->obj);
    return done;
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

