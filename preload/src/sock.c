/* Socket calls, the lifecycle: socket, bind, listen, connect, close,
 * shutdown. accept and the listener stash are in accept.c; options, fcntl,
 * ioctl and names in sockopt.c; closing in bulk and dup in descriptors.c;
 * a UDP socket's bind to INADDR_ANY, connect, first send and shutdown in
 * udp_sock.c. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "accept.h"
#include "attach.h"
#include "config.h"
#include "decide.h"
#include "epoll.h"
#include "exec_handover.h"
#include "fdtable.h"
#include "own_address.h"
#include "placeholder.h"
#include "real.h"
#include "shim.h"
#include "sock.h"
#include "sock6.h"
#include "sockobj.h"
#include "udp6.h"
#include "udp_mcast.h"
#include "udp_sock.h"
#include "wait.h"

/* Creates the PPE socket behind a candidate. Returns 0 or an errno value
 * (sock.h: udp_sock.c uses it too). */
int eta_make_accel(dti_ctx_t *c, int fd, struct eta_sock *s)
{
    int h = s->dgram ? dti_dgram_socket(c) : dti_socket(c);
    if (h < 0)
        return eta_errno_from_dti(h);
    s->h = (dti_sock_t)h;
    s->generation = eta_generation;
    int fl = real_fcntl(fd, F_GETFL);
    atomic_store(&s->nonblock, fl >= 0 && (fl & O_NONBLOCK));
    struct timeval tv;
    socklen_t l = sizeof tv;
    const bool timeouts = atomic_load(&s->opts_set) & ETA_OPT_TIMEOUTS;
    if (timeouts && real_getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
        s->rcvtimeo_ms = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
    l = sizeof tv;
    if (timeouts && real_getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
        s->sndtimeo_ms = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
    eta_carry_options(c, fd, s);
    eta_hmap_put(s->h, s);
    atomic_store(&s->state, ETA_SOCK_ACCEL);
    ETA_STAT_ADD(accel_open, 1);
    return 0;
}

/* ---- socket ------------------------------------------------------------ */

ETA_EXPORT int socket(int domain, int type, int protocol)
{
    int fd = real_socket(domain, type, protocol);
    if (fd < 0)
        return fd;
    enum eta_reason r = eta_decide_socket(domain, type, protocol);
    /* An IPv6 TCP socket stays a candidate: it may become a dual-stack
     * listener on [::], whose IPv4 half the PPE carries. */
    bool v6 = r == ETA_R_INET6 && eta_decide_socket(AF_INET, type, protocol) == ETA_R_NONE;
    if (v6)
        r = ETA_R_NONE;
    /* A UDP socket stays a candidate: bound to a PPE address, or connected
     * or sending (unbound) to a destination the PPE routes, it is the PPE's
     * (udp.c; preload/README.md "UDP"). */
    bool dgram = eta_udp_kind(domain, type, protocol);
    if (dgram)
        r = ETA_R_NONE;
    if (r != ETA_R_NONE) {
        eta_count(r, fd, NULL);
        return fd;
    }
    eta_init();
    if (eta_cfg.disabled) {
        eta_count(ETA_R_DISABLED, fd, NULL);
        return fd;
    }
    if (!eta_fd_in_range(fd)) {
        eta_count(ETA_R_FD_RANGE, fd, NULL);
        return fd;
    }
    int saved = errno;
    if (atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        (void)eta_reattach_try(); /* a PPE that came back takes new sockets at once */
    if (!eta_ppe_usable() || atomic_load_explicit(&eta_engine_dead, memory_order_relaxed)) {
        errno = saved;
        eta_count(ETA_R_NO_PPE, fd, NULL);
        return fd;
    }
    errno = saved;
    struct eta_sock *s = eta_sock_new();
    if (!s) {
        eta_count(ETA_R_FD_RANGE, fd, "no room for another socket object");
        return fd;
    }
    atomic_store(&s->nonblock, (type & SOCK_NONBLOCK) != 0);
    s->v6 = v6 || (dgram && domain == AF_INET6); /* UDP over IPv6: udp6.c */
    s->dgram = dgram;
    eta_fd_set(fd, &s->obj);
    return fd;
}

/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d) as the IPv4 address it
 * names: Linux treats it as that address on an AF_INET6 socket whose
 * IPV6_V6ONLY is off. False for anything else (and for a socket with
 * IPV6_V6ONLY on, where the kernel refuses it: bind EINVAL, connect
 * ENETUNREACH, its answers are the program's). */
static bool v4mapped(int fd, const struct eta_sock *s, const struct sockaddr *addr, socklen_t len,
                     struct sockaddr_in *out)
{
    struct sockaddr_in6 in6;
    if (!addr || len < (socklen_t)sizeof in6 || addr->sa_family != AF_INET6)
        return false;
    memcpy(&in6, addr, sizeof in6);
    if (!IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr))
        return false;
    /* (A connect's hold made the placeholder IPv6-only where the program
     * had 0: its value is the program's, placeholder.c.) */
    int v6only = 0;
    socklen_t ol = sizeof v6only;
    if (!s->v6only_read0 && (real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol) != 0 || v6only))
        return false;
    *out = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = in6.sin6_port};
    memcpy(&out->sin_addr, &in6.sin6_addr.s6_addr[12], 4);
    return true;
}

