/* libdti internals: shared by the C files of the library only. */
#ifndef DTI_LIB_INTERNAL_H
#define DTI_LIB_INTERNAL_H

#include <dti/dti.h>

#include "dti_abi.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define DTI_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define DTI_LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define DTI_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
/* Dekker-style handshakes (wake word, doorbell) use sequentially consistent
 * stores and loads on both sides rather than fences: same guarantee, and
 * ThreadSanitizer understands them. */
#define DTI_STORE_SC(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define DTI_LOAD_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)

/* Blocking-layer user_data values carry this bit. */
#define DTI_UD_INTERNAL (1ull << 63)

/* App-side state of one socket slot. The receive side and the send side
 * are used by (at most) one thread each, so they live on separate lines and
 * carry their own generation tag: a new handle in the slot resets them.
 * The array is in memory shared with the process's fork children (a
 * MAP_SHARED anonymous mapping made at attach): ring positions, shutdown and
 * SO_ERROR belong to the socket, not to one process, as in the kernel. */
struct dti_sock_priv {
    uint32_t rx_gen;
    uint32_t rx_head;      /* bytes consumed (free-running, from the slot's rx_base) */
    uint32_t err_taken_gen;/* SO_ERROR was read for this generation */
    uint32_t rx_busy_gen;  /* a posted receive (RECV_INTO, RECV_POST) is in flight */
    uint32_t rx_owed;      /* consumed, not yet told to the engine (batched releases) */
    uint8_t pad0[DTI_CACHELINE - 20];
    uint32_t tx_gen;
    uint32_t tx_tail;      /* bytes written into the send ring */
    uint32_t wr_shut_gen;  /* shutdown(WR) submitted for this generation */
    uint32_t tx_busy_gen;  /* a region-buffer send (SEND_FROM) is in flight */
    uint8_t pad1[DTI_CACHELINE - 16];
};

struct dti_ctx_pending {
    uint64_t user_data;
    uint32_t sock;
    uint16_t op;
    uint8_t used;
    uint8_t drop; /* the blocking caller gave up: discard the completion */
    struct dti_group *group; /* a listener group's waiting accept (engines.c) */
};

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
    struct dti_group *prep_group; /* set around a group's waiting accept: its pending entry says so */
    uint32_t reap_next;     /* which queue pair dti_reap() looks at first */
};

/* A listener on a PPE with several engines is a group: the socket the
 * application created plus one sibling listening on each other engine, so a
 * connection is accepted by whichever engine owns its flow. The application
 * sees one handle (`app`); events and accepts of siblings are reported as
 * its own. Process-private: made and dropped in this process. */
struct dti_group {
    dti_sock_t app;                        /* the application's handle */
    uint32_t n;                            /* members, app's own included */
    dti_sock_t member[DTI_MAX_ENGINES];    /* app handles (engine bits set) */
    uint32_t next;                         /* accept round robin */
    /* A waiting accept (DTI_ACCEPT_WAIT) with nothing waiting anywhere waits
     * on every engine; the first answer is the caller's, connections that
     * come with later ones are kept here for the next accept. */
    uint64_t wait_ud;
    struct dti_ctx *wait_ctx;              /* the caller's context */
    uint32_t waiting;                      /* engines (bits) whose member accept is in flight */
    bool wait_done;                        /* the caller has its answer */
    bool dropped;                          /* closed: freed by the last answer */
    uint32_t backlog_len;
    dti_sock_t backlog[DTI_ACCEPT_MAX * DTI_MAX_ENGINES];
};

/* Per engine slot, what libdti made of it: valid while the generation
 * matches. A listener group's member (reported as the group's handle); a
 * socket that moved to the engine owning its flow (a bound socket
 * connecting), reported as the handle the application keeps (`app`); and,
 * on the slot that handle names, where it moved (`fwd_to`). */
struct dti_alias {
    uint32_t gen;
    struct dti_group *group;
    dti_sock_t app;     /* a moved socket: the application's handle for it */
    uint32_t fwd_gen;   /* the application's handle of this slot moved ... */
    dti_sock_t fwd_to;  /* ... to this socket (an app handle: engine bits set) */
};

