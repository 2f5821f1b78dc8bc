/* Socket calls: options (setsockopt, getsockopt, and those carried to the
 * PPE when a socket is accelerated), fcntl, ioctl, getsockname and
 * getpeername. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include <arpa/inet.h>

#include "attach.h"
#include "fdtable.h"
#include "real.h"
#include "shim.h"
#include "sock.h"
#include "sock6.h"
#include "udp6.h"
#include "sockobj.h"
#include "ucopy.h"
#include "udp.h"
#include "mcast_req.h"
#include "udp_mcast.h"

/* Options carried to the PPE when a socket is accelerated; the index is the
 * option's ETA_OPT_* bit. */
static const struct {
    int level, name, dti;
    int dflt;
} carried[] = {
    {SOL_SOCKET, SO_REUSEADDR, DTI_SO_REUSEADDR, 0}, {SOL_SOCKET, SO_REUSEPORT, DTI_SO_REUSEPORT, 0},
    {SOL_SOCKET, SO_KEEPALIVE, DTI_SO_KEEPALIVE, 0}, {IPPROTO_TCP, TCP_NODELAY, DTI_SO_NODELAY, 0},
    {IPPROTO_TCP, TCP_CORK, DTI_SO_CORK, 0},         {IPPROTO_IP, IP_TOS, DTI_SO_TOS, 0},
    {SOL_SOCKET, SO_RCVLOWAT, DTI_SO_RCVLOWAT, 1},   {IPPROTO_TCP, TCP_USER_TIMEOUT, DTI_SO_USER_TIMEOUT, 0},
    {IPPROTO_IPV6, IPV6_TCLASS, DTI_SO_TCLASS, 0}, /* read back only from an AF_INET6 socket (set on one only) */
};
_Static_assert(sizeof carried / sizeof carried[0] <= 9, "ETA_OPT_KEEPALIVE_TUNING is the next bit (sockobj.h)");
enum { CARRIED_KEEPALIVE = 2 }; /* its index in carried[] */

uint32_t eta_opt_bit(int level, int name)
{
    for (size_t i = 0; i < sizeof carried / sizeof carried[0]; i++)
        if (carried[i].level == level && carried[i].name == name)
            return 1u << i;
    if (level == IPPROTO_TCP && (name == TCP_KEEPIDLE || name == TCP_KEEPINTVL || name == TCP_KEEPCNT))
        return ETA_OPT_KEEPALIVE_TUNING;
    if (level == SOL_SOCKET && name == SO_LINGER)
        return ETA_OPT_LINGER;
    if (level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO))
        return ETA_OPT_TIMEOUTS;
    if (level == SOL_SOCKET && name == SO_RCVBUF)
        return ETA_OPT_RCVBUF;
    if (level == SOL_SOCKET && (name == SO_SNDBUF || name == SO_SNDBUFFORCE))
        return ETA_OPT_SNDBUF;
    if (level == IPPROTO_TCP && name == TCP_MAXSEG)
        return ETA_OPT_MAXSEG;
    if (level == IPPROTO_TCP && name == TCP_NOTSENT_LOWAT)
        return ETA_OPT_NOTSENT_LOWAT;
    if (eta_udp_engine_option(level, name))
        return ETA_OPT_UDP;
    return 0;
}

/* net.ipv4.tcp_notsent_lowat of the program's network namespace (what
 * /proc/sys shows it), UINT32_MAX (no limit, the kernel's default) when it
 * cannot be read. Read each time a socket goes to the PPE or sets 0: Linux
 * reads the namespace's value whenever a socket without its own asks
 * (tcp_notsent_lowat()). Raw calls: the shim's own open/read must not come
 * back into the shim. */