/* bind() of an AF_INET6 candidate: [::] may become a dual-stack listener
 * (decided at listen(), where IPV6_V6ONLY is final); a v4-mapped address
 * of the PPE (::ffff:<PPE address>, what Java's servers bind) is the PPE's,
 * as the IPv4 address is; every other address is the kernel's. */
static int bind6(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    struct sockaddr_in in;
    if (v4mapped(fd, s, addr, len, &in)) {
        enum eta_reason why;
        char buf[32];
        if (eta_decide_bind(&eta_net, (const struct sockaddr *)&in, sizeof in, &why) == ETA_BIND_PPE)
            return eta_bind_ppe4(fd, s, (const struct sockaddr *)&in, addr, len);
        /* ::ffff:0.0.0.0 (IPv4 only, in the kernel) and kernel addresses */
        to_kernel(fd, s, why == ETA_R_NONE ? ETA_R_INET6 : why, fmt_addr((const struct sockaddr *)&in, buf, sizeof buf));
        return real_bind(fd, addr, len);
    }
    struct sockaddr_in6 in6;
    bool any = addr && len >= (socklen_t)sizeof in6 && addr->sa_family == AF_INET6 &&
               (memcpy(&in6, addr, sizeof in6), IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr));
    if (!any && eta_own_stream6(addr, len)) /* one of the PPE's IPv6 addresses (sock6.c) */
        return eta_bind_ppe6(fd, s, addr);
    if (!any) {
        to_kernel(fd, s, ETA_R_INET6, "an IPv6 address");
        return real_bind(fd, addr, len);
    }
    int rc = real_bind(fd, addr, len);
    if (rc == 0) {
        struct sockaddr_storage ss;
        socklen_t l = sizeof ss;
        s->bound_kernel = true;
        if (real_getsockname(fd, (struct sockaddr *)&ss, &l) == 0)
            s->kernel_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return rc;
}

/* ---- bind / listen ----------------------------------------------------- */

