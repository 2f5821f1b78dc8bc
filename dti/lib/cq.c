/* libdti layer 2, queues (queue.h): the completion and event consumer. Reaping
 * (stamps, QUEUES.md), the stash of entries a blocking caller reaped while
 * waiting for another, waiting for one completion, and the blocking round
 * trip the layers above build on. Calls the rest of layer 2, link and base. */
#include "queue.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The engine moved a ring position on our behalf: follow it. */
static void engine_moved(struct dti_ctx *c, const struct dti_ctx_pending *p, int32_t res)
{
    uint32_t slot = dti__slot(p->sock), gen = dti__gen(p->sock);
    if (slot >= c->d->limits.max_sockets)
        return;
    struct dti_sock_priv *sp = &c->d->priv[slot];
    if ((p->op == DTI_OP_RECV_INTO || p->op == DTI_OP_RECV_POST) && sp->rx_gen == gen) {
        if (res > 0)
            sp->rx_head += (uint32_t)res;
        sp->rx_busy_gen = 0;
    } else if (p->op == DTI_OP_SEND_FROM && sp->tx_gen == gen) {
        if (res > 0)
            sp->tx_tail += (uint32_t)res;
        sp->tx_busy_gen = 0;
    }
}

/* ---- reaping ---------------------------------------------------------------- */

static void release_tag(struct dti_ctx *c, uint32_t tag)
{
    c->pending[tag].used = 0;
    c->free_tags[c->n_free++] = tag;
    c->inflight--;
}

/* Converts one queue entry; false when it is to be dropped. */
static bool decode(struct dti_ctx *c, const struct dti_ev *e, struct dti_cqe *out)
{
    memset(out, 0, sizeof *out);
    out->kind = e->kind;
    out->sock = dti__app_handle(c, e->sock);
    out->res = e->res;
    if (e->kind == DTI_CQE_EVENT) {
        out->events = e->events;
        return true;
    }
    if (e->kind != DTI_CQE_COMPLETION)
        return false;
    uint32_t tag = e->events;
    if (tag > c->cmd_mask || !c->pending[tag].used)
        return false; /* not ours: ignore rather than corrupt our credits */
    struct dti_ctx_pending p = c->pending[tag];
    release_tag(c, tag);
    if (p.op == DTI_OP_RECV_INTO || p.op == DTI_OP_SEND_FROM || p.op == DTI_OP_RECV_POST)
        engine_moved(c, &p, e->res);
    if (p.drop)
        return false;
    out->user_data = p.user_data;
    out->op = p.op;
    out->value = e->value;
    if (p.op == DTI_OP_SOCKET && e->res >= 0)
        out->res = (int32_t)dti__app_handle(c, (dti_sock_t)e->res);
    if (p.op == DTI_OP_ACCEPT && e->res > 0) {
        uint32_t n = (uint32_t)e->res > DTI_ACCEPT_MAX ? DTI_ACCEPT_MAX : (uint32_t)e->res;
        out->res = (int32_t)n;
        for (uint32_t i = 0; i < n; i++)
            out->accepted[i] = dti__app_handle(c, e->accepted[i]);
    }
    if (p.answer)
        return p.answer(c, p.answer_arg, out); /* a layer above answers it (route.h) */
    return true;
}

/* After the engine is gone: every command still in flight completes with the
 * reason, so no caller waits for an answer that will not come. */
static unsigned flush_gone(struct dti_ctx *c, struct dti_cqe *out, unsigned max)
{
    unsigned got = 0;
    int reason = c->d->dead_reason ? c->d->dead_reason : DTI_E_ENGINE_GONE;
    for (uint32_t t = 0; t <= c->cmd_mask && got < max; t++) {
        if (!c->pending[t].used)
            continue;
        struct dti_ctx_pending p = c->pending[t];
        release_tag(c, t);
        if (p.drop)
            continue;
        out[got] = (struct dti_cqe){.user_data = p.user_data, .res = -reason, .kind = DTI_CQE_COMPLETION,
                                    .op = p.op, .sock = dti__app_handle(c, p.sock)};
        if (!p.answer || p.answer(c, p.answer_arg, &out[got]))
            got++;
    }
    return got;
}

static unsigned reap_ring(struct dti_ctx *c, struct dti_cqe *out, unsigned max)
{
    unsigned got = 0;
    uint32_t ovf = DTI_LOAD(&c->qp->ev_overflow);
    if (ovf != c->overflow_seen && max > 0) {
        c->overflow_seen = ovf;
        out[got++] = (struct dti_cqe){.kind = DTI_CQE_RESCAN, .sock = DTI_SOCK_INVALID};
    }
    uint32_t cons = c->ev_cons;
    /* At most one ring's worth per call, whatever the stamps say. */
    for (uint32_t k = 0; k <= c->ev_mask && got < max; k++) {
        struct dti_ev *slot = &c->evs[cons & c->ev_mask];
        if (DTI_LOAD(&slot->stamp) != (uint16_t)(cons + 1))
            break;
        struct dti_ev e;
        memcpy(&e, slot, offsetof(struct dti_ev, stamp));
        memcpy((char *)&e + offsetof(struct dti_ev, sock), (char *)slot + offsetof(struct dti_ev, sock),
               sizeof e - offsetof(struct dti_ev, sock));
        cons++;
        if (decode(c, &e, &out[got]))
            got++;
    }
    if (cons != c->ev_cons) {
        c->ev_cons = cons;
        DTI_STORE(&c->qp->ev_cons, cons);
    }
    return got;
}

