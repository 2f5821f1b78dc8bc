/* exec: handing this process's sockets to the image exec() starts, and that
 * image adopting them. The region and the app-side socket state are memfds
 * (they hold the truth: ring positions, socket table), so the new image maps
 * the same memory; what was private to the old image (contexts, the closed
 * handles, the pool's allocation map) starts empty, as in a fork child. */
#include "internal.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static void say(char *why, size_t wl, const char *fmt, ...)
{
    if (!why || !wl)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, wl, fmt, ap);
    va_end(ap);
}

static int set_cloexec(int fd, bool on)
{
    int fl = dti__sys_fcntl(fd, F_GETFD, 0);
    if (fl < 0)
        return -errno;
    fl = on ? fl | FD_CLOEXEC : fl & ~FD_CLOEXEC;
    return dti__sys_fcntl(fd, F_SETFD, fl) < 0 ? -errno : 0;
}

/* One EXEC (first batch, with the member's end) or EXEC_HOLD message and
 * its answer: how many of the batch the member got. */
static int exec_batch(struct dti_attachment *d, uint32_t type, int pass, const dti_sock_t *h, unsigned n)
{
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = type, .abi_version = DTI_ABI_VERSION,
                            .pid = (uint32_t)getpid(), .index = n};
    for (unsigned i = 0; i < n; i++)
        memcpy(m.text + i * sizeof(uint32_t), &h[i], sizeof(uint32_t));
    int rc = pass >= 0 ? dti__ctl_send_fd(d->ctl_fd, &m, pass) : dti__ctl_send(d->ctl_fd, &m);
    struct dti_ctl_msg r;
    int fd = -1;
    if (rc == 0)
        rc = dti__ctl_recv(d->ctl_fd, &r, &fd, 1);
    if (rc > 0)
        dti__sys_close(fd); /* the PPE sends none with this answer */
    if (rc == -DTI_E_ENGINE_GONE || rc == -EPIPE || rc == -ECONNRESET) {
        dti__mark_dead(d, DTI_E_ENGINE_GONE);
        return -DTI_E_ENGINE_GONE;
    }
    if (rc < 0)
        return rc;
    if (r.type == DTI_CTL_EXECED)
        return r.status >= 0 && (unsigned)r.status <= n ? r.status : -DTI_E_PROTOCOL;
    return r.type == DTI_CTL_REFUSED && r.status > 0 ? -r.status : -DTI_E_PROTOCOL;
}

int dti_exec_prepare(dti_t *d, const dti_sock_t *keep, unsigned n, struct dti_exec_fds *out)
{
    if (!d || !out || (n && !keep))
        return -EINVAL;
    *out = (struct dti_exec_fds){-1, -1, -1, -1};
    if (d->n_links > 1)
        return -EOPNOTSUPP; /* listener groups and moved sockets are process-private */
    if (!dti__check_alive(d, false))
        return -d->dead_reason;
    if (d->region_fd < 0 || d->priv_fd < 0 || d->doorbell_fd < 0)
        return -EBADF;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    /* No other thread halfway through a request on the control socket. */
    pthread_mutex_lock(&d->lock);
    unsigned first = n < DTI_CTL_HANDLES ? n : DTI_CTL_HANDLES;
    int rc = exec_batch(d, DTI_CTL_EXEC, sv[1], keep, first);
    dti__sys_close(sv[1]);
    int granted = rc;
    for (unsigned at = first; rc >= 0 && at < n; at += DTI_CTL_HANDLES) {
        unsigned k = n - at < DTI_CTL_HANDLES ? n - at : DTI_CTL_HANDLES;
        rc = exec_batch(d, DTI_CTL_EXEC_HOLD, -1, keep + at, k);
        granted += rc;
    }
    pthread_mutex_unlock(&d->lock);
    if (rc < 0) {
        dti__sys_close(sv[0]); /* the member, if made, leaves */
        return rc;
    }
    *out = (struct dti_exec_fds){sv[0], d->region_fd, d->priv_fd, d->doorbell_fd};
    if ((rc = set_cloexec(sv[0], false)) < 0 || (rc = set_cloexec(d->region_fd, false)) < 0 ||
        (rc = set_cloexec(d->priv_fd, false)) < 0 || (rc = set_cloexec(d->doorbell_fd, false)) < 0) {
        dti_exec_abort(d, out);
        *out = (struct dti_exec_fds){-1, -1, -1, -1};
        return rc;
    }
    return granted;
}