static uint32_t notsent_lowat_default(void)
{
    char buf[24];
    long fd = eta_raw_syscall(SYS_openat, AT_FDCWD, "/proc/sys/net/ipv4/tcp_notsent_lowat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return UINT32_MAX;
    long n = eta_raw_syscall(SYS_read, fd, buf, sizeof buf - 1);
    eta_raw_syscall(SYS_close, fd);
    if (n <= 0)
        return UINT32_MAX;
    buf[n] = 0;
    char *end = NULL;
    unsigned long long v = strtoull(buf, &end, 10);
    return end == buf || v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* The TCP_NOTSENT_LOWAT the PPE applies for a value the program set (an int,
 * as the kernel stores it: a negative one is a huge unsigned, no limit): its
 * own, or for 0 the namespace's default. */
static uint32_t notsent_lowat_of(int set_value)
{
    return set_value != 0 ? (uint32_t)set_value : notsent_lowat_default();
}

/* SO_RCVBUF as the program set it: the kernel keeps twice the value (capped
 * by net.core.rmem_max), as it reports it. */
static int64_t rcvbuf_set(int kernel_value) { return kernel_value / 2; }

/* Options the program set on the kernel socket before it was accelerated
 * are carried over (read back from the kernel, which validated them); only
 * those it set (s->opts_set) are read. */
void eta_carry_options(dti_ctx_t *c, int fd, struct eta_sock *s)
{
    const uint32_t set = atomic_load(&s->opts_set);
    /* TCP_NOTSENT_LOWAT: the socket's own value, else its namespace's
     * default (net.ipv4.tcp_notsent_lowat); "no limit" is the PPE's default. */
    int own = 0;
    socklen_t ol = sizeof own;
    if (!(set & ETA_OPT_NOTSENT_LOWAT) || real_getsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &own, &ol) != 0)
        own = 0;
    const uint32_t lowat = s->dgram ? UINT32_MAX : notsent_lowat_of(own);
    if (lowat != UINT32_MAX)
        dti_prep_setsockopt(c, s->h, DTI_SO_NOTSENT_LOWAT, lowat, 0);
    if (!set) {
        if (lowat != UINT32_MAX)
            dti_submit(c);
        return;
    }
    for (size_t i = 0; i < sizeof carried / sizeof carried[0]; i++) {
        int v = 0;
        socklen_t l = sizeof v;
        if ((set & (1u << i)) && real_getsockopt(fd, carried[i].level, carried[i].name, &v, &l) == 0 &&
            v != carried[i].dflt)
            dti_prep_setsockopt(c, s->h, carried[i].dti, v, 0);
    }
    int keep = 0;
    socklen_t l = sizeof keep;
    if ((set & ((1u << CARRIED_KEEPALIVE) | ETA_OPT_KEEPALIVE_TUNING)) &&
        real_getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &keep, &l) == 0 && keep) {
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
    if ((set & ETA_OPT_LINGER) && real_getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &l) == 0 && lg.l_onoff)
        dti_prep_setsockopt(c, s->h, DTI_SO_LINGER, lg.l_linger, 0);
    /* Only a size the program chose fixes the buffer: an unknown history
     * (ETA_OPT_ALL) would read the kernel's default and stop autotuning. */
    int rb = 0;
    l = sizeof rb;
    if (set != ETA_OPT_ALL && (set & ETA_OPT_RCVBUF) && real_getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rb, &l) == 0)
        dti_prep_setsockopt(c, s->h, DTI_SO_RCVBUF, rcvbuf_set(rb), 0);
    /* SO_SNDBUF: what the kernel keeps (twice the value, clamped by the
     * namespace's net.core.wmem_max unless SO_SNDBUFFORCE), the send buffer
     * Linux would have: it sizes the send ring the connection gets. */
    int sb = 0;
    l = sizeof sb;
    if (set != ETA_OPT_ALL && (set & ETA_OPT_SNDBUF) && real_getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, &l) == 0)
        dti_prep_setsockopt(c, s->h, DTI_SO_SNDBUF, sb, 0);
    /* TCP_MAXSEG: the SYN's (or a listener's SYN-ACKs') MSS option. The
     * kernel answers 536 for a socket that never set it: an unknown history
     * carries only another value. */
    int mss = 0;
    l = sizeof mss;
    if ((set & ETA_OPT_MAXSEG) && real_getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &l) == 0 && mss > 0 &&
        (set != ETA_OPT_ALL || mss != 536))
        dti_prep_setsockopt(c, s->h, DTI_SO_MAXSEG, mss, 0);
    if (s->dgram && (set & ETA_OPT_UDP))
        eta_udp_carry_options(c, fd, s); /* udp_mcast.c: TTLs, hop limits, the multicast flags */
    dti_submit(c);
}

