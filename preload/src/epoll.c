/* epoll over sets that mix accelerated sockets with kernel descriptors.
 * (One file over the tree's ~800 lines on purpose: set, ready queue, looks and
 * waits share one lock and its invariants; the waits are the seam to split.)
 *
 * The program's epoll instance stays a real kernel epoll holding its kernel
 * descriptors (and the kernel half of INADDR_ANY listeners), untouched: its
 * data words are the program's and never collide with ours. Accelerated
 * members live in a shadow interest list beside it. To sleep on both, the
 * shim keeps a private epoll ("inner") holding the program's epoll fd and
 * the waiting thread's DTI wait fd: nested epoll, as the kernel allows.
 * Readiness of accelerated members is read from shared memory (level), with
 * per-socket totals for edge triggering.
 *
 * A wait looks only at members that may be ready: the set's ready queue.
 * Every member is either queued or watched (a DTI watch) by the context of
 * each thread that waits in the set, and any thread's eta_pump() turns an
 * engine event into a queued entry (eta_epoll_touch()). So epoll_wait costs
 * O(ready members), not O(members), as the kernel's does. Queued are: new and
 * modified members, members an event names, a listener whose stash grew, and
 * every member after lost events or the PPE's death (eta_rescan_seq), a fork,
 * or a thread that had not waited in the set before. A level-triggered member
 * stays queued while it is ready; one found not ready leaves the queue (its
 * one-shot POLLOUT watch armed first when it waits for send space). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/eventfd.h>

#include "lock.h"
#include "shim.h"

void *eta_obj_alloc(void);

/* Contexts (threads) that have watched members of one set: a member carries
 * one bit per slot, so a thread coming back costs no watch command. */
#define WAITER_SLOTS 4

struct epent {
    int fd;
    struct eta_sock *s;  /* not referenced: release removes the entry */
    int32_t rq;          /* position in the ready queue, -1: not queued */
    uint8_t watched;     /* bit k: watched from e->waiters[k] */
    uint32_t stamp;      /* e->look_stamp of the last collect() that looked at it */
    uint32_t events;     /* EPOLLIN | ... | EPOLLET | EPOLLONESHOT ... */
    epoll_data_t data;
    uint32_t last_ev;    /* edge triggering: what was reported */
    uint64_t last_rx;    /* the socket's arrival total when last reported */
    uint64_t last_tx;    /* its send-space total when last reported */
    uint32_t last_rescan;
    bool disabled;       /* EPOLLONESHOT fired */
};

struct eta_epoll {
    struct eta_obj obj;
    int epfd;
    int inner;              /* -1 until first needed */
    uint32_t inner_gen;     /* eta_fork_epoch it was made in (fork) */
    uint64_t inner_ctx;     /* whose wait fd is in inner (eta_ctx_serial()) */
    struct eta_lock lock;   /* the members, the ready queue, the waiters */
    struct epent *ents;
    unsigned n, cap;
    unsigned cursor;        /* where the next look at the ready queue starts: fairness */
    uint32_t *rq;           /* the ready queue: entry indices (capacity: cap) */
    unsigned n_rq;
    uint32_t seen_rescan;   /* eta_rescan_seq when every member was last queued */
    uint32_t seen_epoch;    /* eta_fork_epoch likewise (a fork child looks at all) */
    uint64_t waiters[WAITER_SLOTS]; /* contexts that waited here (eta_ctx_serial(); see epent.watched) */
    unsigned next_waiter;   /* the slot a new waiter takes */
    uint32_t look_stamp;    /* bumped by every collect() */
    int kick;               /* eventfd in the program's epoll (see kick_sleepers), -1: none */
    _Atomic int sleepers;   /* threads asleep in this epoll (either way) */
    _Atomic unsigned n_kernel; /* kernel descriptors in the program's epoll (never fewer than
                                * there are; 0: a wait need not ask the kernel) */
};
_Static_assert(sizeof(struct eta_epoll) <= 256, "epoll object outgrew its slot");

/* Every shadow, so a closed socket can leave them all. */
#define MAX_SHADOWS 1024
static struct eta_epoll *shadows[MAX_SHADOWS];
static pthread_mutex_t shadows_lock = PTHREAD_MUTEX_INITIALIZER;

static void link_del(struct eta_sock *s, struct eta_epoll *e, uint32_t idx);
static void remove_entry(struct eta_epoll *e, uint32_t idx);

