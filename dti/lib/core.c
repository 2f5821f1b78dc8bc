/* libdti core: attach/detach, the control socket, engine liveness, fork.
 * Contexts and the wake protocol are in ctx.c. */
#include "internal.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

extern char *program_invocation_short_name;

const char *dti_strerror(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case 0: return "success";
    case DTI_E_NO_ENGINE: return "no PPE is listening at the control socket";
    case DTI_E_DENIED: return "the PPE refuses this user";
    case DTI_E_VERSION: return "DTI ABI version mismatch between libdti and the PPE";
    case DTI_E_LIMIT: return "a PPE limit was reached";
    case DTI_E_ENGINE_GONE: return "the PPE has gone away";
    case DTI_E_BROKEN: return "the PPE found this application's shared region corrupt";
    case DTI_E_PROTOCOL: return "malformed DTI control message";
    case DTI_E_BAD_HANDLE: return "unknown or stale DTI socket handle";
    default: break;
    }
    /* strerror() is not thread-safe in general, but glibc returns static
     * strings for known values; unknown values get a fixed text. */
    if (err < 4096)
        return strerrordesc_np(err) ? strerrordesc_np(err) : "unknown error";
    return "unknown error";
}

uint64_t dti__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void say(char *why, size_t len, const char *fmt, ...)
{
    if (!why || len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

/* ---- control socket messages ------------------------------------------ */

static int ctl_send(int fd, const struct dti_ctl_msg *m)
{
    for (;;) {
        ssize_t n = dti__sys_send(fd, m, sizeof *m, MSG_NOSIGNAL);
        if (n == (ssize_t)sizeof *m)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? -errno : -DTI_E_PROTOCOL;
    }
}

/* Sends one message carrying one descriptor. */
static int ctl_send_fd(int fd, const struct dti_ctl_msg *m, int pass)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof cbuf);
    struct iovec iov = {(void *)m, sizeof *m};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &pass, sizeof pass);
    for (;;) {
        ssize_t n = dti__sys_sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n == (ssize_t)sizeof *m)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? -errno : -DTI_E_PROTOCOL;
    }
}

/* Receives one message and up to max_fds descriptors. Returns the number of
 * fds received, or a negative error (-DTI_E_ENGINE_GONE on EOF). */
static int ctl_recv(int fd, struct dti_ctl_msg *m, int *fds, int max_fds)
{
    char cbuf[CMSG_SPACE(sizeof(int) * 4)];
    struct iovec iov = {m, sizeof *m};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    ssize_t n;
    do {
        n = dti__sys_recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n == 0)
        return -DTI_E_ENGINE_GONE;
    if (n < 0)
        return -errno;
    int got = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *in = (int *)CMSG_DATA(cm);
        for (size_t i = 0; i < k; i++) {
            if (got < max_fds)
                fds[got++] = in[i];
            else
                dti__sys_close(in[i]);
        }
    }
    if ((size_t)n != sizeof *m || m->magic != DTI_CTL_MAGIC || (mh.msg_flags & MSG_TRUNC)) {
        for (int i = 0; i < got; i++)
            dti__sys_close(fds[i]);
        return -DTI_E_PROTOCOL;
    }
    return got;
}

/* ---- attach -------------------------------------------------------------- */

static bool pow2(uint32_t v) { return v && !(v & (v - 1)); }

static bool in_region(uint64_t size, uint64_t off, uint64_t len)
{
    return off <= size && len <= size - off;
}

/* The engine wrote the header, but a bad header must not make us read outside
 * the mapping: check the geometry before trusting it. */
static int check_header(const struct dti_region_header *h, uint64_t size, char *why, size_t wl)
{
    if (h->magic != DTI_REGION_MAGIC) {
        say(why, wl, "the PPE's shared region has a bad magic number");
        return -DTI_E_PROTOCOL;
    }
    if (h->abi_version != DTI_ABI_VERSION) {
        say(why, wl, "DTI ABI version mismatch: libdti %u, PPE region %u", DTI_ABI_VERSION,
            h->abi_version);
        return -DTI_E_VERSION;
    }
    uint64_t ctx_bytes = sizeof(struct dti_qp_header) + (uint64_t)h->cmdq_entries * sizeof(struct dti_cmd) +
                         (uint64_t)h->evq_entries * sizeof(struct dti_ev);
    bool ok = h->region_size == size && h->header_size == sizeof *h && pow2(h->cmdq_entries) &&
              pow2(h->evq_entries) && h->evq_entries >= 2 * h->cmdq_entries &&
              h->evq_entries <= DTI_EVQ_MAX && pow2(h->rx_ring_size) &&
              pow2(h->tx_ring_size) && h->max_contexts > 0 && h->max_contexts <= 1024 &&
              h->max_sockets > 0 && h->max_sockets <= DTI_SLOT_MASK && h->ctx_stride >= ctx_bytes &&
              in_region(size, h->ctx_offset, h->ctx_stride * h->max_contexts) &&
              in_region(size, h->sock_offset, (uint64_t)h->max_sockets * sizeof(struct dti_sock_shared)) &&
              h->data_stride >= (uint64_t)h->rx_ring_size + h->tx_ring_size &&
              in_region(size, h->data_offset, h->data_stride * h->max_sockets) &&
              in_region(size, h->pool_offset, h->pool_size) && h->ctx_offset % DTI_CACHELINE == 0 &&
              h->ctx_stride % DTI_CACHELINE == 0 && h->sock_offset % DTI_CACHELINE == 0;
    if (!ok) {
        say(why, wl, "the PPE's shared region has an inconsistent layout");
        return -DTI_E_PROTOCOL;
    }
    return 0;
}