/* An accepted connection's kernel placeholder is a fresh socket(), not a
 * clone of the listener as the kernel's accept makes: the options the
 * program set on the listener are copied onto it, so getsockopt() on the
 * accepted socket answers what it would on Linux (the PPE's connection
 * inherits them from its listener inside MARS). Costs a getsockopt and a
 * setsockopt per option set on the listener, none for a listener without. */
void eta_inherit_options(int lfd, struct eta_sock *l, int fd, struct eta_sock *n)
{
    n->rcvtimeo_ms = l->rcvtimeo_ms;
    n->sndtimeo_ms = l->sndtimeo_ms;
    /* Linux's accepted socket has its listener's IPV6_V6ONLY; the fresh
     * placeholder has the namespace's default (net.ipv6.bindv6only, 0 unless
     * changed: not set again for a dual-stack listener's, one call less per
     * accept) */
    if (n->v6 && l->v6only) {
        int on = 1;
        real_setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    }
    const uint32_t set = atomic_load(&l->opts_set);
    if (!set)
        return;
    atomic_store(&n->opts_set, set);
    static const struct {
        uint32_t bit;
        int level, name;
    } more[] = {
        {ETA_OPT_KEEPALIVE_TUNING, IPPROTO_TCP, TCP_KEEPIDLE}, {ETA_OPT_KEEPALIVE_TUNING, IPPROTO_TCP, TCP_KEEPINTVL},
        {ETA_OPT_KEEPALIVE_TUNING, IPPROTO_TCP, TCP_KEEPCNT},  {ETA_OPT_LINGER, SOL_SOCKET, SO_LINGER},
        {ETA_OPT_TIMEOUTS, SOL_SOCKET, SO_RCVTIMEO},           {ETA_OPT_TIMEOUTS, SOL_SOCKET, SO_SNDTIMEO},
        {ETA_OPT_RCVBUF, SOL_SOCKET, SO_RCVBUF},               {ETA_OPT_MAXSEG, IPPROTO_TCP, TCP_MAXSEG},
        {ETA_OPT_NOTSENT_LOWAT, IPPROTO_TCP, TCP_NOTSENT_LOWAT}, {ETA_OPT_SNDBUF, SOL_SOCKET, SO_SNDBUF},
    };
    union {
        int i;
        struct linger lg;
        struct timeval tv;
    } v;
    for (size_t i = 0; i < sizeof carried / sizeof carried[0] + sizeof more / sizeof more[0]; i++) {
        const bool first = i < sizeof carried / sizeof carried[0];
        const size_t j = first ? i : i - sizeof carried / sizeof carried[0];
        const uint32_t bit = first ? 1u << i : more[j].bit;
        const int level = first ? carried[j].level : more[j].level, name = first ? carried[j].name : more[j].name;
        socklen_t len = sizeof v;
        if (!(set & bit) || real_getsockopt(lfd, level, name, &v, &len) != 0)
            continue;
        if (level == SOL_SOCKET && (name == SO_RCVBUF || name == SO_SNDBUF))
            v.i = (int)rcvbuf_set(v.i); /* the kernel reports twice what was set */
        /* A listener's SO_SNDBUFFORCE may pass wmem_max: force it again
         * where allowed (root), else the kernel clamps as it would have. */
        if (level == SOL_SOCKET && name == SO_SNDBUF && real_setsockopt(fd, level, SO_SNDBUFFORCE, &v, len) == 0)
            continue;
        real_setsockopt(fd, level, name, &v, len);
    }
}

/* ---- fcntl, ioctl ------------------------------------------------------ */

