/* libdti layer 3, routing over the PPE's engines (route.h).
 *
 * Each engine owns the flows the steering function gives it (dti_flow_owner()
 * in dti_abi.h) and serves applications on its own: its own region, control
 * connection, doorbell and queue pairs. So an application attaches to every
 * engine (one link each), each of its contexts has a queue pair on every
 * engine, and its handles carry the engine they live on (DTI_ENGINE_SHIFT).
 * A listener is a group: the application's socket plus a sibling listening on
 * each other engine, so a connection is accepted by whichever engine owns its
 * flow and reaches the application through its one listening handle. A bound
 * socket connecting moves to the engine that owns its flow. Nothing here runs
 * on one engine (the common case costs one compare per call). This layer
 * writes the handle table (queue.h: struct dti_alias) that layer 2 reads;
 * it calls queues, link and base. */
#include "route.h"
#include "sys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

/* ---- links ------------------------------------------------------------------ */

int dti__attach_links(struct dti_attachment *d, const char *path, const char *name, uint32_t n_engines,
                      char *why, size_t wl)
{
    for (uint32_t e = 1; e < n_engines; e++) {
        struct dti_attachment *l = dti__link_new();
        if (!l)
            return -ENOMEM;
        d->links[e] = l;
        d->n_links = e + 1;
        uint32_t n = 0;
        int rc = dti__connect_control(path, &l->ctl_fd, why, wl);
        if (rc == 0)
            rc = dti__handshake(l, name, e, &n, why, wl);
        if (rc == 0 && n != n_engines) {
            if (why && wl)
                snprintf(why, wl, "the PPE's engine count changed during attach (%u, then %u); attach again",
                         n_engines, n);
            rc = -DTI_E_PROTOCOL;
        }
        if (rc < 0)
            return rc; /* dti_detach() of the caller undoes every link made */
    }
    return 0;
}

void dti__detach_links(struct dti_attachment *d)
{
    for (uint32_t e = 1; e < d->n_links; e++) {
        struct dti_attachment *l = d->links[e];
        while (l->contexts)
            dti__ctx_destroy_one(l->contexts);
        dti__link_free(l);
        d->links[e] = NULL;
    }
    if (d->n_links > 1)
        d->n_links = 1;
}

/* ---- contexts: one queue pair per engine --------------------------------------- */

int dti__ctx_open_subs(struct dti_ctx *c)
{
    struct dti_attachment *d = c->d;
    c->sub[0] = c;
    c->n_sub = 1;
    for (uint32_t e = 1; e < d->n_links; e++) {
        struct dti_ctx *q;
        int rc = dti__ctx_create_one(d->links[e], &q);
        if (rc < 0)
            return rc;
        c->sub[e] = q;
        c->n_sub = e + 1;
        /* The application sleeps on one fd: this context's epoll set gets
         * every engine's wake eventfd and control connection. */
        struct epoll_event ev = {.events = EPOLLIN};
        struct epoll_event hup = {.events = EPOLLRDHUP | EPOLLHUP};
        if (dti__sys_epoll_ctl(c->wait_fd, EPOLL_CTL_ADD, q->wake_fd, &ev) < 0 ||
            dti__sys_epoll_ctl(c->wait_fd, EPOLL_CTL_ADD, q->d->ctl_fd, &hup) < 0)
            return -errno;
    }
    /* Contexts start their sockets on different engines. */
    c->next_engine = c->index;
    return 0;
}

void dti__ctx_close_subs(struct dti_ctx *c)
{
    for (uint32_t e = c->n_sub; e-- > 1;)
        dti__ctx_destroy_one(c->sub[e]);
    c->n_sub = 0;
}

/* ---- the handle table: written here, read by layer 2 (dti__route) ------------ */

struct dti_group *dti__group_of(struct dti_attachment *link, dti_sock_t local)
{
    if (!link->alias)
        return NULL;
    uint32_t slot = dti__slot(local);
    if (slot >= link->limits.max_sockets)
        return NULL;
    const struct dti_alias *a = &link->alias[slot];
    return a->group && a->gen == dti__gen(local) ? a->group : NULL;
}

/* The alias entry of application handle h's own slot (no move followed);
 * NULL for a bad handle or no memory. */
