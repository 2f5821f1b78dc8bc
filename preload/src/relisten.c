/* Listening again on a PPE that came back (see attach.c, "re-attach"): every
 * listening socket of an older generation is made again on the current
 * attachment, behind the same descriptor and object; so is the PPE half of
 * a UDP socket on INADDR_ANY (a hybrid, udp_sock.c).
 *
 * A listener that several processes share (inherited across fork: nginx's
 * workers; or received over SCM_RIGHTS) is made once: the first of them to
 * re-attach makes it and offers it (dti_offer); each of the others, when it
 * re-attaches, claims it with its own descriptor of the same kernel
 * placeholder (dti_claim) and so joins the first one's group on the new PPE
 * — one group and one listener again, every process accepting. The PPE
 * matches the open file itself: only a process holding that very socket (and
 * of the same user, or root) can join. Processes of one fork tree take turns
 * (attach.c's tree lock), so two never both make it. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "accept.h"
#include "attach.h"
#include "config.h"
#include "fdtable.h"
#include "relisten.h"
#include "shim.h"
#include "sock6.h"
#include "sockobj.h"
#include "udp_mcast.h"
#include "wait.h"


/* Listener s (of an older generation) is handle h of the current
 * attachment from here on. */
static void use_handle(struct eta_sock *s, dti_sock_t h)
{
    s->h = h;
    atomic_store(&s->watch_ctx, 0); /* watched in a context of the old PPE */
    atomic_store(&s->watch_mask, 0);
    eta_hmap_put(s->h, s);
    atomic_fetch_add(&s->ev_seq, 1);
    __atomic_store_n(&s->generation, eta_generation, __ATOMIC_RELEASE); /* usable from here on */
}

/* Makes listener s (of an older generation) listen on the current PPE: a
 * new socket with the options the kernel placeholder holds (every option set
 * on an accelerated socket reached it too), the same address and port, the
 * same backlog; on several engines dti_listen makes the group. 0 or an errno
 * value; on failure s stays as it was (silent, or its kernel half). */
static int relisten(dti_ctx_t *c, int fd, struct eta_sock *s)
{
    int h = dti_socket(c);
    if (h < 0)
        return eta_errno_from_dti(h);
    dti_sock_t old = s->h;
    s->h = (dti_sock_t)h;
    eta_carry_options(c, fd, s);
    /* A wildcard hybrid as listen() made it ([::]: IPv6 too, or only), an
     * AF_INET6 socket where bind() put it (sock6.c). */
    int r = s->v6 || (s->hybrid && !s->local.ip) ? eta_bind_any(c, s, s->local.port) : dti_bind(c, s->h, &s->local);
    if (r == 0)
        r = dti_listen(c, s->h, s->backlog);
    if (r < 0) {
        dti_prep_close(c, s->h, 0);
        dti_submit(c);
    }
    s->h = old;
    if (r < 0)
        return eta_errno_from_dti(r);
    use_handle(s, (dti_sock_t)h);
    return 0;
}

/* Whether descriptor fd names listener s, made on an older PPE and not
 * yet on this one (a duplicate's first name makes it again). */
static bool stale_listener(struct eta_sock *s)
{
    return s->obj.kind == ETA_OBJ_SOCK && s->listening && atomic_load(&s->state) == ETA_SOCK_ACCEL &&
           s->generation != eta_generation && s->generation >= eta_fork_generation;
}

/* Claims listener s (descriptor fd) from the process that made it again
 * and offered it; may_join: this process holds nothing on the new PPE yet
 * and joins that one's group. 1: claimed; 0: nobody offered it. */
static int claim(int fd, struct eta_sock *s, bool *may_join)
{
    dti_t *d = eta_dti_attached();
    if (!d)
        return 0;
    dti_sock_t h = DTI_SOCK_INVALID;
    dti_t *joined = NULL;
    char why[160] = "";
    int rc = dti_claim(d, fd, *may_join, &h, &joined, why, sizeof why);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0) {
        ETA_DEBUG("fd %d: not shared with the process group on the new PPE: %s", fd, why[0] ? why : dti_strerror(rc));
        return 0;
    }
    if (rc == 1)
        eta_attach_join_locked(joined, true); /* one group with the process that made it */
    *may_join = false;
    eta_stash_forget(s); /* connections of the old PPE: their handles mean nothing now */
    use_handle(s, h);
    eta_listeners_shared = true; /* several processes accept on it: one connection at a time */
    return 1;
}