ETA_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr_arg, socklen_t len)
{
    const struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return real_bind(fd, addr, len);
    int rc;
    char buf[32];
    uint32_t st = atomic_load(&s->state);
    if (st != ETA_SOCK_CANDIDATE || s->bound_kernel) {
        eta_obj_put(&s->obj);
        return st == ETA_SOCK_KERNEL ? real_bind(fd, addr, len) : fail(EINVAL);
    }
    if (s->v6) {
        rc = s->dgram ? eta_udp6_bind(fd, s, addr, len) : bind6(fd, s, addr, len);
        eta_obj_put(&s->obj);
        return rc;
    }
    enum eta_reason why;
    enum eta_bind_target t = eta_decide_bind(&eta_net, addr, len, &why);
    if (s->dgram && (t == ETA_BIND_BOTH || eta_udp_bind_is_group(addr, len))) {
        /* UDP on every address, or on a group: a hybrid (udp_sock.c). */
        rc = eta_udp_bind_any(fd, s, addr, len);
        eta_obj_put(&s->obj);
        return rc;
    }
    if (t == ETA_BIND_KERNEL) {
        to_kernel(fd, s, why, addr && len >= sizeof(struct sockaddr_in) && addr->sa_family == AF_INET
                                  ? fmt_addr(addr, buf, sizeof buf) : "bind");
        eta_obj_put(&s->obj);
        return real_bind(fd, addr, len);
    }
    if (t == ETA_BIND_BOTH) {
        /* The kernel half binds now (its errors are the kernel's); the PPE
         * half follows at listen() or connect(), once the role is known. */
        rc = real_bind(fd, addr, len);
        if (rc == 0) {
            struct sockaddr_in in;
            socklen_t l = sizeof in;
            s->bound_kernel = true;
            if (real_getsockname(fd, (struct sockaddr *)&in, &l) == 0)
                s->kernel_port = ntohs(in.sin_port);
        }
        eta_obj_put(&s->obj);
        return rc;
    }
    rc = eta_bind_ppe4(fd, s, addr, addr, len);
    eta_obj_put(&s->obj);
    return rc;
}

/* bind() to one of the PPE's addresses (addr: AF_INET; from an AF_INET6
 * socket, the v4-mapped address it named; kaddr/klen: what the program gave).
 * On a port shared with the kernel (`self shared`) the kernel placeholder
 * binds the same address first: one port space. A port a kernel program
 * holds is EADDRINUSE (the kernel's answer, SO_REUSEADDR/SO_REUSEPORT as it
 * applies them), port 0 is the kernel's pick and the PPE's port too. */
int eta_bind_ppe4(int fd, struct eta_sock *s, const struct sockaddr *addr, const struct sockaddr *kaddr,
                  socklen_t klen)
{
    char buf[32];
    struct dti_addr a = to_dti(addr);
    const bool shared = eta_net.self_shared;
    if (shared) {
        if (real_bind(fd, kaddr, klen) != 0)
            return -1; /* still a candidate, unbound: the program may try another port */
        s->bound_kernel = true;
        if (a.port == 0 && (a.port = eta_placeholder_port(fd)) == 0)
            return fail(EADDRNOTAVAIL);
        s->kernel_port = a.port;
    }
    dti_ctx_t *c = eta_ctx();
    int err = c ? eta_make_accel(c, fd, s) : ENETDOWN;
    if (err) {
        eta_count(ETA_R_PPE_REFUSED, fd, strerror(err));
        eta_sock_unaccel(s, ETA_SOCK_KERNEL);
        eta_fd_clear(fd);
        /* Shared: the kernel socket is bound there, and works. Not shared:
         * the kernel has no such address. */
        return shared ? 0 : fail(EADDRNOTAVAIL);
    }
    int rc = dti_bind(c, s->h, &a);
    if (rc < 0)
        return eta_bind_refused(c, s, rc);
    s->local = a;
    eta_count(ETA_R_NONE, fd, fmt_addr(addr, buf, sizeof buf));
    if (shared && s->dgram)
        eta_udp_read_placeholder(fd, s); /* host-local senders reach it there (udp_sock.c) */
    return 0;
}

int eta_bind_refused(dti_ctx_t *c, struct eta_sock *s, int rc)
{
    eta_drop_ppe_half(c, s);
    eta_sock_unaccel(s, ETA_SOCK_CANDIDATE);
    return fail(eta_errno_from_dti(rc));
}

/* Closes the PPE socket behind s (it goes to the kernel for good, or gets a
 * new one; sock.h: udp_sock.c uses it too). */
void eta_drop_ppe_half(dti_ctx_t *c, struct eta_sock *s)
{
    eta_hmap_del(s->h);
    ETA_STAT_ADD(accel_open, (uint64_t)-1);
    if (dti_prep_close(c, s->h, 0) == -EAGAIN) {
        eta_pump(c);
        dti_prep_close(c, s->h, 0);
    }
    dti_submit(c);
}

