/* Waiting for accelerated sockets: the event pump, watches, the spin-then-
 * sleep waiter, and the map from PPE handles to socket objects that events
 * are dispatched through. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "accept.h"
#include "attach.h"
#include "config.h"
#include "decide.h"
#include "epoll.h"
#include "real.h"
#include "shim.h"
#include "signals.h"
#include "sockobj.h"
#include "wait.h"

/* ---- handle -> socket map (open addressing, lock-free lookups) ---------- */

#define HMAP_SIZE (1u << 17)
struct hslot {
    _Atomic uint32_t h; /* DTI_SOCK_INVALID: empty; HMAP_TOMB: deleted */
    struct eta_sock *_Atomic s;
};
#define HMAP_TOMB 0xfffffffeu
static struct hslot hmap[HMAP_SIZE];
static _Atomic int hmap_lock;
static _Atomic int hmap_ready;

static void hmap_init(void)
{
    if (atomic_load_explicit(&hmap_ready, memory_order_acquire))
        return;
    while (atomic_exchange(&hmap_lock, 1))
        ;
    if (!atomic_load(&hmap_ready)) {
        for (unsigned i = 0; i < HMAP_SIZE; i++)
            atomic_store(&hmap[i].h, DTI_SOCK_INVALID);
        atomic_store(&hmap_ready, 1);
    }
    atomic_store(&hmap_lock, 0);
}

static unsigned hmap_hash(dti_sock_t h)
{
    return (h * 2654435761u) & (HMAP_SIZE - 1);
}

void eta_hmap_put(dti_sock_t h, struct eta_sock *s)
{
    hmap_init();
    while (atomic_exchange_explicit(&hmap_lock, 1, memory_order_acquire))
        ;
    for (unsigned i = hmap_hash(h), n = 0; n < HMAP_SIZE; i = (i + 1) & (HMAP_SIZE - 1), n++) {
        uint32_t cur = atomic_load(&hmap[i].h);
        if (cur == DTI_SOCK_INVALID || cur == HMAP_TOMB || cur == h) {
            atomic_store(&hmap[i].s, s);
            atomic_store(&hmap[i].h, h);
            break;
        }
    }
    atomic_store_explicit(&hmap_lock, 0, memory_order_release);
}

void eta_hmap_clear(void)
{
    hmap_init();
    while (atomic_exchange_explicit(&hmap_lock, 1, memory_order_acquire))
        ;
    for (unsigned i = 0; i < HMAP_SIZE; i++) {
        atomic_store(&hmap[i].s, NULL);
        atomic_store(&hmap[i].h, DTI_SOCK_INVALID);
    }
    atomic_store_explicit(&hmap_lock, 0, memory_order_release);
}

void eta_hmap_del(dti_sock_t h)
{
    hmap_init();
    while (atomic_exchange_explicit(&hmap_lock, 1, memory_order_acquire))
        ;
    for (unsigned i = hmap_hash(h), n = 0; n < HMAP_SIZE; i = (i + 1) & (HMAP_SIZE - 1), n++) {
        uint32_t cur = atomic_load(&hmap[i].h);
        if (cur == DTI_SOCK_INVALID)
            break;
        if (cur == h) {
            atomic_store(&hmap[i].s, NULL);
            atomic_store(&hmap[i].h, HMAP_TOMB);
            break;
        }
    }
    atomic_store_explicit(&hmap_lock, 0, memory_order_release);
}

static struct eta_sock *hmap_find(dti_sock_t h)
{
    if (!atomic_load_explicit(&hmap_ready, memory_order_acquire))
        return NULL;
    for (unsigned i = hmap_hash(h), n = 0; n < HMAP_SIZE; i = (i + 1) & (HMAP_SIZE - 1), n++) {
        uint32_t cur = atomic_load_explicit(&hmap[i].h, memory_order_acquire);
        if (cur == DTI_SOCK_INVALID)
            return NULL;
        if (cur == h)
            return atomic_load_explicit(&hmap[i].s, memory_order_acquire);
    }
    return NULL;
}

