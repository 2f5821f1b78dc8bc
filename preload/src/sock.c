/* Socket calls: socket, bind, listen, accept, connect, close, shutdown,
 * dup, fcntl, ioctl, names and options. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <arpa/inet.h>

#include "shim.h"

void eta_hmap_put(dti_sock_t h, struct eta_sock *s);
void eta_hmap_del(dti_sock_t h);

/* ---- helpers ----------------------------------------------------------- */

static int fail(int err)
{
    errno = err;
    return -1;
}

static struct dti_addr to_dti(const struct sockaddr *a)
{
    struct sockaddr_in in;
    memcpy(&in, a, sizeof in);
    return (struct dti_addr){ntohl(in.sin_addr.s_addr), ntohs(in.sin_port)};
}

static void from_dti(const struct dti_addr *a, struct sockaddr *out, socklen_t *len, bool v6)
{
    if (!out || !len)
        return;
    if (v6) { /* an IPv4 peer of a dual-stack socket, as Linux shows it: ::ffff:a.b.c.d */
        struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(a->port)};
        in6.sin6_addr.s6_addr[10] = 0xff;
        in6.sin6_addr.s6_addr[11] = 0xff;
        uint32_t ip = htonl(a->ip);
        memcpy(&in6.sin6_addr.s6_addr[12], &ip, 4);
        socklen_t n = *len < (socklen_t)sizeof in6 ? *len : (socklen_t)sizeof in6;
        memcpy(out, &in6, (size_t)n);
        *len = sizeof in6;
        return;
    }
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(a->port), .sin_addr = {htonl(a->ip)}};
    socklen_t n = *len < (socklen_t)sizeof in ? *len : (socklen_t)sizeof in;
    memcpy(out, &in, (size_t)n);
    *len = sizeof in;
}

static const char *fmt_addr(const struct sockaddr *a, char *buf, size_t len)
{
    struct dti_addr d = to_dti(a);
    snprintf(buf, len, "%u.%u.%u.%u:%u", d.ip >> 24, (d.ip >> 16) & 255, (d.ip >> 8) & 255, d.ip & 255, d.port);
    return buf;
}

/* The socket must be accelerated and this process's; orphans are refused
 * with err. Returns 0 or an errno value. */
static int usable(struct eta_sock *s, int orphan_err)
{
    if (eta_sock_orphaned(s))
        return orphan_err;
    if (atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        return orphan_err == EBADF ? ECONNRESET : orphan_err;
    return 0;
}

/* Drops the table entry of fd: the socket is the kernel's for good. */
static void to_kernel(int fd, struct eta_sock *s, enum eta_reason r, const char *detail)
{
    atomic_store(&s->state, ETA_SOCK_KERNEL);
    eta_count(r, fd, detail);
    eta_fd_clear(fd);
}

/* Options the program set on the kernel socket before it was accelerated
 * are carried over (read back from the kernel, which validated them). */
void eta_carry_options(dti_ctx_t *c, int fd, struct eta_sock *s)
{
    static const struct {
        int level, name, dti;
        int dflt;
    } map[] = {
        {SOL_SOCKET, SO_REUSEADDR, DTI_SO_REUSEADDR, 0}, {SOL_SOCKET, SO_REUSEPORT, DTI_SO_REUSEPORT, 0},
        {SOL_SOCKET, SO_KEEPALIVE, DTI_SO_KEEPALIVE, 0}, {IPPROTO_TCP, TCP_NODELAY, DTI_SO_NODELAY, 0},
        {IPPROTO_TCP, TCP_CORK, DTI_SO_CORK, 0},         {IPPROTO_IP, IP_TOS, DTI_SO_TOS, 0},
        {SOL_SOCKET, SO_RCVLOWAT, DTI_SO_RCVLOWAT, 1},   {IPPROTO_TCP, TCP_USER_TIMEOUT, DTI_SO_USER_TIMEOUT, 0},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        int v = 0;
        socklen_t l = sizeof v;
        if (real_getsockopt(fd, map[i].level, map[i].name, &v, &l) == 0 && v != map[i].dflt)
            dti_prep_setsockopt(c, s->h, map[i].dti, v, 0);
    }
    int keep = 0;
    socklen_t l = sizeof keep;
    if (real_getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keep, &l) == 0 && keep) {
        int v;
        l = sizeof v;
        if (real_getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &l) == 0)
            dti_prep_setsockopt(c, s->h, DTI_SO_KEEPIDLE, v, 0);
        l = sizeof v;
        if (real_getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &v, &l) == 0)
            dti_prep_setsockopt(c, s->h, DTI_SO_KEEPINTVL, v, 0);
        l = sizeof v;
        if (real_getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &v, &l) == 0)
            dti_prep_setsockopt(c, s->h, DTI_SO_KEEPCNT, v, 0);
    }
    struct linger lg;
    l = sizeof lg;
    if (real_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &l) == 0 && lg.l_onoff)
        dti_prep_setsockopt(c, s->h, DTI_SO_LINGER, lg.l_linger, 0);
    dti_submit(c);
}

