/* UDP sockets, their lifecycle (the data path is udp.c): a candidate's
 * decisions (the PPE's, the kernel's, or a hybrid of both halves on
 * INADDR_ANY: preload/README.md "Which sockets are accelerated"), bind to
 * INADDR_ANY, connect, the first send of an unbound socket, shutdown. The
 * socket calls themselves are sock.c's (and io_send.c's), which hand UDP
 * sockets here. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "attach.h"
#include "config.h"
#include "decide.h"
#include "epoll.h"
#include "fdtable.h"
#include "own_address.h"
#include "real.h"
#include "shim.h"
#include "sock.h"
#include "sockobj.h"
#include "sock6.h"
#include "udp.h"
#include "udp6.h"
#include "udp_mcast.h"
#include "ucopy.h"
#include "udp_sock.h"
#include "wait.h"

void eta_udp_read_placeholder(int fd, struct eta_sock *s)
{
    s->hybrid = s->udp_kself = true;
    /* The kernel half is only ever polled by the shim (sockobj.h). */
    int fl = real_fcntl(fd, F_GETFL);
    if (fl >= 0)
        real_fcntl(fd, F_SETFL, eta_hybrid_file_flags(fl, atomic_load(&s->nonblock)));
    if (eta_cfg.log_accel)
        eta_log("fd %d: UDP port %u is shared with the kernel: its placeholder is read too (host-local senders)", fd,
                s->kernel_port);
}

/* An unbound AF_INET candidate on a port shared with the kernel: one port
 * space, as an IPv6 socket's (eta_udp6_hold). Its placeholder holds the
 * port on 0.0.0.0 (eta_hold_wildcard) and the PPE's socket binds 0.0.0.0
 * at that port (udp_take): a plain program cannot take the port, and
 * host-local senders reach the socket through the placeholder, which is
 * read. 0 or an errno value. */
static int udp4_hold(int fd, struct eta_sock *s)
{
    return s->v6 || !eta_net.self_shared || s->bound_kernel ? 0 : eta_hold_wildcard(fd, s);
}

/* A UDP candidate the PPE takes for a connect() or first send to addr: the
 * datagram socket, unbound (the engine picks a port at its first send or
 * connect; an IPV6_V6ONLY one is bound to [::] IPv6 only first; on a shared
 * port the port is the kernel's pick, held by the placeholder on the
 * wildcard: udp4_hold, udp6.c eta_udp6_hold). 0 or an errno value; on a
 * refusal the socket is the kernel's. */
static int udp_take(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len, bool connecting)
{
    int err = s->v6 ? eta_udp6_hold(fd, s, addr, len) : udp4_hold(fd, s);
    if (err) {
        char buf[96];
        snprintf(buf, sizeof buf, "no UDP port to hold in the kernel: %s", strerror(err));
        to_kernel(fd, s, ETA_R_PPE_REFUSED, buf);
        return err;
    }
    dti_ctx_t *c = eta_ctx();
    err = c ? eta_make_accel(c, fd, s) : ENETDOWN;
    if (!err) {
        int r = s->v6 ? eta_udp6_taken(c, s) : s->bound_kernel ? dti_bind(c, s->h, &s->local) : 0;
        if (r < 0) {
            eta_drop_ppe_half(c, s);
            err = eta_errno_from_dti(r);
        }
    }
    if (err) {
        to_kernel(fd, s, ETA_R_PPE_REFUSED, strerror(err));
        return err;
    }
    eta_count(ETA_R_NONE, fd, "UDP");
    if (s->bound_kernel && eta_net.self_shared) {
        /* Its placeholder holds the port on the wildcard (udp4_hold,
         * eta_udp6_hold): connected,
         * the kernel connects it too, so it takes nothing (the peer's
         * datagrams are the PPE's); unconnected, it is read too, as Linux's
         * socket gets datagrams to the host's other addresses there. */
        if (connecting) {
            int saved = errno;
            (void)real_connect(fd, addr, len);
            errno = saved;
        } else {
            eta_udp_read_placeholder(fd, s);
        }
    }
    return 0;
}

/* Where a connect() or first send of UDP candidate s to addr goes (an
 * AF_INET6 socket's: udp6.c). */
static enum eta_reason udp_decide(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    /* An IPv4 group with IP_MULTICAST_IF on the PPE's port (udp_mcast.c): the engine's. */
    struct sockaddr_in in;
    if (!s->v6 && s->mc_if4 && addr && len >= (socklen_t)sizeof in && eta_ucopy(&in, addr, sizeof in) == 0 &&
        in.sin_family == AF_INET && IN_MULTICAST(ntohl(in.sin_addr.s_addr)))
        return ETA_R_NONE;
    return s->v6 ? eta_udp6_decide(fd, s, addr, len) : eta_decide_udp(&eta_net, addr, len);
}

