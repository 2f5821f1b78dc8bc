/* The socket calls' shared helpers (sock.c: lifecycle; accept.c: accept
 * and the listener stash; sockopt.c: options, fcntl, ioctl, names). Internal
 * to preload/src. */
#ifndef ETA_PRELOAD_SOCK_H
#define ETA_PRELOAD_SOCK_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "accept.h"
#include "attach.h"
#include "config.h"
#include "decide.h"
#include "errno_util.h"
#include "fdtable.h"
#include "shim.h"
#include "sockobj.h"
#include "udp.h"
#include "wait.h"

/* ---- helpers ----------------------------------------------------------- */

static inline void from_dti(const struct dti_addr *a, struct sockaddr *out, socklen_t *len, bool v6)
{
    if (!out || !len)
        return;
    if (v6) { /* an IPv4 peer of a dual-stack socket, as Linux shows it: ::ffff:a.b.c.d */
        struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(a->port)};
        in6.sin6_addr.s6_addr[10] = 0xff;
        in6.sin6_addr.s6_addr[11] = 0xff;
        uint32_t ip = htonl(a->ip);
        memcpy(&in6.sin6_addr.s6_addr[12], &ip, 4);
        socklen_t n = *len < (socklen_t)sizeof in6 ? *len : (socklen_t)sizeof in6;
        memcpy(out, &in6, (size_t)n);
        *len = sizeof in6;
        return;
    }
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(a->port), .sin_addr = {htonl(a->ip)}};
    socklen_t n = *len < (socklen_t)sizeof in ? *len : (socklen_t)sizeof in;
    memcpy(out, &in, (size_t)n);
    *len = sizeof in;
}

static inline const char *fmt_addr(const struct sockaddr *a, char *buf, size_t len)
{
    struct dti_addr d = to_dti(a);
    snprintf(buf, len, "%u.%u.%u.%u:%u", d.ip >> 24, (d.ip >> 16) & 255, (d.ip >> 8) & 255, d.ip & 255, d.port);
    return buf;
}

/* The socket must be accelerated and this process's; orphans are refused
 * with err. Returns 0 or an errno value. */
static inline int usable(struct eta_sock *s, int orphan_err)
{
    if (eta_sock_orphaned(s))
        return orphan_err;
    if (atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        return orphan_err == EBADF ? ECONNRESET : orphan_err;
    return 0;
}

/* Drops the table entry of fd: the socket is the kernel's for good. */
static inline void to_kernel(int fd, struct eta_sock *s, enum eta_reason r, const char *detail)
{
    eta_sock_unaccel(s, ETA_SOCK_KERNEL);
    eta_count(r, fd, detail);
    eta_fd_clear(fd);
}

/* sock.c: a bind() the engine refused (rc: its negative error, EADDRINUSE
 * say) on candidate s just made accelerated for it: the PPE socket is
 * closed and s is an unbound candidate again, as Linux leaves a socket
 * whose bind failed, so the program may bind again (another port, or the
 * same once it is free). Returns -1 with errno from rc. */
int eta_bind_refused(dti_ctx_t *c, struct eta_sock *s, int rc);

/* sock.c: bind() of candidate s to one of the PPE's IPv4 addresses (addr:
 * AF_INET; from an AF_INET6 socket, the v4-mapped address it named;
 * kaddr/klen: what the program gave): the PPE's (on a shared port the
 * kernel placeholder holds it too). 0 or -1 with errno. */
int eta_bind_ppe4(int fd, struct eta_sock *s, const struct sockaddr *addr, const struct sockaddr *kaddr,
                  socklen_t klen);

/* sock.c, for udp_sock.c (the UDP half of the socket calls): creates the
 * PPE socket behind candidate s (0 or an errno value), and closes it (the
 * socket goes to the kernel for good, or gets a new one). */
int eta_make_accel(dti_ctx_t *c, int fd, struct eta_sock *s);
void eta_drop_ppe_half(dti_ctx_t *c, struct eta_sock *s);
/* connect_state.c: the outcome of a connect: 0, EINPROGRESS, or an errno
 * value; eta_connect_done: whether it has one (a wait predicate). */
int eta_connect_result(dti_ctx_t *c, struct eta_sock *s);
bool eta_connect_done(void *sock);
/* connect_state.c: connect() on a socket whose connect was started:
 * EALREADY, EISCONN (connected, or connected once and reset since), the
 * failure to report (ECONNABORTED when SO_ERROR took it), or 0 when the
 * socket is back in CLOSE and this is a new attempt (as Linux). */
int eta_connect_again(dti_ctx_t *c, struct eta_sock *s);
/* sock.c: a new descriptor (dup, dup2, dup3, F_DUPFD) names the same object
 * as the old one. */
int eta_dup_result(int oldfd, int newfd);
/* accept.c: aborts the connections stashed for listener s (it is closing). */
void eta_stash_abort(dti_ctx_t *c, struct eta_sock *s);

#endif
