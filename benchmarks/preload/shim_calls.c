/* shim_calls: the socket calls of a warm accelerated connection, one kind at
 * a time, for counting the shim's instructions per call under callgrind.
 *
 * An ordinary sockets program: it knows nothing of eta. Run it under
 * libeta-preload.so attached to an engine (benchmarks/preload/shim-instructions
 * uses dti's loopback TEST FIXTURE engine, so no NIC or root is needed):
 *
 *   shim_calls CALL ITERATIONS PEER_IP
 *
 * CALL is one of
 *   recv    recv() of 64 bytes that are already in the receive ring
 *   send    send() of 64 bytes with room in the send ring, back to back (a
 *           burst: a write that finds its socket's last SEND not yet taken
 *           by the engine queues no command of its own). The engine is held
 *           in that state: with SHIM_CALLS_ENGINE_PID set (the script sets
 *           it), the calls go in rounds of kRound; before each round the
 *           engine process is stopped (SIGSTOP, seen in /proc) and one
 *           uncounted send() queues the SEND the round's writes ride on;
 *           after it the engine continues and the peer drains the round.
 *           So every counted send finds a SEND queued and not taken,
 *           whatever the engine did between calls (issue 33: the figure
 *           swung 148.7 -> 163-174 with the engine's pace under callgrind)
 *   send1   the same send(), but before each one the engine has taken the
 *           last (the peer received it, outside the counted function): every
 *           call queues its own SEND, as a request/response server's does
 *   epoll   epoll_wait() returning one ready socket among 1,000 registered.
 *           With SHIM_CALLS_ENGINE_PID set, counted with the engine stopped
 *           after the warm-up and 64 more uncounted waits (which reap what
 *           it had sent: the last watch answers): no completion can arrive
 *           during the counted waits. Before, some runs reaped a late batch
 *           of answers inside them (280.0 or 297.5 on one build, issue 33)
 *   poll    poll() on one ready socket
 *
 * Setup (connections, filling rings, waiting for data) happens outside the
 * measured function, measured_call(); the script tells callgrind to count
 * only inside it (--toggle-collect), and divides by ITERATIONS. Prints
 * "OK CALL ITERATIONS" when every measured call did what it should, so a
 * count is never reported for calls that failed. */
#include <arpa/inet.h>
#include <signal.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kMsg = 64, kEpollMembers = 1000, kRound = 50 };

