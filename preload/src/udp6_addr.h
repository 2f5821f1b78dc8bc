/* UDP over IPv6: the addresses of an AF_INET6 UDP socket's calls, read and
 * written as Linux's UDPv6 reads and writes them (udp6_addr.c). Pure: no
 * libdti call, no system call, no program memory (the callers copy in and
 * out); unit test preload_udp_cmsg (udp6_addr_test). Internal to preload/src. */
#ifndef ETA_PRELOAD_UDP6_ADDR_H
#define ETA_PRELOAD_UDP6_ADDR_H

#include <dti/dti.h>

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A send's address of no destination (AF_UNSPEC): the connected peer's. */
#define ETA_UDP6_NO_DST (-1)

/* The destination of a send on an AF_INET6 UDP socket, as udpv6_sendmsg
 * reads it (to: a copy of the program's address, len its length, at most
 * sizeof(struct sockaddr_in6) of it read): 0 with *out (an AF_INET one and
 * a v4-mapped one as ::ffff:a.b.c.d: IPv4); ETA_UDP6_NO_DST for AF_UNSPEC;
 * else the errno value: EINVAL (shorter than a family, an AF_INET6 one
 * shorter than SIN6_LEN_RFC2133's 24 bytes, an AF_INET one shorter than a
 * sockaddr_in, any other family), ENETUNREACH (IPv4 from an IPV6_V6ONLY
 * socket). */
int eta_udp6_dst(const void *to, socklen_t len, bool v6only, struct dti_addr6 *out);

/* The peer of a connect() on an AF_INET6 UDP socket (not AF_UNSPEC: the
 * caller dissolves), as ip6_datagram_connect reads it: 0 with *out (IPv4
 * v4-mapped); else EAFNOSUPPORT (AF_INET on an IPV6_V6ONLY socket, a family
 * other than AF_INET/AF_INET6), EINVAL (too short), ENETUNREACH (v4-mapped
 * on an IPV6_V6ONLY socket). */
int eta_udp6_peer(const void *addr, socklen_t len, bool v6only, struct dti_addr6 *out);

/* ::ffff:a.b.c.d for IPv4 address ip (host order) into out (16 bytes). */
void eta_udp6_map(uint32_t ip, uint8_t out[16]);
/* Whether ip (16 bytes) is v4-mapped; *ip4 its IPv4 address (host order). */
bool eta_udp6_unmap(const uint8_t ip[16], uint32_t *ip4);

/* A sender's name as an AF_INET6 socket gives it: sockaddr_in6, flow info
 * 0, ip (network order) and port (host order); the scope id for a
 * link-local address (0 for every other, as Linux's ipv6_iface_scope_id). */
struct sockaddr_in6 eta_udp6_name(const uint8_t ip[16], uint16_t port, uint32_t link_scope);

#ifdef __cplusplus
}
#endif

#endif