struct dti_attachment {
    int ctl_fd;
    int doorbell_fd;
    uint8_t *base;
    uint64_t size;
    struct dti_region_header *hdr;
    struct dti_sock_shared *socks;
    struct dti_sock_priv *priv; /* shared with fork children */
    uint32_t *closed_gen;       /* per process: this process closed that generation */
    struct dti_limits limits;
    pthread_mutex_t lock;   /* control socket requests, context list, pool */
    pthread_key_t tls_key;
    bool tls_key_ok;
    struct dti_ctx *contexts;
    bool dead;              /* sticky once the engine is gone */
    int dead_reason;        /* positive DTI_E_* */
    bool post_refused;      /* the engine cannot write into this process: copy from the ring */
    uint64_t *pool_bitmap;
    uint32_t pool_blocks;
    int fork_fd;            /* between dti_fork_prepare() and parent/child: the child's connection */
    int fork_rc;            /* what dti_fork_prepare() returned */
    int region_fd;          /* the region's memfd (close-on-exec; exec hands it on) */
    int priv_fd;            /* the memfd behind `priv` (likewise) */
    /* Several engines: the application's dti_t is the link to engine 0 and
     * holds a link (an attachment of its own: region, control connection,
     * doorbell) to every engine; links[0] is itself. A link's own n_links
     * is 0. */
    uint32_t engine;        /* the engine this link talks to */
    uint32_t n_links;
    struct dti_attachment *links[DTI_MAX_ENGINES];
    struct dti_alias *alias; /* per slot: listener groups (NULL until one is made) */
    /* Copied from the region header at attach: the data path computes ring
     * addresses without reading the engine's header line. */
    uint8_t *data_base;     /* base + hdr->data_offset: slot 0's receive ring */
    uint64_t data_stride;   /* hdr->data_stride: one slot's rings */
};

#pragma GCC visibility push(hidden)

/* exec.c: a descriptor libdti made, moved out of the program's way (above a
 * floor under RLIMIT_NOFILE, its close-on-exec flag kept); fd itself when it
 * cannot move (or is < 0). */
int dti__fd_aside(int fd);

/* core.c */
int dti__map_region(struct dti_attachment *d, int memfd, int priv_fd, char *why, size_t wl);
int dti__ctl_send(int fd, const struct dti_ctl_msg *m);
int dti__ctl_send_fd(int fd, const struct dti_ctl_msg *m, int pass);
int dti__ctl_recv(int fd, struct dti_ctl_msg *m, int *fds, int max_fds);
void dti__mark_dead(struct dti_attachment *d, int reason);
void dti__init_tls(struct dti_attachment *d);
bool dti__check_alive(struct dti_attachment *d, bool allow_syscall);
int dti__connect_control(const char *path, int *fd_out, char *why, size_t wl);
int dti__handshake(struct dti_attachment *d, const char *name, uint32_t engine, uint32_t *n_engines,
                   char *why, size_t wl);
int dti__ctx_create_one(struct dti_attachment *d, struct dti_ctx **out);
/* Every engine of context c's attachment still serves it (on several
 * engines, losing one is losing the PPE); the reason the first one that left
 * gave. */
bool dti__all_alive(struct dti_ctx *c, bool allow_syscall);
int dti__dead_reason(struct dti_ctx *c);
void dti__ctx_destroy_one(struct dti_ctx *c);
uint64_t dti__now_ns(void);
/* The doorbell's system call (dti__ring_doorbell() decides). */
void dti__doorbell_write(struct dti_attachment *d);
/* Like dti_wait() but ignores the stash: waits for the ring itself. */
int dti__wait_ring(struct dti_ctx *c, int timeout_ms);