static int fail(int err)
{
    errno = err;
    return -1;
}

/* ---- waking threads already asleep when a member is added ---------------
 * The kernel wakes a thread sleeping in epoll_wait when another thread adds a
 * ready descriptor. An accelerated member is not in the kernel's set, and the
 * sleeper may be in the kernel's epoll_wait on the program's epoll (the set
 * had no accelerated member when it went to sleep) or in the inner epoll
 * watching only its own context. So each shadow owns an eventfd registered in
 * the program's epoll (edge-triggered) with a data word no program uses: a
 * 64-bit value from the kernel's AT_RANDOM bytes. Adding a member writes it;
 * whatever epoll_wait harvests it drops the event and looks again. */
static uint64_t kick_cookie(void)
{
    static uint64_t cookie;
    uint64_t c = __atomic_load_n(&cookie, __ATOMIC_RELAXED);
    if (ETA_UNLIKELY(!c)) {
        const unsigned char *r = (const unsigned char *)getauxval(AT_RANDOM);
        if (r)
            memcpy(&c, r + 8, sizeof c);
        c |= 1; /* never 0, the value programs use most */
        __atomic_store_n(&cookie, c, __ATOMIC_RELAXED);
    }
    return c;
}

static void kick_register(struct eta_epoll *e)
{
    int k = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (k < 0)
        return; /* no cross-thread wake-up: a sleeper finds the member at its next call */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = kick_cookie()};
    if (real_epoll_ctl(e->epfd, EPOLL_CTL_ADD, k, &ev) != 0) {
        real_close(k);
        return;
    }
    if (eta_fd_in_range(k)) { /* the program's close() must not take it */
        static struct eta_obj internal = {ETA_OBJ_INTERNAL, 1};
        eta_fd_set(k, &internal);
    }
    e->kick = k;
}

static void kick_sleepers(struct eta_epoll *e)
{
    uint64_t one = 1;
    if (e->kick >= 0 && write(e->kick, &one, sizeof one) < 0 && errno != EAGAIN)
        ETA_DEBUG("epoll: waking sleepers of epoll %d failed: %s", e->epfd, strerror(errno));
}

/* Drops our wake-ups from what the kernel's epoll_wait returned. Returns the
 * events left; *kicked tells whether one was dropped. (The eventfd's counter
 * is never read: edge-triggered, every write is a new event, and 2^64 writes
 * are out of reach.) */
static int drop_kicks(struct epoll_event *out, int n, bool *kicked)
{
    if (n <= 0)
        return n;
    uint64_t cookie = kick_cookie();
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (ETA_UNLIKELY(out[i].data.u64 == cookie && out[i].events == EPOLLIN)) {
            *kicked = true;
            continue;
        }
        out[k++] = out[i];
    }
    return k;
}

static struct eta_epoll *shadow_get(int epfd)
{
    struct eta_obj *o = eta_fd_get(epfd);
    if (o && o->kind != ETA_OBJ_EPOLL) {
        eta_obj_put(o);
        return NULL;
    }
    return (struct eta_epoll *)o;
}

/* Descriptors already in the program's epoll when its shadow is made
 * (its "tfd:" lines in /proc/self/fdinfo); 1 when that cannot be read, so
 * waits keep asking the kernel. Once per set. */
static unsigned kernel_members(int epfd)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", epfd);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    unsigned n = 0;
    uint64_t last = 0; /* the last five bytes read, across reads: "\ntfd:" starts a member's line */
    const uint64_t mark = (uint64_t)'\n' << 32 | (uint64_t)'t' << 24 | (uint64_t)'f' << 16 | (uint64_t)'d' << 8 | ':';
    ssize_t got;
    while ((got = real_read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < got; i++) {
            last = (last << 8 | (unsigned char)buf[i]) & 0xffffffffffull;
            n += last == mark;
        }
    real_close(fd);
    return got < 0 ? 1 : n;
}

/* One kernel descriptor fewer (never below 0). */
static void kernel_dec(struct eta_epoll *e)
{
    unsigned n = atomic_load(&e->n_kernel);
    while (n > 0 && !atomic_compare_exchange_weak(&e->n_kernel, &n, n - 1)) {
    }
}