/* Creates the PPE socket behind a candidate. Returns 0 or an errno value. */
static int make_accel(dti_ctx_t *c, int fd, struct eta_sock *s)
{
    int h = dti_socket(c);
    if (h < 0)
        return eta_errno_from_dti(h);
    s->h = (dti_sock_t)h;
    s->generation = eta_generation;
    int fl = real_fcntl(fd, F_GETFL);
    atomic_store(&s->nonblock, fl >= 0 && (fl & O_NONBLOCK));
    struct timeval tv;
    socklen_t l = sizeof tv;
    if (real_getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
        s->rcvtimeo_ms = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
    l = sizeof tv;
    if (real_getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
        s->sndtimeo_ms = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
    eta_carry_options(c, fd, s);
    eta_hmap_put(s->h, s);
    atomic_store(&s->state, ETA_SOCK_ACCEL);
    ETA_STAT_ADD(accel_open, 1);
    return 0;
}

static uint64_t deadline_after(int ms)
{
    return ms < 0 ? 0 : eta_now_ns() + (uint64_t)ms * 1000000ull;
}

/* ---- socket ------------------------------------------------------------ */

ETA_EXPORT int socket(int domain, int type, int protocol)
{
    int fd = real_socket(domain, type, protocol);
    if (fd < 0)
        return fd;
    enum eta_reason r = eta_decide_socket(domain, type, protocol);
    /* An IPv6 TCP socket stays a candidate: it may become a dual-stack
     * listener on [::], whose IPv4 half the PPE carries. */
    bool v6 = r == ETA_R_INET6 && eta_decide_socket(AF_INET, type, protocol) == ETA_R_NONE;
    if (v6)
        r = ETA_R_NONE;
    if (r != ETA_R_NONE) {
        eta_count(r, fd, NULL);
        return fd;
    }
    eta_init();
    if (eta_cfg.disabled) {
        eta_count(ETA_R_DISABLED, fd, NULL);
        return fd;
    }
    if (!eta_fd_in_range(fd)) {
        eta_count(ETA_R_FD_RANGE, fd, NULL);
        return fd;
    }
    int saved = errno;
    if (atomic_load_explicit(&eta_engine_dead, memory_order_relaxed))
        (void)eta_reattach_try(); /* a PPE that came back takes new sockets at once */
    if (!eta_ppe_usable() || atomic_load_explicit(&eta_engine_dead, memory_order_relaxed)) {
        errno = saved;
        eta_count(ETA_R_NO_PPE, fd, NULL);
        return fd;
    }
    errno = saved;
    struct eta_sock *s = eta_sock_new();
    if (!s) {
        eta_count(ETA_R_FD_RANGE, fd, "no room for another socket object");
        return fd;
    }
    atomic_store(&s->nonblock, (type & SOCK_NONBLOCK) != 0);
    s->v6 = v6;
    eta_fd_set(fd, &s->obj);
    return fd;
}

/* bind() of an AF_INET6 candidate: [::] may become a dual-stack listener
 * (decided at listen(), where IPV6_V6ONLY is final); every other address is
 * the kernel's. */
static int bind6(int fd, struct eta_sock *s, const struct sockaddr *addr, socklen_t len)
{
    struct sockaddr_in6 in6;
    bool any = addr && len >= (socklen_t)sizeof in6 && addr->sa_family == AF_INET6 &&
               (memcpy(&in6, addr, sizeof in6), IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr));
    if (!any) {
        to_kernel(fd, s, ETA_R_INET6, "an IPv6 address");
        return real_bind(fd, addr, len);
    }
    int rc = real_bind(fd, addr, len);
    if (rc == 0) {
        struct sockaddr_storage ss;
        socklen_t l = sizeof ss;
        s->bound_kernel = true;
        if (real_getsockname(fd, (struct sockaddr *)&ss, &l) == 0)
            s->kernel_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return rc;
}

/* ---- bind / listen ----------------------------------------------------- */

ETA_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr_arg, socklen_t len)
{
    const struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return real_bind(fd, addr, len);
    int rc;
    char buf[32];
    uint32_t st = atomic_load(&s->state);
    if (st != ETA_SOCK_CANDIDATE || s->bound_kernel) {
        eta_obj_put(&s->obj);
        return st == ETA_SOCK_KERNEL ? real_bind(fd, addr, len) : fail(EINVAL);
    }
    if (s->v6) {
        rc = bind6(fd, s, addr, len);
        eta_obj_put(&s->obj);
        return rc;
    }
    enum eta_reason why;
    enum eta_bind_target t = eta_decide_bind(&eta_net, addr, len, &why);
    if (t == ETA_BIND_KERNEL) {
        to_kernel(fd, s, why, addr && len >= sizeof(struct sockaddr_in) && addr->sa_family == AF_INET
                                  ? fmt_addr(addr, buf, sizeof buf) : "bind");
        eta_obj_put(&s->obj);
        return real_bind(fd, addr, len);
    }
    if (t == ETA_BIND_BOTH) {
        /* The kernel half binds now (its errors are the kernel's); the PPE
         * half follows at listen() or connect(), once the role is known. */
        rc = real_bind(fd, addr, len);
        if (rc == 0) {
            struct sockaddr_in in;
            socklen_t l = sizeof in;
            s->bound_kernel = true;
            if (real_getsockname(fd, (struct sockaddr *)&in, &l) == 0)
                s->kernel_port = ntohs(in.sin_port);
        }
        eta_obj_put(&s->obj);
        return rc;
    }
    dti_ctx_t *c = eta_ctx();
    int err = c ? make_accel(c, fd, s) : ENETDOWN;
    if (err) {
        eta_count(ETA_R_PPE_REFUSED, fd, strerror(err));
        atomic_store(&s->state, ETA_SOCK_KERNEL);
        eta_fd_clear(fd);
        eta_obj_put(&s->obj);
        return fail(EADDRNOTAVAIL); /* the kernel has no such address */
    }
    struct dti_addr a = to_dti(addr);
    rc = dti_bind(c, s->h, &a);
    if (rc < 0) {
        eta_obj_put(&s->obj);
        return fail(eta_errno_from_dti(rc));
    }
    s->local = a;
    eta_count(ETA_R_NONE, fd, fmt_addr(addr, buf, sizeof buf));
    eta_obj_put(&s->obj);
    return 0;
}

ETA_EXPORT int listen(int fd, int backlog)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return real_listen(fd, backlog);
    uint32_t st = atomic_load(&s->state);
    int rc;
    if (st == ETA_SOCK_KERNEL) {
        eta_obj_put(&s->obj);
        return real_listen(fd, backlog);
    }
    if (st == ETA_SOCK_ORPHAN || (st == ETA_SOCK_ACCEL && usable(s, EINVAL))) {
        eta_obj_put(&s->obj);
        return fail(EOPNOTSUPP);
    }
    if (st == ETA_SOCK_CANDIDATE) {
        /* INADDR_ANY (bound or not: listen() binds an unbound socket to a
         * free port): the kernel listens, then the PPE on the same port.
         * IPv6 on [::] likewise, when it takes IPv4 too (IPV6_V6ONLY off). */
        int v6only = 0;
        socklen_t ol = sizeof v6only;
        if (s->v6 && (!s->bound_kernel ||
                      real_getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol) != 0 || v6only)) {
            to_kernel(fd, s, ETA_R_INET6, s->bound_kernel ? "IPV6_V6ONLY listener" : "IPv6 listener not bound to [::]");
            eta_obj_put(&s->obj);
            return real_listen(fd, backlog);
        }
        rc = real_listen(fd, backlog);
        if (rc != 0) {
            eta_obj_put(&s->obj);
            return rc;
        }
        struct sockaddr_storage ss;
        socklen_t l = sizeof ss;
        real_getsockname(fd, (struct sockaddr *)&ss, &l);
        struct sockaddr_in in;
        memcpy(&in, &ss, sizeof in); /* the port is at the same place in sockaddr_in6 */
        dti_ctx_t *c = eta_ctx();
        int err = c ? make_accel(c, fd, s) : ENETDOWN;
        struct dti_addr any = {0, ntohs(in.sin_port)};
        if (!err) {
            int r = dti_bind(c, s->h, &any);
            if (r == 0)
                r = dti_listen(c, s->h, backlog);
            if (r < 0) {
                dti_prep_close(c, s->h, 0);
                dti_submit(c);
            }
            if (r < 0) {
                eta_hmap_del(s->h);
                ETA_STAT_ADD(accel_open, (uint64_t)-1);
                err = eta_errno_from_dti(r);
            }
        }
        if (err) {
            char why[96];
            snprintf(why, sizeof why, "the PPE cannot listen on port %u: %s", any.port, strerror(err));
            to_kernel(fd, s, ETA_R_PPE_REFUSED, why);
            eta_obj_put(&s->obj);
            return 0; /* the kernel half listens: the program works, and it was counted */
        }
        s->local = any;
        s->hybrid = true;
        s->backlog = backlog;
        s->listening = true;
        /* The kernel half is only ever polled by the shim. */
        int fl = real_fcntl(fd, F_GETFL);
        real_fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        char buf[64];
        snprintf(buf, sizeof buf, s->v6 ? "listening on [::]:%u, IPv4 on the PPE and the kernel"
                                       : "listening on 0.0.0.0:%u on the PPE and the kernel", any.port);
        eta_count(ETA_R_NONE, fd, buf);
        eta_obj_put(&s->obj);
        return 0;
    }
    /* Bound to a PPE address. */
    dti_ctx_t *c = eta_ctx();
    if (!c) {
        eta_obj_put(&s->obj);
        return fail(ENETDOWN);
    }
    rc = dti_listen(c, s->h, backlog);
    if (rc == 0) {
        s->backlog = backlog;
        s->listening = true;
    }
    eta_obj_put(&s->obj);
    return rc < 0 ? fail(eta_errno_from_dti(rc)) : 0;
}

