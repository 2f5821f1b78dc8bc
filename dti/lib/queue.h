/* libdti layer 2, queues: a context's queue pairs and what lives beside
 * them (qp.c, cq.c, wake.c, slots.c). The command producer (staging, stamps,
 * submit), the completion and event consumer (reap, the stash, waiting for
 * one completion, the blocking round trip), the wake protocol, a socket's
 * slot (the engine's table entry, this process's positions) and the handle
 * table's lookups. The queue protocol itself: ../QUEUES.md. Calls link and
 * base; the routing layer above writes the handle table this layer reads and
 * hooks its answers in through dti__answer_fn. */
#ifndef DTI_LIB_QUEUE_H
#define DTI_LIB_QUEUE_H

#include "link.h"

#include <errno.h>
#include <string.h>

/* Blocking-layer user_data values carry this bit. */
#define DTI_UD_INTERNAL (1ull << 63)

/* A completion that a layer above answers itself (a listener group's waiting
 * accept): called by the consumer with the decoded entry; false: it is not
 * the application's. */
typedef bool (*dti__answer_fn)(struct dti_ctx *q, void *arg, struct dti_cqe *out);

struct dti_ctx_pending {
    uint64_t user_data;
    uint32_t sock;
    uint16_t op;
    uint8_t used;
    uint8_t drop; /* the blocking caller gave up: discard the completion */
    dti__answer_fn answer; /* set: the completion goes there (answer_arg) */
    void *answer_arg;
};

enum { DTI_STRANDED_MAX = 8 }; /* releases a full command ring left owed, listed per queue pair */

struct dti_ctx {
    struct dti_attachment *d;
    uint32_t index;
    struct dti_qp_header *qp;
    struct dti_cmd *cmds;
    struct dti_cmd *staging; /* commands are built here, copied out at submit */
    struct dti_ev *evs;
    uint32_t cmd_mask, ev_mask;
    uint32_t prepared;      /* local producer index (published <= prepared) */
    uint32_t cmd_cons_seen; /* last cmd_cons read: reread only when it says full */
    uint32_t published;
    uint32_t ev_cons;       /* local copy of what we consumed */
    uint32_t overflow_seen;
    int wake_fd;            /* eventfd the engine writes */
    int wait_fd;            /* epoll over wake_fd + control fd */
    uint64_t spin_ns;      /* the most a wait spins (dti_ctx_set_spin) */
    uint64_t spin_budget;  /* what the next wait spins: adaptive, <= spin_ns */
    uint32_t spin_skipped; /* waits without a spin since the budget fell to none */
    bool spin_fixed;       /* dti_ctx_set_spin_fixed(): always spin spin_ns */
    bool interruptible;    /* dti_ctx_set_interruptible(): a signal ends a sleep with -EINTR */
    uint64_t last_alive_check_ns;
    uint32_t empty_reaps;
    /* in-flight signaled commands; index = tag; free list threaded by next */
    struct dti_ctx_pending *pending;
    uint32_t *free_tags;
    uint32_t n_free;
    uint32_t inflight;
    bool gone_flushed;      /* synthetic ENGINE_GONE completions were produced */
    /* entries reaped by the blocking layer while waiting for another */
    struct dti_cqe *stash;
    uint32_t stash_cap, stash_head, stash_len;
    bool stash_rescan;
    uint64_t internal_seq;
    uint32_t *watch;        /* this context's watch mask per socket slot */
    struct dti_ctx *next_all; /* d->contexts list */
    /* Several engines: the context the application holds has one queue pair
     * on every engine; sub[0] is itself, sub[e] a context of link e (whose
     * own n_sub is 0). Commands go to the queue pair of the socket's engine;
     * dti_reap()/dti_wait() take from all of them. */
    uint32_t n_sub;
    struct dti_ctx *sub[DTI_MAX_ENGINES];
    uint32_t next_engine;   /* where this context's next new socket lives */
    dti__answer_fn prep_answer; /* set around a command whose completion a layer above answers */
    void *prep_answer_arg;
    uint32_t reap_next;     /* which queue pair dti_reap() looks at first */
    uint64_t woke_tsc;      /* latency sampling: the TSC when this context's last sleep ended (wake.c) */
    /* The command ring was found full: a command refused (-EAGAIN), a
     * release left owed. The engine takes SEND, RECV_RELEASE and TX_GROW
     * without answering them, so no wakeup says that there is room again:
     * the wait looks for it itself (wake.c, ring_blocked()). The releases
     * left owed are listed (past DTI_STRANDED_MAX, every slot is looked at):
     * they go out before the context sleeps, or the peer's window may stay
     * shut while it waits for bytes (qp.c, dti__flush_stranded()). */
    bool ring_refused;
    bool stranded_more;
    uint32_t n_stranded;
    dti_sock_t stranded[DTI_STRANDED_MAX];
};

