/* Accelerated sockets passed to another process over a UNIX socket
 * (SCM_RIGHTS): Node.js's cluster module, prefork masters handing
 * connections or listeners to workers, systemd-style socket passing.
 *
 * The kernel moves only the placeholder. So the sender's sendmsg first tells
 * the PPE which socket is in flight (dti_pass: the PPE keeps it open until
 * it is claimed, as the kernel keeps an in-flight file), and the receiver's
 * recvmsg, for each stream socket it received, asks the PPE whether it is one
 * (dti_claim: the PPE compares the open files; the application names
 * nothing). The receiver then holds the socket too, as after fork: both may
 * use it, it lives until the last close. A receiver of another process
 * group joins the sender's group when it has no accelerated sockets of its
 * own; otherwise the socket cannot be used there, and that is said loudly. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accept.h"
#include "attach.h"
#include "config.h"
#include "decide.h"
#include "fdtable.h"
#include "mcast_record.h"
#include "pass_fds.h"
#include "real.h"
#include "shim.h"
#include "sock6.h"
#include "sockobj.h"
#include "udp.h"
#include "udp_mcast.h"
#include "wait.h"

/* Calls fn(fd, arg) for each descriptor msg carries in SCM_RIGHTS; stops
 * when fn returns false. */
static void each_passed(const struct msghdr *msg, bool (*fn)(int fd, void *arg), void *arg)
{
    if (!msg->msg_control || msg->msg_controllen < sizeof(struct cmsghdr))
        return;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR((struct msghdr *)msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len < CMSG_LEN(0))
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const unsigned char *data = CMSG_DATA(cm);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, data + i * sizeof(int), sizeof fd); /* CMSG_DATA may be unaligned */
            if (!fn(fd, arg))
                return;
        }
    }
}

/* ---- a UDP socket's memberships beside the pass ---------------------------- */

/* The record of a passed UDP socket's placeholder fd (mcast_record.h
 * eta_pass_mcast_head): <socket>.preload/mcast-<dev>-<ino>. False when the
 * descriptor cannot be read. */
