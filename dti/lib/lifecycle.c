/* libdti layer 4, public calls: an attachment's life. dti_attach (every
 * engine), dti_detach, dti_retire/dti_leave, the fork hooks and the
 * per-thread contexts (dti_ctx_create, dti_ctx_get, dti_ctx_destroy). */
#include "api.h"
#include "sys.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static void destroy_tls_ctx(void *p) { dti_ctx_destroy(p); }

int dti_attach(const struct dti_attach_opts *opts, dti_t **out, char *why, size_t why_len)
{
    const char *path = opts && opts->socket_path ? opts->socket_path : getenv("ETA_SOCKET");
    if (!path || !*path)
        path = DTI_DEFAULT_SOCKET_PATH;
    if (!out)
        return -EINVAL;
    *out = NULL;
    struct dti_attachment *d = dti__link_new();
    if (!d)
        return -ENOMEM;
    d->n_links = 1;
    d->links[0] = d;
    const char *name = opts ? opts->name : NULL;
    uint32_t n_engines = 1;
    int rc = dti__connect_control(path, &d->ctl_fd, why, why_len);
    if (rc == 0)
        rc = dti__handshake(d, name, 0, &n_engines, why, why_len);
    if (rc == 0 && n_engines > 1)
        rc = dti__attach_links(d, path, name, n_engines, why, why_len);
    if (rc < 0)
        goto fail;
    if (pthread_key_create(&d->tls_key, destroy_tls_ctx) == 0)
        d->tls_key_ok = true;
    *out = d;
    return 0;
fail:
    dti_detach(d);
    return rc;
}

void dti_detach(dti_t *d)
{
    if (!d)
        return;
    while (d->contexts)
        dti_ctx_destroy(d->contexts);
    dti__detach_links(d);
    dti__link_free(d);
}

/* Replaces a mapping with private zero pages at the same address: threads
 * that still read it see no engine (engine_state 0 is not ALIVE), writes land
 * in memory of their own, and the shared pages are released. */
static void unpin(void *base, uint64_t size)
{
    if (base && size)
        (void)mmap(base, (size_t)size, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        dti__sys_close(*fd);
    *fd = -1;
}

static void retire_link(struct dti_attachment *l)
{
    dti__mark_dead(l, DTI_E_ENGINE_GONE);
    pthread_mutex_lock(&l->lock);
    for (struct dti_ctx *c = l->contexts; c; c = c->next_all) {
        close_fd(&c->wait_fd);
        close_fd(&c->wake_fd);
    }
    close_fd(&l->ctl_fd);
    close_fd(&l->doorbell_fd);
    close_fd(&l->fork_fd);
    close_fd(&l->region_fd);
    close_fd(&l->priv_fd);
    unpin(l->base, l->size);
    if (l->priv)
        unpin(l->priv, sizeof(struct dti_sock_priv) * l->limits.max_sockets);
    pthread_mutex_unlock(&l->lock);
}

int dti_retire(dti_t *d)
{
    if (!d)
        return -EINVAL;
    if (dti_engine_alive(d))
        return -EBUSY;
    for (uint32_t e = 0; e < d->n_links; e++)
        retire_link(d->links[e]);
    /* Thread-specific keys are few (PTHREAD_KEYS_MAX): a program that
     * re-attaches again and again must not run out. Threads' old contexts
     * then stay allocated at their exit, like the rest of a retired one. */
    if (d->tls_key_ok) {
        d->tls_key_ok = false;
        pthread_key_delete(d->tls_key);
    }
    return 0;
}

/* dti_retire for an attachment the PPE still serves: its membership ends
 * (the PPE sees its control connections close) and its memory goes, while
 * its bookkeeping stays for threads that may still hold its contexts. */
int dti_leave(dti_t *d)
{
    if (!d)
        return -EINVAL;
    for (uint32_t e = 0; e < d->n_links; e++)
        dti__mark_dead(d->links[e], DTI_E_ENGINE_GONE);
    return dti_retire(d);
}

int dti_control_fd(dti_t *d) { return d->ctl_fd; }

void dti_get_limits(const dti_t *d, struct dti_limits *out) { *out = d->limits; }

/* Alive while every engine serves us: losing one engine is losing the PPE
 * (its sockets are gone), so the application hears it at once. */
int dti_engine_alive(dti_t *d)
{
    bool alive = true;
    for (uint32_t e = 0; e < d->n_links; e++)
        alive &= dti__check_alive(d->links[e], true);
    return alive ? 1 : 0;
}

/* ---- fork --------------------------------------------------------------------- */

/* The child's control connection is one end of a socketpair the parent makes
 * here; the PPE gets the other end with FORK and turns it into a member of
 * our group holding what we hold. Only the child keeps a copy after fork, so
 * the PPE sees the member go when the child exits or execs, or at once when
 * fork() failed and the parent closes its copy. */
static int fork_request(struct dti_attachment *d)
{
    if (!dti__check_alive(d, false))
        return -d->dead_reason;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_FORK, .abi_version = DTI_ABI_VERSION,
                            .pid = (uint32_t)getpid()};
    int rc = dti__ctl_send_fd(d->ctl_fd, &m, sv[1]);
    dti__sys_close(sv[1]);
    struct dti_ctl_msg r;
    int fd = -1;
    if (rc == 0)
        rc = dti__ctl_recv(d->ctl_fd, &r, &fd, 1);
    if (rc > 0)
        dti__sys_close(fd); /* the PPE sends none with this answer */
    if (rc >= 0 && r.type == DTI_CTL_FORKED) {
        d->fork_fd = dti__fd_aside(sv[0]);
        return 0;
    }
    dti__sys_close(sv[0]);
    if (rc == -DTI_E_ENGINE_GONE || rc == -EPIPE || rc == -ECONNRESET) {
        dti__mark_dead(d, DTI_E_ENGINE_GONE);
        return -DTI_E_ENGINE_GONE;
    }
    if (rc < 0)
        return rc;
    return r.type == DTI_CTL_REFUSED && r.status > 0 ? -r.status : -DTI_E_PROTOCOL;
}

