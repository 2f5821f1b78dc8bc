/* The shim's watchdog (preload/README.md "The watchdog"): run under
 * libeta-preload.so by run_readiness_tests.py, attached to dti's loopback
 * TEST FIXTURE engine, which this program switches (SIGUSR2, after its
 * sockets exist) to post every event but never wake a sleeping program (a
 * lost wakeup, every time), and back before it closes them. In each
 * case below the main thread blocks (poll, a blocking read, epoll_wait,
 * poll for POLLOUT, a blocking write) and a helper thread makes it ready
 * only once the main thread sleeps: nothing but the watchdog ends those
 * sleeps. Without it every wait here runs into its WAIT_MS bound and fails;
 * with it each ends within about a second, and the shim counts what it
 * found (lost_wakeups, watchdog_wakes in <socket>.preload/<pid>).
 *
 * ETA_NET must name 10.9.0.1/24 as the PPE's port. Prints "OK" and exits 0,
 * or names the failed check and exits 1. */
#include <arpa/inet.h>
#include <errno.h>
#include <eta/preload_stats.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "asleep.h"
#include "check.h"

/* How long a readiness that must come may take before it counts as lost for
 * good: far above the watchdog's period (1 s). */
#define WAIT_MS 10000

static pid_t main_tid;

/* The helper's progress: it waits for the main thread to sleep, then acts.
 * The main thread cancels a helper that has not acted when its call came
 * back without it (cases 4 and 5: the engine, running behind on a busy
 * machine, moved bytes out of a send ring that fill() had seen full). */
enum { HELPER_WAITING, HELPER_ACTED, HELPER_CANCELLED };

/* Waits (bounded) until the main thread sleeps in a waiting call (the
 * shim's or libdti's sleep on a context's wait fd); false once cancelled. */
static bool wait_until_main_sleeps(_Atomic int *state)
{
    for (int i = 0; i < WAIT_MS; i++) {
        if (atomic_load(state) == HELPER_CANCELLED)
            return false;
        if (task_blocked_in_wait(main_tid))
            return true;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL); /* poll interval of the bounded check above */
    }
    CHECK(!"the main thread never went to sleep");
    return false;
}

/* A connected pair through the fixture engine. */
static void pair(int *client, int *server)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    *client = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(*client >= 0);
    inet_pton(AF_INET, "10.9.0.1", &a.sin_addr);
    CHECK(connect(*client, (struct sockaddr *)&a, sizeof a) == 0);
    *server = accept(l, NULL, NULL);
    CHECK(*server >= 0);
    close(l);
}

/* What the helper does once the main thread sleeps. */
enum act { WRITE_ONE, DRAIN };
static struct {
    int fd;
    enum act act;
    _Atomic size_t drain; /* DRAIN: bytes to read */
    _Atomic int state;
    pthread_t t;
} helper;

static void *helper_main(void *unused)
{
    (void)unused;
    if (!wait_until_main_sleeps(&helper.state))
        return NULL;
    int waiting = HELPER_WAITING;
    if (!atomic_compare_exchange_strong(&helper.state, &waiting, HELPER_ACTED))
        return NULL; /* cancelled just now */
    if (helper.act == WRITE_ONE) {
        CHECK(write(helper.fd, "x", 1) == 1);
        return NULL;
    }
    static char buf[65536];
    for (size_t left = atomic_load(&helper.drain); left;) {
        ssize_t r = read(helper.fd, buf, left < sizeof buf ? left : sizeof buf);
        CHECK(r > 0);
        left -= (size_t)r;
    }
    return NULL;
}

static void helper_start(int fd, enum act act, size_t drain)
{
    helper.fd = fd;
    helper.act = act;
    atomic_store(&helper.drain, drain);
    atomic_store(&helper.state, HELPER_WAITING);
    CHECK(pthread_create(&helper.t, NULL, helper_main, NULL) == 0);
}

/* After the main thread's call came back: true when the helper made it
 * ready (joined); false when it came back without the helper, which is
 * cancelled and joined (the case is tried again). */
static bool helper_acted(void)
{
    int waiting = HELPER_WAITING;
    bool acted = !atomic_compare_exchange_strong(&helper.state, &waiting, HELPER_CANCELLED);
    pthread_join(helper.t, NULL);
    return acted;
}

/* How often cases 4 and 5 are tried before the engine's lag counts as a
 * failure: each try refills the rings, and the engine can only run behind
 * by what the rings hold. */