static bool mcast_path(int fd, char *path, size_t len)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return false;
    snprintf(path, len, "%s.preload/mcast-%llx-%llx", eta_cfg.socket_path, (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    return true;
}

/* The sender, before the pass: the socket's engine memberships and an
 * IP_MULTICAST_IF only the shim holds, which the receiver cannot read from
 * the PPE or the placeholder, written whole (a new file renamed over the
 * name); none: no file (an older one of the same inode goes). Best effort:
 * where it cannot be written, the receiver has no record, as before. */
static void mcast_write(int fd, const struct eta_sock *s)
{
    char path[320], tmp[340];
    if (!mcast_path(fd, path, sizeof path))
        return;
    struct {
        struct eta_pass_mcast_head h;
        struct eta_mcast_rec r[ETA_MCAST_REC_MAX];
    } rec;
    memset(&rec, 0, sizeof rec);
    rec.h.n = eta_udp_mcast_export(s, rec.r);
    const bool ours = s->mc_if4_ours && s->mc_if4;
    if (!rec.h.n && !ours) {
        (void)unlink(path);
        return;
    }
    rec.h.magic = ETA_PASS_MCAST_MAGIC;
    rec.h.version = ETA_PASS_MCAST_VERSION;
    rec.h.rec_size = sizeof rec.r[0];
    rec.h.flags = (s->v6 ? ETA_PASS_MCAST_V6 : 0) | (ours ? ETA_PASS_MCAST_IF4_OURS : 0);
    rec.h.mc_if4 = s->mc_if4;
    const size_t bytes = sizeof rec.h + rec.h.n * sizeof rec.r[0];
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    int w = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = w >= 0 && real_write(w, &rec, bytes) == (ssize_t)bytes;
    if (w >= 0)
        real_close(w);
    if (!ok || rename(tmp, path) != 0) {
        ETA_DEBUG("fd %d: cannot write %s (%s): its receiver will not join its memberships again after a PPE "
                  "restart", fd, path, strerror(errno));
        (void)unlink(tmp);
    }
}

/* The receiver, once it holds the socket: the sender's record, checked
 * (mcast_record.c), then removed. A bad one is said and ignored. */
static void mcast_read(int fd, struct eta_sock *s)
{
    char path[320];
    if (!mcast_path(fd, path, sizeof path))
        return;
    int r = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (r < 0)
        return; /* none: no memberships, or a sender that could not write it */
    struct eta_pass_mcast_head h;
    struct eta_mcast_rec m[ETA_MCAST_REC_MAX];
    char why[160] = "";
    int rc = eta_pass_mcast_read(r, s->v6, &h, m, why, sizeof why);
    real_close(r);
    if (rc < 0) {
        eta_log("warning: fd %d received: ignoring %s (%s): its multicast memberships are not joined again "
                "after a PPE restart", fd, path, why);
        return;
    }
    (void)unlink(path);
    eta_udp_mcast_import(s, m, h.n);
    if (h.flags & ETA_PASS_MCAST_IF4_OURS) {
        s->mc_if4 = h.mc_if4;
        s->mc_if4_ours = true;
    }
}

/* ---- the sender ----------------------------------------------------------- */

struct pass_run {
    dti_t *d;
    int failed_fd; /* the one the PPE refused, -1: none */
    int err;
    char why[160];
    unsigned registered;
};

static bool register_one(int fd, void *arg)
{
    struct pass_run *p = arg;
    struct eta_sock *s = eta_sock_accel(fd);
    if (!s)
        return true;
    if (s->dgram && p->d)
        mcast_write(fd, s);
    int rc = p->d ? dti_pass(p->d, s->h, fd, p->why, sizeof p->why) : -ENETDOWN;
    if (rc == 0 && s->listening)
        eta_listeners_shared = true; /* two processes accept on it now: one connection at a time */
    eta_obj_put(&s->obj);
    if (rc < 0) {
        p->failed_fd = fd;
        p->err = rc;
        return false;
    }
    p->registered++;
    return true;
}

struct withdraw_run {
    dti_t *d;
    unsigned left; /* how many were registered: only those are withdrawn */
};

static bool withdraw_one(int fd, void *arg)
{
    struct withdraw_run *w = arg;
    if (w->left == 0)
        return false;
    struct eta_sock *s = eta_sock_accel(fd);
    if (!s)
        return true;
    (void)dti_pass_withdraw(w->d, s->h, fd);
    eta_obj_put(&s->obj);
    w->left--;
    return true;
}

static void withdraw(dti_t *d, const struct msghdr *msg, unsigned n)
{
    struct withdraw_run w = {d, n};
    if (d && n)
        each_passed(msg, withdraw_one, &w);
}

bool eta_passes_accelerated(const struct msghdr *msg)
{
    if (!atomic_load_explicit(&eta_tracked, memory_order_relaxed))
        return false;
    struct pass_run p = {.d = eta_dti_attached(), .failed_fd = -1};
    each_passed(msg, register_one, &p);
    if (p.failed_fd < 0)
        return false;
    withdraw(p.d, msg, p.registered);
    static _Atomic bool warned;
    ETA_STAT_ADD(bypass_refused, 1);
    if (!atomic_exchange(&warned, true))
        eta_log("warning: sendmsg() passing accelerated socket fd %d to another process (SCM_RIGHTS) is not "
                "possible here (%s): EOPNOTSUPP; nothing was sent",
                p.failed_fd, p.why[0] ? p.why : dti_strerror(p.err));
    errno = EOPNOTSUPP;
    return true;
}

void eta_pass_withdraw(const struct msghdr *msg)
{
    if (!atomic_load_explicit(&eta_tracked, memory_order_relaxed))
        return;
    int saved = errno;
    withdraw(eta_dti_attached(), msg, ~0u);
    errno = saved;
}

/* ---- the receiver --------------------------------------------------------- */

/* A TCP or UDP socket of the kernel's: what a passed accelerated socket
 * arrives as (its placeholder). */
static bool is_inet_socket(int fd, int *domain, bool *dgram)
{
    struct stat st;
    int type = 0, proto = 0;
    socklen_t tl = sizeof type, dl = sizeof *domain, pl = sizeof proto;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || real_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 ||
        real_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, domain, &dl) != 0 || (*domain != AF_INET && *domain != AF_INET6))
        return false;
    *dgram = type == SOCK_DGRAM && real_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &pl) == 0 && proto == IPPROTO_UDP;
    return type == SOCK_STREAM || *dgram;
}

/* A UDP socket received: what its shim kept privately, read back from the
 * placeholder. Bound there to the wildcard or a group, it is a hybrid whose
 * kernel half is that very file (on a shared port a socket the PPE alone
 * holds has its placeholder bound to the PPE's address); the ancillary data
 * its receives carry and UDP_SEGMENT are the kernel socket's options. */
