/* libdti commands: preparing and publishing. Reaping, waiting and the
 * blocking layer are in reap.c. */
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

bool dti__ring_has_room(struct dti_ctx *c) { return ring_has_room(c); }

/* SEND of n bytes ending at stream position `end` (arg1: DTI_SEND_TAIL, or
 * DTI_SEND_MORE | DTI_SEND_END; dti_abi.h), staged like dti__prep_data(). */
int dti__prep_send(struct dti_ctx *c, dti_sock_t s, uint32_t n, uint32_t bits, uint32_t end)
{
    if (!ring_has_room(c))
        return -EAGAIN;
    struct dti_cmd *cmd = next_cmd(c);
    cmd->op = DTI_OP_SEND;
    cmd->sock = s;
    cmd->arg0 = n;
    cmd->arg1 = bits;
    cmd->offset = end;
    commit(c);
    return 0;
}

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

/* Posted receive into the caller's memory: the engine writes, the side is
 * busy until the completion (engine_moved() in reap.c follows it). */
int dti_prep_recv_post(dti_ctx_t *c, dti_sock_t s, void *buf, uint32_t len, uint32_t min, uint64_t ud)
{
    c = dti__route(c, &s);
    uint32_t slot;
    if (!buf || len == 0)
        return -EINVAL;
    if (!dti__sock(c->d, s, &slot))
        return -DTI_E_BAD_HANDLE;
    struct dti_sock_priv *p = &c->d->priv[slot];
    if (p->rx_busy_gen == dti__gen(s))
        return -EBUSY;
    struct dti_cmd *cmd;
    int rc = prep(c, DTI_OP_RECV_POST, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = len;
        cmd->arg1 = min;
        cmd->offset = (uint64_t)(uintptr_t)buf;
        commit(c);
        if (p->rx_gen != dti__gen(s)) {
            p->rx_gen = dti__gen(s);
            p->rx_head = 0;
        }
        p->rx_busy_gen = dti__gen(s);
    }
    return rc;
}

/* No completion of its own and no credit: the post's completion answers. */
int dti_prep_recv_cancel(dti_ctx_t *c, dti_sock_t s)
{
    c = dti__route(c, &s);
    if (!dti__sock(c->d, s, NULL))
        return -DTI_E_BAD_HANDLE;
    return dti__prep_data(c, DTI_OP_RECV_CANCEL, s, 0, 0);
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
        if (p->tx_gen != dti__gen(s))
            dti__tx_start(c->d, slot, dti__gen(s));
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
