/* The socket object behind an accelerated (or candidate) descriptor: its
 * state, what the shim keeps of it, its views and its readiness. The
 * functions are the socket parts' (each says where: sock.c, accept.c,
 * sockopt.c, wait.c); fdtable.c makes and frees the objects. */
#ifndef ETA_PRELOAD_SOCKOBJ_H
#define ETA_PRELOAD_SOCKOBJ_H

#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "attach.h"
#include "fdtable.h"
#include "shim.h"

enum eta_sock_state {
    ETA_SOCK_CANDIDATE = 0, /* kernel socket; may still go to the PPE at bind/connect/listen */
    ETA_SOCK_ACCEL,         /* carried by the PPE (fd is a placeholder kernel socket) */
    ETA_SOCK_ORPHAN,        /* accelerated in a parent process; unusable here */
    ETA_SOCK_KERNEL,        /* decided: the kernel's (dups may still name the object) */
};

/* A hybrid listener's kernel half is always O_NONBLOCK: the shim only ever
 * polls it. The program's own O_NONBLOCK is a property of the file
 * description, shared by every process that holds it (fork, SCM_RIGHTS), so
 * it is kept in the file too, in the O_APPEND bit (meaningless on a socket;
 * never shown to the program, F_GETFL hides it): a process the listener is
 * passed to reads it back there (pass_fds.c), not the shim's O_NONBLOCK.
 * fl: the file's flags now; returns the flags to set. */
#define ETA_HYBRID_NONBLOCK_MARK O_APPEND
static inline int eta_hybrid_file_flags(int fl, bool program_nonblock)
{
    return (fl & ~ETA_HYBRID_NONBLOCK_MARK) | O_NONBLOCK | (program_nonblock ? ETA_HYBRID_NONBLOCK_MARK : 0);
}

/* Options the program set on a socket, so that making it accelerated reads
 * back from the kernel only those (a connect with none set costs no
 * getsockopt). Bits 0..8: eta_carry_options()'s table, in its order. */
#define ETA_OPT_KEEPALIVE_TUNING (1u << 9) /* TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT */
#define ETA_OPT_LINGER (1u << 10)
#define ETA_OPT_TIMEOUTS (1u << 11) /* SO_RCVTIMEO, SO_SNDTIMEO */
#define ETA_OPT_RCVBUF (1u << 12)   /* SO_RCVBUF: fixes the receive buffer (no autotuning) */
#define ETA_OPT_MAXSEG (1u << 13)   /* TCP_MAXSEG: the MSS option of the SYN / SYN-ACK */
#define ETA_OPT_NOTSENT_LOWAT (1u << 14) /* TCP_NOTSENT_LOWAT (0: the namespace's default) */
#define ETA_OPT_SNDBUF (1u << 15)   /* SO_SNDBUF, SO_SNDBUFFORCE: sizes the send ring at connect */
#define ETA_OPT_UDP (1u << 16)      /* a UDP option the engine follows (udp_mcast.h eta_udp_engine_option) */
#define ETA_OPT_ALL 0xffffffffu     /* unknown history (a socket adopted across exec) */
/* sockopt.c: the ETA_OPT_* bit of an option (0: not one the shim carries). */
uint32_t eta_opt_bit(int level, int name);
/* sockopt.c: carries the options the kernel placeholder holds to s's PPE
 * socket. */
void eta_carry_options(dti_ctx_t *c, int fd, struct eta_sock *s);
/* sockopt.c: gives an accepted socket's kernel placeholder fd (object n)
 * the options the program set on its listener (lfd, l), as the kernel's
 * accept clones them. */
void eta_inherit_options(int lfd, struct eta_sock *l, int fd, struct eta_sock *n);

