/* libdti commands: preparing, publishing, reaping, and the blocking layer. */
#include "internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

int dti__ctx_init_queues(struct dti_ctx *c)
{
    uint32_t n = c->d->hdr->cmdq_entries;
    c->cmd_mask = n - 1;
    c->ev_mask = c->d->hdr->evq_entries - 1;
    /* The engine may have left indices from a previous user of this queue
     * pair; it resets them before handing it out, so start from its values. */
    c->prepared = c->published = DTI_LOAD(&c->qp->cmd_prod);
    c->cmd_cons_seen = DTI_LOAD(&c->qp->cmd_cons);
    c->ev_cons = DTI_LOAD(&c->qp->ev_cons);
    c->overflow_seen = DTI_LOAD(&c->qp->ev_overflow);
    c->pending = calloc(n, sizeof *c->pending);
    c->free_tags = calloc(n, sizeof *c->free_tags);
    c->stash_cap = n + 64;
    c->stash = calloc(c->stash_cap, sizeof *c->stash);
    c->watch = calloc(c->d->limits.max_sockets, sizeof *c->watch);
    c->staging = calloc(n, sizeof *c->staging);
    if (!c->pending || !c->free_tags || !c->stash || !c->watch || !c->staging)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        c->free_tags[i] = n - 1 - i;
    c->n_free = n;
    return 0;
}

void dti__ctx_free_queues(struct dti_ctx *c)
{
    free(c->pending);
    free(c->free_tags);
    free(c->stash);
    free(c->watch);
    free(c->staging);
}

unsigned dti_inflight(const dti_ctx_t *c)
{
    if (c->n_sub == 0)
        return c->inflight;
    unsigned n = 0;
    for (uint32_t i = 0; i < c->n_sub; i++)
        n += c->sub[i]->inflight;
    return n;
}



/* Room for one more command in the ring (data-path commands need only this). */
static bool ring_has_room(struct dti_ctx *c)
{
    /* The engine's consumer index lives on its own cache line; reading it
     * costs a transfer, so trust the last value until it says "full". */
    if (c->prepared - c->cmd_cons_seen < c->cmd_mask + 1)
        return true;
    c->cmd_cons_seen = DTI_LOAD(&c->qp->cmd_cons);
    return c->prepared - c->cmd_cons_seen < c->cmd_mask + 1;
}

/* Commands are built in private memory and copied into the ring at submit,
 * body then stamp back to back: the engine polls that very slot, and a body
 * written long before its stamp would make the line cross twice. */
static struct dti_cmd *next_cmd(struct dti_ctx *c)
{
    struct dti_cmd *cmd = &c->staging[c->prepared & c->cmd_mask];
    memset(cmd, 0, sizeof *cmd);
    return cmd;
}

/* Reserves a slot and a credit for a command that will complete. */
static int prep(struct dti_ctx *c, uint16_t op, dti_sock_t s, uint64_t ud, struct dti_cmd **out)
{
    if (!dti__check_alive(c->d, false))
        return -c->d->dead_reason;
    if (c->n_free == 0 || !ring_has_room(c))
        return -EAGAIN;
    /* Owed releases go first: the engine acts on this command (watch, close,
     * shutdown, posted receive) knowing what the application consumed. */
    if (s != DTI_SOCK_INVALID && dti__slot(s) < c->d->limits.max_sockets &&
        (dti__flush_release(c, s) < 0 || !ring_has_room(c)))
        return -EAGAIN;
    uint32_t tag = c->free_tags[--c->n_free];
    c->pending[tag] = (struct dti_ctx_pending){ud, s, op, 1, 0, c->prep_group};
    c->inflight++;
    struct dti_cmd *cmd = next_cmd(c);
    cmd->user_data = ud;
    cmd->op = op;
    cmd->sock = s;
    cmd->tag = tag;
    *out = cmd;
    return 0;
}

static void commit(struct dti_ctx *c) { c->prepared++; }

int dti__prep_data(struct dti_ctx *c, uint16_t op, dti_sock_t s, uint32_t n, uint32_t flags)
{
    if (!ring_has_room(c))
        return -EAGAIN;
    struct dti_cmd *cmd = next_cmd(c);
    cmd->op = op;
    cmd->sock = s;
    cmd->arg0 = n;
    cmd->arg1 = flags;
    commit(c);
    return 0;
}

