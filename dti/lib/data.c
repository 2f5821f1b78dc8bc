/* libdti layer 4, public calls: the data path. dti_send/dti_recv, the views
 * and in-place calls, readiness (dti_sock_status, dti_sock_poll): reads the
 * engine-written socket table and the rings in place; no round trip, no
 * syscall (unless the engine sleeps and needs its doorbell). */
#include "api.h"
#include "sys.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

static struct dti_sock_priv *tx_side(struct dti_attachment *d, uint32_t slot, uint32_t gen)
{
    struct dti_sock_priv *p = &d->priv[slot];
    if (p->tx_gen != gen)
        dti__tx_start(d, slot, gen);
    return p;
}

/* The send side of a write that moved p->tx_tail: what the engine reads at
 * the next SEND with DTI_SEND_TAIL (dti_abi.h, tx_written). seq_cst: it must
 * be visible before a later load of tx_noted reads a 1 (coalescing). */
static inline __attribute__((always_inline)) void publish_tail(struct dti_sock_shared *sh, const struct dti_sock_priv *p)
{
    DTI_STORE_SC(&sh->tx_written, p->tx_tail);
}

/* SEND's arg1 for a write of libdti's that ends at `end`: MORE sends take
 * only up to their own end (what follows is not theirs to hold back). */
static inline uint32_t send_bits(unsigned flags) { return (flags & DTI_SEND_MORE) ? DTI_SEND_MORE | DTI_SEND_END : DTI_SEND_TAIL; }

/* Readable bytes; clamped so a confused engine cannot make us read past the ring. */
static uint32_t readable(struct dti_attachment *d, struct dti_sock_shared *sh, struct dti_sock_priv *p)
{
    uint32_t n = DTI_LOAD(&sh->rx_tail) - p->rx_head;
    return n > dti__rx_mask(d, sh) + 1 ? 0 : n;
}

static uint32_t writable(struct dti_attachment *d, struct dti_sock_shared *sh, struct dti_sock_priv *p)
{
    uint32_t used = p->tx_tail - DTI_LOAD(&sh->tx_head);
    const uint32_t size = dti__tx_size(d, sh);
    return used > size ? 0 : size - used;
}

static inline __attribute__((always_inline)) int status(dti_ctx_t *c, dti_sock_t s, struct dti_sock_info *out)
{
    struct dti_group *g = dti__group_find(c, s);
    if (__builtin_expect(g != NULL, 0))
        return dti__group_status(c, g, out);
    return dti__sock_state(c, s, out);
}

int dti_sock_status(dti_ctx_t *c, dti_sock_t s, struct dti_sock_info *out) { return status(c, s, out); }

/* What poll/epoll ask of every member they look at: the events alone, with
 * no dti_sock_info filled on the way (one engine, no group: the common
 * case; half the instructions of dti_sock_status()). */
uint32_t dti_sock_poll(dti_ctx_t *c, dti_sock_t s)
{
    if (__builtin_expect(c->n_sub > 1, 0)) {
        struct dti_sock_info st;
        return status(c, s, &st) < 0 ? 0 : st.events;
    }
    struct dti_attachment *d = c->d;
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock_of(d, s, &slot);
    if (__builtin_expect(!sh, 0))
        return 0;
    uint32_t gen = dti__gen(s);
    const struct dti_sock_priv *p = &d->priv[slot];
    uint32_t state = DTI_LOAD(&sh->state);
    if (p->wr_shut_gen == gen)
        state |= DTI_STATE_WR_CLOSED;
    uint32_t rd = DTI_LOAD(&sh->rx_tail) - (p->rx_gen == gen ? p->rx_head : 0);
    uint32_t used = (p->tx_gen == gen ? p->tx_tail : 0) - DTI_LOAD(&sh->tx_head);
    const uint32_t tx_size = dti__tx_size(d, sh);
    uint32_t wr = used > tx_size ? 0 : tx_size - used;
    if (rd > d->limits.rx_ring_size)
        rd = 0;
    int32_t err = p->err_taken_gen == gen ? 0 : DTI_LOAD(&sh->error);
    if (__builtin_expect((state & ~DTI_STATE_BOUND) == DTI_STATE_CONNECTED && !err, 1))
        return (rd ? DTI_POLLIN : 0) | (wr ? DTI_POLLOUT : 0); /* dti_events_of()'s answer there */
    if ((state & DTI_STATE_DGRAM) && !err)
        err = dti__dgram_error(sh, (struct dti_sock_priv *)p, gen, 0);
    return dti_events_of(state, err, rd, wr, DTI_LOAD(&sh->accept_ready));
}

/* ---- receive --------------------------------------------------------------- */

static uint8_t *rx_ring(struct dti_attachment *d, uint32_t slot)
{
    return d->data_base + d->data_stride * slot;
}