static struct dti_alias *alias_of(struct dti_ctx *c, dti_sock_t h)
{
    uint32_t e = dti__engine_of(h);
    if (h == DTI_SOCK_INVALID || e >= c->n_sub)
        return NULL;
    struct dti_attachment *l = c->sub[e]->d;
    if (!l->alias) {
        l->alias = calloc(l->limits.max_sockets, sizeof *l->alias);
        if (!l->alias)
            return NULL;
    }
    uint32_t slot = dti__slot(h);
    return slot < l->limits.max_sockets ? &l->alias[slot] : NULL;
}

static int set_alias(struct dti_ctx *c, dti_sock_t member, struct dti_group *g)
{
    struct dti_alias *a = alias_of(c, member);
    if (!a)
        return -ENOMEM;
    a->gen = g ? dti__gen(member & DTI_LOCAL_MASK) : 0;
    a->group = g;
    a->app = g ? g->app : 0; /* what layer 2 reports for this slot (dti__app_handle) */
    return 0;
}

/* ---- listener groups ---------------------------------------------------------------- */

/* Options a sibling takes over from the application's socket before it binds
 * (SO_REUSEPORT/SO_REUSEADDR decide whether the bind succeeds) and that its
 * accepted connections inherit. */
static const int kInherited[] = {
    DTI_SO_REUSEADDR, DTI_SO_REUSEPORT, DTI_SO_NODELAY,      DTI_SO_KEEPALIVE, DTI_SO_KEEPIDLE,
    DTI_SO_KEEPINTVL, DTI_SO_KEEPCNT,   DTI_SO_USER_TIMEOUT, DTI_SO_LINGER,    DTI_SO_TOS,
    DTI_SO_RCVBUF, /* reads the size set (0: none) while there is no ring */
    DTI_SO_SNDBUF, /* likewise: its connections' send rings */
    DTI_SO_MAXSEG, /* its connections' SYN-ACK MSS; an unset one reads 536 (kUnsetMaxSeg) */
    DTI_SO_NOTSENT_LOWAT, DTI_SO_TCLASS,
};
/* What an engine answers for TCP_MAXSEG never set on a socket without a
 * connection (Linux's TCP_MSS_DEFAULT, as MARS answers): not replayed, or
 * the siblings would advertise it. (A listener set to exactly 536 keeps it
 * on its own engine only.) */
#define kUnsetMaxSeg 536
#define N_INHERITED (sizeof kInherited / sizeof kInherited[0])

static int socket_fn(dti_ctx_t *c, dti_sock_t s, uint32_t engine, int64_t v, uint64_t ud)
{
    (void)s;
    (void)v;
    return dti__prep_socket_on(c, engine, ud);
}

static int listen_fn(dti_ctx_t *c, dti_sock_t s, uint32_t backlog, int64_t v, uint64_t ud)
{
    (void)v;
    return dti__prep_listen_one(c, s, (int)backlog, ud);
}

static int setsockopt_fn(dti_ctx_t *c, dti_sock_t s, uint32_t opt, int64_t v, uint64_t ud)
{
    return dti__prep_setsockopt_one(c, s, (int)opt, v, ud);
}

static int watch_fn(dti_ctx_t *c, dti_sock_t s, uint32_t events, int64_t v, uint64_t ud)
{
    (void)v;
    return dti__prep_watch_one(c, s, events, ud);
}

static int shutdown_fn(dti_ctx_t *c, dti_sock_t s, uint32_t how, int64_t v, uint64_t ud)
{
    (void)v;
    return dti__prep_shutdown_one(c, s, (int)how, ud); /* a sibling is no group: plain shutdown */
}

static int release_fn(dti_ctx_t *c, dti_sock_t s, uint32_t op, int64_t v, uint64_t ud)
{
    (void)v;
    return dti__prep_release_handle(c, (uint16_t)op, s, ud);
}

static int bind_fn(dti_ctx_t *c, dti_sock_t s, uint32_t ip, int64_t port, uint64_t ud)
{
    const struct dti_addr a = {.ip = ip, .port = (uint16_t)port};
    return dti__cmd_addr(c, DTI_OP_BIND, s, &a, ud);
}

/* BIND6 of a sibling or a moved socket: v points to the dti_addr6 (the
 * caller's, alive for the blocking round trip), a0 the flags. */
static int bind6_fn(dti_ctx_t *c, dti_sock_t s, uint32_t flags, int64_t v, uint64_t ud)
{
    return dti__cmd_addr6(c, DTI_OP_BIND6, s, (const struct dti_addr6 *)(intptr_t)v, flags, ud);
}

