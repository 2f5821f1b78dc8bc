/* Multicast of UDP sockets (udp_mcast.h). A hybrid (bound to INADDR_ANY,
 * [::] or a group) has two halves, and a membership names an interface:
 * the PPE's port (its address, or the index of the kernel interface a
 * shared port has) is the engine's, another interface the kernel half's,
 * none named (INADDR_ANY, index 0) both: the kernel half's join by its
 * routes, the engine's on its port. A socket the PPE alone holds (bound to
 * the PPE's address) takes no group datagrams, on Linux as here: its
 * memberships are the engine's when they name the port or nothing, else
 * the kernel placeholder's (whose answer checks the interface). */
#include "udp_mcast.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "attach.h"
#include "config.h"
#include "decide.h"
#include "lock.h"
#include "mcast_record.h"
#include "mcast_req.h"
#include "real.h"
#include "sock.h"
#include "sockobj.h"
#include "ucopy.h"
#include "udp.h"

/* The options the engine follows, with the value the kernel reads back
 * for a socket that never set them (the engine's default too). */
static const struct {
    int level, name, dti, dflt;
} engine_opts[] = {
    {IPPROTO_IP, IP_MULTICAST_ALL, DTI_SO_MCAST_ALL, 1},     {IPPROTO_IP, IP_TTL, DTI_SO_TTL, 64},
    {IPPROTO_IP, IP_MULTICAST_TTL, DTI_SO_MCAST_TTL, 1},     {IPPROTO_IP, IP_MULTICAST_LOOP, DTI_SO_MCAST_LOOP, 1},
    {IPPROTO_IPV6, IPV6_MULTICAST_ALL, DTI_SO_MCAST_ALL, 1}, {IPPROTO_IPV6, IPV6_UNICAST_HOPS, DTI_SO_HOPLIMIT, 64},
    {IPPROTO_IPV6, IPV6_MULTICAST_HOPS, DTI_SO_MCAST_HOPS, 1},
    {IPPROTO_IPV6, IPV6_MULTICAST_LOOP, DTI_SO_MCAST_LOOP6, 1},
};

int eta_udp_engine_option(int level, int name)
{
    for (size_t i = 0; i < sizeof engine_opts / sizeof engine_opts[0]; i++)
        if (engine_opts[i].level == level && engine_opts[i].name == name)
            return engine_opts[i].dti;
    return 0;
}

void eta_udp_carry_options(dti_ctx_t *c, int fd, struct eta_sock *s)
{
    bool all_done = false; /* IP_MULTICAST_ALL and IPV6_MULTICAST_ALL are one flag (Linux's too) */
    for (size_t i = 0; i < sizeof engine_opts / sizeof engine_opts[0]; i++) {
        if (engine_opts[i].level == IPPROTO_IPV6 && !s->v6)
            continue; /* an AF_INET socket has none of these */
        if (engine_opts[i].dti == DTI_SO_MCAST_ALL && all_done)
            continue;
        int v = 0;
        socklen_t l = sizeof v;
        if (real_getsockopt(fd, engine_opts[i].level, engine_opts[i].name, &v, &l) != 0)
            continue;
        if (engine_opts[i].dti == DTI_SO_MCAST_ALL) {
            all_done = true;
            v = v != 0;
        }
        if (v != engine_opts[i].dflt)
            dti_prep_setsockopt(c, s->h, engine_opts[i].dti, v, 0);
    }
}

int eta_udp_mcast_if(int fd, struct eta_sock *s, const void *val, socklen_t len)
{
    const uint32_t state = atomic_load(&s->state);
    if (state != ETA_SOCK_CANDIDATE && state != ETA_SOCK_ACCEL)
        return real_setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, val, len); /* the kernel's for good */
    struct ip_mreqn v;
    memset(&v, 0, sizeof v);
    const size_t n = len > 0 ? ((size_t)len < sizeof v ? (size_t)len : sizeof v) : 0;
    uint32_t addr = 0;
    int ifindex = 0;
    const bool parsed = val && n && eta_ucopy(&v, val, n) == 0 && eta_mcast_if_parse(&v, len, &addr, &ifindex) == 0;
    const bool ppe = parsed && (ifindex ? eta_udp_ppe_ifindex(ifindex) : addr && eta_net_is_local(&eta_net, addr));
    const bool none = parsed && !addr && !ifindex;
    if (parsed && !ppe && !none && state == ETA_SOCK_ACCEL && !s->hybrid)
        return fail(EOPNOTSUPP); /* the PPE alone holds it: no kernel half to send through that interface */
    const int rc = real_setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, val, len);
    if (rc != 0 && !ppe)
        return -1; /* the kernel's answer (a bad value, an interface it does not have) */
    s->mc_if4 = ppe ? (addr ? addr : eta_net.port[0].ip) : 0;
    s->mc_if4_ours = ppe && rc != 0;
    return 0;
}

