/* UDP over IPv6 (udp6.h): an AF_INET6 UDP candidate's bind and decisions,
 * as an AF_INET one's (udp_sock.c) with Linux's AF_INET6 rules on top:
 * v4-mapped addresses (and AF_INET ones, which Linux's UDPv6 takes too)
 * are IPv4 unless IPV6_V6ONLY is on; IPv6 destinations on-link of the PPE's
 * port6 prefixes, or inside its route6 prefixes, go through the engine
 * (dti_dgram_connect6, the records' struct dti_dgram6); [::] is a hybrid of
 * both halves, dual-stack or IPv6 only as the kernel socket's IPV6_V6ONLY
 * says at bind. The data path is udp.c's; the addresses are read as
 * udpv6_sendmsg and ip6_datagram_connect read them (udp6_addr.c). preload/README.md "UDP over IPv6". */
#include "udp6.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "config.h"
#include "decide.h"
#include "io.h"
#include "own_address.h"
#include "real.h"
#include "sock.h"
#include "sock6.h"
#include "sockobj.h"
#include "ucopy.h"
#include "udp6_addr.h"
#include "udp_sock.h"

/* IPV6_V6ONLY as the kernel socket holds it (the program's setsockopt, or
 * net.ipv6.bindv6only). */
static bool kernel_v6only(int fd)
{
    int v = 0;
    socklen_t l = sizeof v;
    int saved = errno;
    bool on = real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, &l) == 0 && v;
    errno = saved;
    return on;
}

int eta_udp6_bind(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    struct sockaddr_in6 in6;
    if (!addr || len < 24 || addr->sa_family != AF_INET6) {
        /* Not an address Linux binds an AF_INET6 socket to (EINVAL,
         * EAFNOSUPPORT): its answer, the socket still a candidate. */
        int rc = real_bind(fd, addr, len);
        if (rc == 0)
            to_kernel(fd, s, ETA_R_INET6, "bind");
        return rc;
    }
    memset(&in6, 0, sizeof in6);
    memcpy(&in6, addr, len < (socklen_t)sizeof in6 ? (size_t)len : sizeof in6);
    char buf[64];
    uint32_t ip4;
    if (eta_udp6_unmap(in6.sin6_addr.s6_addr, &ip4)) {
        /* ::ffff:<PPE address>: the PPE's over IPv4, as Linux binds it (with
         * IPV6_V6ONLY on the kernel refuses it: EINVAL). */
        struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = in6.sin6_port, .sin_addr = {htonl(ip4)}};
        enum eta_reason why = ETA_R_INET6;
        if (!kernel_v6only(fd) &&
            eta_decide_bind(&eta_net, (const struct sockaddr *)&in, sizeof in, &why) == ETA_BIND_PPE)
            return eta_bind_ppe4(fd, s, (const struct sockaddr *)&in, addr, len);
        to_kernel(fd, s, why == ETA_R_NONE ? ETA_R_INET6 : why, eta_fmt_any(addr, buf, sizeof buf));
        return real_bind(fd, addr, len);
    }
    if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) || IN6_IS_ADDR_MULTICAST(&in6.sin6_addr))
        return eta_udp_bind_any(fd, s, addr, len); /* a hybrid on [::] or a group (udp_sock.c) */
    if (eta_own_addr6((const struct sockaddr *)&in6, sizeof in6))
        return eta_bind_ppe6(fd, s, (const struct sockaddr *)&in6); /* the PPE's IPv6 address (sock6.c) */
    to_kernel(fd, s, IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr) ? ETA_R_LOOPBACK : ETA_R_INET6,
              eta_fmt_any((const struct sockaddr *)&in6, buf, sizeof buf));
    return real_bind(fd, addr, len);
}

enum eta_reason eta_udp6_decide(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    s->v6only = kernel_v6only(fd);
    struct sockaddr_in6 copy;
    memset(&copy, 0, sizeof copy);
    const socklen_t n = len < (socklen_t)sizeof copy ? len : (socklen_t)sizeof copy;
    if (!addr || len < (socklen_t)sizeof(sa_family_t) || eta_ucopy(&copy, addr, (size_t)n) != 0)
        return ETA_R_NOT_INET;
    struct dti_addr6 a6;
    if (eta_udp6_peer(&copy, len, s->v6only, &a6) != 0)
        return ETA_R_NOT_INET; /* the kernel's answer (EINVAL, EAFNOSUPPORT, ENETUNREACH) */
    return eta_decide_udp6(&eta_net, a6.ip, copy.sin6_scope_id);
}

int eta_udp6_hold(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    if (!s->v6 || !eta_net.self_shared || s->bound_kernel)
        return 0;
    struct sockaddr_in6 copy;
    memset(&copy, 0, sizeof copy);
    const socklen_t n = len < (socklen_t)sizeof copy ? len : (socklen_t)sizeof copy;
    struct dti_addr6 a6;
    uint32_t ip4;
    if (!addr || n < (socklen_t)sizeof(sa_family_t) || eta_ucopy(&copy, addr, (size_t)n) != 0 ||
        eta_udp6_peer(&copy, len, s->v6only, &a6) != 0 || eta_udp6_unmap(a6.ip, &ip4))
        return 0; /* IPv4 goes as an AF_INET socket's; a bad address was decided already */
    /* [::] port 0: the port on every address (IPv4 too unless
     * IPV6_V6ONLY), getsockname ::, IPv4 sends still allowed. A specific
     * source (TCP's eta_hold_ephemeral6) would make the kernel socket
     * IPv6-only. */
    return eta_hold_wildcard(fd, s);
}