static struct eta_epoll *shadow_create(int epfd)
{
    if (!eta_fd_in_range(epfd))
        return NULL;
    struct eta_epoll *e = eta_obj_alloc();
    if (!e)
        return NULL;
    e->obj.kind = ETA_OBJ_EPOLL;
    atomic_init(&e->obj.refs, 1); /* the caller's */
    e->epfd = epfd;
    e->inner = -1;
    e->kick = -1;
    atomic_init(&e->sleepers, 0);
    e->lock = (struct eta_lock)ETA_LOCK_INIT;
    pthread_mutex_lock(&shadows_lock);
    bool placed = false;
    for (int i = 0; i < MAX_SHADOWS && !placed; i++)
        if (!shadows[i]) {
            shadows[i] = e;
            placed = true;
        }
    pthread_mutex_unlock(&shadows_lock);
    if (!placed) {
        atomic_store(&e->obj.refs, 0);
        return NULL;
    }
    atomic_init(&e->n_kernel, 0);
    kick_register(e);
    eta_fd_set(epfd, &e->obj);
    /* Counted once the shadow is visible: a kernel descriptor another
     * thread adds meanwhile is either in what /proc shows now or counted by
     * its own epoll_ctl (which finds the shadow); never missed (counted
     * twice at worst: waits then ask the kernel). Our eventfd is not the
     * program's. */
    unsigned members = kernel_members(epfd);
    atomic_fetch_add(&e->n_kernel, members - (e->kick >= 0 && members > 0));
    return e;
}

/* Keeps the count of the program's kernel descriptors in a set with a
 * shadow, after a successful epoll_ctl of one. A descriptor closed while in
 * the set leaves it uncounted (the count stays high: waits ask the kernel). */
static void kernel_count(int epfd, int op)
{
    if (op == EPOLL_CTL_MOD)
        return;
    struct eta_epoll *e = shadow_get(epfd);
    if (!e)
        return;
    if (op == EPOLL_CTL_ADD)
        atomic_fetch_add(&e->n_kernel, 1);
    else
        kernel_dec(e);
    eta_obj_put(&e->obj);
}

static int kernel_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    int rc = real_epoll_ctl(epfd, op, fd, ev);
    if (rc == 0 && atomic_load_explicit(&eta_tracked, memory_order_relaxed))
        kernel_count(epfd, op);
    return rc;
}

void eta_epoll_destroy(struct eta_obj *o);
void eta_epoll_destroy(struct eta_obj *o)
{
    struct eta_epoll *e = (struct eta_epoll *)o;
    pthread_mutex_lock(&shadows_lock);
    for (int i = 0; i < MAX_SHADOWS; i++)
        if (shadows[i] == e)
            shadows[i] = NULL;
    pthread_mutex_unlock(&shadows_lock);
    if (e->inner >= 0 && e->inner_gen == eta_fork_epoch)
        real_close(e->inner);
    if (e->kick >= 0) {
        eta_fd_clear(e->kick);
        real_close(e->kick);
    }
    eta_lock(&e->lock);
    for (unsigned i = 0; i < e->n; i++)
        link_del(e->ents[i].s, e, i);
    eta_unlock(&e->lock);
    free(e->ents);
    free(e->rq);
}

void eta_epoll_forget_fd(int fd, struct eta_sock *s)
{
    (void)fd;
    pthread_mutex_lock(&shadows_lock);
    for (int i = 0; i < MAX_SHADOWS; i++) {
        struct eta_epoll *e = shadows[i];
        if (!e)
            continue;
        eta_lock(&e->lock);
        for (unsigned j = 0; j < e->n;) {
            if (e->ents[j].s == s)
                remove_entry(e, j);
            else
                j++;
        }
        eta_unlock(&e->lock);
    }
    pthread_mutex_unlock(&shadows_lock);
}

/* ---- membership and the ready queue (the set's lock held) ----------------- */

/* The set whose lock this thread holds, if any: an event dispatched while
 * it looks at its members (eta_watch() may pump) queues without locking. */
static ETA_TLS struct eta_epoll *tls_locked;

static void set_lock(struct eta_epoll *e)
{
    eta_lock(&e->lock);
    tls_locked = e;
}

static void set_unlock(struct eta_epoll *e)
{
    tls_locked = NULL;
    eta_unlock(&e->lock);
}

/* The link's index is written after the slot is taken: whoever reads a
 * link of set e holds e's lock, as the caller does. */