/* A socket whose failed connect was reported, connecting again: a new PPE
 * socket in the old one's place (options carried again from the kernel
 * placeholder), bound where bind() put it (or to the placeholder's port on
 * a shared port). 0 or an errno value; the socket is an orphan when the PPE
 * gives it no new socket. */
static int renew_ppe_half(dti_ctx_t *c, int fd, struct eta_sock *s)
{
    eta_drop_ppe_half(c, s);
    s->connect_started = s->connect_reported = s->connect_closed = false;
    atomic_store(&s->pending_error, 0);
    /* The program's O_NONBLOCK is the object's (FIONBIO sets only that on
     * an accelerated socket), not the placeholder's file flags. */
    const int nonblock = atomic_load(&s->nonblock);
    int err = eta_make_accel(c, fd, s);
    atomic_store(&s->nonblock, nonblock);
    if (err) {
        eta_sock_unaccel(s, ETA_SOCK_ORPHAN);
        return err;
    }
    struct dti_addr local = s->local;
    if (!local.ip && !local.port && s->bound_kernel)
        local.port = s->kernel_port;
    /* AF_INET6: bound to an IPv6 address of the PPE (or held there), that
     * address again; on [::] (a bind there, or a v4-mapped connect's hold)
     * [::] at that port, which connects to either family (eta_bind_any);
     * not the IPv4 wildcard, which made the next CONNECT6 EAFNOSUPPORT. */
    int rc = !local.ip && !local.port ? 0 : s->v6 ? eta_bind_any(c, s, local.port) : dti_bind(c, s->h, &local);
    return rc < 0 ? eta_errno_from_dti(rc) : 0;
}

