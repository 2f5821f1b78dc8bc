/* Internals of libeta-preload.so shared by its source files. */
#ifndef ETA_PRELOAD_SHIM_H
#define ETA_PRELOAD_SHIM_H

#include <dti/dti.h>
#include <eta/preload_stats.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "decide.h"
#include "real.h"

#define ETA_EXPORT __attribute__((visibility("default")))
#define ETA_TLS __thread __attribute__((tls_model("initial-exec")))
/* glibc declares the sockaddr arguments as transparent unions in GNU C;
 * definitions must match, then take the pointer out. */
#if defined(__USE_GNU) && !defined(__cplusplus) && defined(__GNUC__)
#define ETA_SA(a) ((a).__sockaddr__)
#else
#define ETA_SA(a) (a)
#endif
#define ETA_LIKELY(x) __builtin_expect(!!(x), 1)
#define ETA_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- configuration (environment, read once) ---------------------------- */

struct eta_config {
    char socket_path[256]; /* ETA_SOCKET or /run/eta/ppe.sock */
    bool require;          /* ETA_REQUIRE=1 */
    bool disabled;         /* ETA_DISABLE=1: everything to the kernel (counted) */
    bool log_fallback;     /* ETA_LOG has "fallback" (or "all") */
    bool log_accel;        /* ETA_LOG has "accel" (or "all") */
    bool log_debug;        /* ETA_LOG has "debug" (or "all") */
    uint64_t spin_ns;      /* ETA_SPIN_US * 1000 */
    char net_override[512];/* ETA_NET: the PPE's addresses/routes, else <socket>.net */
};
extern struct eta_config eta_cfg;

/* Reads the environment once; safe from any wrapper at any time. */
void eta_init(void);

/* ---- logging and counters --------------------------------------------- */

void eta_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define ETA_DEBUG(...)             \
    do {                           \
        if (eta_cfg.log_debug)     \
            eta_log(__VA_ARGS__);  \
    } while (0)

/* Warns once per process when a socket of the kernel's that is not TCP is
 * aimed at a destination the PPE routes (sock.c). */
void eta_warn_datagrams_to_ppe(int fd, const struct sockaddr *addr, socklen_t len);

/* Counts one socket sent to the kernel (ETA_R_NONE: one accelerated). */
void eta_count(enum eta_reason r, int fd, const char *detail);
extern struct eta_preload_stats *eta_stats;
#define ETA_STAT_ADD(field, n) __atomic_fetch_add(&eta_stats->field, (n), __ATOMIC_RELAXED)

/* ---- the PPE attachment ------------------------------------------------ */

/* The attachment of this process, or NULL when there is none (no PPE, or a
 * fork child before it attached). Attaches on first call. Never blocks for
 * long: one connect to the control socket. */
dti_t *eta_dti(void);
/* True in a vfork() child before it execs: the shim's memory is its
 * parent's, the descriptor table its own, so wrappers that would change the
 * descriptor table's map (close, dup) leave it alone. A system call. */
bool eta_vfork_child(void);
/* The attachment if there is one now; never attaches. */
dti_t *eta_dti_attached(void);
/* The calling thread's context, NULL when not attached (errno set). */
dti_ctx_t *eta_ctx(void);
/* Generation of the attachment: bumped in a fork child that could not join
 * the parent's group, so that sockets made under the parent's attachment are
 * recognised (orphans). */
extern uint32_t eta_generation;
/* Bumped in every fork child: caches of kernel objects shared with the
 * parent after fork (epoll's inner set) are rebuilt. */
extern uint32_t eta_fork_epoch;
extern struct eta_net eta_net;
/* Set once the PPE is known to be gone (control socket hang-up, region
 * marked gone): accelerated sockets then fail, new ones go to the kernel.
 * A flag, because dti_engine_alive() makes a system call. */
extern _Atomic bool eta_engine_dead;
/* dti_engine_alive() that also sets eta_engine_dead. */
bool eta_engine_check(dti_t *d);
void eta_mark_engine_dead(void);
/* After a sleep on the context's wait fd: disarms, and says whether the
 * engine still serves us. A wake that brought entries is the engine's own
 * answer; only a wake with none (a timeout, a signal, a kernel descriptor,
 * the control socket's hang-up) pays dti_engine_alive()'s system call. */