static int fcntl_impl(int fd, int cmd, long arg)
{
    if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
        return eta_dup_result(fd, real_fcntl(fd, cmd, arg));
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
            rc = (rc & ~(O_NONBLOCK | (s->hybrid ? ETA_HYBRID_NONBLOCK_MARK : 0))) |
                 (atomic_load(&s->nonblock) ? O_NONBLOCK : 0);
    } else {
        rc = real_fcntl(fd, F_SETFL, s->hybrid ? eta_hybrid_file_flags(arg, (arg & O_NONBLOCK) != 0) : arg);
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
    if (req != FIONBIO && req != FIONREAD && req != SIOCOUTQ)
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
        if (s->hybrid) { /* the kernel half stays non-blocking; the program's flag is kept beside it (sockobj.h) */
            int fl = real_fcntl(fd, F_GETFL);
            if (fl >= 0)
                real_fcntl(fd, F_SETFL, eta_hybrid_file_flags(fl, on != 0));
        } else { /* in the file too, as F_SETFL puts it (the placeholder's flags are the file's) */
            (void)real_ioctl(fd, FIONBIO, &on);
        }
        atomic_store(&s->nonblock, on != 0);
    } else if (s->dgram) {
        /* udp(7): FIONREAD (SIOCINQ) the size of the next datagram, 0 when
         * none waits; SIOCOUTQ 0: a send returns once the engine sent it. */
        int n = req == FIONREAD ? eta_udp_next_len(fd, s) : 0;
        memcpy(arg, &n, sizeof n);
    } else if (req == SIOCOUTQ) {
        rc = real_ioctl(fd, req, arg); /* a stream: the kernel placeholder's, as before */
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
    if (c && s->v6 && (s->dgram ? eta_udp6_sockname(c, s, addr, len) : eta_name6(c, s->h, false, addr, len)) == 0) {
        /* AF_INET6 (sock6.c; UDP: udp6.c) */
        eta_obj_put(&s->obj);
        return 0;
    }
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
    bool v6 = s->v6;
    if (c && v6) { /* AF_INET6: its IPv6 peer, or v4-mapped (sock6.c) */
        int rc6 = eta_name6(c, s->h, true, addr, len);
        eta_obj_put(&s->obj);
        return rc6 < 0 ? fail(ENOTCONN) : 0;
    }
    int rc = c ? dti_getpeername(c, s->h, &a) : -ENOTCONN;
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
        case SO_RCVBUF: return DTI_SO_RCVBUF; /* fixes the buffer, stops autotuning */
        case SO_SNDBUF:
        case SO_SNDBUFFORCE: return DTI_SO_SNDBUF; /* sizes the send ring the connection gets */
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
        case TCP_NOTSENT_LOWAT: return DTI_SO_NOTSENT_LOWAT; /* the kernel keeps the value set for getsockopt */
        default: return 0;
        }
    }
    if (level == IPPROTO_IP && name == IP_TOS)
        return DTI_SO_TOS;
    /* An AF_INET6 socket keeps both: IP_TOS for its IPv4 (v4-mapped)
     * connections, IPV6_TCLASS for its IPv6 ones, as Linux does (MARS holds
     * both and uses the connection's family's). */
    if (level == IPPROTO_IPV6 && name == IPV6_TCLASS)
        return DTI_SO_TCLASS;
    return 0;
}

/* Options that change nothing the program can observe through the PPE and
 * are accepted as the kernel would (recorded on the kernel socket). */
