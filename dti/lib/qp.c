/* libdti layer 2, queues (queue.h): a context's queue pairs. Opening and
 * closing one queue pair on one engine, the command producer (the private
 * staging, submit: QUEUES.md), the one-engine commands the layers above
 * compose, and the handle table's lookups (which queue pair an application
 * handle names, and back). Calls link and base only. */
#include "queue.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

/* ---- contexts ---------------------------------------------------------------- */

static int open_queue_pair(struct dti_attachment *d, uint32_t *index, int *wake_fd)
{
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_OPEN_CTX,
                            .abi_version = DTI_ABI_VERSION};
    pthread_mutex_lock(&d->lock);
    int rc = dti__ctl_send(d->ctl_fd, &m);
    struct dti_ctl_msg r;
    int fd = -1;
    if (rc == 0)
        rc = dti__ctl_recv(d->ctl_fd, &r, &fd, 1);
    pthread_mutex_unlock(&d->lock);
    if (rc < 0) {
        if (rc == -DTI_E_ENGINE_GONE || rc == -EPIPE || rc == -ECONNRESET) {
            dti__mark_dead(d, DTI_E_ENGINE_GONE);
            return -DTI_E_ENGINE_GONE;
        }
        return rc;
    }
    if (r.type == DTI_CTL_REFUSED) {
        if (rc == 1)
            dti__sys_close(fd);
        return r.status > 0 ? -r.status : -DTI_E_PROTOCOL;
    }
    if (r.type != DTI_CTL_CTX_OPENED || rc != 1 || r.index >= d->limits.max_contexts) {
        if (rc == 1)
            dti__sys_close(fd);
        return -DTI_E_PROTOCOL;
    }
    *index = r.index;
    *wake_fd = dti__fd_aside(fd);
    return 0;
}

static int ctx_init_queues(struct dti_ctx *c)
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

static void ctx_free_queues(struct dti_ctx *c)
{
    free(c->pending);
    free(c->free_tags);
    free(c->stash);
    free(c->watch);
    free(c->staging);
}

/* One queue pair on one engine (link d). */
int dti__ctx_create_one(struct dti_attachment *d, struct dti_ctx **out)
{
    *out = NULL;
    if (!dti__check_alive(d, false))
        return -d->dead_reason;
    struct dti_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    c->d = d;
    c->wake_fd = c->wait_fd = -1;
    c->spin_ns = c->spin_budget = 300000;
    int rc = open_queue_pair(d, &c->index, &c->wake_fd);
    if (rc < 0) {
        free(c);
        return rc;
    }
    dti__sys_fcntl(c->wake_fd, F_SETFL, dti__sys_fcntl(c->wake_fd, F_GETFL, 0) | O_NONBLOCK);
    c->wait_fd = dti__fd_aside(dti__sys_epoll_create1(EPOLL_CLOEXEC));
    struct epoll_event ev = {.events = EPOLLIN};
    struct epoll_event hup = {.events = EPOLLRDHUP | EPOLLHUP};
    if (c->wait_fd < 0 || dti__sys_epoll_ctl(c->wait_fd, EPOLL_CTL_ADD, c->wake_fd, &ev) < 0 ||
        dti__sys_epoll_ctl(c->wait_fd, EPOLL_CTL_ADD, d->ctl_fd, &hup) < 0) {
        rc = -errno;
        goto fail;
    }
    uint8_t *qp = d->base + d->hdr->ctx_offset + d->hdr->ctx_stride * c->index;
    c->qp = (struct dti_qp_header *)qp;
    c->cmds = (struct dti_cmd *)(qp + sizeof(struct dti_qp_header));
    c->evs = (struct dti_ev *)(qp + sizeof(struct dti_qp_header) +
                               (size_t)d->hdr->cmdq_entries * sizeof(struct dti_cmd));
    rc = ctx_init_queues(c);
    if (rc < 0)
        goto fail;
    pthread_mutex_lock(&d->lock);
    c->next_all = d->contexts;
    d->contexts = c;
    pthread_mutex_unlock(&d->lock);
    *out = c;
    return 0;
fail:
    ctx_free_queues(c);
    if (c->wait_fd >= 0)
        dti__sys_close(c->wait_fd);
    dti__sys_close(c->wake_fd);
    free(c);
    return rc;
}

