/* Socket calls: accept and accept4, and the listener stash that keeps the
 * connections one round trip took beyond the one asked for. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>

#include "accept.h"
#include "attach.h"
#include "config.h"
#include "decide.h"
#include "epoll.h"
#include "fdtable.h"
#include "real.h"
#include "shim.h"
#include "sock.h"
#include "sock6.h"
#include "sockobj.h"
#include "wait.h"

/* ---- accept ------------------------------------------------------------ */

/* Listener stash: accept takes up to DTI_ACCEPT_MAX connections per round
 * trip; the extras wait here. Kept beside the socket object. */
struct stash {
    _Atomic int lock;
    unsigned n;
    dti_sock_t h[DTI_ACCEPT_MAX];
};
#define STASH_SLOTS 4096
static struct stash stashes[STASH_SLOTS];
static struct stash *stash_of(struct eta_sock *s)
{
    return &stashes[((uintptr_t)s / 256) % STASH_SLOTS];
}

/* Set once this process forked or is a fork child: its listeners may be
 * shared with other processes, which must not find connections hidden in
 * this one's stash, so accept takes one at a time. */
bool eta_listeners_shared;

/* In a fork child: connections in the parent's stash were accepted by the
 * parent, not by the program; the child gives up its holds on them. */
void eta_stash_after_fork_child(void)
{
    dti_ctx_t *c = NULL;
    for (unsigned k = 0; k < STASH_SLOTS; k++) {
        struct stash *st = &stashes[k];
        atomic_store(&st->lock, 0);
        for (unsigned i = 0; i + 1 < st->n; i += 2) {
            if (!c && !(c = eta_ctx()))
                break;
            if (dti_prep_close(c, st->h[i + 1], 0) == 0)
                dti_submit(c);
        }
        st->n = 0;
    }
}
static void stash_lock(struct stash *st)
{
    while (atomic_exchange_explicit(&st->lock, 1, memory_order_acquire))
        ;
}
static void stash_unlock(struct stash *st)
{
    atomic_store_explicit(&st->lock, 0, memory_order_release);
}

/* Drops what the stash holds for listener s without telling any PPE (the
 * one that made those connections went). */
void eta_stash_forget(struct eta_sock *s)
{
    struct stash *st = stash_of(s);
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n;) {
        if (st->h[i] == s->h) {
            memmove(&st->h[i], &st->h[i + 2], (st->n - i - 2) * sizeof st->h[0]);
            st->n -= 2;
        } else {
            i += 2;
        }
    }
    stash_unlock(st);
}

/* exec: the connections listener s's stash holds (copied, not taken), and
 * putting one back in the new image. */
unsigned eta_stash_export(struct eta_sock *s, dti_sock_t *out, unsigned max)
{
    struct stash *st = stash_of(s);
    unsigned n = 0;
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n && n < max; i += 2)
        if (st->h[i] == s->h)
            out[n++] = st->h[i + 1];
    stash_unlock(st);
    return n;
}

bool eta_stash_import(struct eta_sock *s, dti_sock_t h)
{
    struct stash *st = stash_of(s);
    stash_lock(st);
    bool room = st->n + 2 <= DTI_ACCEPT_MAX;
    if (room) {
        st->h[st->n++] = s->h;
        st->h[st->n++] = h;
    }
    stash_unlock(st);
    return room;
}

/* Connections the PPE already handed to this process for listener s that
 * accept has not returned yet. They are invisible in the socket table's
 * accept_ready, so readiness (poll, epoll, select) must count them: a server
 * that accepts one connection per wakeup (memcached) would otherwise never
 * hear of them again. */
unsigned eta_stash_count(struct eta_sock *s)
{
    struct stash *st = stash_of(s);
    if (!__atomic_load_n(&st->n, __ATOMIC_RELAXED))
        return 0;
    unsigned n = 0;
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n; i += 2)
        n += st->h[i] == s->h;
    stash_unlock(st);
    return n;
}