int eta_udp_mcast_if_get(struct eta_sock *s, void *val, socklen_t *len)
{
    socklen_t have = 0;
    if (!len || eta_ucopy(&have, len, sizeof have) != 0)
        return fail(EFAULT);
    /* As Linux: the address as an in_addr, cut to the room given. */
    struct in_addr a = {htonl(s->mc_if4)};
    socklen_t n = have < (socklen_t)sizeof a ? have : (socklen_t)sizeof a;
    if (n && (!val || eta_ucopy(val, &a, (size_t)n) != 0))
        return fail(EFAULT);
    return eta_ucopy(len, &n, sizeof n) != 0 ? fail(EFAULT) : 0;
}

int eta_udp_engine_set(int fd, struct eta_sock *s, int level, int name, const void *val, socklen_t len)
{
    if (real_setsockopt(fd, level, name, val, len) != 0)
        return -1; /* the kernel checks the value (and the level for the family) */
    int v = 0;
    socklen_t l = sizeof v;
    if (real_getsockopt(fd, level, name, &v, &l) != 0)
        return -1;
    int e = usable(s, ENETDOWN);
    dti_ctx_t *c = e ? NULL : eta_ctx();
    if (!c)
        return fail(e ? e : ENETDOWN);
    /* The kernel's value as it reads it back: IP_TTL -1 reads 64, the
     * default; IP_MULTICAST_ALL any non-zero 1. */
    const int opt = eta_udp_engine_option(level, name);
    int rc = dti_setsockopt(c, s->h, opt, opt == DTI_SO_MCAST_ALL ? v != 0 : v);
    return rc < 0 ? fail(eta_errno_from_dti(rc)) : 0;
}

bool eta_udp_bind_is_group(const struct sockaddr *addr, socklen_t len)
{
    if (!addr)
        return false;
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in;
        memcpy(&in, addr, sizeof in);
        return IN_MULTICAST(ntohl(in.sin_addr.s_addr));
    }
    if (addr->sa_family == AF_INET6 && len >= 24) { /* Linux's SIN6_LEN_RFC2133: no scope id */
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, 24);
        return IN6_IS_ADDR_MULTICAST(&in6.sin6_addr);
    }
    return false;
}

/* The leave that undoes a join (the same value). */
static int undo_name(int name)
{
    switch (name) {
    case IP_ADD_MEMBERSHIP: return IP_DROP_MEMBERSHIP;
    case IP_ADD_SOURCE_MEMBERSHIP: return IP_DROP_SOURCE_MEMBERSHIP;
    case IPV6_ADD_MEMBERSHIP: return IPV6_DROP_MEMBERSHIP;
    case MCAST_JOIN_GROUP: return MCAST_LEAVE_GROUP;
    default: return MCAST_LEAVE_SOURCE_GROUP; /* MCAST_JOIN_SOURCE_GROUP */
    }
}

/* Which halves the request's interface names: *ppe the engine's port,
 * *kernel a kernel interface (both when none is named). */
static void halves(const struct eta_mcast_req *r, bool *ppe, bool *kernel)
{
    if (r->ifindex) {
        *ppe = eta_udp_ppe_ifindex(r->ifindex); /* a shared port's interface */
        *kernel = true;
    } else if (!r->v6 && r->if_addr4) {
        *ppe = eta_net_is_local(&eta_net, r->if_addr4);
        *kernel = !*ppe || eta_udp_ifindex4(r->if_addr4) != 0; /* shared: the kernel holds it too */
    } else {
        *ppe = *kernel = true;
    }
}