/* The TSC, as the engine's clock reads it (latency sampling, dti_abi.h
 * dti_sock_shared.trace): no system call. 0 where there is none. */
static inline uint64_t dti__tsc(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return 0;
#endif
}

/* The handle table: per engine slot, what the routing layer made of it,
 * valid while the generation matches. A listener group's member (reported
 * as the group's handle `app`); a socket that moved to the engine owning its
 * flow (a bound socket connecting), reported as the handle the application
 * keeps (`app`); and, on the slot that handle names, where it moved
 * (`fwd_to`). Layer 3 writes it (route.h); this layer reads it. */
struct dti_alias {
    uint32_t gen;
    struct dti_group *group; /* layer 3's listener group (opaque here) */
    dti_sock_t app;     /* the application's handle for this slot's socket */
    uint32_t fwd_gen;   /* the application's handle of this slot moved ... */
    dti_sock_t fwd_to;  /* ... to this socket (an app handle: engine bits set) */
};

#pragma GCC visibility push(hidden)

/* ---- qp.c: queue pairs, the producer, the handle table ---------------------- */

/* One queue pair on one engine (link d), and its end. */
int dti__ctx_create_one(struct dti_attachment *d, struct dti_ctx **out);
void dti__ctx_destroy_one(struct dti_ctx *c);
/* The queue pair for application handle *s on several engines, which
 * becomes the engine's handle (dti__route()). */
struct dti_ctx *dti__route_links(struct dti_ctx *c, dti_sock_t *s);
/* The application's handle for engine handle s of context c's engine. */
dti_sock_t dti__app_handle(struct dti_ctx *c, dti_sock_t s);
bool dti__ring_has_room(struct dti_ctx *c);
/* Data-path commands without a completion (no credit): SEND of n bytes
 * ending at stream position `end` (arg1: DTI_SEND_TAIL, or DTI_SEND_MORE |
 * DTI_SEND_END; dti_abi.h), and the others (RECV_RELEASE, RECV_CANCEL). */
int dti__prep_send(struct dti_ctx *c, dti_sock_t s, uint32_t n, uint32_t bits, uint32_t end);
int dti__prep_data(struct dti_ctx *c, uint16_t op, dti_sock_t s, uint32_t n, uint32_t flags);
/* Queues the release of socket s's owed receive bytes (data.c consumes).
 * -EAGAIN: no room in the command ring; they stay owed. */
int dti__flush_release(struct dti_ctx *c, dti_sock_t s);
/* The releases a full command ring left owed (dti__flush_release), queued
 * and submitted now; 0, or -EAGAIN while the ring is still full (they stay
 * listed). */
int dti__flush_stranded(struct dti_ctx *c);
/* One engine's command for application handle s, routed to its queue pair;
 * no listener-group or moved-socket handling (the routing layer's). */
int dti__prep_socket_on(dti_ctx_t *c, uint32_t engine, uint64_t ud);
int dti__prep_listen_one(dti_ctx_t *c, dti_sock_t s, int backlog, uint64_t ud);
int dti__prep_accept_one(dti_ctx_t *c, dti_sock_t s, unsigned max, unsigned flags, uint64_t ud);
int dti__prep_shutdown_one(dti_ctx_t *c, dti_sock_t s, int how, uint64_t ud);
int dti__prep_release_one(dti_ctx_t *c, uint16_t op, dti_sock_t s, uint64_t ud);
int dti__prep_setsockopt_one(dti_ctx_t *c, dti_sock_t s, int opt, int64_t value, uint64_t ud);
int dti__prep_watch_one(dti_ctx_t *c, dti_sock_t s, uint32_t events, uint64_t ud);

/* ---- cq.c: the consumer and the blocking round trip --------------------------- */

void dti__stash_push(struct dti_ctx *c, const struct dti_cqe *e);
/* Every queue pair's entries, turning round (no stash). */
unsigned dti__reap_rings(struct dti_ctx *c, struct dti_cqe *out, unsigned max);
uint64_t dti__next_ud(dti_ctx_t *c);
/* The completion of the command with user_data ud will be dropped. */
void dti__forget(dti_ctx_t *c, uint64_t ud);
/* Submits what `rc` prepared and waits for it: the completion's result
 * (value/accepted in *out when asked). */
