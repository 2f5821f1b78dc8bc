/* Sending: the general send every write falls back to (also sendfile's:
 * the file's bytes land in the send ring directly), sendto, writev, sendmsg
 * and sendmmsg. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io.h"
#include "own_address.h"
#include "real.h"
#include "pass_fds.h"
#include "udp.h"


/* dti_send() with the recoverable copy: reserve, copy, commit. A copy that
 * faults commits nothing (the ring's room stays free): -EFAULT. A full
 * command queue: -EAGAIN with nothing queued, as dti_send() answers. */
ssize_t eta_send_copy(dti_ctx_t *c, dti_sock_t h, const void *buf, size_t len)
{
    struct dti_iov piece[2];
    ssize_t n = dti_send_reserve(c, h, piece);
    if (n <= 0 || len == 0)
        return n < 0 ? n : 0;
    size_t take = len < (size_t)n ? len : (size_t)n;
    size_t first = take < piece[0].len ? take : piece[0].len;
    if (eta_ucopy(piece[0].base, buf, first) != 0 ||
        (take > first && eta_ucopy(piece[1].base, (const char *)buf + first, take - first) != 0))
        return -EFAULT;
    int rc = dti_send_commit(c, h, take, 0);
    return rc < 0 ? rc : (ssize_t)take;
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

static int commit_retrying(dti_ctx_t *c, dti_sock_t h, size_t n, unsigned flags)
{
    uint64_t since = 0;
    int rc;
    while ((rc = dti_send_commit(c, h, n, flags)) == -EAGAIN)
        if (queue_stuck(c, &since))
            return -ECONNRESET;
    return rc;
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
    if (s->dgram) /* write, send, writev on a UDP socket: one datagram to its peer (sendfile: refused) */
        return in_fd >= 0 ? fail(EINVAL) : eta_udp_send(-1, s, iov, iovcnt, flags, NULL, 0, NULL, 0);
    struct eta_sig_mark since = eta_sig_mark_now(); /* the call began: signals from here on count */
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
            ssize_t k = eta_send_copy(c, s->h, (const char *)iov[0].iov_base + sent, total - sent);
            if (k == -EFAULT)
                return sent ? (ssize_t)sent : fail(EFAULT); /* nothing of this copy queued */
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
            if (!eta_ucopy_iov(iov, iovcnt, sent, piece[0].base, first, false) ||
                (take > first && !eta_ucopy_iov(iov, iovcnt, sent + first, piece[1].base, take - first, false)))
                return sent ? (ssize_t)sent : fail(EFAULT); /* nothing of this copy queued */
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
        int w = eta_wait_watch(c, writable_or_event, &sw, deadline, -1, &since, s, DTI_POLLOUT);
        if (w == -ETIMEDOUT)
            return sent ? (ssize_t)sent : fail(EAGAIN);
        if (w == -EINTR)
            return sent ? (ssize_t)sent : fail(EINTR);
        if (w == -EPIPE)
            return sent ? (ssize_t)sent : fail_pipe(flags);
    }
    return (ssize_t)sent;
}

/* The general send; then, bytes having gone through libdti's reserve and
 * commit (writev, sendmsg, sendmmsg, sendfile, sendto, and what the fast
 * paths leave it), the socket's send view is taken again where the send
 * ring grew since it was taken (or taken a first time): those writes may
 * have grown the ring (dti/README.md "Send rings that grow"), and a view
 * taken before keeps the old size, unused (busy) until it is taken again:
 * until then libdti sends every write the general way and readiness asks
 * dti_sock_poll(). */
ssize_t eta_sock_send(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags, int in_fd,
                      off_t *offset, size_t file_count)
{
    ssize_t r = sock_send(s, iov, iovcnt, flags, in_fd, offset, file_count);
    if (r > 0 && !s->dgram) {
        dti_ctx_t *c = eta_ctx_cached();
        if (c)
            eta_take_tx_view(c, s);
    }
    return r;
}