bool eta_woken_alive(dti_ctx_t *c);
/* True when the PPE has been attached, or an attach is still possible. */
bool eta_ppe_usable(void);

/* Re-attach after the PPE went (core.c): tries dti_attach() again when the
 * backoff allows (50 ms, doubling to 1 s); on success the attachment is
 * replaced, eta_generation and eta_fork_epoch are bumped, listeners are made
 * again on the new PPE and the old attachment is retired. True when attached
 * to a live PPE now. Never blocks on another thread (try-lock). */
bool eta_reattach_try(void);
/* -1 when no re-attach is due (the PPE serves us, or never did); else the ms
 * until the next try: a wait that has nothing else to wake it for a new PPE
 * sleeps at most this long, then calls eta_reattach_try(). */
int eta_reattach_wait_ms(void);
/* relisten.c: makes every listening socket of an older generation listen again
 * on the current attachment. Returns how many; *failed counts refusals. */
unsigned eta_relisten_all(unsigned *failed, unsigned *shared);
struct eta_sock;
/* sockopt.c: carries the options the kernel placeholder holds to s's PPE
 * socket; accept.c: drops listener s's stashed connections without telling
 * the PPE. */
void eta_carry_options(dti_ctx_t *c, int fd, struct eta_sock *s);
void eta_stash_forget(struct eta_sock *s);
/* wait.c: forgets every handle -> socket entry (handles of a dead PPE). */
void eta_hmap_clear(void);
/* eta_generation set by the last fork child that could not join its parent's
 * group: sockets older than it are the parent's (fork-child orphans); older
 * ones of a later generation were made on a PPE that went (re-attach). */
extern uint32_t eta_fork_generation;

/* The calling thread's context as eta_ctx() cached it, while the cache is
 * current: eta_ctx()'s fast half, inlined into the data path. NULL: call
 * eta_ctx(). (Anything that replaces the attachment bumps eta_fork_epoch.) */
extern ETA_TLS dti_ctx_t *eta_tls_ctx;
extern ETA_TLS uint32_t eta_tls_ctx_epoch;
extern ETA_TLS uint64_t eta_tls_ctx_serial;
/* A number naming context c for as long as it lives, never reused (a
 * thread's context is freed when the thread ends, and the next thread's may
 * get its address); 0 when c is not the calling thread's cached context.
 * Caches of "already watched from this context" key on it. */
static inline uint64_t eta_ctx_serial(dti_ctx_t *c)
{
    return c && c == eta_tls_ctx ? eta_tls_ctx_serial : 0;
}
static inline dti_ctx_t *eta_ctx_cached(void)
{
    return ETA_LIKELY(eta_tls_ctx_epoch == eta_fork_epoch) ? eta_tls_ctx : NULL;
}

/* Monotonic time in ns (vDSO; no system call). */
uint64_t eta_now_ns(void);

/* ---- objects behind descriptors ---------------------------------------- */

enum eta_kind {
    ETA_OBJ_SOCK = 1,    /* an AF_INET stream socket the shim tracks */
    ETA_OBJ_EPOLL = 2,   /* an epoll instance with accelerated members */
    ETA_OBJ_INTERNAL = 3 /* a descriptor libdti uses: not the program's */
};

struct eta_obj {
    uint32_t kind;
    _Atomic uint32_t refs; /* descriptors naming it + calls using it */
};

/* ETA_OBJ_INTERNAL: a descriptor of libdti's (owner NULL: libdti moves it,
 * dti_fd_move()) or of the shim's own (owner: where the shim keeps its
 * number, updated when the program takes that number and the descriptor is
 * moved aside). Every internal marker is one of these. */
struct eta_internal {
    struct eta_obj obj;
    _Atomic int *owner;
};
/* The marker for libdti's descriptors (static, never freed). */
extern struct eta_internal eta_internal_dti;
/* Marks *owner's descriptor as the shim's own (epoll's wake-up eventfd). */
void eta_internal_own(_Atomic int *owner);
/* Forgets that marker (the descriptor is closed or no longer used). */
void eta_internal_drop(_Atomic int *owner);
/* The program takes number fd (dup2/dup3 onto it): a descriptor of the
 * shim's or libdti's there is moved aside first. 0, or -1 with errno when it
 * could not be (no free number left: EMFILE). */
