/* Socket-call semantics under libeta-preload.so, attached to dti's loopback
 * TEST FIXTURE engine (run by run_readiness_tests.py with this program and a
 * scenario; ETA_NET names 10.9.0.1/24 as the PPE's port). Where it can, each
 * scenario makes the same calls on kernel sockets over 127.0.0.1 and on
 * accelerated ones at 10.9.0.1 and wants the same answers (issue 35):
 *   mapped   an AF_INET6 socket bound or connecting to ::ffff:10.9.0.1 is the
 *            PPE's; names are v4-mapped sockaddr_in6 as Linux gives them;
 *            IPV6_V6ONLY refuses both as the kernel does
 *   v6only_fixed  IPV6_V6ONLY on an AF_INET6 socket with a port (bound to
 *            ::ffff:10.9.0.1, listening, connected, accepted) is EINVAL and
 *            unchanged, as Linux answers (EFAULT first for a value it cannot
 *            read); before bind it is set and read back (issue 31)
 *   maxseg   TCP_MAXSEG set before connect()/listen() reaches the PPE
 *   efault   bad user pointers into the data calls answer EFAULT, consume
 *            nothing and leave the connection working
 *   mlockall mlockall(MCL_CURRENT | MCL_FUTURE) locks what the program uses,
 *            not eta's reservations, and sockets keep working
 *   bind_again  a bind refused (the port is a listener's: EADDRINUSE) leaves
 *            the socket unbound, as Linux does: bound again to another
 *            port it listens and serves; a bind of a bound socket is EINVAL
 *            (AF_INET and a v4-mapped AF_INET6 socket)
 *   queue_full  a non-blocking send whose SEND finds the command queue full
 *            (the fixture engine stopped) answers EAGAIN and sends nothing;
 *            those that found room went, and all arrive in order
 * Prints "OK" or the failed check. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static const char *ppe = "10.9.0.1";

static struct sockaddr_in6 mapped(const char *ip4, int port)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    a.sin6_addr.s6_addr[10] = 0xff;
    a.sin6_addr.s6_addr[11] = 0xff;
    CHECK(inet_pton(AF_INET, ip4, &a.sin6_addr.s6_addr[12]) == 1);
    return a;
}

/* A kernel socket must never carry a SYN off this machine (10.9.0.1 is the
 * fixture's network, not the wire's): one bound to lo can only reach lo. */
static void only_lo(int fd)
{
    CHECK(setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3) == 0);
}

/* The address is ::ffff:<ip4>:<port>, laid out as Linux lays it out. */
static void check_v4mapped(const struct sockaddr_in6 *a, socklen_t len, const char *ip4, int port)
{
    CHECK(len == sizeof(struct sockaddr_in6));
    CHECK(a->sin6_family == AF_INET6);
    CHECK(a->sin6_flowinfo == 0 && a->sin6_scope_id == 0);
    CHECK(IN6_IS_ADDR_V4MAPPED(&a->sin6_addr));
    if (!ip4) /* any IPv4 address (a client's, which the engine chose) */
        return;
    struct sockaddr_in6 want = mapped(ip4, port);
    CHECK(memcmp(&a->sin6_addr, &want.sin6_addr, sizeof want.sin6_addr) == 0);
    if (port)
        CHECK(a->sin6_port == want.sin6_port);
}

static int port_of6(const struct sockaddr_in6 *a) { return ntohs(a->sin6_port); }

/* bind, listen, connect, accept and the names over ::ffff:<ip4>; the same
 * for the kernel (127.0.0.1) and the PPE (10.9.0.1). */