int dti__run_sync(dti_ctx_t *c, int rc, uint64_t ud, struct dti_cqe *out, int timeout_ms);
/* Credits or ring slots exhausted: publish, then pull finished entries into
 * the stash. -1 when the engine is gone. */
int dti__make_room(dti_ctx_t *c);
/* Runs `call` (a command's preparation) until it gets a slot; bounded. */
#define DTI_SYNC_PREP(rc, c, call)                                                                  \
    do {                                                                                            \
        for (int tries_ = 0;; tries_++) {                                                           \
            (rc) = (call);                                                                          \
            if ((rc) != -EAGAIN || tries_ > 10000 || dti__make_room(c) < 0)                         \
                break;                                                                              \
        }                                                                                           \
    } while (0)
/* Blocking: prepares with `prep` (retrying while the queue is full),
 * submits and waits for the completion; returns its result (the whole
 * completion in *out when out is not NULL). */
typedef int (*dti__prep_fn)(dti_ctx_t *c, dti_sock_t s, uint32_t a0, int64_t v, uint64_t ud);
int dti__run_blocking(dti_ctx_t *c, dti__prep_fn prep, dti_sock_t s, uint32_t a0, int64_t v);
int dti__run_blocking_cqe(dti_ctx_t *c, dti__prep_fn prep, dti_sock_t s, uint32_t a0, int64_t v,
                          struct dti_cqe *out);

/* ---- wake.c: the wake protocol -------------------------------------------------- */

/* Every engine of context c's attachment still serves it (on several
 * engines, losing one is losing the PPE); the reason the first one that left
 * gave. */
bool dti__all_alive(struct dti_ctx *c, bool allow_syscall);
int dti__dead_reason(struct dti_ctx *c);
/* Like dti_wait() but ignores the stash: waits for the ring itself. */
int dti__wait_ring(struct dti_ctx *c, int timeout_ms);

/* ---- slots.c: socket slots ------------------------------------------------------ */

struct dti_sock_shared *dti__sock(struct dti_attachment *d, dti_sock_t s, uint32_t *slot_out);
/* One socket's state (no listener group). */
int dti__sock_status_one(dti_ctx_t *c, dti_sock_t s, struct dti_sock_info *out);

#pragma GCC visibility pop

/* ---- inline: routing a handle, the queue pairs of a context -------------------- */

/* The queue pair for application handle *s, which becomes the engine's
 * handle. On one engine (and for handles already local) nothing changes; a
 * handle naming an engine we do not have is left as it is and fails the
 * generation check like any stale handle. */
static inline struct dti_ctx *dti__route(struct dti_ctx *c, dti_sock_t *s)
{
    if (c->n_sub <= 1)
        return c; /* one engine (or a queue pair of one): the handle is the engine's */
    return dti__route_links(c, s);
}

/* The queue pairs of context c: itself on one engine, else one per engine. */
static inline uint32_t n_qps(const struct dti_ctx *c) { return c->n_sub ? c->n_sub : 1; }
static inline struct dti_ctx *qp_of(struct dti_ctx *c, uint32_t i) { return c->n_sub ? c->sub[i] : c; }

/* ---- inline: the producer (qp.c submits; QUEUES.md) --------------------------- */
/* Room for one more command in the ring (data-path commands need only this). */
static inline bool dti__cmd_room(struct dti_ctx *c)
{
    /* The engine's consumer index lives on its own cache line; reading it
     * costs a transfer, so trust the last value until it says "full". */
    if (c->prepared - c->cmd_cons_seen < c->cmd_mask + 1)
        return true;
    c->cmd_cons_seen = DTI_LOAD(&c->qp->cmd_cons);
    if (c->prepared - c->cmd_cons_seen < c->cmd_mask + 1)
        return true;
    c->ring_refused = true; /* the next wait looks for room (wake.c) */
    return false;
}

/* Commands are built in private memory and copied into the ring at submit,
 * body then stamp back to back: the engine polls that very slot, and a body
 * written long before its stamp would make the line cross twice. */
static inline struct dti_cmd *dti__cmd_next(struct dti_ctx *c)
{
    struct dti_cmd *cmd = &c->staging[c->prepared & c->cmd_mask];
    memset(cmd, 0, sizeof *cmd);
    return cmd;
}

