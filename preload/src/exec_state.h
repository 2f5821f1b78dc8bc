/* The exec handover: what an image that execs writes for the next one (an
 * inheritable memfd named by ETA_EXEC_STATE=<fd>), and its validation. libc
 * only, no shim state: unit-tested alone. */
#ifndef ETA_PRELOAD_EXEC_STATE_H
#define ETA_PRELOAD_EXEC_STATE_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include "mcast_record.h"

#define ETA_EXEC_ENV "ETA_EXEC_STATE"
#define ETA_EXEC_MEMFD "eta-exec-state"
#define ETA_EXEC_MAGIC 0x43584541u /* "AEXC" */
/* 2: entries carry IPv6 listeners' IPV6_V6ONLY and address (issue 31).
 * 3: UDP sockets' engine memberships and IP_MULTICAST_IF (mc_if4, n_mcast;
 * the memberships follow the entries: struct eta_mcast_rec).
 * The reader takes 1 and 2 too (their fields zero: as before); an older
 * reader refuses a newer version by its number, and the sockets stay
 * unconnected, said so. */
#define ETA_EXEC_VERSION 3u
#define ETA_EXEC_ENTRY_V1_SIZE 44u /* version 1's entry: struct eta_exec_entry up to local6_ip */
#define ETA_EXEC_ENTRY_V2_SIZE 60u /* version 2's: up to mc_if4 */
#define ETA_EXEC_MAX_ENTRIES 65536u
#define ETA_EXEC_MCAST_MAX ETA_MCAST_REC_MAX /* memberships per socket */

enum {
    ETA_EXEC_LISTENERS_SHARED = 1,
    ETA_EXEC_LINKS = 2, /* several engines: links_fd is libdti's (struct dti_exec_fds.links_fd) */
};

enum eta_exec_kind {
    ETA_EXEC_SOCKET = 1,  /* descriptor fd names socket handle */
    ETA_EXEC_STASHED = 2, /* a connection listener_fd's accept had taken, not yet returned */
};

enum {
    ETA_EXEC_LISTENING = 1u << 0,
    ETA_EXEC_NONBLOCK = 1u << 1,
    ETA_EXEC_HYBRID = 1u << 2,
    ETA_EXEC_V6 = 1u << 3,
    ETA_EXEC_BOUND_KERNEL = 1u << 4,
    ETA_EXEC_CONNECT_STARTED = 1u << 5,
    ETA_EXEC_CONNECT_REPORTED = 1u << 6,
    ETA_EXEC_SHUT_WR = 1u << 7,
    ETA_EXEC_SHUT_RD = 1u << 8,
    ETA_EXEC_DGRAM = 1u << 9, /* a UDP socket (DTI datagram socket) */
    /* version 2 (with ETA_EXEC_V6 only): */
    ETA_EXEC_V6ONLY = 1u << 10, /* bound with DTI_BIND6_V6ONLY (sockobj.h v6only) */
    ETA_EXEC_LOCAL6 = 1u << 11, /* bound to the IPv6 address local6_ip (:: when the
                                 * writer could not name it: a new PPE refuses it) */
    ETA_EXEC_V6ONLY_READ0 = 1u << 12, /* getsockopt(IPV6_V6ONLY) answers 0 (sockobj.h v6only_read0; a
                                       * reader that predates it ignores it: reads the placeholder's 1) */
    /* version 3 (with ETA_EXEC_DGRAM only): */
    ETA_EXEC_MC_IF4_OURS = 1u << 13, /* IP_MULTICAST_IF named mc_if4, which the kernel socket did not take
                                      * (sockobj.h mc_if4_ours: getsockopt answers it) */
    ETA_EXEC_UDP_KSELF = 1u << 14, /* with ETA_EXEC_HYBRID: a placeholder read for host-local
                                    * senders alone (sockobj.h udp_kself); an older reader
                                    * ignores it (an ordinary hybrid) */
};

struct eta_exec_head {
    uint32_t magic;
    uint16_t version;
    uint16_t entry_size;
    int32_t pid;          /* exec keeps the pid: another process's handover is stale */
    uint32_t n;           /* entries that follow */
    int32_t ctl_fd, region_fd, priv_fd, doorbell_fd; /* libdti's (struct dti_exec_fds) */
    uint32_t flags;       /* ETA_EXEC_LISTENERS_SHARED, ETA_EXEC_LINKS */
    int32_t links_fd;     /* ETA_EXEC_LINKS: the other engines and the listener groups (0 otherwise) */
};

struct eta_exec_entry {
    int32_t fd;           /* ETA_EXEC_SOCKET: the descriptor; else -1 */
    uint32_t handle;      /* the PPE's socket handle */
    uint32_t kind;
    int32_t listener_fd;  /* ETA_EXEC_STASHED: its listener's descriptor */
    uint32_t flags;       /* ETA_EXEC_LISTENING ... */
    int32_t backlog;
    int32_t pending_error;
    int32_t rcvtimeo_ms, sndtimeo_ms;
    uint32_t local_ip;
    uint16_t local_port;
    uint16_t kernel_port;
    /* version 2 */
    uint8_t local6_ip[16]; /* ETA_EXEC_LOCAL6: the PPE IPv6 address bound to, network order */
    /* version 3 (UDP) */
    uint32_t mc_if4;       /* IP_MULTICAST_IF naming the PPE's port: that address (host order); 0: none */
    uint32_t n_mcast;      /* its engine memberships that follow (at most ETA_EXEC_MCAST_MAX) */
};

/* Version 3: after the entries, each UDP entry's n_mcast memberships in
 * entry order (struct eta_mcast_rec, mcast_record.h). */

/* Reads and checks the handover in memfd `fd` for process `pid`: sizes,
 * magic, version, pid, counts, descriptor numbers (distinct, in range,
 * libdti's apart from the sockets'), kinds, each stashed connection's
 * listener, IPv6 fields only on IPv6 sockets, multicast fields only on UDP
 * ones and each membership as the shim makes them (a group of the socket's
 * family, flags 0 or 1, the other family's fields zero). A version 1 or 2
 * handover is read into version 3's entries (later fields zero). 0 with
 * *head (its version and entry_size as written), *entries (malloc'd; free()
 * it) and, when mcast is not NULL, *mcast (the memberships, entry i's
 * n_mcast after those of the entries before it; malloc'd, NULL when none),
 * or -1 with a reason in why. max_fd: descriptor numbers must be below it. */
int eta_exec_state_read(int fd, pid_t pid, int max_fd, struct eta_exec_head *head,
                        struct eta_exec_entry **entries, struct eta_mcast_rec **mcast, char *why, size_t why_len);

#endif