static uint8_t *tx_ring(struct dti_attachment *d, uint32_t slot)
{
    return rx_ring(d, slot) + d->limits.rx_ring_size;
}

/* Splits [pos, pos+n) of a ring into at most two pieces. */
static void ring_iov(uint8_t *ring, uint32_t size, uint32_t base, uint32_t pos, uint32_t n,
                     struct dti_iov iov[2])
{
    uint32_t off = (base + pos) & (size - 1);
    uint32_t first = size - off < n ? size - off : n;
    iov[0] = (struct dti_iov){ring + off, first};
    iov[1] = (struct dti_iov){ring, n - first};
}

/* Why nothing is readable, from the state `st` loaded before the tail that
 * found the ring empty (see rx_span()). */
static ssize_t rx_error(struct dti_sock_shared *sh, struct dti_sock_priv *p, uint32_t gen, uint32_t st)
{
    int32_t err = DTI_LOAD(&sh->error);
    if (err && p->err_taken_gen != gen) {
        p->err_taken_gen = gen;
        return err;
    }
    if (st & (DTI_STATE_RD_CLOSED | DTI_STATE_RESET | DTI_STATE_FAILED))
        return 0;
    if (st & DTI_STATE_LISTENING)
        return -EINVAL;
    if (!(st & (DTI_STATE_CONNECTED | DTI_STATE_CONNECTING)))
        return -ENOTCONN;
    return -EAGAIN;
}

/* ---- latency sampling (dti_abi.h dti_sock_shared.trace) -----------------
 * The engine marks the socket of a sampled request with a new token; the
 * first read that finds it stamps the TSC (and how long ago this context
 * woke), and the next SEND of the socket carries the stamps to the engine.
 * The common paths pay a compare of a word on lines they load anyway. */
static __attribute__((noinline)) void trace_read(dti_ctx_t *c, struct dti_sock_shared *sh, struct dti_sock_priv *p)
{
    uint64_t now = dti__tsc(), woke = c->woke_tsc, ago = now - woke;
    p->trace_seen = DTI_LOAD_RELAXED(&sh->trace);
    p->trace_read = now;
    p->trace_woken = woke && woke <= now && ago < UINT32_MAX ? (uint32_t)ago : 0;
    p->trace_pend = 1;
}

/* The stamps of a traced read into the SEND cmd (not yet published). */
static __attribute__((noinline)) void trace_into(struct dti_cmd *cmd, struct dti_sock_priv *p)
{
    uint64_t ticks = dti__tsc() - p->trace_read;
    cmd->trace_read = p->trace_read;
    cmd->trace_submit = ticks < UINT32_MAX ? (uint32_t)ticks : UINT32_MAX;
    cmd->trace_woken = p->trace_woken;
    p->trace_pend = 0;
}

/* The SEND just staged (the last one prepared) carries the stamps. */
static void trace_send(dti_ctx_t *c, struct dti_sock_priv *p)
{
    trace_into(&c->staging[(c->prepared - 1) & c->cmd_mask], p);
}

/* The readable bytes of s in place (at most two pieces) and, through *pp,
 * its private receive side: one handle check for borrow and for dti_recv(). */
static inline ssize_t rx_span(dti_ctx_t *c, dti_sock_t s, struct dti_iov iov[2], struct dti_sock_priv **pp,
                              struct dti_sock_shared **shp)
{
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(c->d, s, &slot);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    uint32_t gen = dti__gen(s);
    struct dti_sock_priv *p = dti__rx_side(c->d, slot, gen);
    if (p->rx_busy_gen == gen)
        return -EBUSY;
    uint32_t n = readable(c->d, sh, p);
    if (n == 0) {
        /* The engine publishes a socket's tail before its state (release,
         * Table::write_shared), so the last bytes and the FIN after them can
         * land between our load of the tail and one of the state: the state
         * (acquire) first, then the tail again, or those bytes would read
         * as an end of stream before them. */
        uint32_t st = DTI_LOAD(&sh->state);
        n = readable(c->d, sh, p);
        if (n == 0) {
            iov[0] = iov[1] = (struct dti_iov){NULL, 0};
            return rx_error(sh, p, gen, st);
        }
    }
    ring_iov(rx_ring(c->d, slot), dti__rx_mask(c->d, sh) + 1, DTI_LOAD_RELAXED(&sh->rx_base), p->rx_head, n, iov);
    if (__builtin_expect(DTI_LOAD_RELAXED(&sh->trace) != p->trace_seen, 0))
        trace_read(c, sh, p);
    *pp = p;
    *shp = sh;
    return n;
}

ssize_t dti_recv_borrow(dti_ctx_t *c, dti_sock_t s, struct dti_iov iov[2])
{
    c = dti__route(c, &s);
    struct dti_sock_priv *p = NULL;
    struct dti_sock_shared *sh = NULL;
    return rx_span(c, s, iov, &p, &sh);
}