ETA_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags, __CONST_SOCKADDR_ARG addr_arg,
                          socklen_t alen)
{
    const struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s) && addr)
        s = eta_udp_adopt(fd, addr, alen); /* a UDP candidate the PPE takes now (sock.c) */
    if (ETA_LIKELY(!s)) {
        if (addr)
            eta_warn_datagrams_to_ppe(fd, addr, alen);
        return real_sendto(fd, buf, len, flags, addr, alen);
    }
    struct iovec v = {(void *)buf, len};
    if (s->dgram) {
        ssize_t d = eta_udp_send(fd, s, &v, 1, flags, addr, alen, NULL, 0);
        eta_obj_put(&s->obj);
        return d;
    }
    ssize_t r = eta_sock_send(s, &v, 1, flags, -1, NULL, 0); /* a connected stream ignores the address */
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s))
        return real_writev(fd, iov, cnt);
    ssize_t r = eta_sock_send(s, iov, cnt, 0, -1, NULL, 0);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s) && msg && uptr_readable(msg, sizeof *msg) && msg->msg_name && !msg->msg_controllen)
        s = eta_udp_adopt(fd, msg->msg_name, msg->msg_namelen); /* a UDP candidate the PPE takes now */
    if (ETA_LIKELY(!s)) {
        /* passing sockets (pass_fds.c); a msghdr the kernel cannot read: its EFAULT */
        if (ETA_UNLIKELY(msg && uptr_readable(msg, sizeof *msg) && msg->msg_controllen)) {
            if (eta_passes_accelerated(msg))
                return -1;
            ssize_t r = real_sendmsg(fd, msg, flags);
            if (r < 0)
                eta_pass_withdraw(msg);
            return r;
        }
        return real_sendmsg(fd, msg, flags);
    }
    struct msghdr m;
    if (uptr_bad(msg, sizeof *msg) || eta_ucopy(&m, msg, sizeof m) != 0) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    if (s->dgram) {
        /* Ancillary data: IP_PKTINFO naming our address; what is not carried
         * (UDP_SEGMENT, IP_TOS...) is refused rather than ignored (udp.c). */
        ssize_t d = eta_udp_send(fd, s, m.msg_iov, (int)m.msg_iovlen, flags, m.msg_name, m.msg_namelen,
                                 m.msg_control, m.msg_controllen);
        eta_obj_put(&s->obj);
        return d;
    }
    ssize_t r = eta_sock_send(s, m.msg_iov, (int)m.msg_iovlen, flags, -1, NULL, 0);
    eta_obj_put(&s->obj);
    return r;
}

ETA_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
    struct eta_sock *s = io_accel(fd);
    if (ETA_LIKELY(!s) && vec && vlen && uptr_readable(vec, sizeof *vec) && vec[0].msg_hdr.msg_name &&
        !vec[0].msg_hdr.msg_controllen)
        s = eta_udp_adopt(fd, vec[0].msg_hdr.msg_name, vec[0].msg_hdr.msg_namelen);
    if (ETA_LIKELY(!s)) {
        unsigned n = vlen;
        if (vec && vlen && !uptr_readable(vec, (size_t)vlen * sizeof *vec))
            return real_sendmmsg(fd, vec, n, flags); /* the kernel's EFAULT */
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
                eta_pass_withdraw(&vec[i].msg_hdr); /* not sent: not in flight (pass_fds.c) */
        return r;
    }
    if (vlen > IOV_MAX)
        vlen = IOV_MAX; /* UIO_MAXIOV: Linux's sendmmsg sends at most that many */
    if (vlen && !uptr_readable(vec, (size_t)vlen * sizeof *vec)) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    if (s->dgram) { /* UDP: datagrams for the engine in batches (udp_mmsg.c) */
        int d = eta_udp_sendmmsg(fd, s, vec, vlen, flags);
        eta_obj_unref(&s->obj);
        return d;
    }
    int done = 0;
    for (unsigned i = 0; i < vlen; i++) {
        const struct msghdr *h = &vec[i].msg_hdr;
        ssize_t r = eta_sock_send(s, h->msg_iov, (int)h->msg_iovlen, flags, -1, NULL, 0);
        if (r < 0) {
            if (!done) {
                eta_obj_put(&s->obj);
                return -1;
            }
            break;
        }
        unsigned len = (unsigned)r;
        if (!uput(&vec[i].msg_len, &len, sizeof len)) { /* as the kernel's put_user: EFAULT (the bytes went) */
            if (!done) {
                eta_obj_put(&s->obj);
                return (int)fail(EFAULT);
            }
            break;
        }
        done++;
    }
    eta_obj_unref(&s->obj);
    return done;
}

