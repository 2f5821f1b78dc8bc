/* Readiness across threads, epoll sets and processes: a program run under
 * libeta-preload.so, attached to dti's loopback TEST FIXTURE engine, by
 * run_readiness_tests.py. One scenario per invocation (argv[1]); prints "OK"
 * and exits 0, or names the failed check and exits 1. Every wait is bounded
 * (a lost wakeup is a failure after WAIT_MS, never a hang).
 *
 * ETA_NET must name 10.9.0.1/24 as the PPE's port (connections to it go to
 * listeners inside the fixture by port). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "asleep.h"
#include "check.h"

/* How long a readiness that must come may take before it counts as lost. */
#define WAIT_MS 10000

static const char *ppe_ip = "10.9.0.1";

static int listener(int *port, int backlog)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    int one = 1;
    CHECK(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(l, backlog) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return l;
}

static int connect_to(int port)
{
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(c >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ppe_ip, &a.sin_addr);
    CHECK(connect(c, (struct sockaddr *)&a, sizeof a) == 0);
    return c;
}

/* A connected pair through the PPE. */
static void pair(int *client, int *server)
{
    int port;
    int l = listener(&port, 16);
    *client = connect_to(port);
    *server = accept(l, NULL, NULL);
    CHECK(*server >= 0);
    close(l);
}

static void read_exact(int fd, char *b, size_t n)
{
    while (n) {
        ssize_t r = read(fd, b, n);
        CHECK(r > 0);
        b += r;
        n -= (size_t)r;
    }
}

static void set_nonblock(int fd)
{
    CHECK(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0);
}

/* Waits (bounded) until thread tid sleeps in the kernel ('S'): it then waits
 * for an event, so what follows happens while it sleeps. */
static void wait_until_sleeping(pid_t tid)
{
    for (int i = 0; i < WAIT_MS; i++) {
        if (task_sleeping(tid))
            return;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL); /* poll interval of the bounded check above */
    }
    CHECK(!"the waiting thread never went to sleep");
}

/* ---- handoff: the memcached pattern ----------------------------------- */

/* The main thread accepts one connection per epoll wakeup (level-triggered,
 * as memcached does) and hands each descriptor over a pipe to one of the
 * workers, which adds it to its own epoll. All clients have connected and
 * sent their request before the first accept, so every request arrived
 * before its descriptor was in any epoll. */
#define HANDOFF_CONNS 16
#define HANDOFF_WORKERS 4
#define REQ 4096

struct worker {
    int pipe_rd, pipe_wr;
    int served;
    pthread_t t;
};

static void *worker_main(void *p)
{
    struct worker *w = p;
    int ep = epoll_create1(0);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = w->pipe_rd};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, w->pipe_rd, &ev) == 0);
    static _Thread_local char buf[REQ];
    size_t have[1024] = {0};
    for (;;) {
        struct epoll_event out[8];
        int n = epoll_wait(ep, out, 8, WAIT_MS);
        CHECK(n > 0); /* 0: a request that arrived was never reported */
        for (int i = 0; i < n; i++) {
            int fd = out[i].data.fd;
            if (fd == w->pipe_rd) {
                int cfd;
                CHECK(read(w->pipe_rd, &cfd, sizeof cfd) == sizeof cfd);
                if (cfd < 0) {
                    close(ep);
                    return NULL;
                }
                CHECK(cfd < 1024);
                set_nonblock(cfd);
                have[cfd] = 0;
                struct epoll_event cev = {.events = EPOLLIN, .data.fd = cfd};
                CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &cev) == 0);
                continue;
            }
            ssize_t r = read(fd, buf, REQ - have[fd]);
            if (r < 0 && errno == EAGAIN)
                continue;
            CHECK(r > 0);
            have[fd] += (size_t)r;
            if (have[fd] == REQ) {
                CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL) == 0);
                CHECK(write(fd, "done", 4) == 4);
                close(fd);
                w->served++;
            }
        }
    }
}