int eta_fd_take(int fd);

enum eta_sock_state {
    ETA_SOCK_CANDIDATE = 0, /* kernel socket; may still go to the PPE at bind/connect/listen */
    ETA_SOCK_ACCEL,         /* carried by the PPE (fd is a placeholder kernel socket) */
    ETA_SOCK_ORPHAN,        /* accelerated in a parent process; unusable here */
    ETA_SOCK_KERNEL,        /* decided: the kernel's (dups may still name the object) */
};

/* Options the program set on a socket, so that making it accelerated reads
 * back from the kernel only those (a connect with none set costs no
 * getsockopt). Bits 0..7: eta_carry_options()'s table, in its order. */
#define ETA_OPT_KEEPALIVE_TUNING (1u << 8) /* TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT */
#define ETA_OPT_LINGER (1u << 9)
#define ETA_OPT_TIMEOUTS (1u << 10) /* SO_RCVTIMEO, SO_SNDTIMEO */
#define ETA_OPT_RCVBUF (1u << 11)   /* SO_RCVBUF: fixes the receive buffer (no autotuning) */
#define ETA_OPT_MAXSEG (1u << 12)   /* TCP_MAXSEG: the MSS option of the SYN / SYN-ACK */
#define ETA_OPT_ALL 0xffffffffu     /* unknown history (a socket adopted across exec) */
uint32_t eta_opt_bit(int level, int name);

struct eta_sock {
    struct eta_obj obj;
    _Atomic uint32_t state;
    uint32_t generation;      /* eta_generation when it became accelerated */
    dti_sock_t h;             /* the PPE's handle */
    _Atomic int nonblock;     /* the program's O_NONBLOCK (file description level) */
    bool listening;
    int backlog;              /* listen()'s, to listen again on a new PPE */
    bool hybrid;              /* INADDR_ANY listener: the kernel socket listens too */
    bool v6;                  /* AF_INET6: only a dual-stack listener on [::] is accelerated (its
                               * IPv4 half); addresses are shown v4-mapped (::ffff:a.b.c.d) */
    bool bound_kernel;        /* bind(INADDR_ANY) done in the kernel */
    bool connect_started;     /* a connect was issued (non-blocking in progress or done) */
    bool connect_reported;    /* the outcome of a non-blocking connect was reported */
    _Atomic bool shut_wr;
    _Atomic bool shut_rd;
    _Atomic int pending_error;/* SO_ERROR kept by the shim (positive errno) */
    _Atomic uint32_t opts_set;/* ETA_OPT_* of options the program set (what eta_carry_options() reads back) */
    int rcvtimeo_ms;          /* SO_RCVTIMEO, -1: none */
    int sndtimeo_ms;          /* SO_SNDTIMEO, -1: none */
    struct dti_addr local;    /* host order; as bound */
    uint16_t kernel_port;     /* the port of bind(INADDR_ANY) */
    _Atomic uint32_t ev_seq;  /* bumped for every PPE event on this socket */
    /* Totals for edge triggering: bytes (or connections) that ever arrived
     * = taken + still waiting; send space ever offered = committed + free. */
    _Atomic uint64_t rx_taken;
    _Atomic uint64_t tx_committed;
    _Atomic uint64_t watch_ctx;   /* last context that asked for events (eta_ctx_serial()), and for what */
    _Atomic uint32_t watch_mask;
    /* The engine's POLLOUT watch is one-shot: armed, it stays armed until the
     * engine posts an event for the socket, which bumps ev_seq here. out_seq
     * is ev_seq + 1 when watch_ctx armed it (0: not known to be armed) and
     * out_rescan the eta_rescan_seq then (lost events end the knowledge). */
    _Atomic uint32_t out_seq;
    _Atomic uint32_t out_rescan;
    /* The epoll sets this socket is a member of, with its entry's index in
     * each (kept by epoll.c under the set's lock), so that an event queues
     * the entry on the set's ready queue. Members of more than two sets
     * (`ep_more`) make each of their events a rescan of every set. */
    struct eta_ep_link {
        struct eta_epoll *_Atomic set;
        _Atomic uint32_t idx;
    } ep[2];
    _Atomic uint32_t ep_more;
    /* libdti's receive view (dti_rx_view()), taken once bytes have come (the
     * ring's base is fixed by then): small reads are inlined in the shim.
     * rxv_state: 0 none, 1 being filled (by one thread), 2 usable. */
    _Atomic uint32_t rxv_state;
    struct dti_rx_view rxv;
    /* Its send view (dti_tx_view()), taken once a send went through the
     * connected socket; txv_state as rxv_state. */
    _Atomic uint32_t txv_state;
    struct dti_tx_view txv;
    /* A posted receive in flight (io.c, "posted reads"): the engine writes
     * into the reading thread's buffer. post_ud names the post (its
     * completion carries it back through eta_pump(), whichever call of the
     * thread reaps it); post_state 0 none, 1 out, 2 answered with post_res. */
    _Atomic uint64_t post_ud;
    _Atomic int32_t post_res;
    _Atomic uint32_t post_state;
};