struct eta_sock {
    struct eta_obj obj;
    _Atomic uint32_t state;
    uint32_t generation;      /* eta_generation when it became accelerated */
    dti_sock_t h;             /* the PPE's handle */
    _Atomic int nonblock;     /* the program's O_NONBLOCK (file description level) */
    bool listening;
    bool v6only;              /* AF_INET6 on the PPE: bound with DTI_BIND6_V6ONLY (IPV6_V6ONLY at bind/listen) */
    uint8_t local6;           /* AF_INET6 bound to one of the PPE's IPv6 addresses: 1 + its entry in the
                               * process's table of bound IPv6 addresses (sock6.c; in the padding, the
                               * object fills its slot); 0: :: */
    bool udp_kself;           /* (in the padding) UDP hybrid whose kernel half is a shared port's placeholder read for
                               * host-local senders alone (udp_sock.c eta_udp_read_placeholder): poll()
                               * looks at it less often (poll.c) */
    int backlog;              /* listen()'s, to listen again on a new PPE */
    bool hybrid;              /* INADDR_ANY listener (or, on a shared port, one on a PPE address): the kernel socket listens too */
    bool v6;                  /* AF_INET6: a listener on [::] (both families, or IPv6 only) or on
                               * one of the PPE's IPv6 addresses, a connect it carries (sock6.c); with
                               * dgram every AF_INET6 UDP socket (udp6.c);
                               * IPv4 addresses are shown v4-mapped (::ffff:a.b.c.d) */
    bool dgram;               /* SOCK_DGRAM (UDP; AF_INET6 with v6: udp6.c): a DTI datagram socket once
                               * accelerated (udp.c) */
    bool mc_if4_ours;         /* UDP: IP_MULTICAST_IF named the PPE's port and the kernel socket did not take
                               * it (no kernel interface holds the address): getsockopt answers mc_if4 */
    _Atomic uint32_t dgram_rx_busy, dgram_tx_busy; /* one reader and one writer of its rings at a time (udp.c) */
    /* UDP hybrid (udp.c): PPE datagrams taken since its kernel half was last
     * looked at, and whether that half is believed to hold one (relaxed; a
     * race costs one look more or less, never a datagram). */
    _Atomic uint8_t udp_turn, udp_kready;
    _Atomic uint16_t udp_gso;         /* UDP_SEGMENT, the kernel socket's option read back (udp.c); 0: none */
    _Atomic uint32_t rx_cmsg; /* UDP: the ancillary data its receives carry (ETA_RX_*, udp_cmsg.h), read
                               * back from the kernel socket where the options change (udp.c) */
    bool bound_kernel;        /* the kernel socket is bound: bind(INADDR_ANY), or on a shared port the PPE address */
    bool connect_started;     /* a connect was issued (non-blocking in progress or done) */
    bool connect_reported;    /* the outcome of a non-blocking connect was reported */
    bool connect_closed;      /* its failure was reported by connect(): back in CLOSE (connect_state.c) */
    _Atomic bool shut_wr;
    _Atomic bool shut_rd;
    bool v6only_read0;        /* (in the padding) AF_INET6 TCP whose placeholder a connect's hold bound to
                               * the PPE's IPv6 address (the kernel made it IPv6-only) while IPV6_V6ONLY was
                               * 0: getsockopt answers 0, as Linux's autobind leaves it (sockopt.c) */
    _Atomic int pending_error;/* SO_ERROR kept by the shim (positive errno) */
    _Atomic uint32_t opts_set;/* ETA_OPT_* of options the program set (what eta_carry_options() reads back) */
    int rcvtimeo_ms;          /* SO_RCVTIMEO, -1: none */
    int sndtimeo_ms;          /* SO_SNDTIMEO, -1: none */
    struct dti_addr local;    /* host order; as bound */
    uint16_t kernel_port;     /* the kernel socket's port when bound_kernel */
    _Atomic uint32_t ev_seq;  /* bumped for every PPE event on this socket */
    uint32_t mc_if4;          /* UDP: IP_MULTICAST_IF named the PPE's port, this address of it (host order);
                               * 0: another or none. Its sends to IPv4 groups are the engine's (udp_mcast.c) */
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
    /* The send fast path's one word (issue 33): the socket's generation
     * while its send view is usable as far as the shim knows (txv_state 2,
     * accelerated, not shut for writing), else 0; == eta_generation is all
     * send_fast() asks of the shim's words (then the view's own checks).
     * Set by eta_take_tx_view(); every change of those words clears it
     * (eta_tx_fast_clear()); a re-attach changes eta_generation. */
    _Atomic uint32_t tx_fast;
    struct dti_tx_view txv;
    /* A posted receive in flight (io_recv.c, "posted reads"): the engine writes
     * into the reading thread's buffer. post_ud names the post (its
     * completion carries it back through eta_pump(), whichever call of the
     * thread reaps it); post_state 0 none, 1 out, 2 answered with post_res. */
    _Atomic uint64_t post_ud;
    _Atomic int32_t post_res;
    _Atomic uint32_t post_state;
};

/* sock.c: releases what the PPE holds when the last reference goes (close). */
void eta_sock_release(struct eta_sock *s);
/* fdtable.c: the accelerated socket behind fd (referenced), or NULL. */
struct eta_sock *eta_sock_accel(int fd);

/* wait.c: true (and counted once) for a socket accelerated under a parent's
 * attachment: the PPE cannot share it with this process (see README). */
bool eta_sock_orphaned(struct eta_sock *s);

/* accept.c: true when the PPE half of an INADDR_ANY listener can no longer
 * accept (the PPE went, or the listener is an orphan here): the listener then
 * is its kernel half alone, as if eta had never been there. */
bool eta_hybrid_kernel_only(struct eta_sock *s);

/* shutdown(SHUT_RD), from any thread: a read waiting on a posted receive
 * (io_recv.c, "posted reads") returns (with the bytes that landed before, or
 * 0), as the kernel wakes its readers. */
