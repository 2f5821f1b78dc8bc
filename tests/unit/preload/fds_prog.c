/* Descriptor numbers under libeta-preload.so attached to dti's loopback TEST
 * FIXTURE engine (run by run_readiness_tests.py; ETA_NET names 10.9.0.1/24),
 * issue 35 items 3 to 5. One scenario per run:
 *
 *  closefrom   closefrom(), close_range() with and without CLOSE_RANGE_CLOEXEC
 *              and CLOSE_RANGE_UNSHARE, and syscall(SYS_close_range) leave the
 *              shim's and libdti's descriptors alone (the program goes on
 *              making accelerated sockets; a file it opens next closes
 *              without EBADF, as varnishd's did not) and close the program's
 *              accelerated sockets as close() does (the peer reads EOF);
 *  numbers     every number a kernel process could take is the program's:
 *              libdti's and the shim's descriptors sit high (none under 64),
 *              dup2/dup3 onto any of them succeeds (sshd's re-exec dup2()s
 *              onto 4 and 5), the descriptor moves aside and the sockets go
 *              on working, also after the program lowers RLIMIT_NOFILE and
 *              in a new image after exec;
 *  chain       a connection stays one socket through fork + exec + fork +
 *              exec, as under git daemon: the listener's child dup2()s it onto
 *              0 and 1 and execs; that image dup()s 0 and 1, forks, the child
 *              dup2()s them back onto 0 and 1 and execs, and the intermediate
 *              closes all its copies (before the last image adopts them,
 *              while it holds them, after it exited); the last image reads
 *              the request on 0 and answers on 1, through stdio (fread,
 *              printf, fflush: git's ls-refs) and read/write. */
#include <arpa/inet.h>
#include <errno.h>
#include <eta/preload_stats.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define FD_SCAN 1024

static int listener(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0);
    return l;
}

static void connect_to(int l, int *client, int *server)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    *client = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(*client >= 0);
    inet_pton(AF_INET, "10.9.0.1", &a.sin_addr);
    CHECK(connect(*client, (struct sockaddr *)&a, sizeof a) == 0);
    *server = accept(l, NULL, NULL);
    CHECK(*server >= 0);
}

static void pair(int *client, int *server)
{
    int l = listener();
    connect_to(l, client, server);
    CHECK(close(l) == 0);
}

static void echo(int a, int b)
{
    char buf[8];
    CHECK(write(a, "ping", 4) == 4);
    CHECK(read(b, buf, sizeof buf) == 4 && memcmp(buf, "ping", 4) == 0);
    CHECK(write(b, "pong", 4) == 4);
    CHECK(read(a, buf, sizeof buf) == 4 && memcmp(buf, "pong", 4) == 0);
}

static int find_own_stats(const struct eta_preload_stats *st, void *arg)
{
    if (st->pid == getpid())
        *(struct eta_preload_stats *)arg = *st;
    return 0;
}

static struct eta_preload_stats stats(void)
{
    struct eta_preload_stats st = {0};
    CHECK(eta_preload_stats_each(getenv("ETA_SOCKET"), find_own_stats, &st) == 1);
    return st;
}

/* Descriptors open at start (inherited: not the shim's). */
static bool at_start[FD_SCAN];

/* The descriptors open now that the program did not open (mine[] lists its
 * own): libdti's and the shim's. */
static int theirs(const int *mine, int n_mine, int *out, int max)
{
    int n = 0;
    for (int fd = 0; fd < FD_SCAN && n < max; fd++) {
        if (fcntl(fd, F_GETFD) < 0)
            continue;
        bool own = fd <= 2 || at_start[fd];
        for (int i = 0; i < n_mine && !own; i++)
            own = mine[i] == fd;
        if (!own)
            out[n++] = fd;
    }
    return n;
}

static void all_open(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fcntl(fds[i], F_GETFD) < 0) {
            printf("FAIL descriptor %d of the shim's was closed\n", fds[i]);
            CHECK(fcntl(fds[i], F_GETFD) >= 0);
        }
}