int dti_fork_prepare(dti_t *d)
{
    /* Held across fork(): no other thread is halfway through a request on
     * the control socket, or through the context list, when the child is
     * copied. Every engine makes the child a member (links lock in order). */
    int rc = 0;
    for (uint32_t e = 0; e < d->n_links; e++) {
        struct dti_attachment *l = d->links[e];
        pthread_mutex_lock(&l->lock);
        l->fork_fd = -1;
        l->fork_rc = rc < 0 ? rc : fork_request(l);
        if (l->fork_rc < 0 && rc == 0)
            rc = l->fork_rc;
    }
    for (uint32_t e = 0; e < d->n_links; e++)
        d->links[e]->fork_rc = rc;
    return rc;
}

void dti_fork_parent(dti_t *d)
{
    for (uint32_t e = d->n_links; e-- > 0;) {
        struct dti_attachment *l = d->links[e];
        if (l->fork_fd >= 0)
            dti__sys_close(l->fork_fd);
        l->fork_fd = -1;
        pthread_mutex_unlock(&l->lock);
    }
}

static int fork_child_link(struct dti_attachment *d);

int dti_fork_child(dti_t *d)
{
    int rc = 0;
    for (uint32_t e = 0; e < d->n_links; e++) {
        int r = fork_child_link(d->links[e]);
        if (r < 0 && rc == 0)
            rc = r;
    }
    if (rc < 0) /* one engine without us is the PPE without us */
        for (uint32_t e = 0; e < d->n_links; e++)
            dti__mark_dead(d->links[e], -rc);
    return rc;
}

static int fork_child_link(struct dti_attachment *d)
{
    pthread_mutex_init(&d->lock, NULL);
    /* The parent's contexts are the parent's: this process forgets them. Its
     * copies of their descriptors are closed; the structures are left
     * allocated, so no context of the child ever has the address of one of
     * the parent's (callers may cache context pointers). */
    for (struct dti_ctx *c = d->contexts; c; c = c->next_all) {
        dti__sys_close(c->wait_fd);
        dti__sys_close(c->wake_fd);
        c->wait_fd = c->wake_fd = -1;
    }
    d->contexts = NULL;
    if (d->tls_key_ok)
        pthread_setspecific(d->tls_key, NULL);
    d->pool_blocks = 0; /* the pool's allocation map is the parent's */
    if (d->ctl_fd >= 0)
        dti__sys_close(d->ctl_fd); /* the parent's connection: the parent keeps its copy */
    d->ctl_fd = d->fork_fd;
    d->fork_fd = -1;
    if (d->ctl_fd < 0) {
        int rc = d->fork_rc < 0 ? d->fork_rc : -DTI_E_ENGINE_GONE;
        dti__mark_dead(d, -rc);
        return rc;
    }
    /* Tells the PPE (eta-stat) who we are; no answer. */
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_HELLO, .abi_version = DTI_ABI_VERSION,
                            .pid = (uint32_t)getpid()};
    (void)dti__sys_send(d->ctl_fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    return 0;
}

/* For lifecycle_exec.c: the key of a new image's per-thread contexts. */
void dti__init_tls(struct dti_attachment *d)
{
    if (pthread_key_create(&d->tls_key, destroy_tls_ctx) == 0)
        d->tls_key_ok = true;
}

int dti_ctx_create(dti_t *d, dti_ctx_t **out)
{
    int rc = dti__ctx_create_one(d, out);
    if (rc < 0 || d->n_links <= 1)
        return rc;
    rc = dti__ctx_open_subs(*out);
    if (rc < 0) {
        dti_ctx_destroy(*out);
        *out = NULL;
    }
    return rc;
}

void dti_ctx_destroy(dti_ctx_t *c)
{
    if (!c)
        return;
    dti__ctx_close_subs(c);
    dti__ctx_destroy_one(c);
}

dti_ctx_t *dti_ctx_get(dti_t *d, int *err)
{
    if (!d->tls_key_ok) {
        if (err)
            *err = -ENOMEM;
        return NULL;
    }
    struct dti_ctx *c = pthread_getspecific(d->tls_key);
    if (c)
        return c;
    int rc = dti_ctx_create(d, &c);
    if (rc < 0) {
        if (err)
            *err = rc;
        return NULL;
    }
    pthread_setspecific(d->tls_key, c);
    return c;
}
