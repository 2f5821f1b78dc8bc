/* A multicast membership request as a program writes it (mcast_req.c):
 * the option's value read the way Linux reads it, pure (no system calls),
 * for the shim's membership calls (udp_mcast.c) and unit tests. Internal to
 * preload/src. */
#ifndef ETA_PRELOAD_MCAST_REQ_H
#define ETA_PRELOAD_MCAST_REQ_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct eta_mcast_req {
    bool v6;             /* an IPv6 group */
    bool join;           /* else leave */
    bool has_source;     /* source-specific */
    uint32_t group4, source4, if_addr4; /* IPv4, host order; if_addr4 0: none named */
    uint8_t group6[16], source6[16];    /* IPv6, network order */
    int ifindex;         /* the interface by index, 0: none named */
};

/* Whether (level, name) is a membership option: IP_ADD/DROP_MEMBERSHIP,
 * IP_ADD/DROP_SOURCE_MEMBERSHIP, IPV6_ADD/DROP_MEMBERSHIP, and the
 * protocol-independent MCAST_JOIN/LEAVE_GROUP and MCAST_JOIN/LEAVE_SOURCE_GROUP
 * (RFC 3678) at SOL_IP or SOL_IPV6. */
bool eta_mcast_membership_option(int level, int name);

/* Whether (level, name) filters sources of a membership in exclude mode or
 * sets a whole filter (IP_BLOCK_SOURCE, IP_UNBLOCK_SOURCE, IP_MSFILTER,
 * MCAST_BLOCK_SOURCE, MCAST_UNBLOCK_SOURCE, MCAST_MSFILTER): not carried. */
bool eta_mcast_filter_option(int level, int name);

/* Reads val/len of membership option (level, name) into *out: 0, or an
 * errno value as Linux answers (EINVAL: too short, or a group address of
 * the wrong family for the level; EADDRNOTAVAIL where Linux's IPv6 code
 * says it). is_v6_socket: an AF_INET6 socket (SOL_IPV6 options need one:
 * ENOPROTOOPT otherwise, as Linux's ipv6 level on an AF_INET socket). */
int eta_mcast_parse(int level, int name, const void *val, socklen_t len, bool is_v6_socket,
                    struct eta_mcast_req *out);

/* Reads the value of IP_MULTICAST_IF as Linux reads it (by its length: an
 * ip_mreqn, its address and interface index; an ip_mreq, its second
 * address; an in_addr): *addr4 host order, *ifindex; EINVAL when shorter
 * than an in_addr. */
int eta_mcast_if_parse(const void *val, socklen_t len, uint32_t *addr4, int *ifindex);

#endif