/* The caller has taken n readable bytes: owe them to the engine. */
static inline void consume(dti_ctx_t *c, dti_sock_t s, const struct dti_sock_shared *sh, struct dti_sock_priv *p,
                           uint32_t n)
{
    p->rx_head += n; /* consumed first: nothing is released before it is taken */
    uint32_t owed = __atomic_add_fetch(&p->rx_owed, n, __ATOMIC_RELAXED);
    if (owed >= dti__release_batch(c->d, sh) && dti__flush_release(c, s) == 0)
        dti_submit(c); /* a full command ring: stays owed (listed), the next release, command or wait retries */
}

int dti_recv_release(dti_ctx_t *c, dti_sock_t s, size_t n)
{
    c = dti__route(c, &s);
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(c->d, s, &slot);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    struct dti_sock_priv *p = dti__rx_side(c->d, slot, dti__gen(s));
    if (n > readable(c->d, sh, p))
        return -EINVAL;
    if (n > 0)
        consume(c, s, sh, p, (uint32_t)n);
    return 0;
}

/* A batch of releases is due: tell the engine (see consume()). */
static __attribute__((noinline)) ssize_t release_owed(dti_ctx_t *c, dti_sock_t s, uint32_t taken)
{
    if (dti__flush_release(c, s) == 0)
        dti_submit(c);
    return taken;
}

/* borrow + copy + release: the general read (first use of a slot, errors,
 * end of stream, a posted receive in flight). */
static __attribute__((noinline)) ssize_t recv_general(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len)
{
    struct dti_iov iov[2];
    struct dti_sock_priv *p = NULL;
    struct dti_sock_shared *sh = NULL;
    ssize_t n = rx_span(c, s, iov, &p, &sh);
    if (n <= 0)
        return n;
    size_t take = len < (size_t)n ? len : (size_t)n;
    size_t first = take < iov[0].len ? take : iov[0].len;
    memcpy(buf, iov[0].base, first);
    if (take > first)
        memcpy((uint8_t *)buf + first, iov[1].base, take - first);
    if (take)
        consume(c, s, sh, p, (uint32_t)take);
    return (ssize_t)take;
}

/* The common read: up to 64 bytes waiting in a warm socket's ring, not
 * across its end. One handle check, one inline copy, the release owed in
 * batches; anything else takes recv_general(). */
static inline __attribute__((always_inline)) ssize_t recv_local(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len)
{
    struct dti_attachment *d = c->d;
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock_of(d, s, &slot);
    if (__builtin_expect(!sh, 0))
        return -DTI_E_BAD_HANDLE;
    uint32_t gen = dti__gen(s);
    struct dti_sock_priv *p = &d->priv[slot];
    uint32_t n = DTI_LOAD(&sh->rx_tail) - p->rx_head;
    uint32_t mask = dti__rx_mask(d, sh); /* after the tail (dti__rx_mask()) */
    /* n - 1 > mask: nothing to read (0) or a confused engine (> size). */
    if (__builtin_expect(p->rx_gen != gen || p->rx_busy_gen == gen || n - 1 > mask || len == 0 ||
                             DTI_LOAD_RELAXED(&sh->trace) != p->trace_seen,
                         0))
        return recv_general(c, s, buf, len);
    uint32_t take = len < n ? (uint32_t)len : n;
    uint32_t off = (DTI_LOAD_RELAXED(&sh->rx_base) + p->rx_head) & mask;
    /* Larger reads and reads across the ring's end take the general path:
     * their copy costs more than looking again, and this one then makes no
     * call that needs a stack frame. */
    if (__builtin_expect(take > 64 || take > mask + 1 - off, 0))
        return recv_general(c, s, buf, len);
    dti__copy_small(buf, rx_ring(d, slot) + off, take);
    p->rx_head += take; /* consumed first: nothing is released before it is taken */
    if (__builtin_expect(__atomic_add_fetch(&p->rx_owed, take, __ATOMIC_RELAXED) > mask >> 2, 0))
        return release_owed(c, s, take);
    return take;
}

/* Several engines: the handle names its engine's queue pair. */
static __attribute__((noinline)) ssize_t recv_routed(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len)
{
    c = dti__route_links(c, &s);
    return recv_local(c, s, buf, len);
}

/* The routing is a tail call of its own, so that the common case (one
 * engine) is a leaf that needs no stack frame. */
ssize_t dti_recv(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len)
{
    if (__builtin_expect(c->n_sub > 1, 0))
        return recv_routed(c, s, buf, len);
    return recv_local(c, s, buf, len);
}

