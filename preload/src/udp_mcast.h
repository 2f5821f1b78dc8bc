/* Multicast of UDP sockets under the shim (udp_mcast.c): memberships of an
 * accelerated socket (both families), the multicast options that stay the
 * kernel half's, and binding to a group. preload/README.md "UDP", the
 * multicast item. Internal to preload/src. */
#ifndef ETA_PRELOAD_UDP_MCAST_H
#define ETA_PRELOAD_UDP_MCAST_H

#include <stdbool.h>
#include <sys/socket.h>

#include "shim.h"

/* setsockopt() of a membership option (mcast_req.h) on an accelerated UDP
 * socket: the engine's membership where the interface named is the PPE's
 * (or none is named), the kernel half's where it is a kernel interface (or
 * none is named, on a hybrid). 0, or -1 with errno. */
int eta_udp_membership(int fd, struct eta_sock *s, int level, int name, const void *val, socklen_t len);

/* Options the kernel socket checks and keeps and the engine's socket
 * follows: IP_MULTICAST_ALL / IPV6_MULTICAST_ALL (whether a socket bound to
 * the wildcard or a group gets the groups other sockets of the host joined,
 * Linux's default 1, or its own memberships' alone: DTI_SO_MCAST_ALL),
 * IP_TTL and IPV6_UNICAST_HOPS (its unicast datagrams' TTL and hop limit:
 * DTI_SO_TTL, DTI_SO_HOPLIMIT). eta_udp_engine_option: the DTI option of
 * (level, name), 0 for none of them; eta_udp_engine_set: the kernel's
 * setsockopt, then the value it reads back to the engine: 0, or -1 with
 * errno. */
int eta_udp_engine_option(int level, int name);
int eta_udp_engine_set(int fd, struct eta_sock *s, int level, int name, const void *val, socklen_t len);

/* Whether a UDP candidate's bind() names a group (AF_INET 224.0.0.0/4, or
 * AF_INET6 ff00::/8): a hybrid bound to it. */
bool eta_udp_bind_is_group(const struct sockaddr *addr, socklen_t len);

/* The engine's memberships of s again, on the PPE that replaced the one
 * they were made on (relisten.c, after the PPE half came back): each one
 * the program made and did not drop. Returns how many the new PPE refused
 * (logged). */
unsigned eta_udp_mcast_replay(dti_ctx_t *c, int fd, struct eta_sock *s);
/* Frees s's record of memberships (the socket's release). */
void eta_udp_mcast_forget(struct eta_sock *s);

#endif