static int mapped_pair(const char *ip4)
{
    int l = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(l >= 0);
    only_lo(l);
    struct sockaddr_in6 a = mapped(ip4, 0);
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(l, 8) == 0);
    struct sockaddr_in6 got;
    socklen_t len = sizeof got;
    CHECK(getsockname(l, (struct sockaddr *)&got, &len) == 0);
    check_v4mapped(&got, len, ip4, 0);
    int port = port_of6(&got);
    CHECK(port != 0);
    /* An AF_INET6 client to the v4-mapped address. */
    int c = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(c >= 0);
    only_lo(c);
    struct sockaddr_in6 to = mapped(ip4, port);
    CHECK(connect(c, (struct sockaddr *)&to, sizeof to) == 0);
    struct sockaddr_in6 peer;
    len = sizeof peer;
    int s = accept(l, (struct sockaddr *)&peer, &len);
    CHECK(s >= 0);
    struct sockaddr_in6 cl;
    socklen_t cl_len = sizeof cl;
    CHECK(getsockname(c, (struct sockaddr *)&cl, &cl_len) == 0);
    check_v4mapped(&cl, cl_len, NULL, 0);
    check_v4mapped(&peer, len, NULL, 0);
    CHECK(memcmp(&peer.sin6_addr, &cl.sin6_addr, sizeof cl.sin6_addr) == 0 && peer.sin6_port == cl.sin6_port);
    len = sizeof got;
    CHECK(getpeername(c, (struct sockaddr *)&got, &len) == 0);
    check_v4mapped(&got, len, ip4, port);
    len = sizeof got;
    CHECK(getsockname(s, (struct sockaddr *)&got, &len) == 0);
    check_v4mapped(&got, len, ip4, port);
    /* A short buffer gets the start and the full length, as from the kernel. */
    unsigned char small[8];
    len = sizeof small;
    CHECK(getpeername(s, (struct sockaddr *)small, &len) == 0 && len == sizeof(struct sockaddr_in6));
    int domain = 0;
    socklen_t dl = sizeof domain;
    CHECK(getsockopt(s, SOL_SOCKET, SO_DOMAIN, &domain, &dl) == 0 && domain == AF_INET6);
    char b[5] = {0};
    CHECK(write(c, "ping", 4) == 4 && read(s, b, 4) == 4 && !memcmp(b, "ping", 4));
    CHECK(write(s, "pong", 4) == 4 && read(c, b, 4) == 4 && !memcmp(b, "pong", 4));
    /* An AF_INET client reaches it too (IPV6_V6ONLY off). */
    int c4 = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(c4 >= 0);
    only_lo(c4);
    struct sockaddr_in to4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip4, &to4.sin_addr);
    CHECK(connect(c4, (struct sockaddr *)&to4, sizeof to4) == 0);
    len = sizeof peer;
    int s4 = accept(l, (struct sockaddr *)&peer, &len);
    CHECK(s4 >= 0);
    CHECK(len == sizeof peer && peer.sin6_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&peer.sin6_addr));
    CHECK(write(c4, "v4", 2) == 2 && read(s4, b, 2) == 2 && !memcmp(b, "v4", 2));
    close(c4);
    close(s4);
    close(c);
    close(s);
    close(l);
    return 0;
}

/* IPV6_V6ONLY on: a v4-mapped bind and connect are refused, with the
 * kernel's errno (bind EINVAL, connect ENETUNREACH). */
static void v6only_refusals(const char *ip4, int *bind_err, int *connect_err)
{
    int one = 1;
    int b = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(b >= 0);
    CHECK(setsockopt(b, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0);
    struct sockaddr_in6 a = mapped(ip4, 0);
    *bind_err = bind(b, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
    close(b);
    int c = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(c >= 0);
    only_lo(c);
    CHECK(setsockopt(c, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) == 0);
    a = mapped(ip4, 9);
    *connect_err = connect(c, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
    close(c);
}

static int sc_mapped(void)
{
    if (mapped_pair("127.0.0.1") != 0) /* the kernel's answers: the reference */
        return 1;
    if (mapped_pair(ppe) != 0)
        return 1;
    int kb, kc, pb, pc;
    v6only_refusals("127.0.0.1", &kb, &kc);
    v6only_refusals(ppe, &pb, &pc);
    CHECK(kb == EINVAL && kc == ENETUNREACH);
    CHECK(pb == kb && pc == kc);
    return 0;
}

/* setsockopt(IPV6_V6ONLY) on fd, its errno (0: set), then what getsockopt
 * reads back, each into *out (the answers, for the kernel's and the PPE's
 * sockets to be compared). */
static void try_v6only(int fd, int on, int **out)
{
    *(*out)++ = setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) == 0 ? 0 : errno;
    int v = -1;
    socklen_t l = sizeof v;
    CHECK(getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, &l) == 0 && l == sizeof v);
    *(*out)++ = v;
}

/* IPV6_V6ONLY through a socket's life over ::ffff:<ip4>: answers into out. */
static int v6only_life(const char *ip4, int *out)
{
    int l = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(l >= 0);
    only_lo(l);
    try_v6only(l, 1, &out); /* unbound: set, read back 1 */
    try_v6only(l, 0, &out); /* and off again (a v4-mapped bind needs it off) */
    struct sockaddr_in6 a = mapped(ip4, 0);
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    try_v6only(l, 1, &out); /* bound: EINVAL, still 0 */
    try_v6only(l, 0, &out); /* the same value: EINVAL all the same */
    short two = 1;          /* too short: EINVAL */
    *out++ = setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &two, sizeof two) == 0 ? 0 : errno;
    void *hole = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(hole != MAP_FAILED); /* a value it cannot read: EFAULT before EINVAL */
    *out++ = setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, hole, sizeof(int)) == 0 ? 0 : errno;
    munmap(hole, 4096);
    CHECK(listen(l, 8) == 0);
    try_v6only(l, 1, &out); /* listening */
    struct sockaddr_in6 got;
    socklen_t len = sizeof got;
    CHECK(getsockname(l, (struct sockaddr *)&got, &len) == 0);
    int c = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(c >= 0);
    only_lo(c);
    struct sockaddr_in6 to = mapped(ip4, port_of6(&got));
    CHECK(connect(c, (struct sockaddr *)&to, sizeof to) == 0);
    try_v6only(c, 1, &out); /* connected */
    int s = accept(l, NULL, NULL);
    CHECK(s >= 0);
    try_v6only(s, 1, &out); /* accepted */
    char b[2] = {0};        /* and the connection still works */
    CHECK(write(c, "v6", 2) == 2 && read(s, b, 2) == 2 && !memcmp(b, "v6", 2));
    close(s);
    close(c);
    close(l);
    return 0;
}