static int submit_one(struct dti_ctx *c);

int dti_submit(dti_ctx_t *c)
{
    if (c->n_sub <= 1)
        return submit_one(c);
    int n = 0;
    for (uint32_t i = 0; i < c->n_sub; i++)
        n += submit_one(c->sub[i]);
    return n;
}

static int submit_one(struct dti_ctx *c)
{
    uint32_t n = c->prepared - c->published;
    if (n == 0)
        return 0;
    for (uint32_t i = c->published; i != c->prepared; i++) {
        struct dti_cmd *slot = &c->cmds[i & c->cmd_mask];
        memcpy(slot, &c->staging[i & c->cmd_mask], offsetof(struct dti_cmd, stamp));
        DTI_STORE(&slot->stamp, i + 1);
    }
    DTI_STORE_SC(&c->qp->cmd_prod, c->prepared);
    c->published = c->prepared;
    dti__ring_doorbell(c->d);
    return (int)n;
}

int dti_prep_nop(dti_ctx_t *c, uint64_t ud)
{
    struct dti_cmd *cmd;
    int rc = prep(c, DTI_OP_NOP, DTI_SOCK_INVALID, ud, &cmd);
    if (rc == 0)
        commit(c);
    return rc;
}

int dti_prep_socket(dti_ctx_t *c, uint64_t ud)
{
    /* Several engines: a context spreads its new sockets over them (where a
     * connection lives does not matter to the wire: each engine picks local
     * ports whose flows it owns; a listener becomes a group on all). */
    return dti__prep_socket_on(c, c->n_sub > 1 ? c->next_engine++ % c->n_sub : 0, ud);
}

int dti__prep_socket_on(dti_ctx_t *c, uint32_t engine, uint64_t ud)
{
    if (c->n_sub > 1)
        c = c->sub[engine % c->n_sub];
    struct dti_cmd *cmd;
    int rc = prep(c, DTI_OP_SOCKET, DTI_SOCK_INVALID, ud, &cmd);
    if (rc == 0)
        commit(c);
    return rc;
}

static int prep_addr(dti_ctx_t *c, uint16_t op, dti_sock_t s, const struct dti_addr *a, uint64_t ud)
{
    if (!a)
        return -EFAULT;
    c = dti__route(c, &s);
    struct dti_cmd *cmd;
    int rc = prep(c, op, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = a->ip;
        cmd->arg1 = a->port;
        commit(c);
    }
    return rc;
}

int dti_prep_bind(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *a, uint64_t ud)
{
    return prep_addr(c, DTI_OP_BIND, s, a, ud);
}

int dti_prep_connect(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *a, uint64_t ud)
{
    if (c->n_sub > 1 && a) {
        int rc = dti__place_for_connect(c, s, a);
        if (rc < 0)
            return rc;
    }
    return prep_addr(c, DTI_OP_CONNECT, s, a, ud);
}

static int prep_args(dti_ctx_t *c, uint16_t op, dti_sock_t s, uint32_t a0, uint32_t a1, int64_t v,
                     uint64_t ud)
{
    c = dti__route(c, &s);
    struct dti_cmd *cmd;
    int rc = prep(c, op, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = a0;
        cmd->arg1 = a1;
        cmd->value = v;
        commit(c);
    }
    return rc;
}

int dti__prep_listen_one(dti_ctx_t *c, dti_sock_t s, int backlog, uint64_t ud)
{
    return prep_args(c, DTI_OP_LISTEN, s, backlog < 0 ? 0u : (uint32_t)backlog, 0, 0, ud);
}

int dti_prep_listen(dti_ctx_t *c, dti_sock_t s, int backlog, uint64_t ud)
{
    if (c->n_sub > 1)
        return dti__group_listen(c, s, backlog, ud);
    return dti__prep_listen_one(c, s, backlog, ud);
}

int dti__prep_accept_one(dti_ctx_t *c, dti_sock_t s, unsigned max, unsigned flags, uint64_t ud)
{
    if (max == 0 || max > DTI_ACCEPT_MAX)
        return -EINVAL;
    return prep_args(c, DTI_OP_ACCEPT, s, max, flags, 0, ud);
}

int dti_prep_accept(dti_ctx_t *c, dti_sock_t s, unsigned max, unsigned flags, uint64_t ud)
{
    struct dti_group *g = dti__group_find(c, s);
    if (g)
        return dti__group_accept(c, g, max, flags, ud);
    return dti__prep_accept_one(c, s, max, flags, ud);
}