#define TRIES 20

static void set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    CHECK(fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) == 0);
}

/* Writes into c (non-blocking) until its rings are full; the byte count. */
static size_t fill(int c)
{
    static char buf[65536];
    size_t total = 0;
    set_nonblock(c, 1);
    for (;;) {
        ssize_t w = write(c, buf, sizeof buf);
        if (w < 0) {
            CHECK(errno == EAGAIN);
            break;
        }
        total += (size_t)w;
    }
    set_nonblock(c, 0);
    return total;
}

/* Toggles one of the fixture engine's switches (signal sig) and waits
 * (bounded) until it says the switch is `on` (<ETA_SOCKET>.<what> exists
 * while on). */
static void fixture_switch(int sig, const char *what, int on)
{
    const char *pid = getenv("ETA_TEST_FIXTURE_PID"), *sock = getenv("ETA_SOCKET");
    CHECK(pid && sock);
    char marker[4096];
    snprintf(marker, sizeof marker, "%s.%s", sock, what);
    CHECK(kill(atoi(pid), sig) == 0);
    for (int i = 0; i < WAIT_MS; i++) {
        if ((access(marker, F_OK) == 0) == (on != 0))
            return;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL); /* poll interval of this bounded wait for the fixture's switch */
    }
    CHECK(!"the fixture engine did not switch");
}

/* The fixture's lost wakeups on or off (every event posted, no sleeper woken
 * for it). libdti's own commands (socket, connect, close) wait for their
 * answers with no watchdog: they run while the wakeups come. */
static void lose_wakeups(int on)
{
    fixture_switch(SIGUSR2, "lose-wakeups", on);
}

/* The fixture's lost POLLOUTs on or off: the engine is never told that send
 * space came, so no POLLOUT is posted for it; only a watch sent again (the
 * engine then looks at the rings) finds it. */
static void lose_writable(int on)
{
    fixture_switch(SIGRTMIN, "lose-writable", on);
}

struct counts {
    uint64_t watchdog_wakes, lost_wakeups;
    int mine;
};