ETA_EXPORT int listen(int fd, int backlog)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return real_listen(fd, backlog);
    uint32_t st = atomic_load(&s->state);
    int rc;
    if (st == ETA_SOCK_KERNEL) {
        eta_obj_put(&s->obj);
        return real_listen(fd, backlog);
    }
    if (st == ETA_SOCK_ORPHAN || (st == ETA_SOCK_ACCEL && usable(s, EINVAL))) {
        eta_obj_put(&s->obj);
        return fail(EOPNOTSUPP);
    }
    if (st == ETA_SOCK_CANDIDATE) {
        /* INADDR_ANY (bound or not: listen() binds an unbound socket to a
         * free port): the kernel listens, then the PPE on the same port.
         * IPv6 on [::] likewise, when it takes IPv4 too (IPV6_V6ONLY off). */
        int v6only = 0;
        socklen_t ol = sizeof v6only;
        if (s->v6 && (!s->bound_kernel || real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol) != 0)) {
            to_kernel(fd, s, ETA_R_INET6, "IPv6 listener not bound to [::]");
            eta_obj_put(&s->obj);
            return real_listen(fd, backlog);
        }
        rc = real_listen(fd, backlog);
        if (rc != 0) {
            eta_obj_put(&s->obj);
            return rc;
        }
        s->v6only = s->v6 && v6only; /* IPv6 only: the PPE half too (sock6.c) */
        struct sockaddr_storage ss;
        socklen_t l = sizeof ss;
        real_getsockname(fd, (struct sockaddr *)&ss, &l);
        struct sockaddr_in in;
        memcpy(&in, &ss, sizeof in); /* the port is at the same place in sockaddr_in6 */
        dti_ctx_t *c = eta_ctx();
        int err = c ? eta_make_accel(c, fd, s) : ENETDOWN;
        struct dti_addr any = {0, ntohs(in.sin_port)};
        if (!err) {
            int r = eta_bind_any(c, s, any.port); /* [::]: IPv6 too (sock6.c) */
            if (r == 0)
                r = dti_listen(c, s->h, backlog);
            if (r < 0) {
                dti_prep_close(c, s->h, 0);
                dti_submit(c);
            }
            if (r < 0) {
                eta_hmap_del(s->h);
                ETA_STAT_ADD(accel_open, (uint64_t)-1);
                err = eta_errno_from_dti(r);
            }
        }
        if (err) {
            char why[96];
            snprintf(why, sizeof why, "the PPE cannot listen on port %u: %s", any.port, strerror(err));
            to_kernel(fd, s, ETA_R_PPE_REFUSED, why);
            eta_obj_put(&s->obj);
            return 0; /* the kernel half listens: the program works, and it was counted */
        }
        s->local = any;
        s->hybrid = true;
        s->backlog = backlog;
        s->listening = true;
        /* The kernel half is only ever polled by the shim (sockobj.h). */
        int fl = real_fcntl(fd, F_GETFL);
        real_fcntl(fd, F_SETFL, eta_hybrid_file_flags(fl, atomic_load(&s->nonblock)));
        char buf[80];
        snprintf(buf, sizeof buf, s->v6 ? "listening on [::]:%u on the PPE and the kernel%s"
                                       : "listening on 0.0.0.0:%u on the PPE and the kernel%s", any.port,
                 s->v6only ? ", IPv6 only" : "");
        eta_count(ETA_R_NONE, fd, buf);
        eta_obj_put(&s->obj);
        return 0;
    }
    /* Bound to a PPE address. */
    dti_ctx_t *c = eta_ctx();
    if (!c) {
        eta_obj_put(&s->obj);
        return fail(ENETDOWN);
    }
    /* On a shared port the placeholder holds the address and port in the
     * kernel (eta_bind_ppe4): it listens too, a hybrid listener as on INADDR_ANY,
     * so that a plain program on this host connecting to the address (the
     * kernel's loopback) reaches the server. The kernel answers first. */
    const bool hybrid = s->bound_kernel && !s->listening && !s->connect_started && !s->hybrid;
    if (hybrid && real_listen(fd, backlog) != 0) {
        eta_obj_put(&s->obj);
        return -1;
    }
    rc = dti_listen(c, s->h, backlog);
    if (rc == 0) {
        s->backlog = backlog;
        s->listening = true;
        if (hybrid) {
            s->hybrid = true;
            int fl = real_fcntl(fd, F_GETFL); /* the kernel half is only ever polled by the shim */
            real_fcntl(fd, F_SETFL, eta_hybrid_file_flags(fl, atomic_load(&s->nonblock)));
        }
    } else if (hybrid && !s->listening) {
        /* The PPE cannot listen: the kernel half does, alone (counted). */
        char why[96];
        snprintf(why, sizeof why, "the PPE cannot listen on port %u: %s", s->local.port,
                 strerror(eta_errno_from_dti(rc)));
        eta_drop_ppe_half(c, s);
        to_kernel(fd, s, ETA_R_PPE_REFUSED, why);
        rc = 0;
    }
    eta_obj_put(&s->obj);
    return rc < 0 ? fail(eta_errno_from_dti(rc)) : 0;
}

/* ---- connect ----------------------------------------------------------- */

