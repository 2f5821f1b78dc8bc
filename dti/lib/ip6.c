/* libdti layer 4, public calls: IPv6 endpoints (ABI 11; dti/README.md
 * "IPv6"). BIND6 and CONNECT6 carry the address in the command's value and
 * offset words (queue.h: dti__cmd_addr6); the names are read from the
 * table entry (slots.c: dti_getsockname6, dti_getpeername6). A v4-mapped
 * address is the IPv4 call, routed as one. With several engines an IPv6
 * stream socket is placed as an IPv4 one: a bound socket connecting moves to
 * its flow's owner (ppe_route.c: dti__place_for_connect6), a listener is a
 * group (dti__group_listen); datagram sockets live on the first engine. */
#include "api.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

/* ::ffff:a.b.c.d: *v4 gets a.b.c.d (host order) and the port. */
static bool v4_mapped(const struct dti_addr6 *a, struct dti_addr *v4)
{
    for (int i = 0; i < 10; i++)
        if (a->ip[i])
            return false;
    if (a->ip[10] != 0xff || a->ip[11] != 0xff)
        return false;
    v4->ip = (uint32_t)a->ip[12] << 24 | (uint32_t)a->ip[13] << 16 | (uint32_t)a->ip[14] << 8 | a->ip[15];
    v4->port = a->port;
    return true;
}

int dti_prep_bind6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *a, unsigned flags, uint64_t ud)
{
    if (!a)
        return -EFAULT;
    struct dti_addr v4;
    if (v4_mapped(a, &v4))
        return (flags & DTI_BIND6_V6ONLY) ? -EINVAL : dti_prep_bind(c, s, &v4, ud); /* as Linux: no IPv4 on V6ONLY */
    return dti__cmd_addr6(c, DTI_OP_BIND6, s, a, flags, ud);
}

int dti_prep_connect6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *a, uint64_t ud)
{
    if (!a)
        return -EFAULT;
    struct dti_addr v4;
    if (v4_mapped(a, &v4))
        return dti_prep_connect(c, s, &v4, ud);
    if (c->n_sub > 1) {
        int rc = dti__place_for_connect6(c, s, a);
        if (rc < 0)
            return rc;
    }
    return dti__cmd_addr6(c, DTI_OP_CONNECT6, s, a, 0, ud);
}

int dti_bind6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *a, unsigned flags)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_bind6(c, s, a, flags, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_connect6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *a, int timeout_ms)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti_prep_connect6(c, s, a, ud));
    return dti__run_sync(c, prc, ud, NULL, timeout_ms);
}