static int sc_handoff(void)
{
    int port;
    int l = listener(&port, 64);
    set_nonblock(l);
    int clients[HANDOFF_CONNS];
    char req[REQ];
    memset(req, 'r', sizeof req);
    for (int i = 0; i < HANDOFF_CONNS; i++) {
        clients[i] = connect_to(port);
        CHECK(write(clients[i], req, sizeof req) == sizeof req);
    }
    struct worker w[HANDOFF_WORKERS];
    for (int i = 0; i < HANDOFF_WORKERS; i++) {
        int p[2];
        CHECK(pipe(p) == 0);
        w[i] = (struct worker){p[0], p[1], 0, 0};
        CHECK(pthread_create(&w[i].t, NULL, worker_main, &w[i]) == 0);
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) == 0);
    for (int accepted = 0; accepted < HANDOFF_CONNS;) {
        struct epoll_event out;
        int n = epoll_wait(ep, &out, 1, WAIT_MS);
        if (n == 0)
            printf("FAIL: the listener stopped being readable after %d of %d connections\n", accepted,
                   HANDOFF_CONNS);
        CHECK(n == 1);
        int fd = accept(l, NULL, NULL); /* one per wakeup, as memcached */
        if (fd < 0 && errno == EAGAIN)
            continue;
        CHECK(fd >= 0);
        CHECK(write(w[accepted % HANDOFF_WORKERS].pipe_wr, &fd, sizeof fd) == sizeof fd);
        accepted++;
    }
    for (int i = 0; i < HANDOFF_CONNS; i++) {
        char b[4];
        read_exact(clients[i], b, 4);
        CHECK(memcmp(b, "done", 4) == 0);
        close(clients[i]);
    }
    int served = 0;
    for (int i = 0; i < HANDOFF_WORKERS; i++) {
        int stop = -1;
        CHECK(write(w[i].pipe_wr, &stop, sizeof stop) == sizeof stop);
        CHECK(pthread_join(w[i].t, NULL) == 0);
        served += w[i].served;
    }
    CHECK(served == HANDOFF_CONNS);
    close(ep);
    close(l);
    return 0;
}

/* The same hand-off with poll and select in the worker: data arrived before
 * the worker ever looked at the descriptor. */
static int sc_handoff_poll(void)
{
    int c, s;
    pair(&c, &s);
    CHECK(write(c, "x", 1) == 1);
    struct pollfd p = {s, POLLIN, 0};
    CHECK(poll(&p, 1, WAIT_MS) == 1 && (p.revents & POLLIN));
    fd_set r;
    FD_ZERO(&r);
    FD_SET(s, &r);
    struct timeval tv = {WAIT_MS / 1000, 0};
    CHECK(select(s + 1, &r, NULL, NULL, &tv) == 1 && FD_ISSET(s, &r));
    /* A listener whose connections the PPE already handed over. */
    int port;
    int l = listener(&port, 16);
    int cs[6];
    for (int i = 0; i < 6; i++)
        cs[i] = connect_to(port);
    for (int i = 0; i < 6; i++) {
        struct pollfd lp = {l, POLLIN, 0};
        CHECK(poll(&lp, 1, WAIT_MS) == 1 && (lp.revents & POLLIN));
        FD_ZERO(&r);
        FD_SET(l, &r);
        tv = (struct timeval){WAIT_MS / 1000, 0};
        CHECK(select(l + 1, &r, NULL, NULL, &tv) == 1);
        int a = accept(l, NULL, NULL);
        CHECK(a >= 0);
        close(a);
    }
    for (int i = 0; i < 6; i++)
        close(cs[i]);
    close(l);
    close(c);
    close(s);
    return 0;
}

/* ---- a member added while another thread sleeps in epoll_wait ---------- */

struct sleeper {
    int ep;
    _Atomic pid_t tid;
    int n;
    struct epoll_event ev[4];
    pthread_t t;
    bool woken;  /* returned before WAIT_MS: woken, not found at the timeout */
    bool warm;   /* look at the set once before counting as started: the thread's
                  * DTI context is made (a round trip that sleeps) and the set knows it */
};

static void *sleeper_main(void *p)
{
    struct sleeper *s = p;
    if (s->warm)
        CHECK(epoll_wait(s->ep, s->ev, 4, 0) == 0);
    atomic_store(&s->tid, (pid_t)syscall(SYS_gettid));
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    s->n = epoll_wait(s->ep, s->ev, 4, WAIT_MS);
    clock_gettime(CLOCK_MONOTONIC, &b);
    s->woken = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < WAIT_MS;
    return NULL;
}