int dti_prep_shutdown(dti_ctx_t *c, dti_sock_t s, int how, uint64_t ud)
{
    if (how != DTI_SHUT_RD && how != DTI_SHUT_WR && how != DTI_SHUT_RDWR)
        return -EINVAL;
    struct dti_group *g = dti__group_find(c, s);
    if (g) {
        int grc = dti__group_each(c, g, DTI_OP_SHUTDOWN, (uint32_t)how, 0);
        if (grc < 0)
            return grc;
    }
    c = dti__route(c, &s);
    int rc = prep_args(c, DTI_OP_SHUTDOWN, s, (uint32_t)how, 0, 0, ud);
    if (rc == 0 && how != DTI_SHUT_RD && dti__sock(c->d, s, NULL))
        c->d->priv[dti__slot(s)].wr_shut_gen = dti__gen(s);
    return rc;
}

int dti__prep_release_one(dti_ctx_t *c, uint16_t op, dti_sock_t s, uint64_t ud)
{
    dti_ctx_t *app_ctx = c;
    dti_sock_t app = s;
    bool moved = c->n_sub > 1 && dti__is_moved(c, app);
    c = dti__route(c, &s); /* follows a move */
    int rc = prep_args(c, op, s, 0, 0, 0, ud);
    if (rc == 0 && dti__sock(c->d, s, NULL))
        c->d->closed_gen[dti__slot(s)] = dti__gen(s);
    if (rc == 0 && moved) {
        /* the socket left where the handle was made goes too (its
         * completion is not the caller's); a full queue leaves it to detach */
        dti__forget_move(app_ctx, app);
        dti_sock_t left = app;
        struct dti_ctx *q = dti__route(app_ctx, &left);
        uint64_t iud = dti__next_ud(app_ctx);
        if (prep_args(q, DTI_OP_CLOSE, left, 0, 0, 0, iud) == 0) {
            dti__forget(app_ctx, iud);
            if (dti__sock(q->d, left, NULL))
                q->d->closed_gen[dti__slot(left)] = dti__gen(left);
        }
    }
    return rc;
}

/* Closing a listener group closes its siblings first (the application's
 * handle goes last, with the caller's user_data). */
static int prep_release_handle(dti_ctx_t *c, uint16_t op, dti_sock_t s, uint64_t ud)
{
    struct dti_group *g = dti__group_find(c, s);
    if (g) {
        int rc = dti__group_drop(c, g, op);
        if (rc < 0)
            return rc;
    }
    return dti__prep_release_one(c, op, s, ud);
}

int dti_prep_close(dti_ctx_t *c, dti_sock_t s, uint64_t ud)
{
    return prep_release_handle(c, DTI_OP_CLOSE, s, ud);
}

int dti_prep_abort(dti_ctx_t *c, dti_sock_t s, uint64_t ud)
{
    return prep_release_handle(c, DTI_OP_ABORT, s, ud);
}

int dti__prep_setsockopt_one(dti_ctx_t *c, dti_sock_t s, int opt, int64_t value, uint64_t ud)
{
    return prep_args(c, DTI_OP_SETSOCKOPT, s, (uint32_t)opt, 0, value, ud);
}

int dti_prep_setsockopt(dti_ctx_t *c, dti_sock_t s, int opt, int64_t value, uint64_t ud)
{
    struct dti_group *g = dti__group_find(c, s);
    if (g) {
        int rc = dti__group_each(c, g, DTI_OP_SETSOCKOPT, (uint32_t)opt, value);
        if (rc < 0)
            return rc;
    }
    return dti__prep_setsockopt_one(c, s, opt, value, ud);
}

int dti_prep_getsockopt(dti_ctx_t *c, dti_sock_t s, int opt, uint64_t ud)
{
    return prep_args(c, DTI_OP_GETSOCKOPT, s, (uint32_t)opt, 0, 0, ud);
}

int dti__prep_watch_one(dti_ctx_t *c, dti_sock_t s, uint32_t events, uint64_t ud)
{
    c = dti__route(c, &s);
    int rc = prep_args(c, DTI_OP_WATCH, s, events, 0, 0, ud);
    if (rc == 0 && dti__slot(s) < c->d->limits.max_sockets)
        c->watch[dti__slot(s)] = events;
    return rc;
}

