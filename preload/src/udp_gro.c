/* UDP_GRO on an accelerated UDP socket (udp_gro.h). */
#include "udp_gro.h"

#include <string.h>

#include "ucopy.h"

/* Another datagram may join the merged buffer only as Linux's UDP GRO would
 * have joined it to the first: the same flow (addresses, ports, IP header
 * flags: TOS/TTL, multicast), no longer than the first. */
static bool same_flow(const struct dti_dgram *a, const struct dti_dgram6 *a6, const struct dti_dgram *b,
                      const struct dti_dgram6 *b6)
{
    if (a->src_ip != b->src_ip || a->dst_ip != b->dst_ip || a->src_port != b->src_port ||
        a->dst_port != b->dst_port || a->flags != b->flags)
        return false;
    return !(a->flags & DTI_DGRAM_IP6) || memcmp(a6, b6, sizeof *a6) == 0;
}

size_t eta_udp_gro_more(dti_ctx_t *c, struct eta_sock *s, const struct dti_dgram *first,
                        const struct dti_dgram6 *first6, const struct iovec *iov, int iovcnt, size_t want,
                        unsigned *segs)
{
    size_t at = first->len, added = 0;
    while (*segs < ETA_UDP_GRO_MAX_SEGS) {
        struct dti_dgram h;
        struct dti_dgram6 a6;
        const void *payload = NULL;
        memset(&a6, 0, sizeof a6);
        ssize_t n = s->v6 ? dti_dgram_borrow6(c, s->h, &h, &a6, &payload) : dti_dgram_borrow(c, s->h, &h, &payload);
        if (n < 0 || h.len == 0 || h.len > first->len || at + h.len > want || !same_flow(first, first6, &h, &a6))
            break; /* it stays for the next receive */
        if (!eta_ucopy_iov(iov, iovcnt, at, (void *)(uintptr_t)payload, h.len, true))
            break; /* a buffer the program cannot write: the datagram stays */
        (void)dti_dgram_consume(c, s->h);
        at += h.len;
        added += h.len;
        ++*segs;
        if (h.len < first->len)
            break; /* a shorter one ends a GRO packet */
    }
    return added;
}
