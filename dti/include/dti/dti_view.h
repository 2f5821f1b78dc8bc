/* dti/dti_view.h: views, the small send and receive inlined into a caller's
 * own per-call code (a sockets shim's fast paths). Part of libdti's API:
 * dti/dti.h includes it, so programs include dti/dti.h; read alone, it needs
 * only the types dti.h declares (dti_ctx_t, dti_sock_t, DTI_POLLIN, ...). */
#ifndef DTI_DTI_VIEW_H
#define DTI_DTI_VIEW_H

#include <dti/dti.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Receive view: the words dti_recv() reads and writes for a socket, for
 * callers that inline the common small read into their own per-call code (a
 * sockets shim pays for its own descriptor lookup; a second library call
 * that checks the handle again costs as much as the read). Valid from a
 * successful dti_rx_view() until the socket is closed; not while a posted
 * receive (dti_prep_recv_into) is in flight on it. dti_recv_view() takes only
 * what it can take cheaply (bytes there, up to 64 at a time, not across the
 * ring's end) and returns 0 otherwise: then call dti_recv(), which does the
 * rest (end of stream, errors, waiting). The view holds no lock and needs
 * none: one reader per socket at a time, as for dti_recv(). */
struct dti_rx_view {
    const uint32_t *live_gen; /* the slot's live generation: == gen while the handle lives */
    const uint32_t *tail;     /* bytes the engine produced (load with acquire) */
    uint32_t *head;           /* bytes consumed */
    uint32_t *owed;           /* consumed, not yet released (atomic add) */
    const uint8_t *ring;
    /* The ring's size and base may change while the socket lives (it grows
     * while the app holds no unreleased byte): load them after *tail. */
    const uint32_t *size;     /* a power of two, at most the slot's reserve */
    const uint32_t *base;     /* ring offset of position p: (base + p) & (size - 1) */
    uint32_t max_mask;        /* the slot's reserve - 1: no offset goes past it */
    uint32_t gen;
    /* Latency sampling: *trace != *trace_seen means the engine traces the
     * request now readable; the view leaves that read to dti_recv(), which
     * stamps it (and the reply's SEND carries the stamps). */
    const uint32_t *trace;
    const uint32_t *trace_seen;
};
int dti_rx_view(dti_ctx_t *c, dti_sock_t s, struct dti_rx_view *v);
/* Tells the engine of the bytes consumed through a view (dti_recv_view()
 * says when it is due). Never fails for a full command queue (they stay owed
 * and go with a later command). */
int dti_recv_flush(dti_ctx_t *c, dti_sock_t s);

/* Up to len bytes from the view: > 0 taken (and *flush set when a release
 * is due: call dti_recv_flush()), 0 when this call cannot take them. */
#if defined(__GNUC__)
#define DTI_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define DTI_ALWAYS_INLINE inline
#endif
/* Copies n <= 64 bytes as two overlapping moves of the largest power of two
 * not above n (libdti's and the view's small copies: a call into memcpy
 * costs as much as copying a request). */
static DTI_ALWAYS_INLINE void dti__copy_small(void *dst, const void *src, uint32_t n)
{
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *s = (const uint8_t *)src;
    if (n == 64) { /* the common request: four fixed 16-byte moves (one 64-byte memcpy became eight 8-byte ones) */
        __builtin_memcpy(d, s, 32);
        __builtin_memcpy(d + 32, s + 32, 32);
    } else if (n >= 32) {
        __builtin_memcpy(d, s, 32);
        __builtin_memcpy(d + n - 32, s + n - 32, 32);
    } else if (n >= 16) {
        __builtin_memcpy(d, s, 16);
        __builtin_memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        __builtin_memcpy(d, s, 8);
        __builtin_memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        __builtin_memcpy(d, s, 4);
        __builtin_memcpy(d + n - 4, s + n - 4, 4);
    } else {
        for (uint32_t i = 0; i < n; i++)
            d[i] = s[i];
    }
}

static DTI_ALWAYS_INLINE ssize_t dti_recv_view(const struct dti_rx_view *v, void *buf, size_t len, int *flush)
{
    uint32_t head = *v->head;
    uint32_t n = __atomic_load_n(v->tail, __ATOMIC_ACQUIRE) - head;
    /* After the tail: a ring that grew was empty, so the bytes counted in n
     * lie at the size and base read here. The mask stays within the slot
     * even for a confused engine. */
    uint32_t mask = (__atomic_load_n(v->size, __ATOMIC_RELAXED) - 1) & v->max_mask;
    if (n - 1 > mask || __atomic_load_n(v->live_gen, __ATOMIC_RELAXED) != v->gen || len == 0 ||
        __atomic_load_n(v->trace, __ATOMIC_RELAXED) != *v->trace_seen)
        return 0; /* nothing (or a confused engine), the handle went, or a traced read (dti_recv() stamps it) */
    uint32_t take = len < n ? (uint32_t)len : n;
    uint32_t off = (__atomic_load_n(v->base, __ATOMIC_RELAXED) + head) & mask;
    if (take > 64 || take > mask + 1 - off)
        return 0;
    dti__copy_small(buf, v->ring + off, take);
    *v->head = head + take;
    /* Releases are due at a quarter of the ring (dti_recv_flush()). */
    *flush = __atomic_add_fetch(v->owed, take, __ATOMIC_RELAXED) > mask >> 2;
    return take;
}

/* Send view: the words dti_send() reads and writes for a socket, for the
 * same callers as the receive view. Valid from a successful dti_tx_view()
 * (the socket connected) until the socket is closed. dti_send_view() takes
 * only what it can take cheaply (a connected socket with no error, up to 64
 * bytes, not across the ring's end, the command queue with room) and returns
 * 0 otherwise: then call dti_send(), which does the rest. One writer per
 * socket at a time, as for dti_send(). */
struct dti_tx_view {
    const uint32_t *live_gen; /* the slot's live generation: == gen while the handle lives */
    const uint32_t *state;    /* DTI_STATE_* (engine-written) */
    const int32_t *error;     /* the socket's pending error (engine-written) */
    const uint32_t *head;     /* bytes the engine took from the ring (load with acquire) */
    uint32_t *tail;           /* bytes written into the ring */
    uint32_t *written;        /* the tail as the engine reads it (shared; store seq_cst) */
    const uint32_t *noted;    /* 1: a SEND not yet taken will take up to *written (load seq_cst) */
    const uint32_t *shut_gen; /* == gen: shut down for writing */
    const uint32_t *busy_gen; /* == gen: a region-buffer send is in flight, or the send ring grows or
                                 grew since this view was taken: take the view again (dti_tx_view)
                                 once a dti_send() went through */
    const uint32_t *trace_pend; /* != 0: the reply's SEND carries latency stamps (dti_send_note() writes them) */
    uint8_t *ring;
    uint32_t size;            /* a power of two: the ring's size when the view was taken */
    uint32_t base;            /* ring offset of position p: (base + p) & (size - 1) */
    uint32_t gen;
};
int dti_tx_view(dti_ctx_t *c, dti_sock_t s, struct dti_tx_view *v);
/* Moves the tail over the n bytes a view wrote beyond it (0: the view moved
 * it already) and queues a SEND that takes every byte up to the tail.
 * -EAGAIN when the command queue cannot take it now; then, for n > 0,
 * nothing changed (the bytes beyond the tail are not sent); for n == 0 the
 * bytes stay owed a SEND: call again (reaping between) until it returns 0. */
int dti_send_note(dti_ctx_t *c, dti_sock_t s, uint32_t n);

/* A context's command queue as dti_send_view_note() writes a SEND into it
 * (issue 33: dti_send_note()'s common case inline, no call). One per
 * context, so per thread; valid as long as the context. idx: the context's
 * local producer index, the last consumer index it read and its published
 * index (in that order; a context of several engines gets a triple that
 * never matches, so every note there is dti_send_note()'s). */
struct dti_note_view {
    uint32_t *idx;                   /* [0] prepared, [1] consumer seen, [2] published */
    uint8_t *cmds;                   /* the command ring: entries of 64 bytes */
    uint32_t *cmd_prod;              /* the shared producer index (store seq_cst) */
    const uint32_t *engine_sleeping; /* != 0: ring the doorbell (dti_note_doorbell()) */
    uint32_t mask;                   /* the ring's entries - 1 */
};
int dti_note_view(dti_ctx_t *c, struct dti_note_view *q);
/* The doorbell after a dti_send_view_note() that answered 1. */
void dti_note_doorbell(dti_ctx_t *c);
/* The SEND's words (dti_abi.h's struct dti_cmd; data.c asserts them). */
#define DTI_VCMD_OP 8
#define DTI_VCMD_SOCK 12
#define DTI_VCMD_ARG0 16
#define DTI_VCMD_ARG1 20
#define DTI_VCMD_OFFSET 32
#define DTI_VCMD_STAMP 60
#define DTI_VCMD_SEND_TAIL 2u

/* dti_send_note(c, s, n)'s common case inline, in two steps (a caller
 * keeps fewer values across the first): the n bytes the view copied
 * (dti_send_view_coalesce() answered 0) published with their own SEND in
 * q's queue, q being the view of the calling thread's context c (n > 0:
 * for n == 0, a SEND owed, dti_send_note()).
 * dti_send_view_note_ok(): false when it cannot (a command staged or the
 * queue full as last seen, a traced reply, several engines): nothing
 * published, dti_send_note(c, s, n) instead. Then dti_send_view_note(): 0
 * done; 1 done, and the engine sleeps: dti_note_doorbell(c). */
static DTI_ALWAYS_INLINE int dti_send_view_note_ok(const struct dti_tx_view *v, const struct dti_note_view *q)
{
    const uint32_t *ix = q->idx;
    return ix[0] == ix[2] && ix[0] - ix[1] <= q->mask && !*v->trace_pend;
}

static DTI_ALWAYS_INLINE int dti_send_view_note(const struct dti_tx_view *v, const struct dti_note_view *q,
                                                dti_sock_t s, uint32_t n)
{
    uint32_t *ix = q->idx;
    const uint32_t prepared = ix[0];
    uint8_t *cmd = q->cmds + ((size_t)(prepared & q->mask) << 6);
    const uint32_t tail = *v->tail + n, next = prepared + 1;
    /* (volatile: one store each; GCC merged the handle and n through a
     * vector register, two instructions more. The op's word with the flags:
     * zero for a SEND.) */
    *(volatile uint32_t *)(cmd + DTI_VCMD_OP) = DTI_OP_SEND;
    *(volatile uint32_t *)(cmd + DTI_VCMD_SOCK) = s;
    *(volatile uint32_t *)(cmd + DTI_VCMD_ARG0) = n;
    *(volatile uint32_t *)(cmd + DTI_VCMD_ARG1) = DTI_VCMD_SEND_TAIL;
    *(volatile uint64_t *)(cmd + DTI_VCMD_OFFSET) = tail;
    *v->tail = tail;
    ix[0] = next;
    ix[2] = next;
    __atomic_store_n(v->written, tail, __ATOMIC_SEQ_CST); /* as dti_send_note(): the tail, then the SEND */
    __atomic_store_n((uint32_t *)v->noted, 1u, __ATOMIC_RELAXED);
    __atomic_store_n((uint32_t *)(cmd + DTI_VCMD_STAMP), next, __ATOMIC_RELEASE);
    __atomic_store_n(q->cmd_prod, next, __ATOMIC_SEQ_CST);
    return __atomic_load_n(q->engine_sleeping, __ATOMIC_SEQ_CST) != 0;
}

/* Up to len bytes into the view's ring and queued: > 0 taken, 0 when this
 * call cannot take them (dti_send() can), -n when n bytes were taken but
 * their SEND could not be queued (a full command queue, seldom): then call
 * dti_send_note(c, s, 0) until it returns 0.
 *
 * One SEND per burst: while a SEND the engine has not taken is queued for
 * the socket (*noted), a write only moves the shared tail; the engine takes
 * every byte up to it when it takes that SEND (dti_abi.h, tx_written). */
static DTI_ALWAYS_INLINE ssize_t dti_send_view(dti_ctx_t *c, dti_sock_t s, const struct dti_tx_view *v,
                                               const void *buf, size_t len);

/* dti_send_view() in two steps, for callers that keep calls off their
 * common path (a call makes a shim's wrapper save registers on every send).
 * dti_send_view_copy(): the checks, then up to len bytes copied beyond the
 * tail, nothing published: the bytes copied, or 0 when this call cannot
 * take them. */
static DTI_ALWAYS_INLINE uint32_t dti_send_view_copy(const struct dti_tx_view *v, const void *buf, size_t len)
{
    const uint32_t stop = DTI_STATE_CONNECTED | DTI_STATE_WR_CLOSED | DTI_STATE_RESET | DTI_STATE_FAILED |
                          DTI_STATE_CONNECTING;
    uint32_t state = __atomic_load_n(v->state, __ATOMIC_ACQUIRE);
    if ((state & stop) != DTI_STATE_CONNECTED || __atomic_load_n(v->live_gen, __ATOMIC_RELAXED) != v->gen ||
        __atomic_load_n(v->error, __ATOMIC_RELAXED) || *v->shut_gen == v->gen || *v->busy_gen == v->gen ||
        len == 0)
        return 0;
    uint32_t tail = *v->tail;
    uint32_t room = v->size - (tail - __atomic_load_n(v->head, __ATOMIC_ACQUIRE));
    if (room - 1 >= v->size)
        return 0; /* full (or a confused engine) */
    uint32_t take = len < room ? (uint32_t)len : room;
    uint32_t off = (v->base + tail) & (v->size - 1);
    if (take > 64 || take > v->size - off)
        return 0;
    dti__copy_small(v->ring + off, buf, take);
    return take;
}

/* Then: the n copied bytes published under the SEND already queued and not
 * yet taken (one SEND per burst): 1, done. 0: no SEND queued, nothing
 * published: dti_send_note(c, s, n) publishes them and queues one (or fails,
 * and they are not sent). -1: published, but the engine took that SEND
 * meanwhile: their SEND is owed, dti_send_note(c, s, 0) until it returns 0. */
static DTI_ALWAYS_INLINE int dti_send_view_coalesce(const struct dti_tx_view *v, uint32_t n)
{
    if (__atomic_load_n(v->noted, __ATOMIC_RELAXED) == 0)
        return 0;
    uint32_t tail = *v->tail + n;
    *v->tail = tail;
    __atomic_store_n(v->written, tail, __ATOMIC_SEQ_CST);
    /* Still queued: the engine's swap of *noted is still to come, and its
     * load of *written after it sees these bytes. */
    return __builtin_expect(__atomic_load_n(v->noted, __ATOMIC_SEQ_CST) != 0, 1) ? 1 : -1;
}

static DTI_ALWAYS_INLINE ssize_t dti_send_view(dti_ctx_t *c, dti_sock_t s, const struct dti_tx_view *v,
                                               const void *buf, size_t len)
{
    uint32_t take = dti_send_view_copy(v, buf, len);
    if (take == 0)
        return 0;
    int r = dti_send_view_coalesce(v, take);
    if (r > 0)
        return take;
    if (r == 0)
        return dti_send_note(c, s, take) == 0 ? (ssize_t)take : 0;
    return dti_send_note(c, s, 0) == 0 ? (ssize_t)take : -(ssize_t)take;
}

/* Readiness from the two views of one socket: what dti_sock_poll() answers
 * (DTI_POLLIN, DTI_POLLOUT) for a socket connected both ways with no error,
 * read in place; DTI_VIEW_ASK for every other case (closing, reset, an
 * error, a stale view): then ask dti_sock_poll(). */
#define DTI_VIEW_ASK 0x80000000u
static DTI_ALWAYS_INLINE uint32_t dti_view_events(const struct dti_rx_view *r, const struct dti_tx_view *t)
{
    uint32_t state = __atomic_load_n(t->state, __ATOMIC_ACQUIRE);
    if ((state & ~DTI_STATE_BOUND) != DTI_STATE_CONNECTED || r->gen != t->gen ||
        __atomic_load_n(t->live_gen, __ATOMIC_RELAXED) != t->gen || __atomic_load_n(t->error, __ATOMIC_RELAXED) ||
        *t->shut_gen == t->gen || *t->busy_gen == t->gen)
        return DTI_VIEW_ASK; /* (busy: also a ring that grew since the view was taken: its size is stale) */
    uint32_t rd = __atomic_load_n(r->tail, __ATOMIC_ACQUIRE) - *r->head;
    uint32_t room = t->size - (*t->tail - __atomic_load_n(t->head, __ATOMIC_ACQUIRE));
    return (rd - 1 <= r->max_mask ? DTI_POLLIN : 0) | (room - 1 < t->size ? DTI_POLLOUT : 0);
}

#ifdef __cplusplus
}
#endif

#endif /* DTI_DTI_VIEW_H */