ETA_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr_arg, socklen_t len)
{
    const struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sig_mark since = eta_sig_mark_now(); /* the call began: signals from here on count */
    struct eta_sock *s = eta_sock_get(fd);
    if (!s) {
        eta_warn_datagrams_to_ppe(fd, addr, len);
        return real_connect(fd, addr, len);
    }
    uint32_t st = atomic_load(&s->state);
    char buf[64]; /* (an IPv6 address and port: eta_fmt_any) */
    dti_ctx_t *c0;
    if (st == ETA_SOCK_KERNEL) {
        eta_obj_put(&s->obj);
        return real_connect(fd, addr, len);
    }
    if (s->dgram) {
        int rc = eta_udp_connect(fd, s, addr, len);
        eta_obj_put(&s->obj);
        return rc;
    }
    /* An AF_INET6 socket connecting to ::ffff:a.b.c.d connects to a.b.c.d
     * (IPV6_V6ONLY off, as in Linux): the PPE's when it routes it. The
     * kernel's address stays what the program gave. */
    const struct sockaddr *kaddr = addr;
    const socklen_t klen = len;
    struct sockaddr_in mapped;
    bool via_mapped = false;
    if (s->v6 && v4mapped(fd, s, addr, len, &mapped)) {
        addr = (const struct sockaddr *)&mapped;
        len = sizeof mapped;
        via_mapped = true;
    }
    if ((!s->v6 || via_mapped) && eta_connects_to_ppe_itself(addr, len)) {
        eta_obj_put(&s->obj);
        return fail(ECONNREFUSED);
    }
    /* A socket bound to a PPE address on a shared port (its placeholder
     * holds the address and port in the kernel) connecting to one of the
     * PPE's own addresses: the kernel's, as a candidate's would be. */
    const bool native = s->v6 && !via_mapped;
    if (st == ETA_SOCK_ACCEL && s->bound_kernel && !s->listening && !s->connect_started && !s->hybrid &&
        (native ? eta_decide_connect6(&eta_net, addr, len) : eta_decide_connect(&eta_net, addr, len)) == ETA_R_LOCAL &&
        s->generation == eta_generation && (c0 = eta_ctx())) {
        eta_drop_ppe_half(c0, s);
        st = ETA_SOCK_CANDIDATE; /* decided just below, as a candidate's */
    }
    /* A connection to one of the PPE's own addresses that the engine
     * carries (`self local`, issue 29): on a shared port the engine's answer
     * is awaited (no wire: an engine loop or two), and a refusal (no eta
     * listener there) becomes the kernel's try from the placeholder, which
     * reaches a kernel program's listener, or refuses as Linux does. */
    const bool local_try = eta_net.self_shared && eta_is_local_try(addr, len, native);
    dti_ctx_t *c = NULL;
    bool renewed = false;
    if (st == ETA_SOCK_CANDIDATE) {
        enum eta_reason r = s->v6 && !via_mapped ? eta_decide_connect6(&eta_net, addr, len) : eta_decide_connect(&eta_net, addr, len);
        if (r != ETA_R_NONE) {
            if (r == ETA_R_LOCAL)
                eta_note_local(eta_fmt_any(addr, buf, sizeof buf));
            to_kernel(fd, s, r, r == ETA_R_NOT_INET || r == ETA_R_INET6 ? "connect" : eta_fmt_any(addr, buf, sizeof buf));
            eta_obj_put(&s->obj);
            return real_connect(fd, kaddr, klen);
        }
        /* Shared port, not bound yet: the placeholder takes the source
         * address and an ephemeral port in the kernel (port 0: the kernel
         * picks from its ip_local_port_range), and the PPE uses that port,
         * so that no kernel connection can take the same one. Two system
         * calls (bind, getsockname), shared mode only. */
        if (eta_net.self_shared && !s->bound_kernel) {
            int e = native ? eta_hold_ephemeral6(fd, s, ((const struct sockaddr_in6 *)addr)->sin6_addr.s6_addr)
                           : eta_hold_ephemeral(fd, s, ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr));
            if (e) {
                eta_obj_put(&s->obj);
                return fail(e);
            }
        }
        c = eta_ctx();
        int err = c ? eta_make_accel(c, fd, s) : ENETDOWN;
        if (err) {
            to_kernel(fd, s, ETA_R_PPE_REFUSED, strerror(err));
            eta_obj_put(&s->obj);
            return real_connect(fd, kaddr, klen); /* counted; the kernel cannot route it either */
        }
        if (s->bound_kernel && s->kernel_port) {
            struct dti_addr local = {0, s->kernel_port};
            /* IPv6: where the placeholder holds it (a connect's hold), or
             * [::] at the port bind() took (an IPv4 wildcard bind there
             * made CONNECT6 EAFNOSUPPORT). */
            int rc = !native ? dti_bind(c, s->h, &local)
                     : s->local6 ? eta_bind_held6(c, s) : eta_bind_any(c, s, s->kernel_port);
            if (rc < 0) {
                eta_obj_put(&s->obj);
                return fail(eta_errno_from_dti(rc));
            }
        }
        if (!local_try)
            eta_count(ETA_R_NONE, fd, eta_fmt_any(addr, buf, sizeof buf)); /* a local one once the engine took it */
    } else {
        int err = usable(s, EBADF);
        if (err || !(c = eta_ctx())) {
            eta_obj_put(&s->obj);
            return fail(err ? err : ENETDOWN);
        }
        if (s->listening) {
            eta_obj_put(&s->obj);
            return fail(EISCONN);
        }
        if (s->connect_started) {
            int e = eta_connect_again(c, s);
            /* To IPv4 where a hold made the placeholder IPv6-only (shared
             * port): a fresh one in its place, held for both (placeholder.c) */
            if (!e && via_mapped && eta_placeholder_v6_held(s))
                e = eta_placeholder_renew(fd, s, ntohl(mapped.sin_addr.s_addr));
            if (!e)
                e = renew_ppe_half(c, fd, s); /* back in CLOSE: a new attempt */
            if (e) {
                eta_obj_put(&s->obj);
                return fail(e);
            }
            renewed = true;
        }
    }
    /* eta_decide_connect6 took it, or bind() put it on the PPE's IPv6 address
     * (sock6.c), or a fresh PPE half of an unbound socket after a failed
     * connect, decided as a candidate's */
    const bool native6 = s->v6 && !via_mapped &&
                         (st == ETA_SOCK_CANDIDATE || eta_bound6_to(s, addr, len) ||
                          (renewed && !s->local.ip && eta_decide_connect6(&eta_net, addr, len) == ETA_R_NONE));
    if (!native6 && (!addr || len < (socklen_t)sizeof(struct sockaddr_in) || addr->sa_family != AF_INET ||
                     (s->v6 && !via_mapped))) {
        eta_obj_put(&s->obj);
        /* An AF_INET6 socket on the PPE (its IPv4 half) to an IPv6 address:
         * ENETUNREACH, as Linux answers a v4-mapped socket. */
        if (s->v6 && addr && len >= (socklen_t)sizeof(struct sockaddr_in6) && addr->sa_family == AF_INET6)
            return fail(ENETUNREACH);
        return fail(!addr ? EINVAL : s->v6 ? (len < (socklen_t)sizeof(struct sockaddr_in6) ? EINVAL : EAFNOSUPPORT)
                                   : addr->sa_family != AF_INET ? EAFNOSUPPORT : EINVAL);
    }
    int rc = eta_prep_connect_to(c, s->h, addr, native6); /* either family (sock6.c) */
    if (rc == 0)
        rc = dti_submit(c) < 0 ? -ECONNREFUSED : 0;
    if (rc < 0) {
        eta_obj_put(&s->obj);
        return fail(eta_errno_from_dti(rc));
    }
    if (local_try) {
        eta_watch(c, s, DTI_POLLOUT);
        int w = eta_wait_watch(c, eta_connect_done, s, deadline_after(s->sndtimeo_ms), -1, &since, s, DTI_POLLOUT);
        if (w != -ETIMEDOUT && w != -EINTR && eta_connect_result(c, s) == ECONNREFUSED) {
            eta_note_local(eta_fmt_any(addr, buf, sizeof buf));
            eta_drop_ppe_half(c, s);
            s->connect_started = false;
            to_kernel(fd, s, ETA_R_LOCAL, eta_fmt_any(addr, buf, sizeof buf));
            eta_obj_put(&s->obj);
            return real_connect(fd, kaddr, klen);
        }
        if (st == ETA_SOCK_CANDIDATE)
            eta_count(ETA_R_NONE, fd, eta_fmt_any(addr, buf, sizeof buf));
    }
    s->connect_started = true;
    eta_epoll_touch(s); /* no longer a fresh socket's POLLOUT | POLLHUP */
    if (atomic_load(&s->nonblock)) {
        eta_obj_put(&s->obj);
        return fail(EINPROGRESS);
    }
    eta_watch(c, s, DTI_POLLOUT);
    int w = eta_wait_watch(c, eta_connect_done, s, deadline_after(s->sndtimeo_ms), -1, &since, s, DTI_POLLOUT);
    if (w == -ETIMEDOUT || w == -EINTR) {
        eta_obj_put(&s->obj); /* the connection goes on in the background, as in the kernel */
        return fail(w == -ETIMEDOUT ? EINPROGRESS : EINTR);
    }
    int res = eta_connect_result(c, s);
    s->connect_reported = true;
    s->connect_closed = res != 0; /* failed: back in CLOSE, the next connect() tries again */
    eta_obj_put(&s->obj);
    return res ? fail(res) : 0;
}