/* One connection from the PPE half, or -EAGAIN. Stash entries carry the
 * listener's handle in the top of a pair so slots shared by two listeners
 * (hash collision) are told apart. */
static int take_accepted(dti_ctx_t *c, struct eta_sock *s, dti_sock_t *out)
{
    struct stash *st = stash_of(s);
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n; i += 2) {
        if (st->h[i] == s->h) {
            *out = st->h[i + 1];
            memmove(&st->h[i], &st->h[i + 2], (st->n - i - 2) * sizeof st->h[0]);
            st->n -= 2;
            stash_unlock(st);
            return 0;
        }
    }
    stash_unlock(st);
    struct dti_sock_info ss;
    if (dti_sock_status(c, s->h, &ss) == 0 && ss.accept_ready == 0)
        return -EAGAIN;
    uint64_t ud = 0x4000000000000000ull | s->h;
    unsigned batch = eta_listeners_shared ? 1 : DTI_ACCEPT_MAX / 2;
    int rc = dti_prep_accept(c, s->h, batch, 0, ud);
    if (rc == -EAGAIN) {
        eta_pump(c);
        rc = dti_prep_accept(c, s->h, batch, 0, ud);
    }
    struct dti_cqe cqe;
    if (rc == 0 && (rc = dti_submit(c)) >= 0)
        rc = dti_wait_cqe(c, ud, &cqe, -1);
    if (rc < 0)
        return rc;
    if (cqe.res <= 0)
        return cqe.res < 0 ? cqe.res : -EAGAIN;
    *out = cqe.accepted[0];
    if (cqe.res > 1) {
        stash_lock(st);
        for (int i = 1; i < cqe.res && st->n + 2 <= DTI_ACCEPT_MAX; i++) {
            st->h[st->n++] = s->h;
            st->h[st->n++] = cqe.accepted[i];
        }
        stash_unlock(st);
        eta_epoll_touch(s); /* readable while the stash holds connections: no engine event says so */
    }
    return 0;
}

static bool accept_ready(void *arg)
{
    struct eta_sock *s = arg;
    struct stash *st = stash_of(s);
    if (__atomic_load_n(&st->n, __ATOMIC_RELAXED))
        return true;
    dti_ctx_t *c = eta_ctx();
    return c && (eta_sock_events(c, s) & (POLLIN | POLLERR | POLLHUP));
}

/* Wraps an accepted PPE connection in a placeholder kernel socket. */
static int install_accepted(dti_ctx_t *c, int lfd, struct eta_sock *l, dti_sock_t h, struct sockaddr *addr,
                            socklen_t *len, int flags)
{
    const bool v6 = l->v6;
    int fd = real_socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | (flags & SOCK_CLOEXEC), 0);
    struct eta_sock *n = fd >= 0 && eta_fd_in_range(fd) ? eta_sock_new() : NULL;
    if (!n) {
        int err = fd < 0 ? errno : EMFILE;
        if (fd >= 0)
            real_close(fd);
        dti_prep_abort(c, h, 0);
        dti_submit(c);
        return fail(err);
    }
    n->h = h;
    n->generation = eta_generation;
    n->connect_started = true;
    n->connect_reported = true;
    n->v6 = v6;
    atomic_store(&n->nonblock, (flags & SOCK_NONBLOCK) != 0);
    eta_inherit_options(lfd, l, fd, n);
    dti_getsockname(c, h, &n->local);
    struct dti_addr peer = {0, 0};
    dti_getpeername(c, h, &peer);
    if (!v6 || eta_name6(c, h, true, addr, len) < 0) /* AF_INET6: its IPv6 peer, or v4-mapped */
        from_dti(&peer, addr, len, v6);
    eta_hmap_put(h, n);
    atomic_store(&n->state, ETA_SOCK_ACCEL);
    eta_fd_set(fd, &n->obj);
    ETA_STAT_ADD(accel_open, 1);
    ETA_STAT_ADD(accepted, 1);
    return fd;
}