static unsigned take_stash(struct dti_ctx *c, struct dti_cqe *out, unsigned max)
{
    unsigned got = 0;
    if (c->stash_rescan && max > 0) {
        c->stash_rescan = false;
        out[got++] = (struct dti_cqe){.kind = DTI_CQE_RESCAN, .sock = DTI_SOCK_INVALID};
    }
    while (c->stash_len > 0 && got < max) {
        out[got++] = c->stash[c->stash_head];
        c->stash_head = (c->stash_head + 1) % c->stash_cap;
        c->stash_len--;
    }
    return got;
}

/* Every queue pair of context c, the first one looked at turning round so
 * that one busy engine does not starve the others. */
static unsigned reap_rings(struct dti_ctx *c, struct dti_cqe *out, unsigned max)
{
    if (c->n_sub <= 1)
        return reap_ring(c, out, max);
    unsigned got = 0;
    uint32_t first = c->reap_next++ % c->n_sub;
    for (uint32_t i = 0; i < c->n_sub && got < max; i++)
        got += reap_ring(c->sub[(first + i) % c->n_sub], out + got, max - got);
    return got;
}

/* Sub-contexts stash what blocking calls made on them reaped meanwhile. */
static unsigned take_stashes(struct dti_ctx *c, struct dti_cqe *out, unsigned max)
{
    unsigned got = 0;
    for (uint32_t i = 0; i < n_qps(c) && got < max; i++)
        got += take_stash(qp_of(c, i), out + got, max - got);
    return got;
}

/* Once any engine is gone, commands in flight on every queue pair complete
 * with its reason: the PPE is gone for this application. */
static unsigned flush_all_gone(struct dti_ctx *c, struct dti_cqe *out, unsigned max)
{
    unsigned got = 0;
    for (uint32_t i = 0; i < n_qps(c) && got < max; i++) {
        struct dti_ctx *q = qp_of(c, i);
        if (!q->d->dead) {
            q->d->dead_reason = dti__dead_reason(c);
            q->d->dead = true;
        }
        got += flush_gone(q, out + got, max - got);
    }
    return got;
}

/* Nothing to reap: the engine may have gone. The region's state word is
 * free to read; the control socket is polled at most every 10 ms, the clock
 * read every 64 empty reaps. */
static unsigned reap_idle(struct dti_ctx *c, struct dti_cqe *out, unsigned max)
{
    bool syscall_ok = false;
    if ((++c->empty_reaps & 63) == 0) {
        uint64_t now = dti__now_ns();
        syscall_ok = now - c->last_alive_check_ns > 10000000ull;
        if (syscall_ok)
            c->last_alive_check_ns = now;
    }
    bool alive = true;
    for (uint32_t i = 0; i < n_qps(c); i++)
        alive &= dti__check_alive(qp_of(c, i)->d, syscall_ok);
    return alive ? 0 : flush_all_gone(c, out, max);
}

static inline __attribute__((always_inline)) bool qp_has_entries(const struct dti_ctx *c)
{
    return c->stash_len || c->stash_rescan ||
           DTI_LOAD(&c->evs[c->ev_cons & c->ev_mask].stamp) == (uint16_t)(c->ev_cons + 1) ||
           DTI_LOAD_RELAXED(&c->qp->ev_overflow) != c->overflow_seen;
}

int dti_cq_ready(const dti_ctx_t *c)
{
    if (__builtin_expect(c->n_sub == 0, 1))
        return qp_has_entries(c); /* one engine: asked on every poll/epoll look */
    for (uint32_t i = 0; i < n_qps(c); i++)
        if (qp_has_entries(c->n_sub ? c->sub[i] : c))
            return 1;
    return 0;
}

unsigned dti_reap(dti_ctx_t *c, struct dti_cqe *out, unsigned max)
{
    /* The common answer to a poll, on one engine: nothing stashed, the next
     * event slot not stamped, no events lost. */
    if (c->n_sub <= 1 && !qp_has_entries(c))
        return reap_idle(c, out, max);
    unsigned got = take_stashes(c, out, max);
    got += reap_rings(c, out + got, max - got);
    return got ? got : reap_idle(c, out, max);
}

void dti__stash_push(struct dti_ctx *c, const struct dti_cqe *e)
{
    if (c->stash_len == c->stash_cap) {
        /* Full only of events (completions are bounded by credits): events
         * are hints over state kept in the socket table, so ask for a rescan. */
        c->stash_rescan = true;
        return;
    }
    if (e->kind == DTI_CQE_EVENT && c->stash_len >= c->stash_cap - (c->cmd_mask + 1)) {
        c->stash_rescan = true;
        return;
    }
    c->stash[(c->stash_head + c->stash_len) % c->stash_cap] = *e;
    c->stash_len++;
}

