/* Passing sockets between processes (SCM_RIGHTS): the sender registers a
 * socket it sends (dti_pass), the receiver claims it with the descriptor it
 * received (dti_claim). The PPE matches the two open files itself; see
 * dti/README.md "Passing sockets". */
#include "internal.h"
#include "sys.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void say(char *why, size_t wl, const char *text)
{
    if (why && wl)
        snprintf(why, wl, "%s", text);
}

/* Sends m with n descriptors. */
static int send_fds(int ctl_fd, const struct dti_ctl_msg *m, const int *fds, int n)
{
    union {
        char buf[CMSG_SPACE(sizeof(int) * 3)];
        struct cmsghdr align;
    } cbuf;
    memset(&cbuf, 0, sizeof cbuf);
    struct iovec iov = {(void *)m, sizeof *m};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n);
    for (;;) {
        ssize_t r = dti__sys_sendmsg(ctl_fd, &mh, MSG_NOSIGNAL);
        if (r == (ssize_t)sizeof *m)
            return 0;
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 ? -errno : -DTI_E_PROTOCOL;
    }
}

/* One request and its answer, under the attachment's lock (no other thread
 * halfway through a request on the control socket). fds_in: up to 3 from the
 * answer. Returns the answer's descriptor count, or an error. */
static int round_trip(struct dti_attachment *d, const struct dti_ctl_msg *m, const int *fds, int n,
                      struct dti_ctl_msg *r, int *fds_in, char *why, size_t wl)
{
    pthread_mutex_lock(&d->lock);
    int rc = send_fds(d->ctl_fd, m, fds, n);
    int got = 0;
    if (rc == 0)
        got = rc = dti__ctl_recv(d->ctl_fd, r, fds_in, 3);
    pthread_mutex_unlock(&d->lock);
    if (rc == -DTI_E_ENGINE_GONE || rc == -EPIPE || rc == -ECONNRESET) {
        dti__mark_dead(d, DTI_E_ENGINE_GONE);
        say(why, wl, "the PPE is gone");
        return -DTI_E_ENGINE_GONE;
    }
    if (rc < 0) {
        say(why, wl, dti_strerror(rc));
        return rc;
    }
    if (r->type == DTI_CTL_REFUSED) {
        r->text[sizeof r->text - 1] = 0;
        say(why, wl, r->text);
        for (int i = 0; i < got; i++)
            dti__sys_close(fds_in[i]);
        return r->status > 0 ? -r->status : -DTI_E_PROTOCOL;
    }
    return got;
}

static int pass_msg(dti_t *d, dti_sock_t s, int fd, int withdraw, char *why, size_t wl)
{
    if (!d || fd < 0 || s == DTI_SOCK_INVALID)
        return -EINVAL;
    if (d->n_links > 1) {
        say(why, wl, "the PPE runs several engines: sockets are process-private there");
        return -EOPNOTSUPP;
    }
    if (!dti__check_alive(d, false)) {
        say(why, wl, "the PPE is gone");
        return -d->dead_reason;
    }
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_PASS, .abi_version = DTI_ABI_VERSION,
                            .status = withdraw, .index = s, .pid = (uint32_t)getpid()};
    int fds[3] = {fd, d->region_fd, d->priv_fd};
    struct dti_ctl_msg r;
    int in[3];
    int rc = round_trip(d, &m, fds, 3, &r, in, why, wl);
    if (rc < 0)
        return rc;
    for (int i = 0; i < rc; i++)
        dti__sys_close(in[i]); /* the PPE sends none with this answer */
    return r.type == DTI_CTL_PASSED ? 0 : -DTI_E_PROTOCOL;
}

int dti_pass(dti_t *d, dti_sock_t s, int fd, char *why, size_t wl) { return pass_msg(d, s, fd, 0, why, wl); }

int dti_pass_withdraw(dti_t *d, dti_sock_t s, int fd) { return pass_msg(d, s, fd, 1, NULL, 0); }

int dti_claim(dti_t *d, int fd, int may_join, dti_sock_t *h, dti_t **joined, char *why, size_t wl)
{
    if (!d || fd < 0 || !h || !joined)
        return -EINVAL;
    *h = DTI_SOCK_INVALID;
    *joined = NULL;
    if (d->n_links > 1) {
        say(why, wl, "the PPE runs several engines: sockets are process-private there");
        return -EOPNOTSUPP;
    }
    if (!dti__check_alive(d, false)) {
        say(why, wl, "the PPE is gone");
        return -d->dead_reason;
    }
    int sv[2] = {-1, -1};
    if (may_join && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_CLAIM, .abi_version = DTI_ABI_VERSION,
                            .pid = (uint32_t)getpid()};
    int fds[2] = {fd, sv[1]};
    struct dti_ctl_msg r;
    int in[3];
    int rc = round_trip(d, &m, fds, may_join ? 2 : 1, &r, in, why, wl);
    if (sv[1] >= 0)
        dti__sys_close(sv[1]);
    if (rc < 0 || r.type != DTI_CTL_CLAIMED || (r.status == 1 && rc != 3) || (r.status == 0 && rc != 0)) {
        for (int i = 0; rc > 0 && i < rc; i++)
            dti__sys_close(in[i]);
        if (sv[0] >= 0)
            dti__sys_close(sv[0]);
        if (rc >= 0)
            say(why, wl, "malformed answer from the PPE");
        return rc < 0 ? rc : -DTI_E_PROTOCOL;
    }
    *h = r.index;
    if (r.status == 0) {
        if (sv[0] >= 0)
            dti__sys_close(sv[0]);
        return 0;
    }
    /* A member of the sender's group now: the same region the sender maps,
     * attached as an exec'd image adopts its parent's. */
    struct dti_exec_fds joined_fds = {sv[0], in[0], in[1], in[2]};
    rc = dti_adopt_exec(&joined_fds, joined, why, wl);
    if (rc < 0) {
        *h = DTI_SOCK_INVALID;
        if (rc == -EBADF) /* refused before it took them (it closes them once it has) */
            for (int i = 0; i < 4; i++)
                dti__sys_close(i ? in[i - 1] : sv[0]);
        return rc;
    }
    return 1;
}