/* ---- accept ------------------------------------------------------------ */

/* Listener stash: accept takes up to DTI_ACCEPT_MAX connections per round
 * trip; the extras wait here. Kept beside the socket object. */
struct stash {
    _Atomic int lock;
    unsigned n;
    dti_sock_t h[DTI_ACCEPT_MAX];
};
#define STASH_SLOTS 4096
static struct stash stashes[STASH_SLOTS];
static struct stash *stash_of(struct eta_sock *s)
{
    return &stashes[((uintptr_t)s / 256) % STASH_SLOTS];
}

/* Set once this process forked or is a fork child: its listeners may be
 * shared with other processes, which must not find connections hidden in
 * this one's stash, so accept takes one at a time. */
bool eta_listeners_shared;

/* In a fork child: connections in the parent's stash were accepted by the
 * parent, not by the program; the child gives up its holds on them. */
void eta_stash_after_fork_child(void)
{
    dti_ctx_t *c = NULL;
    for (unsigned k = 0; k < STASH_SLOTS; k++) {
        struct stash *st = &stashes[k];
        atomic_store(&st->lock, 0);
        for (unsigned i = 0; i + 1 < st->n; i += 2) {
            if (!c && !(c = eta_ctx()))
                break;
            if (dti_prep_close(c, st->h[i + 1], 0) == 0)
                dti_submit(c);
        }
        st->n = 0;
    }
}
static void stash_lock(struct stash *st)
{
    while (atomic_exchange_explicit(&st->lock, 1, memory_order_acquire))
        ;
}
static void stash_unlock(struct stash *st)
{
    atomic_store_explicit(&st->lock, 0, memory_order_release);
}

/* Drops what the stash holds for listener s without telling any PPE (the
 * one that made those connections went). */
void eta_stash_forget(struct eta_sock *s)
{
    struct stash *st = stash_of(s);
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n;) {
        if (st->h[i] == s->h) {
            memmove(&st->h[i], &st->h[i + 2], (st->n - i - 2) * sizeof st->h[0]);
            st->n -= 2;
        } else {
            i += 2;
        }
    }
    stash_unlock(st);
}

/* exec: the connections listener s's stash holds (copied, not taken), and
 * putting one back in the new image. */
unsigned eta_stash_export(struct eta_sock *s, dti_sock_t *out, unsigned max)
{
    struct stash *st = stash_of(s);
    unsigned n = 0;
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n && n < max; i += 2)
        if (st->h[i] == s->h)
            out[n++] = st->h[i + 1];
    stash_unlock(st);
    return n;
}

bool eta_stash_import(struct eta_sock *s, dti_sock_t h)
{
    struct stash *st = stash_of(s);
    stash_lock(st);
    bool room = st->n + 2 <= DTI_ACCEPT_MAX;
    if (room) {
        st->h[st->n++] = s->h;
        st->h[st->n++] = h;
    }
    stash_unlock(st);
    return room;
}

/* Connections the PPE already handed to this process for listener s that
 * accept has not returned yet. They are invisible in the socket table's
 * accept_ready, so readiness (poll, epoll, select) must count them: a server
 * that accepts one connection per wakeup (memcached) would otherwise never
 * hear of them again. */
unsigned eta_stash_count(struct eta_sock *s)
{
    struct stash *st = stash_of(s);
    if (!__atomic_load_n(&st->n, __ATOMIC_RELAXED))
        return 0;
    unsigned n = 0;
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n; i += 2)
        n += st->h[i] == s->h;
    stash_unlock(st);
    return n;
}

/* One connection from the PPE half, or -EAGAIN. Stash entries carry the
 * listener's handle in the top of a pair so slots shared by two listeners
 * (hash collision) are told apart. */
static int take_accepted(dti_ctx_t *c, struct eta_sock *s, dti_sock_t *out)
{
    struct stash *st = stash_of(s);
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n; i += 2) {
        if (st->h[i] == s->h) {
            *out = st->h[i + 1];
            memmove(&st->h[i], &st->h[i + 2], (st->n - i - 2) * sizeof st->h[0]);
            st->n -= 2;
            stash_unlock(st);
            return 0;
        }
    }
    stash_unlock(st);
    struct dti_sock_info ss;
    if (dti_sock_status(c, s->h, &ss) == 0 && ss.accept_ready == 0)
        return -EAGAIN;
    uint64_t ud = 0x4000000000000000ull | s->h;
    unsigned batch = eta_listeners_shared ? 1 : DTI_ACCEPT_MAX / 2;
    int rc = dti_prep_accept(c, s->h, batch, 0, ud);
    if (rc == -EAGAIN) {
        eta_pump(c);
        rc = dti_prep_accept(c, s->h, batch, 0, ud);
    }
    struct dti_cqe cqe;
    if (rc == 0 && (rc = dti_submit(c)) >= 0)
        rc = dti_wait_cqe(c, ud, &cqe, -1);
    if (rc < 0)
        return rc;
    if (cqe.res <= 0)
        return cqe.res < 0 ? cqe.res : -EAGAIN;
    *out = cqe.accepted[0];
    if (cqe.res > 1) {
        stash_lock(st);
        for (int i = 1; i < cqe.res && st->n + 2 <= DTI_ACCEPT_MAX; i++) {
            st->h[st->n++] = s->h;
            st->h[st->n++] = cqe.accepted[i];
        }
        stash_unlock(st);
        eta_epoll_touch(s); /* readable while the stash holds connections: no engine event says so */
    }
    return 0;
}