/* Entries the sub-contexts stashed (blocking calls made on them directly). */
static unsigned take_sub_stashes(struct dti_ctx *c, struct dti_cqe *out, unsigned max)
{
    unsigned got = 0;
    for (uint32_t i = 1; i < c->n_sub && got < max; i++)
        got += take_stash(c->sub[i], out + got, max - got);
    return got;
}

static bool stash_find(struct dti_ctx *c, uint64_t ud, struct dti_cqe *out)
{
    for (uint32_t i = 0; i < c->stash_len; i++) {
        uint32_t at = (c->stash_head + i) % c->stash_cap;
        if (c->stash[at].kind == DTI_CQE_COMPLETION && c->stash[at].user_data == ud) {
            *out = c->stash[at];
            /* close the gap, keeping order */
            for (uint32_t j = i; j + 1 < c->stash_len; j++)
                c->stash[(c->stash_head + j) % c->stash_cap] = c->stash[(c->stash_head + j + 1) % c->stash_cap];
            c->stash_len--;
            return true;
        }
    }
    return false;
}

int dti_wait_cqe(dti_ctx_t *c, uint64_t ud, struct dti_cqe *out, int timeout_ms)
{
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : dti__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        if (stash_find(c, ud, out))
            return 1;
        /* Pull everything from the ring into the stash, then look again. */
        struct dti_cqe buf[16];
        unsigned n;
        bool found = false;
        while ((n = take_sub_stashes(c, buf, 16)) > 0 || (n = reap_rings(c, buf, 16)) > 0 ||
               (!dti__all_alive(c, false) && (n = flush_all_gone(c, buf, 16)) > 0)) {
            for (unsigned i = 0; i < n; i++) {
                if (!found && buf[i].kind == DTI_CQE_COMPLETION && buf[i].user_data == ud) {
                    *out = buf[i];
                    found = true;
                } else if (buf[i].kind == DTI_CQE_RESCAN) {
                    c->stash_rescan = true;
                } else {
                    dti__stash_push(c, &buf[i]);
                }
            }
        }
        if (found)
            return 1;
        if (!dti__all_alive(c, false))
            return -dti__dead_reason(c);
        uint64_t now = dti__now_ns();
        if (now >= deadline)
            return 0;
        int ms = deadline == UINT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
        int w = dti__wait_ring(c, ms);
        if (w < 0)
            return w;
    }
}

/* Drops the completion of a command the blocking layer gave up on. */
void dti__forget(struct dti_ctx *c, uint64_t ud)
{
    for (uint32_t i = 0; i < n_qps(c); i++) {
        struct dti_ctx *q = qp_of(c, i);
        for (uint32_t t = 0; t <= q->cmd_mask; t++)
            if (q->pending[t].used && q->pending[t].user_data == ud)
                q->pending[t].drop = 1;
    }
}

/* Submits what `rc` prepared and waits for it. Returns the completion's
 * result (value/accepted in *out when asked). */
int dti__run_sync(dti_ctx_t *c, int rc, uint64_t ud, struct dti_cqe *out, int timeout_ms)
{
    if (rc < 0)
        return rc;
    dti_submit(c);
    struct dti_cqe tmp;
    if (!out)
        out = &tmp;
    int w = dti_wait_cqe(c, ud, out, timeout_ms);
    if (w == 1)
        return out->res;
    if (w == 0) {
        dti__forget(c, ud);
        return -ETIMEDOUT;
    }
    return w;
}

/* Credits or ring slots exhausted: publish, then pull finished entries into
 * the stash (that frees credits). Fails when the engine is gone. */
int dti__make_room(dti_ctx_t *c)
{
    dti_submit(c);
    struct dti_cqe buf[16];
    unsigned n = reap_rings(c, buf, 16);
    for (unsigned i = 0; i < n; i++)
        dti__stash_push(c, &buf[i]);
    if (n == 0 && dti__wait_ring(c, 1) < 0)
        return -1;
    return dti__all_alive(c, false) ? 0 : -1;
}

static uint64_t next_ud(dti_ctx_t *c) { return DTI_UD_INTERNAL | ++c->internal_seq; }
uint64_t dti__next_ud(dti_ctx_t *c) { return next_ud(c); }

int dti__run_blocking(dti_ctx_t *c, dti__prep_fn prep, dti_sock_t s, uint32_t a0, int64_t v)
{
    uint64_t ud = next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, prep(c, s, a0, v, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti__run_blocking_cqe(dti_ctx_t *c, dti__prep_fn prep, dti_sock_t s, uint32_t a0, int64_t v,
                          struct dti_cqe *out)
{
    uint64_t ud = next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, prep(c, s, a0, v, ud));
    return dti__run_sync(c, prc, ud, out, -1);
}

unsigned dti__reap_rings(struct dti_ctx *c, struct dti_cqe *out, unsigned max) { return reap_rings(c, out, max); }
