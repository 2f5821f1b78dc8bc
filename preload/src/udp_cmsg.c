/* Ancillary data of an accelerated UDP socket: udp_cmsg.h. */
#include "udp_cmsg.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef IPV6_FLOWINFO
#define IPV6_FLOWINFO 11 /* linux/in6.h */
#endif
#ifndef IP_PROTOCOL
#define IP_PROTOCOL 52 /* linux/in.h */
#endif

struct put {
    uint8_t *at;
    size_t left;
    int *flags;
};

/* Linux's put_cmsg: the header and as much of the data as fits, then the
 * next message starts CMSG_SPACE further on (or at the end). */
static void put_cmsg(struct put *p, int level, int type, const void *data, size_t len)
{
    if (p->left < sizeof(struct cmsghdr)) {
        *p->flags |= MSG_CTRUNC;
        return;
    }
    size_t cmlen = CMSG_LEN(len);
    if (p->left < cmlen) {
        *p->flags |= MSG_CTRUNC;
        cmlen = p->left;
    }
    struct cmsghdr h = {.cmsg_len = cmlen, .cmsg_level = level, .cmsg_type = type};
    memcpy(p->at, &h, sizeof h);
    memcpy(p->at + CMSG_LEN(0), data, cmlen - CMSG_LEN(0));
    size_t step = CMSG_SPACE(len);
    if (step > p->left)
        step = p->left;
    p->at += step;
    p->left -= step;
}

size_t eta_udp_put_cmsgs(uint8_t *buf, size_t cap, unsigned want, const struct eta_udp_rx_meta *m,
                         int *msg_flags)
{
    struct put p = {buf, buf ? cap : 0, msg_flags};
    const int64_t sec = (int64_t)(m->real_ns / 1000000000u), nsec = (int64_t)(m->real_ns % 1000000000u);
    const bool is_new = want & ETA_RX_TS_NEW;
    if (want & ETA_RX_TSNS) {
        const int64_t ts[2] = {sec, nsec}; /* struct timespec, __kernel_timespec: the same on LP64 */
        put_cmsg(&p, SOL_SOCKET, is_new ? SO_TIMESTAMPNS_NEW : SO_TIMESTAMPNS_OLD, ts, sizeof ts);
    } else if (want & ETA_RX_TS) {
        const int64_t tv[2] = {sec, nsec / 1000}; /* struct timeval, __kernel_sock_timeval */
        put_cmsg(&p, SOL_SOCKET, is_new ? SO_TIMESTAMP_NEW : SO_TIMESTAMP_OLD, tv, sizeof tv);
    }
    if (m->gro_size) {
        const int gso_size = m->gro_size;
        put_cmsg(&p, SOL_UDP, UDP_GRO, &gso_size, sizeof gso_size);
    }
    if (want & ETA_RX_PKTINFO6) {
        struct in6_pktinfo pi6 = {.ipi6_ifindex = (unsigned)m->ifindex};
        if (m->ip6) {
            memcpy(pi6.ipi6_addr.s6_addr, m->dst6, 16);
        } else { /* ::ffff:a.b.c.d */
            const uint32_t n = htonl(m->dst_ip);
            pi6.ipi6_addr.s6_addr[10] = pi6.ipi6_addr.s6_addr[11] = 0xff;
            memcpy(&pi6.ipi6_addr.s6_addr[12], &n, 4);
        }
        put_cmsg(&p, SOL_IPV6, IPV6_PKTINFO, &pi6, sizeof pi6);
    }
    if (m->ip6) {
        if (want & ETA_RX_HOPLIMIT6) {
            const int hlim = m->ttl;
            put_cmsg(&p, SOL_IPV6, IPV6_HOPLIMIT, &hlim, sizeof hlim);
        }
        if (want & ETA_RX_TCLASS6) {
            const int tclass = m->tos;
            put_cmsg(&p, SOL_IPV6, IPV6_TCLASS, &tclass, sizeof tclass);
        }
        return buf ? cap - p.left : 0;
    }
    if (want & ETA_RX_PKTINFO) {
        struct in_pktinfo pi = {.ipi_ifindex = m->ifindex,
                                .ipi_spec_dst = {htonl(m->spec_dst)},
                                .ipi_addr = {htonl(m->dst_ip)}};
        put_cmsg(&p, SOL_IP, IP_PKTINFO, &pi, sizeof pi);
    }
    if (want & ETA_RX_TTL) {
        const int ttl = m->ttl;
        put_cmsg(&p, SOL_IP, IP_TTL, &ttl, sizeof ttl);
    }
    if (want & ETA_RX_TOS)
        put_cmsg(&p, SOL_IP, IP_TOS, &m->tos, 1);
    return buf ? cap - p.left : 0;
}