int dti_rx_view(dti_ctx_t *c, dti_sock_t s, struct dti_rx_view *v)
{
    c = dti__route(c, &s);
    struct dti_attachment *d = c->d;
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock_of(d, s, &slot);
    if (!sh || !v)
        return sh ? -EFAULT : -DTI_E_BAD_HANDLE;
    uint32_t gen = dti__gen(s);
    struct dti_sock_priv *p = dti__rx_side(d, slot, gen);
    if (p->rx_busy_gen == gen)
        return -EBUSY;
    *v = (struct dti_rx_view){.live_gen = &sh->gen, .tail = &sh->rx_tail, .head = &p->rx_head,
                              .owed = &p->rx_owed, .ring = rx_ring(d, slot), .size = &sh->rx_size,
                              .base = &sh->rx_base, .max_mask = d->limits.rx_ring_size - 1, .gen = gen,
                              .trace = &sh->trace, .trace_seen = &p->trace_seen};
    return 0;
}

int dti_recv_flush(dti_ctx_t *c, dti_sock_t s)
{
    c = dti__route(c, &s);
    uint32_t slot;
    if (!dti__sock_of(c->d, s, &slot))
        return -DTI_E_BAD_HANDLE;
    if (dti__flush_release(c, s) == 0)
        dti_submit(c);
    return 0;
}

/* ---- send ---------------------------------------------------------------------- */

static ssize_t tx_error(struct dti_sock_shared *sh, struct dti_sock_priv *p, uint32_t gen)
{
    uint32_t st = DTI_LOAD(&sh->state);
    int32_t err = DTI_LOAD(&sh->error);
    if (err && p->err_taken_gen != gen) {
        p->err_taken_gen = gen;
        return err;
    }
    if (p->wr_shut_gen == gen || (st & (DTI_STATE_WR_CLOSED | DTI_STATE_RESET | DTI_STATE_FAILED)))
        return -EPIPE;
    if (st & DTI_STATE_CONNECTING)
        return -EAGAIN;
    if (!(st & DTI_STATE_CONNECTED))
        return -ENOTCONN;
    return 0;
}

/* ---- send rings that grow (dti/README.md "Send rings that grow") ---------
 * The writer alone moves bytes into the send ring, so it grows the ring:
 * when the engine publishes a larger size it would like (tx_want:
 * autotuning, SO_SNDBUF set on a live socket), the writer copies every byte
 * the engine may still read ([tx_head, tail)) to its offset at the new size
 * where that differs from its offset now (the copies land in the reserve's
 * part past the current size, which the engine does not read), queues
 * TX_GROW after the SENDs of those bytes, and until the engine answers
 * (tx_grow_ack) keeps the old size and room, writing each new byte at both
 * offsets. The engine switches when it takes TX_GROW, every earlier SEND
 * taken. Meanwhile (and, with a send view taken at the old size, until the
 * view is taken again) tx_busy_gen sends every write the general way here. */

/* Bytes of positions [pos, pos + n), at their offsets in a ring of `from`
 * bytes, copied to their offsets in one of `to` bytes (a larger power of two,
 * the same memory) where those differ. */
static void ring_mirror(uint8_t *ring, uint32_t from, uint32_t to, uint32_t base, uint32_t pos, uint32_t n)
{
    while (n) {
        uint32_t q = base + pos, o = q & (from - 1), t = q & (to - 1);
        uint32_t k = n;
        if (k > from - o)
            k = from - o;
        if (k > to - t)
            k = to - t;
        if (o != t)
            memcpy(ring + t, ring + o, k);
        pos += k;
        n -= k;
    }
}

/* The grow's state before a write: an answered TX_GROW ends the double
 * writes; the diversion ends once nothing is pending and no view was taken
 * at another size than the ring's. */
static void tx_grow_settle(struct dti_attachment *d, struct dti_sock_shared *sh, struct dti_sock_priv *p,
                           uint32_t gen)
{
    if (p->tx_grow_to && DTI_LOAD(&sh->tx_grow_ack) != p->tx_grow_seen)
        p->tx_grow_to = 0; /* answered: tx_size, loaded after (acquire), says whether it grew */
    if (p->tx_grow_busy_gen == gen && !p->tx_grow_to &&
        (p->tx_view_size == 0 || p->tx_view_size == dti__tx_size(d, sh))) {
        p->tx_grow_busy_gen = 0;
        p->tx_busy_gen = 0;
    }
}

/* Starts a grow to the size the engine published, when it is a larger power
 * of two within the reserve, none is pending and no region-buffer send is
 * in flight. Nothing changes if TX_GROW cannot be queued (the copies are
 * harmless: the engine does not read there). */
