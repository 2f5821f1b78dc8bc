/* libdti layer 4, public calls: datagram sockets (UDP over IPv4 and IPv6; dti.h
 * "datagram sockets", dti/README.md "Datagram sockets"). Receive reads the
 * transport's records in the socket's receive ring in place (no round trip;
 * releases in whole records, batched like a stream's); send writes records
 * into the send ring and publishes one SEND_DGRAMS for the batch, whose
 * completion carries what the transport said of the datagrams. One writer
 * and one reader per socket at a time, as for dti_send() and dti_recv(). */
#include "api.h"

#include <errno.h>
#include <string.h>

static uint8_t *rx_ring(struct dti_attachment *d, uint32_t slot) { return d->data_base + d->data_stride * slot; }
static uint8_t *tx_ring(struct dti_attachment *d, uint32_t slot)
{
    return rx_ring(d, slot) + d->limits.rx_ring_size;
}

/* Datagram sockets live on the PPE's first engine: the engines steer UDP by
 * no flow (MARS README, "Not yet (UDP)"), and the first engine is where the
 * PPE's single-engine configuration receives everything. */
static int prep_dgram_socket(dti_ctx_t *c, uint64_t ud)
{
    struct dti_ctx *q = c->n_sub > 1 ? c->sub[0] : c;
    struct dti_cmd *cmd = NULL; /* set when dti__cmd_prep() returns 0 */
    int rc = dti__cmd_prep(q, DTI_OP_SOCKET, DTI_SOCK_INVALID, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = DTI_SOCK_DGRAM;
        dti__cmd_commit(q);
    }
    return rc;
}