/* ---- events ------------------------------------------------------------ */

/* A posted read's answer (io_recv.c): whichever call of the thread reaped it (its
 * own wait, a poll or an epoll_wait in a signal handler, a full command
 * queue being drained), it goes to the socket, where the waiting read finds
 * it. A stale one (the read gave up when the PPE went) names a post no
 * longer out and is dropped. */
static void post_answered(const struct dti_cqe *e)
{
    struct eta_sock *s = hmap_find(e->sock);
    if (!s || atomic_load_explicit(&s->post_state, memory_order_acquire) != 1 ||
        atomic_load_explicit(&s->post_ud, memory_order_relaxed) != e->user_data)
        return;
    atomic_store_explicit(&s->post_res, e->res, memory_order_relaxed);
    atomic_store_explicit(&s->post_state, 2, memory_order_release);
}

unsigned eta_pump(dti_ctx_t *c)
{
    struct dti_cqe cqe[32];
    unsigned total = 0, n;
    do {
        n = dti_reap(c, cqe, 32);
        for (unsigned i = 0; i < n; i++) {
            if (cqe[i].kind == DTI_CQE_EVENT) {
                struct eta_sock *s = hmap_find(cqe[i].sock);
                if (s) {
                    atomic_fetch_add_explicit(&s->ev_seq, 1, memory_order_release);
                    eta_epoll_touch(s);
                }
            } else if (cqe[i].kind == DTI_CQE_RESCAN) {
                atomic_fetch_add(&eta_rescan_seq, 1);
            } else if (cqe[i].kind == DTI_CQE_COMPLETION && cqe[i].op == DTI_OP_RECV_POST) {
                post_answered(&cqe[i]);
            }
            /* Other completions reaching here belong to fire-and-forget
             * commands (watch, close, shutdown, setsockopt); their outcome
             * shows in the socket's status. */
        }
        total += n;
    } while (n == 32);
    return total;
}

/* Whether context `serial`'s one-shot POLLOUT watch on s is still armed in
 * the engine: no event for s was reaped (nor lost) since it was armed. An
 * event posted but not yet reaped is in the context's queue and wakes it. */
static bool pollout_armed(struct eta_sock *s, uint32_t seq, uint32_t rescan)
{
    return atomic_load_explicit(&s->out_seq, memory_order_relaxed) == seq + 1 &&
           atomic_load_explicit(&s->out_rescan, memory_order_relaxed) == rescan;
}

/* ---- the watchdog ------------------------------------------------------
 * No sleep of the shim's on a context's wait fd lasts longer than
 * ETA_WATCHDOG_MS (a caller's shorter timeout stays as it is; libdti's own
 * waits for a command's answer have no such bound: dti/README.md). A sleep the watchdog ends is
 * followed by the look any wake is, and the one-shot POLLOUT watches count as
 * spent (watchdog_seq goes into eta_watch()'s rescan mark), so the next sleep
 * arms them anew and the engine answers at once for a socket that is
 * writable. What that look finds ready had no wakeup: the engine's event or
 * the sleep's wake was lost. So a lost wakeup costs a sleeper at most the
 * watchdog's period, never the program; counted (lost_wakeups), said once. */
static _Atomic uint32_t watchdog_seq;

void eta_watchdog_expired(void)
{
    ETA_STAT_ADD(watchdog_wakes, 1);
    atomic_fetch_add(&watchdog_seq, 1);
}

void eta_lost_wakeup(const char *where)
{
    static _Atomic int said;
    ETA_STAT_ADD(lost_wakeups, 1);
    if (!atomic_exchange(&said, 1))
        eta_log("warning: a wakeup was lost: %s found a socket ready only when the shim's %d ms watchdog ended "
                "its sleep; recovered (eta-stat counts lost_wakeups); please report it with eta-stat's output",
                where, ETA_WATCHDOG_MS);
}

