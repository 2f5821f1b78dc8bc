/* poll, ppoll, select, pselect over sets that mix accelerated sockets with
 * any kernel descriptor. Kernel descriptors go to the kernel's poll; the
 * accelerated ones are read from shared memory; when nothing is ready the
 * shim spins briefly, then sleeps in one ppoll on the kernel descriptors
 * plus the thread's DTI wait fd. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "attach.h"
#include "config.h"
#include "fdtable.h"
#include "real.h"
#include "shim.h"
#include "sockobj.h"
#include "wait.h"

/* glibc marks poll's array write-only for its fortify checks; poll reads
 * the events field, and so does the shim. (A GCC warning: clang has no such
 * group and would reject the pragma under -Werror.) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/* Per-thread scratch for the kernel half of a poll set, grown by mmap so
 * poll stays usable from signal handlers (no malloc). */
static ETA_TLS struct pollfd *scratch;
static ETA_TLS size_t scratch_cap;
static ETA_TLS bool scratch_busy;

static struct pollfd *scratch_get(size_t n)
{
    if (scratch_busy) /* re-entered from a signal handler: a private buffer */
        goto fresh;
    if (n <= scratch_cap) {
        scratch_busy = true;
        return scratch;
    }
    if (scratch)
        munmap(scratch, scratch_cap * sizeof *scratch);
    scratch_cap = (n + 255) & ~(size_t)255;
    scratch = mmap(NULL, scratch_cap * sizeof *scratch, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (scratch == MAP_FAILED) {
        scratch = NULL;
        scratch_cap = 0;
        return NULL;
    }
    scratch_busy = true;
    return scratch;
fresh:;
    void *p = mmap(NULL, n * sizeof(struct pollfd), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void scratch_put(struct pollfd *p, size_t n)
{
    if (p == scratch)
        scratch_busy = false;
    else if (p)
        munmap(p, n * sizeof *p);
}

/* Accelerated entry of a poll set. */
static bool is_accel(int fd, struct eta_sock **out)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return false;
    uint32_t st = atomic_load(&s->state);
    if (st != ETA_SOCK_ACCEL && st != ETA_SOCK_ORPHAN) {
        eta_obj_put(&s->obj);
        return false;
    }
    *out = s;
    return true;
}

static short accel_revents(dti_ctx_t *c, struct eta_sock *s, short events)
{
    if (eta_hybrid_kernel_only(s))
        return 0; /* its kernel half answers, in the kernel's poll */
    uint32_t ev = eta_sock_events(c, s);
    uint32_t want = (uint32_t)(unsigned short)events | POLLERR | POLLHUP;
    if (events & POLLRDNORM)
        want |= POLLIN;
    if (events & POLLWRNORM)
        want |= POLLOUT;
    uint32_t r = ev & want;
    if ((r & POLLIN) && (events & POLLRDNORM))
        r |= POLLRDNORM;
    if ((r & POLLOUT) && (events & POLLWRNORM))
        r |= POLLWRNORM;
    if (!(events & POLLIN))
        r &= ~(uint32_t)POLLIN;
    if (!(events & POLLOUT))
        r &= ~(uint32_t)POLLOUT;
    return (short)r;
}

static ETA_TLS unsigned pump_skips;
static ETA_TLS unsigned kself_looks; /* poll_mixed: first looks of sets of placeholders alone */

/* The first look at a set of accelerated sockets only (negative fds
 * allowed): one descriptor lookup each, no kernel poll, no clock. Returns
 * true with *ready set when that answers the call (some ready, or none and
 * timeout 0); false: the general path (a kernel descriptor, a hybrid
 * listener, an orphan, no context yet, or nothing ready and time to wait). */
static bool poll_accel_only(struct pollfd *fds, nfds_t n, int timeout, int *ready)
{
    dti_ctx_t *c = eta_ctx_cached();
    if (!c)
        return false;
    if (dti_cq_ready(c) || (++pump_skips & 63) == 0)
        eta_pump(c);
    int got = 0;
    for (nfds_t i = 0; i < n; i++) {
        if (fds[i].fd < 0) {
            fds[i].revents = 0;
            continue;
        }
        struct eta_obj *o = eta_fd_peek(fds[i].fd);
        if (!o || o->kind != ETA_OBJ_SOCK || !eta_obj_tryref(o))
            return false;
        struct eta_sock *s = (struct eta_sock *)o;
        bool plain = atomic_load_explicit(&s->state, memory_order_acquire) == ETA_SOCK_ACCEL && !s->hybrid;
        short r = plain ? accel_revents(c, s, fds[i].events) : 0;
        eta_obj_unref(o);
        if (!plain)
            return false; /* (the general path sets every revents again) */
        fds[i].revents = r;
        got += r != 0;
    }
    *ready = got;
    return got > 0 || timeout == 0;
}

/* The emulation, once the set is known to hold accelerated sockets.
 * timeout_ns < 0: forever. */
static int poll_mixed(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask)
{
    struct pollfd *k = scratch_get(n + 1);
    if (!k) {
        errno = ENOMEM;
        return -1;
    }
    /* k[0..nk) mirrors the kernel descriptors (and the kernel half of INADDR_ANY
     * listeners); kidx maps back. The accelerated entries are looked up each
     * round (references are taken per round, so a close meanwhile is safe). */
    nfds_t nk = 0;
    /* Every kernel entry is a UDP placeholder read for host-local senders
     * alone (sockobj.h udp_kself): rare, so a system call for them is rare
     * too (below). */
    bool kself_only = true;
    for (nfds_t i = 0; i < n; i++) {
        struct eta_sock *s;
        fds[i].revents = 0;
        if (fds[i].fd >= 0 && is_accel(fds[i].fd, &s)) {
            bool hybrid = s->hybrid, kself = s->udp_kself;
            eta_obj_put(&s->obj);
            if (!hybrid)
                continue;
            kself_only &= kself;
        } else {
            kself_only = false;
        }
        k[nk] = fds[i];
        k[nk].revents = 0;
        nk++;
    }
    dti_ctx_t *c = eta_ctx_cached();
    if (!c)
        c = eta_ctx();
    /* Time counts only once the first look found nothing (as in epoll). */
    uint64_t start = 0, deadline = 0, spin_end = 0;
    unsigned iter = 0;
    bool dog = false; /* the last sleep was ended by the watchdog (wait.h) */
    bool slept = false;
    int result;
    for (;;) {
        /* Reap when something came (and now and then regardless, which is
         * how a departed engine is noticed). */
        if (c && (dti_cq_ready(c) || (++pump_skips & 63) == 0))
            eta_pump(c);
        /* Accelerated readiness, then the kernel's (at once, or every 64
         * rounds while spinning: one system call per round would be the
         * cost eta exists to avoid). */
        int ready = 0, accel_ready = 0;
        for (nfds_t i = 0; i < n; i++) {
            struct eta_sock *s;
            if (fds[i].fd >= 0 && is_accel(fds[i].fd, &s)) {
                fds[i].revents = accel_revents(c, s, fds[i].events);
                accel_ready += fds[i].revents != 0;
                eta_obj_put(&s->obj);
            }
        }
        /* Placeholders alone (kself_only): at the first look of one call in
         * 16 and after a sleep (which watched them), every 1,024 rounds while
         * spinning; a datagram there waits at most that long, or until the
         * spin ends in a sleep, which it wakes. */
        bool check_kernel =
            nk && (iter == 0 ? !kself_only || slept || (++kself_looks & 15) == 0 : (iter & (kself_only ? 1023 : 63)) == 0);
        if (check_kernel && real_poll(k, nk, 0) < 0) {
            result = -1;
            goto out;
        }
        nfds_t j = 0;
        for (nfds_t i = 0; i < n; i++) {
            bool mirrored = j < nk && k[j].fd == fds[i].fd;
            if (mirrored) {
                fds[i].revents |= k[j].revents;
                j++;
            }
            if (fds[i].revents)
                ready++;
        }
        if (ready || timeout_ns == 0) {
            if (accel_ready && dog)
                eta_lost_wakeup(mask ? "ppoll/pselect" : "poll/select");
            result = ready;
            goto out;
        }
        dog = false;
        if (!start) {
            start = eta_now_ns();
            deadline = timeout_ns < 0 ? 0 : start + (uint64_t)timeout_ns;
            spin_end = start + (c ? dti_spin_begin(c) : 0); /* adaptive: see dti_ctx_set_spin() */
        }
        iter++;
        uint64_t now = eta_now_ns();
        if (deadline && now >= deadline) {
            result = 0;
            goto out;
        }
        if (now < spin_end)
            continue;
        /* Sleep: watch, arm, re-check, then one ppoll for everything. */
        if (c) {
            for (nfds_t i = 0; i < n; i++) {
                struct eta_sock *s;
                if (fds[i].fd >= 0 && is_accel(fds[i].fd, &s)) {
                    uint32_t m = 0;
                    if (fds[i].events & (POLLIN | POLLRDNORM))
                        m |= DTI_POLLIN | DTI_POLLRDHUP;
                    if (fds[i].events & (POLLOUT | POLLWRNORM))
                        m |= DTI_POLLOUT;
                    if (s->generation == eta_generation)
                        eta_watch(c, s, m);
                    eta_obj_put(&s->obj);
                }
            }
            int armed = dti_arm(c);
            if (armed != 0) {
                iter = 0;
                if (armed < 0) { /* the engine went: sockets now report errors */
                    eta_engine_check(dti_ctx_owner(c));
                    c = NULL;
                }
                continue;
            }
            k[nk] = (struct pollfd){dti_ctx_wait_fd(c), POLLIN, 0};
        }
        struct timespec ts, *tsp = NULL;
        uint64_t left = UINT64_MAX;
        if (deadline)
            left = eta_now_ns() < deadline ? deadline - eta_now_ns() : 0;
        /* No engine: sleep at most until the next try to re-attach; else
         * at most the watchdog's period. */
        int cap = c ? ETA_WATCHDOG_MS : eta_reattach_wait_ms();
        bool capped = cap >= 0 && (uint64_t)cap * 1000000ull < left;
        if (capped)
            left = (uint64_t)cap * 1000000ull;
        if (left != UINT64_MAX) {
            ts.tv_sec = (time_t)(left / 1000000000ull);
            ts.tv_nsec = (long)(left % 1000000000ull);
            tsp = &ts;
        }
        ETA_STAT_ADD(sleeps, 1);
        int rc = real_ppoll(k, nk + (c ? 1 : 0), tsp, mask);
        int err = errno;
        if (c && !eta_woken_alive(c))
            c = NULL;
        if (rc < 0) {
            errno = err;
            result = -1;
            goto out;
        }
        if (rc == 0 && capped && c) {
            eta_watchdog_expired(); /* look again; the next sleep arms POLLOUT anew */
            dog = true;
        } else if (rc == 0 && capped && eta_reattach_try()) {
            c = eta_ctx(); /* the PPE is back: its sockets count again */
        }
        iter = 0;
        slept = true;
        spin_end = 0; /* after a sleep, re-check once and sleep again */
    }
out:;
    int saved = errno;
    if (c && timeout_ns != 0 && result >= 0) /* how long it took teaches the spin policy */
        dti_spin_end(c, start ? eta_now_ns() - start : 0);
    scratch_put(k, n + 1);
    errno = saved;
    return result;
}

static bool set_has_accel(const struct pollfd *fds, nfds_t n)
{
    if (ETA_LIKELY(atomic_load_explicit(&eta_tracked, memory_order_relaxed) == 0))
        return false;
    for (nfds_t i = 0; i < n; i++) {
        struct eta_sock *s;
        if (fds[i].fd >= 0 && is_accel(fds[i].fd, &s)) {
            eta_obj_put(&s->obj);
            return true;
        }
    }
    return false;
}

ETA_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    int ready;
    if (atomic_load_explicit(&eta_tracked, memory_order_relaxed) && poll_accel_only(fds, n, timeout, &ready))
        return ready;
    if (ETA_LIKELY(!set_has_accel(fds, n)))
        return real_poll(fds, n, timeout);
    return poll_mixed(fds, n, timeout < 0 ? -1 : (int64_t)timeout * 1000000, NULL);
}

ETA_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
    if (ETA_LIKELY(!set_has_accel(fds, n)))
        return real_ppoll(fds, n, ts, mask);
    if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L)) {
        errno = EINVAL;
        return -1;
    }
    return poll_mixed(fds, n, ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1, mask);
}

