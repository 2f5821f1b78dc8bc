/* A program run under libeta-preload.so by run_shim_tests.py: one scenario
 * per invocation (argv[1]). Prints "OK" and exits 0, or names the failed
 * check and exits 1. Kernel scenarios need no PPE; accel scenarios need the
 * fixture PPE and ETA_NET naming 10.9.0.1/24 as the PPE's port. */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "eta/preload_stats.h"

#include "asleep.h"
#include "check.h"

static const char *ppe_ip = "10.9.0.1";

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)((i * 2654435761u + seed) >> 13);
}

static void write_all(int fd, const unsigned char *b, size_t n)
{
    while (n) {
        ssize_t w = write(fd, b, n);
        CHECK(w > 0);
        b += w;
        n -= (size_t)w;
    }
}

/* A listener on INADDR_ANY:0 (accelerated: PPE and kernel), its port. */
static int listener(int *port)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    int one = 1;
    CHECK(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(l, 16) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return l;
}

static int connect_to(const char *ip, int port, int flags)
{
    int c = socket(AF_INET, SOCK_STREAM | flags, 0);
    CHECK(c >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    int rc = connect(c, (struct sockaddr *)&a, sizeof a);
    if (flags & SOCK_NONBLOCK)
        CHECK(rc == 0 || errno == EINPROGRESS);
    else
        CHECK(rc == 0);
    return c;
}

/* A connected pair through the PPE (or the kernel for 127.0.0.1). */
static void pair(const char *ip, int *client, int *server)
{
    int port;
    int l = listener(&port);
    *client = connect_to(ip, port, 0);
    struct sockaddr_in peer;
    socklen_t len = sizeof peer;
    *server = accept(l, (struct sockaddr *)&peer, &len);
    CHECK(*server >= 0);
    CHECK(len == sizeof peer && peer.sin_family == AF_INET);
    close(l);
}

/* ---- scenarios that need no PPE ---------------------------------------- */

static int sc_loaded(void)
{
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "socket");
    CHECK(sym && dladdr(sym, &info) && info.dli_fname);
    CHECK(strstr(info.dli_fname, "libeta-preload") != NULL);
    return 0;
}

struct echo_arg {
    int fd;
    size_t n;
};

static void *echo_thread(void *p)
{
    struct echo_arg *a = p;
    unsigned char buf[65536];
    size_t left = a->n;
    while (left) {
        ssize_t r = read(a->fd, buf, sizeof buf < left ? sizeof buf : left);
        CHECK(r > 0);
        write_all(a->fd, buf, (size_t)r);
        left -= (size_t)r;
    }
    return NULL;
}

/* Bytes out and back, byte exact, with the echo in a second thread. */
static void echo_check(int client, int server, size_t n)
{
    unsigned char *out = malloc(n), *in = malloc(n);
    CHECK(out && in);
    fill(out, n, 7);
    struct echo_arg a = {server, n};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, echo_thread, &a) == 0);
    size_t sent = 0, got = 0;
    while (got < n) {
        struct pollfd p = {client, POLLIN | (sent < n ? POLLOUT : 0), 0};
        CHECK(poll(&p, 1, 10000) == 1);
        if ((p.revents & POLLOUT) && sent < n) {
            size_t chunk = n - sent < 32768 ? n - sent : 32768;
            ssize_t w = send(client, out + sent, chunk, MSG_DONTWAIT);
            CHECK(w > 0 || errno == EAGAIN);
            if (w > 0)
                sent += (size_t)w;
        }
        if (p.revents & POLLIN) {
            ssize_t r = recv(client, in + got, n - got, MSG_DONTWAIT);
            CHECK(r > 0 || errno == EAGAIN);
            if (r > 0)
                got += (size_t)r;
        }
    }
    pthread_join(t, NULL);
    CHECK(memcmp(out, in, n) == 0);
    free(out);
    free(in);
}

static int sc_tcp_echo(const char *ip)
{
    int c, s;
    pair(ip, &c, &s);
    echo_check(c, s, 4u << 20);
    /* The peer's close is an EOF here. */
    CHECK(shutdown(s, SHUT_WR) == 0);
    char b;
    CHECK(read(c, &b, 1) == 0);
    close(c);
    close(s);
    return 0;
}

/* epoll semantics over whatever fd is given as "a" (readable on demand by
 * writing to "w"), beside a pipe. */
