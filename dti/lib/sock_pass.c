/* libdti layer 4, public calls: passing sockets between processes
 * (SCM_RIGHTS). The sender registers a socket it sends (dti_pass), the
 * receiver claims it with the descriptor it received (dti_claim). The PPE
 * matches the two open files itself; see dti/README.md "Passing sockets". */
#include "api.h"
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

/* The index a ticket carries (PASS status 2): several engines, no socket of
 * this engine; a withdraw names it the same way. */
#define PASS_TICKET DTI_LOCAL_MASK

/* PASS's kinds (its status). */
enum { PASS_IN_FLIGHT = 0, PASS_WITHDRAW = 1, PASS_OFFER = 3 };

/* One PASS (or its withdrawal, or a standing offer) on link l: socket
 * `local` of its engine, or a ticket (DTI_SOCK_INVALID); primary: the engine
 * of the application's own socket. */
static int pass_one(struct dti_attachment *l, dti_sock_t local, uint32_t primary, int fd, int kind,
                    char *why, size_t wl)
{
    bool ticket = local == DTI_SOCK_INVALID;
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_PASS, .abi_version = DTI_ABI_VERSION,
                            .status = kind == PASS_WITHDRAW ? 1 : kind == PASS_OFFER ? 3 : ticket ? 2 : 0,
                            .index = ticket ? PASS_TICKET : local,
                            .pid = (uint32_t)getpid(), .engine = primary};
    int fds[3] = {fd, l->region_fd, l->priv_fd};
    struct dti_ctl_msg r;
    int in[3];
    int rc = round_trip(l, &m, fds, 3, &r, in, why, wl);
    if (rc < 0)
        return rc;
    for (int i = 0; i < rc; i++)
        dti__sys_close(in[i]); /* the PPE sends none with this answer */
    return r.type == DTI_CTL_PASSED ? 0 : -DTI_E_PROTOCOL;
}

/* Passes (or withdraws) what application handle s stands for on every
 * engine: its socket (each member of a listener group) where it lives, a
 * ticket elsewhere, so that a receiver of another group can join the
 * sender's on every engine. The application's own socket goes first: a
 * handle the sender does not hold is refused before anything is in flight. */
static int pass_msg(dti_t *d, dti_sock_t s, int fd, int kind, char *why, size_t wl)
{
    if (!d || fd < 0 || s == DTI_SOCK_INVALID)
        return -EINVAL;
    if (!dti__check_alive(d, false)) {
        say(why, wl, "the PPE is gone");
        return -d->dead_reason;
    }
    dti_sock_t part[DTI_MAX_ENGINES];
    uint32_t primary = dti__parts_of(d, s, part);
    if (primary >= d->n_links) {
        say(why, wl, "no such socket");
        return -DTI_E_BAD_HANDLE;
    }
    int first_err = 0;
    for (uint32_t k = 0; k < d->n_links; k++) {
        uint32_t e = (primary + k) % d->n_links;
        if (kind == PASS_OFFER && part[e] == DTI_SOCK_INVALID) {
            say(why, wl, "a listener without a member on every engine cannot be offered");
            return -EINVAL; /* offers made on other engines go with the socket */
        }
        int rc = pass_one(d->links[e], part[e], primary, fd, kind, why, wl);
        if (rc < 0 && kind == PASS_IN_FLIGHT) {
            for (uint32_t j = 0; j < k; j++) { /* nothing half in flight */
                uint32_t f = (primary + j) % d->n_links;
                (void)pass_one(d->links[f], part[f], primary, fd, PASS_WITHDRAW, NULL, 0);
            }
            return rc;
        }
        if (rc < 0 && kind == PASS_OFFER)
            return rc;
        if (rc < 0 && !first_err)
            first_err = rc;
    }
    return first_err;
}

int dti_pass(dti_t *d, dti_sock_t s, int fd, char *why, size_t wl)
{
    return pass_msg(d, s, fd, PASS_IN_FLIGHT, why, wl);
}

int dti_pass_withdraw(dti_t *d, dti_sock_t s, int fd) { return pass_msg(d, s, fd, PASS_WITHDRAW, NULL, 0); }

int dti_offer(dti_t *d, dti_sock_t s, int fd, char *why, size_t wl) { return pass_msg(d, s, fd, PASS_OFFER, why, wl); }

/* What one engine answered a CLAIM. */
struct claim_answer {
    int status;         /* 0: a hold in the claimant's group; 1: joined the sender's */
    dti_sock_t h;       /* an engine handle, DTI_SOCK_INVALID for a ticket */
    uint32_t primary;   /* the engine of the application's own socket */
    struct dti_exec_fds join; /* status 1: the new member's descriptors */
};

