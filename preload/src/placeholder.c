/* A socket's kernel placeholder replaced by a fresh kernel socket on the same
 * descriptor (issue 29, the reverse v6only case on a shared port). An
 * AF_INET6 TCP socket whose first connect went to an IPv6 address held the
 * kernel's ephemeral port by binding its placeholder to the PPE's IPv6
 * address (own_address.c eta_hold_ephemeral6): the kernel made that socket
 * IPv6-only, and a bound kernel socket can be neither unbound nor bound
 * again. When that connect failed and the next goes to a v4-mapped address
 * (Linux tries it: its autobind fixed neither address nor IPV6_V6ONLY), the
 * port must be held for IPv4 too, which only another kernel socket can: a
 * fresh one takes the old one's place on the program's descriptor (dup3),
 * with what the program set on the old one (descriptor and file flags,
 * socket options), and holds as a first connect does. Not on the packet
 * path: a connect after a refused one, shared port only.
 * preload/README.md "IPv6" (shared port). */
#include "placeholder.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "config.h"
#include "fdtable.h"
#include "own_address.h"
#include "real.h"

#ifndef IPV6_FREEBIND
#define IPV6_FREEBIND 78
#endif
#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

/* The options a program may set on a TCP socket before connect that read
 * back: copied where the old socket's value differs from a fresh one's.
 * Those a kernel refuses (an older one, or a privilege it lacks now) are
 * left as the fresh socket has them. Not readable, so not copied: socket
 * filters (SO_ATTACH_FILTER, SO_ATTACH_BPF), TCP_MD5SIG, TCP_ULP. */
static const struct {
    int level, name;
} copied[] = {
    {SOL_SOCKET, SO_REUSEADDR},       {SOL_SOCKET, SO_REUSEPORT},        {SOL_SOCKET, SO_KEEPALIVE},
    {SOL_SOCKET, SO_RCVLOWAT},        {SOL_SOCKET, SO_PRIORITY},         {SOL_SOCKET, SO_OOBINLINE},
    {SOL_SOCKET, SO_DONTROUTE},       {SOL_SOCKET, SO_MARK},             {SOL_SOCKET, SO_LINGER},
    {SOL_SOCKET, SO_RCVTIMEO},        {SOL_SOCKET, SO_SNDTIMEO},         {SOL_SOCKET, SO_BINDTODEVICE},
    {SOL_SOCKET, SO_BUSY_POLL},       {SOL_SOCKET, SO_ZEROCOPY},         {SOL_SOCKET, SO_TIMESTAMP},
    {IPPROTO_TCP, TCP_NODELAY},       {IPPROTO_TCP, TCP_CORK},           {IPPROTO_TCP, TCP_MAXSEG},
    {IPPROTO_TCP, TCP_KEEPIDLE},      {IPPROTO_TCP, TCP_KEEPINTVL},      {IPPROTO_TCP, TCP_KEEPCNT},
    {IPPROTO_TCP, TCP_USER_TIMEOUT},  {IPPROTO_TCP, TCP_NOTSENT_LOWAT},  {IPPROTO_TCP, TCP_SYNCNT},
    {IPPROTO_TCP, TCP_LINGER2},       {IPPROTO_TCP, TCP_WINDOW_CLAMP},   {IPPROTO_TCP, TCP_CONGESTION},
    {IPPROTO_TCP, TCP_QUICKACK},      {IPPROTO_TCP, TCP_DEFER_ACCEPT},   {IPPROTO_TCP, TCP_FASTOPEN_CONNECT},
    {IPPROTO_TCP, TCP_THIN_LINEAR_TIMEOUTS},
    {IPPROTO_IP, IP_TOS},             {IPPROTO_IP, IP_TTL},              {IPPROTO_IP, IP_FREEBIND},
    {IPPROTO_IP, IP_TRANSPARENT},     {IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT}, {IPPROTO_IP, IP_MTU_DISCOVER},
    {IPPROTO_IP, IP_RECVERR},
    {IPPROTO_IPV6, IPV6_TCLASS},      {IPPROTO_IPV6, IPV6_UNICAST_HOPS}, {IPPROTO_IPV6, IPV6_MTU_DISCOVER},
    {IPPROTO_IPV6, IPV6_RECVERR},     {IPPROTO_IPV6, IPV6_FREEBIND},     {IPPROTO_IPV6, IPV6_TRANSPARENT},
};

/* The buffer sizes: the kernel reports twice what was set (and clamps it by
 * net.core.[rw]mem_max unless forced): set half of what the old one reports,
 * forced where allowed (root), as eta_inherit_options copies a listener's. */