static void tx_grow_start(dti_ctx_t *c, dti_sock_t s, uint32_t slot, struct dti_sock_shared *sh,
                          struct dti_sock_priv *p, uint32_t gen)
{
    struct dti_attachment *d = c->d;
    const uint32_t size = dti__tx_size(d, sh);
    const uint32_t want = DTI_LOAD_RELAXED(&sh->tx_want);
    if (want <= size || want > d->limits.tx_ring_size || (want & (want - 1)) || p->tx_grow_to ||
        (p->tx_busy_gen == gen && p->tx_grow_busy_gen != gen))
        return;
    const uint32_t head = DTI_LOAD(&sh->tx_head);
    const uint32_t used = p->tx_tail - head;
    if (used > size)
        return; /* a confused engine */
    const uint32_t seen = DTI_LOAD(&sh->tx_grow_ack);
    ring_mirror(tx_ring(d, slot), size, want, DTI_LOAD_RELAXED(&sh->tx_base), head, used);
    if (dti__prep_data(c, DTI_OP_TX_GROW, s, want, 0) < 0)
        return;
    p->tx_grow_seen = seen;
    p->tx_grow_to = want;
    p->tx_grow_busy_gen = gen;
    p->tx_busy_gen = gen;
    dti_submit(c);
}

/* Bytes just written beyond the tail at the offsets of the reservation's
 * size: also at the size a pending grow asks for, or at the size the ring
 * grew to since the reservation. Only while a grow diverts the writes. */
static inline void tx_mirror_new(struct dti_attachment *d, uint32_t slot, struct dti_sock_shared *sh,
                                 struct dti_sock_priv *p, uint32_t gen, uint32_t n)
{
    if (__builtin_expect(p->tx_grow_busy_gen != gen, 1))
        return;
    uint32_t to = p->tx_grow_to ? p->tx_grow_to : dti__tx_size(d, sh);
    if (p->tx_res_size && p->tx_res_size < to)
        ring_mirror(tx_ring(d, slot), p->tx_res_size, to, DTI_LOAD_RELAXED(&sh->tx_base), p->tx_tail, n);
}

/* Free send-ring space of s in place (at most two pieces) and, through *pp,
 * its private send side: one handle check for reserve and for dti_send(). */
static inline ssize_t tx_span(dti_ctx_t *c, dti_sock_t s, struct dti_iov iov[2], struct dti_sock_priv **pp)
{
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(c->d, s, &slot);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    uint32_t gen = dti__gen(s);
    struct dti_sock_priv *p = tx_side(c->d, slot, gen);
    iov[0] = iov[1] = (struct dti_iov){NULL, 0};
    if (p->tx_grow_busy_gen == gen)
        tx_grow_settle(c->d, sh, p, gen);
    if (p->tx_busy_gen == gen && p->tx_grow_busy_gen != gen)
        return -EBUSY;
    ssize_t e = tx_error(sh, p, gen);
    if (e < 0)
        return e;
    if (DTI_LOAD_RELAXED(&sh->tx_want) > dti__tx_size(c->d, sh) && (DTI_LOAD(&sh->state) & DTI_STATE_CONNECTED))
        tx_grow_start(c, s, slot, sh, p, gen);
    uint32_t n = writable(c->d, sh, p);
    if (n == 0)
        return -EAGAIN;
    const uint32_t size = dti__tx_size(c->d, sh);
    p->tx_res_size = size;
    ring_iov(tx_ring(c->d, slot), size, DTI_LOAD_RELAXED(&sh->tx_base), p->tx_tail, n, iov);
    *pp = p;
    return n;
}

ssize_t dti_send_reserve(dti_ctx_t *c, dti_sock_t s, struct dti_iov iov[2])
{
    c = dti__route(c, &s);
    struct dti_sock_priv *p = NULL;
    return tx_span(c, s, iov, &p);
}

int dti_send_commit(dti_ctx_t *c, dti_sock_t s, size_t n, unsigned flags)
{
    c = dti__route(c, &s);
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(c->d, s, &slot);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    struct dti_sock_priv *p = tx_side(c->d, slot, dti__gen(s));
    if (n > writable(c->d, sh, p))
        return -EINVAL;
    if (n == 0)
        return 0;
    tx_mirror_new(c->d, slot, sh, p, dti__gen(s), (uint32_t)n);
    int rc = dti__prep_send(c, s, (uint32_t)n, send_bits(flags), p->tx_tail + (uint32_t)n);
    if (rc < 0)
        return rc;
    if (p->trace_pend)
        trace_send(c, p);
    p->tx_tail += (uint32_t)n;
    publish_tail(sh, p);
    dti_submit(c);
    return 0;
}

/* The engine sleeps: ring its doorbell (as dti__doorbell_write(), the
 * raw system call: its result is not used, so no errno to set; EAGAIN means
 * the counter is saturated and the engine wakes anyway). Taken on a good
 * part of all small sends when the engine sleeps between them. */