static void link_add(struct eta_sock *s, struct eta_epoll *e, uint32_t idx)
{
    for (int k = 0; k < 2; k++) {
        struct eta_epoll *none = NULL;
        if (atomic_compare_exchange_strong(&s->ep[k].set, &none, e)) {
            atomic_store(&s->ep[k].idx, idx);
            return;
        }
    }
    atomic_fetch_add(&s->ep_more, 1);
}

/* Finds the link of (e, idx); NULL when it is one of the `ep_more`. */
static struct eta_ep_link *link_of(struct eta_sock *s, struct eta_epoll *e, uint32_t idx)
{
    for (int k = 0; k < 2; k++)
        if (atomic_load(&s->ep[k].set) == e && atomic_load(&s->ep[k].idx) == idx)
            return &s->ep[k];
    return NULL;
}

static void link_del(struct eta_sock *s, struct eta_epoll *e, uint32_t idx)
{
    struct eta_ep_link *l = link_of(s, e, idx);
    if (l)
        atomic_store(&l->set, NULL);
    else if (atomic_load(&s->ep_more))
        atomic_fetch_sub(&s->ep_more, 1);
}

static void rq_push(struct eta_epoll *e, uint32_t idx)
{
    if (e->ents[idx].rq >= 0)
        return;
    e->ents[idx].rq = (int32_t)e->n_rq;
    e->rq[e->n_rq++] = idx;
}

static void rq_drop(struct eta_epoll *e, uint32_t idx)
{
    int32_t pos = e->ents[idx].rq;
    if (pos < 0)
        return;
    uint32_t last = e->rq[--e->n_rq];
    e->rq[pos] = last;
    e->ents[last].rq = pos;
    e->ents[idx].rq = -1;
}

static void rq_push_all(struct eta_epoll *e)
{
    for (uint32_t i = 0; i < e->n; i++)
        rq_push(e, i);
}

/* Removes entry idx; the last entry takes its place (index, queue, link). */
static void remove_entry(struct eta_epoll *e, uint32_t idx)
{
    rq_drop(e, idx);
    link_del(e->ents[idx].s, e, idx);
    uint32_t last = --e->n;
    if (idx == last)
        return;
    e->ents[idx] = e->ents[last];
    if (e->ents[idx].rq >= 0)
        e->rq[e->ents[idx].rq] = idx;
    struct eta_ep_link *l = link_of(e->ents[idx].s, e, last);
    if (l)
        atomic_store(&l->idx, idx);
}

static void queue_linked(struct eta_epoll *e, struct eta_sock *s, struct eta_ep_link *l)
{
    uint32_t idx = atomic_load(&l->idx);
    if (atomic_load(&l->set) == e && idx < e->n && e->ents[idx].s == s)
        rq_push(e, idx);
}

void eta_epoll_touch(struct eta_sock *s)
{
    if (ETA_UNLIKELY(atomic_load_explicit(&s->ep_more, memory_order_relaxed)))
        atomic_fetch_add(&eta_rescan_seq, 1); /* a member of many sets: every set looks again */
    for (int k = 0; k < 2; k++) {
        struct eta_epoll *e = atomic_load_explicit(&s->ep[k].set, memory_order_acquire);
        if (!e)
            continue;
        if (e == tls_locked) {
            queue_linked(e, s, &s->ep[k]);
            continue;
        }
        /* The set may be closing: hold it, and check it is still a set
         * with this member once its lock is ours. A thread that already
         * holds another set's lock (an event reaped while it looks at that
         * set's members) must not wait for this one: two threads could wait
         * for each other. It asks every set to look again instead. */
        if (!eta_obj_tryref(&e->obj))
            continue;
        if (e->obj.kind == ETA_OBJ_EPOLL) {
            if (!tls_locked) {
                eta_lock(&e->lock);
            } else if (!eta_trylock(&e->lock)) {
                atomic_fetch_add(&eta_rescan_seq, 1);
                eta_obj_put(&e->obj);
                continue;
            }
            queue_linked(e, s, &s->ep[k]);
            eta_unlock(&e->lock);
        }
        eta_obj_put(&e->obj);
    }
}

static struct epent *find(struct eta_epoll *e, int fd, struct eta_sock *s)
{
    for (unsigned i = 0; i < e->n; i++)
        if (e->ents[i].fd == fd && e->ents[i].s == s)
            return &e->ents[i];
    return NULL;
}