/* The table from descriptor number to object. Descriptors beyond it are
 * never accelerated (counted as ETA_R_FD_RANGE). */
#define ETA_FD_MAX (1 << 20)
/* core.c: [start, stop) overlaps the descriptor table's or the slab's reservation. */
bool eta_reserved_span(uintptr_t start, uintptr_t stop);
extern struct eta_obj *_Atomic *eta_fds;
extern _Atomic long eta_tracked; /* entries in use: 0 means every fd is the kernel's */

static inline struct eta_obj *eta_fd_peek(int fd)
{
    if (ETA_LIKELY(atomic_load_explicit(&eta_tracked, memory_order_relaxed) == 0))
        return NULL;
    if ((unsigned)fd >= ETA_FD_MAX || !eta_fds)
        return NULL;
    return atomic_load_explicit(&eta_fds[fd], memory_order_acquire);
}

/* Takes a reference on the object of fd (NULL: a plain kernel fd). */
struct eta_obj *eta_fd_get(int fd);
void eta_obj_put(struct eta_obj *o);
/* A reference on o unless its last one is already gone (a concurrent close):
 * eta_fd_get()'s second half, for callers that peeked first. */
static inline bool eta_obj_tryref(struct eta_obj *o)
{
    uint32_t r = atomic_load_explicit(&o->refs, memory_order_relaxed);
    do {
        if (r == 0)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&o->refs, &r, r + 1, memory_order_acquire,
                                                    memory_order_relaxed));
    return true;
}
/* What eta_obj_put() does when the last reference went. */
void eta_obj_destroy(struct eta_obj *o);
/* eta_obj_put(), inlined where it is hot. */
static inline void eta_obj_unref(struct eta_obj *o)
{
    if (ETA_UNLIKELY(atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1))
        eta_obj_destroy(o);
}
static inline struct eta_obj *eta_obj_ref(struct eta_obj *o)
{
    atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
    return o;
}
/* Binds fd to o (taking a reference); drops whatever fd named before. */
void eta_fd_set(int fd, struct eta_obj *o);
/* Forgets fd (after the kernel closed it); drops its reference. */
void eta_fd_clear(int fd);
bool eta_fd_in_range(int fd);

struct eta_sock *eta_sock_new(void);
/* The socket behind fd with a reference, or NULL when fd is not one. */
struct eta_sock *eta_sock_get(int fd);
/* Releases what the PPE holds when the last reference goes (close). */
void eta_sock_release(struct eta_sock *s);

/* ---- waiting ----------------------------------------------------------- */

/* Makes the context report `mask` events of socket s (cached per socket).
 * 0, or libdti's error: -EAGAIN when the command queue stayed full.
 * POLLOUT is one-shot in the engine, and a watch believed still armed is not
 * sent again; an event not yet reaped may have consumed it. So a caller that
 * then waits must end its wait on any event for s (s->ev_seq moving), not
 * only on the state it wants, and call eta_watch() again: poll and epoll
 * loops do so by their rounds, a blocked send by its predicate (io.c). */