/* ---- close, shutdown, dup ---------------------------------------------- */

void eta_sock_release(struct eta_sock *s)
{
    if (s->dgram)
        eta_udp_mcast_forget(s);
    uint32_t st0 = atomic_load(&s->state);
    if (st0 == ETA_SOCK_ORPHAN || (st0 == ETA_SOCK_ACCEL && s->generation != eta_generation)) {
        /* Of a PPE that went (or a parent's): nothing to tell the PPE, but
         * epoll sets must not keep a pointer to an object about to be freed. */
        eta_epoll_forget_fd(-1, s);
        if (st0 == ETA_SOCK_ACCEL)
            ETA_STAT_ADD(accel_open, (uint64_t)-1);
        return;
    }
    if (st0 != ETA_SOCK_ACCEL)
        return;
    eta_epoll_forget_fd(-1, s);
    eta_hmap_del(s->h);
    ETA_STAT_ADD(accel_open, (uint64_t)-1);
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return;
    /* SO_LINGER {1, 0} means reset, as in the kernel. */
    eta_stash_abort(c, s);
    int rc = dti_prep_close(c, s->h, 0);
    if (rc == -EAGAIN) {
        eta_pump(c);
        rc = dti_prep_close(c, s->h, 0);
    }
    dti_submit(c);
}

