/* Large blocking reads under libeta-preload.so use posted receive (the
 * engine writes into the program's buffer), with the kernel's semantics.
 * Run by run_readiness_tests.py against dti's loopback TEST FIXTURE engine
 * (ETA_NET must name 10.9.0.1/24), one scenario per invocation:
 *   stream    read/recv/recvfrom/recvmsg/readv of 1 MiB while the ring is
 *             empty are posted; 5 MiB byte-exact, then end of stream
 *   waitall   MSG_WAITALL: one post answered once, with every byte asked for
 *   eintr     a signal without SA_RESTART ends a posted wait with EINTR (nothing
 *             landed) or with the bytes that landed (MSG_WAITALL); with
 *             SA_RESTART the read goes on; SO_RCVTIMEO: EAGAIN. No byte lost
 *             or given twice.
 *   eintr_spin the same with the reader still SPINNING when the signal lands
 *             (ETA_SPIN_US=1000000: the program re-executes itself with it):
 *             no SA_RESTART → EINTR, SA_RESTART → the read goes on; and
 *             sigaction(sig, NULL, &old) / signal() answer the program's
 *             handlers, never the shim's trampoline
 *   pump      the post's answer is reaped by a poll() in a signal handler while
 *             the read waits: it reaches the read all the same
 *   shutdown  shutdown(SHUT_RD) from another thread ends a posted read (0)
 *   nonblock  MSG_DONTWAIT, O_NONBLOCK and MSG_PEEK never post
 * Every scenario runs under alarm(): a read that never returns kills it.
 * No verdict depends on timing: each helper thread waits for an event (a
 * post made, bytes landed, the reader asleep in the kernel), bounded by
 * BOUND_MS, far above any honest delay on a busy machine. */
#include <arpa/inet.h>
#include <eta/preload_stats.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define MIB (1u << 20)
#define BOUND_MS 60000 /* a helper's wait for an event; a busy machine's delays are far below */

static void pair(int *client, int *server)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    *client = socket(AF_INET, SOCK_STREAM, 0);
    inet_pton(AF_INET, "10.9.0.1", &a.sin_addr);
    CHECK(connect(*client, (struct sockaddr *)&a, sizeof a) == 0);
    *server = accept(l, NULL, NULL);
    CHECK(*server >= 0);
    close(l);
}

/* The byte at stream offset i: a pattern that a lost, repeated or shifted
 * byte breaks. */
static uint8_t pattern(uint64_t i) { return (uint8_t)((i * 7) ^ (i >> 11) ^ (i >> 19)); }

static void send_pattern(int fd, uint64_t *off, size_t n)
{
    static uint8_t buf[64 * 1024];
    while (n) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        for (size_t i = 0; i < k; i++)
            buf[i] = pattern(*off + i);
        size_t done = 0;
        while (done < k) {
            ssize_t w = send(fd, buf + done, k - done, MSG_NOSIGNAL);
            CHECK(w > 0);
            done += (size_t)w;
        }
        *off += k;
        n -= k;
    }
}

static int matches(const uint8_t *buf, uint64_t off, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != pattern(off + i))
            return 0;
    return 1;
}

/* ---- this process's counters (eta/preload_stats.h) ---------------------- */

static struct eta_preload_stats stats(void)
{
    struct eta_preload_stats st = {0};
    const char *sock = getenv("ETA_SOCKET");
    char path[512];
    snprintf(path, sizeof path, "%s.preload/%d", sock ? sock : "/run/eta/ppe.sock", (int)getpid());
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(pread(fd, &st, sizeof st, 0) == (ssize_t)sizeof st);
    close(fd);
    return st;
}

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Until this process has made more than n posts (a read is waiting on one). */
static void wait_posts_above(uint64_t n)
{
    uint64_t end = now_ms() + BOUND_MS;
    while (stats().posted_reads <= n) {
        CHECK(now_ms() < end);
        struct timespec t = {0, 200000};
        nanosleep(&t, NULL);
    }
}

