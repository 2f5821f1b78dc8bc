/* preload/src/sock6.c: IPv6 of accelerated sockets (issue 31, sock6.h). A
 * dual-stack listener on [::] (IPV6_V6ONLY off) listens on the PPE for both
 * families (dti_bind6 of ::): IPv6 connections to the port's address6 are
 * the engine's, and their names come from the engine's IPv6 names
 * (dti_getsockname6/dti_getpeername6). */
#include "sock6.h"

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
    if (!s->v6) {
        struct dti_addr any = {0, port};
        return dti_bind(c, s->h, &any);
    }
    struct dti_addr6 any6 = {.port = port}; /* [::], both families */
    int rc = dti_bind6(c, s->h, &any6, 0);
    if (rc == -EAFNOSUPPORT) { /* an engine without IPv6: the IPv4 half, as before */
        struct dti_addr any = {0, port};
        rc = dti_bind(c, s->h, &any);
    }
    return rc;
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
