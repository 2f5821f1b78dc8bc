/* libdti's own descriptors under libeta-preload.so attached to dti's loopback
 * TEST FIXTURE engine (run by run_readiness_tests.py with the scenario
 * "internal_fds"; ETA_NET must name 10.9.0.1/24).
 *
 * libdti makes its system calls itself (dti/lib/sys.h), so none of them
 * reaches the shim's wrappers, which therefore need no re-entrancy guard:
 *  - its control socket (AF_UNIX) is never seen by the shim's socket():
 *    nothing is counted `not-inet`;
 *  - a thread's context (an epoll set and an eventfd, made when the thread
 *    first uses an accelerated socket) is closed when the thread ends: no
 *    descriptor is left behind;
 *  - its control socket is the shim's to protect: close() answers EBADF;
 *  - in a fork child, libdti closes the parent's control socket copy
 *    without the shim's close(): the shim forgets that number all the same,
 *    so the child may use it again (dup2 onto it, close it). */
#include <arpa/inet.h>
#include <errno.h>
#include <eta/preload_stats.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define FD_SCAN 1024 /* libdti's descriptors sit just under RLIMIT_NOFILE (1024 at most) */

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

static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < FD_SCAN; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

/* The SOCK_SEQPACKET sockets open in this process: libdti's control sockets
 * (the program itself has none). */
static int control_sockets(int *out, int max)
{
    int n = 0;
    for (int fd = 3; fd < FD_SCAN && n < max; fd++) {
        struct stat st;
        int type = 0;
        socklen_t tl = sizeof type;
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_SEQPACKET)
            out[n++] = fd;
    }
    return n;
}

static int find_own_stats(const struct eta_preload_stats *st, void *arg)
{
    if (st->pid == getpid())
        *(struct eta_preload_stats *)arg = *st;
    return 0;
}

struct echo {
    int client, server;
};

/* A thread of its own: its first send and receive make its DTI context. */
static void *echo_once(void *arg)
{
    struct echo *e = arg;
    char b[5];
    CHECK(write(e->client, "hello", 5) == 5);
    CHECK(read(e->server, b, 5) == 5 && memcmp(b, "hello", 5) == 0);
    return NULL;
}

static void child_reuses_control_numbers(const int *ctl, int n_ctl, int client)
{
    int reused = 0;
    for (int i = 0; i < n_ctl; i++) {
        if (fcntl(ctl[i], F_GETFD) >= 0)
            continue; /* still libdti's (its number kept) */
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC); /* may take that very number */
        CHECK(null >= 0);
        if (null != ctl[i]) {
            CHECK(dup2(null, ctl[i]) == ctl[i]); /* EBUSY if the shim still took it for libdti's */
            CHECK(close(null) == 0);
        }
        CHECK(close(ctl[i]) == 0); /* EBADF likewise */
        reused++;
    }
    CHECK(reused >= 1); /* libdti closed the parent's copy of its control socket */
    CHECK(write(client, "child", 5) == 5); /* the inherited socket still works */
}

static int sc_internal_fds(const char *socket_path)
{
    int c, s;
    pair(&c, &s);

    /* A thread's context comes and goes with the thread. */
    int before = open_fds();
    struct echo e = {c, s};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, echo_once, &e) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(open_fds() == before);

    /* Nothing of libdti's reached the shim's socket(). */
    struct eta_preload_stats st = {0};
    CHECK(eta_preload_stats_each(socket_path, find_own_stats, &st) == 1);
    CHECK(st.attached == 1 && st.fallbacks[0] >= 2);
    if (st.fallbacks[1] != 0)
        printf("FAIL: %llu sockets counted not-inet\n", (unsigned long long)st.fallbacks[1]);
    CHECK(st.fallbacks[1] == 0);

    /* libdti's control socket is protected from the program. */
    int ctl[8];
    int n_ctl = control_sockets(ctl, 8);
    CHECK(n_ctl >= 1);
    for (int i = 0; i < n_ctl; i++) {
        errno = 0;
        CHECK(close(ctl[i]) == -1 && errno == EBADF);
        CHECK(fcntl(ctl[i], F_GETFD) >= 0);
    }

    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        child_reuses_control_numbers(ctl, n_ctl, c);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char b[5];
    CHECK(read(s, b, 5) == 5 && memcmp(b, "child", 5) == 0);
    for (int i = 0; i < n_ctl; i++)
        CHECK(fcntl(ctl[i], F_GETFD) >= 0); /* the parent keeps its own */
    close(c);
    close(s);
    return 0;
}

int main(int argc, char **argv)
{
    const char *sock = getenv("ETA_SOCKET");
    if (argc != 2 || strcmp(argv[1], "internal_fds") != 0 || !sock) {
        fprintf(stderr, "usage: ETA_SOCKET=PATH %s internal_fds\n", argv[0]);
        return 2;
    }
    alarm(60);
    int rc = sc_internal_fds(sock);
    if (rc == 0)
        printf("OK\n");
    return rc;
}