/* A listener group is watched on every engine: a connection that comes to
 * any of them wakes the watcher, reported as the group's own handle. */
int dti_prep_watch(dti_ctx_t *c, dti_sock_t s, uint32_t events, uint64_t ud)
{
    struct dti_group *g = dti__group_find(c, s);
    if (g) {
        int rc = dti__group_each(c, g, DTI_OP_WATCH, events, 0);
        if (rc < 0)
            return rc;
    }
    return dti__prep_watch_one(c, s, events, ud);
}

static int prep_buf(dti_ctx_t *c, uint16_t op, dti_sock_t s, const struct dti_buf *b, uint32_t len,
                    unsigned flags, uint64_t ud)
{
    if (!b || len > b->len)
        return -EINVAL;
    uint64_t offset = dti__buf_offset(c->d, b);
    if (offset == UINT64_MAX)
        return -EXDEV; /* a buffer of another engine's region: dti_buf_alloc_for() */
    struct dti_cmd *cmd;
    int rc = prep(c, op, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = len;
        cmd->arg1 = flags;
        cmd->offset = offset;
        commit(c);
    }
    return rc;
}

/* While a posted receive or a region-buffer send is in flight, the engine
 * moves that side's ring position itself; the app learns by how much from
 * the completion. Until then the side is busy for in-place calls. */
int dti_prep_recv_into(dti_ctx_t *c, dti_sock_t s, const struct dti_buf *b, uint64_t ud)
{
    c = dti__route(c, &s);
    uint32_t slot;
    if (!dti__sock(c->d, s, &slot))
        return -DTI_E_BAD_HANDLE;
    struct dti_sock_priv *p = &c->d->priv[slot];
    if (p->rx_busy_gen == dti__gen(s))
        return -EBUSY;
    int rc = prep_buf(c, DTI_OP_RECV_INTO, s, b, b ? b->len : 0, 0, ud);
    if (rc == 0) {
        if (p->rx_gen != dti__gen(s)) {
            p->rx_gen = dti__gen(s);
            p->rx_head = 0;
        }
        p->rx_busy_gen = dti__gen(s);
    }
    return rc;
}

int dti_prep_send_from(dti_ctx_t *c, dti_sock_t s, const struct dti_buf *b, uint32_t len, unsigned flags,
                       uint64_t ud)
{
    c = dti__route(c, &s);
    uint32_t slot;
    if (!dti__sock(c->d, s, &slot))
        return -DTI_E_BAD_HANDLE;
    struct dti_sock_priv *p = &c->d->priv[slot];
    if (p->tx_busy_gen == dti__gen(s))
        return -EBUSY;
    int rc = prep_buf(c, DTI_OP_SEND_FROM, s, b, len, flags, ud);
    if (rc == 0) {
        if (p->tx_gen != dti__gen(s)) {
            p->tx_gen = dti__gen(s);
            p->tx_tail = 0;
        }
        p->tx_busy_gen = dti__gen(s);
    }
    return rc;
}

/* Digest range: the wire carries the start as an absolute position of the
 * direction's free-running counter (the one rx_head / tx_tail count in), so
 * the engine needs no idea of where the application is. */
int dti_prep_digest(dti_ctx_t *c, dti_sock_t s, unsigned flags, uint32_t skip, uint32_t len,
                    uint32_t expected, uint64_t ud)
{
    c = dti__route(c, &s);
    uint32_t slot;
    if (flags & ~(DTI_DIGEST_TX | DTI_DIGEST_CHECK | DTI_DIGEST_CHAIN))
        return -EINVAL;
    if (len == 0 || len > (1u << 31))
        return -EINVAL;
    if (!dti__sock(c->d, s, &slot))
        return -DTI_E_BAD_HANDLE;
    const struct dti_sock_priv *p = &c->d->priv[slot];
    uint32_t gen = dti__gen(s);
    uint32_t pos = (flags & DTI_DIGEST_TX) ? (p->tx_gen == gen ? p->tx_tail : 0)
                                           : (p->rx_gen == gen ? p->rx_head : 0);
    struct dti_cmd *cmd;
    int rc = prep(c, DTI_OP_DIGEST, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = flags;
        cmd->arg1 = len;
        cmd->offset = (uint32_t)(pos + skip);
        cmd->value = expected;
        commit(c);
    }
    return rc;
}

