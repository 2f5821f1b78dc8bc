/* libdti layer 2, queues (queue.h): a socket's slot as this process sees it.
 * The engine-written table entry of a handle, the app-side positions a new
 * handle starts from, its state and addresses, and the receive releases
 * owed to the engine. */
#include "queue.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

struct dti_sock_shared *dti__sock(struct dti_attachment *d, dti_sock_t s, uint32_t *slot_out)
{
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock_of(d, s, &slot);
    if (sh && slot_out)
        *slot_out = slot;
    return sh;
}

int dti__sock_status_one(dti_ctx_t *c, dti_sock_t s, struct dti_sock_info *out) { return dti__sock_state(c, s, out); }

int dti_sock_take_error(dti_ctx_t *c, dti_sock_t s)
{
    c = dti__route(c, &s);
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(c->d, s, &slot);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    struct dti_sock_priv *p = &c->d->priv[slot];
    if (DTI_LOAD(&sh->state) & DTI_STATE_DGRAM)
        return dti__dgram_error(sh, p, dti__gen(s), 1); /* one-shot, as Linux's sock_error() */
    if (p->err_taken_gen == dti__gen(s))
        return 0;
    int32_t e = DTI_LOAD(&sh->error);
    if (e)
        p->err_taken_gen = dti__gen(s);
    return e;
}

int dti_getsockname(dti_ctx_t *c, dti_sock_t s, struct dti_addr *out)
{
    c = dti__route(c, &s);
    struct dti_sock_shared *sh = dti__sock(c->d, s, NULL);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    uint32_t seq;
    do { /* the engine bumps seq after writing: retry a torn read */
        seq = DTI_LOAD(&sh->seq);
        out->ip = DTI_LOAD(&sh->local_ip);
        out->port = DTI_LOAD(&sh->local_port);
    } while (DTI_LOAD_RELAXED(&sh->seq) != seq);
    return 0;
}

int dti_getpeername(dti_ctx_t *c, dti_sock_t s, struct dti_addr *out)
{
    c = dti__route(c, &s);
    struct dti_sock_shared *sh = dti__sock(c->d, s, NULL);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    uint32_t seq;
    do {
        seq = DTI_LOAD(&sh->seq);
        out->ip = DTI_LOAD(&sh->remote_ip);
        out->port = DTI_LOAD(&sh->remote_port);
    } while (DTI_LOAD_RELAXED(&sh->seq) != seq);
    return out->port == 0 && out->ip == 0 ? -ENOTCONN : 0;
}

/* Either family's name (ABI 11): an IPv6 socket's from local6/remote6, an
 * IPv4 one's v4-mapped (::ffff:a.b.c.d). 6 or 4, or the error. */
static int name6_of(dti_ctx_t *c, dti_sock_t s, struct dti_addr6 *out, bool peer)
{
    c = dti__route(c, &s);
    struct dti_sock_shared *sh = dti__sock(c->d, s, NULL);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    uint32_t seq, name6, ip;
    do { /* the engine bumps seq after writing: retry a torn read */
        seq = DTI_LOAD(&sh->seq);
        name6 = DTI_LOAD(&sh->name6);
        ip = DTI_LOAD(peer ? &sh->remote_ip : &sh->local_ip);
        out->port = DTI_LOAD(peer ? &sh->remote_port : &sh->local_port);
        const uint8_t *a = peer ? sh->remote6 : sh->local6;
        for (int i = 0; i < 16; i++)
            out->ip[i] = DTI_LOAD_RELAXED(&a[i]);
    } while (DTI_LOAD_RELAXED(&sh->seq) != seq);
    if (!(name6 & DTI_NAME6_IPV6)) {
        memset(out->ip, 0, 10);
        out->ip[10] = out->ip[11] = 0xff;
        out->ip[12] = (uint8_t)(ip >> 24);
        out->ip[13] = (uint8_t)(ip >> 16);
        out->ip[14] = (uint8_t)(ip >> 8);
        out->ip[15] = (uint8_t)ip;
        if (peer && ip == 0 && out->port == 0)
            return -ENOTCONN;
        return 4;
    }
    return peer && out->port == 0 ? -ENOTCONN : 6;
}

int dti_getsockname6(dti_ctx_t *c, dti_sock_t s, struct dti_addr6 *out) { return name6_of(c, s, out, false); }

int dti_getpeername6(dti_ctx_t *c, dti_sock_t s, struct dti_addr6 *out) { return name6_of(c, s, out, true); }