/* What varnishd does after closefrom(): a file opened next closes cleanly. */
static void open_close(void)
{
    for (int i = 0; i < 8; i++) {
        int f = open("/dev/null", O_RDONLY);
        CHECK(f >= 0);
        CHECK(close(f) == 0);
    }
}

static void *echo_thread(void *arg)
{
    int *p = arg;
    echo(p[0], p[1]);
    return NULL;
}

/* A thread of its own (a context of its own: an eventfd and an epoll set). */
static void echo_in_thread(int a, int b)
{
    int p[2] = {a, b};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, echo_thread, p) == 0);
    CHECK(pthread_join(t, NULL) == 0);
}

struct held {
    int c, s, hold;
};

static void *held_thread(void *arg)
{
    struct held *h = arg;
    echo(h->c, h->s);
    CHECK(write(h->hold, "!", 1) == 1);
    char b;
    while (read(h->hold, &b, 1) > 0)
        ;
    echo(h->c, h->s);
    return NULL;
}

/* ---- closefrom ------------------------------------------------------------- */

/* A socket closed by one of the bulk calls is closed as close() closes it:
 * its peer reads EOF through the PPE. */
static void closes_properly(int (*bulk)(int fd))
{
    int c, s;
    pair(&c, &s);
    echo(c, s);
    uint64_t open_before = stats().accel_open;
    CHECK(bulk(c) == 0);
    CHECK(fcntl(c, F_GETFD) < 0 && errno == EBADF);
    char b;
    CHECK(read(s, &b, 1) == 0);
    CHECK(stats().accel_open == open_before - 1);
    CHECK(close(s) == 0);
}

static int by_close_range(int fd) { return close_range((unsigned)fd, (unsigned)fd, 0); }
static int by_syscall(int fd) { return (int)syscall(SYS_close_range, fd, fd, 0); }
static int by_unshare(int fd) { return close_range((unsigned)fd, (unsigned)fd, CLOSE_RANGE_UNSHARE); }

static int sc_closefrom(void)
{
    int c, s;
    pair(&c, &s);
    echo(c, s);
    echo_in_thread(c, s);
    int mine[] = {c, s};
    int shim[64];
    int n_shim = theirs(mine, 2, shim, 64);
    CHECK(n_shim >= 4); /* control socket, doorbell, region, socket state (+ a context) */

    /* CLOSE_RANGE_CLOEXEC: the program's descriptors become close-on-exec. */
    CHECK(close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) == 0);
    CHECK(fcntl(c, F_GETFD) == FD_CLOEXEC && fcntl(s, F_GETFD) == FD_CLOEXEC);
    all_open(shim, n_shim);
    echo(c, s);

    closes_properly(by_close_range);
    closes_properly(by_syscall);
    closes_properly(by_unshare);
    /* c was made after s: closefrom(c) closes only c and what is above it. */
    int c2, s2;
    pair(&s2, &c2);
    int first = c2 > s2 ? c2 : s2, other = c2 > s2 ? s2 : c2;
    echo(first, other);
    closefrom(first);
    char b;
    CHECK(read(other, &b, 1) == 0);
    CHECK(close(other) == 0);
    all_open(shim, n_shim);

    /* Everything above 2, through each way in turn. */
    CHECK(close_range(3, ~0u, CLOSE_RANGE_UNSHARE) == 0);
    all_open(shim, n_shim);
    open_close();
    pair(&c, &s);
    echo(c, s);
    CHECK(syscall(SYS_close_range, 3, ~0u, 0) == 0);
    all_open(shim, n_shim);
    open_close();
    pair(&c, &s);
    echo(c, s);
    closefrom(3);
    all_open(shim, n_shim);
    CHECK(stats().accel_open == 0);
    open_close();
    pair(&c, &s);
    echo(c, s);
    echo_in_thread(c, s);
    CHECK(stats().accel_open == 2);
    closefrom(3);
    open_close();
    return 0;
}

/* ---- numbers ------------------------------------------------------------------ */

/* dup2 (or dup3) of a pipe onto each of the shim's descriptors: the number is
 * the program's, the sockets go on working. */