static uint32_t dti_mask(uint32_t events)
{
    uint32_t m = 0;
    if (events & (EPOLLIN | EPOLLRDNORM))
        m |= DTI_POLLIN;
    if (events & EPOLLRDHUP)
        m |= DTI_POLLRDHUP;
    if (events & (EPOLLOUT | EPOLLWRNORM))
        m |= DTI_POLLOUT;
    return m;
}

static int grow(struct eta_epoll *e)
{
    unsigned cap = e->cap ? e->cap * 2 : 16;
    struct epent *n = realloc(e->ents, cap * sizeof *n);
    if (!n)
        return -1;
    e->ents = n;
    uint32_t *q = realloc(e->rq, cap * sizeof *q);
    if (!q)
        return -1; /* ents grew, cap did not: harmless */
    e->rq = q;
    e->cap = cap;
    return 0;
}

ETA_EXPORT int epoll_create(int size)
{
    return real_epoll_create(size);
}

ETA_EXPORT int epoll_create1(int flags)
{
    return real_epoll_create1(flags);
}

ETA_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (ETA_LIKELY(!s))
        return kernel_ctl(epfd, op, fd, ev);
    uint32_t st = atomic_load(&s->state);
    if (st != ETA_SOCK_ACCEL && st != ETA_SOCK_ORPHAN) {
        eta_obj_put(&s->obj);
        return kernel_ctl(epfd, op, fd, ev);
    }
    if (epfd == fd) {
        eta_obj_put(&s->obj);
        return fail(EINVAL);
    }
    if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && !ev) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL) {
        eta_obj_put(&s->obj);
        return fail(EINVAL);
    }
    if (real_fcntl(epfd, F_GETFD) < 0) {
        eta_obj_put(&s->obj);
        return fail(EBADF);
    }
    struct eta_epoll *e = shadow_get(epfd);
    bool created = false;
    if (!e && op == EPOLL_CTL_ADD)
        created = (e = shadow_create(epfd)) != NULL;
    if (!e) {
        eta_obj_put(&s->obj);
        return fail(op == EPOLL_CTL_ADD ? ENOMEM : ENOENT);
    }
    int rc = 0;
    set_lock(e);
    struct epent *ent = find(e, fd, s);
    if (op == EPOLL_CTL_ADD) {
        if (ent) {
            rc = fail(EEXIST);
        } else if (s->hybrid && real_epoll_ctl(epfd, op, fd, ev) != 0) {
            rc = -1; /* the kernel half's answer (e.g. EINVAL for a bad flag) */
        } else {
            if (s->hybrid)
                atomic_fetch_add(&e->n_kernel, 1);
            if (e->n == e->cap && grow(e) != 0) {
                set_unlock(e);
                eta_obj_put(&e->obj);
                eta_obj_put(&s->obj);
                return fail(ENOMEM);
            }
            uint32_t idx = e->n++;
            e->ents[idx] = (struct epent){.fd = fd, .s = s, .rq = -1, .events = ev->events, .data = ev->data};
            link_add(s, e, idx);
            rq_push(e, idx); /* looked at (and watched) by the next wait */
        }
    } else if (!ent) {
        rc = fail(ENOENT);
    } else if (op == EPOLL_CTL_MOD) {
        if (s->hybrid && real_epoll_ctl(epfd, op, fd, ev) != 0) {
            rc = -1;
        } else if ((ev->events & EPOLLEXCLUSIVE) || (ent->events & EPOLLEXCLUSIVE)) {
            rc = fail(EINVAL); /* as the kernel: EXCLUSIVE cannot be modified */
        } else {
            ent->events = ev->events;
            ent->data = ev->data;
            ent->last_ev = 0;
            ent->disabled = false;
            ent->watched = 0; /* the new interest is asked for at the next wait */
            rq_push(e, (uint32_t)(ent - e->ents));
        }
    } else {
        if (s->hybrid && real_epoll_ctl(epfd, op, fd, ev) == 0)
            kernel_dec(e);
        remove_entry(e, (uint32_t)(ent - e->ents));
    }
    set_unlock(e);
    /* A thread asleep in this epoll must look at the new member (seq-cst
     * against its sleepers increment: it either sees the member before it
     * sleeps or is counted here). A new shadow's sleepers were not counted. */
    atomic_thread_fence(memory_order_seq_cst);
    if (rc == 0 && op != EPOLL_CTL_DEL && (created || atomic_load(&e->sleepers) > 0))
        kick_sleepers(e);
    eta_obj_put(&e->obj);
    eta_obj_put(&s->obj);
    return rc;
}