/* The log's detail of a decision about addr (an address when it is one). */
static const char *udp_detail(const struct sockaddr *addr, socklen_t len, char *buf, size_t n, const char *call)
{
    const bool named = addr && ((addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) ||
                                (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)));
    return named ? eta_fmt_any(addr, buf, n) : call;
}

/* bind() of a UDP candidate to INADDR_ANY (or an AF_INET6 one to [::]): a
 * hybrid, as a TCP listener on INADDR_ANY is. The kernel socket binds (its
 * port, its errors: the program's), the PPE's datagram socket binds 0.0.0.0
 * (or [::], dual-stack or IPv6 only as IPV6_V6ONLY is now) at the same port:
 * datagrams to the PPE's addresses come through the PPE, the rest through
 * the kernel; udp.c receives from both halves and sends through the PPE to
 * what it routes, through the kernel to the rest. A PPE that cannot take
 * the port leaves the kernel's socket alone (counted ppe-refused). */
int eta_udp_bind_any(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    if (real_bind(fd, addr, len) != 0)
        return -1; /* still a candidate, unbound */
    struct sockaddr_in6 in6; /* sin_port and sin6_port: the same place */
    socklen_t l = sizeof in6;
    s->bound_kernel = true;
    if (real_getsockname(fd, (struct sockaddr *)&in6, &l) == 0)
        s->kernel_port = ntohs(in6.sin6_port);
    struct dti_addr any = {0, s->kernel_port};
    int v6only = 0;
    l = sizeof v6only;
    s->v6only = s->v6 && real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &l) == 0 && v6only;
    /* Bound to a group: both halves take that group's datagrams alone (an
     * IPv6 one is IPv6 only, as Linux makes any bound address). */
    const bool group = eta_udp_bind_is_group(addr, len);
    if (group && s->v6) {
        struct sockaddr_in6 g;
        memcpy(&g, addr, 24); /* (its scope id, where it has one, is the kernel half's) */
        s->local6 = eta_local6_of(g.sin6_addr.s6_addr);
        s->v6only = true;
    } else if (group) {
        struct sockaddr_in g;
        memcpy(&g, addr, sizeof g);
        any.ip = ntohl(g.sin_addr.s_addr);
        s->local = any; /* eta_bind_any binds it */
    }
    dti_ctx_t *c = eta_ctx();
    int err = c ? eta_make_accel(c, fd, s) : ENETDOWN;
    if (!err) {
        int r = eta_bind_any(c, s, any.port); /* 0.0.0.0, [::] or the group (sock6.c) */
        if (r < 0) {
            eta_drop_ppe_half(c, s);
            err = eta_errno_from_dti(r);
        }
    }
    char buf[96];
    if (err) {
        snprintf(buf, sizeof buf, "the PPE cannot take UDP port %u: %s", any.port, strerror(err));
        to_kernel(fd, s, ETA_R_PPE_REFUSED, buf);
        return 0; /* the kernel's socket is bound: the program works, and it was counted */
    }
    s->local = any;
    s->hybrid = true;
    /* The kernel half is only ever polled by the shim (sockobj.h). */
    int fl = real_fcntl(fd, F_GETFL);
    real_fcntl(fd, F_SETFL, eta_hybrid_file_flags(fl, atomic_load(&s->nonblock)));
    if (group) {
        char a[64];
        snprintf(buf, sizeof buf, "UDP on group %s on the PPE and the kernel", eta_fmt_any(addr, a, sizeof a));
    } else {
        snprintf(buf, sizeof buf, s->v6 ? "UDP on [::]:%u on the PPE and the kernel%s"
                                       : "UDP on 0.0.0.0:%u on the PPE and the kernel%s", any.port,
                 s->v6only ? ", IPv6 only" : "");
    }
    eta_count(ETA_R_NONE, fd, buf);
    return 0;
}

/* connect() of a UDP socket: a candidate aimed at a destination the PPE
 * routes is the PPE's; AF_UNSPEC dissolves an accelerated one's association. */