bool eta_hybrid_kernel_only(struct eta_sock *s)
{
    return s->hybrid && (atomic_load_explicit(&eta_engine_dead, memory_order_relaxed) || eta_sock_orphaned(s));
}

/* What accept_kernel_half/accept_nothing return when the listener works on
 * a PPE that came back: accept starts over. */
#define ACCEPT_AGAIN (-2)

/* While the PPE is away, a wait sleeps at most until the next re-attach try
 * (ms: the caller's timeout, -1 none). */
static int cap_for_reattach(int ms)
{
    int r = eta_reattach_wait_ms();
    return r >= 0 && (ms < 0 || r < ms) ? r : ms;
}

/* After such a wait: the PPE is back and s listens on it. */
static bool back_on_ppe(struct eta_sock *s)
{
    return eta_reattach_try() && !eta_sock_orphaned(s) && eta_ctx();
}

/* accept() on the kernel half of an INADDR_ANY listener whose PPE half is
 * gone. The kernel socket is non-blocking (the shim keeps it so); a blocking
 * accept waits in poll, restarting after signals as the kernel would. */
static int accept_kernel_half(int fd, struct eta_sock *s, struct sockaddr *addr, socklen_t *len, int flags)
{
    uint64_t deadline = deadline_after(s->rcvtimeo_ms);
    for (;;) {
        if (back_on_ppe(s))
            return ACCEPT_AGAIN;
        int k = real_accept4(fd, addr, len, flags);
        if (k >= 0) {
            ETA_STAT_ADD(kernel_accepted, 1);
            eta_count(ETA_R_KERNEL_ADDR, k, "accepted by the kernel half of a hybrid listener");
            return k;
        }
        if ((errno != EAGAIN && errno != EWOULDBLOCK) || atomic_load(&s->nonblock))
            return -1;
        int ms = -1;
        if (deadline) {
            uint64_t now = eta_now_ns();
            if (now >= deadline)
                return fail(EAGAIN);
            ms = (int)((deadline - now + 999999) / 1000000);
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (real_poll(&p, 1, cap_for_reattach(ms)) < 0 && errno == EINTR && (deadline || !eta_signals_restart()))
            return -1;
    }
}

/* accept() on a listener that cannot accept any more (the PPE went, or it
 * is an orphan in a fork child) and has no kernel half: as a kernel listener
 * nobody connects to. EAGAIN when non-blocking; a blocking accept sleeps
 * until SO_RCVTIMEO (EAGAIN) or a signal (EINTR, or sleeps on when every
 * handler restarts). Never an error an event loop would retry at once. */
static int accept_nothing(struct eta_sock *s)
{
    if (back_on_ppe(s))
        return ACCEPT_AGAIN;
    if (atomic_load(&s->nonblock))
        return fail(EAGAIN);
    uint64_t deadline = deadline_after(s->rcvtimeo_ms);
    for (;;) {
        if (back_on_ppe(s))
            return ACCEPT_AGAIN;
        int ms = -1;
        if (deadline) {
            uint64_t now = eta_now_ns();
            if (now >= deadline)
                return fail(EAGAIN);
            ms = (int)((deadline - now + 999999) / 1000000);
        }
        if (real_poll(NULL, 0, cap_for_reattach(ms)) < 0 && errno == EINTR && (deadline || !eta_signals_restart()))
            return -1;
    }
}

static int accept_once(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    struct eta_sig_mark since = eta_sig_mark_now(); /* the call began: signals from here on count */
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return real_accept4(fd, addr, len, flags);
    if (atomic_load(&s->state) != ETA_SOCK_ACCEL || !s->listening) {
        bool kernel = atomic_load(&s->state) != ETA_SOCK_ACCEL;
        eta_obj_put(&s->obj);
        return kernel ? real_accept4(fd, addr, len, flags) : fail(EINVAL);
    }
    if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
        eta_obj_put(&s->obj);
        return fail(EINVAL);
    }
    if (eta_hybrid_kernel_only(s)) {
        int k = accept_kernel_half(fd, s, addr, len, flags);
        eta_obj_put(&s->obj);
        return k;
    }
    int err = usable(s, EINVAL);
    dti_ctx_t *c = err ? NULL : eta_ctx();
    if (!c) {
        int k = accept_nothing(s);
        eta_obj_put(&s->obj);
        return k;
    }
    uint64_t deadline = deadline_after(s->rcvtimeo_ms);
    bool turn_kernel = false;
    for (;;) {
        /* Alternate which half goes first so neither starves the other. */
        if (s->hybrid && turn_kernel) {
            int k = real_accept4(fd, addr, len, flags);
            if (k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                if (k >= 0) {
                    ETA_STAT_ADD(kernel_accepted, 1);
                    eta_count(ETA_R_KERNEL_ADDR, k, "accepted by the kernel half of a hybrid listener");
                }
                eta_obj_put(&s->obj);
                return k;
            }
        }
        turn_kernel = !turn_kernel;
        dti_sock_t h;
        int rc = take_accepted(c, s, &h);
        if (rc == 0) {
            atomic_fetch_add_explicit(&s->rx_taken, 1, memory_order_relaxed);
            int nfd = install_accepted(c, fd, s, h, addr, len, flags);
            eta_obj_put(&s->obj);
            return nfd;
        }
        if (rc != -EAGAIN && !eta_engine_check(dti_ctx_owner(c))) {
            int k = s->hybrid ? accept_kernel_half(fd, s, addr, len, flags) : accept_nothing(s);
            eta_obj_put(&s->obj);
            return k;
        }
        if (rc != -EAGAIN) {
            eta_obj_put(&s->obj);
            return fail(eta_errno_from_dti(rc));
        }
        if (s->hybrid && turn_kernel)
            continue; /* the kernel half has not been tried in this round */
        if (atomic_load(&s->nonblock)) {
            eta_obj_put(&s->obj);
            return fail(EAGAIN);
        }
        eta_watch(c, s, DTI_POLLIN);
        eta_sig_test_hook();
        int w = eta_wait(c, accept_ready, s, deadline, s->hybrid ? fd : -1, &since);
        if (w == -EPIPE && s->hybrid) {
            int k = accept_kernel_half(fd, s, addr, len, flags);
            eta_obj_put(&s->obj);
            return k;
        }
        if (w == -EPIPE) { /* the PPE went while we waited */
            int k = accept_nothing(s);
            eta_obj_put(&s->obj);
            return k;
        }
        if (w == -ETIMEDOUT || w == -EINTR) {
            eta_obj_put(&s->obj);
            return fail(w == -ETIMEDOUT ? EAGAIN : EINTR);
        }
    }
}

/* A blocking accept that slept across a PPE restart starts over on the new
 * PPE (the listener was made again there). */
static int do_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    int k;
    while ((k = accept_once(fd, addr, len, flags)) == ACCEPT_AGAIN)
        ;
    return k;
}

ETA_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
    return do_accept(fd, ETA_SA(addr), len, 0);
}

ETA_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
    return do_accept(fd, ETA_SA(addr), len, flags);
}

/* The connections stashed for listener s are aborted: it is closing (no one
 * can accept them any more). */
void eta_stash_abort(dti_ctx_t *c, struct eta_sock *s)
{
    struct stash *st = stash_of(s);
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n;) {
        if (st->h[i] == s->h) {
            dti_prep_abort(c, st->h[i + 1], 0);
            memmove(&st->h[i], &st->h[i + 2], (st->n - i - 2) * sizeof st->h[0]);
            st->n -= 2;
        } else {
            i += 2;
        }
    }
    stash_unlock(st);
}
