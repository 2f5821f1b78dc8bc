/* dti/dti_dgram.h: datagram sockets (UDP over IPv4 and IPv6), their record format and
 * calls. Part of libdti's API: dti/dti.h includes it, so programs include
 * dti/dti.h; read alone, it needs only the types dti.h declares. */
#ifndef DTI_DTI_DGRAM_H
#define DTI_DTI_DGRAM_H

#include <dti/dti.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- datagram sockets (UDP over IPv4 and IPv6) -----------------------
 * A datagram socket's two rings hold records, never a byte stream. Each
 * record is a 32-byte header (struct dti_dgram), the payload, padding to
 * DTI_DGRAM_ALIGN; a record never wraps around the ring's end: where the
 * next one does not fit before the end, a pad record (DTI_DGRAM_PAD, no
 * datagram) fills it and the record starts at the ring's start.
 *  - receive ring: written by the transport (MARS's UdpRecord, the same
 *    layout), read in place by the application (dti_dgram_recv), released in
 *    whole records (pad records included) with RECV_RELEASE. `len` is the
 *    datagram's real length, all of it stored: truncation is the reader's.
 *  - send ring: written by the application (dst_ip/dst_port, len, flags
 *    DTI_DGRAM_TO when it names a destination, else the connected peer),
 *    then one DTI_OP_SEND_DGRAMS for all records up to a position; the
 *    engine checks each record (it is hostile memory), sends each datagram
 *    (one copy into a frame) and releases the ring (tx_head) before it
 *    completes. res: datagrams sent; the first one's error when none was;
 *    records after a failed one are skipped (sendmmsg's rule).
 * Positions are free-running from 0 for each handle; ring offset = position
 * & (size - 1). dti/README.md "Datagram sockets". */
struct dti_dgram {
    uint32_t size;     /* bytes of the ring this record takes (header, payload, padding) */
    uint32_t len;      /* the datagram's payload bytes */
    uint32_t src_ip;   /* receive: the sender (host order) */
    uint32_t dst_ip;   /* receive: our address or the group; send: the destination */
    uint16_t src_port, dst_port;
    uint32_t flags;    /* DTI_DGRAM_*; receive: bits 8..15 the IPv4 TOS, 16..23 the TTL */
    uint64_t ts_ns;    /* receive: the engine's clock at arrival (CLOCK_MONOTONIC's scale) */
};
#define DTI_DGRAM_ALIGN 32u
#define DTI_DGRAM_PAD 1u       /* no datagram: skip `size` bytes */
#define DTI_DGRAM_MULTICAST 2u /* receive: sent to a group (dst_ip) */
#define DTI_DGRAM_TO 4u        /* send: to dst_ip:dst_port, not the connected peer */
#define DTI_DGRAM_TOS_SET 16u  /* send (ABI 12): bits 8..15 are this datagram's IPv4 TOS or IPv6
                                * traffic class (an IP_TOS / IPV6_TCLASS control message), not the
                                * socket's option */
#define DTI_DGRAM_IP6 8u       /* an IPv6 datagram (ABI 12): a struct dti_dgram6 follows the
                                * header (src_ip, dst_ip 0; send: dst_port and its dst, to an
                                * IPv6 destination); TOS is the traffic class, TTL the hop limit */
#define DTI_DGRAM_TOS(flags) ((uint8_t)((flags) >> 8))  /* receive: the header's TOS (IP_RECVTOS) */
#define DTI_DGRAM_TTL(flags) ((uint8_t)((flags) >> 16)) /* receive: the header's TTL (IP_RECVTTL) */
#define DTI_DGRAM_MAX 65507u   /* the largest UDP/IPv4 payload */
#define DTI_DGRAM6_MAX 65487u  /* the largest UDP payload over IPv6 without jumbograms, here
                                * (65535 - 8 - 40: the IPv4 figure's rule); the MTU decides first */
/* An IPv6 datagram's addresses (DTI_DGRAM_IP6), network byte order, between
 * its header and its payload. Receive: the sender and our address
 * (IPV6_PKTINFO); send: dst the destination (src ignored, zero). */
struct dti_dgram6 {
    uint8_t src[16];
    uint8_t dst[16];
};
/* The ring bytes an IPv4 datagram of len bytes takes. */
static inline uint32_t dti_dgram_size(uint32_t len)
{
    return (uint32_t)((sizeof(struct dti_dgram) + len + DTI_DGRAM_ALIGN - 1) & ~(DTI_DGRAM_ALIGN - 1));
}
/* The ring bytes a record takes, by its flags (DTI_DGRAM_IP6: the addresses too). */
static inline uint32_t dti_dgram_record_size(uint32_t len, uint32_t flags)
{
    return dti_dgram_size(len + ((flags & DTI_DGRAM_IP6) ? (uint32_t)sizeof(struct dti_dgram6) : 0u));
}

/* A UDP socket (bind with dti_bind: port 0 picks one; SO_REUSEADDR and
 * SO_REUSEPORT through dti_setsockopt before it; close with dti_close).
 * Datagram sockets live on the PPE's first engine. IPv6 (ABI 12): dti_bind6
 * makes it an IPv6 socket (::, with DTI_BIND6_V6ONLY or without it: IPv4
 * datagrams too, as Linux's dual-stack socket; an address of the PPE's);
 * so do dti_dgram_connect6 and a first dti_dgram_sendto6 of an unbound one
 * (then ::, dual-stack). Its IPv4 datagrams keep IPv4 records; the names
 * read through dti_getsockname6/dti_getpeername6 (IPv4 ones v4-mapped). A
 * socket that dti_bind (or dti_bind6 of a v4-mapped address) made an IPv4
 * one answers the IPv6 calls -EAFNOSUPPORT, v4-mapped destinations too (as
 * Linux's AF_INET socket takes no sockaddr_in6): use the IPv4 calls there. */
int dti_dgram_socket(dti_ctx_t *c);
/* The default peer (connected UDP: only its datagrams are received); NULL
 * dissolves it (AF_UNSPEC). Binds an ephemeral port when unbound. */
int dti_dgram_connect(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *peer);
/* The default peer over IPv6 (a v4-mapped address: the IPv4 peer). */
int dti_dgram_connect6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *peer);
/* One datagram to `to` (NULL: the connected peer), through the send ring and
 * one SEND_DGRAMS round trip: len, or -EMSGSIZE (more than fits a frame, or
 * the ring), -EDESTADDRREQ, -ENETUNREACH, -ENOBUFS, -EAGAIN (no command room). */
ssize_t dti_dgram_sendto(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len, const struct dti_addr *to);
/* Several datagrams in one round trip (sendmmsg): returns how many were sent
 * (the first error when none). */
struct dti_dgram_msg {
    const struct dti_iov *iov;
    unsigned iovcnt;
    const struct dti_addr *to; /* NULL: the connected peer (or to6) */
    const struct dti_addr6 *to6; /* an IPv6 destination (v4-mapped: IPv4), when `to` is NULL */
    uint8_t tos;                 /* with tos_set: this datagram's TOS (IPv4) or traffic class (IPv6) */
    uint8_t tos_set;             /* 0: the socket's (IP_TOS / IPV6_TCLASS option) */
};
/* One datagram to an IPv6 destination (v4-mapped: the IPv4 one): as
 * dti_dgram_sendto(); -ENETUNREACH also for an IPv4 one from a V6ONLY socket. */
ssize_t dti_dgram_sendto6(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len, const struct dti_addr6 *to);
int dti_dgram_sendmmsg(dti_ctx_t *c, dti_sock_t s, const struct dti_dgram_msg *msgs, unsigned n);
/* The oldest datagram, copied from the receive ring (no round trip): up to
 * len bytes into buf; *from the sender, *real_len its real length (larger
 * than the return value: truncated, MSG_TRUNC). flags DTI_DGRAM_PEEK leaves
 * it. Returns the bytes copied, -EAGAIN when none is waiting. Records that
 * do not make sense (a confused engine) end the ring's contents: -EIO. */
#define DTI_DGRAM_PEEK 1u
ssize_t dti_dgram_recv(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, struct dti_addr *from, size_t *real_len,
                       unsigned flags);
/* Zero-copy: the oldest datagram in place (its header in *hdr, *payload its
 * hdr->len bytes in the receive ring, valid until consumed); returns its
 * length, or errors as dti_dgram_recv(). dti_dgram_consume() takes it. */
ssize_t dti_dgram_borrow(dti_ctx_t *c, dti_sock_t s, struct dti_dgram *hdr, const void **payload);
/* The same with an IPv6 datagram's addresses: *a6 filled when hdr->flags
 * has DTI_DGRAM_IP6 (a6 may be NULL). */
ssize_t dti_dgram_borrow6(dti_ctx_t *c, dti_sock_t s, struct dti_dgram *hdr, struct dti_dgram6 *a6,
                          const void **payload);
/* dti_dgram_recv() for either family: *from the sender as an IPv6 address
 * (an IPv4 sender v4-mapped, as an AF_INET6 socket shows it). */
ssize_t dti_dgram_recv6(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, struct dti_addr6 *from,
                        size_t *real_len, unsigned flags);
int dti_dgram_consume(dti_ctx_t *c, dti_sock_t s);
/* The receive ring bytes this handle's reader has taken: a free-running
 * position from 0, pad records included (whatever dti_dgram_borrow/recv/
 * consume passed over). With dti_sock_status()'s `readable` (ring bytes,
 * not datagrams) it sums to every ring byte the engine has offered the
 * socket, a count each arrival raises and no receive lowers: what an
 * edge-triggered poller compares (the shim's epoll). 0 for a bad handle. */
uint32_t dti_dgram_taken(dti_ctx_t *c, dti_sock_t s);
/* IP_ADD_MEMBERSHIP / IP_DROP_MEMBERSHIP (source != 0: the source-specific
 * variants). Host order. */
int dti_dgram_join(dti_ctx_t *c, dti_sock_t s, uint32_t group, uint32_t source);
int dti_dgram_leave(dti_ctx_t *c, dti_sock_t s, uint32_t group, uint32_t source);
/* IPV6_JOIN_GROUP / IPV6_LEAVE_GROUP (ABI 13; source not NULL and not ::
 * the source-specific MCAST_JOIN_SOURCE_GROUP / MCAST_LEAVE_SOURCE_GROUP):
 * the socket's membership of an IPv6 group (ff00::/8), 16 bytes each in
 * network order; MLDv2 reports from the engine. 0, or -EINVAL (not a
 * group), -EADDRINUSE (joined already), -EADDRNOTAVAIL (leave without a
 * join), -ENOBUFS (20 memberships held), -EAFNOSUPPORT (an engine without
 * IPv6), -EOPNOTSUPP (an engine that predates ABI 13). */
int dti_dgram_join6(dti_ctx_t *c, dti_sock_t s, const uint8_t group[16], const uint8_t *source);
int dti_dgram_leave6(dti_ctx_t *c, dti_sock_t s, const uint8_t group[16], const uint8_t *source);

#ifdef __cplusplus
}
#endif

#endif /* DTI_DTI_DGRAM_H */