/* The listen was refused, the port taken: a process outside this fork tree
 * (a receiver of the listener over SCM_RIGHTS, which does not take turns
 * with it) may have just made it again and be about to offer it (one round
 * trip after its listen). Its offer is waited for, 10 ms at a time, at most
 * REOFFER_WAIT_NS: in a thread that was going to wait anyway. */
#define REOFFER_WAIT_NS 1000000000ull
static int claim_soon(int fd, struct eta_sock *s, bool *may_join)
{
    uint64_t until = eta_now_ns() + REOFFER_WAIT_NS;
    for (;;) {
        if (claim(fd, s, may_join))
            return 1;
        if (eta_now_ns() >= until)
            return 0;
        struct timespec tick = {0, 10000000};
        nanosleep(&tick, NULL);
    }
}

/* A listener's address for the log: an AF_INET6 one's as its program bound
 * it ([::], IPv6 only or not; one of the PPE's IPv6 addresses, IPv6 only by nature). */
static void describe(const struct eta_sock *s, char *addr, size_t len)
{
    uint8_t ip6[16];
    char text[INET6_ADDRSTRLEN] = "::";
    if (s->v6 && !s->local.ip) {
        if (eta_local6_ip(s, ip6))
            inet_ntop(AF_INET6, ip6, text, sizeof text);
        else if (s->local6) /* ETA_LOCAL6_UNKNOWN */
            snprintf(text, sizeof text, "an IPv6 address not recorded");
        snprintf(addr, len, "[%s]:%u%s", text, s->local.port, s->v6only && !s->local6 ? ", IPv6 only" : "");
        return;
    }
    snprintf(addr, len, "%s%u.%u.%u.%u:%u", s->hybrid && !s->local.ip ? "INADDR_ANY " : "", s->local.ip >> 24,
             (s->local.ip >> 16) & 255, (s->local.ip >> 8) & 255, s->local.ip & 255, s->local.port);
}

/* A UDP socket on INADDR_ANY (a hybrid: udp_sock.c) made on an older PPE:
 * its kernel half served alone while the PPE was away. */
static bool stale_udp_hybrid(struct eta_sock *s)
{
    return s->obj.kind == ETA_OBJ_SOCK && s->dgram && s->hybrid && atomic_load(&s->state) == ETA_SOCK_ACCEL &&
           s->generation != eta_generation && s->generation >= eta_fork_generation;
}

/* Calls fn(fd, s, arg) for each socket `stale` names (a stale listener, or a
 * stale UDP hybrid); fn returns false to stop. */
static void each_stale_of(bool (*stale)(struct eta_sock *s), bool (*fn)(int fd, struct eta_sock *s, void *arg),
                          void *arg)
{
    long left = atomic_load(&eta_tracked);
    for (int fd = 0; fd < ETA_FD_MAX && left > 0; fd++) {
        struct eta_obj *o = eta_fd_get(fd);
        if (!o)
            continue;
        left--;
        struct eta_sock *s = (struct eta_sock *)o;
        bool go_on = !stale(s) || fn(fd, s, arg);
        eta_obj_put(o);
        if (!go_on)
            return;
    }
}

static void each_stale(bool (*fn)(int fd, struct eta_sock *s, void *arg), void *arg)
{
    each_stale_of(stale_listener, fn, arg);
}

struct relisten_run {
    bool may_join;
    unsigned made, shared, failed;
};

static bool claim_one(int fd, struct eta_sock *s, void *arg)
{
    struct relisten_run *r = arg;
    if (claim(fd, s, &r->may_join)) {
        r->shared++;
        if (eta_cfg.log_accel) {
            char addr[96];
            describe(s, addr, sizeof addr);
            eta_log("fd %d: listening again on the new PPE (%s), shared with its process group", fd, addr);
        }
    }
    return true;
}