static void take_all(const int *shim, int n_shim, int c, int s, bool three)
{
    int p[2];
    CHECK(pipe(p) == 0);
    struct stat want;
    CHECK(fstat(p[0], &want) == 0);
    for (int i = 0; i < n_shim; i++) {
        int n = shim[i];
        if (n == p[0] || n == p[1])
            continue;
        errno = 0;
        int r = three ? dup3(p[0], n, O_CLOEXEC) : dup2(p[0], n);
        if (r != n)
            printf("FAIL %s onto the shim's descriptor %d: %d (%s)\n", three ? "dup3" : "dup2", n, r,
                   strerror(errno));
        CHECK(r == n);
        struct stat got;
        CHECK(fstat(n, &got) == 0 && got.st_ino == want.st_ino && got.st_dev == want.st_dev);
        CHECK(close(n) == 0);
    }
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
    echo(c, s);
    echo_in_thread(c, s);
}

static void none_low(const int *shim, int n_shim, const char *where)
{
    for (int i = 0; i < n_shim; i++)
        if (shim[i] < 64) {
            printf("FAIL %s: descriptor %d is the shim's (or libdti's): a program may take it\n", where, shim[i]);
            CHECK(shim[i] >= 64);
        }
}

/* dup2 onto every low number, as sshd's re-exec does onto 4 and 5. */
static void low_numbers_free(int c, int s)
{
    int p[2];
    CHECK(pipe(p) == 0);
    for (int n = 3; n < 64; n++) {
        if (n == p[0] || n == p[1] || n == c || n == s || fcntl(n, F_GETFD) >= 0)
            continue;
        CHECK(dup2(p[1], n) == n);
        int above = fcntl(n, F_DUPFD, n); /* past it, as the kernel would */
        CHECK(above > n && close(above) == 0);
        CHECK(close(n) == 0);
    }
    CHECK(close(p[0]) == 0 && close(p[1]) == 0);
}

static int sc_numbers(int argc, char **argv)
{
    int c, s;
    if (argc >= 5) { /* the new image after exec: c and s handed over */
        c = atoi(argv[2]);
        s = atoi(argv[3]);
    } else {
        pair(&c, &s);
    }
    echo(c, s);
    echo_in_thread(c, s);
    int ep = epoll_create1(0); /* an emulated epoll set with an accelerated member: the shim's wake-up */
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s};
    CHECK(ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    CHECK(write(c, "x", 1) == 1);
    CHECK(epoll_wait(ep, &ev, 1, 10000) == 1 && ev.data.fd == s);
    char b;
    CHECK(read(s, &b, 1) == 1);
    int mine[] = {c, s, ep};
    int shim[64];
    int n_shim = theirs(mine, 3, shim, 64);
    CHECK(n_shim >= 4);
    none_low(shim, n_shim, argc >= 5 ? "after exec" : "at start");
    low_numbers_free(c, s);
    take_all(shim, n_shim, c, s, false);
    n_shim = theirs(mine, 3, shim, 64);
    none_low(shim, n_shim, "after dup2");
    take_all(shim, n_shim, c, s, true);
    /* The epoll set still works with its wake-up moved. */
    CHECK(write(c, "y", 1) == 1);
    CHECK(epoll_wait(ep, &ev, 1, 10000) == 1 && ev.data.fd == s);
    CHECK(read(s, &b, 1) == 1);
    if (argc >= 5) {
        /* A lower RLIMIT_NOFILE: a new thread's context and a move still work. */
        struct rlimit r = {128, 128};
        CHECK(setrlimit(RLIMIT_NOFILE, &r) == 0);
        /* A thread made now has its context's descriptors under the new limit;
         * it stays until told, then uses them again. */
        int hold[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, hold) == 0);
        int mine2[] = {c, s, ep, hold[0], hold[1]};
        struct held h = {c, s, hold[1]};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, held_thread, &h) == 0);
        char go;
        CHECK(read(hold[0], &go, 1) == 1); /* its first echo is done */
        n_shim = theirs(mine2, 5, shim, 64);
        int below[64], n_below = 0;
        for (int i = 0; i < n_shim; i++) {
            if (shim[i] < 128) {
                below[n_below++] = shim[i];
                continue;
            }
            errno = 0; /* above the limit: the kernel's EBADF, and the descriptor stays */
            CHECK(dup2(c, shim[i]) == -1 && errno == EBADF);
        }
        CHECK(n_below >= 2); /* the thread's eventfd and epoll set */
        all_open(shim, n_shim);
        take_all(below, n_below, c, s, false);
        CHECK(close(hold[0]) == 0); /* the thread echoes again through its moved descriptors */
        CHECK(pthread_join(t, NULL) == 0);
        return 0;
    }
    /* exec keeps c and s; the new image's descriptors are high too. */
    CHECK(close(ep) == 0);
    char a1[16], a2[16], inherited[256] = "-1";
    snprintf(a1, sizeof a1, "%d", c);
    snprintf(a2, sizeof a2, "%d", s);
    for (int fd = 0; fd < FD_SCAN; fd++)
        if (at_start[fd])
            snprintf(inherited + strlen(inherited), sizeof inherited - strlen(inherited), ",%d", fd);
    execl("/proc/self/exe", argv[0], "numbers", a1, a2, inherited, (char *)NULL);
    CHECK(!"exec failed");
    return 1;
}