static __attribute__((noinline)) ssize_t wake_engine(struct dti_attachment *d, uint32_t sent)
{
    static const uint64_t one = 1;
    (void)dti_raw_syscall6(SYS_write, d->doorbell_fd, (long)&one, sizeof one, 0, 0, 0);
    return sent;
}

/* reserve + copy + commit: the general write (first use of a slot, errors,
 * a connect under way, a full ring, commands already staged). */
static __attribute__((noinline)) ssize_t send_general(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len,
                                                      unsigned flags)
{
    struct dti_iov iov[2];
    struct dti_sock_priv *p = NULL;
    ssize_t n = tx_span(c, s, iov, &p);
    if (n <= 0 || len == 0)
        return n < 0 ? n : 0;
    uint32_t take = len < (size_t)n ? (uint32_t)len : (uint32_t)n;
    uint32_t first = take < iov[0].len ? take : (uint32_t)iov[0].len;
    memcpy(iov[0].base, buf, first);
    if (take > first)
        memcpy(iov[1].base, (const uint8_t *)buf + first, take - first);
    tx_mirror_new(c->d, dti__slot(s), &c->d->socks[dti__slot(s)], p, dti__gen(s), take);
    int rc = dti__prep_send(c, s, take, send_bits(flags), p->tx_tail + take);
    if (rc < 0)
        return rc; /* command ring full: nothing queued, the space stays free */
    if (p->trace_pend)
        trace_send(c, p);
    p->tx_tail += take;
    publish_tail(&c->d->socks[dti__slot(s)], p);
    dti_submit(c);
    return take;
}

/* Writes SEND for n bytes straight into the command ring and publishes it
 * (the caller checked that nothing is staged and the ring has room). Body
 * then stamp, back to back (see dti__cmd_next() in queue.h). */
static inline __attribute__((always_inline)) void put_send(dti_ctx_t *c, dti_sock_t s, uint32_t n, uint32_t bits,
                                                           uint32_t end)
{
    uint32_t next = c->prepared + 1; /* (a local: the atomic stores below make the compiler reload fields) */
    struct dti_cmd *cmd = &c->cmds[c->prepared & c->cmd_mask];
    cmd->user_data = 0;
    cmd->op = DTI_OP_SEND;
    cmd->flags = 0;
    cmd->sock = s;
    cmd->arg0 = n;
    cmd->arg1 = bits;
    cmd->value = 0;
    cmd->offset = end;
    cmd->tag = 0;
    c->prepared = next;
    DTI_STORE(&cmd->stamp, next);
    DTI_STORE_SC(&c->qp->cmd_prod, next);
    c->published = next;
}

/* The common write: a connected socket with room in its send ring and in
 * the command ring, nothing staged. One handle check, one copy, the SEND
 * command written straight into the ring (no staging copy) and published. */
static inline __attribute__((always_inline)) ssize_t send_local(dti_ctx_t *c, dti_sock_t s, const void *buf,
                                                                 size_t len, unsigned flags)
{
    struct dti_attachment *d = c->d;
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock_of(d, s, &slot);
    if (__builtin_expect(!sh, 0))
        return -DTI_E_BAD_HANDLE;
    uint32_t gen = dti__gen(s);
    struct dti_sock_priv *p = &d->priv[slot];
    uint32_t st = DTI_LOAD(&sh->state);
    const uint32_t size = dti__tx_size(d, sh);
    uint32_t used = p->tx_tail - DTI_LOAD(&sh->tx_head);
    const uint32_t not_sending = DTI_STATE_WR_CLOSED | DTI_STATE_RESET | DTI_STATE_FAILED | DTI_STATE_CONNECTING;
    if (__builtin_expect(p->tx_gen != gen || p->tx_busy_gen == gen || p->wr_shut_gen == gen ||
                             (st & not_sending) || !(st & DTI_STATE_CONNECTED) || DTI_LOAD_RELAXED(&sh->error) ||
                             used >= size || len == 0 || c->prepared != c->published ||
                             c->prepared - c->cmd_cons_seen > c->cmd_mask || p->trace_pend,
                         0))
        return send_general(c, s, buf, len, flags);
    uint32_t take = len < size - used ? (uint32_t)len : size - used;
    uint32_t off = (DTI_LOAD_RELAXED(&sh->tx_base) + p->tx_tail) & (size - 1);
    /* As in dti_recv(): large and wrapping copies go the general way. */
    if (__builtin_expect(take > 64 || take > size - off, 0))
        return send_general(c, s, buf, len, flags);
    dti__copy_small(tx_ring(d, slot) + off, buf, take);
    p->tx_tail += take;
    publish_tail(sh, p);
    if (!(flags & DTI_SEND_MORE)) {
        if (DTI_LOAD_SC(&sh->tx_noted))
            return take; /* the SEND queued before, not yet taken, takes these bytes too */
        __atomic_store_n(&sh->tx_noted, 1u, __ATOMIC_RELAXED);
    }
    put_send(c, s, take, send_bits(flags), p->tx_tail);
    if (__builtin_expect(DTI_LOAD_SC(&d->hdr->engine_sleeping), 0))
        return wake_engine(d, take);
    return take;
}

