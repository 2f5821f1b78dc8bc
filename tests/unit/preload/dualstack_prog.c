/* Dual-stack listeners under libeta-preload.so, attached to dti's loopback
 * TEST FIXTURE engine (run by run_readiness_tests.py with this program and
 * the scenario "dualstack"). An AF_INET6 listener on [::] with IPV6_V6ONLY
 * off takes IPv4 connections at the PPE address and shows their addresses
 * v4-mapped, as Linux does; with IPV6_V6ONLY on it stays the kernel's.
 * ETA_NET must name 10.9.0.1/24 as the PPE's port. Prints "OK" or the failed
 * check. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

static int listener6(int v6only, int *port)
{
    int l = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(l >= 0);
    CHECK(setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only) == 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a) == 0);
    CHECK(listen(l, 16) == 0);
    socklen_t len = sizeof a;
    CHECK(getsockname(l, (struct sockaddr *)&a, &len) == 0);
    CHECK(a.sin6_family == AF_INET6 && len == sizeof a);
    *port = ntohs(a.sin6_port);
    return l;
}

static int connect4(const char *ip, int port, int *err)
{
    int c = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(c >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    *err = connect(c, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno;
    return c;
}

/* The address is ::ffff:<want> port <port>. */
static void check_mapped(const struct sockaddr_in6 *a, socklen_t len, const struct sockaddr_in *want)
{
    CHECK(len == sizeof *a && a->sin6_family == AF_INET6);
    CHECK(IN6_IS_ADDR_V4MAPPED(&a->sin6_addr));
    CHECK(memcmp(&a->sin6_addr.s6_addr[12], &want->sin_addr, 4) == 0);
    CHECK(a->sin6_port == want->sin_port);
}

static int sc_dualstack(void)
{
    int port;
    int l = listener6(0, &port);
    /* IPv4 at the PPE address: through the PPE, shown v4-mapped. */
    int err;
    int c = connect4("10.9.0.1", port, &err);
    CHECK(err == 0);
    struct sockaddr_in6 peer;
    socklen_t len = sizeof peer;
    int s = accept(l, (struct sockaddr *)&peer, &len);
    CHECK(s >= 0);
    struct sockaddr_in cl;
    socklen_t cl_len = sizeof cl;
    CHECK(getsockname(c, (struct sockaddr *)&cl, &cl_len) == 0);
    check_mapped(&peer, len, &cl);
    len = sizeof peer;
    CHECK(getpeername(s, (struct sockaddr *)&peer, &len) == 0);
    check_mapped(&peer, len, &cl);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "10.9.0.1", &me.sin_addr);
    len = sizeof peer;
    CHECK(getsockname(s, (struct sockaddr *)&peer, &len) == 0);
    check_mapped(&peer, len, &me);
    int domain = 0;
    socklen_t dl = sizeof domain;
    CHECK(getsockopt(s, SOL_SOCKET, SO_DOMAIN, &domain, &dl) == 0 && domain == AF_INET6);
    char b[5] = {0};
    CHECK(write(c, "ping", 4) == 4 && read(s, b, 4) == 4 && !memcmp(b, "ping", 4));
    CHECK(write(s, "pong", 4) == 4 && read(c, b, 4) == 4 && !memcmp(b, "pong", 4));
    close(c);
    close(s);
    /* IPv4 loopback: the kernel half, v4-mapped by the kernel itself. */
    int k = connect4("127.0.0.1", port, &err);
    CHECK(err == 0);
    len = sizeof peer;
    int ks = accept(l, (struct sockaddr *)&peer, &len);
    CHECK(ks >= 0 && peer.sin6_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&peer.sin6_addr));
    close(ks);
    close(k);
    close(l);
    /* IPV6_V6ONLY: an IPv6-only listener takes no IPv4 client at the PPE's
     * IPv4 address (this fixture's engine has no IPv6: the kernel's alone). */
    int l6 = listener6(1, &port);
    c = connect4("10.9.0.1", port, &err);
    CHECK(err == ECONNREFUSED);
    close(c);
    close(l6);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "dualstack") != 0) {
        fprintf(stderr, "usage: %s dualstack\n", argv[0]);
        return 2;
    }
    alarm(60);
    int rc = sc_dualstack();
    if (rc == 0)
        printf("OK\n");
    return rc;
}
