/* What the socket calls (sock.h) and the data path (io.h, udp.c) share:
 * failing with an errno value, a deadline from a timeout in milliseconds,
 * and a sockaddr_in as libdti's address. One copy of each, static inline:
 * the fast paths' instruction budgets (benchmarks/preload/shim-instructions)
 * depend on fail() being inlined. Internal to preload/src. */
#ifndef ETA_PRELOAD_ERRNO_UTIL_H
#define ETA_PRELOAD_ERRNO_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "config.h"
#include "shim.h"

/* -1 with errno set: a call's failure, as libc answers it (an int; in a
 * function returning ssize_t it is -1 all the same). */
static inline int fail(int err)
{
    errno = err;
    return -1;
}

/* The deadline (eta_now_ns() scale) of a timeout of ms; 0 (none) for a
 * negative one. */
static inline uint64_t deadline_after(int ms)
{
    return ms < 0 ? 0 : eta_now_ns() + (uint64_t)ms * 1000000ull;
}

/* An AF_INET address (the caller checked family and length) in host order. */
static inline struct dti_addr to_dti(const struct sockaddr *a)
{
    struct sockaddr_in in;
    memcpy(&in, a, sizeof in);
    return (struct dti_addr){ntohl(in.sin_addr.s_addr), ntohs(in.sin_port)};
}

#endif
