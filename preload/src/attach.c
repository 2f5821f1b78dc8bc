/* The PPE attachment: attach on first use, the PPE's liveness, re-attach
 * after it went, thread contexts, fork, joining a group, adoption after exec. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "config.h"
#include "fdtable.h"
#include "real.h"
#include "relisten.h"
#include "shim.h"
#include "wait.h"

uint32_t eta_generation = 1;
uint32_t eta_fork_epoch = 1;

/* ---- the attachment ---------------------------------------------------- */

/* ---- the attachment ---------------------------------------------------- */

enum { ATTACH_NONE, ATTACH_OK, ATTACH_FAILED };
static _Atomic int attach_state = ATTACH_NONE;
static dti_t *attachment;
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

static int attach_ppe(dti_t **d, char *why, size_t wl)
{
    struct dti_attach_opts opts = {.socket_path = eta_cfg.socket_path, .name = NULL};
    *d = NULL;
    int rc = dti_attach(&opts, d, why, wl);
    return rc;
}

static void mark_internal(int cfd);

static void mark_internal_all(dti_t *d)
{
    int fds[32];
    int n = dti_own_fds(d, fds, (int)(sizeof fds / sizeof fds[0]));
    for (int i = 0; i < n && i < (int)(sizeof fds / sizeof fds[0]); i++)
        mark_internal(fds[i]);
}

/* ---- the fork tree's re-attach lock ----------------------------------------
 * After a PPE restart the processes of a forked server re-attach one by one;
 * the first to make an inherited listener again offers it, the others claim
 * it and join that process's group (relisten.c). So that two of them never
 * both find it unoffered and both make it, their re-attaches take turns under
 * one lock in a page shared with every process forked after the first attach
 * (MAP_SHARED: no process outside the fork tree maps it). Robust: a holder
 * killed mid-way leaves it to the next; bounded: a holder stopped (SIGSTOP)
 * costs the others 2 s, after which they go on without it. */
static pthread_mutex_t *tree_lock;