int eta_watchdog_sleep_ms(int ms, bool *dog)
{
    *dog = ms < 0 || ms > ETA_WATCHDOG_MS;
    return *dog ? ETA_WATCHDOG_MS : ms;
}

int eta_watch(dti_ctx_t *c, struct eta_sock *s, uint32_t mask)
{
    uint64_t serial = eta_ctx_serial(c);
    bool same = serial && atomic_load_explicit(&s->watch_ctx, memory_order_relaxed) == serial;
    /* Read before the watch goes out: an event reaped after it makes them
     * differ, and the next call arms again (one spare watch, never a lost one). */
    uint32_t seq = atomic_load_explicit(&s->ev_seq, memory_order_acquire);
    uint32_t rescan = atomic_load(&eta_rescan_seq) + atomic_load(&watchdog_seq);
    uint32_t have = same ? atomic_load_explicit(&s->watch_mask, memory_order_relaxed) : 0;
    /* Every watch is answered by a completion that wakes a sleeping thread: a
     * poll loop re-arming POLLOUT each round on a connecting socket, or one
     * whose send ring stays full, would wake itself for ever. */
    if (same && pollout_armed(s, seq, rescan))
        have |= DTI_POLLOUT;
    if (same && (have & mask) == mask)
        return 0;
    uint32_t want = mask | DTI_POLLERR | DTI_POLLHUP | (have & ~DTI_POLLOUT);
    int rc = dti_prep_watch(c, s->h, want, 0);
    if (rc == -EAGAIN) { /* queue full: make room and retry once */
        eta_pump(c);
        rc = dti_prep_watch(c, s->h, want, 0);
    }
    if (rc == 0)
        dti_submit(c);
    if (rc == 0) {
        atomic_store(&s->watch_ctx, serial);
        atomic_store(&s->watch_mask, want & ~DTI_POLLOUT);
        atomic_store(&s->out_rescan, rescan);
        atomic_store(&s->out_seq, (want & DTI_POLLOUT) ? seq + 1 : 0);
    }
    return rc;
}

bool eta_sock_orphaned(struct eta_sock *s)
{
    uint32_t gen = __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE);
    if (ETA_LIKELY(gen == eta_generation && atomic_load(&s->state) != ETA_SOCK_ORPHAN))
        return false;
    /* Made on a PPE that went before this process re-attached: reset for
     * good, or (a listener) silent until it listens again on the new PPE
     * (eta_relisten_all). Its state is left alone so that can happen. */
    if (gen != eta_generation && gen >= eta_fork_generation && atomic_load(&s->state) == ETA_SOCK_ACCEL)
        return true;
    const uint32_t was = atomic_exchange(&s->state, ETA_SOCK_ORPHAN);
    eta_tx_fast_clear(s);
    if (was != ETA_SOCK_ORPHAN)
        eta_count(ETA_R_FORK_CHILD, -1, "an accelerated socket inherited across fork cannot be used in the child");
    return true;
}

bool eta_woken_alive(dti_ctx_t *c)
{
    dti_disarm(c);
    if (dti_cq_ready(c)) /* the engine wrote them: it was alive an instant ago */
        return !atomic_load_explicit(&eta_engine_dead, memory_order_relaxed);
    return eta_engine_check(dti_ctx_owner(c));
}

/* For readiness checks: the send view first (it is refused until the socket
 * is connected, which also fixes the receive ring's base), then the receive
 * view. */
__attribute__((noinline)) void eta_sock_take_views(dti_ctx_t *c, struct eta_sock *s)
{
    eta_take_tx_view(c, s);
    if (atomic_load_explicit(&s->txv_state, memory_order_acquire) == 2)
        eta_take_rx_view(c, s);
}