extern void __chk_fail(void) __attribute__((noreturn));

ETA_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
ETA_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
    if (fdslen / sizeof *fds < n)
        __chk_fail();
    return poll(fds, n, timeout);
}

ETA_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
                           size_t fdslen);
ETA_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
                           size_t fdslen)
{
    if (fdslen / sizeof *fds < n)
        __chk_fail();
    return ppoll(fds, n, ts, mask);
}

/* ---- select ------------------------------------------------------------ */

static bool sets_have_accel(int nfds, fd_set *r, fd_set *w, fd_set *e)
{
    if (ETA_LIKELY(atomic_load_explicit(&eta_tracked, memory_order_relaxed) == 0))
        return false;
    for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++) {
        if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) {
            struct eta_sock *s;
            if (is_accel(fd, &s)) {
                eta_obj_put(&s->obj);
                return true;
            }
        }
    }
    return false;
}

/* select semantics on top of poll_mixed: readable = POLLIN|POLLHUP|POLLERR,
 * writable = POLLOUT|POLLERR, exceptional = POLLPRI. */
static int select_mixed(int nfds, fd_set *r, fd_set *w, fd_set *e, int64_t timeout_ns, const sigset_t *mask)
{
    if (nfds < 0 || nfds > FD_SETSIZE) {
        errno = EINVAL;
        return -1;
    }
    struct pollfd p[FD_SETSIZE];
    nfds_t n = 0;
    for (int fd = 0; fd < nfds; fd++) {
        short ev = 0;
        if (r && FD_ISSET(fd, r))
            ev |= POLLIN;
        if (w && FD_ISSET(fd, w))
            ev |= POLLOUT;
        if (e && FD_ISSET(fd, e))
            ev |= POLLPRI;
        if (ev)
            p[n++] = (struct pollfd){fd, ev, 0};
    }
    int rc = poll_mixed(p, n, timeout_ns, mask);
    if (rc < 0)
        return rc;
    for (nfds_t i = 0; i < n; i++)
        if (p[i].revents & POLLNVAL) {
            errno = EBADF;
            return -1;
        }
    int count = 0;
    for (nfds_t i = 0; i < n; i++) {
        int fd = p[i].fd;
        short re = p[i].revents;
        if (r && FD_ISSET(fd, r)) {
            if (re & (POLLIN | POLLHUP | POLLERR))
                count++;
            else
                FD_CLR(fd, r);
        }
        if (w && FD_ISSET(fd, w)) {
            if (re & (POLLOUT | POLLERR))
                count++;
            else
                FD_CLR(fd, w);
        }
        if (e && FD_ISSET(fd, e)) {
            if (re & POLLPRI)
                count++;
            else
                FD_CLR(fd, e);
        }
    }
    return count;
}

ETA_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
    if (ETA_LIKELY(!sets_have_accel(nfds, r, w, e)))
        return real_select(nfds, r, w, e, tv);
    if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0)) {
        errno = EINVAL;
        return -1;
    }
    uint64_t start = eta_now_ns();
    int64_t t = tv ? (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000 : -1;
    int rc = select_mixed(nfds, r, w, e, t, NULL);
    if (tv) { /* Linux reports the time left */
        int64_t left = t - (int64_t)(eta_now_ns() - start);
        if (left < 0)
            left = 0;
        tv->tv_sec = (time_t)(left / 1000000000);
        tv->tv_usec = (suseconds_t)((left % 1000000000) / 1000);
    }
    return rc;
}

ETA_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *mask)
{
    if (ETA_LIKELY(!sets_have_accel(nfds, r, w, e)))
        return real_pselect(nfds, r, w, e, ts, mask);
    if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L)) {
        errno = EINVAL;
        return -1;
    }
    return select_mixed(nfds, r, w, e, ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1, mask);
}