static bool accept_ready(void *arg)
{
    struct eta_sock *s = arg;
    struct stash *st = stash_of(s);
    if (__atomic_load_n(&st->n, __ATOMIC_RELAXED))
        return true;
    dti_ctx_t *c = eta_ctx();
    return c && (eta_sock_events(c, s) & (POLLIN | POLLERR | POLLHUP));
}

/* Wraps an accepted PPE connection in a placeholder kernel socket. */
static int install_accepted(dti_ctx_t *c, dti_sock_t h, struct sockaddr *addr, socklen_t *len, int flags, bool v6)
{
    int fd = real_socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | (flags & SOCK_CLOEXEC), 0);
    struct eta_sock *n = fd >= 0 && eta_fd_in_range(fd) ? eta_sock_new() : NULL;
    if (!n) {
        int err = fd < 0 ? errno : EMFILE;
        if (fd >= 0)
            real_close(fd);
        dti_prep_abort(c, h, 0);
        dti_submit(c);
        return fail(err);
    }
    n->h = h;
    n->generation = eta_generation;
    n->connect_started = true;
    n->connect_reported = true;
    n->v6 = v6;
    atomic_store(&n->nonblock, (flags & SOCK_NONBLOCK) != 0);
    dti_getsockname(c, h, &n->local);
    struct dti_addr peer = {0, 0};
    dti_getpeername(c, h, &peer);
    from_dti(&peer, addr, len, v6);
    eta_hmap_put(h, n);
    atomic_store(&n->state, ETA_SOCK_ACCEL);
    eta_fd_set(fd, &n->obj);
    ETA_STAT_ADD(accel_open, 1);
    ETA_STAT_ADD(accepted, 1);
    return fd;
}

bool eta_hybrid_kernel_only(struct eta_sock *s)
{
    return s->hybrid && (atomic_load_explicit(&eta_engine_dead, memory_order_relaxed) || eta_sock_orphaned(s));
}

/* What accept_kernel_half/accept_nothing return when the listener works on
 * a PPE that came back: accept starts over. */
#define ACCEPT_AGAIN (-2)

/* While the PPE is away, a wait sleeps at most until the next re-attach try
 * (ms: the caller's timeout, -1 none). */
static int cap_for_reattach(int ms)
{
    int r = eta_reattach_wait_ms();
    return r >= 0 && (ms < 0 || r < ms) ? r : ms;
}

/* After such a wait: the PPE is back and s listens on it. */
static bool back_on_ppe(struct eta_sock *s)
{
    return eta_reattach_try() && !eta_sock_orphaned(s) && eta_ctx();
}

/* accept() on the kernel half of an INADDR_ANY listener whose PPE half is
 * gone. The kernel socket is non-blocking (the shim keeps it so); a blocking
 * accept waits in poll, restarting after signals as the kernel would. */
static int accept_kernel_half(int fd, struct eta_sock *s, struct sockaddr *addr, socklen_t *len, int flags)
{
    uint64_t deadline = deadline_after(s->rcvtimeo_ms);
    for (;;) {
        if (back_on_ppe(s))
            return ACCEPT_AGAIN;
        int k = real_accept4(fd, addr, len, flags);
        if (k >= 0) {
            ETA_STAT_ADD(kernel_accepted, 1);
            eta_count(ETA_R_KERNEL_ADDR, k, "accepted by the kernel half of an INADDR_ANY listener");
            return k;
        }
        if ((errno != EAGAIN && errno != EWOULDBLOCK) || atomic_load(&s->nonblock))
            return -1;
        int ms = -1;
        if (deadline) {
            uint64_t now = eta_now_ns();
            if (now >= deadline)
                return fail(EAGAIN);
            ms = (int)((deadline - now + 999999) / 1000000);
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (real_poll(&p, 1, cap_for_reattach(ms)) < 0 && errno == EINTR && (deadline || !eta_signals_restart()))
            return -1;
    }
}

/* accept() on a listener that cannot accept any more (the PPE went, or it
 * is an orphan in a fork child) and has no kernel half: as a kernel listener
 * nobody connects to. EAGAIN when non-blocking; a blocking accept sleeps
 * until SO_RCVTIMEO (EAGAIN) or a signal (EINTR, or sleeps on when every
 * handler restarts). Never an error an event loop would retry at once. */
static int accept_nothing(struct eta_sock *s)
{
    if (back_on_ppe(s))
        return ACCEPT_AGAIN;
    if (atomic_load(&s->nonblock))
        return fail(EAGAIN);
    uint64_t deadline = deadline_after(s->rcvtimeo_ms);
    for (;;) {
        if (back_on_ppe(s))
            return ACCEPT_AGAIN;
        int ms = -1;
        if (deadline) {
            uint64_t now = eta_now_ns();
            if (now >= deadline)
                return fail(EAGAIN);
            ms = (int)((deadline - now + 999999) / 1000000);
        }
        if (real_poll(NULL, 0, cap_for_reattach(ms)) < 0 && errno == EINTR && (deadline || !eta_signals_restart()))
            return -1;
    }
}

static int accept_once(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return real_accept4(fd, addr, len, flags);
    if (atomic_load(&s->state) != ETA_SOCK_ACCEL || !s->listening) {
        bool kernel = atomic_load(&s->state) != ETA_SOCK_ACCEL;
        eta_obj_put(&s->obj);
        return kernel ? real_accept4(fd, addr, len, flags) : fail(EINVAL);
    }
    if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) {
        eta_obj_put(&s->obj);
        return fail(EINVAL);
    }
    if (eta_hybrid_kernel_only(s)) {
        int k = accept_kernel_half(fd, s, addr, len, flags);
        eta_obj_put(&s->obj);
        return k;
    }
    int err = usable(s, EINVAL);
    dti_ctx_t *c = err ? NULL : eta_ctx();
    if (!c) {
        int k = accept_nothing(s);
        eta_obj_put(&s->obj);
        return k;
    }
    uint64_t deadline = deadline_after(s->rcvtimeo_ms);
    bool turn_kernel = false;
    for (;;) {
        /* Alternate which half goes first so neither starves the other. */
        if (s->hybrid && turn_kernel) {
            int k = real_accept4(fd, addr, len, flags);
            if (k >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                if (k >= 0) {
                    ETA_STAT_ADD(kernel_accepted, 1);
                    eta_count(ETA_R_KERNEL_ADDR, k, "accepted by the kernel half of an INADDR_ANY listener");
                }
                eta_obj_put(&s->obj);
                return k;
            }
        }
        turn_kernel = !turn_kernel;
        dti_sock_t h;
        int rc = take_accepted(c, s, &h);
        if (rc == 0) {
            atomic_fetch_add_explicit(&s->rx_taken, 1, memory_order_relaxed);
            int nfd = install_accepted(c, h, addr, len, flags, s->v6);
            eta_obj_put(&s->obj);
            return nfd;
        }
        if (rc != -EAGAIN && !eta_engine_check(dti_ctx_owner(c))) {
            int k = s->hybrid ? accept_kernel_half(fd, s, addr, len, flags) : accept_nothing(s);
            eta_obj_put(&s->obj);
            return k;
        }
        if (rc != -EAGAIN) {
            eta_obj_put(&s->obj);
            return fail(eta_errno_from_dti(rc));
        }
        if (s->hybrid && turn_kernel)
            continue; /* the kernel half has not been tried in this round */
        if (atomic_load(&s->nonblock)) {
            eta_obj_put(&s->obj);
            return fail(EAGAIN);
        }
        eta_watch(c, s, DTI_POLLIN);
        int w = eta_wait(c, accept_ready, s, deadline, s->hybrid ? fd : -1);
        if (w == -EPIPE && s->hybrid) {
            int k = accept_kernel_half(fd, s, addr, len, flags);
            eta_obj_put(&s->obj);
            return k;
        }
        if (w == -EPIPE) { /* the PPE went while we waited */
            int k = accept_nothing(s);
            eta_obj_put(&s->obj);
            return k;
        }
        if (w == -ETIMEDOUT || w == -EINTR) {
            eta_obj_put(&s->obj);
            return fail(w == -ETIMEDOUT ? EAGAIN : EINTR);
        }
    }
}