/* ops.c */
int dti__ctx_init_queues(struct dti_ctx *c);
/* One engine's command, no listener-group handling (the group code's own). */
int dti__prep_socket_on(dti_ctx_t *c, uint32_t engine, uint64_t ud);
int dti__prep_listen_one(dti_ctx_t *c, dti_sock_t s, int backlog, uint64_t ud);
int dti__prep_accept_one(dti_ctx_t *c, dti_sock_t s, unsigned max, unsigned flags, uint64_t ud);
int dti__prep_release_one(dti_ctx_t *c, uint16_t op, dti_sock_t s, uint64_t ud);
int dti__prep_setsockopt_one(dti_ctx_t *c, dti_sock_t s, int opt, int64_t value, uint64_t ud);
int dti__prep_watch_one(dti_ctx_t *c, dti_sock_t s, uint32_t events, uint64_t ud);
/* Blocking: prepares with `prep` (retrying while the queue is full),
 * submits and waits for the completion; returns its result. */
uint64_t dti__next_ud(dti_ctx_t *c);
/* The completion of the command with user_data ud will be dropped. */
void dti__forget(dti_ctx_t *c, uint64_t ud);
void dti__stash_push(struct dti_ctx *c, const struct dti_cqe *e);
typedef int (*dti__prep_fn)(dti_ctx_t *c, dti_sock_t s, uint32_t a0, int64_t v, uint64_t ud);
int dti__run_blocking(dti_ctx_t *c, dti__prep_fn prep, dti_sock_t s, uint32_t a0, int64_t v);
/* Queues the release of socket s's owed receive bytes (see data.c).
 * -EAGAIN: no room in the command ring; they stay owed. */
int dti__flush_release(struct dti_ctx *c, dti_sock_t s);
void dti__ctx_free_queues(struct dti_ctx *c);

/* engines.c: links to every engine, listener groups */
int dti__attach_links(struct dti_attachment *d, const char *path, const char *name, uint32_t n_engines,
                      char *why, size_t wl);
void dti__detach_links(struct dti_attachment *d);
int dti__ctx_open_subs(struct dti_ctx *c);
void dti__ctx_close_subs(struct dti_ctx *c);
int dti__group_listen(struct dti_ctx *c, dti_sock_t s, int backlog, uint64_t ud);
int dti__group_accept(struct dti_ctx *c, struct dti_group *g, unsigned max, unsigned flags, uint64_t ud);
int dti__group_drop(struct dti_ctx *c, struct dti_group *g, uint16_t op);
/* A socket bound to a port whose flow to `remote` another engine owns moves
 * there (a new socket with its options and address; the application keeps
 * its handle). 0 when nothing had to move. */
int dti__place_for_connect(struct dti_ctx *c, dti_sock_t s, const struct dti_addr *remote);
/* Whether application handle s moved; forgetting where (it then names its
 * own slot again: the socket left there when it moved). */
bool dti__is_moved(struct dti_ctx *c, dti_sock_t s);
void dti__forget_move(struct dti_ctx *c, dti_sock_t s);
/* The application's handle for engine handle s of context c's engine. */
dti_sock_t dti__app_handle(struct dti_ctx *c, dti_sock_t s);
struct dti_group *dti__group_of(struct dti_attachment *link, dti_sock_t local);
int dti__group_each(struct dti_ctx *c, struct dti_group *g, uint16_t op, uint32_t a0, int64_t v);
int dti__group_status(struct dti_ctx *c, struct dti_group *g, struct dti_sock_info *out);
/* Passing and exec on several engines (engines.c). The listener group whose
 * application handle is s, or NULL; where handle s moved (DTI_SOCK_INVALID:
 * it did not). */
struct dti_group *dti__group_of_app(struct dti_attachment *d, dti_sock_t s);
dti_sock_t dti__moved_to(struct dti_attachment *d, dti_sock_t s);
/* The engine sockets application handle s stands for, per engine (engine
 * handles, DTI_SOCK_INVALID where none): a listener group's members, the
 * socket a moved handle names, or s. Returns the engine of the
 * application's own socket. */
uint32_t dti__parts_of(struct dti_attachment *d, dti_sock_t s, dti_sock_t part[DTI_MAX_ENGINES]);
/* Makes again, in another process's attachment d, the listener group of
 * application handle app with these members (app handles, app among them;
 * 0 when it exists already), or the move of handle app to socket `to`. */
int dti__group_restore(struct dti_attachment *d, dti_sock_t app, const dti_sock_t *members, uint32_t n);
int dti__move_restore(struct dti_attachment *d, dti_sock_t app, dti_sock_t to);
/* Closes engine socket s (an application handle of one engine, no group
 * handling): a blocking round trip. */