static void start_sleeper_as(struct sleeper *s, int ep, bool warm)
{
    *s = (struct sleeper){.ep = ep, .warm = warm};
    CHECK(pthread_create(&s->t, NULL, sleeper_main, s) == 0);
    while (!atomic_load(&s->tid))
        sched_yield();
    wait_until_sleeping(atomic_load(&s->tid));
}

static void start_sleeper(struct sleeper *s, int ep) { start_sleeper_as(s, ep, false); }

/* The kernel wakes a thread sleeping in epoll_wait when another thread adds
 * a descriptor that is ready: also when the epoll had no accelerated member
 * yet (the sleeper is in the kernel's epoll_wait), and when it had some. */
static int sc_add_while_sleeping(void)
{
    for (int round = 0; round < 2; round++) {
        int ep = epoll_create1(0);
        int c0 = -1, s0 = -1;
        if (round == 1) { /* an accelerated member with nothing to read */
            pair(&c0, &s0);
            struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
            CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s0, &ev) == 0);
        }
        int c, s;
        pair(&c, &s);
        CHECK(write(c, "a", 1) == 1);
        struct sleeper sl;
        start_sleeper(&sl, ep);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 42};
        CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
        CHECK(pthread_join(sl.t, NULL) == 0);
        if (sl.n != 1)
            printf("FAIL: round %d: the sleeping thread got %d events for a ready member added meanwhile\n",
                   round, sl.n);
        CHECK(sl.n == 1 && sl.ev[0].data.u64 == 42 && (sl.ev[0].events & EPOLLIN));
        CHECK(sl.woken); /* not found only when its wait timed out: a lost wakeup */
        /* Also data that arrives after the add, with the thread asleep. */
        char b;
        CHECK(read(s, &b, 1) == 1);
        start_sleeper(&sl, ep);
        CHECK(write(c, "b", 1) == 1);
        CHECK(pthread_join(sl.t, NULL) == 0);
        CHECK(sl.n == 1 && sl.ev[0].data.u64 == 42);
        CHECK(sl.woken);
        CHECK(read(s, &b, 1) == 1 && b == 'b');
        close(c);
        close(s);
        if (round == 1) {
            close(c0);
            close(s0);
        }
        close(ep);
    }
    return 0;
}

/* ---- EPOLLOUT ----------------------------------------------------------- */

/* Fills the send side until EAGAIN, sleeps for EPOLLOUT (level and edge) and
 * wakes when the other end reads. */
struct drainer {
    int fd;
    pid_t waiter;
    pthread_t t;
};

static void *drain_main(void *p)
{
    struct drainer *d = p;
    wait_until_sleeping(d->waiter);
    char buf[65536];
    for (;;) {
        ssize_t r = read(d->fd, buf, sizeof buf);
        if (r <= 0)
            break;
    }
    return NULL;
}

static int sc_epollout(void)
{
    for (int edge = 0; edge < 2; edge++) {
        int c, s;
        pair(&c, &s);
        set_nonblock(c);
        char buf[65536];
        memset(buf, 'o', sizeof buf);
        size_t sent = 0;
        /* Full, and staying full: the engine moves bytes on until the
         * peer's window closes, so fill again each time space came within
         * 50 ms (bounded), until it stays not writable. */
        int settle = 0;
        do {
            for (;;) {
                ssize_t w = write(c, buf, sizeof buf);
                if (w < 0) {
                    CHECK(errno == EAGAIN);
                    break;
                }
                sent += (size_t)w;
                CHECK(sent < (1u << 30));
            }
            struct pollfd pc = {c, POLLOUT, 0};
            if (poll(&pc, 1, 50) == 0)
                break;
        } while (++settle < 200);
        CHECK(settle < 200);
        int ep = epoll_create1(0);
        struct epoll_event ev = {.events = EPOLLOUT | (edge ? EPOLLET : 0), .data.u64 = 7}, out;
        CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0);
        CHECK(epoll_wait(ep, &out, 1, 0) == 0); /* full: not writable */
        struct drainer d = {.fd = s, .waiter = (pid_t)syscall(SYS_gettid)};
        CHECK(pthread_create(&d.t, NULL, drain_main, &d) == 0);
        int n = epoll_wait(ep, &out, 1, WAIT_MS);
        CHECK(n == 1 && (out.events & EPOLLOUT) && out.data.u64 == 7);
        shutdown(c, SHUT_WR); /* ends the drainer's reads */
        CHECK(pthread_join(d.t, NULL) == 0);
        close(ep);
        close(c);
        close(s);
    }
    return 0;
}