uint32_t eta_sock_events_general(dti_ctx_t *c, struct eta_sock *s)
{
    /* A listener that can no longer accept (the PPE went, or it is a fork
     * child's orphan) reports nothing, as a kernel listener nobody connects
     * to: POLLERR/POLLHUP there would make event loops spin on accept or
     * abort (libuv asserts on a listener reported without POLLIN). Its
     * accept answers EAGAIN, or blocks. */
    bool gone = !c || atomic_load_explicit(&eta_engine_dead, memory_order_relaxed);
    if (eta_sock_orphaned(s) || gone) {
        if (s->listening)
            return 0;
        return !c || eta_sock_orphaned(s) ? POLLERR | POLLHUP : POLLIN | POLLOUT | POLLERR | POLLHUP;
    }
    uint32_t ev = eta_send_shut_writable(s, dti_sock_poll(c, s->h));
    if (atomic_load_explicit(&s->pending_error, memory_order_relaxed))
        ev |= POLLERR;
    if (atomic_load_explicit(&s->shut_rd, memory_order_relaxed))
        ev |= POLLIN | POLLRDHUP;
    if (s->listening) {
        ev &= ~(uint32_t)(POLLOUT | POLLHUP);
        if (eta_stash_count(s))
            ev |= POLLIN;
    }
    else if (s->dgram)
        ev &= ~(uint32_t)POLLHUP; /* UDP: readable with a datagram, writable always (the engine's rule) */
    else if (!s->connect_started && !s->listening)
        ev = (ev & ~(uint32_t)POLLIN) | POLLOUT | POLLHUP; /* a fresh socket: like the kernel's */
    return ev;
}

/* ---- signals: restart or EINTR ---------------------------------------- */

/* A wait the shim makes is a ppoll(), which the kernel never restarts. The
 * kernel would restart the call the program made (accept, recv, send,
 * connect without a timeout) when the handler that ran had SA_RESTART. The
 * waiter knows which handlers ran on its thread (signals.c counts them); this
 * is the answer where it does not (a handler the shim could not wrap): it
 * restarts only when every installed handler asks for it. */
bool eta_signals_restart(void)
{
    for (int sig = 1; sig < NSIG; sig++)
        if (!eta_signal_restarts(sig))
            return false;
    return true;
}