static inline void eta_recv_shutdown(dti_ctx_t *c, struct eta_sock *s)
{
    if (atomic_load(&s->post_state) == 1 && dti_prep_recv_cancel(c, s->h) == 0)
        dti_submit(c);
}

/* The accelerated socket behind fd (referenced), or NULL for the kernel:
 * inlined in the data path's wrappers; eta_sock_accel() out of line. */
static inline struct eta_sock *eta_sock_accel_inline(int fd)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (ETA_LIKELY(!o))
        return NULL;
    struct eta_sock *s = eta_sock_get(fd);
    if (s && atomic_load_explicit(&s->state, memory_order_acquire) != ETA_SOCK_ACCEL &&
        atomic_load(&s->state) != ETA_SOCK_ORPHAN) {
        eta_obj_put(&s->obj);
        return NULL;
    }
    return s;
}

/* The socket's receive and send views (libdti's dti_rx_view(), dti_tx_view()),
 * taken once it is connected, by one thread (io_fast.c, wait.c). */

/* Bytes came through dti_recv(): the socket is connected and its ring's
 * base fixed, so its receive view can be taken (once, by one thread). */
static inline void eta_take_rx_view(dti_ctx_t *c, struct eta_sock *s)
{
    uint32_t none = 0;
    if (ETA_LIKELY(atomic_load_explicit(&s->rxv_state, memory_order_relaxed) != 0) ||
        !atomic_compare_exchange_strong(&s->rxv_state, &none, 1))
        return;
    atomic_store_explicit(&s->rxv_state, dti_rx_view(c, s->h, &s->rxv) == 0 ? 2 : 0, memory_order_release);
}

/* Bytes went through dti_send(): the socket is connected, so its send view
 * can be taken (once, by one thread). */
/* tx_fast (above) set when its conditions hold; a change that raced with
 * this (its clear before this store) is seen by the second look. */
static inline void eta_tx_fast_publish(struct eta_sock *s)
{
    const uint32_t g = s->generation;
    if (atomic_load(&s->txv_state) != 2 || atomic_load(&s->state) != ETA_SOCK_ACCEL || atomic_load(&s->shut_wr) ||
        g != eta_generation)
        return;
    atomic_store(&s->tx_fast, g);
    if (atomic_load(&s->txv_state) != 2 || atomic_load(&s->state) != ETA_SOCK_ACCEL || atomic_load(&s->shut_wr))
        atomic_store(&s->tx_fast, 0);
}

static inline void eta_tx_fast_clear(struct eta_sock *s)
{
    atomic_store(&s->tx_fast, 0);
}

/* The changes that end the fast word (tests/unit/preload/tx_fast_test.c):
 * shutdown for writing, and the socket no longer accelerated. */
static inline void eta_sock_shut_wr(struct eta_sock *s)
{
    atomic_store(&s->shut_wr, true);
    eta_tx_fast_clear(s);
}

static inline void eta_sock_unaccel(struct eta_sock *s, uint32_t state)
{
    atomic_store(&s->state, state);
    eta_tx_fast_clear(s);
}

/* send_fast()'s question of the shim's words: one load and compare, then
 * whether the PPE went. */
static inline __attribute__((always_inline)) bool eta_tx_fast_ok(struct eta_sock *s)
{
    return atomic_load_explicit(&s->tx_fast, memory_order_acquire) == eta_generation &&
           !atomic_load_explicit(&eta_engine_dead, memory_order_relaxed);
}

/* The end of a take of the send view (dti_tx_view() answered rc, the taker
 * holds txv_state 1): the view's state, then the fast word. */
static inline void eta_tx_view_settle(struct eta_sock *s, int rc)
{
    atomic_store_explicit(&s->tx_fast, 0, memory_order_seq_cst);
    atomic_store_explicit(&s->txv_state, rc == 0 ? 2 : 0, memory_order_release);
    eta_tx_fast_publish(s);
}

static inline void eta_take_tx_view(dti_ctx_t *c, struct eta_sock *s)
{
    uint32_t was = atomic_load_explicit(&s->txv_state, memory_order_relaxed);
    /* Taken, and busy: a region-buffer send, or the send ring grew since the
     * view was taken (dti.h: its size is stale until it is taken again). */
    if (ETA_UNLIKELY(was == 2) && *s->txv.busy_gen != s->txv.gen)
        return;
    if (was == 1 || !atomic_compare_exchange_strong(&s->txv_state, &was, 1))
        return;
    eta_tx_view_settle(s, dti_tx_view(c, s->h, &s->txv));
}

/* wait.c: readiness of an accelerated socket as poll bits (POLLIN, ...); c may be
 * NULL (no context: the PPE went), then only errors, and nothing for a
 * listener. */
uint32_t eta_sock_events_general(dti_ctx_t *c, struct eta_sock *s);
/* wait.c: takes the socket's receive and send views once it is connected;
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

#endif