static void die(const char *what)
{
    fprintf(stderr, "shim_calls: %s: %s\n", what, strerror(errno));
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A connected pair through the engine: *client connects to a listener on
 * PEER_IP, *server is the accepted end. */
static void connect_pair(const char *ip, int *client, int *server)
{
    static int listener = -1;
    static struct sockaddr_in at;
    if (listener < 0) {
        listener = socket(AF_INET, SOCK_STREAM, 0);
        if (listener < 0) die("socket");
        memset(&at, 0, sizeof at);
        at.sin_family = AF_INET;
        if (inet_pton(AF_INET, ip, &at.sin_addr) != 1) {
            fprintf(stderr, "shim_calls: '%s' is not an IPv4 address\n", ip);
            exit(2);
        }
        if (bind(listener, (struct sockaddr *)&at, sizeof at) != 0) die("bind");
        if (listen(listener, 1024) != 0) die("listen");
        socklen_t len = sizeof at;
        if (getsockname(listener, (struct sockaddr *)&at, &len) != 0) die("getsockname");
    }
    *client = socket(AF_INET, SOCK_STREAM, 0);
    if (*client < 0) die("socket");
    if (connect(*client, (struct sockaddr *)&at, sizeof at) != 0) die("connect");
    *server = accept(listener, NULL, NULL);
    if (*server < 0) die("accept");
    int one = 1;
    setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(*server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Waits (bounded) until fd has at least `bytes` to read. */
static void wait_readable_bytes(int fd, int bytes)
{
    const double deadline = now_s() + 10;
    for (;;) {
        int have = 0;
        if (ioctl(fd, FIONREAD, &have) != 0) die("ioctl FIONREAD");
        if (have >= bytes) return;
        if (now_s() > deadline) {
            fprintf(stderr, "shim_calls: only %d of %d bytes arrived in 10 s\n", have, bytes);
            exit(1);
        }
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, 10);
    }
}

/* send's defined state: the engine process stopped (its state 'T' in
 * /proc, within 10 s) or continued. */
static void engine_hold(pid_t pid, int stop)
{
    if (kill(pid, stop ? SIGSTOP : SIGCONT) != 0) die("kill (the engine, SHIM_CALLS_ENGINE_PID)");
    if (!stop) return;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    const double deadline = now_s() + 10;
    for (;;) {
        char st[512] = "";
        FILE *f = fopen(path, "r");
        if (!f) die("the engine's /proc stat");
        size_t got = fread(st, 1, sizeof st - 1, f);
        fclose(f);
        st[got] = 0;
        const char *paren = strrchr(st, ')');
        if (paren && (paren[2] == 'T' || paren[2] == 't')) return;
        if (now_s() > deadline) {
            fprintf(stderr, "shim_calls: the engine (pid %d) did not stop in 10 s\n", (int)pid);
            exit(1);
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

struct bench;
void measured_call(struct bench *b, int call);
void warmup_call(struct bench *b, int call);

struct bench {
    int fd;      /* the socket the measured call uses */
    int epfd;    /* epoll: the set */
    char buf[kMsg];
    long good;   /* measured calls that did what they should */
};

/* One call of the kind asked for. The switch is part of the overhead the
 * script subtracts (it also counts the empty call 'n'). */
static inline __attribute__((always_inline)) void one_call(struct bench *b, int call)
{
    switch (call) {
    case 'r':
        b->good += recv(b->fd, b->buf, kMsg, 0) == kMsg;
        break;
    case 's':
        b->good += send(b->fd, b->buf, kMsg, 0) == kMsg;
        break;
    case 'e': {
        struct epoll_event ev;
        b->good += epoll_wait(b->epfd, &ev, 1, 0) == 1 && ev.data.fd == b->fd;
        break;
    }
    case 'p': {
        struct pollfd p = {b->fd, POLLIN, 0};
        b->good += poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
        break;
    }
    default:
        b->good++; /* 'n': the empty call, for the loop's own cost */
    }
}

/* Only this function is counted (callgrind --toggle-collect). */
__attribute__((noinline)) void measured_call(struct bench *b, int call) { one_call(b, call); }

/* The same call once before counting: lazy symbol binding and first-use
 * set-up in the shim are paid here, not spread over the counted calls. */
__attribute__((noinline)) void warmup_call(struct bench *b, int call) { one_call(b, call); }

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s recv|send|send1|epoll|poll|none ITERATIONS PEER_IP\n", argv[0]);
        return 2;
    }
    const char *what = argv[1];
    const long n = strtol(argv[2], NULL, 10);
    int call = strcmp(what, "recv") == 0    ? 'r'
                     : strcmp(what, "send") == 0  ? 's'
                     : strcmp(what, "send1") == 0 ? 'S'
                     : strcmp(what, "epoll") == 0 ? 'e'
                     : strcmp(what, "poll") == 0  ? 'p'
                     : strcmp(what, "none") == 0  ? 'n'
                                                  : 0;
    if (!call || n <= 0 || n > 100000) {
        fprintf(stderr, "shim_calls: want recv|send|send1|epoll|poll|none and 1..100000 iterations\n");
        return 2;
    }
    struct rlimit rl = {4096, 4096};
    setrlimit(RLIMIT_NOFILE, &rl);

    struct bench b = {.fd = -1, .epfd = -1};
    memset(b.buf, 'x', sizeof b.buf);
    int client, server;
    connect_pair(argv[3], &client, &server);
    if (call == 'r') {
        /* Everything the loop (and the warm-up) will read is in the ring
         * before it starts. */
        for (long i = 0; i <= n; i++)
            if (send(client, b.buf, kMsg, 0) != kMsg) die("send (filling)");
        wait_readable_bytes(server, (int)((n + 1) * kMsg));
        b.fd = server;
    } else if (call == 's' || call == 'S') {
        b.fd = client;
    } else if (call == 'e') {
        b.epfd = epoll_create1(0);
        if (b.epfd < 0) die("epoll_create1");
        struct epoll_event ev = {.events = EPOLLIN};
        int members = 0;
        ev.data.fd = server;
        if (epoll_ctl(b.epfd, EPOLL_CTL_ADD, server, &ev) != 0) die("epoll_ctl");
        ev.data.fd = client;
        if (epoll_ctl(b.epfd, EPOLL_CTL_ADD, client, &ev) != 0) die("epoll_ctl");
        members = 2;
        while (members < kEpollMembers) { /* idle connections: never readable */
            int c, s;
            connect_pair(argv[3], &c, &s);
            ev.data.fd = c;
            if (epoll_ctl(b.epfd, EPOLL_CTL_ADD, c, &ev) != 0) die("epoll_ctl");
            ev.data.fd = s;
            if (epoll_ctl(b.epfd, EPOLL_CTL_ADD, s, &ev) != 0) die("epoll_ctl");
            members += 2;
        }
        if (send(client, b.buf, kMsg, 0) != kMsg) die("send");
        wait_readable_bytes(server, kMsg);
        b.fd = server; /* stays readable: level-triggered, never read */
        struct epoll_event got;
        if (epoll_wait(b.epfd, &got, 1, 1000) != 1) die("epoll_wait (warm-up)");
    } else if (call == 'p') {
        if (send(client, b.buf, kMsg, 0) != kMsg) die("send");
        wait_readable_bytes(server, kMsg);
        b.fd = server;
    }
    /* epoll: a set filled at once asks for its members' watches over its
     * first waits (as many per wait as the command queue takes), and their
     * completions come back over the waits after (later when the engine
     * waits for a CPU on a busy machine); the budget is about the wait after
     * all that, so the warm-up is 1,000 waits (it was 64: on a loaded
     * machine the last completions were still reaped in counted calls). */
    /* send1 counts the same send() as send (the same measured_call()). */
    const int each = call == 'S';
    if (each)
        call = 's';
    for (int w = 0; w < (call == 'e' ? 1000 : 1); w++)
        warmup_call(&b, call);
    char sink[kMsg];
    const char *held = getenv("SHIM_CALLS_ENGINE_PID");
    pid_t engine = 0;
    if (held && *held) {
        engine = (pid_t)strtol(held, NULL, 10);
        if (engine <= 0) {
            fprintf(stderr, "shim_calls: SHIM_CALLS_ENGINE_PID='%s' is not a process id\n", held);
            return 2;
        }
    }
    if (call == 'e' && engine) { /* the header: nothing arrives while counting */
        engine_hold(engine, 1);
        for (int w = 0; w < 64; w++)
            warmup_call(&b, call);
        b.good = 0;
        for (long i = 0; i < n; i++)
            measured_call(&b, call);
        engine_hold(engine, 0);
        if (b.good != n) {
            fprintf(stderr, "shim_calls: only %ld of %ld %s calls did what they should\n", b.good, n, what);
            return 1;
        }
        printf("OK %s %ld held\n", what, n);
        return 0;
    }
    if (each) { /* the peer has what was sent: the engine took its SEND */
        wait_readable_bytes(server, kMsg);
        if (recv(server, sink, kMsg, 0) != kMsg) die("recv (draining)");
    }
    b.good = 0;
    if (call == 's' && !each && engine) {
        wait_readable_bytes(server, kMsg); /* the warm-up's bytes: the peer has them */
        if (recv(server, sink, kMsg, MSG_WAITALL) != kMsg) die("recv (draining)");
        for (long i = 0; i < n;) {
            engine_hold(engine, 1);
            long before = b.good;
            warmup_call(&b, call); /* uncounted: queues the SEND the round rides on */
            if (b.good != before + 1) die("send (the round's first)");
            b.good = before;
            long k = 0;
            for (; k < kRound && i < n; k++, i++)
                measured_call(&b, call);
            engine_hold(engine, 0);
            const int bytes = (int)(k + 1) * kMsg;
            char round[(kRound + 1) * kMsg];
            wait_readable_bytes(server, bytes);
            if (recv(server, round, (size_t)bytes, MSG_WAITALL) != bytes) die("recv (draining the round)");
        }
        if (b.good != n) {
            fprintf(stderr, "shim_calls: only %ld of %ld %s calls did what they should\n", b.good, n, what);
            return 1;
        }
        printf("OK %s %ld held\n", what, n);
        return 0;
    }
    for (long i = 0; i < n; i++) {
        measured_call(&b, call);
        if (each) {
            wait_readable_bytes(server, kMsg);
            if (recv(server, sink, kMsg, 0) != kMsg) die("recv (draining)");
        }
    }
    if (b.good != n) {
        fprintf(stderr, "shim_calls: only %ld of %ld %s calls did what they should\n", b.good, n, what);
        return 1;
    }
    if (call == 's' && !each) wait_readable_bytes(server, (int)((n + 1) * kMsg)); /* the sends arrived */
    printf("OK %s %ld\n", what, n);
    return 0;
}