static void adopt_udp(int fd, struct eta_sock *s)
{
    struct sockaddr_in6 a; /* sin_port and sin6_port: the same place */
    socklen_t l = sizeof a;
    memset(&a, 0, sizeof a);
    if (real_getsockname(fd, (struct sockaddr *)&a, &l) == 0 && a.sin6_port) {
        s->bound_kernel = true;
        s->kernel_port = ntohs(a.sin6_port);
        if (a.sin6_family == AF_INET6) {
            s->hybrid = IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr) || IN6_IS_ADDR_MULTICAST(&a.sin6_addr);
        } else {
            struct sockaddr_in in;
            memcpy(&in, &a, sizeof in);
            const uint32_t ip = ntohl(in.sin_addr.s_addr);
            s->hybrid = ip == 0 || IN_MULTICAST(ip);
        }
        /* A shared port: any unconnected placeholder is read too (udp_sock.c
         * eta_udp_read_placeholder: host-local senders reach it there). */
        struct sockaddr_in6 peer;
        socklen_t pl = sizeof peer;
        if (!s->hybrid && eta_net.self_shared && real_getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
            s->hybrid = s->udp_kself = true;
    }
    int on = 0;
    socklen_t ol = sizeof on;
    s->v6only = s->v6 && real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, &ol) == 0 && on;
    eta_udp_cmsg_refresh(fd, s);
    /* IP_MULTICAST_IF naming the PPE's port, where the kernel socket took it
     * (an unshared port's address it could not: that stays the sender's). */
    struct in_addr mif = {0};
    l = sizeof mif;
    if (real_getsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &mif, &l) == 0 && mif.s_addr &&
        eta_net_is_local(&eta_net, ntohl(mif.s_addr)))
        s->mc_if4 = ntohl(mif.s_addr);
    mcast_read(fd, s); /* the engine's memberships, an IP_MULTICAST_IF the kernel socket did not take */
}

/* An accelerated socket of the current attachment that a descriptor of
 * this process names, referenced: any one (h == DTI_SOCK_INVALID) or the one
 * of handle h. NULL: none. */
static struct eta_sock *own_socket(dti_sock_t h)
{
    long tracked = atomic_load(&eta_tracked), seen = 0;
    for (int fd = 0; fd < ETA_FD_MAX && seen < tracked; fd++) {
        struct eta_obj *o = eta_fd_peek(fd);
        if (!o)
            continue;
        seen++;
        struct eta_sock *s = (struct eta_sock *)o;
        if (o->kind == ETA_OBJ_SOCK && atomic_load(&s->state) == ETA_SOCK_ACCEL && s->generation == eta_generation &&
            (h == DTI_SOCK_INVALID || s->h == h) && eta_obj_tryref(o))
            return s;
    }
    return NULL;
}

static bool has_own_sockets(void)
{
    struct eta_sock *s = own_socket(DTI_SOCK_INVALID);
    if (s)
        eta_obj_put(&s->obj);
    return s != NULL;
}

static int timeout_ms(int fd, int name)
{
    struct timeval tv = {0, 0};
    socklen_t l = sizeof tv;
    if (real_getsockopt(fd, SOL_SOCKET, name, &tv, &l) < 0 || (tv.tv_sec == 0 && tv.tv_usec == 0))
        return -1;
    return (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
}

/* An AF_INET6 socket received: its IPv6 address from the PPE (the engine
 * bound it there: s->local6, 0 for ::), IPV6_V6ONLY from the placeholder,
 * the file the sender's shim read it from at bind or listen (and fixed from
 * then on, sockopt.c). */
static void adopt_ip6(dti_ctx_t *c, int fd, dti_sock_t h, struct eta_sock *s)
{
    struct dti_addr6 a6;
    if (dti_getsockname6(c, h, &a6) == 6)
        s->local6 = eta_local6_of(a6.ip);
    int on = 0;
    socklen_t ol = sizeof on;
    s->v6only = s->listening && real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, &ol) == 0 && on;
}

/* Descriptor fd, just received, names socket h from now on. What the
 * sender's shim kept privately is read back from the PPE and the kernel
 * placeholder (which shares the sender's file description). */