void dti__ctx_destroy_one(struct dti_ctx *c)
{
    struct dti_attachment *d = c->d;
    pthread_mutex_lock(&d->lock);
    for (struct dti_ctx **pp = &d->contexts; *pp; pp = &(*pp)->next_all) {
        if (*pp == c) {
            *pp = c->next_all;
            break;
        }
    }
    if (!d->dead) {
        struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_CLOSE_CTX,
                                .abi_version = DTI_ABI_VERSION, .index = c->index};
        (void)dti__ctl_send(d->ctl_fd, &m);
    }
    pthread_mutex_unlock(&d->lock);
    if (d->tls_key_ok && pthread_getspecific(d->tls_key) == c)
        pthread_setspecific(d->tls_key, NULL);
    ctx_free_queues(c);
    dti__sys_close(c->wait_fd);
    dti__sys_close(c->wake_fd);
    free(c);
}

/* ---- the producer (QUEUES.md) ----------------------------------------------- */

unsigned dti_inflight(const dti_ctx_t *c)
{
    if (c->n_sub == 0)
        return c->inflight;
    unsigned n = 0;
    for (uint32_t i = 0; i < c->n_sub; i++)
        n += c->sub[i]->inflight;
    return n;
}

bool dti__ring_has_room(struct dti_ctx *c) { return dti__cmd_room(c); }

/* SEND of n bytes ending at stream position `end` (arg1: DTI_SEND_TAIL, or
 * DTI_SEND_MORE | DTI_SEND_END; dti_abi.h), staged like dti__prep_data(). */
int dti__prep_send(struct dti_ctx *c, dti_sock_t s, uint32_t n, uint32_t bits, uint32_t end)
{
    if (!dti__cmd_room(c))
        return -EAGAIN;
    struct dti_cmd *cmd = dti__cmd_next(c);
    cmd->op = DTI_OP_SEND;
    cmd->sock = s;
    cmd->arg0 = n;
    cmd->arg1 = bits;
    cmd->offset = end;
    dti__cmd_commit(c);
    return 0;
}

