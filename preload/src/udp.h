/* UDP sockets on the PPE (udp.c): the data path of an accelerated AF_INET
 * SOCK_DGRAM socket, its ancillary data and FIONREAD. */
#ifndef ETA_PRELOAD_UDP_H
#define ETA_PRELOAD_UDP_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "sockobj.h"

/* socket(domain, type, protocol) is UDP over IPv4 or IPv6 (a candidate: sock.c). */
bool eta_udp_kind(int domain, int type, int protocol);
/* udp_sock.c: a UDP candidate sending to `to` (sendto, sendmsg, sendmmsg): the
 * accelerated socket (referenced) when the PPE takes it, else NULL (the
 * kernel's from now on, or not a UDP candidate). */
struct eta_sock *eta_udp_adopt(int fd, const struct sockaddr *to, socklen_t len);
/* One datagram into iov (truncated to it); *from and *fromlen the sender,
 * *msg_flags MSG_TRUNC when it was cut (each may be NULL). controllen
 * (NULL: no ancillary data, recv/recvfrom/read) holds the room at control
 * (the program's msg_control; NULL: none) and gets the bytes of control
 * messages written there (IP_PKTINFO, SO_TIMESTAMP(NS), IP_RECVTOS,
 * IP_RECVTTL as the socket asked: udp_cmsg.h; MSG_CTRUNC in *msg_flags
 * when they did not fit). A hybrid (bound to INADDR_ANY, s->hybrid) also
 * receives its kernel half's (fd; -1: the PPE's only), looked at with a
 * system call only when the PPE's half is empty or its turn came (udp.c). Returns the bytes copied (flags MSG_TRUNC: the datagram's length),
 * or -1 with errno. */
ssize_t eta_udp_recv(int fd, struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags,
                     struct sockaddr *from, socklen_t *fromlen, int *msg_flags, void *control, size_t *controllen);
/* The control messages of a sendmsg on an accelerated socket: 0 when the
 * PPE honours them (IP_PKTINFO or IPV6_PKTINFO naming the socket's own
 * address, or none), else -1 with errno (udp_cmsg.h: EINVAL as Linux,
 * EOPNOTSUPP for what the PPE does not carry). to4: an IPv4 destination
 * (an AF_INET6 socket reads them as Linux does for its family). *tos: this
 * datagram's TOS or traffic class (an IP_TOS or IPV6_TCLASS message), -1 the
 * socket's; *gso: its UDP_SEGMENT size (a SOL_UDP message), -1 the socket's. */
int eta_udp_send_cmsgs(struct eta_sock *s, const void *control, size_t controllen, bool to4, int *tos, int *gso);
/* Options of an accelerated UDP socket that the kernel socket keeps (it
 * checks the value and answers getsockopt) and the engine needs not:
 * path MTU discovery's modes (IP_MTU_DISCOVER, IPV6_MTU_DISCOVER,
 * IPV6_DONTFRAG: the engine never fragments, whatever the mode: a datagram
 * above the path MTU is EMSGSIZE), IP_FREEBIND and IP_BIND_ADDRESS_NO_PORT
 * (they act at bind, which the socket is past), and on a hybrid
 * SO_BROADCAST and the sending options of groups (IP_MULTICAST_TTL, _LOOP,
 * _IF; IPV6_MULTICAST_HOPS, _LOOP, _IF): its kernel half sends to broadcast
 * addresses and groups (the PPE routes neither). */
bool eta_udp_kernel_option(int level, int name, bool hybrid);
/* setsockopt(level, name) is an option asking for ancillary data on receive,
 * or UDP_SEGMENT/UDP_GRO: the kernel socket keeps it, the shim reads it back. */
bool eta_udp_cmsg_option(int level, int name);
/* The kernel interface holding the PPE's address ip (host order; a port
 * shared with the kernel has one), else 0; whether ifindex is such an
 * interface. Looked up once per process (getifaddrs), off the data path. */
int eta_udp_ifindex4(uint32_t ip);
bool eta_udp_ppe_ifindex(int ifindex);
/* Reads back from the kernel socket fd which ancillary data s's receives
 * carry (setsockopt kept them there; after exec too). Not the data path. */
void eta_udp_cmsg_refresh(int fd, struct eta_sock *s);
/* FIONREAD/SIOCINQ: the length of the datagram waiting (0: none; a
 * hybrid's kernel half's when the PPE has none). */
int eta_udp_next_len(int fd, struct eta_sock *s);
/* One datagram of iov's bytes to `to` (NULL: the connected peer), with the
 * program's control messages (eta_udp_send_cmsgs). A hybrid sends through
 * its kernel half (fd) to what the PPE does not route. Returns its length,
 * or -1 with errno. */
ssize_t eta_udp_send(int fd, struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags,
                     const struct sockaddr *to, socklen_t tolen, const void *control, size_t controllen);
/* eta_udp_send() in two steps, for sendmmsg's batches (udp_mmsg.c):
 * eta_udp_prepare() makes every check of one datagram that eta_udp_send()
 * makes, in its order, and fills *m (its pieces in pieces[], room for
 * iovcnt), *d (its destination, which *m points into, and length) and *cp
 * (the thread's context). ETA_UDP_READY: for eta_udp_commit();
 * ETA_UDP_KERNEL: a hybrid's kernel half sends it; ETA_UDP_SEGMENTS:
 * UDP_SEGMENT splits it (d->gso); -1 with errno. eta_udp_commit() sends n
 * prepared datagrams in order, a round trip per ring's worth (the socket's
 * send turn held throughout, tx_committed raised by their bytes): how many
 * went, or -1 with errno when none did (the engine's error for the first). */
enum { ETA_UDP_READY = 0, ETA_UDP_KERNEL = 1, ETA_UDP_SEGMENTS = 2 };
struct eta_udp_dst {
    struct dti_addr dst;
    struct dti_addr6 dst6;
    size_t len, gso;
};
int eta_udp_prepare(int fd, struct eta_sock *s, const struct iovec *iov, int iovcnt, int flags,
                    const struct sockaddr *to, socklen_t tolen, const void *control, size_t controllen,
                    dti_ctx_t **cp, struct dti_dgram_msg *m, struct eta_udp_dst *d, struct dti_iov *pieces);
int eta_udp_commit(dti_ctx_t *c, struct eta_sock *s, const struct dti_dgram_msg *m, const struct eta_udp_dst *d,
                   unsigned n);
/* sendmmsg on an accelerated UDP socket (udp_mmsg.c): consecutive datagrams
 * for the engine in one batch, as Linux's sendmmsg answers. */
int eta_udp_sendmmsg(int fd, struct eta_sock *s, struct mmsghdr *vec, unsigned vlen, int flags);

#endif