/* The levels both families' sends read alike (sock_cmsg_send,
 * udp_cmsg_send): SOL_SOCKET's SCM_RIGHTS/SCM_CREDENTIALS ignored on UDP,
 * its other types not carried (SO_MARK, SO_TIMESTAMPING, SCM_TXTIME...:
 * EOPNOTSUPP; Linux's EINVAL for the rest); SOL_UDP's UDP_SEGMENT a u16
 * (EINVAL otherwise: __udp_cmsg_send; the size is read by
 * eta_udp_cmsg_gso), its other types ignored. 0: accepted or skipped; else
 * the errno. */
static int socket_or_udp(const struct cmsghdr *h)
{
    if (h->cmsg_level == SOL_SOCKET)
        return h->cmsg_type != SCM_RIGHTS && h->cmsg_type != SCM_CREDENTIALS ? EOPNOTSUPP : 0;
    return h->cmsg_type == UDP_SEGMENT && h->cmsg_len != CMSG_LEN(sizeof(uint16_t)) ? EINVAL : 0; /* SOL_UDP */
}

int eta_udp_cmsg_gso(const uint8_t *buf, size_t len)
{
    int gso = -1;
    size_t off = 0;
    while (off + sizeof(struct cmsghdr) <= len) {
        struct cmsghdr h;
        memcpy(&h, buf + off, sizeof h);
        if (h.cmsg_len < sizeof h || h.cmsg_len > len - off)
            break; /* the readers refused it already */
        if (h.cmsg_level == SOL_UDP && h.cmsg_type == UDP_SEGMENT && h.cmsg_len == CMSG_LEN(sizeof(uint16_t))) {
            uint16_t v;
            memcpy(&v, buf + off + CMSG_LEN(0), sizeof v);
            gso = v; /* the last one, as Linux reads them in order */
        }
        off += CMSG_ALIGN(h.cmsg_len);
    }
    return gso;
}

/* ip_cmsg_send: allow6 is an AF_INET6 socket's (its IPV6_PKTINFO read, v4-mapped). */
static int read_send4(const uint8_t *buf, size_t len, bool allow6, uint32_t *spec_dst, int *ifindex, int *tos)
{
    *spec_dst = 0;
    *ifindex = 0;
    *tos = -1;
    size_t off = 0;
    /* for_each_cmsghdr: a message starts where a header fits; CMSG_OK: its
     * length covers its header and stays inside the buffer. */
    while (off + sizeof(struct cmsghdr) <= len) {
        struct cmsghdr h;
        memcpy(&h, buf + off, sizeof h);
        if (h.cmsg_len < sizeof h || h.cmsg_len > len - off)
            return EINVAL;
        const uint8_t *data = buf + off + CMSG_LEN(0);
        if (allow6 && h.cmsg_level == SOL_IPV6 && h.cmsg_type == IPV6_PKTINFO) {
            struct in6_pktinfo pi6;
            if (h.cmsg_len < CMSG_LEN(sizeof pi6))
                return EINVAL;
            memcpy(&pi6, data, sizeof pi6);
            if (!IN6_IS_ADDR_V4MAPPED(&pi6.ipi6_addr))
                return EINVAL;
            if (pi6.ipi6_ifindex)
                *ifindex = (int)pi6.ipi6_ifindex;
            uint32_t n;
            memcpy(&n, &pi6.ipi6_addr.s6_addr[12], 4);
            *spec_dst = ntohl(n);
        } else if (h.cmsg_level == SOL_SOCKET || h.cmsg_level == SOL_UDP) {
            const int e = socket_or_udp(&h);
            if (e)
                return e;
        } else if (h.cmsg_level == SOL_IP) {
            switch (h.cmsg_type) {
            case IP_PKTINFO: {
                if (h.cmsg_len != CMSG_LEN(sizeof(struct in_pktinfo)))
                    return EINVAL;
                struct in_pktinfo pi;
                memcpy(&pi, data, sizeof pi);
                *ifindex = pi.ipi_ifindex;
                *spec_dst = ntohl(pi.ipi_spec_dst.s_addr);
                break;
            }
            case IP_TOS: { /* an int or a byte, 0..255 (ip_cmsg_send) */
                int v;
                if (h.cmsg_len == CMSG_LEN(sizeof(int)))
                    memcpy(&v, data, sizeof v);
                else if (h.cmsg_len == CMSG_LEN(1))
                    v = data[0];
                else
                    return EINVAL;
                if (v < 0 || v > 255)
                    return EINVAL;
                *tos = v;
                break;
            }
            case IP_TTL:
            case IP_RETOPTS:
            case IP_PROTOCOL:
                return EOPNOTSUPP; /* Linux takes them; the PPE does not carry them */
            default:
                return EINVAL; /* ip_cmsg_send's default */
            }
        }
        off += CMSG_ALIGN(h.cmsg_len);
    }
    return 0;
}