static void wait_sleeps_above(uint64_t n)
{
    uint64_t end = now_ms() + BOUND_MS;
    while (stats().sleeps <= n) {
        CHECK(now_ms() < end);
        struct timespec t = {0, 200000};
        nanosleep(&t, NULL);
    }
}

/* Until thread `tid` of this process sleeps in poll()/ppoll() (the shim's
 * wait after its spin; /proc/self/task/TID/syscall names the call a thread
 * is blocked in, "running" while it runs): the `eintr` case tests the
 * sleep, `eintr_spin` the spin. */
static void wait_asleep_in_poll(pid_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    uint64_t end = now_ms() + BOUND_MS;
    for (;;) {
        char buf[128] = {0};
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        long nr = -1;
        if (n > 0 && sscanf(buf, "%ld", &nr) == 1 && (nr == SYS_poll || nr == SYS_ppoll))
            return;
        CHECK(now_ms() < end);
        struct timespec t = {0, 200000};
        nanosleep(&t, NULL);
    }
}

/* ---- stream: every call that reads, posted, byte-exact ----------------- */

/* Posts made before the reader's call: the helper threads wait for one more
 * (set by the reader before it starts them, so none is missed). */
static uint64_t posts_base;

struct writer {
    int fd;
    uint64_t off;
    int rounds;
};

static void *stream_writer(void *arg)
{
    struct writer *w = arg;
    static const size_t sizes[] = {100000, MIB + 3, 65536, 1, 300001, 2 * MIB};
    uint64_t seen = posts_base;
    for (int r = 0; r < w->rounds; r++) {
        wait_posts_above(seen); /* the reader waits on a post: the ring is empty */
        seen = stats().posted_reads;
        send_pattern(w->fd, &w->off, sizes[r % 6]);
    }
    CHECK(shutdown(w->fd, SHUT_WR) == 0);
    return NULL;
}

static ssize_t read_one_way(int fd, uint8_t *buf, size_t len, int way)
{
    struct iovec v = {buf, len};
    struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
    struct sockaddr_in from;
    socklen_t flen = sizeof from;
    switch (way % 5) {
    case 0: return read(fd, buf, len);
    case 1: return recv(fd, buf, len, 0);
    case 2: return recvfrom(fd, buf, len, 0, (struct sockaddr *)&from, &flen);
    case 3: return recvmsg(fd, &m, 0);
    default: return readv(fd, &v, 1);
    }
}

static int sc_stream(void)
{
    int c, s;
    pair(&c, &s);
    struct eta_preload_stats before = stats();
    struct writer w = {s, 0, 12};
    posts_base = before.posted_reads;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, stream_writer, &w) == 0);
    uint8_t *buf = malloc(MIB);
    CHECK(buf);
    uint64_t got = 0;
    for (int way = 0;; way++) {
        ssize_t n = read_one_way(c, buf, MIB, way);
        CHECK(n >= 0);
        if (n == 0)
            break;
        CHECK(matches(buf, got, (size_t)n));
        got += (uint64_t)n;
    }
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(got == w.off);
    struct eta_preload_stats after = stats();
    CHECK(after.posted_reads - before.posted_reads >= 12); /* one per round at least, the last one answered by EOF */
    CHECK(after.post_refused == 0);
    CHECK(after.posted_bytes - before.posted_bytes > 0 && after.posted_bytes - before.posted_bytes <= got);
    printf("stream: %llu bytes, %llu posts, %llu bytes written by the engine\n", (unsigned long long)got,
           (unsigned long long)(after.posted_reads - before.posted_reads),
           (unsigned long long)(after.posted_bytes - before.posted_bytes));
    free(buf);
    close(c);
    close(s);
    return 0;
}

/* ---- waitall: one post, answered once with everything ----------------- */

static void *waitall_writer(void *arg)
{
    struct writer *w = arg;
    wait_posts_above(posts_base);
    for (int i = 0; i < 5; i++)
        send_pattern(w->fd, &w->off, 60000);
    return NULL;
}