/* Binds socket `to` where `from` is bound: the same family, address and
 * port (IPv6: and V6ONLY). */
static int bind_like(struct dti_ctx *c, dti_sock_t from, dti_sock_t to)
{
    struct dti_addr6 at6;
    int fam = dti_getsockname6(c, from, &at6);
    if (fam < 0)
        return fam;
    if (fam == 6) {
        struct dti_ctx *q = c;
        dti_sock_t local = from;
        q = dti__route(q, &local);
        struct dti_sock_shared *sh = dti__sock(q->d, local, NULL);
        unsigned flags = sh && (DTI_LOAD(&sh->name6) & DTI_NAME6_V6ONLY) ? DTI_BIND6_V6ONLY : 0u;
        return dti__run_blocking(c, bind6_fn, to, flags, (int64_t)(intptr_t)&at6);
    }
    struct dti_addr at;
    int rc = dti_getsockname(c, from, &at);
    return rc < 0 ? rc : dti__run_blocking(c, bind_fn, to, at.ip, at.port);
}

static int getsockopt_fn(dti_ctx_t *c, dti_sock_t s, uint32_t opt, int64_t v, uint64_t ud)
{
    (void)v;
    return dti__cmd_args(c, DTI_OP_GETSOCKOPT, s, opt, 0, 0, ud);
}

/* dti_getsockopt() of one engine's socket: 0 and *v, or the error. */
static int getsockopt_now(struct dti_ctx *c, dti_sock_t s, int opt, int64_t *v)
{
    struct dti_cqe e;
    int rc = dti__run_blocking_cqe(c, getsockopt_fn, s, (uint32_t)opt, 0, &e);
    if (rc >= 0)
        *v = e.value;
    return rc < 0 ? rc : 0;
}

/* Listens on one more engine: a new socket there with the application
 * socket's options, bound to its address. Returns the sibling's handle. */
static int make_sibling(struct dti_ctx *c, uint32_t engine, dti_sock_t app, int backlog,
                        const int64_t *opt_value, const bool *opt_known)
{
    int sib = dti__run_blocking(c, socket_fn, DTI_SOCK_INVALID, engine, 0);
    if (sib < 0)
        return sib;
    int rc = 0;
    for (size_t i = 0; i < N_INHERITED && rc == 0; i++)
        if (opt_known[i] && opt_value[i] != 0 && !(kInherited[i] == DTI_SO_MAXSEG && opt_value[i] == kUnsetMaxSeg))
            rc = dti__run_blocking(c, setsockopt_fn, (dti_sock_t)sib, (uint32_t)kInherited[i], opt_value[i]);
    if (rc == 0)
        rc = bind_like(c, app, (dti_sock_t)sib);
    if (rc == 0)
        rc = dti__run_blocking(c, listen_fn, (dti_sock_t)sib, (uint32_t)backlog, 0);
    if (rc < 0) {
        dti__run_blocking(c, release_fn, (dti_sock_t)sib, DTI_OP_CLOSE, 0);
        return rc;
    }
    return sib;
}

static void drop_members(struct dti_ctx *c, struct dti_group *g, uint16_t op)
{
    for (uint32_t i = 1; i < g->n; i++) {
        set_alias(c, g->member[i], NULL);
        dti__run_blocking(c, release_fn, g->member[i], op, 0);
    }
    set_alias(c, g->app, NULL);
    g->n = 1;
}

/* The application's socket listens first (an error there is the caller's
 * answer, so its LISTEN is prepared as usual and fails the same way), then a
 * sibling on every other engine; the caller's LISTEN then completes as a
 * listen again. A sibling that cannot listen fails the call. */