void dti_exec_abort(dti_t *d, const struct dti_exec_fds *fds)
{
    if (!d || !fds)
        return;
    if (fds->ctl_fd >= 0)
        dti__sys_close(fds->ctl_fd);
    int own[] = {d->region_fd, d->priv_fd, d->doorbell_fd};
    for (unsigned i = 0; i < 3; i++)
        if (own[i] >= 0)
            (void)set_cloexec(own[i], true);
}

/* The descriptor is what the handover says it is. */
static bool is_seqpacket(int fd)
{
    int type = 0, domain = 0;
    socklen_t tl = sizeof type, dl = sizeof domain;
    return dti__sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 &&
           dti__sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) == 0 && type == SOCK_SEQPACKET &&
           domain == AF_UNIX;
}

static bool is_anon_inode(int fd, const char *what)
{
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0)
        return false;
    target[n] = 0;
    return strstr(target, what) != NULL;
}

static bool is_memfd(int fd)
{
    struct stat st;
    char path[64], target[96];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return false;
    target[n] = 0;
    return strncmp(target, "/memfd:", 7) == 0;
}

int dti_adopt_exec(const struct dti_exec_fds *fds, dti_t **out, char *why, size_t wl)
{
    if (!fds || !out)
        return -EINVAL;
    *out = NULL;
    if (fds->ctl_fd < 0 || !is_seqpacket(fds->ctl_fd)) {
        say(why, wl, "descriptor %d is not a control connection", fds->ctl_fd);
        return -EBADF;
    }
    if (fds->region_fd < 0 || !is_memfd(fds->region_fd) || fds->priv_fd < 0 || !is_memfd(fds->priv_fd)) {
        say(why, wl, "descriptors %d and %d are not the shared region and socket state", fds->region_fd,
            fds->priv_fd);
        return -EBADF;
    }
    if (fds->doorbell_fd < 0 || !is_anon_inode(fds->doorbell_fd, "eventfd")) {
        say(why, wl, "descriptor %d is not the doorbell", fds->doorbell_fd);
        return -EBADF;
    }
    struct dti_attachment *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->ctl_fd = d->doorbell_fd = d->fork_fd = d->region_fd = d->priv_fd = -1;
    d->n_links = 1;
    d->links[0] = d;
    pthread_mutex_init(&d->lock, NULL);
    int rc = dti__map_region(d, fds->region_fd, fds->priv_fd, why, wl);
    /* From here the descriptors are this attachment's (dti_detach closes
     * them): close-on-exec again, as at attach. */
    d->ctl_fd = fds->ctl_fd;
    d->region_fd = fds->region_fd;
    d->priv_fd = fds->priv_fd;
    d->doorbell_fd = fds->doorbell_fd;
    int own[] = {d->ctl_fd, d->region_fd, d->priv_fd, d->doorbell_fd};
    for (unsigned i = 0; i < 4; i++)
        (void)set_cloexec(own[i], true);
    d->pool_blocks = 0; /* the old image's allocation map is gone with it */
    if (rc == 0 && !dti__check_alive(d, true)) {
        say(why, wl, "the PPE no longer serves the sockets handed over at exec");
        rc = -d->dead_reason;
    }
    if (rc < 0) {
        dti_detach(d);
        return rc;
    }
    /* Tells the PPE (eta-stat) who we are, and that the member is complete. */
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_HELLO, .abi_version = DTI_ABI_VERSION,
                            .pid = (uint32_t)getpid()};
    snprintf(m.text, sizeof m.text, "%s", program_invocation_short_name);
    (void)dti__sys_send(d->ctl_fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    dti__init_tls(d);
    *out = d;
    return 0;
}

int dti_own_fds(dti_t *d, int *fds, int max)
{
    int n = 0;
    for (uint32_t e = 0; d && e < d->n_links; e++) {
        struct dti_attachment *l = d->links[e];
        int own[] = {l->ctl_fd, l->doorbell_fd, l->region_fd, l->priv_fd};
        for (unsigned i = 0; i < 4; i++)
            if (own[i] >= 0) {
                if (n < max)
                    fds[n] = own[i];
                n++;
            }
    }
    return n;
}