static __attribute__((noinline)) ssize_t send_routed(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len,
                                                     unsigned flags)
{
    c = dti__route_links(c, &s);
    return send_local(c, s, buf, len, flags);
}

/* As dti_recv(): one engine is a leaf. */
ssize_t dti_send(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len, unsigned flags)
{
    if (__builtin_expect(c->n_sub > 1, 0))
        return send_routed(c, s, buf, len, flags);
    return send_local(c, s, buf, len, flags);
}

/* ---- send view (dti.h: the shim inlines the copy; this queues it) ---------------- */

int dti_tx_view(dti_ctx_t *c, dti_sock_t s, struct dti_tx_view *v)
{
    c = dti__route(c, &s);
    struct dti_attachment *d = c->d;
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock_of(d, s, &slot);
    if (!sh || !v)
        return sh ? -EFAULT : -DTI_E_BAD_HANDLE;
    if (!(DTI_LOAD(&sh->state) & DTI_STATE_CONNECTED))
        return -ENOTCONN; /* the ring's base is fixed at connect */
    uint32_t gen = dti__gen(s);
    struct dti_sock_priv *p = tx_side(d, slot, gen);
    p->tx_view_size = dti__tx_size(d, sh);
    if (p->tx_grow_busy_gen == gen)
        tx_grow_settle(d, sh, p, gen); /* taken again after a grow: writes may take the view's way again */
    *v = (struct dti_tx_view){.live_gen = &sh->gen, .state = &sh->state, .error = &sh->error,
                              .head = &sh->tx_head, .tail = &p->tx_tail, .written = &sh->tx_written,
                              .noted = &sh->tx_noted, .shut_gen = &p->wr_shut_gen,
                              .busy_gen = &p->tx_busy_gen, .trace_pend = &p->trace_pend, .ring = tx_ring(d, slot),
                              .size = p->tx_view_size, .base = DTI_LOAD_RELAXED(&sh->tx_base), .gen = gen};
    return 0;
}

_Static_assert(offsetof(struct dti_cmd, op) == DTI_VCMD_OP && offsetof(struct dti_cmd, flags) == DTI_VCMD_OP + 2 && offsetof(struct dti_cmd, sock) == DTI_VCMD_SOCK &&
                   offsetof(struct dti_cmd, arg0) == DTI_VCMD_ARG0 && offsetof(struct dti_cmd, arg1) == DTI_VCMD_ARG1 &&
                   offsetof(struct dti_cmd, offset) == DTI_VCMD_OFFSET &&
                   offsetof(struct dti_cmd, stamp) == DTI_VCMD_STAMP && sizeof(struct dti_cmd) == 64 &&
                   DTI_VCMD_SEND_TAIL == DTI_SEND_TAIL,
               "dti_view.h's SEND words are dti_abi.h's");
_Static_assert(offsetof(struct dti_ctx, cmd_cons_seen) == offsetof(struct dti_ctx, prepared) + 4 &&
                   offsetof(struct dti_ctx, published) == offsetof(struct dti_ctx, prepared) + 8,
               "struct dti_note_view's idx: prepared, cmd_cons_seen, published");

int dti_note_view(dti_ctx_t *c, struct dti_note_view *q)
{
    /* several engines: a triple that never matches (prepared != published) */
    static uint32_t never[3] = {0, 0, 1};
    if (!c || !q)
        return -EFAULT;
    *q = (struct dti_note_view){.idx = c->n_sub > 1 ? never : &c->prepared, .cmds = (uint8_t *)c->cmds,
                                .cmd_prod = &c->qp->cmd_prod, .engine_sleeping = &c->d->hdr->engine_sleeping,
                                .mask = c->cmd_mask};
    return 0;
}

static __attribute__((noinline)) int note_wake(struct dti_attachment *d);

void dti_note_doorbell(dti_ctx_t *c)
{
    note_wake(c->d);
}

/* No handle check: the view checked the slot's generation, and the engine
 * checks every command it takes (a forged SEND fails there, not here).
 * Advances the tail by n (0: already advanced by the view), publishes it and
 * queues SEND with DTI_SEND_TAIL, tx_noted set. */
