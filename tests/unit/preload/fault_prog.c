/* TEST PROGRAM for the preload unit tests (issue 35, item 9): buffers that
 * reach into an unmapped hole, run under libeta-preload.so attached to dti's
 * loopback TEST FIXTURE engine.
 *
 *   hole     every data call (sendfile's offset, the mmsg vectors too) with a
 *            buffer that starts valid and runs into a hole, or lies wholly in it, answers what the kernel answers for
 *            the same call on a kernel TCP connection over lo (compared call
 *            by call: EFAULT, nothing sent, nothing consumed), and both
 *            connections carry every byte afterwards, byte-exact
 *   partial  a blocking send of 4 MiB whose last part is a hole: the kernel
 *            and the shim each answer a short count (or EFAULT) and the peer
 *            receives exactly that many bytes of the pattern, then a marker
 *   handler  the program's own SIGSEGV handler (SA_SIGINFO) runs for its own
 *            fault with its siginfo, is reported back by sigaction() exactly
 *            as set, and leaves with siglongjmp; SA_RESETHAND and signal()
 *            as the kernel does them; a stack overflow reaches it on its
 *            sigaltstack; sockets work before and after
 *   dfl      a fault under SIG_DFL (and under SIG_IGN) still kills with
 *            SIGSEGV; SIGSEGV from kill() under SIG_IGN is ignored
 * Prints "OK" or the failed check. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static const char *ppe = "10.9.0.1"; /* the fixture engine's network: accelerated */
static long pg;

static void only_lo(int fd)
{
    CHECK(setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, "lo", 3) == 0);
}

/* A connected pair to ip (127.0.0.1: the kernel's; the fixture's: the
 * shim's): c the client, s the accepted side. */
static void pair(const char *ip, int *c, int *s)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    only_lo(l);
    struct sockaddr_in a = {.sin_family = AF_INET};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(l, 4) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    *c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(*c >= 0);
    only_lo(*c);
    inet_pton(AF_INET, ip, &a.sin_addr);
    CHECK(connect(*c, (struct sockaddr *)&a, sizeof a) == 0);
    *s = accept(l, NULL, NULL);
    CHECK(*s >= 0);
    close(l);
}

/* Three pages with a hole in the middle: valid bytes end at hole. The
 * hole is PROT_NONE rather than unmapped: an unmapped page is where the
 * next mapping (the shim's, libdti's, a thread's stack) may land; this one
 * stays a hole, and faults as an unmapped one does (SIGSEGV; the kernel's
 * copies answer EFAULT). */
static char *area(void)
{
    char *a = mmap(NULL, 3 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(a != MAP_FAILED);
    CHECK(mprotect(a + pg, (size_t)pg, PROT_NONE) == 0);
    for (long i = 0; i < pg; i++)
        a[i] = (char)('a' + i % 26);
    return a + pg;
}

/* Reads exactly n bytes (blocking), each bounded by poll. */
static void read_exact(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd p = {fd, POLLIN, 0};
        CHECK(poll(&p, 1, 10000) == 1);
        ssize_t r = read(fd, buf + got, n - got);
        CHECK(r > 0);
        got += (size_t)r;
    }
}

/* Nothing more is readable now: what a call under test must not have sent
 * arrives before a marker written after it, so reading the marker first
 * proves it; this checks nothing is left behind it either. */
static void nothing_more(int fd)
{
    char b;
    errno = 0;
    CHECK(recv(fd, &b, 1, MSG_DONTWAIT) == -1 && errno == EAGAIN);
}

/* The answers of one run: rc and errno per call, compared kernel vs shim. */
#define MAX_CALLS 64
struct answers {
    int n;
    long rc[MAX_CALLS];
    int err[MAX_CALLS];
    const char *what[MAX_CALLS];
};

static void note(struct answers *a, const char *what, long rc)
{
    CHECK(a->n < MAX_CALLS);
    a->what[a->n] = what;
    a->rc[a->n] = rc;
    a->err[a->n] = rc < 0 ? errno : 0;
    a->n++;
}