/* ---- one socket in two epoll sets ---------------------------------------
 * Readiness reaches each set a socket belongs to (the shim links a socket to
 * its sets' ready queues): data that arrives while a thread waits in the
 * first set wakes it, also after the socket joined a second set at another
 * position, and the second set reports it too. */
static int sc_two_sets(void)
{
    int c, s, c2, s2;
    pair(&c, &s);
    pair(&c2, &s2);
    int ep1 = epoll_create1(0), ep2 = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
    CHECK(epoll_ctl(ep1, EPOLL_CTL_ADD, s, &ev) == 0);
    struct epoll_event out[4];
    CHECK(epoll_wait(ep1, out, 4, 0) == 0); /* looked at: nothing yet, watched */
    ev.data.u64 = 2;
    CHECK(epoll_ctl(ep2, EPOLL_CTL_ADD, s2, &ev) == 0);
    ev.data.u64 = 3;
    CHECK(epoll_ctl(ep2, EPOLL_CTL_ADD, s, &ev) == 0); /* second position in ep2 */
    CHECK(epoll_wait(ep2, out, 4, 0) == 0);
    struct sleeper sl;
    start_sleeper_as(&sl, ep1, true);
    CHECK(write(c, "x", 1) == 1);
    CHECK(pthread_join(sl.t, NULL) == 0);
    if (sl.n != 1 || !sl.woken)
        printf("FAIL: the thread waiting in the first set got %d events (woken %d)\n", sl.n, sl.woken);
    CHECK(sl.n == 1 && sl.ev[0].data.u64 == 1 && sl.woken);
    int n = epoll_wait(ep2, out, 4, WAIT_MS);
    CHECK(n == 1 && out[0].data.u64 == 3);
    char b;
    CHECK(read(s, &b, 1) == 1 && b == 'x');
    CHECK(epoll_wait(ep1, out, 4, 0) == 0 && epoll_wait(ep2, out, 4, 0) == 0);
    close(ep1);
    close(ep2);
    close(c);
    close(s);
    close(c2);
    close(s2);
    return 0;
}

/* ---- many accelerated members ----------------------------------------- */

#define MANY 200

static int sc_many(void)
{
    int port;
    int l = listener(&port, MANY);
    static int cl[MANY], sv[MANY];
    int ep = epoll_create1(0);
    for (int i = 0; i < MANY; i++) {
        cl[i] = connect_to(port);
        sv[i] = accept(l, NULL, NULL);
        CHECK(sv[i] >= 0);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
        CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, sv[i], &ev) == 0);
    }
    /* One byte on every other connection, in a scrambled order. */
    static bool want[MANY], seen[MANY];
    int expected = 0;
    for (int k = 0; k < MANY; k++) {
        int i = (k * 37) % MANY;
        if (i % 2 == 0) {
            CHECK(write(cl[i], "m", 1) == 1);
            want[i] = true;
            expected++;
        }
    }
    int got = 0;
    while (got < expected) {
        struct epoll_event out[16];
        int n = epoll_wait(ep, out, 16, WAIT_MS);
        if (n <= 0)
            printf("FAIL: %d of %d ready members reported\n", got, expected);
        CHECK(n > 0);
        for (int j = 0; j < n; j++) {
            int i = (int)out[j].data.u64;
            CHECK(i >= 0 && i < MANY && want[i] && !seen[i]);
            char b;
            CHECK(read(sv[i], &b, 1) == 1 && b == 'm');
            seen[i] = true;
            got++;
        }
    }
    struct epoll_event out;
    CHECK(epoll_wait(ep, &out, 1, 0) == 0);
    for (int i = 0; i < MANY; i++) {
        close(cl[i]);
        close(sv[i]);
    }
    close(ep);
    close(l);
    return 0;
}