/* The engine's memberships of a socket, as the program made them: a PPE
 * that restarts forgets them, and the socket's PPE half joins them again
 * when it comes back (eta_udp_mcast_replay). One list per socket that
 * joined, allocated at its first join, in one process-wide chain under one
 * lock (joins are rare and never on the data path; a socket's release
 * looks only when the chain is not empty). */
#define MCAST_MAX ETA_MCAST_MAX /* 20 per family: the engine's own limit (UdpSockets::kMaxGroups) */
struct eta_mcast_list {
    struct eta_mcast_list *next;
    const struct eta_sock *s;
    unsigned n;
    struct eta_mcast_req r[MCAST_MAX];
};
static struct eta_lock mcast_lock = ETA_LOCK_INIT;
static struct eta_mcast_list *mcast_head; /* written under the lock; read bare only to see it empty */

/* s's list (under the lock), its link in *prev; NULL when s has none. */
static struct eta_mcast_list *list_of(const struct eta_sock *s, struct eta_mcast_list ***prev)
{
    struct eta_mcast_list **p = &mcast_head;
    while (*p && (*p)->s != s)
        p = &(*p)->next;
    if (prev)
        *prev = p;
    return *p;
}

static bool same_membership(const struct eta_mcast_req *a, const struct eta_mcast_req *b)
{
    return a->v6 == b->v6 && a->has_source == b->has_source &&
           (a->v6 ? memcmp(a->group6, b->group6, 16) == 0 && (!a->has_source || memcmp(a->source6, b->source6, 16) == 0)
                  : a->group4 == b->group4 && a->source4 == b->source4);
}

/* Records a join the engine took, or drops the record of a leave. */
static void remember(struct eta_sock *s, const struct eta_mcast_req *r)
{
    eta_lock(&mcast_lock);
    struct eta_mcast_list *l = list_of(s, NULL);
    unsigned i = 0;
    while (l && i < l->n && !same_membership(&l->r[i], r))
        i++;
    if (!r->join) {
        if (l && i < l->n)
            l->r[i] = l->r[--l->n];
    } else if (!l || i == l->n) {
        if (!l && (l = calloc(1, sizeof *l)) != NULL) {
            l->s = s;
            l->next = mcast_head;
            __atomic_store_n(&mcast_head, l, __ATOMIC_RELEASE);
        }
        if (l && l->n < MCAST_MAX)
            l->r[l->n++] = *r;
    }
    eta_unlock(&mcast_lock);
}

_Static_assert(ETA_MCAST_MAX == ETA_MCAST_REC_MAX, "the records hold a socket's every membership");

unsigned eta_udp_mcast_export(const struct eta_sock *s, struct eta_mcast_rec *out)
{
    if (!__atomic_load_n(&mcast_head, __ATOMIC_RELAXED))
        return 0;
    eta_lock(&mcast_lock);
    const struct eta_mcast_list *l = list_of(s, NULL);
    const unsigned n = l ? l->n : 0;
    for (unsigned i = 0; i < n; i++) {
        const struct eta_mcast_req *r = &l->r[i];
        out[i] = (struct eta_mcast_rec){.v6 = r->v6, .has_source = r->has_source,
                                         .ifindex = r->ifindex > 0 ? r->ifindex : 0};
        if (r->v6) {
            memcpy(out[i].group6, r->group6, 16);
            if (r->has_source)
                memcpy(out[i].source6, r->source6, 16);
        } else {
            out[i].group4 = r->group4;
            out[i].source4 = r->has_source ? r->source4 : 0;
            out[i].if_addr4 = r->if_addr4;
        }
    }
    eta_unlock(&mcast_lock);
    return n;
}

void eta_udp_mcast_import(struct eta_sock *s, const struct eta_mcast_rec *m, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        struct eta_mcast_req r = {.v6 = m[i].v6, .join = true, .has_source = m[i].has_source,
                                  .group4 = m[i].group4, .source4 = m[i].source4, .if_addr4 = m[i].if_addr4,
                                  .ifindex = m[i].ifindex};
        memcpy(r.group6, m[i].group6, 16);
        memcpy(r.source6, m[i].source6, 16);
        remember(s, &r);
    }
}