/* A blocking accept that slept across a PPE restart starts over on the new
 * PPE (the listener was made again there). */
static int do_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    int k;
    while ((k = accept_once(fd, addr, len, flags)) == ACCEPT_AGAIN)
        ;
    return k;
}

ETA_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
    return do_accept(fd, ETA_SA(addr), len, 0);
}

ETA_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
    return do_accept(fd, ETA_SA(addr), len, flags);
}

/* ---- connect ----------------------------------------------------------- */

/* The engine updates the shared state after it takes the command, so
 * "not connecting yet" is not an outcome: only connected, failed, reset or
 * an error are. */
static bool connect_settled(const struct dti_sock_info *ss)
{
    return (ss->state & (DTI_STATE_CONNECTED | DTI_STATE_FAILED | DTI_STATE_RESET)) || ss->error;
}

static bool connect_done(void *arg)
{
    struct eta_sock *s = arg;
    dti_ctx_t *c = eta_ctx();
    struct dti_sock_info ss;
    if (!c || dti_sock_status(c, s->h, &ss) != 0)
        return true;
    return connect_settled(&ss);
}

/* The outcome of a connect: 0, EINPROGRESS, or an errno value. */
static int connect_result(dti_ctx_t *c, struct eta_sock *s)
{
    struct dti_sock_info ss;
    int rc = dti_sock_status(c, s->h, &ss);
    if (rc < 0)
        return eta_errno_from_dti(rc);
    if (!connect_settled(&ss))
        return dti_engine_alive(dti_ctx_owner(c)) ? EINPROGRESS : ECONNREFUSED;
    if ((ss.state & DTI_STATE_CONNECTED) && !ss.error)
        return 0;
    int e = dti_sock_take_error(c, s->h);
    return e < 0 ? -e : e > 0 ? e : ECONNREFUSED;
}

ETA_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr_arg, socklen_t len)
{
    const struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return real_connect(fd, addr, len);
    uint32_t st = atomic_load(&s->state);
    char buf[32];
    if (st == ETA_SOCK_KERNEL) {
        eta_obj_put(&s->obj);
        return real_connect(fd, addr, len);
    }
    dti_ctx_t *c = NULL;
    if (st == ETA_SOCK_CANDIDATE) {
        enum eta_reason r = s->v6 ? ETA_R_INET6 : eta_decide_connect(&eta_net, addr, len);
        if (r != ETA_R_NONE) {
            to_kernel(fd, s, r, r == ETA_R_NOT_INET || r == ETA_R_INET6 ? "connect" : fmt_addr(addr, buf, sizeof buf));
            eta_obj_put(&s->obj);
            return real_connect(fd, addr, len);
        }
        c = eta_ctx();
        int err = c ? make_accel(c, fd, s) : ENETDOWN;
        if (err) {
            to_kernel(fd, s, ETA_R_PPE_REFUSED, strerror(err));
            eta_obj_put(&s->obj);
            return real_connect(fd, addr, len); /* counted; the kernel cannot route it either */
        }
        if (s->bound_kernel && s->kernel_port) {
            struct dti_addr local = {0, s->kernel_port};
            int rc = dti_bind(c, s->h, &local);
            if (rc < 0) {
                eta_obj_put(&s->obj);
                return fail(eta_errno_from_dti(rc));
            }
        }
        eta_count(ETA_R_NONE, fd, fmt_addr(addr, buf, sizeof buf));
    } else {
        int err = usable(s, EBADF);
        if (err || !(c = eta_ctx())) {
            eta_obj_put(&s->obj);
            return fail(err ? err : ENETDOWN);
        }
        if (s->listening) {
            eta_obj_put(&s->obj);
            return fail(EISCONN);
        }
        if (s->connect_started) {
            int res = connect_result(c, s);
            eta_obj_put(&s->obj);
            if (res == EINPROGRESS)
                return fail(EALREADY);
            if (res == 0)
                return fail(EISCONN);
            if (!s->connect_reported) {
                s->connect_reported = true;
                return fail(res);
            }
            return fail(ECONNABORTED);
        }
    }
    if (!addr || len < (socklen_t)sizeof(struct sockaddr_in) || addr->sa_family != AF_INET) {
        eta_obj_put(&s->obj);
        return fail(addr && addr->sa_family != AF_INET ? EAFNOSUPPORT : EINVAL);
    }
    struct dti_addr remote = to_dti(addr);
    int rc = dti_prep_connect(c, s->h, &remote, 0);
    if (rc == -EAGAIN) {
        eta_pump(c);
        rc = dti_prep_connect(c, s->h, &remote, 0);
    }
    if (rc == 0)
        rc = dti_submit(c) < 0 ? -ECONNREFUSED : 0;
    if (rc < 0) {
        eta_obj_put(&s->obj);
        return fail(eta_errno_from_dti(rc));
    }
    s->connect_started = true;
    eta_epoll_touch(s); /* no longer a fresh socket's POLLOUT | POLLHUP */
    if (atomic_load(&s->nonblock)) {
        eta_obj_put(&s->obj);
        return fail(EINPROGRESS);
    }
    eta_watch(c, s, DTI_POLLOUT);
    int w = eta_wait(c, connect_done, s, deadline_after(s->sndtimeo_ms), -1);
    if (w == -ETIMEDOUT || w == -EINTR) {
        eta_obj_put(&s->obj); /* the connection goes on in the background, as in the kernel */
        return fail(w == -ETIMEDOUT ? EINPROGRESS : EINTR);
    }
    int res = connect_result(c, s);
    s->connect_reported = true;
    eta_obj_put(&s->obj);
    return res ? fail(res) : 0;
}