static int note(const struct eta_preload_stats *st, void *arg)
{
    struct counts *k = arg;
    if (st->pid == getpid()) {
        k->watchdog_wakes = st->watchdog_wakes;
        k->lost_wakeups = st->lost_wakeups;
        k->mine++;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "watchdog") != 0) {
        fprintf(stderr, "usage: %s watchdog\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    alarm(120); /* nothing may hang the suite: each wait below is bounded far below this */
    main_tid = (pid_t)syscall(SYS_gettid);
    int c, s;
    pair(&c, &s);
    int ep = epoll_create1(0);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    struct timeval tv = {WAIT_MS / 1000, 0};
    CHECK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    CHECK(setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);
    lose_wakeups(1);
    char b;

    /* 1. poll() for POLLIN. */
    helper_start(c, WRITE_ONE, 0);
    struct pollfd p = {s, POLLIN, 0};
    int n = poll(&p, 1, WAIT_MS);
    if (n != 1)
        printf("FAIL: poll for POLLIN answered %d after the peer wrote\n", n);
    CHECK(n == 1 && (p.revents & POLLIN));
    CHECK(helper_acted()); /* nothing but the helper makes s readable */
    CHECK(read(s, &b, 1) == 1);

    /* 2. A blocking read (SO_RCVTIMEO bounds it). */
    helper_start(c, WRITE_ONE, 0);
    ssize_t r = read(s, &b, 1);
    if (r != 1)
        printf("FAIL: a blocking read answered %zd (%s) after the peer wrote\n", r, strerror(errno));
    CHECK(r == 1);
    CHECK(helper_acted()); /* nothing but the helper makes s readable */

    /* 3. epoll_wait. */
    helper_start(c, WRITE_ONE, 0);
    n = epoll_wait(ep, &ev, 1, WAIT_MS);
    if (n != 1)
        printf("FAIL: epoll_wait answered %d after the peer wrote\n", n);
    CHECK(n == 1 && (ev.events & EPOLLIN));
    CHECK(helper_acted()); /* nothing but the helper makes s readable */
    CHECK(read(s, &b, 1) == 1);

    /* 4. poll() for POLLOUT on a full send ring that the peer then empties
     * (the engine's POLLOUT is a one-shot watch). fill() stops at the first
     * EAGAIN; an engine running behind may still move bytes on, and the ring
     * is writable again without the peer: then the helper is called off and
     * the rings filled again (`pending`: written, not yet read). */
    size_t pending = 0;
    for (int try = 1;; try++) {
        CHECK(try <= TRIES);
        pending += fill(c);
        CHECK(pending > 0);
        helper_start(s, DRAIN, pending);
        p = (struct pollfd){c, POLLOUT, 0};
        n = poll(&p, 1, WAIT_MS);
        if (n != 1)
            printf("FAIL: poll for POLLOUT answered %d after the peer read %zu bytes\n", n, pending);
        CHECK(n == 1 && (p.revents & POLLOUT));
        if (helper_acted())
            break;
        printf("case 4: the send ring was writable again before the peer read (the engine ran behind): tried again\n");
    }

    /* 5. A blocking write of more than the rings hold, read by the peer
     * (SO_SNDTIMEO bounds it); tried again as 4 when it went through
     * without sleeping. */
    pending = 0;
    static char big[1 << 16];
    for (int try = 1;; try++) {
        CHECK(try <= TRIES);
        pending += fill(c);
        helper_start(s, DRAIN, pending + sizeof big);
        ssize_t w = write(c, big, sizeof big);
        if (w != (ssize_t)sizeof big)
            printf("FAIL: a blocking write of %zu bytes answered %zd (%s)\n", sizeof big, w, strerror(errno));
        CHECK(w == (ssize_t)sizeof big);
        pending += sizeof big;
        if (helper_acted())
            break;
        printf("case 5: the write went through without sleeping (the engine ran behind): tried again\n");
    }

    /* 6. epoll_wait for EPOLLOUT (edge-triggered, as nginx waits to send
     * the rest of a response) on a full send ring that the peer then
     * empties, while the engine also loses the POLLOUT itself: nothing is
     * posted that a look could find; the watchdog's look must send the
     * member's POLLOUT watch again. Tried again as 4 when the ring was
     * writable before the peer read. */
    int epo = epoll_create1(0);
    CHECK(epo >= 0);
    struct epoll_event evo = {.events = EPOLLOUT | EPOLLET, .data.fd = c};
    CHECK(epoll_ctl(epo, EPOLL_CTL_ADD, c, &evo) == 0);
    CHECK(epoll_wait(epo, &evo, 1, 0) == 1); /* writable now: the first edge */
    /* Both rings full first, wakeups kept: fill() stops at the send ring's
     * first EAGAIN, and the engine then moves bytes on into the receive
     * ring; each POLLOUT that brings is filled again, until none comes for
     * 200 ms. (Shorter than the engine's lag on a busy machine, the watch
     * below may find space and the case is tried again: it still passes
     * with the recovery, and only guards it less; it never fails for it.) */
    lose_wakeups(0);
    pending = fill(c);
    for (int settle = 0;; settle++) {
        CHECK(settle < 10000);
        struct pollfd pc = {c, POLLOUT, 0};
        if (poll(&pc, 1, 200) != 1)
            break;
        pending += fill(c);
    }
    lose_wakeups(1);
    lose_writable(1);
    for (int try = 1;; try++) {
        CHECK(try <= TRIES);
        if (try > 1)
            pending += fill(c);
        helper_start(s, DRAIN, pending);
        n = epoll_wait(epo, &evo, 1, WAIT_MS);
        if (n != 1)
            printf("FAIL: epoll_wait for EPOLLOUT answered %d after the peer read %zu bytes (POLLOUT lost)\n", n,
                   pending);
        CHECK(n == 1 && (evo.events & EPOLLOUT));
        if (helper_acted())
            break;
        printf("case 6: the send ring was writable again before the peer read (the engine ran behind): tried again\n");
    }
    lose_writable(0);
    close(epo);

    /* Each of the six found its socket ready only after the watchdog. */
    struct counts k = {0};
    CHECK(eta_preload_stats_each(getenv("ETA_SOCKET"), note, &k) >= 1 && k.mine == 1);
    if (k.lost_wakeups < 6 || k.watchdog_wakes < k.lost_wakeups)
        printf("FAIL: lost_wakeups %llu, watchdog_wakes %llu\n", (unsigned long long)k.lost_wakeups,
               (unsigned long long)k.watchdog_wakes);
    CHECK(k.lost_wakeups >= 6 && k.watchdog_wakes >= k.lost_wakeups);
    lose_wakeups(0);
    close(ep);
    close(c);
    close(s);
    printf("OK\n");
    return 0;
}