int dti__group_listen(struct dti_ctx *c, dti_sock_t s, int backlog, uint64_t ud)
{
    struct dti_group *g = dti__group_find(c, s);
    if (g) { /* listen again (a new backlog): every member */
        for (uint32_t i = 1; i < g->n; i++) {
            int rc = dti__run_blocking(c, listen_fn, g->member[i], (uint32_t)backlog, 0);
            if (rc < 0)
                return rc;
        }
        return dti__prep_listen_one(c, s, backlog, ud);
    }
    if (dti__run_blocking(c, listen_fn, s, (uint32_t)backlog, 0) < 0)
        return dti__prep_listen_one(c, s, backlog, ud);
    struct dti_addr at;
    int rc = dti_getsockname(c, s, &at);
    if (rc < 0)
        return rc;
    (void)at; /* (the siblings are bound like s: bind_like) */
    int64_t value[N_INHERITED];
    bool known[N_INHERITED];
    for (size_t i = 0; i < N_INHERITED; i++)
        known[i] = getsockopt_now(c, s, kInherited[i], &value[i]) == 0;
    /* The engine the socket lives on: a moved one (a bound socket whose
     * connect moved it, then listening) is there, not on its handle's
     * engine, and a sibling beside it on the same port would be refused
     * (EADDRINUSE). */
    dti_sock_t home_local = s;
    const uint32_t home = dti__route(c, &home_local)->d->engine;
    g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    g->app = s;
    g->member[g->n++] = s;
    rc = set_alias(c, s, g);
    for (uint32_t e = 0; e < c->n_sub && rc == 0; e++) {
        if (e == home)
            continue;
        int sib = make_sibling(c, e, s, backlog, value, known);
        if (sib < 0) {
            rc = sib;
            break;
        }
        g->member[g->n++] = (dti_sock_t)sib;
        rc = set_alias(c, (dti_sock_t)sib, g);
    }
    if (rc < 0) {
        drop_members(c, g, DTI_OP_CLOSE);
        free(g);
        return rc;
    }
    return dti__prep_listen_one(c, s, backlog, ud);
}

/* Takes connections from a member that has some (round robin, so no engine's
 * queue waits behind another's); with none waiting anywhere, the
 * application's own socket answers (-EAGAIN, or a connection that came
 * meanwhile). */
/* Connections a waiting accept took after its caller was answered go first,
 * answered at once from this process. */
static int accept_from_backlog(struct dti_ctx *c, struct dti_group *g, unsigned max, uint64_t ud)
{
    struct dti_cqe e = {.user_data = ud, .kind = DTI_CQE_COMPLETION, .op = DTI_OP_ACCEPT, .sock = g->app};
    uint32_t n = g->backlog_len < max ? g->backlog_len : max;
    memcpy(e.accepted, g->backlog, n * sizeof g->backlog[0]);
    memmove(g->backlog, g->backlog + n, (g->backlog_len - n) * sizeof g->backlog[0]);
    g->backlog_len -= n;
    e.res = (int32_t)n;
    dti__stash_push(c, &e);
    return 0;
}

/* A member's answer to a group's waiting accept (a dti__answer_fn: out is
 * decoded with an internal user_data); false: not for the application. */
static bool group_answer(struct dti_ctx *q, void *arg, struct dti_cqe *out);

/* Nothing waits on any engine: a waiting accept on every member; the first
 * to answer answers the caller (group_answer()). */
static int wait_on_every_engine(struct dti_ctx *c, struct dti_group *g, unsigned max, uint64_t ud)
{
    if (g->waiting && !g->wait_done)
        return -EBUSY; /* one waiting accept per listener, as on one engine */
    if (g->waiting && g->wait_ctx != c)
        return -EBUSY; /* the last one's accepts still wait for another context */
    /* Members whose accept from the last wait still waits keep waiting for
     * this one; the others get one. */
    int rc = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        dti_sock_t local = g->member[i];
        struct dti_ctx *q = dti__route(c, &local);
        uint32_t bit = 1u << q->d->engine;
        if (g->waiting & bit)
            continue;
        q->prep_answer = group_answer;
        q->prep_answer_arg = g;
        rc = dti__prep_accept_one(c, g->member[i], max, DTI_ACCEPT_WAIT, dti__next_ud(c));
        q->prep_answer = NULL;
        q->prep_answer_arg = NULL;
        if (rc < 0)
            break;
        g->waiting |= bit;
    }
    if (!g->waiting)
        return rc;
    /* A member left out (its queue was full) only delays connections that
     * come to it until the next accept. */
    g->wait_ud = ud;
    g->wait_ctx = c;
    g->wait_done = false;
    return 0;
}

