/* Ancillary data of an accelerated UDP socket (udp.c): the control messages
 * of a received datagram, built as Linux's put_cmsg builds them (order,
 * lengths, truncation, MSG_CTRUNC), and the control messages of a send read
 * as Linux's ip_cmsg_send reads them. Pure: no libdti, no system call, no
 * program memory (the callers copy in and out); unit test preload_udp_cmsg. */
#ifndef ETA_PRELOAD_UDP_CMSG_H
#define ETA_PRELOAD_UDP_CMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The time64 variants' numbers (asm-generic/socket.h), for older headers. */
#ifndef SO_TIMESTAMP_OLD
#define SO_TIMESTAMP_OLD 29
#define SO_TIMESTAMPNS_OLD 35
#endif
#ifndef SO_TIMESTAMP_NEW
#define SO_TIMESTAMP_NEW 63
#define SO_TIMESTAMPNS_NEW 64
#endif

/* What a socket asked for (the kernel socket's options, read back where
 * they change: udp.c eta_udp_cmsg_refresh). */
#define ETA_RX_PKTINFO 1u /* IP_PKTINFO */
#define ETA_RX_TS 2u      /* SO_TIMESTAMP: struct timeval */
#define ETA_RX_TSNS 4u    /* SO_TIMESTAMPNS: struct timespec (wins over ETA_RX_TS, as Linux) */
#define ETA_RX_TS_NEW 8u  /* the time64 variants (SO_TIMESTAMP_NEW...): their cmsg types */
#define ETA_RX_TOS 16u    /* IP_RECVTOS */
#define ETA_RX_TTL 32u    /* IP_RECVTTL */
#define ETA_RX_PKTINFO6 64u   /* IPV6_RECVPKTINFO (an AF_INET6 socket) */
#define ETA_RX_HOPLIMIT6 128u /* IPV6_RECVHOPLIMIT */
#define ETA_RX_TCLASS6 256u   /* IPV6_RECVTCLASS */
#define ETA_RX_GRO 512u       /* UDP_GRO: datagrams of one flow merged into one receive (udp_gro.h) */

struct eta_udp_rx_meta {
    uint64_t real_ns;  /* arrival, CLOCK_REALTIME nanoseconds */
    uint32_t dst_ip;   /* the datagram's destination (host order): ipi_addr */
    uint32_t spec_dst; /* the local address it came to (host order): ipi_spec_dst */
    int ifindex;       /* ipi_ifindex (and ipi6_ifindex) */
    uint8_t tos, ttl;  /* an IPv6 datagram's traffic class and hop limit */
    bool ip6;          /* an IPv6 datagram (dst6; dst_ip and spec_dst unused) */
    uint8_t dst6[16];  /* its destination (ipi6_addr), network order */
    uint16_t gro_size; /* several datagrams merged (UDP_GRO): their segment size; 0: one datagram */
};

/* Room the largest set of messages takes: a caller's buffer of this size
 * never truncates. */
#define ETA_UDP_CMSG_MAX 192u

/* Writes the control messages `want` asks for into buf, cap bytes of it
 * (the program's msg_controllen; 0 when msg_control is NULL), in Linux's
 * order: the timestamp, then UDP_GRO (the segment size of merged datagrams,
 * an int, whenever gro_size is set: udp_cmsg_recv), then IPV6_PKTINFO (an AF_INET6 socket's; an IPv4
 * datagram's destination v4-mapped), then an IPv4 datagram's IP_PKTINFO,
 * IP_TTL, IP_TOS or an IPv6 one's IPV6_HOPLIMIT, IPV6_TCLASS (udpv6_recvmsg:
 * ip6_datagram_recv_common_ctl before ip_cmsg_recv_offset). A message that
 * does not fit is cut to what fits, or left out where not even its header
 * fits, and *msg_flags gets MSG_CTRUNC. Returns the bytes written: the
 * msg_controllen the program gets back. */
/* The segment size a send's control messages set (SOL_UDP UDP_SEGMENT, a
 * u16: Linux's GSO, one buffer sent as datagrams of that size), -1 when
 * none does (the socket's UDP_SEGMENT option then). Read after the send
 * readers accepted the messages. */
int eta_udp_cmsg_gso(const uint8_t *buf, size_t len);

size_t eta_udp_put_cmsgs(uint8_t *buf, size_t cap, unsigned want, const struct eta_udp_rx_meta *m,
                         int *msg_flags);

/* The control messages of a send (buf: a copy of the program's, len bytes):
 * 0 when the PPE can honour them all, with *spec_dst the source address
 * IP_PKTINFO asked for (0: none asked, or "any") and *ifindex its
 * interface (0: none); else the errno value: EINVAL for what Linux refuses
 * (a malformed message, an unknown IP_* type, IP_PKTINFO of the wrong
 * length), EOPNOTSUPP for what Linux takes and the PPE does not carry
 * (IP_TTL, UDP_SEGMENT, SO_MARK, SO_TIMESTAMPING...: never dropped
 * silently). *tos: IP_TOS's value (an int or a byte, 0..255), this
 * datagram's TOS; -1 when none. Levels other than SOL_SOCKET, SOL_IP and SOL_UDP are skipped,
 * as Linux skips them on an IPv4 socket. */
int eta_udp_read_send_cmsgs(const uint8_t *buf, size_t len, uint32_t *spec_dst, int *ifindex, int *tos);
/* The same for an IPv4 destination of an AF_INET6 socket (ip_cmsg_send
 * with allow_ipv6): IPV6_PKTINFO is read too, its address v4-mapped (else
 * EINVAL) into *spec_dst; SOL_IPV6's other types are skipped. */
int eta_udp_read_send_cmsgs_mapped(const uint8_t *buf, size_t len, uint32_t *spec_dst, int *ifindex, int *tos);
/* The control messages of a send to an IPv6 destination, as Linux's
 * ip6_datagram_send_ctl reads them: 0 with *spec6 the source IPV6_PKTINFO
 * (or IPV6_2292PKTINFO) asked for (:: none) and *ifindex its interface;
 * else EINVAL (malformed, an unknown IPV6_* or SOL_SOCKET type, IPV6_PKTINFO
 * too short, IPV6_TCLASS outside -1..255), EOPNOTSUPP (IPV6_HOPLIMIT,
 * IPV6_DONTFRAG, the extension headers, IPV6_FLOWINFO, UDP_SEGMENT,
 * SO_MARK...). *tclass: IPV6_TCLASS's value, this datagram's traffic class
 * (-1: the socket's). SOL_IP and other levels are skipped. */
int eta_udp_read_send_cmsgs6(const uint8_t *buf, size_t len, uint8_t spec6[16], int *ifindex, int *tclass);

#endif