static int sc_waitall(void)
{
    int c, s;
    pair(&c, &s);
    struct eta_preload_stats before = stats();
    struct writer w = {s, 0, 0};
    posts_base = before.posted_reads;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, waitall_writer, &w) == 0);
    uint8_t *buf = malloc(300000);
    CHECK(buf && recv(c, buf, 300000, MSG_WAITALL) == 300000);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(matches(buf, 0, 300000));
    struct eta_preload_stats after = stats();
    CHECK(after.posted_reads - before.posted_reads == 1);
    CHECK(after.posted_bytes - before.posted_bytes == 300000);
    free(buf);
    close(c);
    close(s);
    return 0;
}

/* ---- eintr: signals end (or restart) a posted wait as the kernel's ------ */

static volatile sig_atomic_t handled;
static void on_signal(int sig)
{
    (void)sig;
    handled++;
}

static void handle(int sig, int flags)
{
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = flags};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(sig, &sa, NULL) == 0);
}

struct kicker {
    pthread_t reader;
    pid_t reader_tid;
    int fd;
    uint64_t off;
    const uint8_t *buf; /* the reader's buffer: the bytes landing there */
    size_t land;        /* send this many, wait until they landed, then signal */
    int restart;        /* signal first, then send land bytes */
};

static void *kick(void *arg)
{
    struct kicker *k = arg;
    wait_posts_above(posts_base);
    if (k->restart) {
        int seen = handled;
        CHECK(pthread_kill(k->reader, SIGUSR1) == 0);
        for (uint64_t end = now_ms() + BOUND_MS; handled == seen;)
            CHECK(now_ms() < end);
        send_pattern(k->fd, &k->off, k->land);
        return NULL;
    }
    uint64_t start = k->off;
    if (k->land) {
        send_pattern(k->fd, &k->off, k->land);
        for (uint64_t end = now_ms() + BOUND_MS; !matches(k->buf, start, k->land);) /* the engine wrote them */
            CHECK(now_ms() < end);
    }
    wait_asleep_in_poll(k->reader_tid);
    CHECK(pthread_kill(k->reader, SIGUSR1) == 0);
    return NULL;
}

static int sc_eintr(void)
{
    int c, s;
    pair(&c, &s);
    uint8_t *buf = malloc(MIB);
    CHECK(buf);
    uint64_t got = 0;
    pthread_t t;
    struct kicker k = {pthread_self(), (pid_t)syscall(SYS_gettid), s, 0, buf, 0, 0};

    /* Nothing landed: -1 EINTR; then the bytes sent after it arrive whole. */
    handle(SIGUSR1, 0);
    memset(buf, 0, MIB);
    posts_base = stats().posted_reads;
    CHECK(pthread_create(&t, NULL, kick, &k) == 0);
    errno = 0;
    CHECK(read(c, buf, MIB) == -1 && errno == EINTR);
    CHECK(pthread_join(t, NULL) == 0);
    send_pattern(s, &k.off, 60000); /* fits in the rings: this thread reads them next */
    for (ssize_t n; got < k.off; got += (uint64_t)n) {
        CHECK((n = read(c, buf, MIB)) > 0);
        CHECK(matches(buf, got, (size_t)n));
    }

    /* MSG_WAITALL, 300,000 of 1 MiB landed when the signal comes: they are
     * returned, and the stream goes on after them. */
    for (size_t i = 0; i < MIB; i++)
        buf[i] = (uint8_t)~pattern(got + i);
    k.land = 300000;
    posts_base = stats().posted_reads;
    CHECK(pthread_create(&t, NULL, kick, &k) == 0);
    CHECK(recv(c, buf, MIB, MSG_WAITALL) == 300000);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(matches(buf, got, 300000));
    got += 300000;
    send_pattern(s, &k.off, 50000);
    for (ssize_t n; got < k.off; got += (uint64_t)n) {
        CHECK((n = read(c, buf, MIB)) > 0);
        CHECK(matches(buf, got, (size_t)n));
    }

    /* SA_RESTART: the read goes on and returns the bytes sent after it. */
    handle(SIGUSR1, SA_RESTART);
    k.land = 70000;
    k.restart = 1;
    uint64_t target = got + 70000;
    posts_base = stats().posted_reads;
    CHECK(pthread_create(&t, NULL, kick, &k) == 0);
    for (ssize_t n; got < target; got += (uint64_t)n) {
        CHECK((n = read(c, buf, MIB)) > 0); /* never EINTR */
        CHECK(matches(buf, got, (size_t)n));
    }
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(got == k.off);

    /* SO_RCVTIMEO: EAGAIN, then the next bytes whole. */
    struct timeval tv = {0, 100000};
    CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    uint64_t posts = stats().posted_reads;
    errno = 0;
    CHECK(read(c, buf, MIB) == -1 && errno == EAGAIN);
    CHECK(stats().posted_reads == posts + 1);
    send_pattern(s, &k.off, 4000);
    CHECK(read(c, buf, MIB) == 4000 && matches(buf, got, 4000));
    free(buf);
    close(c);
    close(s);
    return 0;
}

