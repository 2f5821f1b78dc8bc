/* libdti layer 2, queues (queue.h): the wake protocol (arm, disarm, wait:
 * QUEUES.md) over a context's queue pairs and the adaptive spin policy. */
#include "queue.h"
#include "sys.h"

#include <errno.h>
#include <sys/epoll.h>

dti_t *dti_ctx_owner(const dti_ctx_t *c) { return c->d; }
int dti_ctx_wait_fd(const dti_ctx_t *c) { return c->wait_fd; }
void dti_ctx_set_spin(dti_ctx_t *c, uint64_t spin_ns) { c->spin_ns = c->spin_budget = spin_ns; }
void dti_ctx_set_interruptible(dti_ctx_t *c, int on) { c->interruptible = on != 0; }

/* Adaptive spinning: a context spins only while spinning pays. A wait
 * answered within spin_ns (while spinning, or soon after it slept) sets the
 * full budget; one that took over kLongWait times spin_ns (an idle peer, a
 * program waiting for work) halves it, down to none below kMinSpinNs; waits
 * in between change nothing. Without a budget, one wait in kProbeEvery spins
 * spin_ns anyway, to notice answers that got fast. So an idle program sleeps
 * at once (about 0% CPU) and a busy request/response loop makes no system
 * call; dti_ctx_set_spin_fixed() turns the adaptation off. */
enum { kProbeEvery = 32, kMinSpinNs = 1000, kLongWait = 4 };

void dti_ctx_set_spin_fixed(dti_ctx_t *c, int fixed)
{
    c->spin_fixed = fixed != 0;
    c->spin_budget = c->spin_ns;
}

uint64_t dti_spin_begin(dti_ctx_t *c)
{
    if (c->spin_fixed)
        return c->spin_ns;
    if (c->spin_budget || !c->spin_ns)
        return c->spin_budget;
    if (++c->spin_skipped < kProbeEvery)
        return 0;
    c->spin_skipped = 0;
    return c->spin_ns;
}

void dti_spin_end(dti_ctx_t *c, uint64_t waited_ns)
{
    if (waited_ns <= c->spin_ns)
        c->spin_budget = c->spin_ns;
    else if (waited_ns / kLongWait > c->spin_ns)
        c->spin_budget = c->spin_budget / 2 < kMinSpinNs ? 0 : c->spin_budget / 2;
}

uint64_t dti_ctx_spin_budget(const dti_ctx_t *c) { return c->spin_budget; }

/* ---- wake protocol ------------------------------------------------------------ */

/* The next entry's stamp says whether it is there (one cache line); the
 * producer index is read too in the wake protocol (see arm()). */
static bool ring_has_entries(struct dti_ctx *c)
{
    const struct dti_ev *next = &c->evs[c->ev_cons & c->ev_mask];
    return DTI_LOAD(&next->stamp) == (uint16_t)(c->ev_cons + 1) ||
           DTI_LOAD(&c->qp->ev_overflow) != c->overflow_seen;
}

static bool has_entries(struct dti_ctx *c, bool with_stash)
{
    for (uint32_t i = 0; i < n_qps(c); i++) {
        struct dti_ctx *q = qp_of(c, i);
        if ((with_stash && (q->stash_len > 0 || q->stash_rescan)) || ring_has_entries(q))
            return true;
    }
    return false;
}

bool dti__all_alive(struct dti_ctx *c, bool allow_syscall)
{
    for (uint32_t i = 0; i < n_qps(c); i++)
        if (!dti__check_alive(qp_of(c, i)->d, allow_syscall))
            return false;
    return true;
}

int dti__dead_reason(struct dti_ctx *c)
{
    for (uint32_t i = 0; i < n_qps(c); i++)
        if (qp_of(c, i)->d->dead)
            return qp_of(c, i)->d->dead_reason;
    return DTI_E_ENGINE_GONE;
}

static void disarm_all(struct dti_ctx *c)
{
    for (uint32_t i = 0; i < n_qps(c); i++)
        __atomic_store_n(&qp_of(c, i)->qp->armed, 0u, __ATOMIC_RELAXED);
}

/* A queue pair whose command ring was found full (queue.h: ring_refused):
 * 0 when none was; 1 when every such ring has room again and the releases it
 * left owed went out (the caller retries what was refused: dti.h's "call
 * again after dti_reap()/dti_wait()"); 2 while one is still full. The engine
 * takes the commands that filled it without a wakeup (SEND, RECV_RELEASE,
 * TX_GROW are not answered), so a context that slept now could sleep for
 * good: its reads' releases not told, the peer's window shut, its watch not
 * queued. */
static int ring_blocked(struct dti_ctx *c)
{
    int r = 0;
    for (uint32_t i = 0; i < n_qps(c); i++) {
        struct dti_ctx *q = qp_of(c, i);
        if (__builtin_expect(!q->ring_refused, 1))
            continue;
        if (!dti__cmd_room(q) || dti__flush_stranded(q) < 0) {
            r = 2;
            continue;
        }
        q->ring_refused = false;
        if (r == 0)
            r = 1;
    }
    return r;
}