ETA_EXPORT int close(int fd)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (!o)
        return real_close(fd);
    if (o->kind == ETA_OBJ_INTERNAL)
        return fail(EBADF); /* libdti's, not the program's */
    if (eta_vfork_child()) {
        eta_vfork_note(fd, -1); /* the parent's map and sockets stay the parent's */
        return real_close(fd);
    }
    /* Forget it before the kernel frees the number for reuse. */
    eta_fd_clear(fd);
    return real_close(fd);
}

ETA_EXPORT int shutdown(int fd, int how)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return real_shutdown(fd, how);
    if (atomic_load(&s->state) != ETA_SOCK_ACCEL) {
        eta_obj_put(&s->obj);
        return real_shutdown(fd, how);
    }
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
        eta_obj_put(&s->obj);
        return fail(EINVAL);
    }
    int err = usable(s, ENOTCONN);
    dti_ctx_t *c = err ? NULL : eta_ctx();
    if (!c) {
        eta_obj_put(&s->obj);
        return fail(err ? err : ENOTCONN);
    }
    if (s->hybrid)
        real_shutdown(fd, how);
    if (s->dgram) {
        int r = eta_udp_shutdown(c, s, how);
        eta_obj_put(&s->obj);
        return r;
    }
    struct dti_sock_info ss;
    if (!s->listening && (dti_sock_status(c, s->h, &ss) != 0 ||
                          !(ss.state & (DTI_STATE_CONNECTED | DTI_STATE_CONNECTING)))) {
        eta_obj_put(&s->obj);
        return fail(ENOTCONN);
    }
    if (how != SHUT_WR) {
        atomic_store(&s->shut_rd, true);
        eta_recv_shutdown(c, s); /* a read waiting on a posted receive returns */
    }
    if (how != SHUT_RD)
        eta_sock_shut_wr(s);
    eta_epoll_touch(s);
    int rc = dti_shutdown(c, s->h, how);
    eta_obj_put(&s->obj);
    return rc < 0 && rc != -ENOTCONN ? fail(eta_errno_from_dti(rc)) : 0;
}
