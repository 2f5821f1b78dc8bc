/* epoll over sets that mix accelerated sockets with kernel descriptors: the
 * set, its members, the ready queue and the looks. The waits are in
 * epoll_wait.c; what both share (the set's structures, its lock) in
 * epoll_set.h.
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

#include "accept.h"
#include "attach.h"
#include "config.h"
#include "epoll.h"
#include "epoll_set.h"
#include "fdtable.h"
#include "lock.h"
#include "real.h"
#include "shim.h"
#include "sockobj.h"
#include "wait.h"


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
    /* Out of the program's way (dti_fd_aside), and moved again if the
     * program takes its number (eta_fd_take through e->kick). */
    int k = dti_fd_aside(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), 0);
    if (k < 0)
        return; /* no cross-thread wake-up: a sleeper finds the member at its next call */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = kick_cookie()};
    if (real_epoll_ctl(e->epfd, EPOLL_CTL_ADD, k, &ev) != 0) {
        real_close(k);
        return;
    }
    e->kick = k;
    eta_internal_own(&e->kick); /* the program's close() must not take it */
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
int eta_ep_drop_kicks(struct epoll_event *out, int n, bool *kicked)
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

struct eta_epoll *eta_ep_get(int epfd)
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
    atomic_init(&e->n_kself, 0);
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
    struct eta_epoll *e = eta_ep_get(epfd);
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

void eta_epoll_destroy(struct eta_obj *o)
{
    struct eta_epoll *e = (struct eta_epoll *)o;
    pthread_mutex_lock(&shadows_lock);
    for (int i = 0; i < MAX_SHADOWS; i++)
        if (shadows[i] == e)
            shadows[i] = NULL;
    pthread_mutex_unlock(&shadows_lock);
    /* Ours while its number is still marked so: made in this process, or a
     * fork child's copy of its parent's (closing the copy leaves the parent's). */
    if (eta_internal_owned(&e->inner)) {
        eta_internal_drop(&e->inner);
        real_close(e->inner);
    }
    if (e->kick >= 0) {
        eta_internal_drop(&e->kick);
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

ETA_TLS struct eta_epoll *eta_ep_locked;

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

/* After a sleep the watchdog ended (epoll_wait.c): every member is looked
 * at again, not only the queued ones. A member waiting for send space left
 * the queue once its one-shot POLLOUT watch was armed, and only the engine's
 * answer queues it again: were that lost, the program would wait for ever
 * (an nginx worker sending a response, say). The look arms the watch anew
 * (wait.c eta_watch: the watchdog's turn makes it due), and the engine
 * answers at once where the socket is writable. Lock held. */
void eta_ep_requeue_all(struct eta_epoll *e)
{
    rq_push_all(e);
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
        if (e == eta_ep_locked) {
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
            if (!eta_ep_locked) {
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
    struct eta_epoll *e = eta_ep_get(epfd);
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
            if (s->hybrid && s->udp_kself)
                atomic_fetch_add(&e->n_kself, 1);
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
        if (s->hybrid && real_epoll_ctl(epfd, op, fd, ev) == 0) {
            kernel_dec(e);
            if (s->udp_kself)
                atomic_fetch_sub(&e->n_kself, atomic_load(&e->n_kself) > 0 ? 1 : 0);
        }
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
int eta_ep_collect(struct eta_epoll *e, dti_ctx_t *c, struct epoll_event *out, int max)
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