int dti__prep_data(struct dti_ctx *c, uint16_t op, dti_sock_t s, uint32_t n, uint32_t flags)
{
    if (!dti__cmd_room(c))
        return -EAGAIN;
    struct dti_cmd *cmd = dti__cmd_next(c);
    cmd->op = op;
    cmd->sock = s;
    cmd->arg0 = n;
    cmd->arg1 = flags;
    dti__cmd_commit(c);
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

/* ---- one engine's commands, for the layers above ------------------------------ */

/* A release the full command ring refused: listed for the wait (wake.c). */
static void strand(struct dti_ctx *c, dti_sock_t s)
{
    for (uint32_t i = 0; i < c->n_stranded; i++)
        if (c->stranded[i] == s)
            return;
    if (c->n_stranded < DTI_STRANDED_MAX)
        c->stranded[c->n_stranded++] = s;
    else
        c->stranded_more = true;
}

/* rx_owed is updated atomically: a thread reading the socket may add to it
 * while another thread's command on the same socket flushes it. */
int dti__flush_release(struct dti_ctx *c, dti_sock_t s)
{
    struct dti_sock_priv *p = &c->d->priv[dti__slot(s)];
    if (p->rx_gen != dti__gen(s) || DTI_LOAD_RELAXED(&p->rx_owed) == 0)
        return 0;
    uint32_t n = __atomic_exchange_n(&p->rx_owed, 0u, __ATOMIC_RELAXED);
    if (n == 0)
        return 0;
    int rc = dti__prep_data(c, DTI_OP_RECV_RELEASE, s, n, 0);
    if (rc < 0) {
        __atomic_fetch_add(&p->rx_owed, n, __ATOMIC_RELAXED); /* still owed */
        strand(c, s);
    }
    return rc;
}

int dti__flush_stranded(struct dti_ctx *c)
{
    if (c->n_stranded == 0 && !c->stranded_more)
        return 0;
    dti_sock_t list[DTI_STRANDED_MAX];
    const uint32_t n = c->n_stranded;
    const bool all = c->stranded_more;
    memcpy(list, c->stranded, sizeof list);
    c->n_stranded = 0;
    c->stranded_more = false;
    /* Each flush that finds the ring full again lists its socket again. */
    if (all) {
        for (uint32_t slot = 0; slot < c->d->limits.max_sockets; slot++) {
            const struct dti_sock_priv *p = &c->d->priv[slot];
            if (p->rx_gen && DTI_LOAD_RELAXED(&p->rx_owed))
                (void)dti__flush_release(c, (dti_sock_t)(p->rx_gen << DTI_SLOT_BITS | slot));
        }
    } else {
        for (uint32_t i = 0; i < n; i++)
            (void)dti__flush_release(c, list[i]);
    }
    dti_submit(c);
    return c->n_stranded || c->stranded_more ? -EAGAIN : 0;
}

int dti__prep_socket_on(dti_ctx_t *c, uint32_t engine, uint64_t ud)
{
    if (c->n_sub > 1)
        c = c->sub[engine % c->n_sub];
    struct dti_cmd *cmd;
    int rc = dti__cmd_prep(c, DTI_OP_SOCKET, DTI_SOCK_INVALID, ud, &cmd);
    if (rc == 0)
        dti__cmd_commit(c);
    return rc;
}

int dti__prep_listen_one(dti_ctx_t *c, dti_sock_t s, int backlog, uint64_t ud)
{
    return dti__cmd_args(c, DTI_OP_LISTEN, s, backlog < 0 ? 0u : (uint32_t)backlog, 0, 0, ud);
}

int dti__prep_accept_one(dti_ctx_t *c, dti_sock_t s, unsigned max, unsigned flags, uint64_t ud)
{
    if (max == 0 || max > DTI_ACCEPT_MAX)
        return -EINVAL;
    return dti__cmd_args(c, DTI_OP_ACCEPT, s, max, flags, 0, ud);
}

int dti__prep_release_one(dti_ctx_t *c, uint16_t op, dti_sock_t s, uint64_t ud)
{
    c = dti__route(c, &s); /* follows a move */
    int rc = dti__cmd_args(c, op, s, 0, 0, 0, ud);
    if (rc == 0 && dti__sock(c->d, s, NULL))
        c->d->closed_gen[dti__slot(s)] = dti__gen(s);
    return rc;
}

int dti__prep_shutdown_one(dti_ctx_t *c, dti_sock_t s, int how, uint64_t ud)
{
    c = dti__route(c, &s);
    int rc = dti__cmd_args(c, DTI_OP_SHUTDOWN, s, (uint32_t)how, 0, 0, ud);
    if (rc == 0 && how != DTI_SHUT_RD && dti__sock(c->d, s, NULL))
        c->d->priv[dti__slot(s)].wr_shut_gen = dti__gen(s);
    return rc;
}

int dti__prep_setsockopt_one(dti_ctx_t *c, dti_sock_t s, int opt, int64_t value, uint64_t ud)
{
    return dti__cmd_args(c, DTI_OP_SETSOCKOPT, s, (uint32_t)opt, 0, value, ud);
}

int dti__prep_watch_one(dti_ctx_t *c, dti_sock_t s, uint32_t events, uint64_t ud)
{
    c = dti__route(c, &s);
    int rc = dti__cmd_args(c, DTI_OP_WATCH, s, events, 0, 0, ud);
    if (rc == 0 && dti__slot(s) < c->d->limits.max_sockets)
        c->watch[dti__slot(s)] = events;
    return rc;
}

/* ---- handles ---------------------------------------------------------------------- */

dti_sock_t dti__app_handle(struct dti_ctx *c, dti_sock_t s)
{
    if (s == DTI_SOCK_INVALID)
        return s;
    struct dti_attachment *l = c->d;
    if (l->alias && dti__slot(s) < l->limits.max_sockets) {
        const struct dti_alias *a = &l->alias[dti__slot(s)];
        if (a->gen == dti__gen(s) && a->app)
            return a->app; /* a listener group's member, or a moved socket */
    }
    return s | l->engine << DTI_ENGINE_SHIFT;
}

/* dti__route() on several engines (the handle table, queue.h): the engine the handle names, or the one
 * its socket moved to. */
struct dti_ctx *dti__route_links(struct dti_ctx *c, dti_sock_t *s)
{
    uint32_t e = dti__engine_of(*s);
    if (*s == DTI_SOCK_INVALID || e >= c->n_sub)
        return c; /* fails the generation check like any stale handle */
    dti_sock_t local = *s & DTI_LOCAL_MASK;
    const struct dti_attachment *l = c->sub[e]->d;
    if (l->alias && dti__slot(local) < l->limits.max_sockets) {
        const struct dti_alias *a = &l->alias[dti__slot(local)];
        if (a->fwd_to && a->fwd_gen == dti__gen(local)) {
            e = dti__engine_of(a->fwd_to);
            local = a->fwd_to & DTI_LOCAL_MASK;
        }
    }
    *s = local;
    return c->sub[e];
}