static bool group_answer(struct dti_ctx *q, void *arg, struct dti_cqe *out)
{
    struct dti_group *g = arg;
    g->waiting &= ~(1u << q->d->engine);
    bool answer = false;
    if (!g->wait_done && !g->dropped && (out->res > 0 || g->waiting == 0)) {
        out->user_data = g->wait_ud;
        out->sock = g->app;
        g->wait_done = true;
        answer = true;
    } else if (out->res > 0) {
        for (int32_t i = 0; i < out->res && g->backlog_len < DTI_ACCEPT_MAX * DTI_MAX_ENGINES; i++)
            g->backlog[g->backlog_len++] = out->accepted[i];
        /* Readiness changed without an engine event: a watcher hears it. */
        dti_sock_t local = g->app;
        struct dti_ctx *a = dti__route(g->wait_ctx, &local);
        if (!g->dropped && dti__slot(local) < a->d->limits.max_sockets && (a->watch[dti__slot(local)] & DTI_POLLIN)) {
            struct dti_cqe ev = {.kind = DTI_CQE_EVENT, .sock = g->app, .events = DTI_POLLIN};
            dti__stash_push(g->wait_ctx, &ev);
        }
    }
    if (g->waiting == 0 && g->dropped) {
        /* closed meanwhile: what the last answers took nobody will accept */
        for (uint32_t i = 0; i < g->backlog_len; i++) {
            uint64_t ud = dti__next_ud(g->wait_ctx);
            if (dti__prep_release_one(g->wait_ctx, DTI_OP_ABORT, g->backlog[i], ud) == 0)
                dti__forget(g->wait_ctx, ud);
        }
        free(g);
    }
    return answer;
}

int dti__group_accept(struct dti_ctx *c, struct dti_group *g, unsigned max, unsigned flags, uint64_t ud)
{
    if (max == 0 || max > DTI_ACCEPT_MAX)
        return -EINVAL;
    if (g->backlog_len > 0)
        return accept_from_backlog(c, g, max, ud);
    for (uint32_t i = 0; i < g->n; i++) {
        uint32_t k = (g->next + i) % g->n;
        struct dti_sock_info st;
        if (dti__sock_status_one(c, g->member[k], &st) == 0 && st.accept_ready > 0) {
            g->next = k + 1;
            return dti__prep_accept_one(c, g->member[k], max, flags, ud);
        }
    }
    if (flags & DTI_ACCEPT_WAIT)
        return wait_on_every_engine(c, g, max, ud);
    return dti__prep_accept_one(c, g->app, max, flags, ud);
}

/* Applies a watch, an option or a shutdown to every sibling (blocking: these
 * are set-up calls); the caller then prepares it for the application's own
 * socket with its user_data. */