/* ---- eintr_spin: a signal that lands while the read spins --------------- */

static void on_info(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    (void)uc;
}

/* The signal goes as soon as the post is out: the reader spins (for up to
 * a second) then, so the handler runs during the spin, not in the kernel. */
static void *kick_now(void *arg)
{
    struct kicker *k = arg;
    wait_posts_above(posts_base);
    int seen = handled;
    CHECK(pthread_kill(k->reader, SIGUSR1) == 0);
    if (k->restart) {
        for (uint64_t end = now_ms() + BOUND_MS; handled == seen;)
            CHECK(now_ms() < end);
        send_pattern(k->fd, &k->off, k->land);
    }
    return NULL;
}

static int sc_eintr_spin(void)
{
    /* What the program installed is what sigaction and signal() answer. */
    struct sigaction old;
    handle(SIGUSR1, SA_RESTART);
    CHECK(sigaction(SIGUSR1, NULL, &old) == 0);
    CHECK(old.sa_handler == on_signal && (old.sa_flags & SA_RESTART) && !(old.sa_flags & SA_SIGINFO));
    struct sigaction si = {.sa_sigaction = on_info, .sa_flags = SA_SIGINFO | SA_NODEFER};
    sigemptyset(&si.sa_mask);
    sigaddset(&si.sa_mask, SIGUSR2);
    CHECK(sigaction(SIGUSR1, &si, &old) == 0 && old.sa_handler == on_signal);
    CHECK(sigaction(SIGUSR1, NULL, &old) == 0);
    CHECK(old.sa_sigaction == on_info && (old.sa_flags & (SA_SIGINFO | SA_NODEFER)) == (SA_SIGINFO | SA_NODEFER) &&
          !(old.sa_flags & SA_RESTART) && sigismember(&old.sa_mask, SIGUSR2) == 1);
    void (*was)(int) = signal(SIGUSR1, SIG_IGN);
    void (*info)(int, siginfo_t *, void *) = on_info;
    CHECK(sizeof was == sizeof info && memcmp(&was, &info, sizeof was) == 0); /* the same pointer */
    CHECK(signal(SIGUSR1, on_signal) == SIG_IGN);
    CHECK(sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler == on_signal && (old.sa_flags & SA_RESTART));

    int c, s;
    pair(&c, &s);
    uint8_t *buf = malloc(MIB);
    CHECK(buf);
    uint64_t got = 0, sleeps = stats().sleeps;
    pthread_t t;
    struct kicker k = {pthread_self(), (pid_t)syscall(SYS_gettid), s, 0, buf, 0, 0};

    /* No SA_RESTART: EINTR, several times; the stream then goes on whole. */
    handle(SIGUSR1, 0);
    for (int round = 0; round < 5; round++) {
        posts_base = stats().posted_reads;
        CHECK(pthread_create(&t, NULL, kick_now, &k) == 0);
        errno = 0;
        CHECK(read(c, buf, MIB) == -1 && errno == EINTR);
        CHECK(pthread_join(t, NULL) == 0);
        send_pattern(s, &k.off, 60000);
        for (ssize_t n; got < k.off; got += (uint64_t)n) {
            CHECK((n = read(c, buf, MIB)) > 0);
            CHECK(matches(buf, got, (size_t)n));
        }
    }

    /* SA_RESTART: the read goes on and returns the bytes sent after it. */
    handle(SIGUSR1, SA_RESTART);
    k.land = 70000;
    k.restart = 1;
    for (int round = 0; round < 3; round++) {
        uint64_t target = got + 70000;
        posts_base = stats().posted_reads;
        CHECK(pthread_create(&t, NULL, kick_now, &k) == 0);
        for (ssize_t n; got < target; got += (uint64_t)n) {
            CHECK((n = read(c, buf, MIB)) > 0); /* never EINTR */
            CHECK(matches(buf, got, (size_t)n));
        }
        CHECK(pthread_join(t, NULL) == 0);
        CHECK(got == k.off);
    }
    /* Not a verdict (a busy machine may delay the signal past the spin):
     * how many of the 8 waits slept at all. */
    printf("eintr_spin: %llu of 8 waits slept\n", (unsigned long long)(stats().sleeps - sleeps));
    free(buf);
    close(c);
    close(s);
    return 0;
}

