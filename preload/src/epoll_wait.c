/* The waits of the epoll emulation (epoll_wait, epoll_pwait, epoll_pwait2):
 * the first look for the common call, the general spin-then-sleep over the
 * ready queue (epoll.c's eta_ep_collect()) and the kernel's epoll, and the
 * nested-epoll sleep. See epoll.c for the set and its invariants. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "config.h"
#include "epoll_set.h"
#include "fdtable.h"
#include "real.h"
#include "shim.h"
#include "signals.h"
#include "wait.h"

static int fail(int err)
{
    errno = err;
    return -1;
}

/* Puts the waiting thread's wait fd in the inner epoll. Lock held. Every
 * member that is not queued is watched from c (eta_ep_collect() saw to it). */
static int prepare_sleep(struct eta_epoll *e, dti_ctx_t *c)
{
    if (e->inner >= 0 && e->inner_gen != eta_fork_epoch && e->inner_pid == getpid() &&
        eta_internal_owned(&e->inner)) {
        /* A re-attach: the set is still this process's, and the old
         * contexts' wait fds left it when they were closed. Kept: one made
         * anew each time left a descriptor behind per PPE restart (the
         * aside range filled after a few dozen), and a thread between its
         * prepare and its sleep may still be about to wait on this number. */
        e->inner_gen = eta_fork_epoch;
        e->inner_ctx = 0;
    }
    if (e->inner < 0 || e->inner_gen != eta_fork_epoch) {
        /* None yet, or the parent's (a fork child: the set is shared with the
         * parent). The child's copy is closed where the number is still
         * marked ours; a number the shim no longer tracks is left as it is. */
        if (eta_internal_owned(&e->inner)) {
            eta_internal_drop(&e->inner);
            real_close(e->inner);
        }
        e->inner = dti_fd_aside(real_epoll_create1(EPOLL_CLOEXEC), 0);
        if (e->inner < 0)
            return -1;
        eta_internal_own(&e->inner); /* moved aside if the program takes its number */
        e->inner_gen = eta_fork_epoch;
        e->inner_pid = getpid();
        e->inner_ctx = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
        if (real_epoll_ctl(e->inner, EPOLL_CTL_ADD, e->epfd, &ev) != 0)
            return -1;
    }
    uint64_t serial = eta_ctx_serial(c);
    if (!serial || e->inner_ctx != serial) {
        /* (The wait fd of a thread that ended left the set when it closed.) */
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
        if (real_epoll_ctl(e->inner, EPOLL_CTL_ADD, dti_ctx_wait_fd(c), &ev) != 0 && errno != EEXIST)
            return -1;
        e->inner_ctx = serial;
    }
    /* Queued meanwhile (an event pumped while we looked, a member added):
     * look before sleeping. */
    return e->n_rq > 0 ? 1 : 0;
}

static ETA_TLS unsigned pump_skips;
static ETA_TLS unsigned kself_looks;

/* Whether a wait that found accelerated members ready asks the kernel too:
 * where the set has kernel members; where they are all UDP placeholders read
 * for host-local senders alone (n_kself), one wait in 16 (a datagram there
 * is reported at the latest then, or by a wait that finds nothing else). */
static inline bool kernel_beside(struct eta_epoll *e)
{
    unsigned nk = atomic_load_explicit(&e->n_kernel, memory_order_relaxed);
    return nk != 0 && (nk != atomic_load_explicit(&e->n_kself, memory_order_relaxed) || (++kself_looks & 15) == 0);
}

/* *waited: when it started to wait (0: answered by the first look, the
 * clock never read). Inlined into its one caller: as a call (its sleep part
 * grew with the watchdog) every epoll_wait paid ~20 instructions for it
 * (shim-instructions' epoll 280 -> 302). */