/* The kernel's answers k are Linux's (want), then the PPE's p the same: each
 * difference printed, then the check fails. */
static void same_answers(const int *k, const int *p, const int *want, int n)
{
    for (int i = 0; i < n; i++) {
        if (k[i] != want[i])
            printf("kernel answer %d: %d, not %d\n", i, k[i], want[i]);
        CHECK(k[i] == want[i]);
    }
    for (int i = 0; i < n; i++) {
        if (p[i] != k[i])
            printf("PPE answer %d: %d, the kernel's %d\n", i, p[i], k[i]);
        CHECK(p[i] == k[i]);
    }
}

static int sc_v6only_fixed(void)
{
    enum { N = 16 };
    int k[N], p[N];
    memset(k, 0x55, sizeof k);
    memset(p, 0x55, sizeof p);
    if (v6only_life("127.0.0.1", k) != 0 || v6only_life(ppe, p) != 0)
        return 1;
    /* Linux's answers (the kernel's sockets), then the PPE's the same. */
    static const int want[N] = {0, 1, 0, 0, EINVAL, 0, EINVAL, 0, EINVAL, EFAULT, EINVAL, 0, EINVAL, 0, EINVAL, 0};
    same_answers(k, p, want, N);
    return 0;
}

/* One socket's binds after a refused one, over ip4 (AF_INET, or v4-mapped
 * from AF_INET6): answers into out (errno values, 0 for success; 6 each). */
static int bind_again_life(const char *ip4, bool v6, int *out)
{
    const int family = v6 ? AF_INET6 : AF_INET;
    struct sockaddr_storage ss;
    socklen_t alen;
#define ADDR(port)                                                                                                 \
    (memset(&ss, 0, sizeof ss),                                                                                    \
     v6 ? (*(struct sockaddr_in6 *)&ss = mapped(ip4, (port)), alen = sizeof(struct sockaddr_in6))                 \
        : (((struct sockaddr_in *)&ss)->sin_family = AF_INET, ((struct sockaddr_in *)&ss)->sin_port = htons(port), \
           inet_pton(AF_INET, ip4, &((struct sockaddr_in *)&ss)->sin_addr), alen = sizeof(struct sockaddr_in)),    \
     (struct sockaddr *)&ss)
    int l = socket(family, SOCK_STREAM, 0);
    CHECK(l >= 0);
    only_lo(l);
    CHECK(bind(l, ADDR(0), alen) == 0 && listen(l, 8) == 0);
    struct sockaddr_storage got;
    socklen_t len = sizeof got;
    CHECK(getsockname(l, (struct sockaddr *)&got, &len) == 0);
    const int taken = ntohs(((struct sockaddr_in *)&got)->sin_port); /* sin6_port is at the same place */
    int b = socket(family, SOCK_STREAM, 0);
    CHECK(b >= 0);
    only_lo(b);
    *out++ = bind(b, ADDR(taken), alen) == 0 ? 0 : errno; /* a listener's port: EADDRINUSE */
    *out++ = bind(b, ADDR(0), alen) == 0 ? 0 : errno;     /* unbound still: another port */
    *out++ = bind(b, ADDR(0), alen) == 0 ? 0 : errno;     /* bound now: EINVAL */
    *out++ = listen(b, 8) == 0 ? 0 : errno;
    len = sizeof got;
    CHECK(getsockname(b, (struct sockaddr *)&got, &len) == 0);
    const int port = ntohs(((struct sockaddr_in *)&got)->sin_port);
    *out++ = port != 0 && port != taken;
    int c = socket(family, SOCK_STREAM, 0); /* and it serves */
    CHECK(c >= 0);
    only_lo(c);
    CHECK(connect(c, ADDR(port), alen) == 0);
    int s = accept(b, NULL, NULL);
    CHECK(s >= 0);
    char x[3] = {0};
    *out++ = write(c, "ba", 2) == 2 && read(s, x, 2) == 2 && !memcmp(x, "ba", 2);
#undef ADDR
    close(s);
    close(c);
    close(b);
    close(l);
    return 0;
}

