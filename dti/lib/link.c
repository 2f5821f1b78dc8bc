/* libdti layer 1, link (link.h): one engine's attachment. The control
 * connection's messages, connecting and the HELLO/WELCOME handshake, the
 * region mapped and checked, the engine's liveness and the doorbell. Calls
 * only base (layer 0). */
#include "link.h"
#include "sys.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

extern char *program_invocation_short_name;

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

int dti__ctl_send(int fd, const struct dti_ctl_msg *m)
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
int dti__ctl_send_fd(int fd, const struct dti_ctl_msg *m, int pass)
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
int dti__ctl_recv(int fd, struct dti_ctl_msg *m, int *fds, int max_fds)
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
    int rc = dti__ctl_send(d->ctl_fd, &m);
    if (rc < 0) {
        say(why, wl, "cannot talk to the PPE: %s", dti_strerror(rc));
        return rc;
    }
    int fds[2] = {-1, -1};
    struct dti_ctl_msg r;
    int nfd = dti__ctl_recv(d->ctl_fd, &r, fds, 2);
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

/* ---- liveness -------------------------------------------------------------- */

void dti__mark_dead(struct dti_attachment *d, int reason)
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
        dti__mark_dead(d, st == DTI_ENGINE_BROKEN ? DTI_E_BROKEN : DTI_E_ENGINE_GONE);
        return false;
    }
    if (allow_syscall) {
        struct pollfd p = {.fd = d->ctl_fd, .events = POLLRDHUP};
        if (dti__sys_poll0(&p, 1) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))) {
            dti__mark_dead(d, DTI_E_ENGINE_GONE);
            return false;
        }
    }
    return true;
}

void dti__doorbell_write(struct dti_attachment *d)
{
    uint64_t one = 1;
    ssize_t n = dti__sys_write(d->doorbell_fd, &one, sizeof one);
    (void)n; /* EAGAIN: the counter is saturated, the engine wakes anyway */
}

/* ---- a link's life ------------------------------------------------------------ */

struct dti_attachment *dti__link_new(void)
{
    struct dti_attachment *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->ctl_fd = d->doorbell_fd = d->fork_fd = d->region_fd = d->priv_fd = -1;
    pthread_mutex_init(&d->lock, NULL);
    return d;
}

void dti__link_free(struct dti_attachment *d)
{
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
