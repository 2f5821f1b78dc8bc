/* libdti layer 1, link: one engine's attachment (link.c, pool.c). The
 * control connection and its messages, the HELLO/WELCOME handshake, the
 * region mapped and checked, the engine's liveness, the doorbell and the
 * region's buffer pool. Calls only base. */
#ifndef DTI_LIB_LINK_H
#define DTI_LIB_LINK_H

#include "base.h"

struct dti_ctx;
struct dti_alias;

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
    uint32_t trace_seen;   /* latency sampling: the last dti_sock_shared.trace a read saw */
    /* A datagram socket's asynchronous errors: gen << 32 | the engine's
     * err_seq last reported (queue.h dti__dgram_error): each error once,
     * whichever thread or forked process reports it. */
    uint64_t err_mark;
    uint8_t pad0[DTI_CACHELINE - 32];
    uint32_t tx_gen;
    uint32_t tx_tail;      /* bytes written into the send ring */
    uint32_t wr_shut_gen;  /* shutdown(WR) submitted for this generation */
    uint32_t tx_busy_gen;  /* a region-buffer send (SEND_FROM) is in flight */
    /* Latency sampling: a read of a traced request was stamped; the next
     * SEND carries the stamps (dti_cmd.trace_*) and clears trace_pend. */
    uint32_t trace_pend;
    uint32_t trace_woken;  /* ticks from the wakeup to the read (0: no sleep) */
    uint64_t trace_read;   /* TSC of the read */
    /* Send rings that grow (data.c, dti/README.md "Send rings that grow"):
     * the size a TX_GROW asked for, not yet answered (0: none); the
     * engine's tx_grow_ack when it was queued; the size the last
     * dti_tx_view() was taken at (0: none); the size the last reservation
     * of space was made at (its bytes lie at that size's offsets); and
     * tx_grow_busy_gen == tx_gen while tx_busy_gen is set by a grow (pending,
     * or a view taken at the old size), which sends every write the
     * general way. */
    uint32_t tx_grow_to;
    uint32_t tx_grow_seen;
    uint32_t tx_view_size;
    uint32_t tx_res_size;
    uint32_t tx_grow_busy_gen;
    uint8_t pad1[DTI_CACHELINE - 52];
};

/* The link to one engine. The application's dti_t is the link to engine 0
 * and holds a link to every engine (layer 3 makes them). */
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
    struct dti_ctx *contexts; /* layer 2's queue pairs on this link */
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
    struct dti_alias *alias; /* per slot: the handle table (queue.h; NULL until layer 3 makes an entry) */
    /* Copied from the region header at attach: the data path computes ring
     * addresses without reading the engine's header line. */
    uint8_t *data_base;     /* base + hdr->data_offset: slot 0's receive ring */
    uint64_t data_stride;   /* hdr->data_stride: one slot's rings */
};

/* A slot's receive-side positions for the handle of generation gen: they
 * start at 0 for every new handle in the slot (data.c's byte streams and
 * dgram.c's records alike). */
static inline struct dti_sock_priv *dti__rx_side(struct dti_attachment *d, uint32_t slot, uint32_t gen)
{
    struct dti_sock_priv *p = &d->priv[slot];
    if (p->rx_gen != gen) {
        p->rx_gen = gen;
        p->rx_head = 0;
        p->rx_owed = 0;
    }
    return p;
}

#pragma GCC visibility push(hidden)

/* link.c: a new link (no connection yet), and the last of one: unmaps and
 * closes what it holds and frees it (its contexts must be gone). */
struct dti_attachment *dti__link_new(void);
void dti__link_free(struct dti_attachment *d);
/* The control connection: connect, then HELLO to `engine` and WELCOME back,
 * which maps the region (*n_engines: how many engines the PPE runs). */
int dti__connect_control(const char *path, int *fd_out, char *why, size_t wl);
int dti__handshake(struct dti_attachment *d, const char *name, uint32_t engine, uint32_t *n_engines,
                   char *why, size_t wl);
int dti__map_region(struct dti_attachment *d, int memfd, int priv_fd, char *why, size_t wl);
int dti__ctl_send(int fd, const struct dti_ctl_msg *m);
int dti__ctl_send_fd(int fd, const struct dti_ctl_msg *m, int pass);
int dti__ctl_recv(int fd, struct dti_ctl_msg *m, int *fds, int max_fds);
/* Liveness: sticky once the engine is gone (the reason: positive DTI_E_*). */
void dti__mark_dead(struct dti_attachment *d, int reason);
bool dti__check_alive(struct dti_attachment *d, bool allow_syscall);
/* The doorbell's system call (dti__ring_doorbell() decides). */
void dti__doorbell_write(struct dti_attachment *d);

/* pool.c: the offset a command carries for pool buffer b on link's engine;
 * UINT64_MAX when b lives in another engine's region. */
uint64_t dti__buf_offset(const struct dti_attachment *link, const struct dti_buf *b);

#pragma GCC visibility pop

/* After publishing commands (cmd_prod stored with DTI_STORE_SC): wakes the
 * engine if it sleeps. Pairs with the engine's "store sleeping, then
 * re-check every cmd_prod" (both SC). */
static inline void dti__ring_doorbell(struct dti_attachment *d)
{
    if (__builtin_expect(DTI_LOAD_SC(&d->hdr->engine_sleeping), 0))
        dti__doorbell_write(d);
}

#endif