static inline __attribute__((always_inline)) int spin_then_sleep(struct eta_epoll *e, dti_ctx_t *c,
                                                                  struct epoll_event *out, int max, int64_t timeout_ns,
                                                                  const sigset_t *mask, uint64_t *waited,
                                                                  const struct eta_sig_mark *since)
{
    uint64_t start = 0, deadline = 0, spin_end = 0;
    unsigned iter = 0;
    bool dog = false; /* the last sleep was ended by the watchdog (wait.h) */
    for (;;) {
        /* Events queue members: reap when some came (and now and then
         * regardless, which is how a departed engine is noticed). */
        if (c && (dti_cq_ready(c) || (++pump_skips & 63) == 0))
            eta_pump(c);
        set_lock(e);
        int n = eta_ep_collect(e, c, out, max);
        set_unlock(e);
        if (n > 0 && dog)
            eta_lost_wakeup("epoll_wait");
        dog = false;
        /* The kernel members: at once, then every 64 rounds while spinning.
         * Beside ready accelerated members, only if the set has kernel
         * members (a system call per wait is what eta exists to remove);
         * with none ready, always: that look also takes our own wake-ups
         * (kicks), which would otherwise keep the sleep below from
         * sleeping. */
        if (n < max && (n > 0 ? kernel_beside(e) : iter == 0 || (iter & 63) == 0)) {
            bool kicked = false;
            int k = eta_ep_drop_kicks(out + n, real_epoll_wait(e->epfd, out + n, max - n, 0), &kicked);
            if (k > 0)
                n += k;
            else if (k < 0 && n == 0)
                return -1;
        }
        if (n > 0 || timeout_ns == 0) {
            return n;
        }
        /* A handler ran on this thread since the call began (signals.c
         * counts them): EINTR, as the kernel's epoll_wait answers whatever
         * SA_RESTART says (signal(7)), also when it ran while we spun. */
        if (ETA_UNLIKELY(eta_sig_handled != since->handled))
            return fail(EINTR);
        if (!start) { /* nothing at the first look: from now on, time counts */
            *waited = start = eta_now_ns();
            deadline = timeout_ns < 0 ? 0 : start + (uint64_t)timeout_ns;
            spin_end = start + (c ? dti_spin_begin(c) : 0); /* adaptive: see dti_ctx_set_spin() */
        }
        iter++;
        uint64_t now = eta_now_ns();
        if (deadline && now >= deadline)
            return 0;
        if (now < spin_end)
            continue;
        /* Sleep in the inner epoll: the program's epoll fd and our wait fd. */
        int armed = 0;
        atomic_fetch_add(&e->sleepers, 1);
        set_lock(e);
        int prc = c ? prepare_sleep(e, c) : 0;
        set_unlock(e);
        if (prc != 0)
            atomic_fetch_sub(&e->sleepers, 1);
        if (prc < 0)
            return -1;
        if (prc > 0) {
            iter = 0;
            continue;
        }
        if (c) {
            armed = dti_arm(c);
            if (armed != 0) {
                atomic_fetch_sub(&e->sleepers, 1);
                if (armed < 0) {
                    eta_engine_check(dti_ctx_owner(c));
                    c = NULL;
                }
                iter = 0;
                continue;
            }
        }
        int ms = -1;
        if (deadline) {
            now = eta_now_ns();
            ms = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
        }
        bool dog_sleep = false;
        int sleep_ms = c ? eta_watchdog_sleep_ms(ms, &dog_sleep) : ms;
        ETA_STAT_ADD(sleeps, 1);
        struct epoll_event got[2];
        bool kicked = false;
        /* No engine: sleep at most until the next try to re-attach. */
        int cap = c ? ms : eta_reattach_wait_ms();
        bool capped = !c && cap >= 0 && (ms < 0 || cap < ms);
        /* From the last look at the counts to the sleep, signals are blocked;
         * the sleep unblocks them (the program's mask, or its own). */
        sigset_t orig;
        eta_sig_block_async(&orig);
        int rc = -1, err = EINTR;
        if (eta_sig_handled == since->handled) {
            const sigset_t *m = mask ? mask : &orig;
            rc = c ? real_epoll_pwait(e->inner, got, 2, sleep_ms, m)
                   : eta_ep_drop_kicks(out, real_epoll_pwait(e->epfd, out, max, capped ? cap : ms, m), &kicked);
            err = errno;
        }
        pthread_sigmask(SIG_SETMASK, &orig, NULL); /* a signal that came meanwhile runs here */
        errno = err;
        atomic_fetch_sub(&e->sleepers, 1);
        if (c) {
            if (!eta_woken_alive(c))
                c = NULL;
            else if (rc == 0 && dog_sleep) {
                eta_watchdog_expired(); /* look again (a lost wakeup is found there) */
                set_lock(e);
                eta_ep_requeue_all(e); /* every member, POLLOUT watches armed again */
                set_unlock(e);
                dog = true;
            }
        } else if (rc == 0 && capped) {
            if (eta_reattach_try()) /* the PPE is back: its members count again */
                c = eta_ctx();
            continue;
        } else if (rc != 0 || !kicked) {
            return rc; /* no engine: the kernel members are all there is to wait for */
        } else {
            continue; /* only our wake-up: look again (the deadline still holds) */
        }
        if (rc < 0) {
            errno = err;
            return -1;
        }
        iter = 0;
        spin_end = 0;
    }
}

