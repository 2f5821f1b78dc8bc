/* mmsg_probe: sendmmsg and recvmmsg on UDP sockets, the TEST TOOL of
 * mmsg_test.sh (run under eta-run, and without eta on the kernel link: the
 * same lines expected from both). Bounded: every receive waits 10 s at most.
 *
 *   mmsg_probe FAM PEER PORT_A PORT_B   FAM 4 (AF_INET) or 6 (AF_INET6); an echo
 *                                      server at PEER on both ports (mmsg_peer.py)
 *   mmsg_probe flood FAM PEER PORT N    N datagrams of 64 B, sendmmsg with vlen 32
 *                                      (a sink at PEER:PORT); prints the rate
 *   mmsg_probe sendto FAM PEER PORT N   N datagrams of 64 B, one sendto each
 *   mmsg_probe hybrid FAM PEER_A PEER_B PORT  bound to the wildcard: 16 datagrams
 *                                      alternating between two peers in one call,
 *                                      "hybrid ret=16 lens=ok echo A=8 B=8 ok"
 *
 * The probe's lines name no address, so that both runs print the same:
 *   batch64 ret=64 lens=ok echo=64 ok       64 datagrams of 1..1472 (IPv6: 1452)
 *                                           bytes, in one call, some in 2-3 pieces;
 *                                           their echoes through recvmmsg (vlen 16,
 *                                           MSG_WAITFORONE), in order, byte-exact,
 *                                           named PEER:PORT_A
 *   mixed ret=16 lens=ok echo A=.. B=.. ok  16 to two ports, MSG_DONTWAIT
 *   connected ret=32 lens=ok echo=32 ok     a connected socket, no names
 *   badname ret=3 lens=ok                   a name too short in the middle of 8
 *   badname retry ret=-1 errno=EINVAL       from it: its error
 *   badname rest ret=4 lens=ok echo=7 ok    the rest; the 7 echoes
 *   v6only ret=2 retry ret=-1 errno=ENETUNREACH  (FAM 6) an AF_INET name on an
 *                                           IPV6_V6ONLY socket in the middle
 * Exit 1 with a line "FAIL ..." when something differs from what Linux does. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int fam;
static struct sockaddr_storage peer_a, peer_b;
static socklen_t peer_len;

static void die(const char *what)
{
    printf("FAIL %s (errno %s)\n", what, strerrorname_np(errno) ? strerrorname_np(errno) : "0");
    exit(1);
}

static void set_peer(struct sockaddr_storage *ss, const char *ip, int port)
{
    memset(ss, 0, sizeof *ss);
    if (fam == 4) {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, ip, &in->sin_addr) != 1)
            die("bad IPv4 peer");
        peer_len = sizeof *in;
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, ip, &in6->sin6_addr) != 1)
            die("bad IPv6 peer");
        peer_len = sizeof *in6;
    }
}

static int udp_socket(void)
{
    int s = socket(fam == 4 ? AF_INET : AF_INET6, SOCK_DGRAM, 0);
    if (s < 0)
        die("socket");
    struct timeval tv = {10, 0};
    if (setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
        die("SO_RCVTIMEO");
    return s;
}

/* Datagram k's bytes (its length and pattern depend on k and a seed). */
static size_t dgram_len(unsigned k, unsigned seed)
{
    const size_t max = fam == 4 ? 1472 : 1452;
    if (k == 0)
        return 1;
    if (k == 1)
        return max;
    return 1 + ((size_t)k * 389 + seed * 71) % max;
}

static void fill(unsigned char *p, size_t n, unsigned k, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + k * 13 + seed * 31);
}

#define MAXV 64
static unsigned char bufs[MAXV][1500];
static struct iovec iovs[MAXV][3];
static struct mmsghdr vec[MAXV];

/* vec[0..n) as datagrams 0..n-1 of seed, to names[k] (NULL: none); some
 * in 2 or 3 pieces. msg_len set to a mark the call must overwrite. */