/* ---- the waiter -------------------------------------------------------- */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Inlined into its one caller (eta_wait_watch()), as before the watchdog. */
static inline __attribute__((always_inline)) int spin_then_sleep(dti_ctx_t *c, bool (*ready)(void *), void *arg,
                                                                  uint64_t deadline_ns, int kfd, uint64_t start,
                                                                  struct eta_sig_mark *since, struct eta_sock *ws,
                                                                  uint32_t wmask)
{
    dti_t *d = dti_ctx_owner(c);
    const unsigned kspin = kfd >= 0 && (kfd & ETA_WAIT_KFD_RARE) ? 1023 : 63; /* wait.h */
    if (kfd >= 0)
        kfd &= ~ETA_WAIT_KFD_RARE;
    uint64_t budget = dti_spin_begin(c); /* adaptive: see dti_ctx_set_spin() */
    uint64_t spin_end = start + budget;
    unsigned iter = 0;
    /* Handlers run on this thread (signals.c): one that runs while this
     * waits interrupts the call as the kernel would (EINTR unless it had
     * SA_RESTART and there is no deadline), whether it lands in the spin,
     * between checks or in the sleep; counted from the call's start (since),
     * not this wait's: a handler that ran before the first look counts. */
    unsigned sig_seen = since->handled, sig_eintr = since->eintr;
    /* Spin: the common case for a busy program, no system call at all. */
    while (budget) {
        eta_pump(c);
        if (ready(arg)) {
            ETA_STAT_ADD(spins, 1);
            return 0;
        }
        if (ETA_UNLIKELY(eta_sig_handled != sig_seen)) {
            if (deadline_ns || eta_sig_eintr != sig_eintr)
                return -EINTR;
            since->handled = sig_seen = eta_sig_handled; /* SA_RESTART: the call goes on */
        }
        if ((++iter & 63) == 0) {
            if (!eta_engine_check(d))
                return -EPIPE;
            uint64_t now = eta_now_ns();
            if (deadline_ns && now >= deadline_ns)
                return -ETIMEDOUT;
            if (now >= spin_end)
                break;
            if (kfd >= 0 && (iter & kspin) == 0) {
                struct pollfd p = {kfd, POLLIN, 0};
                if (real_poll(&p, 1, 0) > 0) {
                    ETA_STAT_ADD(spins, 1);
                    return 0;
                }
            }
        }
        cpu_relax();
    }
    /* Sleep: arm, check, block on the context's wait fd (and kfd). */
    ETA_STAT_ADD(sleeps, 1);
    for (;;) {
        int armed = dti_arm(c);
        if (armed > 0) {
            eta_pump(c);
            if (ready(arg))
                return 0;
            continue;
        }
        if (ready(arg)) {
            if (armed == 0)
                dti_disarm(c);
            return 0;
        }
        if (armed < 0) {
            eta_engine_check(d);
            return -EPIPE;
        }
        struct timespec ts;
        uint64_t left = (uint64_t)ETA_WATCHDOG_MS * 1000000u;
        bool dog = true; /* the watchdog ends this sleep, not the deadline */
        if (deadline_ns) {
            uint64_t now = eta_now_ns();
            if (now >= deadline_ns) {
                dti_disarm(c);
                return -ETIMEDOUT;
            }
            if (deadline_ns - now <= left) {
                left = deadline_ns - now;
                dog = false;
            }
        }
        ts.tv_sec = (time_t)(left / 1000000000u);
        ts.tv_nsec = (long)(left % 1000000000u);
        /* Signals blocked from the last check to the sleep; ppoll() unblocks
         * them as it sleeps (the kernel's atomic unblock-and-wait), so a
         * handler that runs in between still ends the sleep. */
        sigset_t orig;
        eta_sig_block_async(&orig);
        int rc = -1, err = EINTR;
        struct pollfd p[2] = {{dti_ctx_wait_fd(c), POLLIN, 0}, {kfd, POLLIN, 0}};
        if (eta_sig_handled == sig_seen) {
            rc = real_ppoll(p, kfd >= 0 ? 2 : 1, &ts, &orig);
            err = errno;
        }
        pthread_sigmask(SIG_SETMASK, &orig, NULL); /* a signal that came meanwhile runs here */
        dti_disarm(c);
        eta_pump(c);
        dog = dog && rc == 0;
        if (dog)
            eta_watchdog_expired();
        if (ready(arg)) {
            if (dog)
                eta_lost_wakeup("a blocking call");
            return 0;
        }
        if (dog && ws)
            eta_watch(c, ws, wmask); /* its POLLOUT again: the engine answers at once where it holds */
        if (rc > 0 && kfd >= 0 && p[1].revents)
            return 0;
        if (eta_sig_handled != sig_seen) {
            if (deadline_ns || eta_sig_eintr != sig_eintr)
                return -EINTR;
            since->handled = sig_seen = eta_sig_handled; /* SA_RESTART: the call goes on */
        } else if (rc < 0 && err == EINTR) { /* a handler the shim did not wrap */
            if (deadline_ns || !eta_signals_restart())
                return -EINTR;
        }
        if (!eta_engine_check(d))
            return -EPIPE;
    }
}

int eta_wait(dti_ctx_t *c, bool (*ready)(void *), void *arg, uint64_t deadline_ns, int kfd,
             struct eta_sig_mark *since)
{
    return eta_wait_watch(c, ready, arg, deadline_ns, kfd, since, NULL, 0);
}

int eta_wait_watch(dti_ctx_t *c, bool (*ready)(void *), void *arg, uint64_t deadline_ns, int kfd,
                   struct eta_sig_mark *since, struct eta_sock *ws, uint32_t wmask)
{
    uint64_t start = eta_now_ns();
    int rc = spin_then_sleep(c, ready, arg, deadline_ns, kfd, start, since, ws, wmask);
    if (rc == 0 || rc == -ETIMEDOUT)
        dti_spin_end(c, eta_now_ns() - start); /* how long it took teaches the spin policy */
    return rc;
}