/* ---- the first look (epoll_wait's short way) --------------------------- */

/* Milliseconds on the monotonic clock. */
static long long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits (bounded: WAIT_MS) until epoll_wait reports exactly the members in
 * `want` (a bit per data word) in one call. The bound is time, not tries:
 * with one member ready the waits return at once, and the other's bytes may
 * take a while on a loaded machine. */
static void wait_reported(int ep, unsigned want)
{
    for (long long end = mono_ms() + WAIT_MS; mono_ms() < end;) {
        struct epoll_event out[8];
        int n = epoll_wait(ep, out, 8, WAIT_MS / 1000);
        unsigned got = 0;
        for (int j = 0; j < n; j++)
            got |= 1u << out[j].data.u64;
        if (got == want)
            return;
    }
    printf("FAIL: members %#x never reported together\n", want);
    exit(1);
}

/* The members one zero-timeout wait reports (a bit per data word); each
 * reported once at most. */
static unsigned reported_now(int ep, int max)
{
    struct epoll_event out[8];
    int n = epoll_wait(ep, out, max, 0);
    CHECK(n >= 0 && n <= max);
    unsigned got = 0;
    for (int j = 0; j < n; j++) {
        CHECK(!(got & (1u << out[j].data.u64)) && (out[j].events & EPOLLIN));
        got |= 1u << out[j].data.u64;
    }
    return got;
}

/* Ready level-triggered members are reported on every wait (the first look
 * answers those waits); a member that stops being ready is no longer
 * reported, a one-shot member only once, and ready members take turns when
 * the program's array is small (the general look answers those). */
static int sc_first_look(void)
{
    int c[3], s[3];
    int ep = epoll_create1(0);
    for (int i = 0; i < 3; i++) {
        pair(&c[i], &s[i]);
        struct epoll_event ev = {.events = EPOLLIN | (i == 2 ? EPOLLONESHOT : 0), .data.u64 = (uint64_t)i};
        CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev) == 0);
    }
    CHECK(reported_now(ep, 8) == 0);
    CHECK(write(c[0], "a", 1) == 1 && write(c[1], "b", 1) == 1);
    wait_reported(ep, 0x3);
    for (int k = 0; k < 100; k++)
        CHECK(reported_now(ep, 8) == 0x3); /* level-triggered: still ready */
    unsigned first = reported_now(ep, 1), second = reported_now(ep, 1);
    CHECK((first == 0x1 || first == 0x2) && (first | second) == 0x3); /* turns */
    char b;
    CHECK(read(s[0], &b, 1) == 1 && b == 'a');
    for (int k = 0; k < 10; k++)
        CHECK(reported_now(ep, 8) == 0x2); /* s[0] read empty: gone from the reports */
    CHECK(read(s[1], &b, 1) == 1 && b == 'b');
    CHECK(reported_now(ep, 8) == 0);
    CHECK(write(c[2], "c", 1) == 1 && write(c[0], "d", 1) == 1);
    /* Both arrive before the next wait (poll sees them), so that wait's
     * first look finds a one-shot member among ready ones. */
    struct pollfd pf[2] = {{s[0], POLLIN, 0}, {s[2], POLLIN, 0}};
    for (long long end = mono_ms() + WAIT_MS; mono_ms() < end && !((pf[0].revents & POLLIN) && (pf[1].revents & POLLIN));)
        CHECK(poll(pf, 2, WAIT_MS / 1000) >= 0);
    CHECK((pf[0].revents & POLLIN) && (pf[1].revents & POLLIN));
    CHECK(reported_now(ep, 8) == 0x5);
    for (int k = 0; k < 10; k++)
        CHECK(reported_now(ep, 8) == 0x1); /* one-shot: reported once, though still readable */
    for (int i = 0; i < 3; i++) {
        close(c[i]);
        close(s[i]);
    }
    close(ep);
    return 0;
}

