/* preload/src/own_address.h: the PPE's own addresses (own_address.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct eta_sock;

/* The kernel placeholder's port after a bind: 0 when it cannot be read. */
uint16_t eta_placeholder_port(int fd);

/* Shared port, an unbound UDP socket taken by the PPE: its placeholder binds
 * the wildcard of its family ([::] or 0.0.0.0) at port 0, as Linux's
 * autobind reserves the port on every address (the socket still unbound to
 * an address), and s->kernel_port/s->local keep the kernel's pick for the
 * PPE's socket. Returns 0 or an errno value (EADDRNOTAVAIL: no port left). */
int eta_hold_wildcard(int fd, struct eta_sock *s);

/* True (and one warning per process) when a connect to `addr` must be
 * refused at once: it is an address of the PPE, which cannot carry a
 * connection to itself (`self unreachable`). */
bool eta_connects_to_ppe_itself(const struct sockaddr *addr, socklen_t len);

/* Says once per process that a connect to `addr` (text) goes through the
 * kernel: an address of a port shared with it (counted `local`). */
void eta_note_local(const char *addr);

/* Whether a connect to addr (native6: an AF_INET6 address, else AF_INET)
 * goes to one of the PPE's own addresses that the engine carries (`self
 * local`, `self local6`): on a shared port the shim then awaits the engine's
 * answer and turns a refusal into the kernel's try. */
bool eta_is_local_try(const struct sockaddr *addr, socklen_t len, bool native6);

/* Shared port: binds s's placeholder to the PPE address a connect to `dest`
 * (host order) leaves from, port 0, and keeps the kernel's pick in
 * s->kernel_port for the PPE. Returns 0 or an errno value (EADDRNOTAVAIL
 * when no port is left, as Linux's connect answers). */
int eta_hold_ephemeral(int fd, struct eta_sock *s, uint32_t dest);

/* Binds kernel placeholder fd as bind() would (real_bind); an IPv6 address
 * the kernel still checks for duplicates (DAD, EADDRNOTAVAIL) is bound again
 * with IP_FREEBIND, which is then put back as it was. 0, or -1 with errno. */
int eta_placeholder_bind(int fd, const struct sockaddr *addr, socklen_t len);

/* eta_hold_ephemeral for a native IPv6 connect to dest (16 bytes, network
 * order): the placeholder holds (the PPE IPv6 source address, the kernel's
 * pick); s->local6 names that address, s->kernel_port the port. 0 or an errno
 * value (EADDRNOTAVAIL when no port is left or the PPE has no IPv6 address). */
int eta_hold_ephemeral6(int fd, struct eta_sock *s, const uint8_t dest[16]);

/* Warns once per process when a socket of the kernel's that is not TCP is
 * aimed at a destination the PPE routes (UDP is the kernel's; the PPE's port
 * does not carry it). */
void eta_warn_datagrams_to_ppe(int fd, const struct sockaddr *addr, socklen_t len);