/* Totals an edge-triggered member compares with its last report: bytes (and
 * connections) ever offered to read, send space ever offered. */
static void edge_marks(struct epent *ent, dti_ctx_t *c, uint64_t *rx, uint64_t *tx)
{
    struct dti_sock_info si = {0};
    if (c && !eta_sock_orphaned(ent->s))
        dti_sock_status(c, ent->s->h, &si);
    *rx = atomic_load_explicit(&ent->s->rx_taken, memory_order_relaxed) + si.readable + si.accept_ready;
    if (ent->s->listening)
        *rx += eta_stash_count(ent->s); /* handed to us, not yet accepted */
    *tx = atomic_load_explicit(&ent->s->tx_committed, memory_order_relaxed) + si.writable;
}

/* The waiter slot of context c, taking one (and queueing every member, which
 * c has not watched) when c has not waited here before. */
static unsigned waiter_slot(struct eta_epoll *e, dti_ctx_t *c)
{
    uint64_t serial = eta_ctx_serial(c);
    for (unsigned k = 0; serial && k < WAITER_SLOTS; k++)
        if (e->waiters[k] == serial)
            return k;
    unsigned k = e->next_waiter++ % WAITER_SLOTS;
    e->waiters[k] = serial;
    for (unsigned i = 0; i < e->n; i++)
        e->ents[i].watched &= (uint8_t)~(1u << k);
    rq_push_all(e);
    return k;
}

/* Poll bits of entry ent that it asked for (EPOLL* values). Inlined in
 * the first look; a call elsewhere. */
static inline __attribute__((always_inline)) uint32_t member_events_inline(struct epent *ent, dti_ctx_t *c)
{
    uint32_t want = (ent->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLRDNORM | EPOLLWRNORM)) |
                    EPOLLERR | EPOLLHUP;
    uint32_t ev = eta_sock_events(c, ent->s);
    if (ev & POLLIN)
        ev |= EPOLLRDNORM;
    if (ev & POLLOUT)
        ev |= EPOLLWRNORM;
    return ev & want;
}

static __attribute__((noinline)) uint32_t member_events(struct epent *ent, dti_ctx_t *c)
{
    return member_events_inline(ent, c);
}

/* Whether a member waiting for send space must arm the DTI's one-shot
 * POLLOUT: it asked for EPOLLOUT and the socket is not writable now. */
static bool waits_for_space(struct epent *ent, dti_ctx_t *c)
{
    return c && (ent->events & (EPOLLOUT | EPOLLWRNORM)) && !(eta_sock_events(c, ent->s) & POLLOUT);
}

enum { MEMBER_DROP, MEMBER_REPORT, MEMBER_RETRY };

/* Asks for member ent's events in waiter c's context (slot k) unless it did
 * already. -EAGAIN: the command queue is full (ask again later). */
static __attribute__((noinline)) int watch_member_now(struct epent *ent, dti_ctx_t *c, unsigned k)
{
    if (eta_watch(c, ent->s, dti_mask(ent->events) & ~DTI_POLLOUT) == -EAGAIN)
        return -EAGAIN;
    ent->watched |= (uint8_t)(1u << k);
    return 0;
}

static inline int watch_member(struct epent *ent, dti_ctx_t *c, unsigned k)
{
    if (ETA_LIKELY(ent->watched & (1u << k)) || !c || ent->s->generation != eta_generation)
        return 0;
    return watch_member_now(ent, c, k);
}

/* Looks at queued member ent for waiter c (slot k): MEMBER_REPORT with *out
 * filled, MEMBER_DROP (nothing to report: it leaves the queue, and an event
 * will queue it again) or MEMBER_RETRY (its watch could not be asked for
 * yet: it stays queued, so the waiter looks again before it sleeps). */