static inline __attribute__((always_inline)) void note_publish(dti_ctx_t *c, dti_sock_t s, uint32_t n,
                                                               uint32_t *end)
{
    struct dti_attachment *d = c->d;
    const uint32_t slot = dti__slot(s);
    struct dti_sock_priv *p = &d->priv[slot];
    struct dti_sock_shared *sh = &d->socks[slot];
    const uint32_t tail = p->tx_tail + n; /* (a local: the atomic store would make the compiler reload it) */
    p->tx_tail = tail;
    DTI_STORE_SC(&sh->tx_written, tail); /* publish_tail() */
    __atomic_store_n(&sh->tx_noted, 1u, __ATOMIC_RELAXED);
    *end = tail;
}

/* Everything but the common case: several engines (the handle names the
 * engine), commands staged (they go first), or no room seen in the ring. */
static __attribute__((noinline, cold)) int note_rest(dti_ctx_t *c, dti_sock_t s, uint32_t n)
{
    if (c->n_sub > 1) {
        dti_ctx_t *q = dti__route_links(c, &s);
        if (q == c)
            return -EAGAIN; /* not a handle of any engine: dti_send() reports it */
        c = q;
    }
    if (c->prepared != c->published || c->prepared - c->cmd_cons_seen > c->cmd_mask) {
        if (!dti__ring_has_room(c))
            return -EAGAIN;
    }
    uint32_t end;
    note_publish(c, s, n, &end);
    struct dti_sock_priv *p = &c->d->priv[dti__slot(s)];
    if (c->prepared != c->published) {
        int rc = dti__prep_send(c, s, n ? n : 1, DTI_SEND_TAIL, end);
        if (rc == 0) {
            if (p->trace_pend)
                trace_send(c, p);
            dti_submit(c);
        }
        return rc; /* (room was seen above: 0) */
    }
    if (p->trace_pend) /* put_send() leaves the stamps' words alone */
        trace_into(&c->cmds[c->prepared & c->cmd_mask], p);
    put_send(c, s, n ? n : 1, DTI_SEND_TAIL, end);
    if (__builtin_expect(DTI_LOAD_SC(&c->d->hdr->engine_sleeping), 0))
        wake_engine(c->d, n);
    return 0;
}

/* The engine sleeps after a noted SEND: its doorbell (as wake_engine(), the
 * system call made here: under load the engine sleeps before many of a
 * request/response program's sends, and a second call costs each of them);
 * the note succeeded. */
static __attribute__((noinline)) int note_wake(struct dti_attachment *d)
{
    static const uint64_t one = 1;
    (void)dti_raw_syscall6(SYS_write, d->doorbell_fd, (long)&one, sizeof one, 0, 0, 0);
    return 0;
}

/* The common case first: one engine, nothing staged, room seen, n > 0 (a
 * request/response program's every send comes here: issue 13's send1).
 * Nothing is live across a call, and the SEND's words are written before the
 * first atomic store so nothing is loaded twice. Of the entry only what the
 * engine reads for SEND is written (op, sock, arg0, arg1, offset, then the
 * stamp): user_data, flags, value and tag mean nothing in a SEND
 * (dti/engine/decoder.h) and may hold an earlier command's. Ordering: the
 * body and tx_written before the stamp (release) and cmd_prod, as
 * put_send(). */
int dti_send_note(dti_ctx_t *c, dti_sock_t s, uint32_t n)
{
    const uint32_t prepared = c->prepared;
    if (__builtin_expect(c->n_sub > 1 || n == 0 || prepared != c->published ||
                             prepared - c->cmd_cons_seen > c->cmd_mask,
                         0))
        return note_rest(c, s, n);
    struct dti_attachment *d = c->d;
    const uint32_t slot = dti__slot(s);
    struct dti_sock_priv *p = &d->priv[slot];
    /* A sampled request's reply (the read stamped it, or the shim's receive
     * view left the traced read to dti_recv()): note_rest() writes the
     * stamps into its SEND. A tail call, so the common case keeps no value
     * across a call (a call here made every send1 save registers: +5). */
    if (__builtin_expect(p->trace_pend, 0))
        return note_rest(c, s, n);
    struct dti_sock_shared *sh = &d->socks[slot];
    struct dti_cmd *cmd = &c->cmds[prepared & c->cmd_mask];
    const uint32_t tail = p->tx_tail + n, next = prepared + 1;
    cmd->op = DTI_OP_SEND;
    cmd->sock = s;
    cmd->arg0 = n;
    cmd->arg1 = DTI_SEND_TAIL;
    cmd->offset = tail;
    p->tx_tail = tail;
    c->prepared = next;
    c->published = next;
    DTI_STORE_SC(&sh->tx_written, tail); /* publish_tail() */
    __atomic_store_n(&sh->tx_noted, 1u, __ATOMIC_RELAXED);
    DTI_STORE(&cmd->stamp, next);
    DTI_STORE_SC(&c->qp->cmd_prod, next);
    if (__builtin_expect(DTI_LOAD_SC(&d->hdr->engine_sleeping), 0))
        return note_wake(d);
    return 0;
}