static void epoll_semantics(int a, int w, void (*feed)(int))
{
    int p[2];
    CHECK(pipe(p) == 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0xa};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev) == 0);
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev) == -1 && errno == EEXIST);
    ev.data.u64 = 0xb;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) == 0);
    struct epoll_event out[4];
    CHECK(epoll_wait(ep, out, 4, 0) == 0); /* nothing yet */
    CHECK(epoll_wait(ep, out, 4, 20) == 0); /* times out */
    /* Level-triggered: reported again and again until read. */
    feed(w);
    CHECK(write(p[1], "x", 1) == 1);
    /* The PPE's byte may come after the pipe's: wait for it first. */
    struct pollfd pa = {a, POLLIN, 0};
    CHECK(poll(&pa, 1, 5000) == 1);
    int n = epoll_wait(ep, out, 4, 5000);
    CHECK(n == 2);
    CHECK((out[0].data.u64 == 0xa && out[1].data.u64 == 0xb) || (out[0].data.u64 == 0xb && out[1].data.u64 == 0xa));
    CHECK(epoll_wait(ep, out, 4, 0) == 2);
    char buf[64];
    CHECK(read(p[0], buf, sizeof buf) == 1);
    CHECK(read(a, buf, sizeof buf) > 0);
    CHECK(epoll_wait(ep, out, 4, 0) == 0);
    /* Edge-triggered: once per arrival. */
    ev.events = EPOLLIN | EPOLLET;
    ev.data.u64 = 0xa;
    CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, a, &ev) == 0);
    feed(w);
    CHECK(epoll_wait(ep, out, 4, 5000) == 1 && out[0].data.u64 == 0xa);
    CHECK(epoll_wait(ep, out, 4, 0) == 0);
    feed(w);
    CHECK(epoll_wait(ep, out, 4, 5000) == 1 && out[0].data.u64 == 0xa);
    CHECK(read(a, buf, sizeof buf) > 0);
    /* One-shot: once, then silent until re-armed with MOD. */
    ev.events = EPOLLIN | EPOLLONESHOT;
    CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, a, &ev) == 0);
    feed(w);
    CHECK(epoll_wait(ep, out, 4, 5000) == 1);
    CHECK(epoll_wait(ep, out, 4, 0) == 0);
    CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, a, &ev) == 0);
    CHECK(epoll_wait(ep, out, 4, 0) == 1);
    CHECK(read(a, buf, sizeof buf) > 0);
    CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, a, NULL) == 0);
    CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, a, NULL) == -1 && errno == ENOENT);
    close(ep);
    close(p[0]);
    close(p[1]);
}

/* A set's kernel members are reported beside a ready accelerated one
 * whether they joined before the set had an accelerated member (the shim
 * counts them then) or after, and again after the last one left and a new
 * one came. */
static void epoll_kernel_members(int a, int w)
{
    int p[2], q[2];
    CHECK(pipe(p) == 0 && pipe(q) == 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0xb}, out[4];
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) == 0); /* before any accelerated member */
    ev.data.u64 = 0xa;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev) == 0);
    CHECK(write(w, "y", 1) == 1 && write(p[1], "x", 1) == 1);
    struct pollfd pa = {a, POLLIN, 0};
    CHECK(poll(&pa, 1, 5000) == 1);
    CHECK(epoll_wait(ep, out, 4, 5000) == 2);
    CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL) == 0);
    CHECK(epoll_wait(ep, out, 4, 0) == 1 && out[0].data.u64 == 0xa);
    ev.data.u64 = 0xc;
    CHECK(write(q[1], "z", 1) == 1);
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, q[0], &ev) == 0); /* after: the count comes back */
    CHECK(epoll_wait(ep, out, 4, 0) == 2);
    CHECK((out[0].data.u64 == 0xc) != (out[1].data.u64 == 0xc));
    char buf[8];
    CHECK(read(a, buf, sizeof buf) == 1);
    close(ep);
    close(p[0]);
    close(p[1]);
    close(q[0]);
    close(q[1]);
}

static void feed_byte(int w)
{
    CHECK(write(w, "y", 1) == 1);
}

static void feed_eventfd(int w)
{
    uint64_t one = 1;
    CHECK(write(w, &one, sizeof one) == sizeof one);
}

/* ---- knowing that a thread sleeps --------------------------------------- */

/* This process's counters as the shim publishes them (eta/preload_stats.h),
 * read from the file; false when there is none (no socket made yet, or the
 * directory is not writable). */
static int own_stats(struct eta_preload_stats *out)
{
    const char *sock = getenv("ETA_SOCKET");
    char path[512];
    snprintf(path, sizeof path, "%s.preload/%d", sock ? sock : "/run/eta/ppe.sock", (int)getpid());
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = pread(fd, out, sizeof *out, 0);
    close(fd);
    return n == (ssize_t)sizeof *out && out->magic == ETA_PRELOAD_STATS_MAGIC;
}

static uint64_t own_sleeps(void)
{
    struct eta_preload_stats st;
    return own_stats(&st) ? __atomic_load_n(&st.sleeps, __ATOMIC_RELAXED) : 0;
}

