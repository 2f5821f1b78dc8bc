/* preload/src/epoll_set.h: an epoll set's shadow (its accelerated members,
 * ready queue and waiters), shared by epoll.c (the set, its members, the
 * looks) and epoll_wait.c (the waits). Internal to the shim. */
#ifndef ETA_PRELOAD_EPOLL_SET_H
#define ETA_PRELOAD_EPOLL_SET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/types.h>

#include "fdtable.h"
#include "lock.h"
#include "shim.h"
#include "sockobj.h"

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
    _Atomic int inner;      /* -1 until first needed; the shim's own (eta_internal_own) */
    uint32_t inner_gen;     /* eta_fork_epoch it was last made or taken over in */
    pid_t inner_pid;        /* the process that made it (a fork child makes its own) */
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
    _Atomic int kick;       /* eventfd in the program's epoll (see kick_sleepers), -1: none */
    _Atomic int sleepers;   /* threads asleep in this epoll (either way) */
    _Atomic unsigned n_kernel; /* kernel descriptors in the program's epoll (never fewer than
                                * there are; 0: a wait need not ask the kernel) */
    _Atomic unsigned n_kself;  /* of those, UDP placeholders read for host-local senders alone
                                * (sockobj.h udp_kself): all of them, a wait beside ready
                                * accelerated members asks the kernel one time in 16 */
};
_Static_assert(sizeof(struct eta_epoll) <= 256, "epoll object outgrew its slot");

/* The set whose lock this thread holds, if any: an event dispatched while
 * it looks at its members (eta_watch() may pump) queues without locking. */
extern ETA_TLS struct eta_epoll *eta_ep_locked;

static inline void set_lock(struct eta_epoll *e)
{
    eta_lock(&e->lock);
    eta_ep_locked = e;
}

static inline void set_unlock(struct eta_epoll *e)
{
    eta_ep_locked = NULL;
    eta_unlock(&e->lock);
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

/* epoll.c */
/* The shadow behind epfd, referenced; NULL when epfd has none. */
struct eta_epoll *eta_ep_get(int epfd);
/* Ready accelerated members into out[0..max) from the ready queue (lock
 * held); see epoll.c. */
int eta_ep_collect(struct eta_epoll *e, dti_ctx_t *c, struct epoll_event *out, int max);
/* Queues every member for the next collect (after the watchdog; lock held). */
void eta_ep_requeue_all(struct eta_epoll *e);
/* Drops the shim's wake-ups from what the kernel's epoll_wait returned. */
int eta_ep_drop_kicks(struct epoll_event *out, int n, bool *kicked);

#endif