/* ---- chain ---------------------------------------------------------------------- */

/* The last image: the request on 0, the answer on 1, through glibc's
 * stdin and stdout as git upload-pack's ls-refs answers (fwrite, fflush: a
 * dead placeholder would give EPIPE and SIGPIPE), then plain read/write;
 * fileno() still names them. */
static int chain_last(int argc, char **argv)
{
    char buf[16];
    CHECK(fileno(stdin) == 0 && fileno(stdout) == 1);
    CHECK(fread(buf, 1, 4, stdin) == 4 && memcmp(buf, "req?", 4) == 0);
    if (argc >= 4) { /* "during": the intermediate closes its copies now, while this image holds them */
        int told = atoi(argv[2]), done = atoi(argv[3]);
        CHECK(write(told, "r", 1) == 1);
        CHECK(read(done, buf, 1) == 0);
    }
    CHECK(printf("ans!") == 4 && fwrite("ans!", 1, 4, stdout) == 4 && fflush(stdout) == 0);
    CHECK(write(1, "ans!", 4) == 4);
    CHECK(read(0, buf, 4) == 4 && memcmp(buf, "more", 4) == 0);
    CHECK(write(1, "done", 4) == 4);
    return 0;
}

/* The intermediate (git daemon --serve): dup(0), dup(1), fork; the child puts
 * them back on 0 and 1 and execs; the parent closes all its copies, before
 * the child execs (late = 0) or after the child read its request (late = 1:
 * told through a pipe). */