/* Waits (bounded: 10 s) until thread TID sleeps: blocked in a waiting call,
 * and, where the shim counts its sleeps (attached to a PPE), past the
 * increment of the sleep counter that it makes after arming its wakeup and
 * before it blocks. Returns 0 if it never did. */
static int wait_until_asleep(pid_t tid, uint64_t sleeps_before, int count_sleeps)
{
    struct timespec tick = {0, 1000000};
    for (int i = 0; i < 10000; i++) {
        if ((!count_sleeps || own_sleeps() > sleeps_before) && task_blocked_in_wait(tid))
            return 1;
        nanosleep(&tick, NULL);
    }
    return 0;
}

struct delayed {
    int fd;
    pid_t waiter;          /* the thread that must be asleep before the write */
    uint64_t sleeps_before;
    int count_sleeps;
    int saw_sleep;
};

static void *delayed_writer(void *p)
{
    struct delayed *d = p;
    d->saw_sleep = wait_until_asleep(d->waiter, d->sleeps_before, d->count_sleeps);
    /* Written either way, so the waiter cannot hang; it checks saw_sleep. */
    CHECK(write(d->fd, "late", 4) == 4);
    return NULL;
}

/* A blocking epoll_wait is woken by data that arrives while it sleeps (the
 * sleep path, not the spin): the writer writes only once the waiter is known
 * to be asleep. COUNT_SLEEPS: the shim is attached and counts its sleeps. */
static void wake_from_sleep(int reader, int writer, int count_sleeps)
{
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1}, out;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, reader, &ev) == 0);
    struct delayed d = {writer, (pid_t)syscall(SYS_gettid), own_sleeps(), count_sleeps, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, delayed_writer, &d) == 0);
    int n = epoll_wait(ep, &out, 1, 20000);
    pthread_join(t, NULL);
    CHECK(d.saw_sleep); /* else the wait ended before it slept */
    CHECK(n == 1 && out.data.u64 == 1);
    char buf[8];
    CHECK(read(reader, buf, sizeof buf) == 4 && memcmp(buf, "late", 4) == 0);
    close(ep);
}

static int sc_epoll_kernel(void)
{
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    epoll_semantics(sp[0], sp[1], feed_byte);
    int efd = eventfd(0, EFD_NONBLOCK);
    CHECK(efd >= 0);
    epoll_semantics(efd, efd, feed_eventfd);
    wake_from_sleep(sp[0], sp[1], 0);
    return 0;
}

static int sc_poll_select(const char *ip)
{
    int c, s;
    pair(ip, &c, &s);
    int p[2];
    CHECK(pipe(p) == 0);
    struct pollfd f[3] = {{s, POLLIN, 0}, {p[0], POLLIN, 0}, {c, POLLOUT, 0}};
    CHECK(poll(f, 2, 0) == 0);
    CHECK(poll(f, 3, 1000) == 1 && (f[2].revents & POLLOUT));
    CHECK(write(c, "abc", 3) == 3);
    CHECK(write(p[1], "z", 1) == 1);
    CHECK(poll(f, 1, 5000) == 1 && (f[0].revents & POLLIN));
    CHECK(poll(f, 2, 0) == 2 && (f[0].revents & POLLIN) && (f[1].revents & POLLIN));
    fd_set r;
    FD_ZERO(&r);
    FD_SET(s, &r);
    FD_SET(p[0], &r);
    struct timeval tv = {5, 0};
    int maxfd = (s > p[0] ? s : p[0]) + 1;
    CHECK(select(maxfd, &r, NULL, NULL, &tv) == 2 && FD_ISSET(s, &r) && FD_ISSET(p[0], &r));
    char buf[8];
    CHECK(read(s, buf, sizeof buf) == 3 && memcmp(buf, "abc", 3) == 0);
    CHECK(read(p[0], buf, 1) == 1);
    FD_ZERO(&r);
    FD_SET(s, &r);
    tv = (struct timeval){0, 20000};
    CHECK(select(s + 1, &r, NULL, NULL, &tv) == 0 && !FD_ISSET(s, &r));
    /* RDHUP and EOF after the peer shuts down. */
    CHECK(shutdown(c, SHUT_WR) == 0);
    f[0] = (struct pollfd){s, POLLIN | POLLRDHUP, 0};
    CHECK(poll(f, 1, 5000) == 1 && (f[0].revents & POLLRDHUP));
    CHECK(read(s, buf, 1) == 0);
    close(c);
    close(s);
    close(p[0]);
    close(p[1]);
    return 0;
}

