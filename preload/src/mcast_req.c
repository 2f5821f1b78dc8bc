/* Multicast membership requests (mcast_req.h): the option values read as
 * Linux's do_ip_setsockopt and do_ipv6_setsockopt read them. */
#include "mcast_req.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

bool eta_mcast_membership_option(int level, int name)
{
    if (level == IPPROTO_IP)
        return name == IP_ADD_MEMBERSHIP || name == IP_DROP_MEMBERSHIP || name == IP_ADD_SOURCE_MEMBERSHIP ||
               name == IP_DROP_SOURCE_MEMBERSHIP || name == MCAST_JOIN_GROUP || name == MCAST_LEAVE_GROUP ||
               name == MCAST_JOIN_SOURCE_GROUP || name == MCAST_LEAVE_SOURCE_GROUP;
    if (level == IPPROTO_IPV6)
        return name == IPV6_ADD_MEMBERSHIP || name == IPV6_DROP_MEMBERSHIP || name == MCAST_JOIN_GROUP ||
               name == MCAST_LEAVE_GROUP || name == MCAST_JOIN_SOURCE_GROUP || name == MCAST_LEAVE_SOURCE_GROUP;
    return false;
}

bool eta_mcast_filter_option(int level, int name)
{
    if (level == IPPROTO_IP)
        return name == IP_BLOCK_SOURCE || name == IP_UNBLOCK_SOURCE || name == IP_MSFILTER ||
               name == MCAST_BLOCK_SOURCE || name == MCAST_UNBLOCK_SOURCE || name == MCAST_MSFILTER;
    if (level == IPPROTO_IPV6)
        return name == MCAST_BLOCK_SOURCE || name == MCAST_UNBLOCK_SOURCE || name == MCAST_MSFILTER;
    return false;
}

static uint32_t v4_of(const struct sockaddr_storage *ss)
{
    struct sockaddr_in in;
    memcpy(&in, ss, sizeof in);
    return ntohl(in.sin_addr.s_addr);
}

static void v6_of(const struct sockaddr_storage *ss, uint8_t out[16])
{
    struct sockaddr_in6 in6;
    memcpy(&in6, ss, sizeof in6);
    memcpy(out, in6.sin6_addr.s6_addr, 16);
}

/* MCAST_* (RFC 3678): struct group_req / group_source_req. At SOL_IP the
 * group must be AF_INET (EINVAL, ip_mc_join_group's caller); at SOL_IPV6
 * an AF_INET6 one (EADDRNOTAVAIL, ipv6_mcast_join_leave). */
static int parse_mcast(int level, int name, const void *val, socklen_t len, struct eta_mcast_req *out)
{
    const bool source = name == MCAST_JOIN_SOURCE_GROUP || name == MCAST_LEAVE_SOURCE_GROUP;
    out->join = name == MCAST_JOIN_GROUP || name == MCAST_JOIN_SOURCE_GROUP;
    out->has_source = source;
    struct group_source_req gsr;
    memset(&gsr, 0, sizeof gsr);
    if (source) {
        if (len < (socklen_t)sizeof gsr)
            return EINVAL;
        memcpy(&gsr, val, sizeof gsr);
    } else {
        struct group_req gr;
        if (len < (socklen_t)sizeof gr)
            return EINVAL;
        memcpy(&gr, val, sizeof gr);
        gsr.gsr_interface = gr.gr_interface;
        gsr.gsr_group = gr.gr_group;
    }
    out->ifindex = (int)gsr.gsr_interface;
    if (level == IPPROTO_IP) {
        if (gsr.gsr_group.ss_family != AF_INET || (source && gsr.gsr_source.ss_family != AF_INET))
            return EINVAL;
        out->group4 = v4_of(&gsr.gsr_group);
        out->source4 = source ? v4_of(&gsr.gsr_source) : 0;
        return 0;
    }
    if (gsr.gsr_group.ss_family != AF_INET6 || (source && gsr.gsr_source.ss_family != AF_INET6))
        return EADDRNOTAVAIL;
    out->v6 = true;
    v6_of(&gsr.gsr_group, out->group6);
    if (source)
        v6_of(&gsr.gsr_source, out->source6);
    return 0;
}

int eta_mcast_parse(int level, int name, const void *val, socklen_t len, bool is_v6_socket,
                    struct eta_mcast_req *out)
{
    memset(out, 0, sizeof *out);
    if (level == IPPROTO_IPV6 && !is_v6_socket)
        return ENOPROTOOPT;
    if (!val)
        return EFAULT;
    if (name == MCAST_JOIN_GROUP || name == MCAST_LEAVE_GROUP || name == MCAST_JOIN_SOURCE_GROUP ||
        name == MCAST_LEAVE_SOURCE_GROUP)
        return parse_mcast(level, name, val, len, out);
    if (level == IPPROTO_IPV6) {
        struct ipv6_mreq m;
        if (len < (socklen_t)sizeof m)
            return EINVAL;
        memcpy(&m, val, sizeof m);
        out->v6 = true;
        out->join = name == IPV6_ADD_MEMBERSHIP;
        memcpy(out->group6, m.ipv6mr_multiaddr.s6_addr, 16);
        out->ifindex = (int)m.ipv6mr_interface;
        return 0;
    }
    if (name == IP_ADD_SOURCE_MEMBERSHIP || name == IP_DROP_SOURCE_MEMBERSHIP) {
        struct ip_mreq_source m;
        if (len < (socklen_t)sizeof m)
            return EINVAL;
        memcpy(&m, val, sizeof m);
        out->join = name == IP_ADD_SOURCE_MEMBERSHIP;
        out->has_source = true;
        out->group4 = ntohl(m.imr_multiaddr.s_addr);
        out->if_addr4 = ntohl(m.imr_interface.s_addr);
        out->source4 = ntohl(m.imr_sourceaddr.s_addr);
        return 0;
    }
    /* IP_ADD_MEMBERSHIP: an ip_mreqn when it is long enough for one, else
     * an ip_mreq (ip_mreqn's first two fields), as Linux reads it. */
    struct ip_mreqn mn;
    memset(&mn, 0, sizeof mn);
    if (len >= (socklen_t)sizeof mn)
        memcpy(&mn, val, sizeof mn);
    else if (len >= (socklen_t)sizeof(struct ip_mreq))
        memcpy(&mn, val, sizeof(struct ip_mreq));
    else
        return EINVAL;
    out->join = name == IP_ADD_MEMBERSHIP;
    out->group4 = ntohl(mn.imr_multiaddr.s_addr);
    out->if_addr4 = ntohl(mn.imr_address.s_addr);
    out->ifindex = mn.imr_ifindex;
    return 0;
}

int eta_mcast_if_parse(const void *val, socklen_t len, uint32_t *addr4, int *ifindex)
{
    struct ip_mreqn mr;
    memset(&mr, 0, sizeof mr);
    if (len >= (socklen_t)sizeof(struct ip_mreqn))
        memcpy(&mr, val, sizeof mr);
    else if (len >= (socklen_t)sizeof(struct ip_mreq))
        memcpy(&mr, val, sizeof(struct ip_mreq)); /* imr_interface lands on imr_address */
    else if (len >= (socklen_t)sizeof(struct in_addr))
        memcpy(&mr.imr_address, val, sizeof(struct in_addr));
    else
        return EINVAL;
    *addr4 = ntohl(mr.imr_address.s_addr);
    *ifindex = mr.imr_ifindex;
    return 0;
}
