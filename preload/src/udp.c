/* UDP sockets on the PPE: the data path of an accelerated AF_INET SOCK_DGRAM
 * socket (sock.c decides which ones: preload/README.md "UDP"). Receive takes
 * the oldest datagram in place from the socket's receive ring (libdti's
 * dti_dgram_borrow: MARS's record, no copy in the engine) and copies it into
 * the program's buffers with the recoverable copy; send writes one record
 * into the send ring and waits for the engine's SEND_DGRAMS answer (its
 * EMSGSIZE, ENETUNREACH... are the call's). Blocking, MSG_DONTWAIT,
 * MSG_PEEK, MSG_TRUNC (in and out), SO_RCVTIMEO, as Linux's UDP. */
#include <netinet/in.h>
#include <sched.h>
#include <string.h>

#include "io.h"
#include "signals.h"
#include "udp.h"

static struct dti_addr to_dti(const struct sockaddr *a)
{
    struct sockaddr_in in;
    memcpy(&in, a, sizeof in);
    return (struct dti_addr){ntohl(in.sin_addr.s_addr), ntohs(in.sin_port)};
}

bool eta_udp_kind(int domain, int type, int protocol)
{
    return domain == AF_INET && (type & 0xf) == SOCK_DGRAM && (protocol == 0 || protocol == IPPROTO_UDP);
}

/* One reader and one writer of a socket's rings at a time: a second thread
 * waits its turn (a receive or a send of one datagram: bounded). */
static void take_turn(_Atomic uint32_t *busy)
{
    uint32_t free_ = 0;
    for (unsigned spins = 0; !atomic_compare_exchange_weak(busy, &free_, 1); spins++) {
        free_ = 0;
        if (spins > 64)
            sched_yield();
    }
}

static void end_turn(_Atomic uint32_t *busy) { atomic_store_explicit(busy, 0, memory_order_release); }

static bool dgram_readable(void *arg)
{
    struct eta_sock *s = arg;
    dti_ctx_t *c = eta_ctx();
    return !c || (eta_sock_events(c, s) & (POLLIN | POLLERR));
}

static void put_addr(const struct dti_dgram *h, struct sockaddr *from, socklen_t *fromlen)
{
    if (!from || !fromlen)
        return;
    struct dti_addr a = {h->src_ip, h->src_port};
    socklen_t cap = *fromlen;
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(a.port), .sin_addr = {htonl(a.ip)}};
    socklen_t n = cap < (socklen_t)sizeof in ? cap : (socklen_t)sizeof in;
    (void)uput(from, &in, (size_t)n);
    const socklen_t full = sizeof in;
    (void)uput(fromlen, &full, sizeof full);
}

ssize_t eta_udp_recv(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags, struct sockaddr *from,
                     socklen_t *fromlen, int *msg_flags)
{
    struct eta_sig_mark since = eta_sig_mark_now();
    if (eta_sock_orphaned(s) || atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        return fail(ECONNREFUSED);
    if (flags & MSG_OOB)
        return fail(EOPNOTSUPP);
    if (iovcnt > 0 && iovcnt <= IOV_MAX && iov_fault(iov, iovcnt))
        return fail(EFAULT);
    bool bad;
    size_t want = iov_total(iov, iovcnt, &bad);
    if (bad)
        return fail(EINVAL);
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return fail(ECONNREFUSED);
    const bool nonblock = atomic_load_explicit(&s->nonblock, memory_order_relaxed) || (flags & MSG_DONTWAIT);
    uint64_t deadline = 0;
    for (;;) {
        take_turn(&s->dgram_rx_busy);
        struct dti_dgram h;
        const void *payload = NULL;
        ssize_t n = dti_dgram_borrow(c, s->h, &h, &payload);
        if (n >= 0) {
            size_t take = want < h.len ? want : h.len;
            if (take && !eta_ucopy_iov(iov, iovcnt, 0, (void *)(uintptr_t)payload, take, true)) {
                end_turn(&s->dgram_rx_busy);
                return fail(EFAULT); /* the datagram stays */
            }
            put_addr(&h, from, fromlen);
            if (!(flags & MSG_PEEK))
                (void)dti_dgram_consume(c, s->h);
            end_turn(&s->dgram_rx_busy);
            if (msg_flags)
                *msg_flags = h.len > want ? MSG_TRUNC : 0;
            atomic_fetch_add_explicit(&s->rx_taken, 1, memory_order_relaxed);
            /* MSG_TRUNC asked: the datagram's real length, as Linux's UDP. */
            return (flags & MSG_TRUNC) ? (ssize_t)h.len : (ssize_t)take;
        }
        end_turn(&s->dgram_rx_busy);
        if (n == -EAGAIN && atomic_load_explicit(&s->shut_rd, memory_order_relaxed))
            return 0; /* shutdown(SHUT_RD): nothing waiting answers 0, as Linux's UDP */
        if (n != -EAGAIN)
            return fail(n == -EIO ? EIO : eta_errno_from_dti((int)n));
        if (nonblock)
            return fail(EAGAIN);
        if (!deadline && s->rcvtimeo_ms >= 0)
            deadline = deadline_after(s->rcvtimeo_ms);
        eta_watch(c, s, DTI_POLLIN);
        int w = eta_wait(c, dgram_readable, s, deadline, -1, &since);
        if (w == -ETIMEDOUT)
            return fail(EAGAIN);
        if (w == -EINTR)
            return fail(EINTR);
        if (w == -EPIPE)
            return fail(ECONNREFUSED);
    }
}

ssize_t eta_udp_send(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *to,
                     socklen_t tolen)
{
    /* A send never waits for ring space (the engine frees it before it answers). */
    if (eta_sock_orphaned(s) || atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        return fail(ECONNREFUSED);
    if (iovcnt > 0 && iovcnt <= IOV_MAX && iov_fault(iov, iovcnt))
        return fail(EFAULT);
    bool bad;
    size_t len = iov_total(iov, iovcnt, &bad);
    if (bad)
        return fail(EINVAL);
    if (atomic_load_explicit(&s->shut_wr, memory_order_relaxed))
        return fail_pipe(flags); /* shutdown(SHUT_WR): EPIPE (and SIGPIPE), as Linux's UDP */
    struct dti_addr dst;
    if (to) {
        if (tolen < sizeof(struct sockaddr_in) || !uptr_readable(to, sizeof(struct sockaddr_in)))
            return fail(tolen < sizeof(struct sockaddr_in) ? EINVAL : EFAULT);
        if (to->sa_family != AF_INET)
            return fail(EAFNOSUPPORT);
        dst = to_dti(to);
    }
    if (len > DTI_DGRAM_MAX)
        return fail(EMSGSIZE);
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return fail(ENETDOWN);
    const unsigned n = iovcnt > 0 ? (unsigned)iovcnt : 0; /* at most IOV_MAX (iov_total) */
    struct dti_iov pieces[n ? n : 1];
    for (unsigned i = 0; i < n; i++)
        pieces[i] = (struct dti_iov){iov[i].iov_base, iov[i].iov_len};
    struct dti_dgram_msg m = {pieces, n, to ? &dst : NULL};
    take_turn(&s->dgram_tx_busy);
    int rc = dti_dgram_sendmmsg(c, s->h, &m, 1);
    end_turn(&s->dgram_tx_busy);
    if (rc == 1) {
        atomic_fetch_add_explicit(&s->tx_committed, len, memory_order_relaxed);
        return (ssize_t)len;
    }
    return fail(rc == 0 ? EIO : eta_errno_from_dti(rc));
}