/* ---- close, shutdown, dup ---------------------------------------------- */

void eta_sock_release(struct eta_sock *s)
{
    uint32_t st0 = atomic_load(&s->state);
    if (st0 == ETA_SOCK_ORPHAN || (st0 == ETA_SOCK_ACCEL && s->generation != eta_generation)) {
        /* Of a PPE that went (or a parent's): nothing to tell the PPE, but
         * epoll sets must not keep a pointer to an object about to be freed. */
        eta_epoll_forget_fd(-1, s);
        if (st0 == ETA_SOCK_ACCEL)
            ETA_STAT_ADD(accel_open, (uint64_t)-1);
        return;
    }
    if (st0 != ETA_SOCK_ACCEL)
        return;
    eta_epoll_forget_fd(-1, s);
    eta_hmap_del(s->h);
    ETA_STAT_ADD(accel_open, (uint64_t)-1);
    dti_ctx_t *c = eta_ctx();
    if (!c)
        return;
    /* SO_LINGER {1, 0} means reset, as in the kernel. */
    struct stash *st = stash_of(s);
    stash_lock(st);
    for (unsigned i = 0; i + 1 < st->n;) {
        if (st->h[i] == s->h) {
            dti_prep_abort(c, st->h[i + 1], 0);
            memmove(&st->h[i], &st->h[i + 2], (st->n - i - 2) * sizeof st->h[0]);
            st->n -= 2;
        } else {
            i += 2;
        }
    }
    stash_unlock(st);
    int rc = dti_prep_close(c, s->h, 0);
    if (rc == -EAGAIN) {
        eta_pump(c);
        rc = dti_prep_close(c, s->h, 0);
    }
    dti_submit(c);
}

ETA_EXPORT int close(int fd)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (!o)
        return real_close(fd);
    if (o->kind == ETA_OBJ_INTERNAL)
        return fail(EBADF); /* libdti's, not the program's */
    if (eta_vfork_child()) {
        eta_vfork_note(fd, -1); /* the parent's map and sockets stay the parent's */
        return real_close(fd);
    }
    /* Forget it before the kernel frees the number for reuse. */
    eta_fd_clear(fd);
    return real_close(fd);
}

ETA_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    if (atomic_load(&eta_tracked) == 0 || (flags & CLOSE_RANGE_CLOEXEC))
        return real_close_range(first, last, flags);
    /* Close around libdti's descriptors, and forget the shim's entries
     * (not in a vfork child: they are its parent's). */
    const bool vfork_child = eta_vfork_child();
    unsigned hi = last < ETA_FD_MAX - 1 ? last : ETA_FD_MAX - 1;
    unsigned from = first;
    for (unsigned fd = first; fd <= hi && fd >= first; fd++) {
        struct eta_obj *o = eta_fd_peek((int)fd);
        if (o && o->kind == ETA_OBJ_INTERNAL) {
            if (fd > from && real_close_range(from, fd - 1, flags) != 0)
                return -1;
            from = fd + 1;
        } else if (o && !vfork_child) {
            eta_fd_clear((int)fd);
        }
        if (fd == UINT32_MAX)
            break;
    }
    if (from > last)
        return 0;
    return real_close_range(from, last, flags);
}

ETA_EXPORT int shutdown(int fd, int how)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (!s)
        return real_shutdown(fd, how);
    if (atomic_load(&s->state) != ETA_SOCK_ACCEL) {
        eta_obj_put(&s->obj);
        return real_shutdown(fd, how);
    }
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
        eta_obj_put(&s->obj);
        return fail(EINVAL);
    }
    int err = usable(s, ENOTCONN);
    dti_ctx_t *c = err ? NULL : eta_ctx();
    if (!c) {
        eta_obj_put(&s->obj);
        return fail(err ? err : ENOTCONN);
    }
    if (s->hybrid)
        real_shutdown(fd, how);
    struct dti_sock_info ss;
    if (!s->listening && (dti_sock_status(c, s->h, &ss) != 0 ||
                          !(ss.state & (DTI_STATE_CONNECTED | DTI_STATE_CONNECTING)))) {
        eta_obj_put(&s->obj);
        return fail(ENOTCONN);
    }
    if (how != SHUT_WR)
        atomic_store(&s->shut_rd, true);
    if (how != SHUT_RD)
        atomic_store(&s->shut_wr, true);
    eta_epoll_touch(s);
    int rc = dti_shutdown(c, s->h, how);
    eta_obj_put(&s->obj);
    return rc < 0 && rc != -ENOTCONN ? fail(eta_errno_from_dti(rc)) : 0;
}

/* A new descriptor names the same object as the old one. */
static int dup_result(int oldfd, int newfd)
{
    if (newfd >= 0 && atomic_load(&eta_tracked) && eta_vfork_child()) {
        eta_vfork_note(newfd, oldfd); /* the map is its parent's */
        return newfd;
    }
    if (newfd < 0)
        return newfd;
    struct eta_obj *o = eta_fd_get(oldfd);
    if (o) {
        if (o->kind != ETA_OBJ_INTERNAL)
            eta_fd_set(newfd, o);
        eta_obj_put(o);
    } else {
        eta_fd_clear(newfd);
    }
    return newfd;
}