static bool harmless_option(int level, int name)
{
    if (level == SOL_SOCKET)
        return name == SO_RCVBUF || name == SO_SNDBUF || name == SO_SNDBUFFORCE || name == SO_RCVTIMEO || name == SO_SNDTIMEO ||
               name == SO_LINGER || name == SO_PRIORITY || name == SO_OOBINLINE;
    if (level == IPPROTO_TCP)
        return name == TCP_QUICKACK || name == TCP_DEFER_ACCEPT || name == TCP_CONGESTION;
    if (level == IPPROTO_IPV6) /* read back; set: refused once bound (v6only_fixed) */
        return name == IPV6_V6ONLY;
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

/* IPV6_V6ONLY on an AF_INET6 socket the PPE holds (accelerated, or a
 * parent's, orphaned here): it has a port (bound, listening, connected or
 * accepted) and Linux answers EINVAL to a bound socket (ipv6_sockglue.c),
 * the value unchanged: the engine bound it with that value (sock6.c), and
 * the kernel placeholder, unbound, would take any. The order is Linux's: a
 * value it cannot read is EFAULT first. */
static bool v6only_fixed(const struct eta_sock *s, int level, int name)
{
    uint32_t st = atomic_load(&s->state);
    return s->v6 && level == IPPROTO_IPV6 && name == IPV6_V6ONLY && (st == ETA_SOCK_ACCEL || st == ETA_SOCK_ORPHAN);
}

static int v6only_refused(const void *val, socklen_t len)
{
    int v;
    if (val && len >= (socklen_t)sizeof v && eta_ucopy(&v, val, sizeof v) != 0)
        return fail(EFAULT);
    return fail(EINVAL);
}

ETA_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (s && v6only_fixed(s, level, name)) {
        eta_obj_put(&s->obj);
        return v6only_refused(val, len);
    }
    if (s) /* set: read back when it is accelerated, or listens again on a new PPE */
        atomic_fetch_or(&s->opts_set, eta_opt_bit(level, name));
    if (s && s->dgram && eta_udp_cmsg_option(level, name)) {
        /* Ancillary data on receive (IP_PKTINFO, SO_TIMESTAMP...): the
         * kernel keeps the option (and answers getsockopt); the shim reads
         * back what its receives carry (udp.c), candidate or accelerated. */
        int rc = real_setsockopt(fd, level, name, val, len);
        if (rc == 0)
            eta_udp_cmsg_refresh(fd, s);
        eta_obj_put(&s->obj);
        return rc;
    }
    if (s && s->dgram && level == IPPROTO_IP && name == IP_MULTICAST_IF) {
        /* Candidate or accelerated: naming the PPE's port sends to groups
         * through the engine (udp_mcast.c). */
        int r = eta_udp_mcast_if(fd, s, val, len);
        eta_obj_put(&s->obj);
        return r;
    }
    if (!s || atomic_load(&s->state) != ETA_SOCK_ACCEL) {
        if (s)
            eta_obj_put(&s->obj);
        return real_setsockopt(fd, level, name, val, len);
    }
    if (s->dgram && eta_udp_engine_option(level, name)) {
        int r = eta_udp_engine_set(fd, s, level, name, val, len);
        eta_obj_put(&s->obj);
        return r;
    }
    if (s->dgram && eta_udp_kernel_option(level, name, s->hybrid)) {
        int r = real_setsockopt(fd, level, name, val, len);
        eta_obj_put(&s->obj);
        return r;
    }
    if (s->dgram && (eta_mcast_membership_option(level, name) || eta_mcast_filter_option(level, name))) {
        /* Multicast (udp_mcast.c): memberships the engine's and the kernel
         * half's by the interface they name; exclude-mode source filters
         * are not carried (never a silent no-op). */
        int r = eta_mcast_membership_option(level, name) ? eta_udp_membership(fd, s, level, name, val, len)
                                                         : fail(EOPNOTSUPP);
        eta_obj_put(&s->obj);
        return r;
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
    } else if (opt == DTI_SO_RCVBUF) {
        int kv = 0; /* what the kernel made of it (clamped to rmem_max) */
        socklen_t kl = sizeof kv;
        v = real_getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kv, &kl) == 0 ? rcvbuf_set(kv) : 0;
    } else if (opt == DTI_SO_SNDBUF) {
        int kv = 0; /* the kernel's sk_sndbuf: doubled, clamped to wmem_max (not with FORCE) */
        socklen_t kl = sizeof kv;
        v = real_getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kv, &kl) == 0 ? kv : 0;
        if (v <= 0)
            opt = 0;
    } else if (opt == DTI_SO_NOTSENT_LOWAT) {
        int iv = 0;
        memcpy(&iv, val, len < sizeof iv ? len : sizeof iv);
        v = notsent_lowat_of(iv);
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
    if (!val || !len)
        return fail(EFAULT); /* the kernel's answer to a pointer it cannot write */
    if (*len < (socklen_t)sizeof(int))
        return fail(EINVAL);
    memcpy(val, &v, sizeof v);
    *len = sizeof v;
    return 0;
}