static void destroy_tls_ctx(void *p) { dti_ctx_destroy(p); }

/* A shared mapping of fd, read-write, with none of its pages faulted in,
 * also in a process that called mlockall(MCL_FUTURE) (whose new mappings
 * the kernel faults in whole, several GiB here): mapped without access
 * first, where faulting in fails and is skipped, then opened; opening a
 * shared mapping faults in nothing. Its pages are locked as they are used. */
static void *map_unpopulated(size_t size, int fd)
{
    void *p = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED && mprotect(p, size, PROT_READ | PROT_WRITE) != 0) {
        int e = errno;
        munmap(p, size);
        errno = e;
        return MAP_FAILED;
    }
    return p;
}

/* Maps the region the engine made (memfd) and the app-side socket state:
 * `priv_fd` is that state's memfd when it exists already (an image adopting
 * its sockets after exec), -1 to make it. Both descriptors are kept
 * (close-on-exec) so that exec can hand them to the next image. */
int dti__map_region(struct dti_attachment *d, int memfd, int priv_fd, char *why, size_t wl)
{
    struct stat st;
    if (fstat(memfd, &st) < 0 || st.st_size < (off_t)sizeof(struct dti_region_header)) {
        say(why, wl, "the PPE sent an unusable shared region");
        return -DTI_E_PROTOCOL;
    }
    void *p = map_unpopulated((size_t)st.st_size, memfd);
    if (p == MAP_FAILED) {
        int e = errno;
        say(why, wl, "cannot map the PPE's shared region: %s", strerror(e));
        return -e;
    }
    d->base = p;
    d->size = (uint64_t)st.st_size;
    d->hdr = p;
    int rc = check_header(d->hdr, d->size, why, wl);
    if (rc < 0)
        return rc;
    const struct dti_region_header *h = d->hdr;
    d->socks = (struct dti_sock_shared *)(d->base + h->sock_offset);
    d->data_base = d->base + h->data_offset;
    d->data_stride = h->data_stride;
    d->limits = (struct dti_limits){h->max_contexts, h->max_sockets, h->cmdq_entries, h->evq_entries,
                                    h->rx_ring_size, h->tx_ring_size, h->pool_size, h->region_size};
    /* Shared, so that processes forked from this one (and the image an exec
     * starts) see the same ring positions (zero-filled by the kernel). */
    const size_t priv_size = sizeof(struct dti_sock_priv) * h->max_sockets;
    if (priv_fd < 0) {
        priv_fd = dti__fd_aside(memfd_create("dti-sock-state", MFD_CLOEXEC));
        if (priv_fd >= 0 && ftruncate(priv_fd, (off_t)priv_size) < 0) {
            dti__sys_close(priv_fd);
            priv_fd = -1;
        }
    } else if (fstat(priv_fd, &st) < 0 || (uint64_t)st.st_size != priv_size) {
        say(why, wl, "the socket state handed over at exec does not fit the region");
        return -DTI_E_PROTOCOL;
    }
    void *priv = priv_fd < 0 ? MAP_FAILED : map_unpopulated(priv_size, priv_fd);
    d->priv_fd = priv_fd;
    d->priv = priv == MAP_FAILED ? NULL : priv;
    d->closed_gen = calloc(h->max_sockets, sizeof(uint32_t));
    d->pool_blocks = (uint32_t)(h->pool_size / DTI_POOL_BLOCK);
    d->pool_bitmap = calloc((d->pool_blocks + 63) / 64 + 1, sizeof(uint64_t));
    if (!d->priv || !d->closed_gen || !d->pool_bitmap) {
        say(why, wl, "out of memory");
        return -ENOMEM;
    }
    return 0;
}

