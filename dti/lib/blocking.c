/* libdti layer 4, public calls: the blocking layer (dti_socket, dti_accept,
 * dti_connect, ..., dti_recv_wait, dti_recv_posted, dti_send_all), built on
 * the queues' blocking round trip (queue.h: DTI_SYNC_PREP, dti__run_sync). */
#include "api.h"

#include <errno.h>
#include <string.h>

int dti_socket(dti_ctx_t *c)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_socket(c, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_bind(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *a)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_bind(c, s, a, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_listen(dti_ctx_t *c, dti_sock_t s, int backlog)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_listen(c, s, backlog, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

static int wait_ready(dti_ctx_t *c, dti_sock_t s, uint32_t mask, uint64_t deadline);
static uint64_t deadline_of(int timeout_ms);

/* Takes one connection without leaving a waiting accept behind in the
 * engine: non-waiting accepts, sleeping on the listener's POLLIN between
 * them. Several threads may block in dti_accept() on one listener. */
int dti_accept(dti_ctx_t *c, dti_sock_t l, struct dti_addr *peer, int timeout_ms)
{
    uint64_t deadline = deadline_of(timeout_ms);
    for (;;) {
        uint64_t ud = dti__next_ud(c);
        struct dti_cqe e;
        int prc;
        DTI_SYNC_PREP(prc, c, dti_prep_accept(c, l, 1, 0, ud));
        int rc = dti__run_sync(c, prc, ud, &e, -1);
        if (rc > 0) {
            if (peer)
                dti_getpeername(c, e.accepted[0], peer);
            return (int)e.accepted[0];
        }
        if (rc == 0)
            return -DTI_E_PROTOCOL;
        if (rc != -EAGAIN)
            return rc;
        rc = wait_ready(c, l, DTI_POLLIN, deadline);
        if (rc < 0)
            return rc;
    }
}

int dti_connect(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *a, int timeout_ms)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_connect(c, s, a, ud));
    return dti__run_sync(c, prc, ud, NULL, timeout_ms);
}

int dti_shutdown(dti_ctx_t *c, dti_sock_t s, int how)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_shutdown(c, s, how, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_close(dti_ctx_t *c, dti_sock_t s)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_close(c, s, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_abort(dti_ctx_t *c, dti_sock_t s)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_abort(c, s, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_setsockopt(dti_ctx_t *c, dti_sock_t s, int opt, int64_t v)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_setsockopt(c, s, opt, v, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_getsockopt(dti_ctx_t *c, dti_sock_t s, int opt, int64_t *v)
{
    uint64_t ud = dti__next_ud(c);
    struct dti_cqe e;
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_getsockopt(c, s, opt, ud));
    int rc = dti__run_sync(c, prc, ud, &e, -1);
    if (rc >= 0 && v)
        *v = e.value;
    return rc < 0 ? rc : 0;
}

int dti_digest(dti_ctx_t *c, dti_sock_t s, unsigned flags, uint32_t skip, uint32_t len, uint32_t expected,
               uint32_t *crc, int timeout_ms)
{
    uint64_t ud = dti__next_ud(c);
    struct dti_cqe e;
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_digest(c, s, flags, skip, len, expected, ud));
    int rc = dti__run_sync(c, prc, ud, &e, timeout_ms);
    if ((rc == 0 || rc == -EBADMSG) && crc)
        *crc = (uint32_t)e.value;
    return rc;
}

/* Waits until socket s shows one of `mask`, using a watch registration. */
static int wait_ready(dti_ctx_t *c, dti_sock_t s, uint32_t mask, uint64_t deadline)
{
    dti_sock_t local = s;
    struct dti_ctx *q = dti__route(c, &local);
    uint32_t before = dti__slot(local) < q->d->limits.max_sockets ? q->watch[dti__slot(local)] : 0;
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_watch(c, s, before | mask, ud));
    int rc = dti__run_sync(c, prc, ud, NULL, -1);
    if (rc < 0)
        return rc;
    for (;;) {
        uint32_t ev = dti_sock_poll(c, s);
        if (ev & (mask | DTI_POLLERR | DTI_POLLHUP))
            break;
        uint64_t now = dti__now_ns();
        if (now >= deadline) {
            rc = -ETIMEDOUT;
            break;
        }
        int ms = deadline == UINT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
        int w = dti__wait_ring(c, ms);
        if (w < 0) {
            rc = w;
            break;
        }
        /* Move events into the stash so the ring drains; the state itself
         * is read from the socket table above. */
        struct dti_cqe buf[16];
        unsigned n;
        while ((n = dti__reap_rings(c, buf, 16)) > 0)
            for (unsigned i = 0; i < n; i++)
                if (!(buf[i].kind == DTI_CQE_EVENT && buf[i].sock == s))
                    dti__stash_push(c, &buf[i]);
        if (!dti__all_alive(c, false)) {
            rc = -dti__dead_reason(c);
            break;
        }
    }
    uint64_t ud2 = dti__next_ud(c);
    int prc2;
    DTI_SYNC_PREP(prc2, c, dti_prep_watch(c, s, before, ud2));
    int rc2 = dti__run_sync(c, prc2, ud2, NULL, -1);
    return rc < 0 ? rc : (rc2 < 0 && rc2 != -DTI_E_BAD_HANDLE ? rc2 : 0);
}

static uint64_t deadline_of(int timeout_ms)
{
    return timeout_ms < 0 ? UINT64_MAX : dti__now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

/* Copies from the ring until at least min bytes came, the stream ended or
 * failed, or the deadline passed (bytes taken are returned before any of
 * those; the end or the error is then answered by the next call). */
static ssize_t recv_copy_min(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, size_t min, uint64_t deadline)
{
    size_t got = 0;
    for (;;) {
        ssize_t n = dti_recv(c, s, (uint8_t *)buf + got, len - got);
        if (n > 0) {
            got += (size_t)n;
            if (got >= min)
                return (ssize_t)got;
            continue;
        }
        if (n != -EAGAIN)
            return got ? (ssize_t)got : n;
        int rc = wait_ready(c, s, DTI_POLLIN, deadline);
        if (rc < 0)
            return got ? (ssize_t)got : rc;
    }
}

ssize_t dti_recv_wait(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, int timeout_ms)
{
    return recv_copy_min(c, s, buf, len, 1, deadline_of(timeout_ms));
}

/* Ends a post early (timeout, interruption): the engine answers the post at
 * once with what landed. Returns that completion's result. */
static int cancel_post(dti_ctx_t *c, dti_sock_t s, uint64_t ud, struct dti_cqe *e)
{
    /* No signal ends this wait: the answer says how many bytes landed, and
     * it comes at once. */
    bool intr = c->interruptible;
    c->interruptible = false;
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_recv_cancel(c, s));
    dti_submit(c);
    int w = dti_wait_cqe(c, ud, e, -1);
    c->interruptible = intr;
    return w == 1 ? e->res : w;
}

/* Posts [buf, buf + len) for at least min bytes and waits for the answer
 * (on timeout or interruption: cancels, and returns what landed). */
static ssize_t post_and_wait(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, size_t min, int timeout_ms)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_recv_post(c, s, buf, (uint32_t)len, (uint32_t)(min < len ? min : len), ud));
    if (prc < 0)
        return prc;
    dti_submit(c);
    struct dti_cqe e;
    int w = dti_wait_cqe(c, ud, &e, timeout_ms);
    if (w == 0 || (w < 0 && dti__all_alive(c, false))) {
        /* Gave up waiting: cancel, and learn how many bytes already landed
         * (they count: a byte the engine wrote is never offered again). */
        int r = cancel_post(c, s, ud, &e);
        if (r > 0)
            return r;
        if (r != -ECANCELED)
            return r;
        return w == 0 ? -ETIMEDOUT : w;
    }
    if (w < 0)
        return w;
    if (e.res == -EOPNOTSUPP) {
        c->d->post_refused = true; /* counted by the engine (post_fallbacks) */
        return recv_copy_min(c, s, buf, len, min, deadline_of(timeout_ms));
    }
    return e.res;
}

