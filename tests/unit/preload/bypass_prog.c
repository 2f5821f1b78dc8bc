/* Calls that bypass the shim, and the published counters, under
 * libeta-preload.so attached to dti's loopback TEST FIXTURE engine (run by
 * run_readiness_tests.py with the scenario "bypass"). splice, sendfile with
 * an accelerated socket as the source and copy_file_range must fail with
 * EINVAL, fdopen with EOPNOTSUPP (never a read of the placeholder socket);
 * passing one over a Unix socket (SCM_RIGHTS, received with recvmsg or
 * recvmmsg) works, and where it cannot
 * (a receiver of another group with sockets of its own) the receiver is
 * warned and the placeholder reads ENOTCONN; each refusal counted in
 * <socket>.preload/<pid>, which eta_preload_stats_each() reads back; a file
 * left by a dead process is skipped. ETA_NET must name 10.9.0.1/24. */
#include <arpa/inet.h>
#include <errno.h>
#include <eta/preload_stats.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
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

/* Sends one byte with n descriptors (SCM_RIGHTS); recv_fds takes up to n. */
static ssize_t send_fds(int u, const int *fds, int n)
{
    char one = 'x';
    struct iovec iov = {&one, 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                       .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
    return sendmsg(u, &m, 0);
}

static int recv_fds(int u, int *fds, int n)
{
    char got;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {&got, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    if (recvmsg(u, &m, 0) != 1)
        return -1;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    if (!cm || cm->cmsg_type != SCM_RIGHTS)
        return 0;
    int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    memcpy(fds, CMSG_DATA(cm), (k < n ? k : n) * sizeof(int));
    return k;
}

/* One descriptor received with recvmmsg (one message); -1: none. */
static int recv_fd_mmsg(int u)
{
    char got;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {&got, 1};
    struct mmsghdr mm = {.msg_hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                                     .msg_controllen = sizeof ctl.buf}};
    if (recvmmsg(u, &mm, 1, 0, NULL) != 1 || mm.msg_len != 1)
        return -1;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mm.msg_hdr);
    if (!cm || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    return fd;
}

/* The unrelated process of sc_bypass: with a listener of its own on the PPE,
 * it receives an accelerated socket of another group. */
static int sc_receiver(int u)
{
    int own = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "10.9.0.1", &a.sin_addr);
    CHECK(own >= 0 && bind(own, (struct sockaddr *)&a, sizeof a) == 0 && listen(own, 4) == 0);
    int fd = -1;
    CHECK(recv_fds(u, &fd, 1) == 1);
    char b;
    errno = 0;
    CHECK(read(fd, &b, 1) == -1 && errno == ENOTCONN); /* the placeholder, said loudly */
    struct seen seen = {0};
    CHECK(eta_preload_stats_each(getenv("ETA_SOCKET"), note, &seen) >= 1 && seen.mine == 1);
    CHECK(seen.st.bypass_refused == 1);
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
    /* Passed over a Unix socket (to itself here): it arrives as the same
     * accelerated socket, with a kernel descriptor beside it. */
    int u[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, u) == 0);
    int fds[2] = {p[0], s};
    CHECK(send_fds(u[0], fds, 2) == 1);
    int got[2] = {-1, -1};
    CHECK(recv_fds(u[1], got, 2) == 2);
    char b[4];
    CHECK(read(got[1], b, 4) == 4 && memcmp(b, "data", 4) == 0); /* through the PPE, not the placeholder */
    close(got[0]);
    close(got[1]); /* one name of two: the socket stays open */
    CHECK(write(c, "more", 4) == 4);
    CHECK(read(s, b, 4) == 4 && memcmp(b, "more", 4) == 0);
    /* recvmmsg claims what it receives as recvmsg does: the same socket,
     * not its placeholder (ENOTCONN). */
    CHECK(send_fds(u[0], &s, 1) == 1);
    int via_mmsg = recv_fd_mmsg(u[1]);
    CHECK(via_mmsg >= 0 && via_mmsg != s);
    CHECK(write(c, "mmsg", 4) == 4);
    CHECK(read(via_mmsg, b, 4) == 4 && memcmp(b, "mmsg", 4) == 0);
    close(via_mmsg);
    /* An unrelated process (exec'd, nothing handed over: a group of its
     * own) that has accelerated sockets of its own cannot use it: warned
     * there, counted there; the sender's sendmsg succeeds. */
    CHECK(fcntl(s, F_SETFD, FD_CLOEXEC) == 0 && fcntl(c, F_SETFD, FD_CLOEXEC) == 0);
    CHECK(send_fds(u[0], &s, 1) == 1);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        char arg[16];
        snprintf(arg, sizeof arg, "%d", u[1]);
        execl("/proc/self/exe", "bypass_prog", "receiver", arg, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(u[0]);
    close(u[1]);
    /* The bytes are still there for read(): nothing was taken. */
    CHECK(write(c, "data", 4) == 4);
    CHECK(read(s, b, 4) == 4 && memcmp(b, "data", 4) == 0);

    int c2, s2;
    pair(&c2, &s2);
    /* Other calls through syscall() on an accelerated connection act on the
     * connection, as their wrappers do, not on its placeholder (which would
     * answer ENOTCONN/EPIPE). */
    CHECK(syscall(SYS_write, c2, "raw!", 4) == 4);
    struct pollfd pr = {.fd = s2, .events = POLLIN};
    CHECK(syscall(SYS_ppoll, &pr, 1, NULL, NULL, 8) == 1 && (pr.revents & POLLIN));
    CHECK(syscall(SYS_read, s2, b, 4) == 4 && memcmp(b, "raw!", 4) == 0);
    CHECK(syscall(SYS_sendto, s2, "back", 4, 0, NULL, 0) == 4);
    CHECK(syscall(SYS_recvfrom, c2, b, 4, MSG_WAITALL, NULL, NULL) == 4 && memcmp(b, "back", 4) == 0);
    struct sockaddr_in peer;
    socklen_t plen = sizeof peer;
    CHECK(syscall(SYS_getpeername, s2, &peer, &plen) == 0 && peer.sin_family == AF_INET && peer.sin_port != 0);
    CHECK(syscall(SYS_fcntl, s2, F_GETFL) >= 0);
    /* libuv closes with syscall(SYS_close, fd): that is a close too (the
     * peer sees the FIN). */
    CHECK(syscall(SYS_close, s2) == 0);
    struct pollfd pc = {.fd = c2, .events = POLLIN};
    CHECK(poll(&pc, 1, 5000) == 1 && read(c2, b, 1) == 0);
    close(c2);

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
    CHECK(seen.st.attached == 1 && seen.st.fallbacks[0] >= 2 && seen.st.accepted == 2);
    if (seen.st.bypass_refused != 5)
        printf("FAIL: bypass_refused %llu, want 5\n", (unsigned long long)seen.st.bypass_refused);
    CHECK(seen.st.bypass_refused == 5);
    fclose(pf);
    close(p[1]);
    close(c);
    close(s);
    return 0;
}

int main(int argc, char **argv)
{
    const char *sock = getenv("ETA_SOCKET");
    if (argc == 3 && strcmp(argv[1], "receiver") == 0 && sock)
        return sc_receiver(atoi(argv[2]));
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