/* The engine moved a ring position on our behalf: follow it. */
static void engine_moved(struct dti_ctx *c, const struct dti_ctx_pending *p, int32_t res)
{
    uint32_t slot = dti__slot(p->sock), gen = dti__gen(p->sock);
    if (slot >= c->d->limits.max_sockets)
        return;
    struct dti_sock_priv *sp = &c->d->priv[slot];
    if (p->op == DTI_OP_RECV_INTO && sp->rx_gen == gen) {
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
    if (p.op == DTI_OP_RECV_INTO || p.op == DTI_OP_SEND_FROM)
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
    if (p.group)
        return dti__group_wait_answer(c, p.group, out);
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
        if (!p.group || dti__group_wait_answer(c, p.group, &out[got]))
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

static bool qp_has_entries(const struct dti_ctx *c)
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
static int run_sync(dti_ctx_t *c, int rc, uint64_t ud, struct dti_cqe *out, int timeout_ms)
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
static int make_room(dti_ctx_t *c)
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

/* Runs `call` (a dti_prep_*) until it gets a slot; bounded. */
#define SYNC_PREP(rc, c, call)                                                                      \
    do {                                                                                            \
        for (int tries_ = 0;; tries_++) {                                                           \
            (rc) = (call);                                                                          \
            if ((rc) != -EAGAIN || tries_ > 10000 || make_room(c) < 0)                              \
                break;                                                                              \
        }                                                                                           \
    } while (0)

static uint64_t next_ud(dti_ctx_t *c) { return DTI_UD_INTERNAL | ++c->internal_seq; }
uint64_t dti__next_ud(dti_ctx_t *c) { return next_ud(c); }

int dti__run_blocking(dti_ctx_t *c, dti__prep_fn prep, dti_sock_t s, uint32_t a0, int64_t v)
{
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, prep(c, s, a0, v, ud));
    return run_sync(c, prc, ud, NULL, -1);
}

int dti_socket(dti_ctx_t *c)
{
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, dti_prep_socket(c, ud));
    return run_sync(c, prc, ud, NULL, -1);
}

int dti_bind(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *a)
{
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, dti_prep_bind(c, s, a, ud));
    return run_sync(c, prc, ud, NULL, -1);
}

int dti_listen(dti_ctx_t *c, dti_sock_t s, int backlog)
{
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, dti_prep_listen(c, s, backlog, ud));
    return run_sync(c, prc, ud, NULL, -1);
}

static int wait_ready(dti_ctx_t *c, dti_sock_t s, uint32_t mask, uint64_t deadline);
static uint64_t deadline_of(int timeout_ms);

/* Takes one connection without leaving a waiting accept behind in the
 * engine: non-waiting accepts, sleeping on the listener's POLLIN between
 * them. Several threads may block in dti_accept() on one listener. */
int dti_accept(dti_ctx_t *c, dti_sock_t l, struct dti_addr *peer, int timeout_ms)
{
    uint64_t deadline = deadline_of(timeout_ms);
    for (;;) {
        uint64_t ud = next_ud(c);
        struct dti_cqe e;
        int prc;
        SYNC_PREP(prc, c, dti_prep_accept(c, l, 1, 0, ud));
        int rc = run_sync(c, prc, ud, &e, -1);
        if (rc > 0) {
            if (peer)
                dti_getpeername(c, e.accepted[0], peer);
            return (int)e.accepted[0];
        }
        if (rc == 0)
            return -DTI_E_PROTOCOL;
        if (rc != -EAGAIN)
            return rc;
        rc = wait_ready(c, l, DTI_POLLIN, deadline);
        if (rc < 0)
            return rc;
    }
}

int dti_connect(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *a, int timeout_ms)
{
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, dti_prep_connect(c, s, a, ud));
    return run_sync(c, prc, ud, NULL, timeout_ms);
}

int dti_shutdown(dti_ctx_t *c, dti_sock_t s, int how)
{
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, dti_prep_shutdown(c, s, how, ud));
    return run_sync(c, prc, ud, NULL, -1);
}

int dti_close(dti_ctx_t *c, dti_sock_t s)
{
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, dti_prep_close(c, s, ud));
    return run_sync(c, prc, ud, NULL, -1);
}

int dti_abort(dti_ctx_t *c, dti_sock_t s)
{
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, dti_prep_abort(c, s, ud));
    return run_sync(c, prc, ud, NULL, -1);
}

