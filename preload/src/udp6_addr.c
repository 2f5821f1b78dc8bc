/* UDP over IPv6 addresses: udp6_addr.h. */
#include "udp6_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

/* Up to a sockaddr_in6 of what the program gave (zeros past len). */
static struct sockaddr_in6 copy_in6(const void *a, socklen_t len)
{
    struct sockaddr_in6 in6;
    memset(&in6, 0, sizeof in6);
    memcpy(&in6, a, len < (socklen_t)sizeof in6 ? (size_t)len : sizeof in6);
    return in6;
}

static struct dti_addr6 of_in6(const struct sockaddr_in6 *in6)
{
    struct dti_addr6 d = {.port = ntohs(in6->sin6_port)};
    memcpy(d.ip, in6->sin6_addr.s6_addr, 16);
    return d;
}

static struct dti_addr6 of_in(const void *a)
{
    struct sockaddr_in in;
    memcpy(&in, a, sizeof in);
    struct dti_addr6 d = {.port = ntohs(in.sin_port)};
    eta_udp6_map(ntohl(in.sin_addr.s_addr), d.ip);
    return d;
}

int eta_udp6_dst(const void *to, socklen_t len, bool v6only, struct dti_addr6 *out)
{
    if (len < (socklen_t)offsetof(struct sockaddr, sa_data))
        return EINVAL;
    sa_family_t fam;
    memcpy(&fam, to, sizeof fam);
    switch (fam) {
    case AF_INET6: {
        if (len < 24) /* SIN6_LEN_RFC2133: no scope id */
            return EINVAL;
        struct sockaddr_in6 in6 = copy_in6(to, len);
        *out = of_in6(&in6);
        uint32_t ip4;
        return v6only && eta_udp6_unmap(out->ip, &ip4) ? ENETUNREACH : 0;
    }
    case AF_INET: /* udp_sendmsg's, after the IPV6_V6ONLY check */
        if (v6only)
            return ENETUNREACH;
        if (len < (socklen_t)sizeof(struct sockaddr_in))
            return EINVAL;
        *out = of_in(to);
        return 0;
    case AF_UNSPEC:
        return ETA_UDP6_NO_DST;
    default:
        return EINVAL;
    }
}

int eta_udp6_peer(const void *addr, socklen_t len, bool v6only, struct dti_addr6 *out)
{
    sa_family_t fam = AF_UNSPEC;
    if (len >= (socklen_t)sizeof fam)
        memcpy(&fam, addr, sizeof fam);
    else
        return EINVAL;
    if (fam == AF_INET) { /* __ip4_datagram_connect's, once IPV6_V6ONLY is off */
        if (v6only)
            return EAFNOSUPPORT;
        if (len < (socklen_t)sizeof(struct sockaddr_in))
            return EINVAL;
        *out = of_in(addr);
        return 0;
    }
    if (len < 24)
        return EINVAL;
    if (fam != AF_INET6)
        return EAFNOSUPPORT;
    struct sockaddr_in6 in6 = copy_in6(addr, len);
    *out = of_in6(&in6);
    uint32_t ip4;
    return v6only && eta_udp6_unmap(out->ip, &ip4) ? ENETUNREACH : 0;
}

void eta_udp6_map(uint32_t ip, uint8_t out[16])
{
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    const uint32_t n = htonl(ip);
    memcpy(out + 12, &n, 4);
}

bool eta_udp6_unmap(const uint8_t ip[16], uint32_t *ip4)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(ip, prefix, sizeof prefix) != 0)
        return false;
    uint32_t n;
    memcpy(&n, ip + 12, 4);
    *ip4 = ntohl(n);
    return true;
}

struct sockaddr_in6 eta_udp6_name(const uint8_t ip[16], uint16_t port, uint32_t link_scope)
{
    struct sockaddr_in6 in6;
    memset(&in6, 0, sizeof in6);
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(port);
    memcpy(in6.sin6_addr.s6_addr, ip, 16);
    if (IN6_IS_ADDR_LINKLOCAL(&in6.sin6_addr) || IN6_IS_ADDR_MC_LINKLOCAL(&in6.sin6_addr))
        in6.sin6_scope_id = link_scope;
    return in6;
}