static void build(unsigned n, unsigned seed, const struct sockaddr_storage *const *names)
{
    memset(vec, 0, sizeof vec);
    for (unsigned k = 0; k < n; k++) {
        size_t len = dgram_len(k, seed);
        fill(bufs[k], len, k, seed);
        unsigned pieces = len >= 3 ? 1 + k % 3 : 1;
        size_t off = 0;
        for (unsigned p = 0; p < pieces; p++) {
            size_t take = p + 1 == pieces ? len - off : len / pieces;
            iovs[k][p] = (struct iovec){bufs[k] + off, take};
            off += take;
        }
        vec[k].msg_hdr.msg_iov = iovs[k];
        vec[k].msg_hdr.msg_iovlen = pieces;
        if (names && names[k]) {
            vec[k].msg_hdr.msg_name = (void *)names[k];
            vec[k].msg_hdr.msg_namelen = peer_len;
        }
        vec[k].msg_len = 0xdeadbeef;
    }
}

static bool lens_ok(unsigned from, unsigned n, unsigned seed)
{
    for (unsigned k = from; k < from + n; k++)
        if (vec[k].msg_len != dgram_len(k, seed))
            return false;
    for (unsigned k = from + n; k < MAXV; k++) /* the messages not sent: untouched */
        if (vec[k].msg_hdr.msg_iov && vec[k].msg_len != 0xdeadbeef)
            return false;
    return true;
}

static bool same_name(const struct sockaddr_storage *a, socklen_t alen, const struct sockaddr_storage *b)
{
    return alen == peer_len && memcmp(a, b, peer_len) == 0;
}

/* Receives `n` echoes through recvmmsg (vlen 16, MSG_WAITFORONE); expect[k]
 * the datagram number of the k-th echo from each port in order (A's and B's
 * counted apart). Returns false on a difference. */
static bool echoes(int s, unsigned n, unsigned seed, const struct sockaddr_storage *const *names, unsigned *got_a,
                   unsigned *got_b)
{
    static unsigned char rb[16][2048];
    struct iovec riov[16];
    struct mmsghdr rv[16];
    struct sockaddr_storage from[16];
    unsigned next_a = 0, next_b = 0, got = 0;
    *got_a = *got_b = 0;
    while (got < n) {
        for (unsigned i = 0; i < 16; i++) {
            riov[i] = (struct iovec){rb[i], sizeof rb[i]};
            memset(&rv[i], 0, sizeof rv[i]);
            rv[i].msg_hdr.msg_iov = &riov[i];
            rv[i].msg_hdr.msg_iovlen = 1;
            rv[i].msg_hdr.msg_name = &from[i];
            rv[i].msg_hdr.msg_namelen = sizeof from[i];
        }
        unsigned want = n - got < 16 ? n - got : 16;
        int r = recvmmsg(s, rv, want, MSG_WAITFORONE, NULL);
        if (r <= 0) {
            printf("FAIL recvmmsg after %u of %u echoes: %d %s\n", got, n, r, strerrorname_np(errno));
            return false;
        }
        for (int i = 0; i < r; i++) {
            bool is_a = same_name(&from[i], rv[i].msg_hdr.msg_namelen, &peer_a);
            bool is_b = !is_a && same_name(&from[i], rv[i].msg_hdr.msg_namelen, &peer_b);
            if (!is_a && !is_b) {
                printf("FAIL echo %u from an unexpected name (len %u)\n", got, rv[i].msg_hdr.msg_namelen);
                return false;
            }
            /* the next datagram sent to that port */
            unsigned *next = is_a ? &next_a : &next_b;
            while (*next < MAXV && !(names ? names[*next] == (is_a ? &peer_a : &peer_b) : is_a))
                ++*next;
            unsigned k = *next;
            size_t len = dgram_len(k, seed);
            unsigned char want_bytes[1500];
            fill(want_bytes, len, k, seed);
            if (k >= MAXV || !vec[k].msg_hdr.msg_iov) { /* past the datagrams built */
                printf("FAIL more echoes than sent\n");
                return false;
            }
            if (rv[i].msg_len != len || memcmp(rb[i], want_bytes, len) != 0 || (rv[i].msg_hdr.msg_flags & MSG_TRUNC)) {
                printf("FAIL echo %u: %u bytes, want datagram %u's %zu bytes\n", got, rv[i].msg_len, k, len);
                return false;
            }
            ++*next;
            ++*(is_a ? got_a : got_b);
            got++;
        }
    }
    return true;
}