static int wait_mixed(struct eta_epoll *e, struct epoll_event *out, int max, int64_t timeout_ns,
                      const sigset_t *mask, const struct eta_sig_mark *since)
{
    uint64_t waited = 0;
    dti_ctx_t *c = eta_ctx_cached();
    if (!c)
        c = eta_ctx();
    eta_sig_test_hook();
    int n = spin_then_sleep(e, c, out, max, timeout_ns, mask, &waited, since);
    if (timeout_ns == 0 || n < 0)
        return n;
    c = eta_ctx_cached(); /* (the PPE may have gone, or come back, meanwhile) */
    if (!c && waited)
        c = eta_ctx();
    if (c) /* how long it took teaches the spin policy */
        dti_spin_end(c, waited ? eta_now_ns() - waited : 0);
    return n;
}

/* The kernel's epoll_wait on a set with no accelerated member (yet). Our
 * wake-up means another thread added one: then look again, through the
 * shadow, with what is left of the timeout. */
static int wait_kernel(int epfd, struct eta_epoll *e, struct epoll_event *out, int max, const sigset_t *mask,
                       int ms, const struct timespec *ts, int which, bool *kicked)
{
    if (e) {
        atomic_fetch_add(&e->sleepers, 1);
        if (__atomic_load_n(&e->n, __ATOMIC_SEQ_CST) != 0) { /* added before we were counted */
            atomic_fetch_sub(&e->sleepers, 1);
            *kicked = true;
            return 0;
        }
    }
    int rc;
    if (which == 0)
        rc = real_epoll_wait(epfd, out, max, ms);
    else if (which == 1)
        rc = real_epoll_pwait(epfd, out, max, ms, mask);
    else
        rc = real_epoll_pwait2(epfd, out, max, ts, mask);
    int err = errno;
    if (e)
        atomic_fetch_sub(&e->sleepers, 1);
    rc = eta_ep_drop_kicks(out, rc, kicked);
    errno = err;
    return rc;
}

/* The first look for the call a busy event loop makes most: a set this
 * thread has waited in before, nothing to look at again (no lost events, no
 * fork), its ready queue holding only level-triggered members this thread
 * watches, every one of them ready and all fitting in out[]. Then each is
 * reported and stays queued, exactly what eta_ep_collect() would do,
 * without its bookkeeping (stamps, laps, the cursor: with every queued member reported
 * there is nothing to take turns over). Anything else (a member not ready,
 * to be dropped or watched; edge-triggered or one-shot members; kernel
 * members to ask; more ready than fits) changes nothing here and returns
 * -1: eta_ep_collect() does it. Lock held. */
static inline __attribute__((always_inline)) int first_look(struct eta_epoll *e, dti_ctx_t *c,
                                                            struct epoll_event *out, int max)
{
    unsigned n_rq = e->n_rq;
    if (n_rq == 0 || n_rq > (unsigned)max || atomic_load_explicit(&e->n_kernel, memory_order_relaxed) ||
        atomic_load_explicit(&eta_rescan_seq, memory_order_relaxed) != e->seen_rescan ||
        e->seen_epoch != eta_fork_epoch)
        return -1;
    uint64_t serial = eta_tls_ctx_serial; /* c is this thread's cached context (eta_ctx_serial()) */
    unsigned k = 0;
    while (e->waiters[k] != serial || !serial)
        if (++k == WAITER_SLOTS)
            return -1; /* a thread new to this set: it must watch every member first */
    const uint32_t plain = EPOLLET | EPOLLONESHOT;
    for (unsigned i = 0; i < n_rq; i++) {
        struct epent *ent = &e->ents[e->rq[i]];
        if ((ent->events & plain) || ent->disabled || !(ent->watched & (1u << k)) || ent->s->hybrid)
            return -1;
        uint32_t ev = member_events_inline(ent, c);
        if (!ev)
            return -1;
        out[i].events = ev;
        out[i].data = ent->data;
    }
    return (int)n_rq;
}

/* epoll_wait()'s way in when the set has accelerated members and the
 * thread a context: the pump and first_look(); -2 when the general way
 * must answer (it starts again from the beginning: nothing was changed). */