ETA_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    struct eta_sock *s = eta_sock_get(fd);
    if (s && s->dgram && s->mc_if4_ours && level == IPPROTO_IP && name == IP_MULTICAST_IF) {
        int r = eta_udp_mcast_if_get(s, val, len); /* the PPE's address, which the kernel socket could not take */
        eta_obj_put(&s->obj);
        return r;
    }
    if (s && s->v6only_read0 && level == IPPROTO_IPV6 && name == IPV6_V6ONLY) {
        /* A connect's hold made the placeholder IPv6-only (own_address.c):
         * the kernel's checks of the pointers and the length, then 0, the
         * value the program had, as Linux's autobind keeps it. */
        int r = real_getsockopt(fd, level, name, val, len);
        eta_obj_put(&s->obj);
        socklen_t n = 0;
        const int zero = 0;
        if (r == 0 && eta_ucopy(&n, len, sizeof n) == 0 && n > 0 && n <= (socklen_t)sizeof zero)
            (void)eta_ucopy(val, &zero, (size_t)n);
        return r;
    }
    /* UDP's ancillary-data options: the kernel socket keeps them (setsockopt) */
    if (!s || atomic_load(&s->state) != ETA_SOCK_ACCEL || (s->dgram && eta_udp_cmsg_option(level, name))) {
        if (s)
            eta_obj_put(&s->obj);
        return real_getsockopt(fd, level, name, val, len);
    }
    int rc;
    dti_ctx_t *c = usable(s, 0) ? NULL : eta_ctx();
    if (level == SOL_SOCKET && name == SO_ERROR) {
        int e = atomic_exchange(&s->pending_error, 0);
        if (!e && c && s->connect_started && !s->connect_reported) {
            int res = eta_connect_result(c, s);
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
    } else if (level == SOL_SOCKET && name == SO_RCVBUF && (atomic_load(&s->opts_set) & ETA_OPT_RCVBUF)) {
        rc = real_getsockopt(fd, level, name, val, len); /* set: Linux's answer, twice the value set */
    } else if (level == SOL_SOCKET && name == SO_SNDBUF && (atomic_load(&s->opts_set) & ETA_OPT_SNDBUF)) {
        rc = real_getsockopt(fd, level, name, val, len); /* set: Linux's answer, twice the value set */
    } else if (level == SOL_SOCKET && (name == SO_RCVBUF || name == SO_SNDBUF) && !s->hybrid) {
        int64_t ring = 0; /* the ring's size now (a receive ring grows with autotuning) */
        if (c && dti_getsockopt(c, s->h, name == SO_RCVBUF ? DTI_SO_RCVBUF : DTI_SO_SNDBUF, &ring) < 0)
            ring = 0;
        if (ring <= 0) /* no ring (a listener, before connect): the kernel placeholder's, as Linux */
            rc = real_getsockopt(fd, level, name, val, len);
        else
            rc = put_int(val, len, (int)ring);
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
               (level == SOL_SOCKET && (name == SO_TYPE || name == SO_DOMAIN || name == SO_PROTOCOL)) ||
               (s->dgram && (eta_udp_engine_option(level, name) || eta_udp_kernel_option(level, name, true) ||
                             (level == IPPROTO_IP && name == IP_MULTICAST_IF)))) {
        /* the kernel keeps what was set (IP_MULTICAST_IF: where the kernel
         * socket took it, a shared port's interface; mc_if4_ours above) */
        rc = real_getsockopt(fd, level, name, val, len);
    } else {
        rc = fail(ENOPROTOOPT);
    }
    eta_obj_put(&s->obj);
    return rc;
}