/* Posts what is still to come: the bytes the ring already holds are copied
 * here first (a read of shared memory: no round trip, no wakeup), as the
 * shim's reads do. A post for bytes that are already there made the engine
 * write them with a system call on its own core and wake this thread for
 * them: on a stream the program reads more slowly than it arrives, every
 * read (dti/README.md "Posted receive into the program's memory"). */
ssize_t dti_recv_posted(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, size_t min, int timeout_ms)
{
    if (len > (1u << 30))
        len = 1u << 30;
    if (min == 0)
        min = 1;
    if (min > len)
        min = len;
    if (len < DTI_RECV_POST_MIN || c->d->post_refused)
        return recv_copy_min(c, s, buf, len, min, deadline_of(timeout_ms));
    size_t got = 0;
    ssize_t n = dti_recv(c, s, buf, len);
    if (n > 0) {
        got = (size_t)n;
        if (got >= min)
            return (ssize_t)got;
    } else if (n != -EAGAIN) {
        return n; /* end of stream, the socket's error, a post already out */
    }
    ssize_t r = len - got < DTI_RECV_POST_MIN /* the rest is too small to post */
                    ? recv_copy_min(c, s, (uint8_t *)buf + got, len - got, min - got, deadline_of(timeout_ms))
                    : post_and_wait(c, s, (uint8_t *)buf + got, len - got, min - got, timeout_ms);
    if (r > 0)
        return (ssize_t)got + r;
    return got ? (ssize_t)got : r; /* bytes taken count; the end or the error is answered next time */
}

ssize_t dti_send_all(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = deadline_of(timeout_ms);
    size_t done = 0;
    while (done < len) {
        ssize_t n = dti_send(c, s, (const uint8_t *)buf + done, len - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n != -EAGAIN)
            return n;
        int rc = wait_ready(c, s, DTI_POLLOUT, deadline);
        if (rc < 0)
            return rc;
    }
    return (ssize_t)done;
}