static inline __attribute__((always_inline)) int wait_first(int epfd, struct epoll_event *out, int max,
                                                            int64_t timeout_ns)
{
    dti_ctx_t *c = eta_ctx_cached();
    /* eta_fd_peek() less its eta_tracked test, which the caller made. */
    struct eta_obj *o = NULL;
    if ((unsigned)epfd < ETA_FD_MAX && eta_fds)
        o = atomic_load_explicit(&eta_fds[epfd], memory_order_acquire);
    if (!c || !o || o->kind != ETA_OBJ_EPOLL || max <= 0 || !out || !eta_obj_tryref(o))
        return -2;
    struct eta_epoll *e = (struct eta_epoll *)o;
    /* As spin_then_sleep(): reap when something came, and now and then. */
    if (dti_cq_ready(c) || (++pump_skips & 63) == 0)
        eta_pump(c);
    set_lock(e);
    int n = first_look(e, c, out, max);
    set_unlock(e);
    eta_obj_unref(o);
    if (n < 0)
        return -2;
    if (timeout_ns != 0)
        dti_spin_end(c, 0); /* answered at once: the spin policy learns it (as wait_mixed()) */
    return n;
}

/* The general way (after wait_first() declined, or for a program with no
 * accelerated socket). */
static __attribute__((noinline)) int wait_impl(int epfd, struct epoll_event *out, int max, int64_t timeout_ns,
                                               const sigset_t *mask, int ms, const struct timespec *ts, int which)
{
    const struct eta_sig_mark since = eta_sig_mark_now(); /* the call began: a handler from here on ends it */
    struct eta_epoll *e = NULL;
    if (atomic_load_explicit(&eta_tracked, memory_order_relaxed))
        e = eta_ep_get(epfd);
    uint64_t start = timeout_ns > 0 && (!e || __atomic_load_n(&e->n, __ATOMIC_SEQ_CST) == 0) ? eta_now_ns() : 0;
    while (ETA_LIKELY(!e || __atomic_load_n(&e->n, __ATOMIC_SEQ_CST) == 0)) {
        bool kicked = false;
        int rc = wait_kernel(epfd, e, out, max, mask, ms, ts, which, &kicked);
        int err = errno;
        if (e)
            eta_obj_put(&e->obj);
        if (rc != 0 || !kicked) {
            errno = err;
            return rc;
        }
        /* Woken for a member another thread added: look at it (also for a
         * zero timeout), waiting for what is left of the timeout. */
        if (timeout_ns > 0) {
            uint64_t now = eta_now_ns();
            timeout_ns -= (int64_t)(now - start);
            start = now;
            if (timeout_ns <= 0)
                return 0;
            ms = (int)((timeout_ns + 999999) / 1000000);
        }
        which = which == 0 ? 0 : 1; /* pwait2's timespec becomes ms, rounded up */
        e = eta_ep_get(epfd);
        if (!e)
            return 0; /* closed meanwhile */
    }
    if (max <= 0 || !out) {
        eta_obj_put(&e->obj);
        return fail(max <= 0 ? EINVAL : EFAULT);
    }
    int rc = wait_mixed(e, out, max, timeout_ns, mask, &since);
    if (ETA_LIKELY(rc >= 0)) {
        eta_obj_put(&e->obj);
        return rc;
    }
    int saved = errno;
    eta_obj_put(&e->obj);
    errno = saved;
    return rc;
}

/* Each entry point tries wait_first() before the general way. (The signal
 * mask of the pwait forms matters only to a sleep, which the first look
 * never makes.) */
#define WAIT_FIRST(epfd, out, max, t)                                       \
    do {                                                                    \
        if (ETA_LIKELY(atomic_load_explicit(&eta_tracked, memory_order_relaxed))) { \
            int first_ = wait_first(epfd, out, max, t);                     \
            if (ETA_LIKELY(first_ != -2))                                   \
                return first_;                                              \
        }                                                                   \
    } while (0)

ETA_EXPORT int epoll_wait(int epfd, struct epoll_event *out, int max, int ms)
{
    int64_t t = ms < 0 ? -1 : (int64_t)ms * 1000000;
    WAIT_FIRST(epfd, out, max, t);
    return wait_impl(epfd, out, max, t, NULL, ms, NULL, 0);
}

ETA_EXPORT int epoll_pwait(int epfd, struct epoll_event *out, int max, int ms, const sigset_t *mask)
{
    int64_t t = ms < 0 ? -1 : (int64_t)ms * 1000000;
    WAIT_FIRST(epfd, out, max, t);
    return wait_impl(epfd, out, max, t, mask, ms, NULL, 1);
}

ETA_EXPORT int epoll_pwait2(int epfd, struct epoll_event *out, int max, const struct timespec *ts,
                            const sigset_t *mask)
{
    int64_t t = ts ? (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec : -1;
    WAIT_FIRST(epfd, out, max, t);
    return wait_impl(epfd, out, max, t, mask, 0, ts, 2);
}