static int sc_dup(const char *ip)
{
    int c, s;
    pair(ip, &c, &s);
    int d = dup(c);
    CHECK(d >= 0 && d != c);
    int d2 = fcntl(c, F_DUPFD_CLOEXEC, 100);
    CHECK(d2 >= 100);
    CHECK((fcntl(d2, F_GETFD) & FD_CLOEXEC) && !(fcntl(d, F_GETFD) & FD_CLOEXEC));
    /* O_NONBLOCK belongs to the file description: shared by duplicates. */
    CHECK(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK) == 0);
    CHECK(fcntl(d, F_GETFL) & O_NONBLOCK);
    char b;
    CHECK(read(d, &b, 1) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));
    int on = 0;
    CHECK(ioctl(d, FIONBIO, &on) == 0);
    CHECK(!(fcntl(c, F_GETFL) & O_NONBLOCK));
    /* Closing one name leaves the socket open through the others. */
    CHECK(close(c) == 0);
    CHECK(write(d, "A", 1) == 1);
    CHECK(read(s, &b, 1) == 1 && b == 'A');
    int t = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(dup2(d, t) == t);
    CHECK(write(t, "B", 1) == 1);
    CHECK(read(s, &b, 1) == 1 && b == 'B');
    CHECK(dup3(d, t, O_CLOEXEC) == t && (fcntl(t, F_GETFD) & FD_CLOEXEC));
    close(d);
    close(d2);
    CHECK(write(t, "C", 1) == 1);
    CHECK(read(s, &b, 1) == 1 && b == 'C');
    close(t);
    /* The last name closed: the peer sees EOF. */
    CHECK(read(s, &b, 1) == 0);
    CHECK(close(c) == -1 && errno == EBADF);
    close(s);
    return 0;
}

/* ---- scenarios that need the (fixture) PPE ----------------------------- */

static int sc_accel_basics(void)
{
    int c, s;
    pair(ppe_ip, &c, &s);
    struct stat st;
    CHECK(fstat(s, &st) == 0 && S_ISSOCK(st.st_mode)); /* a real descriptor */
    int v = 0;
    socklen_t len = sizeof v;
    CHECK(getsockopt(c, SOL_SOCKET, SO_TYPE, &v, &len) == 0 && v == SOCK_STREAM);
    CHECK(getsockopt(c, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 && v == 0);
    CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == 0);
    int one = 1;
    CHECK(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0);
    CHECK(getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0 && v == 1);
    char ifname[16] = "lo";
    CHECK(setsockopt(c, SOL_SOCKET, SO_BINDTODEVICE, ifname, sizeof ifname) == -1 && errno == ENOPROTOOPT);
    /* SO_RCVBUF: before a set, the receive ring's size; once set (the shim
     * forwards it to the PPE, which stops autotuning the buffer), Linux's
     * answer: what the kernel reports for the same request on its own socket
     * (twice the value set). */
    {
        int k = socket(AF_INET, SOCK_STREAM, 0); /* not connected: the kernel's */
        int want = 65536, kv = 0, av = 0;
        socklen_t l = sizeof av;
        CHECK(getsockopt(c, SOL_SOCKET, SO_RCVBUF, &av, &l) == 0 && av >= 4096 && (av & (av - 1)) == 0);
        CHECK(k >= 0 && setsockopt(k, SOL_SOCKET, SO_RCVBUF, &want, sizeof want) == 0);
        l = sizeof kv;
        CHECK(getsockopt(k, SOL_SOCKET, SO_RCVBUF, &kv, &l) == 0 && kv > want);
        CHECK(setsockopt(c, SOL_SOCKET, SO_RCVBUF, &want, sizeof want) == 0);
        l = sizeof av;
        CHECK(getsockopt(c, SOL_SOCKET, SO_RCVBUF, &av, &l) == 0 && av == kv);
        close(k);
    }
    /* Options set while a socket is still the kernel's are read back when it
     * is accelerated (only those set: eta_carry_options): a receive timeout
     * set before connect, on a dup, ends a recv with nothing to read. */
    {
        int port;
        int l = listener(&port);
        int t = socket(AF_INET, SOCK_STREAM, 0);
        int td = dup(t);
        struct timeval tv = {0, 50000};
        CHECK(t >= 0 && td >= 0 && setsockopt(td, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, ppe_ip, &to.sin_addr);
        CHECK(connect(t, (struct sockaddr *)&to, sizeof to) == 0);
        int ta = accept(l, NULL, NULL);
        CHECK(ta >= 0);
        char b;
        errno = 0;
        CHECK(recv(t, &b, 1, 0) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));
        close(ta);
        close(td);
        close(t);
        close(l);
    }
    struct sockaddr_in a;
    len = sizeof a;
    CHECK(getpeername(c, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET);
    char ip[32];
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    CHECK(strcmp(ip, ppe_ip) == 0);
    /* MSG_PEEK leaves the bytes; FIONREAD counts them; MSG_WAITALL waits for all. */
    CHECK(send(c, "hello", 5, 0) == 5);
    char buf[16];
    struct pollfd p = {s, POLLIN, 0};
    CHECK(poll(&p, 1, 5000) == 1);
    CHECK(recv(s, buf, 5, MSG_PEEK) == 5 && memcmp(buf, "hello", 5) == 0);
    int avail = 0;
    CHECK(ioctl(s, FIONREAD, &avail) == 0 && avail == 5);
    CHECK(recv(s, buf, 5, MSG_WAITALL) == 5 && memcmp(buf, "hello", 5) == 0);
    CHECK(recv(s, buf, 5, MSG_DONTWAIT) == -1 && errno == EAGAIN);
    /* SIGPIPE as the kernel raises it; MSG_NOSIGNAL suppresses it. */
    signal(SIGPIPE, SIG_IGN);
    CHECK(shutdown(c, SHUT_WR) == 0);
    CHECK(send(c, "x", 1, MSG_NOSIGNAL) == -1 && errno == EPIPE);
    CHECK(read(s, buf, 1) == 0);
    close(c);
    close(s);
    return 0;
}

static int sc_accel_nonblock(void)
{
    int port;
    int l = listener(&port);
    int c = connect_to(ppe_ip, port, SOCK_NONBLOCK);
    struct pollfd p = {c, POLLOUT, 0};
    CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT));
    int err = -1;
    socklen_t len = sizeof err;
    CHECK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0);
    CHECK(fcntl(l, F_SETFL, O_NONBLOCK) == 0);
    struct pollfd lp = {l, POLLIN, 0};
    CHECK(poll(&lp, 1, 5000) == 1);
    int s = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    CHECK(s >= 0 && (fcntl(s, F_GETFL) & O_NONBLOCK) && (fcntl(s, F_GETFD) & FD_CLOEXEC));
    CHECK(accept(l, NULL, NULL) == -1 && errno == EAGAIN);
    /* Fill the path until the sender is told to wait, then drain. */
    static unsigned char chunk[65536];
    size_t sent = 0;
    for (int i = 0; i < 10000; i++) {
        ssize_t w = write(c, chunk, sizeof chunk);
        if (w < 0) {
            CHECK(errno == EAGAIN);
            break;
        }
        sent += (size_t)w;
    }
    CHECK(sent > 0);
    size_t got = 0;
    while (got < sent) {
        struct pollfd q = {s, POLLIN, 0};
        CHECK(poll(&q, 1, 5000) == 1);
        ssize_t r = read(s, chunk, sizeof chunk);
        CHECK(r > 0 || errno == EAGAIN);
        if (r > 0)
            got += (size_t)r;
    }
    CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLOUT));
    /* A port nobody listens on: refused. */
    int r = connect_to(ppe_ip, port + 1 == 65536 ? 1 : port + 1, SOCK_NONBLOCK);
    struct pollfd rp = {r, POLLOUT, 0};
    CHECK(poll(&rp, 1, 5000) == 1 && (rp.revents & (POLLERR | POLLHUP | POLLOUT)));
    len = sizeof err;
    CHECK(getsockopt(r, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNREFUSED);
    close(r);
    close(c);
    close(s);
    close(l);
    return 0;
}