static bool is_internal(int fd)
{
    struct eta_obj *o = eta_fd_peek(fd);
    return o && o->kind == ETA_OBJ_INTERNAL;
}

ETA_EXPORT int dup(int fd)
{
    return dup_result(fd, real_dup(fd));
}

ETA_EXPORT int dup2(int fd, int newfd)
{
    if (fd == newfd)
        return real_dup2(fd, newfd);
    if (is_internal(newfd))
        return fail(EBUSY);
    return dup_result(fd, real_dup2(fd, newfd));
}

ETA_EXPORT int dup3(int fd, int newfd, int flags)
{
    if (is_internal(newfd) && fd != newfd)
        return fail(EBUSY);
    return dup_result(fd, real_dup3(fd, newfd, flags));
}

/* ---- fcntl, ioctl ------------------------------------------------------ */

static int fcntl_impl(int fd, int cmd, long arg)
{
    if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
        return dup_result(fd, real_fcntl(fd, cmd, arg));
    if (cmd != F_GETFL && cmd != F_SETFL)
        return real_fcntl(fd, cmd, arg);
    struct eta_sock *s = eta_sock_get(fd);
    if (!s || atomic_load(&s->state) != ETA_SOCK_ACCEL) {
        if (s)
            eta_obj_put(&s->obj);
        return real_fcntl(fd, cmd, arg);
    }
    int rc;
    if (cmd == F_GETFL) {
        rc = real_fcntl(fd, F_GETFL);
        if (rc >= 0)
            rc = (rc & ~O_NONBLOCK) | (atomic_load(&s->nonblock) ? O_NONBLOCK : 0);
    } else {
        rc = real_fcntl(fd, F_SETFL, s->hybrid ? (arg | O_NONBLOCK) : arg);
        if (rc == 0)
            atomic_store(&s->nonblock, (arg & O_NONBLOCK) != 0);
    }
    eta_obj_put(&s->obj);
    return rc;
}

/* fcntl's third argument is an int or a pointer; both fit a long on the
 * ABIs eta supports, and the kernel reads it as such. Programs built with
 * _FILE_OFFSET_BITS=64 call fcntl64, the others fcntl: both are exported,
 * under explicit names because the headers rename one to the other. */
ETA_EXPORT int eta_fcntl_export(int fd, int cmd, ...) __asm__("fcntl");
ETA_EXPORT int eta_fcntl_export(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return fcntl_impl(fd, cmd, arg);
}

ETA_EXPORT int eta_fcntl64_export(int fd, int cmd, ...) __asm__("fcntl64");
ETA_EXPORT int eta_fcntl64_export(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return fcntl_impl(fd, cmd, arg);
}

ETA_EXPORT int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (req != FIONBIO && req != FIONREAD)
        return real_ioctl(fd, req, arg);
    struct eta_sock *s = eta_sock_get(fd);
    if (!s || atomic_load(&s->state) != ETA_SOCK_ACCEL) {
        if (s)
            eta_obj_put(&s->obj);
        return real_ioctl(fd, req, arg);
    }
    int rc = 0;
    if (!arg) {
        rc = fail(EFAULT);
    } else if (req == FIONBIO) {
        int on;
        memcpy(&on, arg, sizeof on);
        if (s->hybrid)
            real_ioctl(fd, FIONBIO, arg);
        atomic_store(&s->nonblock, on != 0);
    } else if (s->listening) {
        rc = fail(EINVAL);
    } else {
        dti_ctx_t *c = usable(s, 0) ? NULL : eta_ctx();
        struct dti_sock_info ss = {0};
        if (c)
            dti_sock_status(c, s->h, &ss);
        int n = (int)ss.readable;
        memcpy(arg, &n, sizeof n);
    }
    eta_obj_put(&s->obj);
    return rc;
}

/* ---- names ------------------------------------------------------------- */

ETA_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr_arg, socklen_t *len)
{
    struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sock *s = eta_sock_get(fd);
    if (!s || atomic_load(&s->state) != ETA_SOCK_ACCEL || s->hybrid) {
        if (s)
            eta_obj_put(&s->obj);
        return real_getsockname(fd, addr, len);
    }
    if (!addr || !len) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    struct dti_addr a = s->local;
    dti_ctx_t *c = usable(s, 0) ? NULL : eta_ctx();
    if (c)
        dti_getsockname(c, s->h, &a);
    from_dti(&a, addr, len, s->v6);
    eta_obj_put(&s->obj);
    return 0;
}

ETA_EXPORT int getpeername(int fd, __SOCKADDR_ARG addr_arg, socklen_t *len)
{
    struct sockaddr *addr = ETA_SA(addr_arg);
    struct eta_sock *s = eta_sock_get(fd);
    if (!s || atomic_load(&s->state) != ETA_SOCK_ACCEL) {
        if (s)
            eta_obj_put(&s->obj);
        return real_getpeername(fd, addr, len);
    }
    if (!addr || !len) {
        eta_obj_put(&s->obj);
        return fail(EFAULT);
    }
    dti_ctx_t *c = usable(s, 0) ? NULL : eta_ctx();
    struct dti_addr a;
    int rc = c ? dti_getpeername(c, s->h, &a) : -ENOTCONN;
    bool v6 = s->v6;
    eta_obj_put(&s->obj);
    if (rc < 0)
        return fail(ENOTCONN);
    from_dti(&a, addr, len, v6);
    return 0;
}

/* ---- options ----------------------------------------------------------- */

/* The DTI option for a (level, name) the PPE honours, 0 when none. */
static int dti_option(int level, int name)
{
    if (level == SOL_SOCKET) {
        switch (name) {
        case SO_REUSEADDR: return DTI_SO_REUSEADDR;
        case SO_REUSEPORT: return DTI_SO_REUSEPORT;
        case SO_KEEPALIVE: return DTI_SO_KEEPALIVE;
        case SO_RCVLOWAT: return DTI_SO_RCVLOWAT;
        default: return 0;
        }
    }
    if (level == IPPROTO_TCP) {
        switch (name) {
        case TCP_NODELAY: return DTI_SO_NODELAY;
        case TCP_CORK: return DTI_SO_CORK;
        case TCP_KEEPIDLE: return DTI_SO_KEEPIDLE;
        case TCP_KEEPINTVL: return DTI_SO_KEEPINTVL;
        case TCP_KEEPCNT: return DTI_SO_KEEPCNT;
        case TCP_MAXSEG: return DTI_SO_MAXSEG;
        case TCP_USER_TIMEOUT: return DTI_SO_USER_TIMEOUT;
        default: return 0;
        }
    }
    if (level == IPPROTO_IP && name == IP_TOS)
        return DTI_SO_TOS;
    return 0;
}

