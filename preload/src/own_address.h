/* preload/src/own_address.h: the PPE's own addresses (own_address.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct eta_sock;

/* The kernel placeholder's port after a bind: 0 when it cannot be read. */
uint16_t eta_placeholder_port(int fd);

/* True (and one warning per process) when a connect to `addr` must be
 * refused at once: it is an address of the PPE, which cannot carry a
 * connection to itself (`self unreachable`). */
bool eta_connects_to_ppe_itself(const struct sockaddr *addr, socklen_t len);

/* Says once per process that a connect to `addr` (text) goes through the
 * kernel: an address of a port shared with it (counted `local`). */
void eta_note_local(const char *addr);

/* Shared port: binds s's placeholder to the PPE address a connect to `dest`
 * (host order) leaves from, port 0, and keeps the kernel's pick in
 * s->kernel_port for the PPE. Returns 0 or an errno value (EADDRNOTAVAIL
 * when no port is left, as Linux's connect answers). */
int eta_hold_ephemeral(int fd, struct eta_sock *s, uint32_t dest);

/* Warns once per process when a socket of the kernel's that is not TCP is
 * aimed at a destination the PPE routes (UDP is the kernel's; the PPE's port
 * does not carry it). */
void eta_warn_datagrams_to_ppe(int fd, const struct sockaddr *addr, socklen_t len);
