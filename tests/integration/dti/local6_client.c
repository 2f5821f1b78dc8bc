/* TEST TOOL for local6_test.sh: a native DTI client that connects over IPv6
 * (dti_connect6) and checks an echo, lockstep (one message out, its echo
 * back), with libdti's blocking layer.
 *
 *   dti-local6-client --socket PATH --ip6 ADDR --port N [--messages N] [--size BYTES] [--refused]
 *
 * Prints "ok: N messages, B bytes echoed local [A]:P peer [A]:P" and exits 0
 * when every byte came back unchanged. With --refused the connect must be
 * refused (ECONNREFUSED: nobody listens): prints "refused" and exits 0.
 */
#include <dti/dti.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int err)
{
    fprintf(stderr, "dti-local6-client: %s: %s\n", what, dti_strerror(err));
    return 1;
}

static const char *fmt6(const struct dti_addr6 *a, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN];
    if (!inet_ntop(AF_INET6, a->ip, ip, sizeof ip))
        snprintf(ip, sizeof ip, "?");
    snprintf(buf, len, "[%s]:%u", ip, a->port);
    return buf;
}

int main(int argc, char **argv)
{
    struct dti_attach_opts opts = {NULL, "dti-local6-client"};
    const char *ip6 = NULL;
    unsigned port = 0, messages = 64, size = 16384;
    int refused = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--refused")) {
            refused = 1;
            continue;
        }
        if (i + 1 >= argc)
            goto usage;
        if (!strcmp(argv[i], "--socket"))
            opts.socket_path = argv[++i];
        else if (!strcmp(argv[i], "--ip6"))
            ip6 = argv[++i];
        else if (!strcmp(argv[i], "--port"))
            port = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--messages"))
            messages = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size"))
            size = (unsigned)atoi(argv[++i]);
        else
            goto usage;
    }
    struct dti_addr6 to = {.port = (uint16_t)port};
    if (!ip6 || inet_pton(AF_INET6, ip6, to.ip) != 1 || port == 0 || port > 65535 || size == 0) {
    usage:
        fprintf(stderr, "usage: dti-local6-client --socket PATH --ip6 ADDR --port N [--messages N] [--size BYTES] "
                        "[--refused]\n");
        return 2;
    }
    dti_t *d;
    char why[256];
    int rc = dti_attach(&opts, &d, why, sizeof why);
    if (rc < 0) {
        fprintf(stderr, "dti-local6-client: %s\n", why);
        return 1;
    }
    dti_ctx_t *c = dti_ctx_get(d, &rc);
    if (!c)
        return fail("context", rc);
    int s = dti_socket(c);
    if (s < 0)
        return fail("socket", s);
    rc = dti_connect6(c, (dti_sock_t)s, &to, 10000);
    if (refused) {
        if (rc != -ECONNREFUSED)
            return rc < 0 ? fail("connect6 (expected ECONNREFUSED)", rc)
                          : (fprintf(stderr, "dti-local6-client: connect6 succeeded, expected ECONNREFUSED\n"), 1);
        dti_close(c, (dti_sock_t)s);
        dti_detach(d);
        printf("refused\n");
        return 0;
    }
    if (rc < 0)
        return fail("connect6", rc);
    char *out = malloc(size), *in = malloc(size);
    if (!out || !in)
        return fail("malloc", -ENOMEM);
    unsigned long total = 0;
    uint32_t x = 6;
    for (unsigned m = 0; m < messages; m++) {
        for (unsigned i = 0; i < size; i++) {
            x = x * 1103515245u + 12345u;
            out[i] = (char)(x >> 16);
        }
        ssize_t n = dti_send_all(c, (dti_sock_t)s, out, size, 10000);
        if (n < 0)
            return fail("send", (int)n);
        size_t got = 0;
        while (got < size) {
            n = dti_recv_wait(c, (dti_sock_t)s, in + got, size - got, 10000);
            if (n <= 0)
                return fail("recv", n == 0 ? -ECONNRESET : (int)n);
            got += (size_t)n;
        }
        if (memcmp(in, out, size) != 0) {
            fprintf(stderr, "dti-local6-client: message %u came back different\n", m);
            return 1;
        }
        total += size;
    }
    struct dti_addr6 local, peer;
    char lb[80], pb[80];
    if ((rc = dti_getsockname6(c, (dti_sock_t)s, &local)) < 0)
        return fail("getsockname6", rc);
    if ((rc = dti_getpeername6(c, (dti_sock_t)s, &peer)) < 0)
        return fail("getpeername6", rc);
    dti_close(c, (dti_sock_t)s);
    dti_detach(d);
    free(in);
    free(out);
    printf("ok: %u messages, %lu bytes echoed local %s peer %s\n", messages, total, fmt6(&local, lb, sizeof lb),
           fmt6(&peer, pb, sizeof pb));
    return 0;
}