int eta_watch(dti_ctx_t *c, struct eta_sock *s, uint32_t mask);
/* Reaps and dispatches everything pending in the context (events bump the
 * sockets' ev_seq). Returns entries reaped. */
unsigned eta_pump(dti_ctx_t *c);
/* io.c: shutdown(SHUT_RD) ends a read waiting on a posted receive. */
void eta_recv_shutdown(dti_ctx_t *c, struct eta_sock *s);

/* True (and counted once) for a socket accelerated under a parent's
 * attachment: the PPE cannot share it with this process (see README). */
bool eta_sock_orphaned(struct eta_sock *s);

/* True when the PPE half of an INADDR_ANY listener can no longer accept
 * (the PPE went, or the listener is an orphan here): the listener then is its
 * kernel half alone, as if eta had never been there. */
bool eta_hybrid_kernel_only(struct eta_sock *s);
/* True when every installed signal handler has SA_RESTART: a blocking call
 * the shim emulates restarts after a signal, as the kernel's would. */
bool eta_signals_restart(void);

/* ---- the program's signal handlers (signals.c) ------------------------- */

/* Handlers of the program that ran on this thread, all of them and those
 * without SA_RESTART: the shim's trampoline counts each before calling the
 * program's handler. A wait samples them at its start (eta_wait). */
extern ETA_TLS unsigned eta_sig_handled;
extern ETA_TLS unsigned eta_sig_eintr;
/* Whether a blocked call interrupted by sig's handler restarts (SA_RESTART,
 * or no handler at all), after what the program installed. */
bool eta_signal_restarts(int sig);
/* Puts the trampoline in front of handlers installed before the shim's
 * wrappers were reached. Called by the constructor. */
void eta_signals_init(void);

/* Connections accepted from the PPE for listener s and stashed, not yet
 * returned by accept (they make the listener readable). */
unsigned eta_stash_count(struct eta_sock *s);

/* Readiness of an accelerated socket as poll bits (POLLIN, ...); c may be
 * NULL (no context: the PPE went), then only errors, and nothing for a
 * listener. */
uint32_t eta_sock_events_general(dti_ctx_t *c, struct eta_sock *s);
/* Takes the socket's receive and send views (io.c) once it is connected;
 * nothing when it is not yet, or another thread is taking them. */
void eta_sock_take_views(dti_ctx_t *c, struct eta_sock *s);
/* Linux's tcp_poll reports a socket whose sending side is shut (reset, a
 * refused or failed connect, both directions closed, shutdown(SHUT_WR))
 * writable: a write answers its error at once. POLLHUP marks the first
 * ones; programs that wait for POLLOUT alone after a non-blocking connect
 * learn of its failure this way. */
static inline uint32_t eta_send_shut_writable(const struct eta_sock *s, uint32_t ev)
{
    return (ev & POLLHUP) || atomic_load_explicit(&s->shut_wr, memory_order_relaxed) ? ev | POLLOUT : ev;
}

static inline __attribute__((always_inline)) uint32_t eta_sock_events(dti_ctx_t *c, struct eta_sock *s)
{
    /* Inline, the case poll and epoll loops meet most: a connected socket
     * of this attachment with nothing the shim keeps on its side. */
    if (ETA_LIKELY(c && s->generation == eta_generation &&
                   atomic_load_explicit(&s->state, memory_order_acquire) == ETA_SOCK_ACCEL &&
                   s->connect_started && !s->listening && !atomic_load_explicit(&s->pending_error, memory_order_relaxed) &&
                   !atomic_load_explicit(&s->shut_rd, memory_order_relaxed) &&
                   !atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))) {
        /* Read in place through the socket's views when it has both. */
        if (ETA_LIKELY(atomic_load_explicit(&s->rxv_state, memory_order_acquire) == 2 &&
                       atomic_load_explicit(&s->txv_state, memory_order_acquire) == 2)) {
            uint32_t ev = dti_view_events(&s->rxv, &s->txv);
            if (ETA_LIKELY(ev != DTI_VIEW_ASK))
                return ev;
        } else {
            eta_sock_take_views(c, s);
        }
        return eta_send_shut_writable(s, dti_sock_poll(c, s->h));
    }
    return eta_sock_events_general(c, s);
}

