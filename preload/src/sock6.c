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
#include "real.h"
#include "sock.h"
#include "sockobj.h"
#include "wait.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

int eta_bind_any(dti_ctx_t *c, const struct eta_sock *s, uint16_t port)
{
    if (!s->v6 || s->local.ip) { /* IPv4, or an AF_INET6 socket on a v4-mapped PPE address */
        struct dti_addr a = s->local.ip ? s->local : (struct dti_addr){0, port};
        return dti_bind(c, s->h, &a);
    }
    struct dti_addr6 a6 = {.port = port}; /* [::], or the PPE's IPv6 address bind() named */
    if (s->local6) {
        if (s->local6 > eta_net.n_ports6) /* a new PPE without that address */
            return -EADDRNOTAVAIL;
        memcpy(a6.ip, eta_net.port6[s->local6 - 1].ip, 16);
    }
    int rc = dti_bind6(c, s->h, &a6, s->v6only ? DTI_BIND6_V6ONLY : 0);
    if (rc == -EAFNOSUPPORT && !s->local6 && !s->v6only) { /* an engine without IPv6: the IPv4 half, as before */
        struct dti_addr a = {0, port};
        rc = dti_bind(c, s->h, &a);
    }
    return rc;
}

/* 1 + the index of addr's IPv6 address in eta_net.port6, 0 when it is not
 * the PPE's (or the port is shared with the kernel, or it has a scope). */
static unsigned own_index6(const struct sockaddr *addr, socklen_t len)
{
    struct sockaddr_in6 in6;
    if (!addr || len < (socklen_t)sizeof in6 || addr->sa_family != AF_INET6 || eta_net.self_shared)
        return 0;
    memcpy(&in6, addr, sizeof in6);
    if (in6.sin6_scope_id != 0)
        return 0;
    for (unsigned i = 0; i < eta_net.n_ports6; i++)
        if (memcmp(in6.sin6_addr.s6_addr, eta_net.port6[i].ip, 16) == 0)
            return i + 1;
    return 0;
}

bool eta_own_addr6(const struct sockaddr *addr, socklen_t len)
{
    return own_index6(addr, len) != 0;
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
    dti_ctx_t *c = eta_ctx();
    int err = c ? eta_make_accel(c, fd, s) : ENETDOWN;
    if (err) {
        /* The kernel has no such address: Linux's answer for it. */
        eta_count(ETA_R_PPE_REFUSED, fd, strerror(err));
        eta_sock_unaccel(s, ETA_SOCK_KERNEL); /* as bind_ppe (sock.c): the send fast word ended too */
        eta_fd_clear(fd);
        return fail(EADDRNOTAVAIL);
    }
    struct dti_addr6 a6 = {.port = ntohs(in6.sin6_port)};
    memcpy(a6.ip, in6.sin6_addr.s6_addr, 16);
    int rc = dti_bind6(c, s->h, &a6, v6only ? DTI_BIND6_V6ONLY : 0);
    if (rc < 0)
        return fail(eta_errno_from_dti(rc));
    if (a6.port == 0) { /* the engine picked it: kept to bind again on a new PPE (relisten.c) */
        struct dti_addr6 got;
        if (dti_getsockname6(c, s->h, &got) == 0)
            a6.port = got.port;
    }
    s->local6 = (uint8_t)own_index6(addr, sizeof in6);
    s->local = (struct dti_addr){0, a6.port};
    s->v6only = v6only != 0;
    in6.sin6_port = htons(a6.port);
    eta_count(ETA_R_NONE, fd, eta_fmt_any((const struct sockaddr *)&in6, buf, sizeof buf));
    return 0;
}

uint8_t eta_local6_of(const uint8_t ip[16])
{
    static const uint8_t any[16];
    if (memcmp(ip, any, sizeof any) == 0)
        return 0;
    for (unsigned i = 0; i < eta_net.n_ports6; i++)
        if (memcmp(ip, eta_net.port6[i].ip, 16) == 0)
            return (uint8_t)(i + 1);
    return ETA_LOCAL6_UNKNOWN;
}

bool eta_local6_ip(const struct eta_sock *s, uint8_t ip[16])
{
    memset(ip, 0, 16);
    if (s->local6 == 0 || s->local6 > eta_net.n_ports6)
        return false;
    memcpy(ip, eta_net.port6[s->local6 - 1].ip, 16);
    return true;
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
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(a.port)};
    memcpy(in6.sin6_addr.s6_addr, a.ip, 16);
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
