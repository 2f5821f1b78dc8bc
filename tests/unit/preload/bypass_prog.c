/* Calls that bypass the shim, and the published counters, under
 * libeta-preload.so attached to dti's loopback TEST FIXTURE engine (run by
 * run_readiness_tests.py with the scenario "bypass"). splice, sendfile with
 * an accelerated socket as the source and copy_file_range must fail with
 * EINVAL, fdopen and passing one over a Unix socket (SCM_RIGHTS) with
 * EOPNOTSUPP (never a read of the placeholder socket), counted in
 * <socket>.preload/<pid>, which eta_preload_stats_each() reads back; a file
 * left by a dead process is skipped. ETA_NET must name 10.9.0.1/24. */
#include <arpa/inet.h>
#include <errno.h>
#include <eta/preload_stats.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

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

struct seen {
    int mine, others;
    struct eta_preload_stats st;
};

static int note(const struct eta_preload_stats *st, void *arg)
{
    struct seen *s = arg;
    if (st->pid == getpid()) {
        s->mine++;
        s->st = *st;
    } else {
        s->others++;
    }
    return 0;
}

static int sc_bypass(const char *socket_path)
{
    int c, s;
    pair(&c, &s);
    CHECK(write(c, "data", 4) == 4);
    int p[2];
    CHECK(pipe(p) == 0);
    errno = 0;
    CHECK(splice(s, NULL, p[1], NULL, 4, 0) == -1 && errno == EINVAL);
    CHECK(write(p[1], "x", 1) == 1);
    CHECK(splice(p[0], NULL, c, NULL, 1, 0) == -1 && errno == EINVAL);
    CHECK(sendfile(p[1], s, NULL, 4) == -1 && errno == EINVAL);
    CHECK(copy_file_range(s, NULL, p[1], NULL, 4, 0) == -1 && errno == EINVAL);
    /* A stdio stream would read the placeholder: fdopen refuses. */
    CHECK(fdopen(s, "r") == NULL && errno == EOPNOTSUPP);
    FILE *pf = fdopen(p[0], "r"); /* anything else is glibc's */
    CHECK(pf != NULL);
    /* Passing it to another process over a Unix socket would hand over its
     * placeholder: refused, nothing sent; a kernel descriptor still passes. */
    int u[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, u) == 0);
    char one = 'x';
    struct iovec iov = {&one, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                       .msg_controllen = CMSG_SPACE(2 * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(2 * sizeof(int));
    int fds[2] = {p[0], s};
    memcpy(CMSG_DATA(cm), fds, sizeof fds);
    errno = 0;
    CHECK(sendmsg(u[0], &m, 0) == -1 && errno == EOPNOTSUPP);
    m.msg_controllen = CMSG_SPACE(sizeof(int));
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    CHECK(sendmsg(u[0], &m, 0) == 1); /* the pipe alone */
    char got;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(2 * sizeof(int))];
    } rctl;
    struct iovec riov = {&got, 1};
    struct msghdr rm = {.msg_iov = &riov, .msg_iovlen = 1, .msg_control = rctl.buf, .msg_controllen = sizeof rctl.buf};
    CHECK(recvmsg(u[1], &rm, 0) == 1 && got == 'x'); /* exactly one message went */
    struct cmsghdr *rc = CMSG_FIRSTHDR(&rm);
    CHECK(rc && rc->cmsg_type == SCM_RIGHTS && rc->cmsg_len == CMSG_LEN(sizeof(int)));
    int passed;
    memcpy(&passed, CMSG_DATA(rc), sizeof passed);
    close(passed);
    close(u[0]);
    close(u[1]);
    /* The bytes are still there for read(): nothing was taken. */
    char b[4];
    CHECK(read(s, b, 4) == 4 && memcmp(b, "data", 4) == 0);

    /* A counters file left by a process that died: skipped. */
    pid_t dead = fork();
    CHECK(dead >= 0);
    if (dead == 0)
        _exit(0);
    CHECK(waitpid(dead, NULL, 0) == dead);
    char path[4200];
    snprintf(path, sizeof path, "%s.preload/%d", socket_path, (int)dead);
    struct eta_preload_stats fake = {.magic = ETA_PRELOAD_STATS_MAGIC, .version = ETA_PRELOAD_STATS_VERSION,
                                     .pid = dead};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, &fake, sizeof fake) == (ssize_t)sizeof fake);
    close(fd);

    struct seen seen = {0};
    int n = eta_preload_stats_each(socket_path, note, &seen);
    unlink(path);
    CHECK(n == 1 && seen.mine == 1 && seen.others == 0);
    CHECK(seen.st.attached == 1 && seen.st.fallbacks[0] >= 2 && seen.st.accepted == 1);
    if (seen.st.bypass_refused != 6)
        printf("FAIL: bypass_refused %llu, want 6\n", (unsigned long long)seen.st.bypass_refused);
    CHECK(seen.st.bypass_refused == 6);
    fclose(pf);
    close(p[1]);
    close(c);
    close(s);
    return 0;
}

int main(int argc, char **argv)
{
    const char *sock = getenv("ETA_SOCKET");
    if (argc != 2 || strcmp(argv[1], "bypass") != 0 || !sock) {
        fprintf(stderr, "usage: ETA_SOCKET=PATH %s bypass\n", argv[0]);
        return 2;
    }
    alarm(60);
    int rc = sc_bypass(sock);
    if (rc == 0)
        printf("OK\n");
    return rc;
}