int eta_udp_read_send_cmsgs(const uint8_t *buf, size_t len, uint32_t *spec_dst, int *ifindex, int *tos)
{
    return read_send4(buf, len, false, spec_dst, ifindex, tos);
}

int eta_udp_read_send_cmsgs_mapped(const uint8_t *buf, size_t len, uint32_t *spec_dst, int *ifindex, int *tos)
{
    return read_send4(buf, len, true, spec_dst, ifindex, tos);
}

int eta_udp_read_send_cmsgs6(const uint8_t *buf, size_t len, uint8_t spec6[16], int *ifindex, int *tclass)
{
    memset(spec6, 0, 16);
    *ifindex = 0;
    *tclass = -1;
    size_t off = 0;
    while (off + sizeof(struct cmsghdr) <= len) {
        struct cmsghdr h;
        memcpy(&h, buf + off, sizeof h);
        if (h.cmsg_len < sizeof h || h.cmsg_len > len - off)
            return EINVAL;
        const uint8_t *data = buf + off + CMSG_LEN(0);
        if (h.cmsg_level == SOL_SOCKET || h.cmsg_level == SOL_UDP) {
            const int e = socket_or_udp(&h);
            if (e)
                return e;
        } else if (h.cmsg_level == SOL_IPV6) {
            switch (h.cmsg_type) {
            case IPV6_PKTINFO:
            case IPV6_2292PKTINFO: {
                struct in6_pktinfo pi6;
                if (h.cmsg_len < CMSG_LEN(sizeof pi6))
                    return EINVAL;
                memcpy(&pi6, data, sizeof pi6);
                *ifindex = (int)pi6.ipi6_ifindex;
                memcpy(spec6, pi6.ipi6_addr.s6_addr, 16);
                break;
            }
            case IPV6_TCLASS: { /* an int, -1 (the socket's) .. 255 (ip6_datagram_send_ctl) */
                int v;
                if (h.cmsg_len != CMSG_LEN(sizeof(int)))
                    return EINVAL;
                memcpy(&v, data, sizeof v);
                if (v < -1 || v > 255)
                    return EINVAL;
                *tclass = v;
                break;
            }
            case IPV6_2292HOPLIMIT:
            case IPV6_HOPLIMIT:
            case IPV6_DONTFRAG:
                if (h.cmsg_len != CMSG_LEN(sizeof(int)))
                    return EINVAL; /* Linux checks their length first */
                return EOPNOTSUPP;
            case IPV6_FLOWINFO:
            case IPV6_2292HOPOPTS:
            case IPV6_HOPOPTS:
            case IPV6_2292DSTOPTS:
            case IPV6_DSTOPTS:
            case IPV6_RTHDRDSTOPTS:
            case IPV6_2292RTHDR:
            case IPV6_RTHDR:
                return EOPNOTSUPP; /* Linux takes them; the PPE does not carry them */
            default:
                return EINVAL; /* ip6_datagram_send_ctl's default */
            }
        }
        /* SOL_IP and the rest: skipped on an IPv6 send */
        off += CMSG_ALIGN(h.cmsg_len);
    }
    return 0;
}