static int refused(const struct dti_ctl_msg *m, char *why, size_t wl)
{
    int code = m->status > 0 ? m->status : DTI_E_PROTOCOL;
    char text[sizeof m->text + 1];
    memcpy(text, m->text, sizeof m->text);
    text[sizeof m->text] = 0;
    if (code == DTI_E_VERSION)
        say(why, wl, "DTI ABI version mismatch: libdti %u, PPE %u (%s)", DTI_ABI_VERSION,
            m->abi_version, text);
    else
        say(why, wl, "the PPE refused to attach: %s (%s)", text, dti_strerror(code));
    return -code;
}

/* HELLO to `engine`, WELCOME back: maps the region. *n_engines: how many
 * engines the PPE runs (this link's WELCOME says). */
int dti__handshake(struct dti_attachment *d, const char *name, uint32_t engine, uint32_t *n_engines,
                   char *why, size_t wl)
{
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_HELLO,
                            .abi_version = DTI_ABI_VERSION, .pid = (uint32_t)getpid(),
                            .engine = engine};
    snprintf(m.text, sizeof m.text, "%s", name ? name : program_invocation_short_name);
    int rc = ctl_send(d->ctl_fd, &m);
    if (rc < 0) {
        say(why, wl, "cannot talk to the PPE: %s", dti_strerror(rc));
        return rc;
    }
    int fds[2] = {-1, -1};
    struct dti_ctl_msg r;
    int nfd = ctl_recv(d->ctl_fd, &r, fds, 2);
    if (nfd < 0) {
        say(why, wl, "the PPE closed the connection during attach (%s)", dti_strerror(nfd));
        return nfd;
    }
    if (r.type == DTI_CTL_REFUSED) {
        for (int i = 0; i < nfd; i++)
            dti__sys_close(fds[i]);
        return refused(&r, why, wl);
    }
    if (r.type != DTI_CTL_WELCOME || nfd != 2 || r.abi_version != DTI_ABI_VERSION) {
        for (int i = 0; i < nfd; i++)
            dti__sys_close(fds[i]);
        if (r.type == DTI_CTL_WELCOME && r.abi_version != DTI_ABI_VERSION) {
            say(why, wl, "DTI ABI version mismatch: libdti %u, PPE %u", DTI_ABI_VERSION, r.abi_version);
            return -DTI_E_VERSION;
        }
        say(why, wl, "unexpected answer from the PPE during attach");
        return -DTI_E_PROTOCOL;
    }
    if (r.engine != engine || r.n_engines == 0 || r.n_engines > DTI_MAX_ENGINES) {
        dti__sys_close(fds[0]);
        dti__sys_close(fds[1]);
        say(why, wl, "the PPE answered for engine %u of %u when engine %u was asked for (a PPE with "
            "several engines must route each attach to the engine it names)", r.engine, r.n_engines, engine);
        return -DTI_E_PROTOCOL;
    }
    d->engine = engine;
    *n_engines = r.n_engines;
    d->doorbell_fd = dti__fd_aside(fds[1]);
    d->region_fd = dti__fd_aside(fds[0]);
    return dti__map_region(d, d->region_fd, -1, why, wl);
}

int dti__connect_control(const char *path, int *fd_out, char *why, size_t wl)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        say(why, wl, "control socket path is too long: %s", path);
        return -ENAMETOOLONG;
    }
    strcpy(sa.sun_path, path);
    int fd = dti__sys_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        say(why, wl, "socket(AF_UNIX): %s", strerror(e));
        return -e;
    }
    if (dti__sys_connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        int rc = (e == EACCES || e == EPERM) ? -DTI_E_DENIED : -DTI_E_NO_ENGINE;
        say(why, wl, "%s at %s (connect: %s)",
            rc == -DTI_E_DENIED ? "no permission to reach the PPE" : "no PPE", path, strerror(e));
        dti__sys_close(fd);
        return rc;
    }
    *fd_out = dti__fd_aside(fd);
    return 0;
}

