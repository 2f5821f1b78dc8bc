/* A UDP socket's engine memberships as exec and SCM_RIGHTS carry them
 * (mcast_record.c): the record of one membership, as the program made it
 * (struct eta_mcast_req's fields, udp_mcast.c), and the file a sender's shim
 * writes beside the pass of such a socket. libc only, no shim state:
 * unit-tested alone (preload_exec_state). Internal to preload/src. */
#ifndef ETA_PRELOAD_MCAST_RECORD_H
#define ETA_PRELOAD_MCAST_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The reason a record (this file's, or exec's handover: exec_state.c) is
 * refused, written into why (at most wl bytes, a printf format): -1, the
 * readers' answer. */
int eta_record_refused(char *why, size_t wl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define ETA_MCAST_REC_MAX 40u /* memberships per socket: the shim's record's (udp_mcast.c) */

struct eta_mcast_rec {
    uint8_t v6;            /* 0 or 1: an IPv6 group (an AF_INET6 socket's only) */
    uint8_t has_source;    /* 0 or 1: source-specific */
    uint16_t zero;
    uint32_t group4, source4, if_addr4; /* IPv4, host order (0 for an IPv6 one) */
    int32_t ifindex;       /* the interface by index, 0: none named */
    uint8_t group6[16], source6[16];    /* IPv6, network order (0 for an IPv4 one) */
};

/* Whether r is a membership the shim records, on a socket that is AF_INET6
 * (v6_socket) or not: a group of a family the socket has, flags 0 or 1,
 * the other family's fields zero, no source unless source-specific. */
bool eta_mcast_rec_ok(bool v6_socket, const struct eta_mcast_rec *r);

/* A UDP socket passed over SCM_RIGHTS: the sender's shim writes its engine
 * memberships and IP_MULTICAST_IF into <socket>.preload/mcast-<dev>-<ino>
 * (the placeholder's inode: the receiver's descriptor names the same open
 * file) before the pass; the receiver's shim reads it once it has claimed
 * the socket, and removes it (pass_fds.c). A head, then n records. */
#define ETA_PASS_MCAST_MAGIC 0x50434d45u /* "EMCP" */
#define ETA_PASS_MCAST_VERSION 1u
enum { ETA_PASS_MCAST_V6 = 1, ETA_PASS_MCAST_IF4_OURS = 2 };
struct eta_pass_mcast_head {
    uint32_t magic;
    uint16_t version;
    uint16_t rec_size; /* sizeof(struct eta_mcast_rec) */
    uint32_t flags;    /* ETA_PASS_MCAST_V6: an AF_INET6 socket; ETA_PASS_MCAST_IF4_OURS: as ETA_EXEC_MC_IF4_OURS */
    uint32_t mc_if4;   /* as the exec entry's */
    uint32_t n;        /* records that follow, at most ETA_MCAST_REC_MAX */
};
/* Reads and checks such a file (fd, open for reading): a regular file of
 * this user (or root), the exact size, magic, version, and each record as
 * the handover's (v6_socket: the receiver's socket is AF_INET6, which the
 * head must say too). 0 with *head and out[0 .. head->n) (out holds
 * ETA_MCAST_REC_MAX), or -1 with a reason in why. */
int eta_pass_mcast_read(int fd, int v6_socket, struct eta_pass_mcast_head *head, struct eta_mcast_rec *out,
                        char *why, size_t why_len);

#endif