static bool adopt_claimed(int fd, int domain, bool dgram, dti_sock_t h)
{
    /* Passed to a process that has it already (to itself, or to a fork child
     * of the sender): one more name of the same socket, as after dup(). */
    struct eta_sock *same = own_socket(h);
    char path[320];
    if (same && dgram && mcast_path(fd, path, sizeof path))
        (void)unlink(path); /* its record here is the one it has */
    if (same) {
        eta_fd_set(fd, &same->obj);
        eta_obj_put(&same->obj);
        return true;
    }
    dti_ctx_t *c = eta_ctx();
    struct dti_sock_info info;
    if (!c || dti_sock_status(c, h, &info) < 0)
        return false;
    struct eta_sock *s = eta_sock_new();
    if (!s)
        return false;
    int accepting = 0;
    socklen_t al = sizeof accepting;
    int fl = real_fcntl(fd, F_GETFL);
    s->h = h;
    s->generation = eta_generation;
    s->dgram = dgram;
    s->listening = !dgram && (info.state & DTI_STATE_LISTENING) != 0;
    s->backlog = SOMAXCONN; /* only read to listen again on a new PPE */
    /* The kernel half of an INADDR_ANY listener listens on this very file. */
    s->hybrid = s->listening && real_getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &al) == 0 && accepting;
    s->bound_kernel = s->hybrid;
    s->v6 = domain == AF_INET6;
    if (dgram)
        adopt_udp(fd, s);
    s->connect_started = !s->listening && !dgram;
    s->connect_reported = true;
    /* A hybrid listener's kernel half is always O_NONBLOCK (the shim's); the
     * program's flag is the file's mark beside it (sockobj.h). */
    atomic_store(&s->nonblock, fl >= 0 && (fl & (s->hybrid ? ETA_HYBRID_NONBLOCK_MARK : O_NONBLOCK)));
    s->rcvtimeo_ms = timeout_ms(fd, SO_RCVTIMEO);
    s->sndtimeo_ms = timeout_ms(fd, SO_SNDTIMEO);
    atomic_store(&s->opts_set, ETA_OPT_ALL); /* set by the sender: a re-listen reads them all back */
    struct dti_addr local = {0, 0};
    if (dti_getsockname(c, h, &local) == 0)
        s->local = local;
    if (!dgram)
        s->kernel_port = s->hybrid ? local.port : 0;
    if (s->v6 && !dgram) /* as the sender bound it, for a re-listen (sock6.c) */
        adopt_ip6(c, fd, h, s);
    else if (s->v6) { /* a UDP socket's IPv6 address, as udp6.c keeps it */
        struct dti_addr6 a6;
        if (dti_getsockname6(c, h, &a6) == 6)
            s->local6 = eta_local6_of(a6.ip);
    }
    if (s->listening)
        eta_listeners_shared = true;
    eta_hmap_put(h, s);
    atomic_store(&s->state, ETA_SOCK_ACCEL);
    eta_fd_set(fd, &s->obj);
    ETA_STAT_ADD(accel_open, 1);
    return true;
}

static void refuse_received(int fd, int rc, const char *why)
{
    static _Atomic bool warned;
    ETA_STAT_ADD(bypass_refused, 1);
    if (!atomic_exchange(&warned, true))
        eta_log("warning: fd %d received from another process is an accelerated socket that cannot be used "
                "here (%s): it stays an unconnected kernel socket", fd, why[0] ? why : dti_strerror(rc));
}

static bool claim_one(int fd, void *arg)
{
    (void)arg;
    int domain = 0;
    bool dgram = false;
    if (!eta_fd_in_range(fd) || eta_fd_peek(fd) || !is_inet_socket(fd, &domain, &dgram))
        return true;
    dti_t *d = eta_dti();
    if (!d || atomic_load(&eta_engine_dead))
        return true; /* no PPE here: nothing can be told apart or used */
    dti_sock_t h = DTI_SOCK_INVALID;
    dti_t *joined = NULL;
    char why[160] = "";
    int rc = dti_claim(d, fd, !has_own_sockets(), &h, &joined, why, sizeof why);
    if (rc == -ENOENT)
        return true; /* a kernel socket of the sender's, not one of the PPE's */
    if (rc == 1 && !eta_attach_join(joined)) {
        dti_detach(joined);
        rc = -EBUSY;
        snprintf(why, sizeof why, "another thread changed the attachment meanwhile");
    }
    if (rc < 0) {
        refuse_received(fd, rc, why);
        return true;
    }
    if (!adopt_claimed(fd, domain, dgram, h))
        refuse_received(fd, -EIO, "its state could not be read from the PPE");
    else
        ETA_DEBUG("fd %d received from another process: accelerated socket %#x%s", fd, h,
                  rc == 1 ? " (joined the sender's process group)" : "");
    return true;
}

void eta_claim_passed(struct msghdr *msg)
{
    if (eta_cfg.disabled || (msg->msg_flags & MSG_CTRUNC && !msg->msg_controllen))
        return;
    each_passed(msg, claim_one, NULL);
}
