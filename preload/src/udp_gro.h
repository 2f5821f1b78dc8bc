/* UDP_GRO on an accelerated UDP socket (Linux's UDP GRO, as QUIC servers
 * ask for it): a receive into a buffer larger than the datagram takes the
 * datagrams that follow it in the ring as far as Linux's GRO would have
 * merged them with it (the same 4-tuple and IP header flags, each no
 * longer than the first, a shorter one last, at most 64), one after the
 * other in the buffer, and says the segment size in a SOL_UDP UDP_GRO
 * control message (udp_cmsg.c). Datagrams that do not qualify stay for the
 * next receive, so a datagram is never split and its boundaries are what
 * the segment size says. Internal to preload/src. */
#ifndef ETA_PRELOAD_UDP_GRO_H
#define ETA_PRELOAD_UDP_GRO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#include <dti/dti.h>
#include <dti/dti_dgram.h>

#include "sockobj.h"

#define ETA_UDP_GRO_MAX_SEGS 64u /* Linux's UDP_GRO_CNT_MAX */

/* With s's receive turn held and `first` (first6: its addresses, an IPv6
 * one's) copied to the front of iov and consumed: copies and consumes the
 * datagrams that may follow it, up to want bytes in all; *segs (1 on
 * entry) counts them with the first. Returns the bytes added. */
size_t eta_udp_gro_more(dti_ctx_t *c, struct eta_sock *s, const struct dti_dgram *first,
                        const struct dti_dgram6 *first6, const struct iovec *iov, int iovcnt, size_t want,
                        unsigned *segs);

#endif