/* ---- pump: the answer reaped by another call of the thread ------------- */

static int pump_pipe[2], idle_fd;
static const uint8_t *pump_buf;
static uint64_t pump_off;

/* SA_RESTART handler: has the bytes sent, then polls another (idle)
 * accelerated socket while they land, so that its poll reaps the post's
 * answer. */
static void on_pump_signal(int sig)
{
    (void)sig;
    char go = 'g';
    CHECK(write(pump_pipe[1], &go, 1) == 1);
    struct pollfd p = {idle_fd, POLLIN, 0};
    int polls = 0, after = 0;
    while (after < 3 && polls++ < 500) {
        CHECK(poll(&p, 1, 20) == 0);
        if (after || matches(pump_buf, pump_off, 1))
            after++; /* bytes landed: the answer comes in the same engine pass */
    }
    handled++;
}

static void *pump_writer(void *arg)
{
    struct kicker *k = arg;
    wait_posts_above(posts_base);
    CHECK(pthread_kill(k->reader, SIGUSR2) == 0);
    char go;
    CHECK(read(pump_pipe[0], &go, 1) == 1);
    send_pattern(k->fd, &k->off, 200000);
    return NULL;
}

static int sc_pump(void)
{
    int c, s, idle_peer;
    pair(&c, &s);
    pair(&idle_fd, &idle_peer);
    CHECK(pipe(pump_pipe) == 0);
    struct sigaction sa = {.sa_handler = on_pump_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
    uint8_t *buf = malloc(MIB);
    CHECK(buf);
    memset(buf, 0, MIB);
    pump_buf = buf;
    pump_off = 0;
    struct kicker k = {pthread_self(), (pid_t)syscall(SYS_gettid), s, 0, buf, 0, 0};
    pthread_t t;
    uint64_t posts = posts_base = stats().posted_reads;
    CHECK(pthread_create(&t, NULL, pump_writer, &k) == 0);
    ssize_t n = read(c, buf, MIB);
    CHECK(handled == 1);
    CHECK(n > 0 && matches(buf, 0, (size_t)n));
    CHECK(stats().posted_reads == posts + 1); /* the one post, answered once */
    for (uint64_t got = (uint64_t)n; got < 200000; got += (uint64_t)n) { /* the rest: nothing lost */
        CHECK((n = read(c, buf, MIB)) > 0);
        CHECK(matches(buf, got, (size_t)n));
    }
    CHECK(pthread_join(t, NULL) == 0);
    free(buf);
    return 0;
}

/* ---- shutdown(SHUT_RD) from another thread ends a posted read --------- */

static void *shut_reader_side(void *arg)
{
    wait_posts_above(posts_base);
    CHECK(shutdown(*(int *)arg, SHUT_RD) == 0);
    return NULL;
}

static int sc_shutdown(void)
{
    int c, s;
    pair(&c, &s);
    uint8_t *buf = malloc(MIB);
    pthread_t t;
    posts_base = stats().posted_reads;
    CHECK(buf && pthread_create(&t, NULL, shut_reader_side, &c) == 0);
    CHECK(read(c, buf, MIB) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    free(buf);
    return 0;
}

/* ---- nonblock: what never posts ---------------------------------------- */

static void *peek_writer(void *arg)
{
    struct kicker *k = arg;
    wait_sleeps_above(k->land); /* the peek sleeps: it waits as before, on the ring */
    send_pattern(k->fd, &k->off, 100000);
    return NULL;
}

static int sc_nonblock(void)
{
    int c, s;
    pair(&c, &s);
    uint8_t *buf = malloc(MIB);
    CHECK(buf);
    uint64_t posts = stats().posted_reads;
    errno = 0;
    CHECK(recv(c, buf, MIB, MSG_DONTWAIT) == -1 && errno == EAGAIN);
    CHECK(fcntl(c, F_SETFL, O_NONBLOCK) == 0);
    errno = 0;
    CHECK(read(c, buf, MIB) == -1 && errno == EAGAIN);
    CHECK(fcntl(c, F_SETFL, 0) == 0);
    struct kicker k = {pthread_self(), (pid_t)syscall(SYS_gettid), s, 0, buf, stats().sleeps, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, peek_writer, &k) == 0);
    ssize_t n = recv(c, buf, MIB, MSG_PEEK);
    CHECK(n > 0 && matches(buf, 0, (size_t)n));
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(stats().posted_reads == posts);
    uint64_t got = 0;
    for (ssize_t r; got < 100000; got += (uint64_t)r) { /* the peeked bytes again, then the rest */
        CHECK((r = read(c, buf, MIB)) > 0);
        CHECK(matches(buf, got, (size_t)r));
    }
    free(buf);
    return 0;
}

/* ---- eintr_early: a signal before the waiter's first look ---------------
 * The shim's TEST HOOK ETA_TEST_SIGNAL_AT_WAIT=SIGUSR2 (signals.c) raises
 * SIGUSR2 on the caller's thread as each blocking wait begins, after the
 * call began and before the waiter first looks at the signal counts: the
 * moment a signal from another thread lands in only by chance. A handler
 * that runs then interrupts the call as one during the sleep does. Each
 * call below has a bound (SO_RCVTIMEO, epoll's timeout, 20 s: far above any
 * honest delay) so that a missed signal fails the check (EAGAIN, 0 events)
 * instead of hanging; SIG_IGN turns the hook off between the cases. */
static volatile sig_atomic_t early_handled;
static void on_early(int sig)
{
    (void)sig;
    early_handled++;
}

static void early_handle(int flags)
{
    struct sigaction sa = {.sa_handler = on_early, .sa_flags = flags};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
}

static void early_off(void) { CHECK(signal(SIGUSR2, SIG_IGN) != SIG_ERR); }

struct early_sender {
    int fd;
    uint64_t *off;
    int seen; /* early_handled before the read */
};

/* Sends 5,000 bytes once the reader's handler ran (its wait then goes on). */
static void *early_send(void *arg)
{
    struct early_sender *e = arg;
    for (uint64_t end = now_ms() + BOUND_MS; early_handled == e->seen;)
        CHECK(now_ms() < end);
    send_pattern(e->fd, e->off, 5000);
    return NULL;
}

static int sc_eintr_early(void)
{
    int c, s;
    early_off();
    pair(&c, &s);
    struct timeval tv = {20, 0};
    CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    uint8_t *buf = malloc(MIB);
    CHECK(buf);
    uint64_t off = 0, got = 0;

    /* No SA_RESTART: a posted read (1 MiB), a copying one (100 bytes), an
     * accept and epoll_wait each end with EINTR, the handler run once. */
    early_handle(0);
    int seen = early_handled;
    errno = 0;
    CHECK(read(c, buf, MIB) == -1 && errno == EINTR);
    CHECK(early_handled == seen + 1);
    errno = 0;
    CHECK(recv(c, buf, 100, 0) == -1 && errno == EINTR);
    early_off();
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0);
    CHECK(setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    int ep = epoll_create1(0);
    CHECK(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = c}, out[4];
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0);
    early_handle(0);
    errno = 0;
    CHECK(accept(l, NULL, NULL) == -1 && errno == EINTR);
    errno = 0;
    CHECK(epoll_wait(ep, out, 4, 20000) == -1 && errno == EINTR);

    /* SA_RESTART: the reads go on and return the bytes sent after the
     * handler ran; epoll_wait is never restarted (signal(7)): EINTR. (No
     * SO_RCVTIMEO now: with one, Linux answers EINTR even for SA_RESTART.) */
    struct timeval none = {0, 0};
    CHECK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none) == 0);
    early_handle(SA_RESTART);
    for (int round = 0; round < 2; round++) {
        size_t len = round == 0 ? MIB : 100; /* posted, then copying */
        struct early_sender e = {s, &off, early_handled};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, early_send, &e) == 0);
        for (uint64_t target = got + 5000; got < target;) {
            ssize_t n = read(c, buf, len); /* never EINTR */
            CHECK(n > 0 && matches(buf, got, (size_t)n));
            got += (uint64_t)n;
        }
        CHECK(pthread_join(t, NULL) == 0);
    }
    errno = 0;
    CHECK(epoll_wait(ep, out, 4, 20000) == -1 && errno == EINTR);
    early_off();
    close(ep);
    close(l);
    free(buf);
    close(c);
    close(s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s stream|waitall|eintr|eintr_spin|eintr_early|pump|shutdown|nonblock\n", argv[0]);
        return 2;
    }
    const char *spin = getenv("ETA_SPIN_US");
    if (!strcmp(argv[1], "eintr_spin") && (!spin || strcmp(spin, "1000000"))) {
        /* The shim reads ETA_SPIN_US at start: again, with the longest spin. */
        CHECK(setenv("ETA_SPIN_US", "1000000", 1) == 0);
        execv("/proc/self/exe", argv);
        CHECK(!"execv");
    }
    if (!strcmp(argv[1], "eintr_early") && !getenv("ETA_TEST_SIGNAL_AT_WAIT")) {
        /* The shim reads its test hook at start: again, with it on. */
        char sig[8];
        snprintf(sig, sizeof sig, "%d", SIGUSR2);
        CHECK(setenv("ETA_TEST_SIGNAL_AT_WAIT", sig, 1) == 0);
        execv("/proc/self/exe", argv);
        CHECK(!"execv");
    }
    alarm(150); /* a hang guard only: every wait inside is for an event */
    const char *sc = argv[1];
    int rc = !strcmp(sc, "stream")     ? sc_stream()
             : !strcmp(sc, "waitall")  ? sc_waitall()
             : !strcmp(sc, "eintr")    ? sc_eintr()
             : !strcmp(sc, "eintr_spin") ? sc_eintr_spin()
             : !strcmp(sc, "eintr_early") ? sc_eintr_early()
             : !strcmp(sc, "pump")     ? sc_pump()
             : !strcmp(sc, "shutdown") ? sc_shutdown()
             : !strcmp(sc, "nonblock") ? sc_nonblock()
                                       : 2;
    if (rc == 0)
        printf("OK\n");
    return rc;
}
