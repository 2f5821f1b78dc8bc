/* io_uring on an accelerated socket is said loudly (issue 12), under
 * libeta-preload.so attached to dti's loopback TEST FIXTURE engine (run by
 * run_readiness_tests.py with the scenario "uring"). The program links
 * liburing (Debian's liburing2), as real programs do: a receive submitted on
 * an accelerated connection reaches the kernel's placeholder (ENOTCONN) and
 * the shim warns once and counts it; registering one as a fixed file is
 * counted too; io_uring on kernel descriptors is untouched and silent. The
 * counts are read back from <socket>.preload/<pid>. ETA_NET must name
 * 10.9.0.1/24. */
#include <arpa/inet.h>
#include <eta/preload_stats.h>
#include <liburing.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "check.h"

static void pair(int *client, int *server)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(l >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, "10.9.0.1", &a.sin_addr);
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    *client = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(*client, (struct sockaddr *)&a, sizeof a) == 0);
    *server = accept(l, NULL, NULL);
    CHECK(*server >= 0);
    close(l);
}

static int note(const struct eta_preload_stats *st, void *arg)
{
    if (st->pid == getpid())
        *(struct eta_preload_stats *)arg = *st;
    return 0;
}

static unsigned long long refused_so_far(void)
{
    struct eta_preload_stats st = {0};
    CHECK(eta_preload_stats_each(getenv("ETA_SOCKET"), note, &st) >= 1 && st.pid == getpid());
    return (unsigned long long)st.bypass_refused;
}

/* One request on fd, submitted with io_uring_submit_and_wait: its result. */
static int one_recv(struct io_uring *ring, int fd, char *buf, unsigned n)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    CHECK(sqe != NULL);
    io_uring_prep_recv(sqe, fd, buf, n, 0);
    CHECK(io_uring_submit_and_wait(ring, 1) == 1);
    struct io_uring_cqe *cqe = NULL;
    CHECK(io_uring_wait_cqe(ring, &cqe) == 0);
    int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    return res;
}

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "uring") != 0 || !getenv("ETA_SOCKET")) {
        fprintf(stderr, "usage: ETA_SOCKET=PATH %s uring\n", argv[0]);
        return 2;
    }
    alarm(60);
    struct io_uring ring;
    CHECK(io_uring_queue_init(8, &ring, 0) == 0);
    /* Kernel descriptors: io_uring works, nothing said or counted. */
    int k[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, k) == 0);
    CHECK(write(k[0], "kern", 4) == 4);
    char buf[8];
    CHECK(one_recv(&ring, k[1], buf, 4) == 4 && memcmp(buf, "kern", 4) == 0);
    /* An accelerated connection with bytes waiting in the PPE: io_uring
     * reads the placeholder, which has none (ENOTCONN); the shim says so. */
    int c, s;
    pair(&c, &s);
    unsigned long long base = refused_so_far(); /* published once attached */
    CHECK(write(c, "data", 4) == 4);
    CHECK(one_recv(&ring, s, buf, 4) == -ENOTCONN);
    CHECK(refused_so_far() == base + 1);
    CHECK(one_recv(&ring, s, buf, 4) == -ENOTCONN); /* counted again, said once */
    CHECK(refused_so_far() == base + 2);
    /* Registered as a fixed file: counted at registration. */
    int files[2] = {k[1], s};
    CHECK(io_uring_register_files(&ring, files, 2) == 0);
    CHECK(refused_so_far() == base + 3);
    CHECK(io_uring_unregister_files(&ring) == 0);
    /* The bytes are still there for read(): io_uring took nothing. */
    CHECK(read(s, buf, 4) == 4 && memcmp(buf, "data", 4) == 0);
    io_uring_queue_exit(&ring);
    close(c);
    close(s);
    close(k[0]);
    close(k[1]);
    printf("OK\n");
    return 0;
}