void eta_udp_mcast_forget(struct eta_sock *s)
{
    if (!__atomic_load_n(&mcast_head, __ATOMIC_RELAXED))
        return; /* no socket of this process ever joined: every close's case */
    eta_lock(&mcast_lock);
    struct eta_mcast_list **prev;
    struct eta_mcast_list *l = list_of(s, &prev);
    if (l)
        __atomic_store_n(prev, l->next, __ATOMIC_RELAXED);
    eta_unlock(&mcast_lock);
    free(l);
}

static int join_on(dti_ctx_t *c, dti_sock_t h, const struct eta_mcast_req *r)
{
    if (r->v6)
        return r->join ? dti_dgram_join6(c, h, r->group6, r->has_source ? r->source6 : NULL)
                       : dti_dgram_leave6(c, h, r->group6, r->has_source ? r->source6 : NULL);
    return r->join ? dti_dgram_join(c, h, r->group4, r->source4) : dti_dgram_leave(c, h, r->group4, r->source4);
}

unsigned eta_udp_mcast_replay(dti_ctx_t *c, int fd, struct eta_sock *s)
{
    struct eta_mcast_list copy;
    eta_lock(&mcast_lock);
    const struct eta_mcast_list *l = list_of(s, NULL);
    copy.n = l ? l->n : 0;
    if (copy.n)
        memcpy(copy.r, l->r, sizeof copy.r[0] * copy.n);
    eta_unlock(&mcast_lock);
    unsigned refused = 0;
    for (unsigned i = 0; i < copy.n; i++) {
        int rc = join_on(c, s->h, &copy.r[i]);
        if (rc < 0) {
            refused++;
            eta_log("fd %d: a multicast membership cannot come back on the new PPE: %s", fd,
                    strerror(eta_errno_from_dti(rc)));
        }
    }
    return refused;
}

static int engine_membership(struct eta_sock *s, const struct eta_mcast_req *r)
{
    int e = usable(s, ENETDOWN);
    dti_ctx_t *c = e ? NULL : eta_ctx();
    if (!c)
        return -(e ? e : ENETDOWN);
    int rc = join_on(c, s->h, r);
    if (rc == 0)
        remember(s, r);
    return rc < 0 ? -eta_errno_from_dti(rc) : 0;
}

int eta_udp_membership(int fd, struct eta_sock *s, int level, int name, const void *val, socklen_t len)
{
    if (level == IPPROTO_IPV6 && !s->v6)
        return real_setsockopt(fd, level, name, val, len); /* an AF_INET socket: the kernel's ENOPROTOOPT */
    struct group_source_req v; /* the largest of the values */
    memset(&v, 0, sizeof v);
    const size_t n = len > 0 ? ((size_t)len < sizeof v ? (size_t)len : sizeof v) : 0;
    if (val && n && eta_ucopy(&v, val, n) != 0)
        return fail(EFAULT);
    struct eta_mcast_req r;
    int e = eta_mcast_parse(level, name, val ? &v : NULL, len, s->v6, &r);
    if (e)
        return fail(e);
    /* Linux checks the group before the interface (ip_mc_join_group,
     * ipv6_sock_mc_join: EINVAL). */
    if (r.v6 ? r.group6[0] != 0xff : !IN_MULTICAST(r.group4))
        return fail(EINVAL);
    bool ppe, kernel;
    halves(&r, &ppe, &kernel);
    if (!s->hybrid) {
        if (!ppe)
            return real_setsockopt(fd, level, name, val, len);
        int rc = engine_membership(s, &r);
        return rc < 0 ? fail(-rc) : 0;
    }
    /* A hybrid: the kernel half first (its answer is the program's where it
     * alone is named); with no interface named, a kernel without a route
     * for the group (ENODEV) leaves the engine's join standing alone. */
    int krc = -1, kerr = 0;
    if (kernel) {
        krc = real_setsockopt(fd, level, name, val, len);
        kerr = errno;
        if (krc != 0 && (!ppe || (r.join && kerr != ENODEV && kerr != EADDRNOTAVAIL)))
            return -1;
    }
    if (!ppe)
        return krc;
    int prc = engine_membership(s, &r);
    if (r.join) {
        if (prc < 0 && krc == 0)
            (void)real_setsockopt(fd, level, undo_name(name), val, len); /* all or nothing */
        return prc < 0 ? fail(-prc) : 0;
    }
    /* A leave: done where either half held it. */
    if (prc == 0 || krc == 0)
        return 0;
    return fail(-prc);
}