static void probe(const char *ip, int pa, int pb)
{
    set_peer(&peer_a, ip, pa);
    set_peer(&peer_b, ip, pb);
    const struct sockaddr_storage *names[MAXV];
    unsigned ga, gb;

    /* 64 datagrams to A in one call. */
    int s = udp_socket();
    for (unsigned k = 0; k < MAXV; k++)
        names[k] = &peer_a;
    build(64, 1, names);
    int r = sendmmsg(s, vec, 64, 0);
    printf("batch64 ret=%d lens=%s", r, lens_ok(0, r > 0 ? (unsigned)r : 0, 1) ? "ok" : "BAD");
    if (!echoes(s, 64, 1, names, &ga, &gb))
        exit(1);
    printf(" echo=%u ok\n", ga);

    /* 16 to two ports, MSG_DONTWAIT. */
    for (unsigned k = 0; k < 16; k++)
        names[k] = (k * 5) % 3 == 1 ? &peer_b : &peer_a;
    build(16, 2, names);
    r = sendmmsg(s, vec, 16, MSG_DONTWAIT);
    printf("mixed ret=%d lens=%s", r, lens_ok(0, r > 0 ? (unsigned)r : 0, 2) ? "ok" : "BAD");
    if (!echoes(s, 16, 2, names, &ga, &gb))
        exit(1);
    printf(" echo A=%u B=%u ok\n", ga, gb);
    close(s);

    /* A connected socket, no names. */
    s = udp_socket();
    if (connect(s, (struct sockaddr *)&peer_a, peer_len) != 0)
        die("connect");
    build(32, 3, NULL);
    r = sendmmsg(s, vec, 32, 0);
    printf("connected ret=%d lens=%s", r, lens_ok(0, r > 0 ? (unsigned)r : 0, 3) ? "ok" : "BAD");
    for (unsigned k = 0; k < MAXV; k++)
        names[k] = &peer_a;
    if (!echoes(s, 32, 3, names, &ga, &gb))
        exit(1);
    printf(" echo=%u ok\n", ga);
    close(s);

    /* A name too short in the middle: the three before it are sent. */
    s = udp_socket();
    for (unsigned k = 0; k < MAXV; k++)
        names[k] = &peer_a;
    build(8, 4, names);
    vec[3].msg_hdr.msg_namelen = 4;
    r = sendmmsg(s, vec, 8, 0);
    printf("badname ret=%d lens=%s\n", r, lens_ok(0, r > 0 ? (unsigned)r : 0, 4) ? "ok" : "BAD");
    errno = 0;
    r = sendmmsg(s, vec + 3, 5, 0);
    printf("badname retry ret=%d errno=%s\n", r, r < 0 ? strerrorname_np(errno) : "-");
    r = sendmmsg(s, vec + 4, 4, 0);
    bool rest_ok = r == 4;
    for (unsigned k = 4; k < 8; k++)
        rest_ok &= vec[k].msg_len == dgram_len(k, 4);
    printf("badname rest ret=%d lens=%s", r, rest_ok ? "ok" : "BAD");
    names[3] = NULL; /* never sent */
    if (!echoes(s, 7, 4, names, &ga, &gb))
        exit(1);
    printf(" echo=%u ok\n", ga);
    close(s);

    if (fam == 6) { /* an AF_INET name on an IPV6_V6ONLY socket in the middle */
        s = udp_socket();
        int one = 1;
        if (setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0)
            die("IPV6_V6ONLY");
        build(4, 5, names);
        struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)pa),
                                  .sin_addr = {htonl(0xc6120002)}};
        vec[2].msg_hdr.msg_name = &in4;
        vec[2].msg_hdr.msg_namelen = sizeof in4;
        r = sendmmsg(s, vec, 4, 0);
        errno = 0;
        int r2 = sendmmsg(s, vec + 2, 2, 0);
        printf("v6only ret=%d lens=%s retry ret=%d errno=%s\n", r, lens_ok(0, r > 0 ? (unsigned)r : 0, 5) ? "ok" : "BAD",
               r2, r2 < 0 ? strerrorname_np(errno) : "-");
        names[2] = NULL;
        if (!echoes(s, 2, 5, names, &ga, &gb))
            exit(1);
        close(s);
    }
}