static int chain_middle(char **argv, int when)
{
    int in = dup(0), out = dup(1);
    CHECK(in >= 0 && out >= 0);
    int go[2], told[2], done[2];
    CHECK(pipe(go) == 0 && pipe(told) == 0 && pipe(done) == 0);
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) {
        CHECK(close(go[1]) == 0 && close(told[0]) == 0 && close(done[1]) == 0);
        char b;
        if (when == 0) /* early: until the parent closed its copies */
            CHECK(read(go[0], &b, 1) == 0);
        CHECK(close(go[0]) == 0);
        CHECK(dup2(in, 0) == 0 && close(in) == 0);
        CHECK(dup2(out, 1) == 1 && close(out) == 0);
        char a1[16], a2[16];
        snprintf(a1, sizeof a1, "%d", told[1]);
        snprintf(a2, sizeof a2, "%d", done[0]);
        if (when == 2)
            execl("/proc/self/exe", argv[0], "chain_last", a1, a2, (char *)NULL);
        else
            execl("/proc/self/exe", argv[0], "chain_last", (char *)NULL);
        _exit(3);
    }
    CHECK(close(go[0]) == 0 && close(told[1]) == 0 && close(done[0]) == 0);
    int st = 0;
    char b;
    if (when == 1) { /* late: after the last image is gone */
        CHECK(close(go[1]) == 0);
        CHECK(waitpid(p, &st, 0) == p);
    } else if (when == 2) { /* during: once the last image adopted them and read the request */
        CHECK(read(told[0], &b, 1) == 1);
    }
    CHECK(close(in) == 0 && close(out) == 0);
    CHECK(close(0) == 0 && close(1) == 0);
    CHECK(close(done[1]) == 0 && close(told[0]) == 0);
    if (when != 1) {
        CHECK(close(go[1]) == 0);
        CHECK(waitpid(p, &st, 0) == p);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void chain_round(char **argv, const char *middle)
{
    int l = listener();
    int c, s;
    connect_to(l, &c, &s);
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) { /* the listener's child: the connection on 0 and 1 */
        CHECK(close(l) == 0 && close(c) == 0);
        CHECK(dup2(s, 0) == 0 && dup2(s, 1) == 1 && close(s) == 0);
        execl("/proc/self/exe", argv[0], middle, (char *)NULL);
        _exit(3);
    }
    CHECK(close(s) == 0); /* the listener closes its copy */
    CHECK(write(c, "req?", 4) == 4);
    char buf[16];
    size_t got = 0;
    while (got < 12) {
        ssize_t n = read(c, buf + got, 12 - got);
        if (n <= 0)
            printf("FAIL %s: the answer ended after %zu bytes (%zd, %s)\n", middle, got, n, strerror(errno));
        CHECK(n > 0);
        got += (size_t)n;
    }
    CHECK(memcmp(buf, "ans!ans!ans!", 12) == 0);
    CHECK(write(c, "more", 4) == 4);
    CHECK(read(c, buf, 4) == 4 && memcmp(buf, "done", 4) == 0);
    int st = 0;
    CHECK(waitpid(p, &st, 0) == p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        printf("FAIL %s: the chain ended with status %#x\n", middle, st);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char b;
    CHECK(read(c, &b, 1) == 0); /* every copy closed: EOF */
    CHECK(close(c) == 0 && close(l) == 0);
}

static int sc_chain(char **argv)
{
    chain_round(argv, "chain_middle_early");
    chain_round(argv, "chain_middle_late");
    chain_round(argv, "chain_middle_during");
    return 0;
}

int main(int argc, char **argv)
{
    const char *sock = getenv("ETA_SOCKET");
    if (argc < 2 || !sock) {
        fprintf(stderr, "usage: ETA_SOCKET=PATH %s closefrom|numbers|chain\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_DFL);
    if (argc >= 5) { /* after exec: libdti's descriptors are open already; the list says what was inherited */
        for (char *p = argv[4]; *p;) {
            int fd = (int)strtol(p, &p, 10);
            if (fd >= 0 && fd < FD_SCAN)
                at_start[fd] = true;
            p += *p == ',';
        }
    } else {
        for (int fd = 0; fd < FD_SCAN; fd++)
            at_start[fd] = fcntl(fd, F_GETFD) >= 0;
    }
    alarm(60);
    int rc;
    if (strcmp(argv[1], "chain_last") == 0)
        return chain_last(argc, argv);
    if (strcmp(argv[1], "chain_middle_early") == 0)
        return chain_middle(argv, 0);
    if (strcmp(argv[1], "chain_middle_late") == 0)
        return chain_middle(argv, 1);
    if (strcmp(argv[1], "chain_middle_during") == 0)
        return chain_middle(argv, 2);
    if (strcmp(argv[1], "closefrom") == 0)
        rc = sc_closefrom();
    else if (strcmp(argv[1], "numbers") == 0)
        rc = sc_numbers(argc, argv);
    else if (strcmp(argv[1], "chain") == 0)
        rc = sc_chain(argv);
    else {
        fprintf(stderr, "unknown scenario %s\n", argv[1]);
        return 2;
    }
    if (rc == 0)
        printf("OK\n");
    return rc;
}
