/* benchmarks/ppe/udp_pingpong.c: a UDP ping-pong and flood tool for either
 * family, for benchmarks/ppe/udp-vs-kernel (Debian's sockperf 3.7 takes no
 * IPv6 address). Plain sockets: run it under eta-run to go through eta.
 *
 *   udp_pingpong server ADDR PORT              echoes every datagram to its sender
 *   udp_pingpong pingpong ADDR PORT SIZE SECS  round trips for SECS seconds; prints
 *       "rtt/2 p50 X p99 Y us n N" (half the round trip, as sockperf reports it)
 *   udp_pingpong flood ADDR PORT SIZE SECS [SEGS]  sends as fast as it can for
 *       SECS seconds (the server echoes nothing back to a flood: it counts);
 *       prints "sent N datagrams/s R". SEGS > 1: each send is SEGS datagrams
 *       of SIZE bytes in one buffer (UDP_SEGMENT, Linux's GSO, as QUIC
 *       servers send)
 * The server counts what it received and prints "received N" when it gets
 * SIGTERM or SIGINT. ADDR is an IPv4 or IPv6 literal. Exits 1 with a
 * message on any error, 2 on bad arguments. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig, stop = 1; }

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "udp_pingpong: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ADDR PORT as a socket address; returns its length (0: not a literal). */
static socklen_t parse(const char *addr, const char *port, struct sockaddr_storage *ss)
{
    char *end;
    long p = strtol(port, &end, 10);
    if (*end || p <= 0 || p > 65535)
        return 0;
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)p);
        return sizeof *in;
    }
    if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)p);
        return sizeof *in6;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s server ADDR PORT | pingpong|flood ADDR PORT SIZE SECS\n", argv[0]);
        return 2;
    }
    struct sockaddr_storage ss;
    socklen_t sl = parse(argv[2], argv[3], &ss);
    if (!sl) {
        fprintf(stderr, "udp_pingpong: not an address and port: %s %s\n", argv[2], argv[3]);
        return 2;
    }
    int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
    if (fd < 0)
        die("socket");
    static char buf[65536];
    if (strcmp(argv[1], "server") == 0) {
        if (bind(fd, (struct sockaddr *)&ss, sl) != 0)
            die("bind");
        struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: recvfrom returns EINTR */
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        printf("listening\n");
        fflush(stdout);
        uint64_t received = 0;
        while (!stop) {
            struct sockaddr_storage from;
            socklen_t fl = sizeof from;
            ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                die("recvfrom");
            }
            received++;
            if (n > 0 && buf[0] == 'P' && sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, fl) < 0)
                die("sendto");
        }
        printf("received %llu\n", (unsigned long long)received);
        return 0;
    }
    if (argc < 6) {
        fprintf(stderr, "usage: %s pingpong|flood ADDR PORT SIZE SECS\n", argv[0]);
        return 2;
    }
    long size = atol(argv[4]), secs = atol(argv[5]);
    const long segs = argc > 6 ? atol(argv[6]) : 1;
    if (size < 1 || size > 65000 || secs < 1 || secs > 3600 || segs < 1 || segs > 128 || size * segs > 65000) {
        fprintf(stderr, "udp_pingpong: SIZE 1..65000, SECS 1..3600, SEGS 1..128 (SIZE x SEGS at most 65000)\n");
        return 2;
    }
    if (segs > 1) {
        int g = (int)size;
        if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &g, sizeof g) != 0)
            die("setsockopt UDP_SEGMENT");
    }
    if (connect(fd, (struct sockaddr *)&ss, sl) != 0)
        die("connect");
    memset(buf, 'x', (size_t)(size * segs));
    const uint64_t end = now_ns() + (uint64_t)secs * 1000000000u;
    if (strcmp(argv[1], "flood") == 0) {
        for (long k = 0; k < segs; k++)
            buf[k * size] = 'F'; /* not echoed (each datagram's first byte) */
        uint64_t sent = 0;
        const uint64_t t0 = now_ns();
        while (now_ns() < end) {
            for (int i = 0; i < 64; i++) {
                if (send(fd, buf, (size_t)(size * segs), 0) < 0) {
                    if (errno == ENOBUFS || errno == EAGAIN)
                        continue;
                    die("send");
                }
                sent += (uint64_t)segs;
            }
        }
        printf("sent %llu datagrams/s %.0f\n", (unsigned long long)sent, (double)sent * 1e9 / (double)(now_ns() - t0));
        return 0;
    }
    if (strcmp(argv[1], "pingpong") != 0) {
        fprintf(stderr, "udp_pingpong: unknown mode %s\n", argv[1]);
        return 2;
    }
    buf[0] = 'P';
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t cap = 1 << 20, n = 0;
    uint64_t *rtt = malloc(cap * sizeof *rtt);
    if (!rtt)
        die("malloc");
    while (now_ns() < end && n < cap) {
        const uint64_t t = now_ns();
        if (send(fd, buf, (size_t)size, 0) < 0)
            die("send");
        if (recv(fd, buf, sizeof buf, 0) < 0)
            die("recv (no answer within 1 s)");
        rtt[n++] = now_ns() - t;
    }
    qsort(rtt, n, sizeof *rtt, cmp_u64);
    printf("rtt/2 p50 %.3f p99 %.3f us n %zu\n", (double)rtt[n / 2] / 2000.0, (double)rtt[(n * 99) / 100] / 2000.0, n);
    return 0;
}