int dti__group_each(struct dti_ctx *c, struct dti_group *g, uint16_t op, uint32_t a0, int64_t v)
{
    dti__prep_fn fn = op == DTI_OP_WATCH ? watch_fn : op == DTI_OP_SETSOCKOPT ? setsockopt_fn : shutdown_fn;
    for (uint32_t i = 1; i < g->n; i++) {
        int rc = dti__run_blocking(c, fn, g->member[i], a0, v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Closing (or aborting) the application's handle closes every sibling. */
int dti__group_drop(struct dti_ctx *c, struct dti_group *g, uint16_t op)
{
    for (uint32_t i = 0; i < g->backlog_len; i++)
        dti__run_blocking(c, release_fn, g->backlog[i], DTI_OP_ABORT, 0);
    g->backlog_len = 0;
    drop_members(c, g, op);
    if (g->waiting)
        g->dropped = true; /* its waiting accepts still answer: they free it */
    else
        free(g);
    return 0;
}

/* The group's readiness: the application's socket, with the connections
 * waiting on every engine. */
int dti__group_status(struct dti_ctx *c, struct dti_group *g, struct dti_sock_info *out)
{
    int rc = dti__sock_status_one(c, g->app, out);
    if (rc < 0)
        return rc;
    for (uint32_t i = 1; i < g->n; i++) {
        struct dti_sock_info st;
        if (dti__sock_status_one(c, g->member[i], &st) == 0)
            out->accept_ready += st.accept_ready;
    }
    out->accept_ready += g->backlog_len;
    out->events = dti_events_of(out->state, out->error, out->readable, out->writable, out->accept_ready);
    return 0;
}

/* ---- a bound socket connecting: placed on its flow's owner ------------------------ */

/* Options a socket keeps when it moves to another engine. */
static const int kKept[] = {
    DTI_SO_NODELAY,  DTI_SO_CORK,         DTI_SO_KEEPALIVE, DTI_SO_KEEPIDLE,  DTI_SO_KEEPINTVL,
    DTI_SO_KEEPCNT,  DTI_SO_MAXSEG,       DTI_SO_USER_TIMEOUT, DTI_SO_LINGER, DTI_SO_REUSEADDR,
    DTI_SO_REUSEPORT, DTI_SO_TOS,         DTI_SO_RCVLOWAT,  DTI_SO_RCVBUF,    DTI_SO_NOTSENT_LOWAT,
    DTI_SO_SNDBUF, /* before connect: sizes the send ring the connection gets */
    DTI_SO_TCLASS,
};
#define N_KEPT (sizeof kKept / sizeof kKept[0])

/* The socket's options, replayed where the new one differs. */
static int copy_options(struct dti_ctx *c, dti_sock_t from, dti_sock_t to)
{
    for (size_t i = 0; i < N_KEPT; i++) {
        int64_t want, have;
        if (getsockopt_now(c, from, kKept[i], &want) < 0 || getsockopt_now(c, to, kKept[i], &have) < 0 ||
            want == have)
            continue;
        int rc = dti__run_blocking(c, setsockopt_fn, to, (uint32_t)kKept[i], want);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Each engine owns the flows dti_flow_owner() gives it and picks the ports of
 * its own connections accordingly; a socket bound to a port before it
 * connects has its flow decided by that port, so it may belong elsewhere:
 * its segments would be steered to an engine that does not know it. Such a
 * socket (not yet connected: nothing to lose) is made again on the owner,
 * with its options, address and watch, and the application's handle follows
 * it there (dti__route()). */
/* Makes socket s again on engine `owner` (options, address, this context's
 * watch) and routes its handle there (dti_alias.fwd_to). */
static int move_to(struct dti_ctx *c, dti_sock_t s, struct dti_ctx *q, uint32_t slot, dti_sock_t local,
                   uint32_t owner, bool bound)
{
    uint32_t watched = q->watch[slot];
    int moved = dti__run_blocking(c, socket_fn, DTI_SOCK_INVALID, owner, 0);
    if (moved < 0)
        return moved;
    dti_sock_t real = local | q->d->engine << DTI_ENGINE_SHIFT; /* where s lives now */
    int rc = copy_options(c, real, (dti_sock_t)moved);
    if (rc == 0 && bound)
        rc = bind_like(c, s, (dti_sock_t)moved);
    if (rc == 0 && watched)
        rc = dti__run_blocking(c, watch_fn, (dti_sock_t)moved, watched, 0);
    if (rc < 0) {
        dti__run_blocking(c, release_fn, (dti_sock_t)moved, DTI_OP_CLOSE, 0);
        return rc;
    }
    /* The socket the handle names stays, unused, until the application
     * closes the handle: it keeps the handle's slot (no other socket can
     * take that slot and be confused with it) and its port. A socket that
     * had moved before (connect again) is simply replaced. */
    if (dti__is_moved(c, s)) {
        dti__forget_move(c, s);
        dti__run_blocking(c, release_fn, real, DTI_OP_CLOSE, 0);
    }
    struct dti_alias *from = alias_of(c, s), *to = alias_of(c, (dti_sock_t)moved);
    if (!from || !to)
        return -ENOMEM;
    from->fwd_gen = dti__gen(s & DTI_LOCAL_MASK);
    from->fwd_to = (dti_sock_t)moved;
    to->gen = dti__gen((dti_sock_t)moved & DTI_LOCAL_MASK);
    to->group = NULL;
    to->app = s;
    return 0;
}

int dti__place_for_connect(struct dti_ctx *c, dti_sock_t s, const struct dti_addr *remote)
{
    dti_sock_t local = s;
    struct dti_ctx *q = dti__route(c, &local);
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(q->d, local, &slot);
    if (!sh || DTI_LOAD(&sh->state) & (DTI_STATE_CONNECTING | DTI_STATE_CONNECTED | DTI_STATE_LISTENING))
        return 0; /* the CONNECT itself says what is wrong */
    struct dti_addr at;
    if (dti_getsockname(c, s, &at) < 0 || at.port == 0)
        return 0; /* unbound: the engine picks a port whose flow it owns */
    uint32_t ip = at.ip ? at.ip : q->d->hdr->app_ip;
    if (!ip)
        return 0;
    uint32_t owner = dti_flow_owner(ip, at.port, remote->ip, remote->port, c->n_sub);
    if (owner == q->d->engine)
        return 0;
    return move_to(c, s, q, slot, local, owner, true);
}

/* The IPv6 address a socket bound to `at` connects from to `remote`, as the
 * engine's stack chooses it (RFC 6724 as far as this side can know): its
 * bound address, or for :: the header's app_ll6 toward a link-local
 * destination and app_ip6 toward any other. false: not known here. */
static bool source6(const struct dti_attachment *d, const struct dti_addr6 *at, const struct dti_addr6 *remote,
                    uint8_t out[16])
{
    static const uint8_t zero[16];
    if (memcmp(at->ip, zero, 16) != 0) {
        memcpy(out, at->ip, 16);
        return true;
    }
    const bool link_local = remote->ip[0] == 0xfe && (remote->ip[1] & 0xc0) == 0x80;
    const uint8_t *src = link_local ? d->hdr->app_ll6 : d->hdr->app_ip6;
    if (memcmp(src, zero, 16) == 0)
        return false;
    memcpy(out, src, 16);
    return true;
}

/* IPv6 as IPv4 above: a socket bound to a port before it connects moves to
 * the owner of its flow (dti_flow_owner6); an unbound one stays, its
 * engine picks a port it owns. */
int dti__place_for_connect6(struct dti_ctx *c, dti_sock_t s, const struct dti_addr6 *remote)
{
    dti_sock_t local = s;
    struct dti_ctx *q = dti__route(c, &local);
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(q->d, local, &slot);
    const uint32_t busy = DTI_STATE_CONNECTING | DTI_STATE_CONNECTED | DTI_STATE_LISTENING | DTI_STATE_DGRAM;
    if (!sh || DTI_LOAD(&sh->state) & busy)
        return 0; /* the CONNECT6 itself says what is wrong */
    struct dti_addr6 at;
    if (dti_getsockname6(c, s, &at) != 6 || at.port == 0)
        return 0; /* unbound (or bound to IPv4: the engine refuses it) */
    uint8_t ip[16];
    if (!source6(q->d, &at, remote, ip))
        return 0;
    uint32_t owner = dti_flow_owner6(ip, at.port, remote->ip, remote->port, c->n_sub);
    if (owner == q->d->engine)
        return 0;
    return move_to(c, s, q, slot, local, owner, true);
}

bool dti__is_moved(struct dti_ctx *c, dti_sock_t s)
{
    uint32_t e = dti__engine_of(s);
    if (s == DTI_SOCK_INVALID || e >= c->n_sub || !c->sub[e]->d->alias)
        return false;
    const struct dti_alias *a = alias_of(c, s);
    return a && a->fwd_to && a->fwd_gen == dti__gen(s & DTI_LOCAL_MASK);
}

void dti__forget_move(struct dti_ctx *c, dti_sock_t s)
{
    uint32_t e = dti__engine_of(s);
    if (s == DTI_SOCK_INVALID || e >= c->n_sub || !c->sub[e]->d->alias)
        return;
    struct dti_alias *from = alias_of(c, s);
    if (!from || !from->fwd_to || from->fwd_gen != dti__gen(s & DTI_LOCAL_MASK))
        return;
    struct dti_alias *to = alias_of(c, from->fwd_to);
    if (to && to->app == s)
        to->app = 0;
    from->fwd_to = 0;
    from->fwd_gen = 0;
}

/* The socket a moved handle left where it was made goes with the handle
 * (its completion is not the caller's); a full queue leaves it to detach. */
int dti__prep_release_handle(dti_ctx_t *c, uint16_t op, dti_sock_t s, uint64_t ud)
{
    bool moved = c->n_sub > 1 && dti__is_moved(c, s);
    int rc = dti__prep_release_one(c, op, s, ud); /* follows the move */
    if (rc == 0 && moved) {
        dti__forget_move(c, s);
        dti_sock_t left = s;
        struct dti_ctx *q = dti__route(c, &left);
        uint64_t iud = dti__next_ud(c);
        if (dti__prep_release_one(q, DTI_OP_CLOSE, left, iud) == 0)
            dti__forget(c, iud);
    }
    return rc;
}

/* ---- passing and exec: what an application handle stands for ------------------ */

int dti__release_now(struct dti_ctx *c, dti_sock_t s)
{
    return dti__run_blocking(c, release_fn, s, DTI_OP_CLOSE, 0);
}

/* The alias entry of slot `slot` on link l (made on first use); NULL: no memory
 * or out of range. */
static struct dti_alias *link_alias(struct dti_attachment *l, uint32_t slot)
{
    if (slot >= l->limits.max_sockets)
        return NULL;
    if (!l->alias) {
        l->alias = calloc(l->limits.max_sockets, sizeof *l->alias);
        if (!l->alias)
            return NULL;
    }
    return &l->alias[slot];
}

/* The alias entry application handle s names, if libdti made one for it. */
static const struct dti_alias *alias_peek(struct dti_attachment *d, dti_sock_t s)
{
    uint32_t e = dti__engine_of(s);
    if (s == DTI_SOCK_INVALID || e >= d->n_links)
        return NULL;
    const struct dti_attachment *l = d->links[e];
    uint32_t slot = dti__slot(s);
    if (!l->alias || slot >= l->limits.max_sockets)
        return NULL;
    return &l->alias[slot];
}

struct dti_group *dti__group_of_app(struct dti_attachment *d, dti_sock_t s)
{
    const struct dti_alias *a = alias_peek(d, s);
    return a && a->group && a->gen == dti__gen(s & DTI_LOCAL_MASK) && a->group->app == s ? a->group : NULL;
}

dti_sock_t dti__moved_to(struct dti_attachment *d, dti_sock_t s)
{
    const struct dti_alias *a = alias_peek(d, s);
    return a && a->fwd_to && a->fwd_gen == dti__gen(s & DTI_LOCAL_MASK) ? a->fwd_to : DTI_SOCK_INVALID;
}

uint32_t dti__parts_of(struct dti_attachment *d, dti_sock_t s, dti_sock_t part[DTI_MAX_ENGINES])
{
    for (uint32_t e = 0; e < DTI_MAX_ENGINES; e++)
        part[e] = DTI_SOCK_INVALID;
    struct dti_group *g = dti__group_of_app(d, s);
    if (g) {
        for (uint32_t i = 0; i < g->n; i++)
            part[dti__engine_of(g->member[i])] = g->member[i] & DTI_LOCAL_MASK;
        return dti__engine_of(g->app);
    }
    dti_sock_t to = dti__moved_to(d, s);
    dti_sock_t real = to != DTI_SOCK_INVALID ? to : s;
    uint32_t e = dti__engine_of(real);
    part[e < DTI_MAX_ENGINES ? e : 0] = real & DTI_LOCAL_MASK;
    return e < DTI_MAX_ENGINES ? e : 0;
}

int dti__group_restore(struct dti_attachment *d, dti_sock_t app, const dti_sock_t *members, uint32_t n)
{
    if (n < 2 || dti__group_of_app(d, app))
        return 0; /* a socket of one engine, or a group this process knows */
    if (n > d->n_links)
        return -EINVAL;
    uint32_t seen = 0;
    bool has_app = false;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t e = dti__engine_of(members[i]);
        if (members[i] == DTI_SOCK_INVALID || e >= d->n_links || (seen & 1u << e))
            return -EINVAL;
        seen |= 1u << e;
        has_app |= members[i] == app;
    }
    if (!has_app)
        return -EINVAL;
    struct dti_group *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    g->app = app;
    g->member[g->n++] = app; /* the application's own socket first, as listen makes it */
    for (uint32_t i = 0; i < n; i++)
        if (members[i] != app)
            g->member[g->n++] = members[i];
    for (uint32_t i = 0; i < g->n; i++) {
        struct dti_alias *a = link_alias(d->links[dti__engine_of(g->member[i])], dti__slot(g->member[i]));
        if (!a) {
            for (uint32_t k = 0; k < i; k++)
                link_alias(d->links[dti__engine_of(g->member[k])], dti__slot(g->member[k]))->group = NULL;
            free(g);
            return -ENOMEM;
        }
        a->gen = dti__gen(g->member[i] & DTI_LOCAL_MASK);
        a->group = g;
        a->app = g->app;
    }
    return 0;
}

int dti__move_restore(struct dti_attachment *d, dti_sock_t app, dti_sock_t to)
{
    uint32_t e = dti__engine_of(app), f = dti__engine_of(to);
    if (app == DTI_SOCK_INVALID || to == DTI_SOCK_INVALID || e >= d->n_links || f >= d->n_links || e == f)
        return -EINVAL;
    struct dti_alias *from = link_alias(d->links[e], dti__slot(app));
    struct dti_alias *at = link_alias(d->links[f], dti__slot(to));
    if (!from || !at)
        return -ENOMEM;
    from->fwd_gen = dti__gen(app & DTI_LOCAL_MASK);
    from->fwd_to = to;
    at->gen = dti__gen(to & DTI_LOCAL_MASK);
    at->group = NULL;
    at->app = app;
    return 0;
}
