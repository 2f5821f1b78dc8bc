/* UDP over IPv6 (udp6.c): an AF_INET6 UDP candidate's bind and decisions,
 * and what the data path (udp.c) asks of an AF_INET6 UDP socket's
 * addresses. Internal to preload/src. */
#ifndef ETA_PRELOAD_UDP6_H
#define ETA_PRELOAD_UDP6_H

#include <stdbool.h>
#include <sys/socket.h>

#include "decide.h"
#include "shim.h"

struct eta_sock;

/* bind() of an AF_INET6 UDP candidate (preload/README.md "UDP over IPv6"):
 * [::] a hybrid (eta_udp_bind_any), one of the PPE's IPv6 addresses the
 * PPE's alone (sock6.c eta_bind_ppe6), ::ffff:<PPE address> the PPE's over
 * IPv4 (sock.c eta_bind_ppe4), anything else the kernel's (counted). 0 or
 * -1 with errno. */
int eta_udp6_bind(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len);

/* Where a connect() or first send of AF_INET6 UDP candidate s to addr goes:
 * ETA_R_NONE through the PPE, else why not (an address Linux would refuse:
 * ETA_R_NOT_INET, the kernel answers it). Reads IPV6_V6ONLY from the
 * kernel socket into s->v6only (a system call: never on the data path). */
enum eta_reason eta_udp6_decide(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len);

/* A UDP candidate the PPE is about to take for a connect() or first send
 * to addr, on a port shared with the kernel: a native IPv6 destination's
 * port is the kernel's ephemeral pick, held by the placeholder bound to
 * [::] port 0 (one port space, as TCP's; the wildcard as Linux's autobind).
 * Nothing to do for IPv4 (v4-mapped, AF_INET: the engine picks outside the
 * kernel's range, as for AF_INET sockets) or on a port not shared. 0 or an
 * errno value (no port left: the socket stays the kernel's). */
int eta_udp6_hold(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len);

/* A UDP candidate the PPE just took (eta_make_accel): one whose port the
 * placeholder holds is bound [::] there (eta_bind_any); an IPV6_V6ONLY one
 * is bound to [::] IPv6 only before its first connect or send (which would
 * bind it dual-stack). 0 or the negative error. */
int eta_udp6_taken(dti_ctx_t *c, struct eta_sock *s);

/* A hybrid on [::] sending to `to` (the program's address, tolen bytes):
 * whether it goes through the PPE (a destination the PPE routes) rather
 * than the kernel half. */
bool eta_udp6_ppe_routes(const struct eta_sock *s, const struct sockaddr *to, socklen_t tolen);

/* The destination of a send on accelerated AF_INET6 UDP socket s (to: the
 * program's; NULL: the connected peer): 0 with *dst, 1 for the connected
 * peer (AF_UNSPEC too), or -1 with errno as Linux's udpv6_sendmsg answers
 * (EINVAL, ENETUNREACH, EFAULT; EAFNOSUPPORT to an IPv6 address from a
 * socket bound to a v4-mapped one). *v4 whether it is an IPv4 one. */
int eta_udp6_send_dst(const struct eta_sock *s, const struct sockaddr *to, socklen_t tolen, struct dti_addr6 *dst,
                      bool *v4);

/* connect() of accelerated AF_INET6 UDP socket s (not AF_UNSPEC): the
 * engine's peer, as ip6_datagram_connect answers. 0 or -1 with errno. */
int eta_udp6_connect(dti_ctx_t *c, struct eta_sock *s, const struct sockaddr *addr, socklen_t len);

/* getsockname() of accelerated AF_INET6 UDP socket s: the engine's name
 * (sockaddr_in6; IPv4 ones v4-mapped), a connected one's :: its source
 * toward the peer, as Linux fixes it at connect; truncated to *len, *len
 * the full size. 0 or the engine's negative error. */
int eta_udp6_sockname(dti_ctx_t *c, const struct eta_sock *s, struct sockaddr *out, socklen_t *len);

#endif
