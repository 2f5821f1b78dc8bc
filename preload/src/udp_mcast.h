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
 * DTI_SO_TTL, DTI_SO_HOPLIMIT), IP_MULTICAST_TTL, IPV6_MULTICAST_HOPS,
 * IP_MULTICAST_LOOP, IPV6_MULTICAST_LOOP (its datagrams to groups:
 * DTI_SO_MCAST_TTL/HOPS/LOOP/LOOP6). eta_udp_engine_option: the DTI option of
 * (level, name), 0 for none of them; eta_udp_engine_set: the kernel's
 * setsockopt, then the value it reads back to the engine: 0, or -1 with
 * errno. */
int eta_udp_engine_option(int level, int name);
int eta_udp_engine_set(int fd, struct eta_sock *s, int level, int name, const void *val, socklen_t len);
/* The same options set before the socket was accelerated (or before its PPE
 * half came back on a new PPE): each read back from the kernel socket and
 * prepared for the engine where it is not the engine's default (the
 * caller submits). */
void eta_udp_carry_options(dti_ctx_t *c, int fd, struct eta_sock *s);

/* IP_MULTICAST_IF on a UDP candidate or accelerated socket. Naming the PPE's
 * port (one of its addresses, or a shared port's interface index) makes the
 * socket's IPv4 group sends the engine's: a candidate's first send to a
 * group takes it to the PPE, a hybrid sends groups through its PPE half;
 * the kernel socket takes the value too where it can (an unshared port's
 * address it cannot: the shim then answers getsockopt). Another interface
 * is the kernel socket's, as before, except on a socket the PPE alone holds
 * (EOPNOTSUPP: it has no way out there). A socket already the kernel's
 * for good gets the kernel's answer alone. 0, or -1 with errno.
 * eta_udp_mcast_if_get: getsockopt's answer when the kernel did not take it. */
int eta_udp_mcast_if(int fd, struct eta_sock *s, const void *val, socklen_t len);
int eta_udp_mcast_if_get(struct eta_sock *s, void *val, socklen_t *len);

/* Whether a UDP candidate's bind() names a group (AF_INET 224.0.0.0/4, or
 * AF_INET6 ff00::/8): a hybrid bound to it. */
bool eta_udp_bind_is_group(const struct sockaddr *addr, socklen_t len);

/* The engine's memberships of s again, on the PPE that replaced the one
 * they were made on (relisten.c, after the PPE half came back): each one
 * the program made and did not drop. Returns how many the new PPE refused
 * (logged). */
unsigned eta_udp_mcast_replay(dti_ctx_t *c, int fd, struct eta_sock *s);
/* s's record of engine memberships, as the program made them, as the exec
 * handover's and a passed socket's records (mcast_record.h; out holds
 * ETA_MCAST_MAX): how many. No allocation (an exec's writer, in a vfork
 * child too). */
#define ETA_MCAST_MAX 40u
struct eta_mcast_rec;
unsigned eta_udp_mcast_export(const struct eta_sock *s, struct eta_mcast_rec *out);
/* Records n memberships of s the engine holds already (a socket adopted
 * after exec or received over SCM_RIGHTS; checked by mcast_record.c), for a
 * PPE restart to join them again (eta_udp_mcast_replay). */
void eta_udp_mcast_import(struct eta_sock *s, const struct eta_mcast_rec *m, unsigned n);
/* Frees s's record of memberships (the socket's release). */
void eta_udp_mcast_forget(struct eta_sock *s);

#endif