int dti_setsockopt(dti_ctx_t *c, dti_sock_t s, int opt, int64_t v)
{
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, dti_prep_setsockopt(c, s, opt, v, ud));
    return run_sync(c, prc, ud, NULL, -1);
}

int dti_getsockopt(dti_ctx_t *c, dti_sock_t s, int opt, int64_t *v)
{
    uint64_t ud = next_ud(c);
    struct dti_cqe e;
    int prc;
    SYNC_PREP(prc, c, dti_prep_getsockopt(c, s, opt, ud));
    int rc = run_sync(c, prc, ud, &e, -1);
    if (rc >= 0 && v)
        *v = e.value;
    return rc < 0 ? rc : 0;
}

int dti_digest(dti_ctx_t *c, dti_sock_t s, unsigned flags, uint32_t skip, uint32_t len, uint32_t expected,
               uint32_t *crc, int timeout_ms)
{
    uint64_t ud = next_ud(c);
    struct dti_cqe e;
    int prc;
    SYNC_PREP(prc, c, dti_prep_digest(c, s, flags, skip, len, expected, ud));
    int rc = run_sync(c, prc, ud, &e, timeout_ms);
    if ((rc == 0 || rc == -EBADMSG) && crc)
        *crc = (uint32_t)e.value;
    return rc;
}

/* Waits until socket s shows one of `mask`, using a watch registration. */
static int wait_ready(dti_ctx_t *c, dti_sock_t s, uint32_t mask, uint64_t deadline)
{
    dti_sock_t local = s;
    struct dti_ctx *q = dti__route(c, &local);
    uint32_t before = dti__slot(local) < q->d->limits.max_sockets ? q->watch[dti__slot(local)] : 0;
    uint64_t ud = next_ud(c);
    int prc;
    SYNC_PREP(prc, c, dti_prep_watch(c, s, before | mask, ud));
    int rc = run_sync(c, prc, ud, NULL, -1);
    if (rc < 0)
        return rc;
    for (;;) {
        uint32_t ev = dti_sock_poll(c, s);
        if (ev & (mask | DTI_POLLERR | DTI_POLLHUP))
            break;
        uint64_t now = dti__now_ns();
        if (now >= deadline) {
            rc = -ETIMEDOUT;
            break;
        }
        int ms = deadline == UINT64_MAX ? -1 : (int)((deadline - now + 999999) / 1000000);
        int w = dti__wait_ring(c, ms);
        if (w < 0) {
            rc = w;
            break;
        }
        /* Move events into the stash so the ring drains; the state itself
         * is read from the socket table above. */
        struct dti_cqe buf[16];
        unsigned n;
        while ((n = reap_rings(c, buf, 16)) > 0)
            for (unsigned i = 0; i < n; i++)
                if (!(buf[i].kind == DTI_CQE_EVENT && buf[i].sock == s))
                    dti__stash_push(c, &buf[i]);
        if (!dti__all_alive(c, false)) {
            rc = -dti__dead_reason(c);
            break;
        }
    }
    uint64_t ud2 = next_ud(c);
    int prc2;
    SYNC_PREP(prc2, c, dti_prep_watch(c, s, before, ud2));
    int rc2 = run_sync(c, prc2, ud2, NULL, -1);
    return rc < 0 ? rc : (rc2 < 0 && rc2 != -DTI_E_BAD_HANDLE ? rc2 : 0);
}

static uint64_t deadline_of(int timeout_ms)
{
    return timeout_ms < 0 ? UINT64_MAX : dti__now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

ssize_t dti_recv_wait(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = deadline_of(timeout_ms);
    for (;;) {
        ssize_t n = dti_recv(c, s, buf, len);
        if (n != -EAGAIN)
            return n;
        int rc = wait_ready(c, s, DTI_POLLIN, deadline);
        if (rc < 0)
            return rc;
    }
}

ssize_t dti_send_all(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = deadline_of(timeout_ms);
    size_t done = 0;
    while (done < len) {
        ssize_t n = dti_send(c, s, (const uint8_t *)buf + done, len - done, 0);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n != -EAGAIN)
            return n;
        int rc = wait_ready(c, s, DTI_POLLOUT, deadline);
        if (rc < 0)
            return rc;
    }
    return (ssize_t)done;
}