/* ---- an epoll shared across fork --------------------------------------- */

/* The child waits in the epoll it inherited; the parent sends. The parent's
 * own waits on the same epoll keep working after the child is gone. */
static int sc_fork_shared(void)
{
    int c, s;
    pair(&c, &s);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 5};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(30);
        struct epoll_event out;
        if (epoll_wait(ep, &out, 1, 0) != 0)
            _exit(10);
        if (write(go[1], "g", 1) != 1)
            _exit(11);
        if (epoll_wait(ep, &out, 1, WAIT_MS) != 1 || out.data.u64 != 5)
            _exit(12);
        char b;
        if (read(s, &b, 1) != 1 || b != 'c')
            _exit(13);
        _exit(0);
    }
    char g;
    CHECK(read(go[0], &g, 1) == 1);
    CHECK(write(c, "c", 1) == 1);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        printf("FAIL: the fork child's wait in the inherited epoll: status %d\n", status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(write(c, "p", 1) == 1);
    struct epoll_event out;
    CHECK(epoll_wait(ep, &out, 1, WAIT_MS) == 1 && out.data.u64 == 5);
    char b;
    CHECK(read(s, &b, 1) == 1 && b == 'p');
    close(ep);
    close(c);
    close(s);
    return 0;
}

/* ---- the PPE goes (run last: the fixture engine crashes) --------------- */

/* CPU time (user + system) of this process in clock ticks, from /proc. */
static long cpu_ticks(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    CHECK(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    CHECK(p);
    long utime = 0, stime = 0;
    /* fields after the command: state(3) ... utime(14) stime(15) */
    CHECK(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime) == 2);
    return utime + stime;
}

/* After the PPE is killed: a listener on the PPE's address reports nothing
 * (never POLLERR/POLLHUP without POLLIN) and a non-blocking accept answers
 * EAGAIN, so an event loop sleeps instead of spinning; an INADDR_ANY
 * listener is its kernel half; established connections fail with
 * ECONNRESET/EPIPE. */
static int sc_engine_gone_listeners(void)
{
    const char *pid = getenv("ETA_TEST_FIXTURE_PID");
    CHECK(pid);
    int c, s;
    pair(&c, &s);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, ppe_ip, &a.sin_addr);
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(l, 16) == 0);
    int hport;
    int h = listener(&hport, 16);
    set_nonblock(h);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) == 0);
    ev.data.u64 = 2;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, h, &ev) == 0);
    int ep_conn = epoll_create1(0);
    ev.data.u64 = 3;
    CHECK(epoll_ctl(ep_conn, EPOLL_CTL_ADD, s, &ev) == 0);

    CHECK(kill(atoi(pid), SIGUSR1) == 0);
    /* The established connection hears of it (bounded wait for the event). */
    struct epoll_event out[4];
    CHECK(epoll_wait(ep_conn, out, 4, WAIT_MS) == 1 && (out[0].events & (EPOLLERR | EPOLLHUP)));
    char b;
    CHECK(read(s, &b, 1) == -1 && errno == ECONNRESET);
    CHECK(write(c, "x", 1) == -1 && (errno == EPIPE || errno == ECONNRESET));

    /* The listeners: nothing ready, accept EAGAIN. */
    struct pollfd p[2] = {{l, POLLIN, 0}, {h, POLLIN, 0}};
    int n = poll(p, 2, 0);
    if (n != 0)
        printf("FAIL: listeners after the PPE went: poll %d, revents %#x %#x\n", n, p[0].revents, p[1].revents);
    CHECK(n == 0);
    CHECK(epoll_wait(ep, out, 4, 0) == 0);
    CHECK(accept(l, NULL, NULL) == -1 && errno == EAGAIN);
    CHECK(accept(h, NULL, NULL) == -1 && errno == EAGAIN);
    /* An event loop over them sleeps: 20 waits of 50 ms take far less CPU
     * than wall time (a spinning loop would take all of it). */
    long t0 = cpu_ticks();
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    for (int i = 0; i < 20; i++) {
        CHECK(epoll_wait(ep, out, 4, 50) == 0);
        CHECK(poll(p, 2, 0) == 0 || (p[0].revents == 0 && p[1].revents == 0));
    }
    clock_gettime(CLOCK_MONOTONIC, &w1);
    long wall_ticks = (long)((w1.tv_sec - w0.tv_sec) * sysconf(_SC_CLK_TCK) +
                             (w1.tv_nsec - w0.tv_nsec) * sysconf(_SC_CLK_TCK) / 1000000000L);
    long used = cpu_ticks() - t0;
    if (used * 4 > wall_ticks)
        printf("FAIL: the event loop used %ld of %ld ticks after the PPE went\n", used, wall_ticks);
    CHECK(used * 4 <= wall_ticks);
    /* A blocking accept with SO_RCVTIMEO times out as the kernel's would. */
    CHECK(fcntl(l, F_SETFL, 0) == 0);
    struct timeval tv = {0, 100000};
    CHECK(setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    CHECK(accept(l, NULL, NULL) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));
    /* The INADDR_ANY listener's kernel half still serves local clients. */
    int k = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_port = htons((uint16_t)hport),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(connect(k, (struct sockaddr *)&lo, sizeof lo) == 0);
    CHECK(epoll_wait(ep, out, 4, WAIT_MS) == 1 && out[0].data.u64 == 2);
    int ka = accept(h, NULL, NULL);
    CHECK(ka >= 0);
    close(ka);
    close(k);
    close(ep);
    close(ep_conn);
    close(l);
    close(h);
    close(c);
    close(s);
    return 0;
}