int eta_udp_connect(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    char buf[64];
    if (!addr || len < sizeof(sa_family_t))
        return atomic_load(&s->state) == ETA_SOCK_ACCEL ? fail(EINVAL) : real_connect(fd, addr, len);
    const bool unspec = addr->sa_family == AF_UNSPEC;
    if (atomic_load(&s->state) == ETA_SOCK_CANDIDATE) {
        if (unspec)
            return real_connect(fd, addr, len);
        enum eta_reason r = udp_decide(fd, s, addr, len);
        if (r != ETA_R_NONE || s->bound_kernel) {
            to_kernel(fd, s, r != ETA_R_NONE ? r : ETA_R_KERNEL_ADDR,
                      udp_detail(addr, len, buf, sizeof buf, "connect"));
            return real_connect(fd, addr, len);
        }
        if (udp_take(fd, s, addr, len, true) != 0)
            return real_connect(fd, addr, len); /* refused by the PPE: the kernel's */
    }
    if (s->hybrid && !unspec) {
        /* A UDP socket on INADDR_ANY connecting: its peer decides the path,
         * as an unbound socket's does. Through the PPE: the PPE's half
         * alone from now on (the kernel half is connected too where the
         * kernel can, so it takes no other datagrams); anywhere else: the
         * kernel's, the PPE's half goes. */
        enum eta_reason r = eta_hybrid_kernel_only(s) ? ETA_R_PPE_REFUSED : udp_decide(fd, s, addr, len);
        s->hybrid = false;
        int fl = real_fcntl(fd, F_GETFL);
        if (fl >= 0)
            real_fcntl(fd, F_SETFL, (fl & ~(O_NONBLOCK | ETA_HYBRID_NONBLOCK_MARK)) |
                                        (atomic_load(&s->nonblock) ? O_NONBLOCK : 0));
        if (r != ETA_R_NONE) {
            dti_ctx_t *c = eta_ctx();
            if (c && !eta_sock_orphaned(s) && s->generation == eta_generation)
                eta_drop_ppe_half(c, s);
            to_kernel(fd, s, r, udp_detail(addr, len, buf, sizeof buf, "connect"));
            return real_connect(fd, addr, len);
        }
        int saved = errno;
        (void)real_connect(fd, addr, len); /* best effort: the kernel may have no route there */
        errno = saved;
    } else if (s->hybrid) {
        (void)real_connect(fd, addr, len); /* AF_UNSPEC: both halves stay unconnected */
    }
    int e = usable(s, EBADF);
    if (e)
        return fail(e);
    if (s->v6 && !unspec) { /* IPv6, v4-mapped or AF_INET (udp6.c) */
        dti_ctx_t *c6 = eta_ctx();
        return c6 ? eta_udp6_connect(c6, s, addr, len) : fail(ENETDOWN);
    }
    if (!unspec && (addr->sa_family != AF_INET || len < sizeof(struct sockaddr_in)))
        return fail(addr->sa_family == AF_INET ? EINVAL : EAFNOSUPPORT);
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return fail(ENETDOWN);
    struct dti_addr a = unspec ? (struct dti_addr){0, 0} : to_dti(addr);
    int rc = s->v6 ? dti_dgram_connect6(c, s->h, NULL) : dti_dgram_connect(c, s->h, unspec ? NULL : &a);
    return rc < 0 ? fail(eta_errno_from_dti(rc)) : 0;
}

/* sendto()/sendmsg() to `to` on a UDP candidate (no entry: NULL): unbound,
 * to a destination the PPE routes, it is the PPE's from now on (referenced);
 * anything else is the kernel's for good (NULL). */
struct eta_sock *eta_udp_adopt(int fd, const struct sockaddr *to, socklen_t len)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return NULL;
    if (!s->dgram || atomic_load(&s->state) != ETA_SOCK_CANDIDATE || !to) {
        eta_obj_put(&s->obj);
        return NULL;
    }
    char buf[64];
    enum eta_reason r = udp_decide(fd, s, to, len);
    if (r != ETA_R_NONE || s->bound_kernel) {
        to_kernel(fd, s, r != ETA_R_NONE ? r : ETA_R_KERNEL_ADDR, udp_detail(to, len, buf, sizeof buf, "sendto"));
        eta_obj_put(&s->obj);
        return NULL;
    }
    if (udp_take(fd, s, to, len, false) != 0) {
        eta_obj_put(&s->obj);
        return NULL;
    }
    return s;
}

/* shutdown() of an accelerated UDP socket (as Linux): a connected socket's
 * directions end here, on our side only (udp.c: reads then answer 0, sends
 * EPIPE); an unconnected one is ENOTCONN. Nothing for the engine to do. */
int eta_udp_shutdown(dti_ctx_t *c, struct eta_sock *s, int how)
{
    struct dti_addr peer;
    struct dti_addr6 peer6;
    if ((s->v6 ? dti_getpeername6(c, s->h, &peer6) : dti_getpeername(c, s->h, &peer)) < 0)
        return fail(ENOTCONN);
    if (how != SHUT_WR)
        atomic_store(&s->shut_rd, true);
    if (how != SHUT_RD)
        eta_sock_shut_wr(s);
    eta_epoll_touch(s);
    return 0;
}
