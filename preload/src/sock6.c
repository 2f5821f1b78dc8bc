/* preload/src/sock6.c: IPv6 of accelerated sockets (issue 31, sock6.h). A
 * listener on [::] listens on the PPE for both families (dti_bind6 of ::),
 * or for IPv6 alone with IPV6_V6ONLY on (DTI_BIND6_V6ONLY: the IPv4 port
 * stays free for an IPv4 listener); one bound to an IPv6 address of the
 * PPE is the PPE's alone. IPv6 connections to the port's address6 are the
 * engine's, and their names come from the engine's IPv6 names
 * (dti_getsockname6/dti_getpeername6). */
#include "sock6.h"

#include "attach.h"
#include "config.h"
#include "decide.h"
#include "errno_util.h"
#include "fdtable.h"
#include "lock.h"
#include "own_address.h"
#include "real.h"
#include "sock.h"
#include "sockobj.h"
#include "udp6_addr.h"
#include "udp_sock.h"
#include "wait.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* The IPv6 addresses this process's sockets were bound to: s->local6 is 1 +
 * an index here. Append-only, so an index names one address for the
 * process's life (and its forks), whatever order a restarted PPE lists its
 * addresses in; lookups read without the lock (an entry is written before
 * the count that publishes it). */
#define LOCAL6_MAX 254u /* ETA_LOCAL6_UNKNOWN (0xff) is the next value */
static uint8_t local6_addr[LOCAL6_MAX][16];
static _Atomic uint32_t local6_n;
static struct eta_lock local6_lock = ETA_LOCK_INIT;

static uint8_t local6_find(const uint8_t ip[16], uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (memcmp(local6_addr[i], ip, 16) == 0)
            return (uint8_t)(i + 1);
    return 0;
}

/* s->local6 for IPv6 address ip: its entry, added when new; ETA_LOCAL6_UNKNOWN
 * once LOCAL6_MAX distinct addresses are recorded. */
static uint8_t local6_intern(const uint8_t ip[16])
{
    uint8_t v = local6_find(ip, atomic_load_explicit(&local6_n, memory_order_acquire));
    if (v)
        return v;
    eta_lock(&local6_lock);
    const uint32_t n = atomic_load_explicit(&local6_n, memory_order_relaxed);
    v = local6_find(ip, n);
    if (!v && n < LOCAL6_MAX) {
        memcpy(local6_addr[n], ip, 16);
        atomic_store_explicit(&local6_n, n + 1, memory_order_release);
        v = (uint8_t)(n + 1);
    }
    eta_unlock(&local6_lock);
    return v ? v : ETA_LOCAL6_UNKNOWN;
}

/* Whether ip is one of the PPE's IPv6 addresses now (eta_net's port6 lines). */
static bool listed6(const uint8_t ip[16])
{
    for (unsigned i = 0; i < eta_net.n_ports6; i++)
        if (memcmp(ip, eta_net.port6[i].ip, 16) == 0)
            return true;
    return false;
}

int eta_bind_any(dti_ctx_t *c, const struct eta_sock *s, uint16_t port)
{
    if (!s->v6 || s->local.ip) { /* IPv4, or an AF_INET6 socket on a v4-mapped PPE address */
        struct dti_addr a = s->local.ip ? s->local : (struct dti_addr){0, port};
        return dti_bind(c, s->h, &a);
    }
    struct dti_addr6 a6 = {.port = port}; /* [::], or the PPE's IPv6 address bind() named */
    if (s->local6 && (!eta_local6_ip(s, a6.ip) || (!listed6(a6.ip) && a6.ip[0] != 0xff)))
        return -EADDRNOTAVAIL; /* a new PPE without that address (or one never recorded); a group is every PPE's */
    int rc = dti_bind6(c, s->h, &a6, s->v6only ? DTI_BIND6_V6ONLY : 0);
    if (rc == -EAFNOSUPPORT && !s->local6 && !s->v6only) { /* an engine without IPv6: the IPv4 half, as before */
        struct dti_addr a = {0, port};
        rc = dti_bind(c, s->h, &a);
    }
    return rc;
}

bool eta_own_addr6(const struct sockaddr *addr, socklen_t len)
{
    return eta_decide_bind6(&eta_net, addr, len, true) == ETA_BIND_PPE;
}

bool eta_own_stream6(const struct sockaddr *addr, socklen_t len)
{
    return eta_decide_bind6(&eta_net, addr, len, false) == ETA_BIND_PPE;
}

