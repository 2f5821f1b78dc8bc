/* preload/src/sock6.h: IPv6 of accelerated sockets (sock6.c, issue 31). */
#pragma once

#include <dti/dti.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct eta_sock;

/* Binds accelerated socket s in the engine as its program bound it: the
 * PPE half of a hybrid listener on the wildcard address at `port` (0.0.0.0
 * for an AF_INET socket; [::] for an AF_INET6 one, both families, or IPv6
 * only when s->v6only), or, for an AF_INET6 socket, the PPE address bind()
 * put it on (s->local6, which names the address itself, whatever order a
 * restarted PPE lists its addresses in; or s->local, the v4-mapped IPv4
 * one): relisten.c binds it again there. dti_bind's or dti_bind6's answer
 * (-EADDRNOTAVAIL: a new PPE without that address). */
int eta_bind_any(dti_ctx_t *c, const struct eta_sock *s, uint16_t port);

/* Whether addr (AF_INET6, no scope) is one of the PPE's IPv6 addresses
 * (eta_net's port6) where a UDP socket binds it in the PPE (on a port
 * shared with the kernel too: the placeholder binds it first,
 * eta_bind_ppe6). */
bool eta_own_addr6(const struct sockaddr *addr, socklen_t len);
/* The same for a TCP socket. */
bool eta_own_stream6(const struct sockaddr *addr, socklen_t len);

/* bind() of AF_INET6 candidate s to addr, one of the PPE's IPv6 addresses
 * (eta_own_addr6, eta_own_stream6): the PPE's (DTI_BIND6_V6ONLY as
 * IPV6_V6ONLY was set on the kernel placeholder), its listener takes IPv6
 * connections to that address only. On a port shared with the kernel the
 * placeholder binds it first (the kernel's EADDRINUSE; port 0 its pick). 0,
 * or -1 with errno (the kernel's or the engine's EADDRINUSE...;
 * EADDRNOTAVAIL when the PPE gives no socket on a port not shared: the
 * kernel has no such address; shared, the socket stays the kernel's,
 * bound). */
int eta_bind_ppe6(int fd, struct eta_sock *s, const struct sockaddr *addr);

/* The PPE half of socket s whose placeholder holds (s->local6, the
 * kernel's pick s->kernel_port) for a connect (eta_hold_ephemeral6): bound
 * there in the engine too. dti_bind6's answer. */
int eta_bind_held6(dti_ctx_t *c, const struct eta_sock *s);

/* Whether accelerated socket s, bound to one of the PPE's IPv6 addresses
 * (eta_bind_ppe6), connects to addr over IPv6 (an AF_INET6 address): the
 * engine's CONNECT6 from that address (a destination it neither has on
 * link nor routes is its ENETUNREACH). */
bool eta_bound6_to(const struct eta_sock *s, const struct sockaddr *addr, socklen_t len);

/* getsockname (peer false) or getpeername (peer true) of accelerated
 * socket h for an AF_INET6 socket: a sockaddr_in6 with an IPv6
 * connection's own address, an IPv4 one's v4-mapped (::ffff:a.b.c.d, as
 * Linux shows it), truncated to *len as the kernel truncates, *len set to
 * the full size. 0, or the engine's negative error (-ENOTCONN). */
int eta_name6(dti_ctx_t *c, dti_sock_t h, bool peer, struct sockaddr *out, socklen_t *len);

/* Prepares and submits nothing: queues the CONNECT of accelerated socket h
 * to addr (native6: an AF_INET6 address, dti_prep_connect6; else AF_INET,
 * dti_prep_connect), pumping completions once when the queue is full. 0 or
 * the negative error. */
int eta_prep_connect_to(dti_ctx_t *c, dti_sock_t h, const struct sockaddr *addr, bool native6);

/* s->local6 of a socket bound to an IPv6 address the process could not
 * record (254 distinct addresses are): it works where it is, a new PPE
 * refuses it (eta_bind_any: EADDRNOTAVAIL), never [::]. */
#define ETA_LOCAL6_UNKNOWN 0xffu

/* The s->local6 for a socket bound to IPv6 address ip (16 bytes, network
 * order; a handed-over one: exec, SCM_RIGHTS): 1 + the address's entry in
 * the process's table of bound IPv6 addresses (sock6.c; added when new),
 * ETA_LOCAL6_UNKNOWN when the table is full; 0 for :: (no specific address). */
uint8_t eta_local6_of(const uint8_t ip[16]);

/* The address s->local6 names into ip (16 bytes): false (ip zeroed) when
 * it names none (0, ETA_LOCAL6_UNKNOWN). */
bool eta_local6_ip(const struct eta_sock *s, uint8_t ip[16]);

/* "a.b.c.d:port" or "[v6]:port" for logs (buf of 64 bytes holds any). */
const char *eta_fmt_any(const struct sockaddr *a, char *buf, size_t len);