static int look(struct epent *ent, dti_ctx_t *c, unsigned k, uint32_t rescan, struct epoll_event *out)
{
    if (ent->disabled || (ent->s->hybrid && eta_hybrid_kernel_only(ent->s)))
        return MEMBER_DROP; /* EPOLLONESHOT fired; a hybrid's kernel half is in the program's epoll */
    bool usable = c && ent->s->generation == eta_generation;
    if (watch_member(ent, c, k) == -EAGAIN)
        return MEMBER_RETRY; /* stays queued, unwatched */
    uint32_t ev = member_events(ent, c);
    bool edge = ent->events & EPOLLET;
    if (edge) {
        /* An edge: a condition newly true, more bytes (or connections)
         * arrived, or more send space offered than at the last report,
         * exactly as the kernel reports every arrival. */
        uint64_t rx, tx;
        edge_marks(ent, c, &rx, &tx);
        bool fresh = (ev & ~ent->last_ev) || ((ev & EPOLLIN) && rx > ent->last_rx) ||
                     ((ev & EPOLLOUT) && tx > ent->last_tx) || (rescan != ent->last_rescan && ev);
        ent->last_ev = ev;
        ent->last_rescan = rescan;
        if (fresh) {
            ent->last_rx = rx;
            ent->last_tx = tx;
        } else {
            ev = 0;
        }
    }
    if (!ev && usable && waits_for_space(ent, c)) {
        /* Arm, then look again: space that came meanwhile is not missed. */
        if (eta_watch(c, ent->s, dti_mask(ent->events)) == -EAGAIN)
            return MEMBER_RETRY;
        uint32_t again = member_events(ent, c);
        if (!edge || (again & ~ent->last_ev))
            ev = again;
        if (edge)
            ent->last_ev |= again;
    }
    if (!ev)
        return MEMBER_DROP;
    out->events = ev;
    out->data = ent->data;
    if (ent->events & EPOLLONESHOT)
        ent->disabled = true;
    return MEMBER_REPORT;
}

/* Collects ready accelerated members into out[0..max) from the ready queue.
 * Lock held. A level-triggered member that was reported stays queued; an
 * edge-triggered one stays until a look finds no new edge. Each queued
 * member is looked at once per call (the stamp): a member is never
 * reported twice in one call, and none that is ready is missed while there
 * is room in out[]. The start moves on each call: ready members take turns
 * when out[] is small. */
static int collect(struct eta_epoll *e, dti_ctx_t *c, struct epoll_event *out, int max)
{
    uint32_t rescan = atomic_load(&eta_rescan_seq);
    if (ETA_UNLIKELY(rescan != e->seen_rescan || e->seen_epoch != eta_fork_epoch)) {
        e->seen_rescan = rescan;
        e->seen_epoch = eta_fork_epoch;
        rq_push_all(e);
    }
    unsigned k = c ? waiter_slot(e, c) : 0;
    uint32_t stamp = ++e->look_stamp;
    int n = 0;
    unsigned p = e->cursor, resume = 0;
    /* Each step looks at a new member or passes one already looked at
     * (members queued by events while we look count too), until a lap
     * passes only members already looked at. */
    for (unsigned steps = 0, passed = 0; e->n_rq > 0 && passed < e->n_rq && steps < 3 * e->n + 3; steps++) {
        if (p >= e->n_rq)
            p = 0;
        uint32_t idx = e->rq[p];
        struct epent *ent = &e->ents[idx];
        if (ent->stamp == stamp) {
            p++;
            passed++; /* a whole lap of members already looked at: done */
            continue;
        }
        passed = 0;
        ent->stamp = stamp;
        if (n == max) {
            /* out[] is full: no more reports, but the queue is cleared of
             * members that are not ready (watched first), so that the next
             * call looks at the ready ones only. Edge-triggered members
             * stay: looking at them moves their marks. */
            if (watch_member(ent, c, k) == -EAGAIN)
                break; /* the command queue is full: the rest next time */
            if (!(ent->events & EPOLLET) && !ent->disabled && !waits_for_space(ent, c) &&
                !member_events(ent, c)) {
                rq_drop(e, idx);
                continue;
            }
            p++;
            continue;
        }
        int r = look(ent, c, k, rescan, &out[n]);
        if (r == MEMBER_REPORT)
            n++;
        if (r == MEMBER_DROP || (r == MEMBER_REPORT && ent->disabled))
            rq_drop(e, idx); /* the last queued member moves to p: it is next */
        else
            p++;
        if (r == MEMBER_REPORT && n == max)
            resume = p; /* the next call starts after the last member reported */
    }
    /* With out[] filled, the lap above went on past the last report (and
     * round to where it started): the next call starts where the reports
     * stopped, so ready members take turns. */
    e->cursor = n == max ? resume : p;
    return n;
}