static void tree_lock_create(void)
{
    if (tree_lock)
        return;
    void *p = mmap(NULL, sizeof *tree_lock, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return; /* then re-attaches do not take turns: a race shows as one more claim attempt */
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(p, &a);
    pthread_mutexattr_destroy(&a);
    tree_lock = p;
}

static bool tree_lock_take(void)
{
    if (!tree_lock)
        return false;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    int r = pthread_mutex_timedlock(tree_lock, &until);
    if (r == EOWNERDEAD) {
        pthread_mutex_consistent(tree_lock); /* it held nothing the next one needs to repair */
        return true;
    }
    if (r != 0)
        ETA_DEBUG("re-attach: the process group's lock: %s; going on without it", strerror(r));
    return r == 0;
}

static void tree_lock_drop(bool taken)
{
    if (taken)
        pthread_mutex_unlock(tree_lock);
}

static void attach_locked(void)
{
    char why[256] = "";
    dti_t *d = NULL;
    int rc = attach_ppe(&d, why, sizeof why);
    if (rc < 0) {
        if (eta_cfg.require) {
            eta_log("ETA_REQUIRE is set and the PPE cannot be used: %s", why[0] ? why : dti_strerror(rc));
            _exit(1);
        }
        eta_log("warning: the PPE cannot be used (%s): this program runs on kernel sockets", why[0] ? why : dti_strerror(rc));
        atomic_store(&attach_state, ATTACH_FAILED);
        return;
    }
    attachment = d;
    tree_lock_create();
    /* libdti's own descriptors are not the program's: close() on them is
     * refused so a program closing "all" its descriptors cannot cut us off. */
    mark_internal_all(d);
    eta_net_load();
    eta_stats->attached = 1;
    ETA_DEBUG("attached to the PPE at %s", eta_cfg.socket_path);
    atomic_store(&attach_state, ATTACH_OK);
}

dti_t *eta_dti(void)
{
    int st = atomic_load_explicit(&attach_state, memory_order_acquire);
    if (ETA_LIKELY(st == ATTACH_OK))
        return __atomic_load_n(&attachment, __ATOMIC_ACQUIRE); /* a re-attach replaces it */
    if (st == ATTACH_FAILED)
        return NULL;
    eta_init();
    pthread_mutex_lock(&attach_lock);
    if (atomic_load(&attach_state) == ATTACH_NONE) {
        eta_stats_publish_once();
        attach_locked();
    }
    pthread_mutex_unlock(&attach_lock);
    return atomic_load(&attach_state) == ATTACH_OK ? attachment : NULL;
}

/* The process the shim's memory belongs to: set at load and in every fork
 * child. A vfork() child (CPython's subprocess, for one) runs in its
 * parent's memory with a descriptor table of its own until it execs. */
static pid_t memory_pid;

bool eta_vfork_child(void)
{
    return getpid() != __atomic_load_n(&memory_pid, __ATOMIC_RELAXED);
}

dti_t *eta_dti_attached(void)
{
    if (atomic_load_explicit(&attach_state, memory_order_acquire) != ATTACH_OK)
        return NULL;
    return __atomic_load_n(&attachment, __ATOMIC_ACQUIRE);
}

/* ---- re-attach: a PPE that comes back ----------------------------------- */

/* After the PPE went, the next thread that calls into the shim where a new
 * PPE matters (a new socket, a wait in accept/poll/epoll with a listener) tries
 * to attach again: a timed retry with backoff, at most one connect() to the
 * control socket per interval for the whole process, from a thread that was
 * going to wake anyway. No helper thread (nothing to survive fork or to mask
 * signals for) and no extra descriptor in the program's sets; waits that could
 * otherwise sleep forever sleep at most until the next try
 * (eta_reattach_wait_ms). What the new PPE needs is then made again: every
 * listening socket, with its address, port, options and backlog
 * (eta_relisten_all); established connections stay reset. */
#define REATTACH_FIRST_NS 50000000ull    /* 50 ms after the PPE went */
#define REATTACH_MAX_NS 1000000000ull    /* then doubling, to one try a second */
#define REATTACH_SAY_NS 5000000000ull   /* a re-attach failing this long is said, once per this */
static _Atomic uint64_t reattach_next_ns; /* the earliest next try */
static uint64_t reattach_backoff_ns;      /* attach lock */
static uint64_t reattach_failing_since_ns, reattach_said_ns; /* attach lock */
uint32_t eta_fork_generation;

static void mark_internal(int cfd)
{
    if (cfd >= 0 && eta_fd_in_range(cfd))
        eta_fd_set(cfd, &eta_internal_dti.obj);
}

/* A descriptor of the shim's or libdti's at number fd moves elsewhere, so
 * that the program may have fd (as it could in a process without eta: sshd
 * dup2()s onto 4 and 5, bash onto 10 and 255). */
int eta_fd_take(int fd)
{
    struct eta_obj *o = eta_fd_peek(fd);
    dti_t *d = eta_dti_attached();
    int n = -ENOENT;
    if (o && o->kind == ETA_OBJ_INTERNAL && ((struct eta_internal *)o)->owner) {
        struct eta_internal *in = (struct eta_internal *)o;
        n = dti_fd_aside(fd, true);
        if (n == fd)
            return -1; /* errno: EMFILE */
        eta_obj_ref(o);
        eta_fd_set(n, o);
        atomic_store(in->owner, n);
        eta_fd_clear(fd);
        eta_obj_put(o);
        ETA_DEBUG("fd %d: the program takes this number; the shim's descriptor moved to %d", fd, n);
        return 0;
    }
    if (d)
        n = dti_fd_move(d, fd);
    if (n == -ENOENT) {
        if (o && o->kind == ETA_OBJ_INTERNAL)
            eta_fd_clear(fd); /* a number libdti no longer holds */
        return 0;
    }
    if (n < 0) {
        errno = -n;
        return -1;
    }
    if (o && o->kind == ETA_OBJ_INTERNAL) {
        eta_fd_clear(fd);
        mark_internal(n);
    }
    ETA_DEBUG("fd %d: the program takes this number; libdti's descriptor moved to %d", fd, n);
    return 0;
}

static bool reattach_pending(void)
{
    return atomic_load_explicit(&eta_engine_dead, memory_order_relaxed) &&
           atomic_load_explicit(&attach_state, memory_order_acquire) == ATTACH_OK && !eta_cfg.disabled;
}

int eta_reattach_wait_ms(void)
{
    if (!reattach_pending())
        return -1;
    uint64_t next = atomic_load_explicit(&reattach_next_ns, memory_order_relaxed), now = eta_now_ns();
    return next <= now ? 1 : (int)((next - now + 999999) / 1000000);
}

static bool reattach_now_locked(void);

static bool reattach_locked(void)
{
    if (!atomic_load(&eta_engine_dead))
        return true; /* another thread did it */
    if (eta_now_ns() < atomic_load(&reattach_next_ns))
        return false;
    return reattach_now_locked();
}

/* One try now, whatever the backoff says (a fork cannot wait: its child
 * would be born without a group, its inherited sockets orphans). */
static bool reattach_now_locked(void)
{
    uint64_t now = eta_now_ns();
    reattach_backoff_ns = reattach_backoff_ns ? reattach_backoff_ns * 2 : REATTACH_FIRST_NS;
    if (reattach_backoff_ns > REATTACH_MAX_NS)
        reattach_backoff_ns = REATTACH_MAX_NS;
    atomic_store(&reattach_next_ns, now + reattach_backoff_ns);
    char why[256] = "";
    dti_t *d = NULL;
    int rc = attach_ppe(&d, why, sizeof why);
    if (rc < 0) {
        ETA_DEBUG("re-attach: %s", why[0] ? why : dti_strerror(rc));
        /* A PPE that is back but refuses us (or one that stays away) is said,
         * with the reason, every few seconds: otherwise the program's sockets
         * silently stay the kernel's. */
        if (!reattach_failing_since_ns)
            reattach_failing_since_ns = now;
        if (now - reattach_failing_since_ns >= REATTACH_SAY_NS && now - reattach_said_ns >= REATTACH_SAY_NS) {
            reattach_said_ns = now;
            eta_log("re-attach to the PPE at %s: still failing after %llu s: %s", eta_cfg.socket_path,
                    (unsigned long long)((now - reattach_failing_since_ns) / 1000000000ull),
                    why[0] ? why : dti_strerror(rc));
        }
        return false;
    }
    reattach_failing_since_ns = reattach_said_ns = 0;
    dti_t *old = attachment;
    /* Everything made on the old PPE is now of an older generation: its
     * connections stay reset; its listeners are made again below. The old
     * dti_t stays allocated (retired), so contexts cached per thread
     * (tls_ctx_owner) and epoll's inner sets see a new owner and context. */
    eta_generation++;
    eta_hmap_clear();
    mark_internal_all(d);
    __atomic_store_n(&attachment, d, __ATOMIC_RELEASE);
    /* Per-process caches go stale as after a fork: the contexts cached per
     * thread for the data path (eta_ctx_cached()), epoll's inner sets and
     * ready queues (every member is looked at again). */
    __atomic_fetch_add(&eta_fork_epoch, 1, __ATOMIC_RELEASE);
    atomic_store(&eta_engine_dead, false);
    eta_stats->attached = 1;
    eta_stats->reattaches++;
    int old_fds[32];
    int n_old = dti_own_fds(old, old_fds, (int)(sizeof old_fds / sizeof old_fds[0]));
    for (int i = 0; i < n_old && i < (int)(sizeof old_fds / sizeof old_fds[0]); i++)
        eta_fd_clear(old_fds[i]); /* the numbers are about to be free for the program */
    dti_retire(old); /* its memory and descriptors; threads may still hold its contexts */
    eta_net_reload(); /* before the listeners are made again: they bind where the new PPE has addresses */
    unsigned failed = 0, shared = 0;
    bool turn = tree_lock_take();
    unsigned made = eta_relisten_all(&failed, &shared);
    tree_lock_drop(turn);
    reattach_backoff_ns = 0;
    atomic_store(&reattach_next_ns, 0);
    eta_log("re-attached to the PPE at %s: %u listening socket%s made again, %u shared with its process "
            "group%s", eta_cfg.socket_path, made, made == 1 ? "" : "s", shared,
            failed ? ", some could not be (see above)" : "");
    return true;
}

bool eta_reattach_try(void)
{
    if (!reattach_pending())
        return !atomic_load_explicit(&eta_engine_dead, memory_order_relaxed) &&
               atomic_load_explicit(&attach_state, memory_order_acquire) == ATTACH_OK;
    if (eta_now_ns() < atomic_load_explicit(&reattach_next_ns, memory_order_relaxed))
        return false;
    if (pthread_mutex_trylock(&attach_lock) != 0)
        return false; /* another thread is at it (or forking) */
    bool ok = reattach_locked();
    pthread_mutex_unlock(&attach_lock);
    return ok;
}

/* A claim joined another process's group (pass_fds.c): d replaces the
 * attachment, which held no accelerated socket. As in a re-attach, what was
 * made under the old one is of an older generation and the caches go stale;
 * the old attachment is retired (its membership ends). */
bool eta_attach_join(dti_t *d)
{
    if (pthread_mutex_trylock(&attach_lock) != 0)
        return false;
    eta_attach_join_locked(d, false);
    pthread_mutex_unlock(&attach_lock);
    return true;
}

/* The same with the attach lock held (a re-attach joining the group of the
 * process that made a shared listener again: relisten.c). */
void eta_attach_join_locked(dti_t *d, bool leave_old)
{
    dti_t *old = attachment;
    eta_generation++;
    eta_hmap_clear();
    mark_internal_all(d);
    __atomic_store_n(&attachment, d, __ATOMIC_RELEASE);
    __atomic_fetch_add(&eta_fork_epoch, 1, __ATOMIC_RELEASE);
    eta_stats->attached = 1;
    if (old) {
        int old_fds[32];
        int n_old = dti_own_fds(old, old_fds, (int)(sizeof old_fds / sizeof old_fds[0]));
        for (int i = 0; i < n_old && i < (int)(sizeof old_fds / sizeof old_fds[0]); i++)
            eta_fd_clear(old_fds[i]);
        if (leave_old)
            dti_leave(old); /* attached a moment ago: it must not stay an empty group on the PPE */
        else
            dti_retire(old);
    }
}

/* The constructor adopting the sockets an exec handed over: d is the
 * attachment from here on, as if eta_dti() had made it. */
void eta_attach_adopted(dti_t *d)
{
    pthread_mutex_lock(&attach_lock);
    eta_stats_publish_once();
    attachment = d;
    tree_lock_create();
    mark_internal_all(d);
    eta_net_load();
    eta_stats->attached = 1;
    atomic_store(&attach_state, ATTACH_OK);
    pthread_mutex_unlock(&attach_lock);
}

bool eta_ppe_usable(void)
{
    return eta_dti() != NULL;
}

/* The calling thread's context, cached per thread: dti_ctx_get() is a
 * thread-specific lookup in another library, paid once per thread instead
 * of once per call. A fork (the epoch) or a new attachment makes the cache
 * stale: the child's thread must get a context of its own. (Whatever comes
 * to replace the attachment in a running process must bump
 * eta_fork_epoch too, or a recycled dti_t address would match.) */
ETA_TLS dti_ctx_t *eta_tls_ctx;
static ETA_TLS dti_t *tls_ctx_owner;
ETA_TLS uint32_t eta_tls_ctx_epoch;
ETA_TLS uint64_t eta_tls_ctx_serial;
ETA_TLS struct dti_note_view eta_tls_note;
static _Atomic uint64_t ctx_serials;

dti_ctx_t *eta_ctx(void)
{
    /* The epoch first: a re-attach stores the new attachment before it bumps
     * the epoch, so a thread that reads the epoch after the bump also sees the
     * new attachment; one that races it caches under the old epoch and looks
     * again on its next call — never the retired context under the new one. */
    const uint32_t epoch = __atomic_load_n(&eta_fork_epoch, __ATOMIC_ACQUIRE);
    dti_t *d = eta_dti();
    if (!d) {
        errno = ENETDOWN;
        return NULL;
    }
    if (ETA_LIKELY(eta_tls_ctx && tls_ctx_owner == d && eta_tls_ctx_epoch == epoch))
        return eta_tls_ctx;
    int err = 0;
    dti_ctx_t *c = dti_ctx_get(d, &err);
    if (!c) {
        errno = eta_errno_from_dti(err);
        return NULL;
    }
    dti_ctx_set_spin(c, eta_cfg.spin_ns); /* ETA_SPIN_US: the most a wait spins */
    (void)dti_note_view(c, &eta_tls_note); /* (c and the view are not NULL: it cannot fail) */
    eta_tls_ctx = c;
    tls_ctx_owner = d;
    eta_tls_ctx_epoch = epoch;
    eta_tls_ctx_serial = atomic_fetch_add(&ctx_serials, 1) + 1;
    return c;
}

int eta_errno_from_dti(int res)
{
    int e = res < 0 ? -res : res;
    switch (e) {
    case DTI_E_ENGINE_GONE:
    case DTI_E_BROKEN:
        eta_mark_engine_dead();
        return ECONNRESET;
    case DTI_E_NO_ENGINE:
    case DTI_E_PROTOCOL:
        return ECONNRESET;
    case DTI_E_DENIED:
        return EACCES;
    case DTI_E_LIMIT:
        return ENOBUFS;
    case DTI_E_BAD_HANDLE:
        return EBADF;
    case DTI_E_VERSION:
        return EPROTO;
    default:
        return e > 0 && e < 4096 ? e : EIO;
    }
}

/* ---- the PPE's liveness --------------------------------------------------- */

_Atomic bool eta_engine_dead;
/* Bumped when the PPE says events were dropped: everybody re-checks. */
_Atomic uint32_t eta_rescan_seq;

bool eta_engine_check(dti_t *d)
{
    if (atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        return false;
    bool alive = dti_engine_alive(d);
    if (!alive)
        eta_mark_engine_dead();
    return alive;
}

void eta_mark_engine_dead(void)
{
    if (!atomic_exchange(&eta_engine_dead, true)) {
        atomic_fetch_add(&eta_rescan_seq, 1); /* every member's readiness changed */
        eta_stats->attached = 0;
        eta_log("warning: the PPE has gone: accelerated sockets fail, new sockets go to the kernel");
    }
}

/* fork: the child joins the parent's group in the PPE and keeps every
 * accelerated socket it inherited (dti_fork_prepare/parent/child). The
 * attach lock is held across fork() so the attachment cannot change under
 * it. */
static bool forking;

bool eta_attach_fork_prepare(void)
{
    pthread_mutex_lock(&attach_lock);
    /* A process that slept while the PPE was away (nginx's master in
     * sigsuspend) and now forks (a reload's new workers) re-attaches first,
     * so that the child is born into its group on the new PPE. */
    if (atomic_load(&attach_state) == ATTACH_OK && attachment &&
        !atomic_load_explicit(&eta_engine_dead, memory_order_relaxed) && !dti_engine_alive(attachment))
        eta_mark_engine_dead(); /* it went while this process slept (one poll(): a fork costs more) */
    if (reattach_pending())
        (void)reattach_now_locked();
    forking = atomic_load(&attach_state) == ATTACH_OK && attachment &&
              !atomic_load_explicit(&eta_engine_dead, memory_order_relaxed);
    if (forking && dti_fork_prepare(attachment) != 0)
        ETA_DEBUG("fork: the PPE cannot take the child into this process's group");
    return forking;
}

void eta_attach_fork_parent(void)
{
    if (forking) {
        dti_fork_parent(attachment);
    }
    forking = false;
    pthread_mutex_unlock(&attach_lock);
}

/* The child's side; true when it joined (its inherited sockets work). */
/* libdti closes its descriptors with its own system calls, which the shim's
 * close() never sees: numbers among `before` that libdti no longer holds are
 * forgotten here, so the program may use them again. */
static void forget_closed_own_fds(const int *before, int n)
{
    int now[32];
    int n_now = dti_own_fds(attachment, now, 32);
    for (int i = 0; i < n; i++) {
        bool kept = false;
        for (int j = 0; j < n_now && j < 32 && !kept; j++)
            kept = now[j] == before[i];
        if (!kept)
            eta_fd_clear(before[i]);
    }
}

static bool fork_join(void)
{
    if (!forking)
        return false;
    forking = false;
    int before[32];
    int n_before = dti_own_fds(attachment, before, 32);
    int rc = dti_fork_child(attachment); /* closes the parent's control socket copy */
    forget_closed_own_fds(before, n_before < 32 ? n_before : 32);
    if (rc != 0) {
        ETA_DEBUG("fork: the child could not join the PPE group (%s)", dti_strerror(rc));
        return false;
    }
    int cfd = dti_control_fd(attachment);
    mark_internal(cfd);
    return true;
}

/* In a fork child that could not join the parent's group (no PPE, a PPE
 * limit), the parent's attachment is the parent's: forget it without
 * telling the PPE and attach afresh on the next socket; inherited sockets
 * are then orphans. */
bool eta_attach_fork_child(void)
{
    __atomic_store_n(&memory_pid, getpid(), __ATOMIC_RELAXED);
    pthread_mutex_init(&attach_lock, NULL);
    eta_fork_epoch++; /* per-process caches (epoll's inner set) are the parent's */
    if (fork_join()) {
        eta_stats_after_fork(true);
        return true;
    }
    if (atomic_load(&attach_state) == ATTACH_OK && attachment) {
        int fds[32];
        int n = dti_own_fds(attachment, fds, 32);
        for (int i = 0; i < n && i < 32; i++) {
            eta_fd_clear(fds[i]);
            real_close(fds[i]);
        }
    }
    attachment = NULL;
    eta_stats->attached = 0;
    atomic_store(&attach_state, ATTACH_NONE);
    eta_generation++;
    eta_fork_generation = eta_generation; /* older sockets are the parent's (counted fork-child) */
    eta_stats_after_fork(false);
    return false;
}

void eta_attach_loaded(void)
{
    memory_pid = getpid();
}