int dti_dgram_socket(dti_ctx_t *c)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, prep_dgram_socket(c, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_dgram_connect(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *peer)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti__cmd_args(c, DTI_OP_DGRAM_CONNECT, s, peer ? peer->ip : 0, peer ? peer->port : 0, 0, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

/* CONNECT6 on a datagram socket answers at once (the engine's
 * dgram_connect6); :: with port 0 dissolves the association as AF_UNSPEC
 * does (DGRAM_CONNECT 0:0: CONNECT6 takes no ::). A v4-mapped peer goes as
 * it is: the transport connects the IPv6 socket to the IPv4 peer. Datagram
 * sockets of both families live on the first engine (dti/README.md). */
int dti_dgram_connect6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *peer)
{
    if (!peer)
        return dti_dgram_connect(c, s, NULL);
    int any = 0;
    for (int i = 0; i < 16; i++)
        any |= peer->ip[i];
    if (!any && peer->port == 0)
        return dti_dgram_connect(c, s, NULL);
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti__cmd_addr6(c, DTI_OP_CONNECT6, s, peer, 0, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

static int membership(dti_ctx_t *c, dti_sock_t s, uint32_t group, uint32_t source, int leave)
{
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, dti__cmd_args(c, DTI_OP_MCAST, s, group, source, leave, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_dgram_join(dti_ctx_t *c, dti_sock_t s, uint32_t group, uint32_t source)
{
    return membership(c, s, group, source, 0);
}

int dti_dgram_leave(dti_ctx_t *c, dti_sock_t s, uint32_t group, uint32_t source)
{
    return membership(c, s, group, source, 1);
}

static int prep_mcast6(dti_ctx_t *c, dti_sock_t s, const uint8_t *group, const uint8_t *source, int leave,
                       uint64_t ud)
{
    static const uint8_t any[16];
    c = dti__route(c, &s);
    struct dti_cmd *cmd = NULL;
    int rc = dti__cmd_prep(c, DTI_OP_MCAST6, s, ud, &cmd);
    if (rc == 0) {
        cmd->arg0 = (uint32_t)leave;
        dti_cmd_addr6_set(cmd, group);
        dti_cmd_source6_set(cmd, source ? source : any);
        dti__cmd_commit(c);
    }
    return rc;
}

static int membership6(dti_ctx_t *c, dti_sock_t s, const uint8_t *group, const uint8_t *source, int leave)
{
    if (!group)
        return -EFAULT;
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, prep_mcast6(c, s, group, source, leave, ud));
    return dti__run_sync(c, prc, ud, NULL, -1);
}

int dti_dgram_join6(dti_ctx_t *c, dti_sock_t s, const uint8_t group[16], const uint8_t *source)
{
    return membership6(c, s, group, source, 0);
}

int dti_dgram_leave6(dti_ctx_t *c, dti_sock_t s, const uint8_t group[16], const uint8_t *source)
{
    return membership6(c, s, group, source, 1);
}

/* ---- send ------------------------------------------------------------------ */

static int prep_send_dgrams(dti_ctx_t *c, dti_sock_t s, uint32_t end, uint64_t ud)
{
    c = dti__route(c, &s);
    struct dti_cmd *cmd = NULL;
    int rc = dti__cmd_prep(c, DTI_OP_SEND_DGRAMS, s, ud, &cmd);
    if (rc == 0) {
        cmd->offset = end;
        dti__cmd_commit(c);
    }
    return rc;
}

static size_t iov_total(const struct dti_iov *iov, unsigned n)
{
    size_t t = 0;
    for (unsigned i = 0; i < n; i++)
        t += iov[i].len;
    return t;
}

int dti_dgram_sendmmsg(dti_ctx_t *c, dti_sock_t s, const struct dti_dgram_msg *msgs, unsigned n)
{
    if (n == 0)
        return 0;
    if (!msgs)
        return -EFAULT;
    dti_sock_t local = s;
    struct dti_ctx *q = dti__route(c, &local);
    struct dti_attachment *d = q->d;
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(d, local, &slot);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    if (!(DTI_LOAD(&sh->state) & DTI_STATE_DGRAM))
        return -EOPNOTSUPP;
    uint32_t gen = dti__gen(local);
    struct dti_sock_priv *p = &d->priv[slot];
    const int32_t err = dti__dgram_error(sh, p, gen, 1); /* a pending ICMP error first, as Linux's send */
    if (__builtin_expect(err != 0, 0))
        return err;
    if (p->tx_gen != gen)
        dti__tx_start(d, slot, gen);
    const uint32_t size = dti__tx_size(d, sh);
    uint8_t *ring = tx_ring(d, slot);
    uint32_t pos = p->tx_tail;
    uint32_t used = pos - DTI_LOAD(&sh->tx_head);
    if (used > size)
        return -DTI_E_PROTOCOL; /* a confused engine */
    unsigned taken = 0;
    for (; taken < n; taken++) {
        const struct dti_dgram_msg *m = &msgs[taken];
        if (m->iovcnt && !m->iov)
            return taken ? (int)taken : -EFAULT;
        size_t len = iov_total(m->iov, m->iovcnt);
        uint32_t fl = (!m->to && m->to6) ? DTI_DGRAM_IP6 | DTI_DGRAM_TO : m->to ? DTI_DGRAM_TO : 0u;
        if (len > ((fl & DTI_DGRAM_IP6) ? DTI_DGRAM6_MAX : DTI_DGRAM_MAX) ||
            dti_dgram_record_size((uint32_t)len, fl) > size / 2) {
            if (taken)
                break; /* what fits goes; the caller hears of this one next */
            return -EMSGSIZE;
        }
        uint32_t need = dti_dgram_record_size((uint32_t)len, fl);
        uint32_t off = pos & (size - 1);
        uint32_t pad = need > size - off ? size - off : 0;
        if (used + pad + need > size)
            break; /* the ring is full: send what is there */
        if (pad) {
            struct dti_dgram ph = {.size = pad, .flags = DTI_DGRAM_PAD};
            memcpy(ring + off, &ph, sizeof ph);
            pos += pad;
            used += pad;
            off = 0;
        }
        if (m->tos_set)
            fl |= DTI_DGRAM_TOS_SET | (uint32_t)m->tos << 8;
        struct dti_dgram h = {.size = need, .len = (uint32_t)len, .flags = fl};
        uint8_t *dst = ring + off + sizeof h;
        if (m->to) {
            h.dst_ip = m->to->ip;
            h.dst_port = m->to->port;
        } else if (m->to6) {
            struct dti_dgram6 a6 = {{0}, {0}};
            memcpy(a6.dst, m->to6->ip, 16);
            h.dst_port = m->to6->port;
            memcpy(dst, &a6, sizeof a6);
            dst += sizeof a6;
        }
        memcpy(ring + off, &h, sizeof h);
        for (unsigned i = 0; i < m->iovcnt; i++) {
            if (m->iov[i].len)
                memcpy(dst, m->iov[i].base, m->iov[i].len);
            dst += m->iov[i].len;
        }
        pos += need;
        used += need;
    }
    if (taken == 0)
        return -EAGAIN; /* the ring is held by sends not yet done (another writer) */
    uint64_t ud = dti__next_ud(c);
    int prc;
    DTI_SYNC_PREP(prc, c, prep_send_dgrams(c, s, pos, ud));
    if (prc == 0)
        p->tx_tail = pos; /* the records are the engine's from the command on */
    int rc = dti__run_sync(c, prc, ud, NULL, -1);
    return rc;
}

ssize_t dti_dgram_sendto(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len, const struct dti_addr *to)
{
    struct dti_iov iov = {(void *)(uintptr_t)buf, len};
    struct dti_dgram_msg m = {&iov, 1, to, NULL, 0, 0};
    int rc = dti_dgram_sendmmsg(c, s, &m, 1);
    return rc == 1 ? (ssize_t)len : (rc == 0 ? -EIO : rc);
}

ssize_t dti_dgram_sendto6(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len, const struct dti_addr6 *to)
{
    struct dti_iov iov = {(void *)(uintptr_t)buf, len};
    struct dti_dgram_msg m = {&iov, 1, NULL, to, 0, 0};
    int rc = dti_dgram_sendmmsg(c, s, &m, 1);
    return rc == 1 ? (ssize_t)len : (rc == 0 ? -EIO : rc);
}

/* ---- receive --------------------------------------------------------------- */

/* The reader took n ring bytes (whole records): owed to the engine, told in
 * batches as a stream's releases are (queue.h, dti__release_batch). */
static void dgram_consume(struct dti_ctx *c, dti_sock_t s, const struct dti_sock_shared *sh, struct dti_sock_priv *p,
                          uint32_t n)
{
    p->rx_head += n; /* consumed first: nothing is released before it is taken */
    uint32_t owed = __atomic_add_fetch(&p->rx_owed, n, __ATOMIC_RELAXED);
    if (owed >= dti__release_batch(c->d, sh) && dti__flush_release(c, s) == 0)
        dti_submit(c);
}

/* The record at the reader's position, checked (a pad record is consumed
 * on the way): its header in *h, an IPv6 one's addresses in *a6 (when not
 * NULL) and its payload's address; -EAGAIN when none is waiting, -EIO for a
 * record that makes no sense. */
static ssize_t front(struct dti_ctx *c, dti_sock_t s, struct dti_sock_shared *sh, struct dti_sock_priv *p,
                     uint32_t slot, struct dti_dgram *h, struct dti_dgram6 *a6, const uint8_t **payload)
{
    struct dti_attachment *d = c->d;
    const uint8_t *ring = rx_ring(d, slot);
    for (;;) {
        uint32_t n = DTI_LOAD(&sh->rx_tail) - p->rx_head; /* acquire: the records before it are written */
        uint32_t mask = dti__rx_mask(d, sh);
        if (n == 0)
            return -EAGAIN;
        uint32_t off = (DTI_LOAD_RELAXED(&sh->rx_base) + p->rx_head) & mask;
        if (n > mask + 1 || n < sizeof *h || mask + 1 - off < sizeof *h)
            return -EIO;
        memcpy(h, ring + off, sizeof *h);
        if (h->size < DTI_DGRAM_ALIGN || (h->size & (DTI_DGRAM_ALIGN - 1)) || h->size > n || h->size > mask + 1 - off)
            return -EIO;
        if (!(h->flags & DTI_DGRAM_PAD)) {
            const int ip6 = (h->flags & DTI_DGRAM_IP6) != 0;
            if (h->len > (ip6 ? DTI_DGRAM6_MAX : DTI_DGRAM_MAX) || dti_dgram_record_size(h->len, h->flags) != h->size)
                return -EIO;
            const uint8_t *at = ring + off + sizeof *h;
            if (ip6) {
                if (a6)
                    memcpy(a6, at, sizeof *a6);
                at += sizeof(struct dti_dgram6);
            }
            *payload = at;
            return (ssize_t)h->len;
        }
        dgram_consume(c, s, sh, p, h->size); /* a pad record: nothing to read */
    }
}

ssize_t dti_dgram_borrow(dti_ctx_t *c, dti_sock_t s, struct dti_dgram *hdr, const void **payload)
{
    return dti_dgram_borrow6(c, s, hdr, NULL, payload);
}

ssize_t dti_dgram_borrow6(dti_ctx_t *c, dti_sock_t s, struct dti_dgram *hdr, struct dti_dgram6 *a6,
                          const void **payload)
{
    c = dti__route(c, &s);
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(c->d, s, &slot);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    struct dti_sock_priv *p = dti__rx_side(c->d, slot, dti__gen(s));
    const uint8_t *pl = NULL;
    ssize_t n = front(c, s, sh, p, slot, hdr, a6, &pl);
    if (n >= 0)
        *payload = pl;
    return n;
}

int dti_dgram_consume(dti_ctx_t *c, dti_sock_t s)
{
    c = dti__route(c, &s);
    uint32_t slot;
    struct dti_sock_shared *sh = dti__sock(c->d, s, &slot);
    if (!sh)
        return -DTI_E_BAD_HANDLE;
    struct dti_sock_priv *p = dti__rx_side(c->d, slot, dti__gen(s));
    struct dti_dgram h;
    const uint8_t *pl = NULL;
    ssize_t n = front(c, s, sh, p, slot, &h, NULL, &pl);
    if (n < 0)
        return (int)n;
    dgram_consume(c, s, sh, p, h.size);
    return 0;
}

uint32_t dti_dgram_taken(dti_ctx_t *c, dti_sock_t s)
{
    c = dti__route(c, &s);
    uint32_t slot;
    if (!dti__sock(c->d, s, &slot))
        return 0;
    return dti__rx_side(c->d, slot, dti__gen(s))->rx_head;
}

/* Both receives: the oldest datagram copied (up to len bytes), its header
 * and an IPv6 one's addresses. */
static ssize_t recv_any(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, struct dti_dgram *h, struct dti_dgram6 *a6,
                        size_t *real_len, unsigned flags)
{
    const int err = dti_sock_take_error(c, s); /* a pending ICMP error first, as Linux's recv */
    if (err < 0)
        return err;
    const void *pl = NULL;
    ssize_t n = dti_dgram_borrow6(c, s, h, a6, &pl);
    if (n < 0)
        return n;
    size_t take = len < h->len ? len : h->len;
    if (take)
        memcpy(buf, pl, take);
    if (real_len)
        *real_len = h->len;
    if (!(flags & DTI_DGRAM_PEEK)) {
        int rc = dti_dgram_consume(c, s);
        if (rc < 0)
            return rc;
    }
    return (ssize_t)take;
}

ssize_t dti_dgram_recv(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, struct dti_addr *from, size_t *real_len,
                       unsigned flags)
{
    struct dti_dgram h;
    ssize_t n = recv_any(c, s, buf, len, &h, NULL, real_len, flags);
    if (n >= 0 && from)
        *from = (struct dti_addr){.ip = h.src_ip, .port = h.src_port}; /* an IPv6 sender: 0 */
    return n;
}

ssize_t dti_dgram_recv6(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, struct dti_addr6 *from, size_t *real_len,
                        unsigned flags)
{
    struct dti_dgram h;
    struct dti_dgram6 a6;
    ssize_t n = recv_any(c, s, buf, len, &h, &a6, real_len, flags);
    if (n < 0 || !from)
        return n;
    memset(from, 0, sizeof *from);
    from->port = h.src_port;
    if (h.flags & DTI_DGRAM_IP6) {
        memcpy(from->ip, a6.src, 16);
    } else { /* ::ffff:a.b.c.d */
        from->ip[10] = from->ip[11] = 0xff;
        from->ip[12] = (uint8_t)(h.src_ip >> 24), from->ip[13] = (uint8_t)(h.src_ip >> 16);
        from->ip[14] = (uint8_t)(h.src_ip >> 8), from->ip[15] = (uint8_t)h.src_ip;
    }
    return n;
}