/* Puts the waiting thread's wait fd in the inner epoll. Lock held. Every
 * member that is not queued is watched from c (collect() saw to it). */
static int prepare_sleep(struct eta_epoll *e, dti_ctx_t *c)
{
    if (e->inner < 0 || e->inner_gen != eta_fork_epoch) {
        e->inner = real_epoll_create1(EPOLL_CLOEXEC);
        if (e->inner < 0)
            return -1;
        e->inner_gen = eta_fork_epoch;
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

/* *waited: when it started to wait (0: answered by the first look, the
 * clock never read). */
static int spin_then_sleep(struct eta_epoll *e, dti_ctx_t *c, struct epoll_event *out, int max, int64_t timeout_ns,
                           const sigset_t *mask, uint64_t *waited)
{
    uint64_t start = 0, deadline = 0, spin_end = 0;
    unsigned iter = 0;
    for (;;) {
        /* Events queue members: reap when some came (and now and then
         * regardless, which is how a departed engine is noticed). */
        if (c && (dti_cq_ready(c) || (++pump_skips & 63) == 0))
            eta_pump(c);
        set_lock(e);
        int n = collect(e, c, out, max);
        set_unlock(e);
        /* The kernel members: at once, then every 64 rounds while spinning.
         * Beside ready accelerated members, only if the set has kernel
         * members (a system call per wait is what eta exists to remove);
         * with none ready, always: that look also takes our own wake-ups
         * (kicks), which would otherwise keep the sleep below from
         * sleeping. */
        if (n < max && (n > 0 ? atomic_load_explicit(&e->n_kernel, memory_order_relaxed) != 0
                              : iter == 0 || (iter & 63) == 0)) {
            bool kicked = false;
            int k = drop_kicks(out + n, real_epoll_wait(e->epfd, out + n, max - n, 0), &kicked);
            if (k > 0)
                n += k;
            else if (k < 0 && n == 0)
                return -1;
        }
        if (n > 0 || timeout_ns == 0) {
            return n;
        }
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
        ETA_STAT_ADD(sleeps, 1);
        struct epoll_event got[2];
        bool kicked = false;
        /* No engine: sleep at most until the next try to re-attach. */
        int cap = c ? ms : eta_reattach_wait_ms();
        bool capped = !c && cap >= 0 && (ms < 0 || cap < ms);
        int rc = c ? real_epoll_pwait(e->inner, got, 2, ms, mask)
                   : drop_kicks(out, real_epoll_pwait(e->epfd, out, max, capped ? cap : ms, mask), &kicked);
        int err = errno;
        atomic_fetch_sub(&e->sleepers, 1);
        if (c) {
            dti_disarm(c);
            if (!eta_engine_check(dti_ctx_owner(c)))
                c = NULL;
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
                      const sigset_t *mask)
{
    uint64_t waited = 0;
    dti_ctx_t *c = eta_ctx_cached();
    if (!c)
        c = eta_ctx();
    int n = spin_then_sleep(e, c, out, max, timeout_ns, mask, &waited);
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
    rc = drop_kicks(out, rc, kicked);
    errno = err;
    return rc;
}

/* The first look for the call a busy event loop makes most: a set this
 * thread has waited in before, nothing to look at again (no lost events, no
 * fork), its ready queue holding only level-triggered members this thread
 * watches, every one of them ready and all fitting in out[]. Then each is
 * reported and stays queued, exactly what collect() would do, without its
 * bookkeeping (stamps, laps, the cursor: with every queued member reported
 * there is nothing to take turns over). Anything else (a member not ready,
 * to be dropped or watched; edge-triggered or one-shot members; kernel
 * members to ask; more ready than fits) changes nothing here and returns
 * -1: collect() does it. Lock held. */
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
    struct eta_obj *o = (unsigned)epfd < ETA_FD_MAX && eta_fds ? atomic_load_explicit(&eta_fds[epfd], memory_order_acquire)
                                                               : NULL;
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
    struct eta_epoll *e = NULL;
    if (atomic_load_explicit(&eta_tracked, memory_order_relaxed))
        e = shadow_get(epfd);
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
        e = shadow_get(epfd);
        if (!e)
            return 0; /* closed meanwhile */
    }
    if (max <= 0 || !out) {
        eta_obj_put(&e->obj);
        return fail(max <= 0 ? EINVAL : EFAULT);
    }
    int rc = wait_mixed(e, out, max, timeout_ns, mask);
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
