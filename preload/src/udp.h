/* UDP sockets on the PPE (udp.c): the data path of an accelerated AF_INET
 * SOCK_DGRAM socket. Only the data path's files include it. */
#ifndef ETA_PRELOAD_UDP_H
#define ETA_PRELOAD_UDP_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "sockobj.h"

/* socket(domain, type, protocol) is UDP over IPv4 (a candidate: sock.c). */
bool eta_udp_kind(int domain, int type, int protocol);
/* sock.c: a UDP candidate sending to `to` (sendto, sendmsg, sendmmsg): the
 * accelerated socket (referenced) when the PPE takes it, else NULL (the
 * kernel's from now on, or not a UDP candidate). */
struct eta_sock *eta_udp_adopt(int fd, const struct sockaddr *to, socklen_t len);
/* One datagram into iov (truncated to it); *from and *fromlen the sender,
 * *msg_flags MSG_TRUNC when it was cut (each may be NULL). Returns the
 * bytes copied (flags MSG_TRUNC: the datagram's length), or -1 with errno. */
ssize_t eta_udp_recv(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags, struct sockaddr *from,
                     socklen_t *fromlen, int *msg_flags);
/* One datagram of iov's bytes to `to` (NULL: the connected peer). Returns
 * its length, or -1 with errno. */
ssize_t eta_udp_send(struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *to,
                     socklen_t tolen);

#endif