int eta_udp6_taken(dti_ctx_t *c, struct eta_sock *s)
{
    if (s->v6 && s->bound_kernel) /* the placeholder's port (eta_udp6_hold): [::], v6only as the socket is */
        return eta_bind_any(c, s, s->kernel_port);
    if (!s->v6 || !s->v6only)
        return 0;
    struct dti_addr6 any = {{0}, 0};
    return dti_bind6(c, s->h, &any, DTI_BIND6_V6ONLY);
}

bool eta_udp6_ppe_routes(const struct eta_sock *s, const struct sockaddr *to, socklen_t tolen)
{
    struct sockaddr_in6 copy;
    memset(&copy, 0, sizeof copy);
    const socklen_t n = tolen < (socklen_t)sizeof copy ? tolen : (socklen_t)sizeof copy;
    struct dti_addr6 a6;
    if (n < (socklen_t)sizeof(sa_family_t) || eta_ucopy(&copy, to, (size_t)n) != 0 ||
        eta_udp6_dst(&copy, tolen, s->v6only, &a6) != 0)
        return false; /* the kernel half answers it */
    uint32_t ip4;
    if (eta_udp6_unmap(a6.ip, &ip4))
        return eta_net_udp_routes(&eta_net, ip4);
    return eta_decide_udp6(&eta_net, a6.ip, copy.sin6_scope_id) == ETA_R_NONE;
}

int eta_udp6_send_dst(const struct eta_sock *s, const struct sockaddr *to, socklen_t tolen, struct dti_addr6 *dst,
                      bool *v4)
{
    if (!to)
        return 1;
    struct sockaddr_in6 copy;
    memset(&copy, 0, sizeof copy);
    const socklen_t n = tolen < (socklen_t)sizeof copy ? tolen : (socklen_t)sizeof copy;
    if (n > 0 && eta_ucopy(&copy, to, (size_t)n) != 0)
        return fail(EFAULT);
    int e = eta_udp6_dst(&copy, tolen, s->v6only, dst);
    if (e == ETA_UDP6_NO_DST)
        return 1;
    if (e)
        return fail(e);
    uint32_t ip4;
    *v4 = eta_udp6_unmap(dst->ip, &ip4);
    /* Bound to a v4-mapped address, the socket is an IPv4 one (Linux:
     * EAFNOSUPPORT to an IPv6 destination); bound to an IPv6 address, it
     * cannot send IPv4 (ENETUNREACH). */
    if (!*v4 && s->local.ip)
        return fail(EAFNOSUPPORT);
    if (*v4 && s->local6)
        return fail(ENETUNREACH);
    return 0;
}

int eta_udp6_connect(dti_ctx_t *c, struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    struct sockaddr_in6 copy;
    memset(&copy, 0, sizeof copy);
    const socklen_t n = len < (socklen_t)sizeof copy ? len : (socklen_t)sizeof copy;
    if (n > 0 && eta_ucopy(&copy, addr, (size_t)n) != 0)
        return fail(EFAULT);
    struct dti_addr6 a6;
    int e = eta_udp6_peer(&copy, len, s->v6only, &a6);
    if (e)
        return fail(e);
    uint32_t ip4;
    const bool v4 = eta_udp6_unmap(a6.ip, &ip4);
    if (!v4 && s->local.ip)
        return fail(EAFNOSUPPORT); /* bound to a v4-mapped address: an IPv4 socket (Linux's answer) */
    /* That one is an IPv4 socket in the engine too (dti_bind): its peer as IPv4. */
    struct dti_addr a4 = {ip4, a6.port};
    int rc = v4 && s->local.ip ? dti_dgram_connect(c, s->h, &a4) : dti_dgram_connect6(c, s->h, &a6);
    return rc < 0 ? fail(eta_errno_from_dti(rc)) : 0;
}

int eta_udp6_sockname(dti_ctx_t *c, const struct eta_sock *s, struct sockaddr *out, socklen_t *len)
{
    struct dti_addr6 a;
    int rc = dti_getsockname6(c, s->h, &a);
    if (rc < 0)
        return rc;
    /* (Connected, the engine names its source toward the peer, as Linux's
     * ip6_datagram_connect fixes it.) */
    struct sockaddr_in6 in6 = eta_udp6_name(a.ip, a.port, (uint32_t)eta_net.link6_ifindex);
    socklen_t n = *len < (socklen_t)sizeof in6 ? *len : (socklen_t)sizeof in6;
    memcpy(out, &in6, (size_t)n);
    *len = sizeof in6;
    return 0;
}