int dti_attach(const struct dti_attach_opts *opts, dti_t **out, char *why, size_t why_len)
{
    const char *path = opts && opts->socket_path ? opts->socket_path : getenv("ETA_SOCKET");
    if (!path || !*path)
        path = DTI_DEFAULT_SOCKET_PATH;
    if (!out)
        return -EINVAL;
    *out = NULL;
    struct dti_attachment *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->ctl_fd = d->doorbell_fd = d->fork_fd = d->region_fd = d->priv_fd = -1;
    d->n_links = 1;
    d->links[0] = d;
    pthread_mutex_init(&d->lock, NULL);
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
    free(d->alias);
    if (d->tls_key_ok)
        pthread_key_delete(d->tls_key);
    if (d->base)
        munmap(d->base, d->size);
    if (d->ctl_fd >= 0)
        dti__sys_close(d->ctl_fd);
    if (d->doorbell_fd >= 0)
        dti__sys_close(d->doorbell_fd);
    if (d->region_fd >= 0)
        dti__sys_close(d->region_fd);
    if (d->priv_fd >= 0)
        dti__sys_close(d->priv_fd);
    if (d->priv)
        munmap(d->priv, sizeof(struct dti_sock_priv) * d->limits.max_sockets);
    free(d->closed_gen);
    free(d->pool_bitmap);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

static void mark_dead(struct dti_attachment *d, int reason);

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
    mark_dead(l, DTI_E_ENGINE_GONE);
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
        mark_dead(d->links[e], DTI_E_ENGINE_GONE);
    return dti_retire(d);
}

int dti_control_fd(dti_t *d) { return d->ctl_fd; }

void dti_get_limits(const dti_t *d, struct dti_limits *out) { *out = d->limits; }

/* ---- liveness -------------------------------------------------------------- */

static void mark_dead(struct dti_attachment *d, int reason)
{
    if (!__atomic_load_n(&d->dead, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&d->dead_reason, reason, __ATOMIC_RELAXED);
        __atomic_store_n(&d->dead, true, __ATOMIC_RELEASE);
    }
}

/* The region flag is free to read; the control socket check is one poll()
 * and is done only when the caller is idle anyway. */
bool dti__check_alive(struct dti_attachment *d, bool allow_syscall)
{
    if (__atomic_load_n(&d->dead, __ATOMIC_ACQUIRE))
        return false;
    uint32_t st = DTI_LOAD(&d->hdr->engine_state);
    if (st != DTI_ENGINE_ALIVE) {
        mark_dead(d, st == DTI_ENGINE_BROKEN ? DTI_E_BROKEN : DTI_E_ENGINE_GONE);
        return false;
    }
    if (allow_syscall) {
        struct pollfd p = {.fd = d->ctl_fd, .events = POLLRDHUP};
        if (dti__sys_poll0(&p, 1) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))) {
            mark_dead(d, DTI_E_ENGINE_GONE);
            return false;
        }
    }
    return true;
}

/* Alive while every engine serves us: losing one engine is losing the PPE
 * (its sockets are gone), so the application hears it at once. */
int dti_engine_alive(dti_t *d)
{
    bool alive = true;
    for (uint32_t e = 0; e < d->n_links; e++)
        alive &= dti__check_alive(d->links[e], true);
    return alive ? 1 : 0;
}

void dti__doorbell_write(struct dti_attachment *d)
{
    uint64_t one = 1;
    ssize_t n = dti__sys_write(d->doorbell_fd, &one, sizeof one);
    (void)n; /* EAGAIN: the counter is saturated, the engine wakes anyway */
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
    int rc = ctl_send_fd(d->ctl_fd, &m, sv[1]);
    dti__sys_close(sv[1]);
    struct dti_ctl_msg r;
    int fd = -1;
    if (rc == 0)
        rc = ctl_recv(d->ctl_fd, &r, &fd, 1);
    if (rc > 0)
        dti__sys_close(fd); /* the PPE sends none with this answer */
    if (rc >= 0 && r.type == DTI_CTL_FORKED) {
        d->fork_fd = dti__fd_aside(sv[0]);
        return 0;
    }
    dti__sys_close(sv[0]);
    if (rc == -DTI_E_ENGINE_GONE || rc == -EPIPE || rc == -ECONNRESET) {
        mark_dead(d, DTI_E_ENGINE_GONE);
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
            mark_dead(d->links[e], -rc);
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
        mark_dead(d, -rc);
        return rc;
    }
    /* Tells the PPE (eta-stat) who we are; no answer. */
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_HELLO, .abi_version = DTI_ABI_VERSION,
                            .pid = (uint32_t)getpid()};
    (void)dti__sys_send(d->ctl_fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    return 0;
}

/* For exec.c: the control protocol's helpers. */
void dti__init_tls(struct dti_attachment *d)
{
    if (pthread_key_create(&d->tls_key, destroy_tls_ctx) == 0)
        d->tls_key_ok = true;
}
int dti__ctl_send(int fd, const struct dti_ctl_msg *m) { return ctl_send(fd, m); }
int dti__ctl_send_fd(int fd, const struct dti_ctl_msg *m, int pass) { return ctl_send_fd(fd, m, pass); }
int dti__ctl_recv(int fd, struct dti_ctl_msg *m, int *fds, int max_fds) { return ctl_recv(fd, m, fds, max_fds); }
void dti__mark_dead(struct dti_attachment *d, int reason) { mark_dead(d, reason); }
