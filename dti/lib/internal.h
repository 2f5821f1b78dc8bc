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
    uint32_t rx_busy_gen;  /* a posted receive (RECV_INTO) is in flight */
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
    uint64_t *pool_bitmap;
    uint32_t pool_blocks;
    int fork_fd;            /* between dti_fork_prepare() and parent/child: the child's connection */
    int fork_rc;            /* what dti_fork_prepare() returned */
};

#pragma GCC visibility push(hidden)

/* core.c */
bool dti__check_alive(struct dti_attachment *d, bool allow_syscall);
uint64_t dti__now_ns(void);
void dti__ring_doorbell(struct dti_attachment *d);
/* Like dti_wait() but ignores the stash: waits for the ring itself. */
int dti__wait_ring(struct dti_ctx *c, int timeout_ms);

/* ops.c */
int dti__ctx_init_queues(struct dti_ctx *c);
/* Queues the release of socket s's owed receive bytes (see data.c).
 * -EAGAIN: no room in the command ring; they stay owed. */
int dti__flush_release(struct dti_ctx *c, dti_sock_t s);
void dti__ctx_free_queues(struct dti_ctx *c);

/* data.c */
struct dti_sock_shared *dti__sock(struct dti_attachment *d, dti_sock_t s, uint32_t *slot_out);
int dti__prep_data(struct dti_ctx *c, uint16_t op, dti_sock_t s, uint32_t n, uint32_t flags);

#pragma GCC visibility pop

static inline uint32_t dti__slot(dti_sock_t s) { return s & DTI_SLOT_MASK; }
static inline uint32_t dti__gen(dti_sock_t s) { return s >> DTI_SLOT_BITS; }

#endif