static int sc_bind_again(void)
{
    enum { N = 12 };
    int k[N], p[N];
    memset(k, 0x55, sizeof k);
    memset(p, 0x55, sizeof p);
    if (bind_again_life("127.0.0.1", false, k) != 0 || bind_again_life("127.0.0.1", true, k + 6) != 0 ||
        bind_again_life(ppe, false, p) != 0 || bind_again_life(ppe, true, p + 6) != 0)
        return 1;
    static const int want[N] = {EADDRINUSE, 0, EINVAL, 0, 1, 1, EADDRINUSE, 0, EINVAL, 0, 1, 1};
    same_answers(k, p, want, N);
    return 0;
}

/* An INADDR_ANY listener (the PPE half listens at listen()) and its port. */
static int listener_any(int *port, int maxseg)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    if (maxseg)
        CHECK(setsockopt(l, IPPROTO_TCP, TCP_MAXSEG, &maxseg, sizeof maxseg) == 0);
    CHECK(listen(l, 16) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return l;
}

static int connect4(const char *ip, int port, int maxseg)
{
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(c >= 0);
    only_lo(c);
    if (maxseg)
        CHECK(setsockopt(c, IPPROTO_TCP, TCP_MAXSEG, &maxseg, sizeof maxseg) == 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    CHECK(connect(c, (struct sockaddr *)&a, sizeof a) == 0);
    return c;
}

/* TCP_MAXSEG set before connect() and before listen() is the PPE's (the
 * fixture engine keeps the value it was given; MARS puts it in the SYN and
 * SYN-ACK: tests/unit/mars/tcp/tcp_out_test.cc). Before issue 35 nothing
 * was carried: the PPE answered 0 (not set). */
static int sc_maxseg(void)
{
    int port;
    int l = listener_any(&port, 1100);
    int v = 0;
    socklen_t len = sizeof v;
    CHECK(getsockopt(l, IPPROTO_TCP, TCP_MAXSEG, &v, &len) == 0);
    CHECK(v == 1100);
    int c = connect4(ppe, port, 1200);
    v = 0;
    len = sizeof v;
    CHECK(getsockopt(c, IPPROTO_TCP, TCP_MAXSEG, &v, &len) == 0);
    CHECK(v == 1200);
    int s = accept(l, NULL, NULL);
    CHECK(s >= 0);
    CHECK(write(c, "x", 1) == 1);
    char b;
    CHECK(read(s, &b, 1) == 1 && b == 'x');
    close(s);
    close(c);
    close(l);
    return 0;
}

/* Every data call with a bad pointer: EFAULT, nothing moved. */
static void *volatile null_seen_at_run_time; /* NULL the compiler cannot see (it warns of a literal) */

static void efault_calls(int c, int s)
{
    void *const null = null_seen_at_run_time;
    char buf[16];
    struct iovec bad_base = {null, 4};
    struct iovec good = {buf, sizeof buf};
    struct msghdr m = {.msg_iov = &bad_base, .msg_iovlen = 1};
    struct msghdr m_bad_iov = {.msg_iov = (struct iovec *)8, .msg_iovlen = 1};
#define EFAULT_CALL(call) do { errno = 0; CHECK((call) == -1 && errno == EFAULT); } while (0)
    EFAULT_CALL(write(c, null, 10));
    EFAULT_CALL(send(c, (void *)1, 10, 0));
    EFAULT_CALL(send(c, null, 10, MSG_DONTWAIT | MSG_NOSIGNAL));
    EFAULT_CALL(sendto(c, null, 10, 0, NULL, 0));
    EFAULT_CALL(writev(c, &bad_base, 1));
    EFAULT_CALL(writev(c, null, 1));
    EFAULT_CALL(sendmsg(c, &m, 0));
    EFAULT_CALL(sendmsg(c, &m_bad_iov, 0));
    CHECK(write(c, null, 0) == 0);
    /* bytes waiting: a bad read consumes none of them */
    CHECK(write(c, "abcd", 4) == 4);
    char one;
    CHECK(recv(s, &one, 1, MSG_PEEK) == 1); /* they arrived */
    EFAULT_CALL(read(s, null, 10));
    EFAULT_CALL(recv(s, (void *)16, 10, 0));
    EFAULT_CALL(recv(s, null, 10, MSG_DONTWAIT));
    EFAULT_CALL(recvfrom(s, null, 10, 0, NULL, NULL));
    EFAULT_CALL(readv(s, &bad_base, 1));
    EFAULT_CALL(readv(s, null, 1));
    EFAULT_CALL(recvmsg(s, &m, 0));
    EFAULT_CALL(recvmsg(s, &m_bad_iov, 0));
    int e;
    socklen_t el = sizeof e;
    EFAULT_CALL(getsockopt(s, SOL_SOCKET, SO_ERROR, null, &el));
    EFAULT_CALL(getsockname(s, null, &el));
    EFAULT_CALL(getpeername(s, (struct sockaddr *)buf, NULL));
    CHECK(readv(s, &good, 1) == 4 && memcmp(buf, "abcd", 4) == 0);
#undef EFAULT_CALL
}

static int sc_efault(void)
{
    const char *ips[] = {"127.0.0.1", ppe}; /* the kernel's answers first */
    for (int i = 0; i < 2; i++) {
        int port;
        int l = listener_any(&port, 0);
        int c = connect4(ips[i], port, 0);
        int s = accept(l, NULL, NULL);
        CHECK(s >= 0);
        efault_calls(c, s);
        /* the connection is unharmed: both ways, and again */
        char b[8];
        CHECK(write(s, "pong", 4) == 4 && read(c, b, 4) == 4 && !memcmp(b, "pong", 4));
        efault_calls(c, s);
        CHECK(write(c, "last", 4) == 4 && read(s, b, 4) == 4 && !memcmp(b, "last", 4));
        close(s);
        close(c);
        close(l);
    }
    return 0;
}

/* A field of /proc/self/<file> in kB, -1 if absent. */
static long proc_kb(const char *file, const char *field)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/%s", file);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

/* Locking everything locks the program, not the PPE's region (~0.5 GiB on
 * the fixture engine) nor the shim's reserved descriptor table and slab
 * (~400 MiB): before issue 35, VmLck was all of them. */
static int sc_mlockall(void)
{
    int port;
    int l = listener_any(&port, 0);
    int c = connect4(ppe, port, 0);
    int s = accept(l, NULL, NULL);
    CHECK(s >= 0);
    CHECK(write(c, "x", 1) == 1);
    char b[8];
    CHECK(read(s, b, 1) == 1);
    long rss0 = proc_kb("status", "VmRSS");
    CHECK(mlockall(MCL_CURRENT | MCL_FUTURE) == 0);
    /* Locked: pages locked in memory (smaps); VmLck counts the locked
     * mappings' whole size, eta's included (they are locked on fault). */
    long lck = proc_kb("smaps_rollup", "Locked"), rss1 = proc_kb("status", "VmRSS");
    printf("VmRSS %ld kB before mlockall, %ld kB after; Locked %ld kB; VmLck %ld kB\n", rss0, rss1, lck,
           proc_kb("status", "VmLck"));
    CHECK(lck > 0);                 /* it did lock */
    CHECK(lck < 128 * 1024);        /* but not eta's reservations (~900 MiB) */
    CHECK(rss1 - rss0 < 128 * 1024);
    /* The program's own memory was faulted in and locked: a fresh heap
     * block is resident (MCL_FUTURE as the kernel gives it). */
    char *heap = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(heap != MAP_FAILED);
    unsigned char vec[256];
    CHECK(mincore(heap, 1 << 20, vec) == 0);
    for (int i = 0; i < 256; i++)
        CHECK(vec[i] & 1);
    /* Sockets keep working, new ones too (their pages lock as they are used). */
    CHECK(write(s, "pong", 4) == 4 && read(c, b, 4) == 4 && !memcmp(b, "pong", 4));
    for (int i = 0; i < 8; i++) {
        int c2 = connect4(ppe, port, 0);
        int s2 = accept(l, NULL, NULL);
        CHECK(s2 >= 0);
        CHECK(write(c2, "more", 4) == 4 && read(s2, b, 4) == 4 && !memcmp(b, "more", 4));
        close(s2);
        close(c2);
    }
    CHECK(proc_kb("smaps_rollup", "Locked") < 128 * 1024);
    CHECK(proc_kb("status", "VmRSS") - rss0 < 128 * 1024);
    CHECK(munlockall() == 0);
    close(s);
    close(c);
    close(l);
    return 0;
}

/* The fixture engine (ETA_TEST_FIXTURE_PID) stopped, seen stopped in
 * /proc (bounded), or continued. */
static void engine_hold(pid_t pid, int stop)
{
    CHECK(kill(pid, stop ? SIGSTOP : SIGCONT) == 0);
    if (!stop)
        return;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    for (int tries = 0;; tries++) {
        char st[512] = "";
        FILE *f = fopen(path, "r");
        CHECK(f != NULL);
        size_t got = fread(st, 1, sizeof st - 1, f);
        fclose(f);
        st[got] = 0;
        const char *paren = strrchr(st, ')');
        if (paren && (paren[2] == 'T' || paren[2] == 't'))
            return;
        CHECK(tries < 10000); /* 10 s */
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

/* One SEND per write, the engine stopped: each connection's first write
 * after the engine took its last SEND queues a SEND of its own (the send
 * view's bytes, then dti_send_note()), until the command queue (256
 * entries) is full; a non-blocking write then answers EAGAIN and publishes
 * nothing (the bytes its view had copied beyond the tail are not sent):
 * the peer reads the byte written after the engine continued, not the one
 * refused. */
enum { kQueuePairs = 300 };
static int sc_queue_full(void)
{
    const char *pid_s = getenv("ETA_TEST_FIXTURE_PID");
    CHECK(pid_s != NULL);
    const pid_t pid = (pid_t)atoi(pid_s);
    int port;
    int l = listener_any(&port, 0);
    static int c[kQueuePairs], s[kQueuePairs];
    static char want[kQueuePairs];
    for (int i = 0; i < kQueuePairs; i++) {
        c[i] = connect4(ppe, port, 0);
        s[i] = accept(l, NULL, NULL);
        CHECK(s[i] >= 0);
        char b = 0;
        CHECK(send(c[i], "x", 1, 0) == 1); /* (takes the send view) */
        CHECK(read(s[i], &b, 1) == 1 && b == 'x'); /* the engine took its SEND */
    }
    engine_hold(pid, 1);
    int took = 0, refused = 0;
    for (int i = 0; i < kQueuePairs; i++) {
        errno = 0;
        ssize_t r = send(c[i], "y", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        CHECK(r == 1 || (r == -1 && errno == EAGAIN));
        want[i] = r == 1 ? 'y' : 'z';
        took += r == 1;
        refused += r == -1;
    }
    engine_hold(pid, 0);
    CHECK(took > 0);
    CHECK(refused > 0); /* more connections than the queue has entries */
    for (int i = 0; i < kQueuePairs; i++) {
        if (want[i] == 'z')
            CHECK(send(c[i], "z", 1, 0) == 1);
        char b = 0;
        CHECK(read(s[i], &b, 1) == 1);
        CHECK(b == want[i]);
    }
    for (int i = 0; i < kQueuePairs; i++) {
        close(c[i]);
        close(s[i]);
    }
    close(l);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } scenarios[] = {{"mapped", sc_mapped}, {"maxseg", sc_maxseg}, {"efault", sc_efault}, {"mlockall", sc_mlockall},
                     {"queue_full", sc_queue_full}, {"v6only_fixed", sc_v6only_fixed}, {"bind_again", sc_bind_again}};
    alarm(60);
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0) {
            int rc = scenarios[i].fn();
            if (rc == 0)
                printf("OK\n");
            return rc;
        }
    fprintf(stderr, "usage: %s mapped|maxseg|efault|mlockall|queue_full|v6only_fixed|bind_again\n", argv[0]);
    return 2;
}