/* A socket bound to the wildcard (under eta-run the shim's hybrid): 16
 * datagrams alternating between ip_a (the PPE's peer: through the engine)
 * and ip_b (the kernel link's: the kernel half), one call; the echoes. */
static void hybrid(const char *ip_a, const char *ip_b, int port)
{
    set_peer(&peer_a, ip_a, port);
    set_peer(&peer_b, ip_b, port);
    int s = udp_socket();
    struct sockaddr_storage any;
    memset(&any, 0, sizeof any);
    any.ss_family = fam == 4 ? AF_INET : AF_INET6; /* the wildcard, port 0 */
    if (bind(s, (struct sockaddr *)&any, peer_len) != 0)
        die("bind to the wildcard");
    const struct sockaddr_storage *names[MAXV];
    for (unsigned k = 0; k < MAXV; k++)
        names[k] = k % 2 ? &peer_b : &peer_a;
    build(16, 6, names);
    int r = sendmmsg(s, vec, 16, 0);
    unsigned ga, gb;
    printf("hybrid ret=%d lens=%s", r, lens_ok(0, r > 0 ? (unsigned)r : 0, 6) ? "ok" : "BAD");
    if (!echoes(s, 16, 6, names, &ga, &gb))
        exit(1);
    printf(" echo A=%u B=%u ok\n", ga, gb);
    close(s);
}

static void flood(const char *ip, int port, unsigned long n)
{
    set_peer(&peer_a, ip, port);
    int s = udp_socket();
    if (connect(s, (struct sockaddr *)&peer_a, peer_len) != 0)
        die("connect");
    static unsigned char b[32][64];
    static struct iovec v[32];
    static struct mmsghdr m[32];
    for (unsigned i = 0; i < 32; i++) {
        memset(b[i], (int)i, 64);
        v[i] = (struct iovec){b[i], 64};
        m[i].msg_hdr.msg_iov = &v[i];
        m[i].msg_hdr.msg_iovlen = 1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long sent = 0;
    while (sent < n) {
        unsigned want = n - sent < 32 ? (unsigned)(n - sent) : 32;
        int r = sendmmsg(s, m, want, 0);
        if (r <= 0) {
            if (r < 0 && (errno == ENOBUFS || errno == EAGAIN))
                continue; /* a full queue: counted as not sent */
            die("sendmmsg");
        }
        sent += (unsigned)r;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("flood %lu datagrams %.3f s %.0f per second\n", sent, sec, (double)sent / sec);
    close(s);
}

/* The same datagrams one sendto each, to a name (the instructions of a
 * plain sendto: benchmarks/README.md). */
static void plain(const char *ip, int port, unsigned long n)
{
    set_peer(&peer_a, ip, port);
    int s = udp_socket();
    unsigned char b[64];
    memset(b, 7, sizeof b);
    for (unsigned long k = 0; k < n; k++)
        if (sendto(s, b, sizeof b, 0, (struct sockaddr *)&peer_a, peer_len) != (ssize_t)sizeof b)
            die("sendto");
    printf("sendto %lu datagrams\n", n);
    close(s);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 6 && strcmp(argv[1], "hybrid") == 0) {
        fam = atoi(argv[2]);
        hybrid(argv[3], argv[4], atoi(argv[5]));
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "sendto") == 0) {
        fam = atoi(argv[2]);
        plain(argv[3], atoi(argv[4]), strtoul(argv[5], NULL, 10));
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "flood") == 0) {
        fam = atoi(argv[2]);
        flood(argv[3], atoi(argv[4]), strtoul(argv[5], NULL, 10));
        return 0;
    }
    if (argc != 5 || (strcmp(argv[1], "4") != 0 && strcmp(argv[1], "6") != 0)) {
        fprintf(stderr, "usage: mmsg_probe 4|6 PEER PORT_A PORT_B | mmsg_probe flood 4|6 PEER PORT N\n");
        return 2;
    }
    fam = atoi(argv[1]);
    probe(argv[2], atoi(argv[3]), atoi(argv[4]));
    printf("done\n");
    return 0;
}