/* Options that change nothing the program can observe through the PPE and
 * are accepted as the kernel would (recorded on the kernel socket). */
static bool harmless_option(int level, int name)
{
    if (level == SOL_SOCKET)
        return name == SO_RCVBUF || name == SO_SNDBUF || name == SO_RCVTIMEO || name == SO_SNDTIMEO ||
               name == SO_LINGER || name == SO_PRIORITY || name == SO_OOBINLINE;
    if (level == IPPROTO_TCP)
        return name == TCP_QUICKACK || name == TCP_DEFER_ACCEPT || name == TCP_CONGESTION ||
               name == TCP_NOTSENT_LOWAT;
    if (level == IPPROTO_IPV6) /* an accepted IPv4 connection of a dual-stack listener */
        return name == IPV6_V6ONLY || name == IPV6_TCLASS;
    return false;
}

static int timeo_ms(const void *val, socklen_t len)
{
    struct timeval tv;
    if (len < (socklen_t)sizeof tv)
        return -1;
    memcpy(&tv, val, sizeof tv);
    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        return -1;
    return (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
}

ETA_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (!s || atomic_load(&s->state) != ETA_SOCK_ACCEL) {
        if (s)
            eta_obj_put(&s->obj);
        return real_setsockopt(fd, level, name, val, len);
    }
    int opt = dti_option(level, name);
    if (!opt && !harmless_option(level, name)) {
        eta_obj_put(&s->obj);
        return fail(ENOPROTOOPT); /* never a silent no-op */
    }
    /* The kernel validates the value and keeps it for getsockopt. Some it
     * refuses on an unconnected socket (TCP_MAXSEG below 88, for one): its
     * answer is the one the program would have had. */
    int rc = real_setsockopt(fd, level, name, val, len);
    if (rc != 0) {
        eta_obj_put(&s->obj);
        return rc;
    }
    if (level == SOL_SOCKET && name == SO_RCVTIMEO)
        s->rcvtimeo_ms = timeo_ms(val, len);
    if (level == SOL_SOCKET && name == SO_SNDTIMEO)
        s->sndtimeo_ms = timeo_ms(val, len);
    int64_t v = 0;
    if (level == SOL_SOCKET && name == SO_LINGER) {
        struct linger lg;
        memcpy(&lg, val, sizeof lg);
        opt = DTI_SO_LINGER;
        v = lg.l_onoff ? lg.l_linger : -1;
    } else if (opt) {
        int iv = 0;
        memcpy(&iv, val, len < sizeof iv ? len : sizeof iv);
        v = iv;
    }
    dti_ctx_t *c = opt && !usable(s, 0) ? eta_ctx() : NULL;
    if (c) {
        int r = dti_setsockopt(c, s->h, opt, v);
        if (r < 0 && r != -ENOTCONN) {
            eta_obj_put(&s->obj);
            return fail(eta_errno_from_dti(r));
        }
    }
    eta_obj_put(&s->obj);
    return 0;
}

static int put_int(void *val, socklen_t *len, int v)
{
    if (!val || !len || *len < (socklen_t)sizeof(int))
        return fail(EINVAL);
    memcpy(val, &v, sizeof v);
    *len = sizeof v;
    return 0;
}

ETA_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (!s || atomic_load(&s->state) != ETA_SOCK_ACCEL) {
        if (s)
            eta_obj_put(&s->obj);
        return real_getsockopt(fd, level, name, val, len);
    }
    int rc;
    dti_ctx_t *c = usable(s, 0) ? NULL : eta_ctx();
    if (level == SOL_SOCKET && name == SO_ERROR) {
        int e = atomic_exchange(&s->pending_error, 0);
        if (!e && c && s->connect_started && !s->connect_reported) {
            int res = connect_result(c, s);
            if (res != EINPROGRESS) {
                s->connect_reported = true;
                e = res;
            }
        } else if (!e && c) {
            int r = dti_sock_take_error(c, s->h);
            e = r < 0 ? -r : 0;
        } else if (!c && !e) {
            e = ECONNRESET;
        }
        rc = put_int(val, len, e);
    } else if (level == SOL_SOCKET && name == SO_ACCEPTCONN) {
        rc = put_int(val, len, s->listening);
    } else if (level == SOL_SOCKET && (name == SO_RCVBUF || name == SO_SNDBUF) && !s->hybrid) {
        struct dti_limits lim = {0};
        if (c)
            dti_get_limits(dti_ctx_owner(c), &lim);
        rc = put_int(val, len, (int)(name == SO_RCVBUF ? lim.rx_ring_size : lim.tx_ring_size));
    } else if (level == IPPROTO_TCP && name == TCP_MAXSEG && c) {
        int64_t v = 0;
        int r = dti_getsockopt(c, s->h, DTI_SO_MAXSEG, &v);
        rc = r < 0 ? real_getsockopt(fd, level, name, val, len) : put_int(val, len, (int)v);
    } else if (level == IPPROTO_TCP && name == TCP_INFO) {
        /* The kernel's placeholder knows nothing of the connection: report
         * its state from the PPE and zeros for what eta does not export. */
        struct tcp_info ti;
        memset(&ti, 0, sizeof ti);
        struct dti_sock_info ss = {0};
        if (c)
            dti_sock_status(c, s->h, &ss);
        ti.tcpi_state = s->listening ? TCP_LISTEN
                        : (ss.state & DTI_STATE_CONNECTED) ? ((ss.state & DTI_STATE_RD_CLOSED) ? TCP_CLOSE_WAIT : TCP_ESTABLISHED)
                        : (ss.state & DTI_STATE_CONNECTING) ? TCP_SYN_SENT : TCP_CLOSE;
        if (!val || !len) {
            rc = fail(EFAULT);
        } else {
            socklen_t n = *len < (socklen_t)sizeof ti ? *len : (socklen_t)sizeof ti;
            memcpy(val, &ti, (size_t)n);
            *len = n;
            rc = 0;
        }
    } else if (dti_option(level, name) || harmless_option(level, name) ||
               (level == SOL_SOCKET && (name == SO_TYPE || name == SO_DOMAIN || name == SO_PROTOCOL))) {
        rc = real_getsockopt(fd, level, name, val, len); /* the kernel keeps what was set */
    } else {
        rc = fail(ENOPROTOOPT);
    }
    eta_obj_put(&s->obj);
    return rc;
}