/* Reserves a slot and a credit for a command that will complete. */
static inline int dti__cmd_prep(struct dti_ctx *c, uint16_t op, dti_sock_t s, uint64_t ud, struct dti_cmd **out)
{
    if (!dti__check_alive(c->d, false))
        return -c->d->dead_reason;
    if (c->n_free == 0 || !dti__cmd_room(c))
        return -EAGAIN;
    /* Owed releases go first: the engine acts on this command (watch, close,
     * shutdown, posted receive) knowing what the application consumed. */
    if (s != DTI_SOCK_INVALID && dti__slot(s) < c->d->limits.max_sockets &&
        (dti__flush_release(c, s) < 0 || !dti__cmd_room(c)))
        return -EAGAIN;
    uint32_t tag = c->free_tags[--c->n_free];
    c->pending[tag] = (struct dti_ctx_pending){ud, s, op, 1, 0, c->prep_answer, c->prep_answer_arg};
    c->inflight++;
    struct dti_cmd *cmd = dti__cmd_next(c);
    cmd->user_data = ud;
    cmd->op = op;
    cmd->sock = s;
    cmd->tag = tag;
    *out = cmd;
    return 0;
}

static inline void dti__cmd_commit(struct dti_ctx *c) { c->prepared++; }

static inline int dti__cmd_args(dti_ctx_t *c, uint16_t op, dti_sock_t s, uint32_t a0, uint32_t a1, int64_t v,
                                 uint64_t ud)
{
    c = dti__route(c, &s);
    struct dti_cmd *cmd = NULL; /* set when dti__cmd_prep() returns 0 */
    int rc = dti__cmd_prep(c, op, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = a0;
        cmd->arg1 = a1;
        cmd->value = v;
        dti__cmd_commit(c);
    }
    return rc;
}

static inline int dti__cmd_addr(dti_ctx_t *c, uint16_t op, dti_sock_t s, const struct dti_addr *a, uint64_t ud)
{
    if (!a)
        return -EFAULT;
    c = dti__route(c, &s);
    struct dti_cmd *cmd = NULL; /* set when dti__cmd_prep() returns 0 */
    int rc = dti__cmd_prep(c, op, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = a->ip;
        cmd->arg1 = a->port;
        dti__cmd_commit(c);
    }
    return rc;
}

/* BIND6/CONNECT6 (ABI 11): the address in the value and offset words. */
static inline int dti__cmd_addr6(dti_ctx_t *c, uint16_t op, dti_sock_t s, const struct dti_addr6 *a, uint32_t flags,
                                 uint64_t ud)
{
    if (!a)
        return -EFAULT;
    c = dti__route(c, &s);
    struct dti_cmd *cmd = NULL; /* set when dti__cmd_prep() returns 0 */
    int rc = dti__cmd_prep(c, op, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = flags;
        cmd->arg1 = a->port;
        dti_cmd_addr6_set(cmd, a->ip);
        dti__cmd_commit(c);
    }
    return rc;
}

/* ---- inline: socket slots, where the data path reads them ----------------------- */

/* The table entry of engine-local handle s, or NULL for a stale or foreign
 * handle: the data path's one handle check, inlined where it is hot. */
static inline __attribute__((always_inline)) struct dti_sock_shared *dti__sock_of(struct dti_attachment *d, dti_sock_t s,
                                                                              uint32_t *slot_out)
{
    uint32_t slot = dti__slot(s), gen = dti__gen(s);
    if (__builtin_expect(slot >= d->limits.max_sockets || gen == 0, 0))
        return NULL; /* also DTI_SOCK_INVALID: its slot bits exceed any table */
    struct dti_sock_shared *sh = &d->socks[slot];
    if (__builtin_expect(DTI_LOAD(&sh->gen) != gen || d->closed_gen[slot] == gen, 0))
        return NULL;
    *slot_out = slot;
    return sh;
}

/* A socket's receive ring mask now (dti_sock_shared.rx_size), within the
 * slot's reserve even for a confused engine. Load it after rx_tail: a ring
 * that grew was empty, so bytes the tail shows lie at this size. */
static inline uint32_t dti__rx_mask(const struct dti_attachment *d, const struct dti_sock_shared *sh)
{
    return (DTI_LOAD_RELAXED(&sh->rx_size) - 1) & (d->limits.rx_ring_size - 1);
}

/* A socket's send ring size (dti_sock_shared.tx_size: it grows only when
 * this writer asks, data.c), within the slot's reserve even for a confused
 * engine. Load it after the state (acquire) that shows the socket connected. */
static inline uint32_t dti__tx_size(const struct dti_attachment *d, const struct dti_sock_shared *sh)
{
    return ((DTI_LOAD_RELAXED(&sh->tx_size) - 1) & (d->limits.tx_ring_size - 1)) + 1;
}

