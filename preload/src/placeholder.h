/* preload/src/placeholder.h: a socket's kernel placeholder replaced by a
 * fresh one on the same descriptor (placeholder.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "sockobj.h"

/* Whether accelerated AF_INET6 TCP socket s, connecting again after a
 * failed connect, to a v4-mapped address (IPV6_V6ONLY off), needs a new
 * placeholder: a connect's hold bound the old one to a PPE IPv6 address
 * (eta_hold_ephemeral6), which made the kernel socket IPv6-only and holds
 * the port for IPv6 alone, where Linux's autobind fixed nothing. */
static inline bool eta_placeholder_v6_held(const struct eta_sock *s)
{
    return s->v6 && !s->dgram && s->bound_kernel && s->local6 && s->v6only_read0;
}

/* Shared port: replaces s's kernel placeholder on descriptor fd by a fresh
 * kernel socket of the same domain, type and protocol (dup3 onto fd, and
 * onto every other descriptor of this process naming the same socket),
 * with the old one's descriptor flag (FD_CLOEXEC), file status flags
 * (O_NONBLOCK...), owner and signal (O_ASYNC), and every socket option that
 * reads back differently from a fresh socket's (IPV6_V6ONLY 0, as the
 * program had it); the old kernel socket is closed with its last
 * descriptor, which frees its port. Then holds the kernel's ephemeral port
 * for a connect to IPv4 address dest (host order) as a first connect does
 * (eta_hold_ephemeral: [::], both families). 0 or an errno value (ENOBUFS
 * when no descriptor is left for the new socket; the old one stays). */
int eta_placeholder_renew(int fd, struct eta_sock *s, uint32_t dest);