int eta_bind_ppe6(int fd, struct eta_sock *s, const struct sockaddr *addr)
{
    struct sockaddr_in6 in6;
    memcpy(&in6, addr, sizeof in6);
    char buf[64];
    /* IPV6_V6ONLY as set so far (Linux fixes it at bind): read back from
     * the kernel placeholder, which holds every option the program set. */
    int v6only = 0;
    socklen_t ol = sizeof v6only;
    if (real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol) != 0)
        v6only = 0;
    struct dti_addr6 a6 = {.port = ntohs(in6.sin6_port)};
    /* A port shared with the kernel (TCP and UDP): the placeholder binds
     * the address and port first, so the kernel answers as for any of its
     * addresses (EADDRINUSE where a kernel program holds
     * the port) and holds it against kernel programs; port 0 is its pick,
     * which the PPE binds too (as eta_bind_ppe4). */
    const bool shared = eta_net.self_shared;
    if (shared) {
        if (eta_placeholder_bind(fd, addr, sizeof in6) != 0)
            return -1; /* still a candidate, unbound: the program may try another port */
        s->bound_kernel = true;
        if (a6.port == 0 && (a6.port = eta_placeholder_port(fd)) == 0)
            return fail(EADDRNOTAVAIL);
        s->kernel_port = a6.port;
    }
    dti_ctx_t *c = eta_ctx();
    int err = c ? eta_make_accel(c, fd, s) : ENETDOWN;
    if (err) {
        /* Not shared, the kernel has no such address: Linux's answer for
         * it. Shared: the kernel socket is bound there, and works. */
        eta_count(ETA_R_PPE_REFUSED, fd, strerror(err));
        eta_sock_unaccel(s, ETA_SOCK_KERNEL); /* as bind_ppe (sock.c): the send fast word ended too */
        eta_fd_clear(fd);
        return shared ? 0 : fail(EADDRNOTAVAIL);
    }
    memcpy(a6.ip, in6.sin6_addr.s6_addr, 16);
    int rc = dti_bind6(c, s->h, &a6, v6only ? DTI_BIND6_V6ONLY : 0);
    if (rc < 0)
        return eta_bind_refused(c, s, rc);
    if (a6.port == 0) { /* the engine picked it: kept to bind again on a new PPE (relisten.c) */
        struct dti_addr6 got;
        if (dti_getsockname6(c, s->h, &got) >= 0)
            a6.port = got.port;
    }
    s->local6 = local6_intern(in6.sin6_addr.s6_addr);
    s->local = (struct dti_addr){0, a6.port};
    /* Linux's bind to an IPv6 address (not v4-mapped) makes the socket
     * IPv6-only (__inet6_bind), TCP and UDP alike: getsockopt(IPV6_V6ONLY)
     * reads 1 from then on, and a listener's accepted connections inherit it
     * (eta_inherit_options). The placeholder, unbound, takes it. */
    s->v6only = true;
    int one = 1;
    if (!shared) /* a bound placeholder's is the kernel's already, and fixed */
        (void)real_setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    in6.sin6_port = htons(a6.port);
    eta_count(ETA_R_NONE, fd, eta_fmt_any((const struct sockaddr *)&in6, buf, sizeof buf));
    if (shared && s->dgram)
        eta_udp_read_placeholder(fd, s); /* host-local senders reach it there (udp_sock.c) */
    return 0;
}

uint8_t eta_local6_of(const uint8_t ip[16])
{
    static const uint8_t any[16];
    if (memcmp(ip, any, sizeof any) == 0)
        return 0;
    return local6_intern(ip);
}

bool eta_local6_ip(const struct eta_sock *s, uint8_t ip[16])
{
    memset(ip, 0, 16);
    if (s->local6 == 0 || s->local6 > atomic_load_explicit(&local6_n, memory_order_acquire))
        return false;
    memcpy(ip, local6_addr[s->local6 - 1], 16);
    return true;
}

int eta_bind_held6(dti_ctx_t *c, const struct eta_sock *s)
{
    struct dti_addr6 a6 = {.port = s->kernel_port};
    if (!eta_local6_ip(s, a6.ip))
        return -EADDRNOTAVAIL;
    return dti_bind6(c, s->h, &a6, DTI_BIND6_V6ONLY);
}

bool eta_bound6_to(const struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    return s->local6 && addr && len >= (socklen_t)sizeof(struct sockaddr_in6) && addr->sa_family == AF_INET6;
}

int eta_name6(dti_ctx_t *c, dti_sock_t h, bool peer, struct sockaddr *out, socklen_t *len)
{
    struct dti_addr6 a;
    int rc = peer ? dti_getpeername6(c, h, &a) : dti_getsockname6(c, h, &a);
    if (rc < 0)
        return rc;
    if (!out || !len)
        return 0;
    /* A link-local address (a connection on a shared port's link) names
     * the port's interface as its scope, as Linux's ipv6_iface_scope_id. */
    struct sockaddr_in6 in6 = eta_udp6_name(a.ip, a.port, (uint32_t)eta_net.link6_ifindex);
    socklen_t n = *len < (socklen_t)sizeof in6 ? *len : (socklen_t)sizeof in6;
    memcpy(out, &in6, (size_t)n);
    *len = sizeof in6;
    return 0;
}

int eta_prep_connect_to(dti_ctx_t *c, dti_sock_t h, const struct sockaddr *addr, bool native6)
{
    struct dti_addr remote = {0, 0};
    struct dti_addr6 remote6 = {{0}, 0};
    if (native6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        memcpy(remote6.ip, in6.sin6_addr.s6_addr, 16);
        remote6.port = ntohs(in6.sin6_port);
    } else {
        remote = to_dti(addr);
    }
    for (int tries = 0;; tries++) {
        int rc = native6 ? dti_prep_connect6(c, h, &remote6, 0) : dti_prep_connect(c, h, &remote, 0);
        if (rc != -EAGAIN || tries == 1)
            return rc;
        eta_pump(c);
    }
}

const char *eta_fmt_any(const struct sockaddr *a, char *buf, size_t len)
{
    if (a->sa_family != AF_INET6)
        return fmt_addr(a, buf, len);
    struct sockaddr_in6 in6;
    char ip[INET6_ADDRSTRLEN];
    memcpy(&in6, a, sizeof in6);
    if (!inet_ntop(AF_INET6, &in6.sin6_addr, ip, sizeof ip))
        ip[0] = 0;
    snprintf(buf, len, "[%s]:%u", ip, ntohs(in6.sin6_port));
    return buf;
}