static int arm(struct dti_ctx *c, bool with_stash)
{
    if (!dti__all_alive(c, false))
        return -dti__dead_reason(c);
    if (has_entries(c, with_stash))
        return 1;
    if (ring_blocked(c) != 0)
        return 1; /* look again (still full: the engine is taking the commands) */
    /* Arm, then check: the engine publishes, fences, then reads `armed`. One
     * of us must see the other's store, so no wakeup is lost. */
    bool pending = false;
    for (uint32_t i = 0; i < n_qps(c); i++) {
        struct dti_ctx *q = qp_of(c, i);
        DTI_STORE_SC(&q->qp->armed, 1u);
        /* ev_prod is what the engine stores (SC) after stamping entries and
         * before it looks at `armed` (SC): the Dekker pair of this protocol. */
        pending |= DTI_LOAD_SC(&q->qp->ev_prod) != q->ev_cons;
    }
    if (pending || has_entries(c, with_stash)) {
        disarm_all(c);
        return 1;
    }
    for (uint32_t i = 0; i < n_qps(c); i++) {
        struct dti_ctx *q = qp_of(c, i);
        if (DTI_LOAD_SC(&q->d->hdr->engine_state) != DTI_ENGINE_ALIVE) {
            disarm_all(c);
            dti__check_alive(q->d, false);
            return -q->d->dead_reason;
        }
    }
    return 0;
}

int dti_arm(dti_ctx_t *c) { return arm(c, true); }

void dti_disarm(dti_ctx_t *c)
{
    disarm_all(c);
    /* Latency sampling: a sleep ended (dti_wait()'s, or a caller's own poll
     * on the wait fd, as the shim's): when, for the read that follows
     * (data.c). One TSC read per sleep, no system call. */
    uint64_t t = dti__tsc();
    for (uint32_t i = 0; i < n_qps(c); i++)
        qp_of(c, i)->woke_tsc = t;
    /* One read empties an eventfd (not a semaphore one); a write that lands
     * after it only makes the next sleep return at once, and that wait
     * looks again. */
    for (uint32_t i = 0; i < n_qps(c); i++) {
        uint64_t v;
        ssize_t n = dti__sys_read(qp_of(c, i)->wake_fd, &v, sizeof v);
        (void)n;
    }
}

/* 1: something to look at (entries, or the engine died: reap says which),
 * 0: timeout, < 0: a wait error. */
static int wait_spin_sleep(struct dti_ctx *c, int timeout_ms, bool with_stash, uint64_t start)
{
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000ull;
    uint64_t until = start + dti_spin_begin(c);
    for (uint64_t now = start; now < until && now < deadline; now = dti__now_ns()) {
        if (has_entries(c, with_stash) || !dti__all_alive(c, false))
            return 1;
        __builtin_ia32_pause();
    }
    for (;;) {
        /* A full command ring: no sleep on the wake fd, naps of 1 ms until
         * the engine has taken commands (ring_blocked()). */
        const int blocked = ring_blocked(c);
        if (blocked == 1)
            return 1;
        if (blocked ? has_entries(c, with_stash) || !dti__all_alive(c, false) : arm(c, with_stash) != 0)
            return 1;
        uint64_t now = dti__now_ns();
        if (now >= deadline) {
            dti_disarm(c);
            return 0;
        }
        int ms = deadline == UINT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
        if (blocked && (ms < 0 || ms > 1))
            ms = 1;
        struct epoll_event ev;
        int n = dti__sys_epoll_wait(c->wait_fd, &ev, 1, ms);
        int err = n < 0 ? errno : 0;
        dti_disarm(c); /* (stamps when the sleep ended: latency sampling) */
        if (err == EINTR && c->interruptible)
            return -EINTR; /* the caller answers the signal (dti_ctx_set_interruptible) */
        if (err && err != EINTR)
            return -err;
        /* Entries first: the liveness check costs a system call. */
        if (has_entries(c, with_stash) || !dti__all_alive(c, true))
            return 1;
    }
}

/* 1: something to look at (entries, or the engine died: reap says which),
 * 0: timeout, < 0: a wait error. */
static int wait_impl(struct dti_ctx *c, int timeout_ms, bool with_stash)
{
    if (has_entries(c, with_stash) || !dti__all_alive(c, false))
        return 1;
    if (timeout_ms == 0)
        return 0;
    uint64_t start = dti__now_ns();
    int r = wait_spin_sleep(c, timeout_ms, with_stash, start);
    if (r >= 0)
        dti_spin_end(c, dti__now_ns() - start);
    return r;
}

int dti__wait_ring(struct dti_ctx *c, int timeout_ms) { return wait_impl(c, timeout_ms, false); }

int dti_wait(dti_ctx_t *c, int timeout_ms)
{
    int r = wait_impl(c, timeout_ms, true);
    if (r == 1 && !dti__all_alive(c, false) && dti_inflight(c) == 0 && !has_entries(c, true))
        return -dti__dead_reason(c);
    return r;
}