/* Released bytes are told to the engine in batches: once they add up to a
 * quarter of the socket's ring (its size now: it may grow), and before any
 * other command on the socket (a watch must not see stale data, a close
 * must not look like one with unread bytes). A small read then costs no
 * command and no doorbell. The engine's view of free space lags by less
 * than a quarter of the ring, so an application that has emptied its ring
 * and waits for more always leaves the peer a window (a release the full
 * command ring refused goes out before the context sleeps: wake.c). */
static inline uint32_t dti__release_batch(const struct dti_attachment *d, const struct dti_sock_shared *sh)
{
    return (dti__rx_mask(d, sh) >> 2) + 1;
}

/* A datagram socket's pending asynchronous error (dti_abi.h err_seq: an
 * ICMP error about a datagram it sent, as Linux's sk_err): -errno when the
 * engine counted one this slot's generation has not reported, else 0.
 * take: report it (SO_ERROR, the next receive or send, as Linux's
 * sock_error()); a compare-and-swap on the mark makes it once across
 * threads and forked processes. One load when the socket never had one. */
static inline int32_t dti__dgram_error(struct dti_sock_shared *sh, struct dti_sock_priv *p, uint32_t gen, int take)
{
    const uint32_t seq = DTI_LOAD(&sh->err_seq); /* acquire: err_last is stored before it */
    if (__builtin_expect(seq == 0, 1))
        return 0;
    uint64_t mark = __atomic_load_n(&p->err_mark, __ATOMIC_ACQUIRE);
    const uint32_t seen = (uint32_t)(mark >> 32) == gen ? (uint32_t)mark : 0;
    if (seq == seen)
        return 0;
    const int32_t e = DTI_LOAD_RELAXED(&sh->err_last);
    if (take && !__atomic_compare_exchange_n(&p->err_mark, &mark, (uint64_t)gen << 32 | seq, 0, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE))
        return 0; /* another reader reported it */
    return e < 0 ? e : -EIO; /* a confused engine: still an error, never a success */
}

/* One socket's state from the table (no group). Inlined into the callers:
 * readiness checks are what poll/epoll loops make per member. */
static inline __attribute__((always_inline)) int dti__sock_state(dti_ctx_t *c, dti_sock_t s, struct dti_sock_info *out)
{
    c = dti__route(c, &s);
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock_of(c->d, s, &slot);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    uint32_t gen = dti__gen(s);
    struct dti_sock_priv *p = &c->d->priv[slot];
    uint32_t rx_head = p->rx_gen == gen ? p->rx_head : 0;
    uint32_t tx_tail = p->tx_gen == gen ? p->tx_tail : 0;
    /* The state before the tail: the engine publishes them the other way
     * round (release), so a FIN is never seen without the bytes before it. */
    out->state = DTI_LOAD(&sh->state);
    uint32_t rd = DTI_LOAD(&sh->rx_tail) - rx_head;
    uint32_t used = tx_tail - DTI_LOAD(&sh->tx_head);
    const uint32_t tx_size = dti__tx_size(c->d, sh);
    out->readable = rd > c->d->limits.rx_ring_size ? 0 : rd;
    out->writable = used > tx_size ? 0 : tx_size - used;
    if (p->wr_shut_gen == gen)
        out->state |= DTI_STATE_WR_CLOSED;
    out->error = p->err_taken_gen == gen ? 0 : DTI_LOAD(&sh->error);
    if (__builtin_expect(out->state & DTI_STATE_DGRAM, 0) && !out->error)
        out->error = dti__dgram_error(sh, p, gen, 0);
    out->accept_ready = DTI_LOAD(&sh->accept_ready);
    out->events = dti_events_of(out->state, out->error, out->readable, out->writable, out->accept_ready);
    return 0;
}

/* A new handle's send side: tail, tx_written and tx_noted from 0 (the
 * data path starts it where it writes). */
static inline void dti__tx_start(struct dti_attachment *d, uint32_t slot, uint32_t gen)
{
    struct dti_sock_priv *p = &d->priv[slot];
    p->tx_gen = gen;
    p->tx_tail = 0;
    p->tx_grow_to = 0;
    p->tx_view_size = 0;
    p->tx_res_size = 0;
    p->tx_grow_busy_gen = 0;
    __atomic_store_n(&d->socks[slot].tx_noted, 0u, __ATOMIC_RELAXED);
    DTI_STORE_SC(&d->socks[slot].tx_written, 0);
}

#endif