/* ---- select/poll sleepers: woken by an accelerated socket or a pipe ------
 * iperf3's shape (issue 13): one thread sleeps in select() or poll() over an
 * accelerated socket and a kernel descriptor, the main thread makes one of
 * them readable while it sleeps; the sleeper must wake with exactly that one
 * reported, read it, and tell the main thread (over a pipe) what it saw. A
 * wake by the engine's data is answered without asking whether the engine
 * lives (preload/src/wait.c, eta_woken_alive()); these rounds show such
 * wakes still report the right descriptor, and select_engine_gone that a
 * sleeper still hears of a crashed PPE. */
#define SLEEP_ROUNDS 24

struct mixed_sleeper {
    int sock, pipe_rd; /* watched: the accelerated socket, a kernel pipe */
    int report_wr;     /* to the main thread, per round: 's' or 'p' (read), 'e' (the socket
                        * reported, its read ECONNRESET), 'x' (anything else) */
    _Atomic pid_t tid;
};

/* One wait over both descriptors; round r uses select() on even r, poll() on
 * odd. Returns 's' (the socket alone ready), 'p' (the pipe alone), 'x'. */
static char wait_one(struct mixed_sleeper *m, int r)
{
    bool sock_ready, pipe_ready;
    if (r % 2 == 0) {
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(m->sock, &rd);
        FD_SET(m->pipe_rd, &rd);
        struct timeval tv = {WAIT_MS / 1000, 0};
        int n = select((m->sock > m->pipe_rd ? m->sock : m->pipe_rd) + 1, &rd, NULL, NULL, &tv);
        if (n != 1)
            return 'x';
        sock_ready = FD_ISSET(m->sock, &rd);
        pipe_ready = FD_ISSET(m->pipe_rd, &rd);
    } else {
        struct pollfd p[2] = {{m->sock, POLLIN, 0}, {m->pipe_rd, POLLIN, 0}};
        if (poll(p, 2, WAIT_MS) != 1)
            return 'x';
        sock_ready = p[0].revents == POLLIN;
        pipe_ready = p[1].revents == POLLIN;
    }
    return sock_ready && !pipe_ready ? 's' : pipe_ready && !sock_ready ? 'p' : 'x';
}

static void *mixed_sleeper_main(void *arg)
{
    struct mixed_sleeper *m = arg;
    atomic_store(&m->tid, (pid_t)syscall(SYS_gettid));
    for (int r = 0; r < SLEEP_ROUNDS; r++) {
        char got = wait_one(m, r), b;
        if (got == 's' && read(m->sock, &b, 1) != 1)
            got = errno == ECONNRESET ? 'e' : 'x';
        if (got == 'p' && read(m->pipe_rd, &b, 1) != 1)
            got = 'x';
        if (write(m->report_wr, &got, 1) != 1 || got == 'x' || got == 'e')
            break;
    }
    return NULL;
}

