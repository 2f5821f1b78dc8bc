/* UDP sockets' lifecycle (udp_sock.c): what sock.c hands over for a UDP
 * candidate or an accelerated UDP socket. (The first send of an unbound one,
 * eta_udp_adopt(), is declared in udp.h for the data path.) Internal to
 * preload/src. */
#ifndef ETA_PRELOAD_UDP_SOCK_H
#define ETA_PRELOAD_UDP_SOCK_H

#include <sys/socket.h>

#include "shim.h"

/* bind() of a UDP candidate to INADDR_ANY: a hybrid (the kernel socket and
 * the PPE's at the same port), or the kernel's alone when the PPE cannot take
 * the port (counted). 0, or -1 with errno (the kernel's bind failed: still a
 * candidate). */
int eta_udp_bind_any(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len);
/* On a port shared with the kernel: s, accelerated, has its kernel
 * placeholder bound to the PPE's address (or held on [::]) and unconnected;
 * the kernel loops datagrams from this host's programs to that address and
 * port there. The shim reads it as a hybrid's kernel half (udp.c: both
 * halves received, datagrams to the PPE's own addresses sent through it). */
void eta_udp_read_placeholder(int fd, struct eta_sock *s);
/* connect() of a UDP socket (candidate or accelerated): 0 or -1 with errno. */
int eta_udp_connect(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len);
/* shutdown() of an accelerated UDP socket: 0 or -1 with errno. */
int eta_udp_shutdown(dti_ctx_t *c, struct eta_sock *s, int how);

#endif