static void copy_buf(int from, int to, int name, int force, bool set_by_program)
{
    int v = 0, f = 0;
    socklen_t l = sizeof v, lf = sizeof f;
    if (real_getsockopt(from, SOL_SOCKET, name, &v, &l) != 0 || real_getsockopt(to, SOL_SOCKET, name, &f, &lf) != 0 ||
        (v == f && !set_by_program))
        return;
    v /= 2;
    if (real_setsockopt(to, SOL_SOCKET, force, &v, sizeof v) != 0)
        (void)real_setsockopt(to, SOL_SOCKET, name, &v, sizeof v);
}

static void copy_options(int from, int to, const struct eta_sock *s)
{
    union {
        int i;
        struct linger lg;
        struct timeval tv;
        char name[IFNAMSIZ > 16 ? IFNAMSIZ : 16];
    } v, f;
    for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
        socklen_t l = sizeof v, lf = sizeof f;
        memset(&v, 0, sizeof v);
        memset(&f, 0, sizeof f);
        if (real_getsockopt(from, copied[i].level, copied[i].name, &v, &l) != 0 ||
            real_getsockopt(to, copied[i].level, copied[i].name, &f, &lf) != 0 ||
            (l == lf && memcmp(&v, &f, l) == 0))
            continue;
        (void)real_setsockopt(to, copied[i].level, copied[i].name, &v, l);
    }
    const uint32_t set = atomic_load(&s->opts_set);
    copy_buf(from, to, SO_RCVBUF, SO_RCVBUFFORCE, set != ETA_OPT_ALL && (set & ETA_OPT_RCVBUF));
    copy_buf(from, to, SO_SNDBUF, SO_SNDBUFFORCE, set != ETA_OPT_ALL && (set & ETA_OPT_SNDBUF));
    /* What the program had (eta_placeholder_v6_held: 0), which the old
     * one's bind had made 1. */
    int zero = 0;
    (void)real_setsockopt(to, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
}

/* The file's status flags, and for O_ASYNC its owner and signal. */
static int copy_file(int from, int to)
{
    int fl = real_fcntl(from, F_GETFL);
    if (fl < 0 || real_fcntl(to, F_SETFL, fl) != 0)
        return -1;
    struct f_owner_ex own;
    if (real_fcntl(from, F_GETOWN_EX, &own) == 0 && own.pid != 0)
        (void)real_fcntl(to, F_SETOWN_EX, &own);
    int sig = real_fcntl(from, F_GETSIG);
    if (sig > 0)
        (void)real_fcntl(to, F_SETSIG, sig);
    return 0;
}

/* dup3 of fresh socket n onto descriptor d, keeping d's FD_CLOEXEC. */
static int put_on(int n, int d)
{
    int fdfl = real_fcntl(d, F_GETFD);
    if (fdfl < 0)
        return -1;
    return real_dup3(n, d, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0 ? -1 : 0;
}

/* The program's other descriptors of the old socket (dup, dup2, F_DUPFD):
 * they name the same object, and the same kernel socket (its inode). A scan
 * of the descriptor table up to the process's limit, on this rare path. */
static void put_on_copies(int n, int fd, const struct eta_sock *s, const struct stat *old)
{
    struct rlimit r;
    rlim_t top = getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY ? r.rlim_cur : ETA_FD_MAX;
    if (top > ETA_FD_MAX)
        top = ETA_FD_MAX;
    struct stat st;
    for (int d = 0; (rlim_t)d < top && atomic_load(&s->obj.refs) > 2; d++)
        if (d != fd && eta_fd_peek(d) == &s->obj && fstat(d, &st) == 0 && st.st_ino == old->st_ino &&
            st.st_dev == old->st_dev)
            (void)put_on(n, d);
}

int eta_placeholder_renew(int fd, struct eta_sock *s, uint32_t dest)
{
    int domain = 0, type = 0, proto = 0;
    socklen_t l = sizeof domain;
    struct stat old;
    if (real_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l) != 0 || (l = sizeof type,
        real_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) != 0) || (l = sizeof proto,
        real_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l) != 0) || fstat(fd, &old) != 0)
        return errno;
    int n = real_socket(domain, type | SOCK_CLOEXEC, proto);
    if (n < 0)
        return errno == EMFILE || errno == ENFILE ? ENOBUFS : errno;
    copy_options(fd, n, s);
    if (copy_file(fd, n) != 0 || put_on(n, fd) != 0) {
        int e = errno;
        real_close(n);
        return e;
    }
    put_on_copies(n, fd, s, &old);
    real_close(n);
    ETA_DEBUG("fd %d: a fresh kernel placeholder for a v4-mapped connect (the old one held port %u, IPv6 only)", fd,
              s->kernel_port);
    /* The old placeholder's hold is gone with it: a first connect's now. */
    s->bound_kernel = false;
    s->kernel_port = 0;
    s->local6 = 0;
    s->local = (struct dti_addr){0, 0};
    s->v6only = false;
    s->v6only_read0 = false;
    return eta_hold_ephemeral(fd, s, dest);
}