/* A socket bound with SO_REUSEADDR to the local port of a connection to the
 * same peer: the PPE refuses the 4-tuple at once (EADDRINUSE, as Linux).
 * Blocking: connect fails with the errno (SO_SNDTIMEO bounds a regression:
 * EINPROGRESS, not a hang). Non-blocking: poll reports POLLOUT, POLLERR and
 * POLLHUP, and SO_ERROR the errno (issue 35). */
static int bound_to(int port, int flags)
{
    int s = socket(AF_INET, SOCK_STREAM | flags, 0);
    CHECK(s >= 0);
    int one = 1;
    CHECK(setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
    return s;
}

static int sc_accel_connect_taken(void)
{
    int port;
    int l = listener(&port);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ppe_ip, &to.sin_addr);
    int a = bound_to(0, 0);
    struct sockaddr_in name;
    socklen_t len = sizeof name;
    CHECK(getsockname(a, (struct sockaddr *)&name, &len) == 0 && name.sin_port != 0);
    int local = ntohs(name.sin_port);
    CHECK(connect(a, (struct sockaddr *)&to, sizeof to) == 0);

    int b = bound_to(local, 0);
    struct timeval tv = {20, 0};
    CHECK(setsockopt(b, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);
    errno = 0;
    CHECK(connect(b, (struct sockaddr *)&to, sizeof to) == -1 && errno == EADDRINUSE);

    int n = bound_to(local, SOCK_NONBLOCK);
    int rc = connect(n, (struct sockaddr *)&to, sizeof to);
    CHECK(rc == -1 && (errno == EINPROGRESS || errno == EADDRINUSE));
    if (errno == EINPROGRESS) {
        struct pollfd p = {n, POLLOUT, 0};
        CHECK(poll(&p, 1, 20000) == 1);
        CHECK((p.revents & (POLLOUT | POLLERR | POLLHUP)) == (POLLOUT | POLLERR | POLLHUP));
        int err = -1;
        len = sizeof err;
        CHECK(getsockopt(n, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == EADDRINUSE);
    }
    close(n);
    close(b);
    close(a);
    close(l);
    return 0;
}

/* A connect refused, then made again on the same socket once something
 * listens there, as on Linux (issue 35): a blocking connect() is an attempt
 * each time; after a non-blocking one failed, the next connect() reports it
 * (ECONNABORTED when SO_ERROR took it already) and the one after is a new
 * attempt. Both sockets then carry bytes. A socket that was connected
 * answers EISCONN, also once its peer has gone. */
static int listen_on(int port)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    int one = 1;
    CHECK(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(l, 16) == 0);
    return l;
}

static int sc_accel_connect_again(void)
{
    int port;
    close(listener(&port)); /* a port nobody listens on now */
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ppe_ip, &to.sin_addr);
    int b = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(b >= 0);
    struct timeval tv = {20, 0};
    CHECK(setsockopt(b, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);
    errno = 0;
    CHECK(connect(b, (struct sockaddr *)&to, sizeof to) == -1 && errno == ECONNREFUSED);
    errno = 0;
    CHECK(connect(b, (struct sockaddr *)&to, sizeof to) == -1 && errno == ECONNREFUSED);

    int n = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(n >= 0);
    int rc = connect(n, (struct sockaddr *)&to, sizeof to);
    CHECK(rc == -1 && (errno == EINPROGRESS || errno == ECONNREFUSED));
    if (errno == EINPROGRESS) {
        struct pollfd p = {n, POLLOUT, 0};
        CHECK(poll(&p, 1, 20000) == 1 && (p.revents & (POLLERR | POLLHUP)));
        int err = -1;
        socklen_t len = sizeof err;
        CHECK(getsockopt(n, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNREFUSED);
        errno = 0;
        CHECK(connect(n, (struct sockaddr *)&to, sizeof to) == -1 && errno == ECONNABORTED);
    }

    int l = listen_on(port);
    CHECK(connect(b, (struct sockaddr *)&to, sizeof to) == 0);
    rc = connect(n, (struct sockaddr *)&to, sizeof to);
    CHECK(rc == 0 || errno == EINPROGRESS);
    struct pollfd p = {n, POLLOUT, 0};
    CHECK(poll(&p, 1, 20000) == 1 && (p.revents & POLLOUT) && !(p.revents & (POLLERR | POLLHUP)));
    int err = -1;
    socklen_t len = sizeof err;
    CHECK(getsockopt(n, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0);
    CHECK(connect(n, (struct sockaddr *)&to, sizeof to) == -1 && errno == EISCONN);
    for (int k = 0; k < 2; k++) {
        int a = accept(l, NULL, NULL);
        CHECK(a >= 0);
        CHECK(write(a, "x", 1) == 1);
        close(a);
    }
    char ch;
    CHECK(read(b, &ch, 1) == 1 && ch == 'x');
    struct pollfd q = {n, POLLIN, 0};
    CHECK(poll(&q, 1, 20000) == 1 && read(n, &ch, 1) == 1 && ch == 'x');
    /* Connected once and closed or reset since: EISCONN, as Linux. */
    int c2, s2;
    pair(ppe_ip, &c2, &s2);
    struct linger lg = {1, 0};
    CHECK(setsockopt(s2, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
    close(s2);
    struct pollfd r = {c2, POLLIN, 0};
    CHECK(poll(&r, 1, 20000) == 1);
    CHECK(read(c2, &ch, 1) <= 0); /* the reset (or its end of stream) */
    errno = 0;
    CHECK(connect(c2, (struct sockaddr *)&to, sizeof to) == -1 && errno == EISCONN);
    close(c2);
    close(n);
    close(b);
    close(l);
    return 0;
}

static int sc_accel_epoll(void)
{
    int c, s;
    pair(ppe_ip, &c, &s);
    epoll_semantics(s, c, feed_byte);
    epoll_kernel_members(s, c);
    wake_from_sleep(s, c, 1);
    /* EPOLLRDHUP when the peer shuts down its sending side. */
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = 9}, out;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    CHECK(shutdown(c, SHUT_WR) == 0);
    CHECK(epoll_wait(ep, &out, 1, 5000) == 1 && (out.events & EPOLLRDHUP));
    /* Closing the last descriptor takes it out of the set. */
    close(s);
    CHECK(epoll_wait(ep, &out, 1, 0) == 0);
    close(ep);
    close(c);
    return 0;
}

static int child_status(pid_t pid)
{
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* Sockets survive fork with kernel file semantics: the child uses what it
 * inherited, the parent keeps its own, and a forking server (accept, fork,
 * close in the parent, serve in the child) closes the connection when the
 * child is done. */
static int sc_accel_fork(void)
{
    int c, s;
    pair(ppe_ip, &c, &s);
    signal(SIGPIPE, SIG_IGN);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(20);
        char b;
        /* Inherited: both ends work here. */
        if (write(c, "k", 1) != 1 || read(s, &b, 1) != 1 || b != 'k')
            _exit(10);
        /* New sockets in the child work through the PPE. */
        int c2, s2;
        pair(ppe_ip, &c2, &s2);
        if (write(c2, "n", 1) != 1 || read(s2, &b, 1) != 1 || b != 'n')
            _exit(11);
        _exit(0);
    }
    CHECK(child_status(pid) == 0);
    /* The parent's sockets are untouched by the child's exit. */
    CHECK(write(c, "p", 1) == 1);
    char b;
    CHECK(read(s, &b, 1) == 1 && b == 'p');

    int port;
    int l = listener(&port);
    int c3 = connect_to(ppe_ip, port, 0);
    int s3 = accept(l, NULL, NULL);
    CHECK(s3 >= 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(20);
        if (read(s3, &b, 1) != 1 || b != 'q' || write(s3, "r", 1) != 1)
            _exit(12);
        _exit(0); /* no close: exit closes it, as in the kernel */
    }
    close(s3);
    CHECK(write(c3, "q", 1) == 1);
    CHECK(read(c3, &b, 1) == 1 && b == 'r');
    CHECK(read(c3, &b, 1) == 0); /* EOF once the child, the last holder, is gone */
    CHECK(child_status(pid) == 0);
    close(c3);
    close(l);
    return 0;
}

/* Workers inherit a listener (nginx's master/worker model): the parent and
 * the child both accept from it. */
static int sc_accel_fork_accept(void)
{
    int port;
    int l = listener(&port);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(20);
        int s = accept(l, NULL, NULL);
        if (s < 0 || write(s, "C", 1) != 1)
            _exit(10);
        close(s);
        _exit(0);
    }
    int c1 = connect_to(ppe_ip, port, 0);
    int c2 = connect_to(ppe_ip, port, 0);
    int s = accept(l, NULL, NULL);
    CHECK(s >= 0);
    CHECK(write(s, "P", 1) == 1);
    char b1 = 0, b2 = 0;
    CHECK(read(c1, &b1, 1) == 1 && read(c2, &b2, 1) == 1);
    CHECK((b1 == 'C' && b2 == 'P') || (b1 == 'P' && b2 == 'C'));
    CHECK(child_status(pid) == 0);
    close(s);
    close(c1);
    close(c2);
    close(l);
    return 0;
}

struct blocked {
    int fd;
    pid_t tid; /* set by the reader before it reads */
    ssize_t rc;
    int err;
};

static void *blocked_reader(void *p)
{
    struct blocked *b = p;
    __atomic_store_n(&b->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    char buf[4];
    b->rc = read(b->fd, buf, sizeof buf);
    b->err = errno;
    return NULL;
}

/* The index of a fallback reason in eta_preload_stats.fallbacks, by name. */
static int reason(const char *name)
{
#define REASON_INDEX(i, n) \
    if (!strcmp(name, n))  \
        return i;
    ETA_PRELOAD_REASONS(REASON_INDEX)
#undef REASON_INDEX
    CHECK(!"a reason eta/preload_stats.h names");
    return -1;
}

/* The PPE crashes while a read is blocked in its sleep: it returns, nothing
 * hangs, and new sockets go to the kernel (and work there). */
static int sc_accel_engine_gone(void)
{
    const char *pid = getenv("ETA_TEST_FIXTURE_PID");
    CHECK(pid);
    int c, s;
    pair(ppe_ip, &c, &s);
    struct blocked b = {s, 0, 0, 0};
    uint64_t sleeps = own_sleeps();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, blocked_reader, &b) == 0);
    struct timespec tick = {0, 1000000};
    for (int i = 0; i < 10000 && !__atomic_load_n(&b.tid, __ATOMIC_ACQUIRE); i++)
        nanosleep(&tick, NULL);
    CHECK(b.tid);
    /* The crash comes only once the reader sleeps, not while it spins. */
    CHECK(wait_until_asleep(b.tid, sleeps, 1));
    CHECK(kill(atoi(pid), SIGUSR1) == 0);
    pthread_join(t, NULL);
    CHECK(b.rc <= 0);
    CHECK(b.rc == 0 || b.err == ECONNRESET);
    signal(SIGPIPE, SIG_IGN);
    CHECK(write(c, "x", 1) == -1 && (errno == EPIPE || errno == ECONNRESET));
    struct pollfd p = {c, POLLIN, 0};
    CHECK(poll(&p, 1, 1000) == 1 && (p.revents & (POLLERR | POLLHUP)));

    /* New sockets go to the kernel: a listener on INADDR_ANY (on the PPE
     * and the kernel while one serves) is a kernel socket now, counted as
     * such, and a connection through it works. */
    struct eta_preload_stats before, after;
    CHECK(own_stats(&before));
    int port;
    int l = listener(&port);
    int k = connect_to("127.0.0.1", port, 0);
    int ks = accept(l, NULL, NULL);
    CHECK(ks >= 0);
    char ch;
    CHECK(write(k, "K", 1) == 1 && read(ks, &ch, 1) == 1 && ch == 'K');
    CHECK(own_stats(&after));
    CHECK(after.attached == 0);
    CHECK(after.fallbacks[reason("accelerated")] == before.fallbacks[reason("accelerated")]);
    CHECK(after.fallbacks[reason("no-ppe")] >= before.fallbacks[reason("no-ppe")] + 1);
    close(k);
    close(ks);
    close(l);
    return 0;
}

/* Attached to a PPE whose network is not 127.0.0.0/8: a connection to
 * 127.0.0.1 goes to the kernel and is counted as a loopback fallback. */
static int sc_accel_loopback_counted(void)
{
    struct eta_preload_stats before, after;
    int c0 = socket(AF_INET, SOCK_STREAM, 0); /* makes the counters file */
    CHECK(c0 >= 0);
    close(c0);
    CHECK(own_stats(&before));
    CHECK(before.attached == 1);
    int c, s;
    pair("127.0.0.1", &c, &s);
    CHECK(write(c, "L", 1) == 1);
    char ch;
    CHECK(read(s, &ch, 1) == 1 && ch == 'L');
    CHECK(own_stats(&after));
    CHECK(after.fallbacks[reason("loopback")] >= before.fallbacks[reason("loopback")] + 1);
    close(c);
    close(s);
    return 0;
}

/* The counters file exists while the program runs (its path is printed
 * for the runner, which checks that exit removed it) and counts the
 * accelerated sockets. */
static int sc_accel_counters(void)
{
    int c, s;
    pair(ppe_ip, &c, &s);
    struct eta_preload_stats st;
    CHECK(own_stats(&st));
    CHECK(st.pid == getpid() && st.attached == 1);
    CHECK(st.fallbacks[reason("accelerated")] >= 2); /* the listener and the client */
    CHECK(st.accepted >= 1);
    printf("counters %s.preload/%d\n", getenv("ETA_SOCKET"), (int)getpid());
    close(c);
    close(s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCENARIO\n", argv[0]);
        return 2;
    }
    const char *sc = argv[1];
    int rc = 2;
    if (!strcmp(sc, "loaded"))
        rc = sc_loaded();
    else if (!strcmp(sc, "tcp_echo"))
        rc = sc_tcp_echo("127.0.0.1");
    else if (!strcmp(sc, "epoll"))
        rc = sc_epoll_kernel();
    else if (!strcmp(sc, "poll_select"))
        rc = sc_poll_select("127.0.0.1");
    else if (!strcmp(sc, "dup"))
        rc = sc_dup("127.0.0.1");
    else if (!strcmp(sc, "accel_echo"))
        rc = sc_tcp_echo(ppe_ip);
    else if (!strcmp(sc, "accel_basics"))
        rc = sc_accel_basics();
    else if (!strcmp(sc, "accel_nonblock"))
        rc = sc_accel_nonblock();
    else if (!strcmp(sc, "accel_connect_taken"))
        rc = sc_accel_connect_taken();
    else if (!strcmp(sc, "accel_connect_again"))
        rc = sc_accel_connect_again();
    else if (!strcmp(sc, "accel_epoll"))
        rc = sc_accel_epoll();
    else if (!strcmp(sc, "accel_poll_select"))
        rc = sc_poll_select(ppe_ip);
    else if (!strcmp(sc, "accel_dup"))
        rc = sc_dup(ppe_ip);
    else if (!strcmp(sc, "accel_fork"))
        rc = sc_accel_fork();
    else if (!strcmp(sc, "accel_fork_accept"))
        rc = sc_accel_fork_accept();
    else if (!strcmp(sc, "accel_engine_gone"))
        rc = sc_accel_engine_gone();
    else if (!strcmp(sc, "accel_loopback_counted"))
        rc = sc_accel_loopback_counted();
    else if (!strcmp(sc, "accel_counters"))
        rc = sc_accel_counters();
    else
        fprintf(stderr, "unknown scenario %s\n", sc);
    if (rc == 0)
        printf("OK\n");
    return rc;
}