/* Waits until `ready(arg)` is true, the deadline passes (ns, 0: none) or a
 * signal arrives. Also wakes for `kfd` (a kernel fd, -1: none) becoming
 * readable. Spins as the context's adaptive policy allows (dti_spin_begin(),
 * at most ETA_SPIN_US), then sleeps on the context's wait fd.
 * Returns 0 when ready, -ETIMEDOUT, -EINTR, or -EPIPE when the PPE went. */
int eta_wait(dti_ctx_t *c, bool (*ready)(void *), void *arg, uint64_t deadline_ns, int kfd);

/* Converts a libdti result (-errno or -DTI_E_*) to an errno value. */
int eta_errno_from_dti(int res);

/* ---- calls that bypass the data path (bypass.c) --------------------------- */
/* The accelerated socket behind fd (referenced), or NULL (io.c). */
struct eta_sock *eta_sock_accel(int fd);
/* Refuses call on accelerated socket fd: EINVAL, counted, one warning per
 * `which` (0..31, one per call name). Returns -1. */
int eta_bypass_refused(const char *call, int fd, unsigned which);
/* uring.c: descriptors registered with io_uring (fds[n]) that are
 * accelerated sockets are counted and said, once per program. */
void eta_uring_check_files(const int *fds, unsigned n, const char *what);
/* ---- passing sockets to another process (pass.c) --------------------------- */
/* Before sendmsg: registers with the PPE each accelerated socket msg passes
 * (SCM_RIGHTS). True when one cannot be passed: then nothing is registered,
 * errno is EOPNOTSUPP (counted, one warning) and nothing must be sent. */
bool eta_passes_accelerated(const struct msghdr *msg);
/* The sendmsg after eta_passes_accelerated() failed: nothing is in flight. */
void eta_pass_withdraw(const struct msghdr *msg);
/* After a recvmsg of the kernel's with control data: every received
 * descriptor that is an accelerated socket another process passed becomes
 * one here (claimed from the PPE), or is refused loudly. */
void eta_claim_passed(struct msghdr *msg);
/* core.c: makes d (a member of another process's group, joined by a claim)
 * this process's attachment, as a re-attach does. False when another thread
 * holds the attachment lock. */
bool eta_attach_join(dti_t *d);
void eta_attach_join_locked(dti_t *d, bool leave_old);

/* ---- the fork hooks ---------------------------------------------------- */
void eta_after_fork_child(void);
/* Accept one connection at a time (listeners may be shared after fork). */
extern bool eta_listeners_shared;
/* Child, after joining: drops its holds on the parent's stashed connections. */
void eta_stash_after_fork_child(void);

/* ---- exec (exec.c) ------------------------------------------------------- */
/* In the constructor: adopts the sockets the previous image handed over
 * (ETA_EXEC_STATE), if any; warns once and goes on without them when the
 * handover is stale or forged. */
void eta_exec_adopt(void);
/* exec.c: in a vfork child, descriptor fd now names what `from` names (-1:
 * nothing of ours: closed); its exec hands over what these notes say. */
void eta_vfork_note(int fd, int from);
/* core.c: makes d (adopted after exec) this process's attachment. */
void eta_attach_adopted(dti_t *d);
/* accept.c: listener s's stashed connections (copied), and one put back. */
unsigned eta_stash_export(struct eta_sock *s, dti_sock_t *out, unsigned max);
bool eta_stash_import(struct eta_sock *s, dti_sock_t h);
/* wait.c */
void eta_hmap_put(dti_sock_t h, struct eta_sock *s);

/* ---- epoll ------------------------------------------------------------- */
struct eta_epoll;
/* Called when an accelerated fd is closed: it leaves every epoll set. */
void eta_epoll_forget_fd(int fd, struct eta_sock *s);
/* The readiness of s may have changed (an engine event, a connection
 * stashed, a shutdown): its epoll entries go on their sets' ready queues. */
void eta_epoll_touch(struct eta_sock *s);
/* Bumped when readiness may have changed anywhere (events were lost, the
 * PPE went): every epoll set looks at all of its members again. */
extern _Atomic uint32_t eta_rescan_seq;

#endif