static bool make_one(int fd, struct eta_sock *s, void *arg)
{
    struct relisten_run *r = arg;
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return false;
    char addr[96];
    describe(s, addr, sizeof addr);
    eta_stash_forget(s);
    int err = relisten(c, fd, s);
    if (err == EADDRINUSE && claim_soon(fd, s, &r->may_join)) {
        r->shared++;
        return true;
    }
    if (err != 0) {
        r->failed++;
        eta_log("fd %d: cannot listen on the new PPE at %s: %s; %s", fd, addr, strerror(err),
                s->hybrid ? "its kernel half goes on alone" : "it stays silent");
        return true;
    }
    r->made++;
    r->may_join = false;
    char why[160] = "";
    int rc = dti_offer(eta_dti_attached(), s->h, fd, why, sizeof why);
    if (rc < 0)
        ETA_DEBUG("fd %d: not offered to the processes sharing it: %s", fd, why[0] ? why : dti_strerror(rc));
    if (eta_cfg.log_accel)
        eta_log("fd %d: listening again on the new PPE (%s)", fd, addr);
    return true;
}

/* A stale UDP hybrid's PPE half comes back: a datagram socket of the new PPE
 * at the kernel half's port on 0.0.0.0 (or [::], dual-stack or IPv6 only as
 * it was bound), the options the kernel socket holds
 * carried, as udp_sock.c made it. Not shared with other processes: one of
 * several holding the socket makes it, the others' binds are refused (their
 * kernel halves go on alone, as a refused hybrid's). */
static bool rejoin_one(int fd, struct eta_sock *s, void *arg)
{
    struct relisten_run *r = arg;
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return false;
    struct dti_addr any = {0, s->kernel_port};
    int h = dti_dgram_socket(c), err = h < 0 ? eta_errno_from_dti(h) : 0;
    if (!err) {
        dti_sock_t old = s->h;
        s->h = (dti_sock_t)h;
        eta_carry_options(c, fd, s);
        int rc = eta_bind_any(c, s, any.port); /* 0.0.0.0, or [::] as bound (IPV6_V6ONLY: sock6.c) */
        s->h = old;
        if (rc < 0) {
            dti_prep_close(c, (dti_sock_t)h, 0);
            dti_submit(c);
            err = eta_errno_from_dti(rc);
        }
    }
    /* Where it is bound: the wildcard, or (a shared port's placeholder
     * read: udp_sock.c) the PPE's address. */
    char where[INET6_ADDRSTRLEN + 2] = "0.0.0.0";
    uint8_t ip6[16];
    if (s->v6 && s->local6 && eta_local6_ip(s, ip6)) {
        where[0] = '[';
        inet_ntop(AF_INET6, ip6, where + 1, INET6_ADDRSTRLEN);
        strcat(where, "]");
    } else if (s->v6 && !s->local.ip) {
        strcpy(where, "[::]");
    } else if (s->local.ip) {
        struct in_addr a = {htonl(s->local.ip)};
        inet_ntop(AF_INET, &a, where, sizeof where);
    }
    if (err) {
        r->failed++;
        eta_log("fd %d: UDP on %s:%u cannot come back on the new PPE: %s; its kernel half goes on alone", fd, where,
                any.port, strerror(err));
        return true;
    }
    use_handle(s, (dti_sock_t)h);
    (void)eta_udp_mcast_replay(c, fd, s); /* its memberships as the program made them (each refusal logged) */
    if (eta_cfg.log_accel)
        eta_log("fd %d: UDP on %s:%u on the new PPE again", fd, where, any.port);
    return true;
}

/* Whether this process already holds a socket on the new PPE (another
 * thread made one since the re-attach): then it cannot join another group. */
static bool holds_new_sockets(void)
{
    long left = atomic_load(&eta_tracked);
    for (int fd = 0; fd < ETA_FD_MAX && left > 0; fd++) {
        struct eta_obj *o = eta_fd_peek(fd);
        if (!o)
            continue;
        left--;
        struct eta_sock *s = (struct eta_sock *)o;
        if (o->kind == ETA_OBJ_SOCK && atomic_load(&s->state) == ETA_SOCK_ACCEL && s->generation == eta_generation)
            return true;
    }
    return false;
}

unsigned eta_relisten_all(unsigned *failed, unsigned *shared)
{
    *failed = *shared = 0;
    if (!eta_fds || !eta_dti_attached())
        return 0;
    /* Claims first, while this process holds nothing on the new PPE: it
     * may still join the group of whoever made a shared listener again. */
    struct relisten_run r = {.may_join = !holds_new_sockets()};
    each_stale(claim_one, &r);
    each_stale(make_one, &r);
    each_stale_of(stale_udp_hybrid, rejoin_one, &r);
    *failed = r.failed;
    *shared = r.shared;
    return r.made;
}
