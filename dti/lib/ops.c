/* libdti layer 4, public calls: preparing commands (dti_prep_*). Each routes
 * its handle to the queue pair of the socket's engine (queue.h) and, on a
 * listener group or a moved socket, goes through the routing layer
 * (route.h); the producer itself (staging, stamps, submit) is layer 2's
 * (queue.h, qp.c; QUEUES.md). */
#include "api.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

int dti_prep_nop(dti_ctx_t *c, uint64_t ud)
{
    struct dti_cmd *cmd;
    int rc = dti__cmd_prep(c, DTI_OP_NOP, DTI_SOCK_INVALID, ud, &cmd);
    if (rc == 0)
        dti__cmd_commit(c);
    return rc;
}

int dti_prep_socket(dti_ctx_t *c, uint64_t ud)
{
    /* Several engines: a context spreads its new sockets over them (where a
     * connection lives does not matter to the wire: each engine picks local
     * ports whose flows it owns; a listener becomes a group on all). */
    return dti__prep_socket_on(c, c->n_sub > 1 ? c->next_engine++ % c->n_sub : 0, ud);
}

int dti_prep_bind(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *a, uint64_t ud)
{
    return dti__cmd_addr(c, DTI_OP_BIND, s, a, ud);
}

int dti_prep_connect(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *a, uint64_t ud)
{
    if (c->n_sub > 1 && a) {
        int rc = dti__place_for_connect(c, s, a);
        if (rc < 0)
            return rc;
    }
    return dti__cmd_addr(c, DTI_OP_CONNECT, s, a, ud);
}

int dti_prep_listen(dti_ctx_t *c, dti_sock_t s, int backlog, uint64_t ud)
{
    if (c->n_sub > 1)
        return dti__group_listen(c, s, backlog, ud);
    return dti__prep_listen_one(c, s, backlog, ud);
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
    return dti__prep_shutdown_one(c, s, how, ud);
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
    return dti__prep_release_handle(c, op, s, ud);
}

int dti_prep_close(dti_ctx_t *c, dti_sock_t s, uint64_t ud)
{
    return prep_release_handle(c, DTI_OP_CLOSE, s, ud);
}

int dti_prep_abort(dti_ctx_t *c, dti_sock_t s, uint64_t ud)
{
    return prep_release_handle(c, DTI_OP_ABORT, s, ud);
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
    return dti__cmd_args(c, DTI_OP_GETSOCKOPT, s, (uint32_t)opt, 0, 0, ud);
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
    int rc = dti__cmd_prep(c, op, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = len;
        cmd->arg1 = flags;
        cmd->offset = offset;
        dti__cmd_commit(c);
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
 * busy until the completion (engine_moved() in cq.c follows it). */
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
    int rc = dti__cmd_prep(c, DTI_OP_RECV_POST, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = len;
        cmd->arg1 = min;
        cmd->offset = (uint64_t)(uintptr_t)buf;
        dti__cmd_commit(c);
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
    int rc = dti__cmd_prep(c, DTI_OP_DIGEST, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = flags;
        cmd->arg1 = len;
        cmd->offset = (uint32_t)(pos + skip);
        cmd->value = expected;
        dti__cmd_commit(c);
    }
    return rc;
}