int dti__release_now(struct dti_ctx *c, dti_sock_t s);
/* exec.c: the attachment of a new member of a group on one engine, from
 * what its maker handed over (dti_adopt_exec without the links); main: the
 * application's dti_t (thread contexts), else a link of it. */
/* Adopts engines 1..n-1 of per[] as links of d (each handed-over set is
 * taken: closed when its adoption fails). */
int dti__adopt_links(struct dti_attachment *d, const struct dti_exec_fds *per, uint32_t n_engines, char *why,
                     size_t wl);
int dti__adopt_one(const struct dti_exec_fds *fds, uint32_t engine, bool main, struct dti_attachment **out,
                   char *why, size_t wl);

/* A member's answer to a group's waiting accept (out: decoded with an
 * internal user_data); false: not for the application. */
bool dti__group_wait_answer(struct dti_ctx *q, struct dti_group *g, struct dti_cqe *out);

/* data.c */
int dti__sock_status_one(dti_ctx_t *c, dti_sock_t s, struct dti_sock_info *out);
/* The offset a command carries for pool buffer b on link's engine;
 * UINT64_MAX when b lives in another engine's region. */
uint64_t dti__buf_offset(const struct dti_attachment *link, const struct dti_buf *b);
struct dti_sock_shared *dti__sock(struct dti_attachment *d, dti_sock_t s, uint32_t *slot_out);
int dti__prep_data(struct dti_ctx *c, uint16_t op, dti_sock_t s, uint32_t n, uint32_t flags);
int dti__prep_send(struct dti_ctx *c, dti_sock_t s, uint32_t n, uint32_t bits, uint32_t end);
bool dti__ring_has_room(struct dti_ctx *c);
/* A new handle's send side: tail, tx_written and tx_noted from 0 (data.c). */
void dti__tx_start(struct dti_attachment *d, uint32_t slot, uint32_t gen);

#pragma GCC visibility pop

static inline uint32_t dti__slot(dti_sock_t s) { return s & DTI_SLOT_MASK; }
static inline uint32_t dti__gen(dti_sock_t s) { return s >> DTI_SLOT_BITS; }
static inline uint32_t dti__engine_of(dti_sock_t s) { return s >> DTI_ENGINE_SHIFT; }

/* The queue pair for application handle *s, which becomes the engine's
 * handle. On one engine (and for handles already local) nothing changes; a
 * handle naming an engine we do not have is left as it is and fails the
 * generation check like any stale handle. */
struct dti_ctx *dti__route_engines(struct dti_ctx *c, dti_sock_t *s);
static inline struct dti_ctx *dti__route(struct dti_ctx *c, dti_sock_t *s)
{
    if (c->n_sub <= 1)
        return c; /* one engine (or a queue pair of one): the handle is the engine's */
    return dti__route_engines(c, s);
}

/* After publishing commands (cmd_prod stored with DTI_STORE_SC): wakes the
 * engine if it sleeps. Pairs with the engine's "store sleeping, then
 * re-check every cmd_prod" (both SC). */
static inline void dti__ring_doorbell(struct dti_attachment *d)
{
    if (__builtin_expect(DTI_LOAD_SC(&d->hdr->engine_sleeping), 0))
        dti__doorbell_write(d);
}

/* The queue pairs of context c: itself on one engine, else one per engine. */
static inline uint32_t n_qps(const struct dti_ctx *c) { return c->n_sub ? c->n_sub : 1; }
static inline struct dti_ctx *qp_of(struct dti_ctx *c, uint32_t i) { return c->n_sub ? c->sub[i] : c; }

/* The listener group application handle s stands for; NULL on one engine. */
static inline struct dti_group *dti__group_find(struct dti_ctx *c, dti_sock_t s)
{
    if (c->n_sub <= 1)
        return NULL;
    dti_sock_t local = s;
    struct dti_ctx *q = dti__route(c, &local);
    struct dti_group *g = dti__group_of(q->d, local);
    return g && g->app == s ? g : NULL; /* siblings are the group code's own */
}

#endif