#define CALL(a, call)                                                                                             \
    do {                                                                                                      \
        errno = 0;                                                                                            \
        note((a), #call, (long)(call));                                                                       \
        if (getenv("FAULT_PROG_VERBOSE"))                                                                     \
            printf("  %s: %ld (%s)\n", #call, (a)->rc[(a)->n - 1], strerror((a)->err[(a)->n - 1]));              \
    } while (0)

/* Every data call with a bad buffer, on a connection both ends of which
 * work; then every byte still goes through, nothing more. */
static void hole_calls(int c, int s, char *hole, struct answers *a)
{
    char tmp[256];
    struct iovec two[2] = {{"ab", 2}, {hole - 10, 100}};
    struct iovec in_hole = {hole + 8, 16};
    struct msghdr m = {.msg_iov = two, .msg_iovlen = 2};
    struct msghdr m1 = {.msg_iov = &in_hole, .msg_iovlen = 1};
    struct msghdr m_iov_in_hole = {.msg_iov = (struct iovec *)(hole + 64), .msg_iovlen = 1};
    /* sends: the fast path (<= 64 bytes), the general one, wholly in the hole */
    CALL(a, send(c, hole - 10, 40, 0));
    CALL(a, write(c, hole - 1, 2));
    CALL(a, send(c, hole - 30, 64, MSG_DONTWAIT | MSG_NOSIGNAL));
    CALL(a, write(c, hole - 100, 200));
    CALL(a, send(c, hole - 3000, 5000, 0));
    CALL(a, sendto(c, hole - 10, 11, 0, NULL, 0));
    CALL(a, write(c, hole + 5, 10));
    CALL(a, writev(c, two, 2));
    CALL(a, writev(c, (struct iovec *)(hole + 16), 2));
    CALL(a, sendmsg(c, &m, 0));
    CALL(a, sendmsg(c, &m1, MSG_NOSIGNAL));
    CALL(a, sendmsg(c, &m_iov_in_hole, 0));
    CALL(a, sendmsg(c, (struct msghdr *)(hole + 32), 0));
    CALL(a, sendmmsg(c, (struct mmsghdr *)(hole + 48), 1, 0));
    FILE *f = tmpfile();
    CHECK(f != NULL && fwrite("0123456789", 1, 10, f) == 10 && fflush(f) == 0);
    CALL(a, sendfile(c, fileno(f), (off_t *)(hole + 300), 10));
    fclose(f);
    /* nothing of them was sent: the marker comes first */
    CHECK(write(c, "mark", 4) == 4);
    read_exact(s, tmp, 4);
    CHECK(memcmp(tmp, "mark", 4) == 0);
    nothing_more(s);
    /* receives, with 250 bytes waiting: none is consumed */
    char data[250];
    for (int i = 0; i < 250; i++)
        data[i] = (char)i;
    CHECK(write(c, data, sizeof data) == (ssize_t)sizeof data);
    for (int tries = 0; recv(s, tmp, sizeof data, MSG_PEEK) < (ssize_t)sizeof data; tries++) {
        struct pollfd p = {s, POLLIN, 0};
        CHECK(tries < 1000 && poll(&p, 1, 10) >= 0); /* the rest is on its way */
    }
    struct iovec rv[2] = {{tmp, 2}, {hole - 10, 100}};
    struct iovec rv_hole = {hole + 100, 30};
    struct msghdr rm = {.msg_iov = rv, .msg_iovlen = 2};
    struct msghdr rm1 = {.msg_iov = &rv_hole, .msg_iovlen = 1};
    socklen_t *alen_in_hole = (socklen_t *)(hole + 200);
    CALL(a, recv(s, hole - 10, 40, 0));
    CALL(a, read(s, hole - 1, 2));
    CALL(a, recv(s, hole - 30, 64, MSG_DONTWAIT));
    CALL(a, read(s, hole - 100, 200));
    CALL(a, recvfrom(s, hole - 10, 11, 0, NULL, NULL));
    CALL(a, recvfrom(s, tmp, 11, MSG_PEEK, (struct sockaddr *)tmp, alen_in_hole));
    CALL(a, read(s, hole + 5, 10));
    CALL(a, recv(s, hole - 10, 40, MSG_PEEK));
    CALL(a, readv(s, rv, 2));
    CALL(a, readv(s, (struct iovec *)(hole + 16), 2));
    CALL(a, recvmsg(s, &rm, 0));
    CALL(a, recvmsg(s, &rm1, 0));
    CALL(a, recvmsg(s, (struct msghdr *)(hole + 32), 0));
    CALL(a, recvmmsg(s, (struct mmsghdr *)(hole + 48), 1, MSG_DONTWAIT, NULL));
    /* all 250 bytes are still there, in order; then the connection goes on */
    read_exact(s, tmp, sizeof data);
    CHECK(memcmp(tmp, data, sizeof data) == 0);
    nothing_more(s);
    /* a valid buffer next to the hole works (the last 64 and 10 bytes before it) */
    CHECK(write(c, hole - 64, 64) == 64 && write(c, hole - 10, 10) == 10);
    read_exact(s, tmp, 74);
    CHECK(memcmp(tmp, hole - 64, 64) == 0 && memcmp(tmp + 64, hole - 10, 10) == 0);
    CHECK(write(s, "pong", 4) == 4);
    read_exact(c, hole - 4, 4);
    CHECK(memcmp(hole - 4, "pong", 4) == 0);
}

static int sc_hole(void)
{
    char *hole = area();
    struct answers ans[2];
    const char *ips[] = {"127.0.0.1", ppe}; /* the kernel's answers first */
    for (int i = 0; i < 2; i++) {
        memset(&ans[i], 0, sizeof ans[i]);
        int c, s;
        pair(ips[i], &c, &s);
        hole_calls(c, s, hole, &ans[i]);
        hole_calls(c, s, hole, &ans[i] + 0); /* again: the same answers (appended) */
        close(c);
        close(s);
    }
    CHECK(ans[0].n == ans[1].n);
    int bad = 0;
    for (int k = 0; k < ans[0].n; k++) {
        bool same = ans[0].rc[k] == ans[1].rc[k] && ans[0].err[k] == ans[1].err[k];
        if (!same || getenv("FAULT_PROG_VERBOSE"))
            printf("%s %s: kernel %ld (%s), shim %ld (%s)\n", same ? "same" : "DIFFERENT", ans[0].what[k],
                   ans[0].rc[k], strerror(ans[0].err[k]), ans[1].rc[k], strerror(ans[1].err[k]));
        bad += !same;
    }
    CHECK(bad == 0);
    return 0;
}

/* ---- partial: a blocking send that runs into the hole ------------------------ */

struct reader {
    int fd;
    size_t got;
    unsigned char *buf;
    size_t cap;
};

/* Reads until the 8-byte marker "ENDENDEN" ends the stream of bytes. */
static void *read_all(void *arg)
{
    struct reader *r = arg;
    for (;;) {
        struct pollfd p = {r->fd, POLLIN, 0};
        CHECK(poll(&p, 1, 20000) == 1);
        ssize_t n = read(r->fd, r->buf + r->got, r->cap - r->got);
        CHECK(n > 0);
        r->got += (size_t)n;
        if (r->got >= 8 && memcmp(r->buf + r->got - 8, "ENDENDEN", 8) == 0)
            return NULL;
    }
}

static int sc_partial(void)
{
    const size_t valid = 4u << 20, total = valid + (size_t)pg;
    char *big = mmap(NULL, total + (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(big != MAP_FAILED);
    CHECK(mprotect(big + valid, (size_t)pg, PROT_NONE) == 0);
    for (size_t i = 0; i < valid; i++)
        big[i] = (char)(i * 7 + (i >> 12));
    const char *ips[] = {"127.0.0.1", ppe};
    for (int i = 0; i < 2; i++) {
        int c, s;
        pair(ips[i], &c, &s);
        struct reader r = {s, 0, malloc(valid + 64), valid + 64};
        CHECK(r.buf != NULL);
        pthread_t t;
        CHECK(pthread_create(&t, NULL, read_all, &r) == 0);
        errno = 0;
        ssize_t n = send(c, big, total, 0);
        int e = errno;
        printf("%s: send of %zu bytes, %zu valid: %zd (%s)\n", i ? "shim" : "kernel", total, valid, n,
               n < 0 ? strerror(e) : "short");
        CHECK((n < 0 && e == EFAULT) || (n > 0 && (size_t)n <= valid)); /* short, never past the hole */
        CHECK(write(c, "ENDENDEN", 8) == 8);
        CHECK(pthread_join(t, NULL) == 0);
        size_t sent = n < 0 ? 0 : (size_t)n;
        CHECK(r.got == sent + 8);                      /* exactly what the call said it sent */
        CHECK(memcmp(r.buf, big, sent) == 0);          /* byte-exact */
        free(r.buf);
        close(c);
        close(s);
    }
    return 0;
}

/* ---- the program's own handlers --------------------------------------------- */

static sigjmp_buf jb;
static volatile sig_atomic_t handled;
static void *volatile fault_at;
static void *volatile seen_addr;

static void on_segv(int sig, siginfo_t *info, void *uc)
{
    (void)uc;
    handled++;
    seen_addr = info->si_addr;
    CHECK(sig == SIGSEGV && info->si_code == SEGV_ACCERR);
    siglongjmp(jb, 1);
}

static void on_segv_plain(int sig)
{
    CHECK(sig == SIGSEGV);
    handled++;
    siglongjmp(jb, 1);
}

static void fault_once(void *where)
{
    fault_at = where;
    if (sigsetjmp(jb, 1) == 0) {
        *(volatile char *)fault_at = 1;
        CHECK(!"the store into the hole did not fault");
    }
}

/* The connection works, and a bad buffer is still EFAULT, not the handler's. */
static void socket_still(char *hole)
{
    int c, s;
    pair(ppe, &c, &s);
    errno = 0;
    CHECK(write(c, hole - 10, 40) == -1 && errno == EFAULT);
    char b[4];
    CHECK(write(c, "ping", 4) == 4);
    read_exact(s, b, 4);
    CHECK(memcmp(b, "ping", 4) == 0);
    close(c);
    close(s);
}

/* A stack overflow: not the shim's, and its handler runs on the
 * sigaltstack the program gave it (the shim's stands in front with
 * SA_ONSTACK, as the program's asked). */
static volatile sig_atomic_t on_alt;
static char alt[64 * 1024];

static void on_overflow(int sig, siginfo_t *info, void *uc)
{
    (void)info;
    (void)uc;
    char here;
    on_alt = &here >= alt && &here < alt + sizeof alt;
    handled++;
    CHECK(sig == SIGSEGV);
    siglongjmp(jb, 1);
}

static volatile int depth_limit = 1 << 30; /* far beyond any stack: the overflow comes first */

static int deeper(int n)
{
    volatile char frame[512];
    frame[0] = (char)n;
    if (n > depth_limit)
        return 0;
    return deeper(n + 1) + frame[0];
}

static void overflow_once(void)
{
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    CHECK(sigaltstack(&ss, NULL) == 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_overflow;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
    struct rlimit st = {8u << 20, 8u << 20}; /* a bounded stack to overflow */
    CHECK(setrlimit(RLIMIT_STACK, &st) == 0 || errno == EPERM);
    int before = handled;
    if (sigsetjmp(jb, 1) == 0)
        CHECK(deeper(0) == -1); /* never returns */
    CHECK(handled == before + 1 && on_alt);
}

static int sc_handler(void)
{
    char *hole = area();
    socket_still(hole);
    /* SA_SIGINFO with a mask: reported back exactly as set */
    struct sigaction sa, got;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
    CHECK(sigaction(SIGSEGV, NULL, &got) == 0);
    CHECK(got.sa_sigaction == on_segv && (got.sa_flags & (SA_SIGINFO | SA_ONSTACK | SA_RESETHAND | SA_NODEFER)) ==
                                             (SA_SIGINFO | SA_ONSTACK));
    CHECK(sigismember(&got.sa_mask, SIGUSR2) == 1 && sigismember(&got.sa_mask, SIGUSR1) == 0);
    handled = 0;
    fault_once(hole + 123);
    CHECK(handled == 1 && seen_addr == hole + 123);
    socket_still(hole); /* a fault in the shim's copy is still EFAULT, not the program's */
    CHECK(handled == 1);
    fault_once(hole + 7);
    CHECK(handled == 2 && seen_addr == hole + 7);
    /* its mask applied while it ran: SIGUSR2 blocked in the handler, not after (siglongjmp restored) */
    sigset_t now;
    CHECK(sigprocmask(SIG_SETMASK, NULL, &now) == 0 && sigismember(&now, SIGUSR2) == 0);
    /* signal(): no SA_SIGINFO; the old action comes back as set */
    union {
        void (*h)(int);
        void (*s)(int, siginfo_t *, void *);
    } prev = {.h = signal(SIGSEGV, on_segv_plain)};
    CHECK(prev.s == on_segv);
    fault_once(hole + 1);
    CHECK(handled == 3);
    /* SA_RESETHAND: after one fault, SIG_DFL again, as the kernel resets it */
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    CHECK(sigaction(SIGSEGV, &sa, &got) == 0 && got.sa_handler == on_segv_plain && !(got.sa_flags & SA_SIGINFO));
    fault_once(hole + 2);
    CHECK(handled == 4);
    CHECK(sigaction(SIGSEGV, NULL, &got) == 0 && got.sa_handler == SIG_DFL);
    socket_still(hole);
    /* a stack overflow reaches the program's handler on its alternate stack */
    overflow_once();
    socket_still(hole);
    /* SIGBUS is the program's too: a plain handler, read back */
    CHECK(signal(SIGBUS, on_segv_plain) == SIG_DFL);
    CHECK(sigaction(SIGBUS, NULL, &got) == 0 && got.sa_handler == on_segv_plain);
    CHECK(signal(SIGBUS, SIG_DFL) == on_segv_plain);
    return 0;
}

/* A child that faults (or is sent SIGSEGV) under the given action. */
static int child_status(void (*action)(int), bool sent)
{
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) {
        struct rlimit none = {0, 0}; /* no core file from this child */
        CHECK(setrlimit(RLIMIT_CORE, &none) == 0);
        char *hole = area();
        socket_still(hole);
        if (action != SIG_DFL)
            CHECK(signal(SIGSEGV, action) == SIG_DFL);
        if (sent)
            kill(getpid(), SIGSEGV);
        else
            *(volatile char *)(hole + 99) = 1;
        _exit(42);
    }
    int st;
    CHECK(waitpid(p, &st, 0) == p);
    return st;
}

static int sc_dfl(void)
{
    int st = child_status(SIG_DFL, false);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    st = child_status(SIG_IGN, false); /* the kernel does not ignore a fault */
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    st = child_status(SIG_DFL, true);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    st = child_status(SIG_IGN, true); /* a sent one is ignored */
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } scenarios[] = {{"hole", sc_hole}, {"partial", sc_partial}, {"handler", sc_handler}, {"dfl", sc_dfl}};
    pg = sysconf(_SC_PAGESIZE);
    if (getenv("FAULT_PROG_VERBOSE"))
        setvbuf(stdout, NULL, _IONBF, 0);
    alarm(60);
    for (size_t i = 0; argc == 2 && i < sizeof scenarios / sizeof scenarios[0]; i++)
        if (strcmp(argv[1], scenarios[i].name) == 0) {
            int rc = scenarios[i].fn();
            if (rc == 0)
                printf("OK\n");
            return rc;
        }
    fprintf(stderr, "usage: %s hole|partial|handler|dfl\n", argv[0]);
    return 2;
}