static void start_mixed_sleeper(struct mixed_sleeper *m, int *peer, int *pipe_wr, int *report_rd, pthread_t *t)
{
    int c, s, pp[2], rp[2];
    pair(&c, &s);
    CHECK(pipe(pp) == 0 && pipe(rp) == 0);
    *m = (struct mixed_sleeper){.sock = s, .pipe_rd = pp[0], .report_wr = rp[1]};
    *peer = c;
    *pipe_wr = pp[1];
    *report_rd = rp[0];
    CHECK(pthread_create(t, NULL, mixed_sleeper_main, m) == 0);
    for (int i = 0; i < WAIT_MS && !atomic_load(&m->tid); i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL); /* poll interval of this bounded wait for the thread's id */
    }
    CHECK(atomic_load(&m->tid));
}

static int sc_select_wake(void)
{
    struct mixed_sleeper m;
    int c, pipe_wr, report_rd;
    pthread_t t;
    start_mixed_sleeper(&m, &c, &pipe_wr, &report_rd, &t);
    for (int r = 0; r < SLEEP_ROUNDS; r++) {
        wait_until_sleeping(m.tid);
        /* Two rounds of each kind per turn: select and poll both woken by
         * the engine and by the kernel. */
        char want = (r / 2) % 2 == 0 ? 's' : 'p', got;
        CHECK(write(want == 's' ? c : pipe_wr, "w", 1) == 1);
        CHECK(read(report_rd, &got, 1) == 1);
        if (got != want)
            printf("FAIL: round %d (%s) woke with '%c', wanted '%c'\n", r, r % 2 ? "poll" : "select", got, want);
        CHECK(got == want);
    }
    pthread_join(t, NULL);
    return 0;
}

/* The PPE crashes while a thread sleeps in select() over an accelerated
 * socket and a pipe: the socket is reported (readable: its error), reading
 * it fails with ECONNRESET, and the pipe is not reported. */
static int sc_select_engine_gone(void)
{
    const char *pid = getenv("ETA_TEST_FIXTURE_PID");
    CHECK(pid);
    struct mixed_sleeper m;
    int c, pipe_wr, report_rd;
    pthread_t t;
    start_mixed_sleeper(&m, &c, &pipe_wr, &report_rd, &t);
    wait_until_sleeping(m.tid);
    CHECK(kill(atoi(pid), SIGUSR1) == 0);
    char got;
    CHECK(read(report_rd, &got, 1) == 1);
    if (got != 'e')
        printf("FAIL: after the crash the sleeper saw '%c'\n", got);
    CHECK(got == 'e');
    pthread_join(t, NULL);
    char b;
    CHECK(read(m.sock, &b, 1) == -1 && errno == ECONNRESET);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCENARIO\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    alarm(60); /* nothing may hang the suite */
    const char *sc = argv[1];
    int rc = 1;
    if (!strcmp(sc, "handoff"))
        rc = sc_handoff();
    else if (!strcmp(sc, "handoff_poll"))
        rc = sc_handoff_poll();
    else if (!strcmp(sc, "add_while_sleeping"))
        rc = sc_add_while_sleeping();
    else if (!strcmp(sc, "epollout"))
        rc = sc_epollout();
    else if (!strcmp(sc, "many"))
        rc = sc_many();
    else if (!strcmp(sc, "two_sets"))
        rc = sc_two_sets();
    else if (!strcmp(sc, "fork_shared"))
        rc = sc_fork_shared();
    else if (!strcmp(sc, "first_look"))
        rc = sc_first_look();
    else if (!strcmp(sc, "select_wake"))
        rc = sc_select_wake();
    else if (!strcmp(sc, "select_engine_gone"))
        rc = sc_select_engine_gone();
    else if (!strcmp(sc, "engine_gone_listeners"))
        rc = sc_engine_gone_listeners();
    else
        fprintf(stderr, "unknown scenario %s\n", sc);
    if (rc == 0)
        printf("OK\n");
    return rc;
}