/* CLAIM on link l. */
static int claim_one(struct dti_attachment *l, int fd, int may_join, struct claim_answer *a, char *why, size_t wl)
{
    a->join = (struct dti_exec_fds){-1, -1, -1, -1, -1};
    int sv[2] = {-1, -1};
    if (may_join && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_CLAIM, .abi_version = DTI_ABI_VERSION,
                            .pid = (uint32_t)getpid()};
    int fds[2] = {fd, sv[1]};
    struct dti_ctl_msg r;
    int in[3];
    int rc = round_trip(l, &m, fds, may_join ? 2 : 1, &r, in, why, wl);
    if (sv[1] >= 0)
        dti__sys_close(sv[1]);
    if (rc < 0 || r.type != DTI_CTL_CLAIMED || (r.status == 1 && rc != 3) || (r.status == 0 && rc != 0) ||
        r.status < 0 || r.status > 1) {
        for (int i = 0; rc > 0 && i < rc; i++)
            dti__sys_close(in[i]);
        if (sv[0] >= 0)
            dti__sys_close(sv[0]);
        if (rc >= 0)
            say(why, wl, "malformed answer from the PPE");
        return rc < 0 ? rc : -DTI_E_PROTOCOL;
    }
    a->status = r.status;
    a->h = r.index == DTI_SOCK_INVALID ? DTI_SOCK_INVALID : (r.index & DTI_LOCAL_MASK) | l->engine << DTI_ENGINE_SHIFT;
    a->primary = r.engine;
    if (r.status == 1)
        a->join = (struct dti_exec_fds){sv[0], in[0], in[1], in[2], -1};
    else if (sv[0] >= 0)
        dti__sys_close(sv[0]);
    return 0;
}

static void close_join(const struct dti_exec_fds *f)
{
    int fds[] = {f->ctl_fd, f->region_fd, f->priv_fd, f->doorbell_fd};
    for (unsigned i = 0; i < 4; i++)
        if (fds[i] >= 0)
            dti__sys_close(fds[i]);
}

/* Undoes the claims of engines [0, n) (a later engine refused): joined
 * members leave with their control ends; holds in the claimant's own group
 * are given back. */
static void unclaim(dti_t *d, struct claim_answer *a, uint32_t n)
{
    int err = 0;
    dti_ctx_t *c = NULL;
    for (uint32_t e = 0; e < n; e++) {
        if (a[e].status == 1)
            close_join(&a[e].join);
        else if (a[e].h != DTI_SOCK_INVALID && (c || (c = dti_ctx_get(d, &err))))
            (void)dti__release_now(c, a[e].h);
    }
}

/* The application's handle for what was claimed, and its listener group
 * made again in attachment `in` when it has members on several engines. */
static int assemble(struct dti_attachment *in, const struct claim_answer *a, uint32_t n, dti_sock_t *h)
{
    uint32_t primary = a[0].primary;
    if (primary >= n || a[primary].h == DTI_SOCK_INVALID)
        return -DTI_E_PROTOCOL;
    dti_sock_t members[DTI_MAX_ENGINES];
    uint32_t k = 0;
    for (uint32_t e = 0; e < n; e++)
        if (a[e].h != DTI_SOCK_INVALID)
            members[k++] = a[e].h;
    *h = a[primary].h;
    return dti__group_restore(in, *h, members, k);
}

int dti_claim(dti_t *d, int fd, int may_join, dti_sock_t *h, dti_t **joined, char *why, size_t wl)
{
    if (!d || fd < 0 || !h || !joined)
        return -EINVAL;
    *h = DTI_SOCK_INVALID;
    *joined = NULL;
    if (!dti__check_alive(d, false)) {
        say(why, wl, "the PPE is gone");
        return -d->dead_reason;
    }
    /* Every engine: the first says whether this descriptor is in flight at
     * all; the others agree with it (the sender passed on each). */
    struct claim_answer a[DTI_MAX_ENGINES];
    uint32_t n = d->n_links;
    for (uint32_t e = 0; e < n; e++) {
        int rc = claim_one(d->links[e], fd, may_join, &a[e], why, wl);
        if (rc == 0 && e > 0 && (a[e].status != a[0].status || a[e].primary != a[0].primary)) {
            say(why, wl, "the PPE's engines disagree about the socket passed");
            rc = -DTI_E_PROTOCOL;
            e++; /* this one is undone too */
        }
        if (rc < 0) {
            unclaim(d, a, e);
            return rc;
        }
    }
    if (a[0].status == 0) {
        int rc = assemble(d, a, n, h);
        if (rc < 0) {
            unclaim(d, a, n);
            *h = DTI_SOCK_INVALID;
            return rc;
        }
        /* This process may have closed the handle itself after the pass (a
         * socket passed to itself, its first descriptor closed before the
         * receive: Linux keeps the socket while it is in flight, and so does
         * the PPE): it holds the socket again, so the handle is its own again. */
        for (uint32_t e = 0; e < n; e++) {
            struct dti_attachment *l = d->links[e];
            const dti_sock_t local = a[e].h & DTI_LOCAL_MASK; /* (the engine's bits off) */
            const uint32_t slot = dti__slot(local);
            if (a[e].h != DTI_SOCK_INVALID && slot < l->limits.max_sockets && l->closed_gen[slot] == dti__gen(local))
                l->closed_gen[slot] = 0;
        }
        return rc;
    }
    /* A member of the sender's group now, on every engine: the same regions
     * the sender maps, attached as an exec'd image adopts its parent's. */
    struct dti_attachment *j = NULL;
    int rc = dti__adopt_one(&a[0].join, 0, true, &j, why, wl);
    if (rc == -EBADF)
        close_join(&a[0].join); /* refused before it took them */
    if (rc < 0) {
        for (uint32_t e = 1; e < n; e++)
            close_join(&a[e].join);
        return rc;
    }
    struct dti_exec_fds per[DTI_MAX_ENGINES];
    for (uint32_t e = 0; e < n; e++)
        per[e] = a[e].join;
    rc = dti__adopt_links(j, per, n, why, wl);
    if (rc == 0)
        rc = assemble(j, a, n, h);
    if (rc < 0) {
        dti_detach(j);
        *h = DTI_SOCK_INVALID;
        return rc;
    }
    *joined = j;
    return 1;
}
