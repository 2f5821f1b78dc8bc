/* dti-echo-client: sends messages to an echo server and checks the echo,
 * using libdti's blocking layer.
 *
 *   dti-echo-client [--socket PATH] [--ip A.B.C.D | --ip6 ADDR] [--port N] [--bind-port N]
 *                   [--messages N] [--size BYTES]
 *
 * --ip6: over IPv6 (dti_connect6); --bind-port: bound to that local port
 * (on 0.0.0.0 or ::) before the connect, so that with several engines libdti
 * places the socket on the engine that owns the flow (dti/README.md "Several
 * engines", "IPv6"). Prints "ok: N messages, B bytes echoed" and exits 0 when every byte came
 * back unchanged.
 */
#include <dti/dti.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int err)
{
    fprintf(stderr, "dti-echo-client: %s: %s\n", what, dti_strerror(err));
    return 1;
}

int main(int argc, char **argv)
{
    struct dti_attach_opts opts = {NULL, "dti-echo-client"};
    const char *ip = "127.0.0.1", *ip6 = NULL;
    unsigned port = 7007, messages = 100, size = 1000, bind_port = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--socket"))
            opts.socket_path = argv[i + 1];
        else if (!strcmp(argv[i], "--ip"))
            ip = argv[i + 1];
        else if (!strcmp(argv[i], "--ip6"))
            ip6 = argv[i + 1];
        else if (!strcmp(argv[i], "--bind-port"))
            bind_port = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--port"))
            port = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--messages"))
            messages = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--size"))
            size = (unsigned)atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: dti-echo-client [--socket PATH] [--ip A.B.C.D | --ip6 ADDR] [--port N] "
                            "[--bind-port N] [--messages N] [--size BYTES]\n");
            return 2;
        }
    }
    struct in_addr a;
    struct dti_addr6 to6 = {.port = (uint16_t)port};
    if ((ip6 ? inet_pton(AF_INET6, ip6, to6.ip) : inet_pton(AF_INET, ip, &a)) != 1 || size == 0 ||
        bind_port > 65535) {
        fprintf(stderr, "dti-echo-client: bad --ip, --ip6, --bind-port or --size\n");
        return 2;
    }
    dti_t *d;
    char why[256];
    int rc = dti_attach(&opts, &d, why, sizeof why);
    if (rc < 0) {
        fprintf(stderr, "dti-echo-client: %s\n", why);
        return 1;
    }
    dti_ctx_t *c = dti_ctx_get(d, &rc);
    if (!c)
        return fail("context", rc);
    int s = dti_socket(c);
    if (s < 0)
        return fail("socket", s);
    if (bind_port) {
        const struct dti_addr any = {0, (uint16_t)bind_port};
        const struct dti_addr6 any6 = {.port = (uint16_t)bind_port};
        if ((rc = ip6 ? dti_bind6(c, (dti_sock_t)s, &any6, 0) : dti_bind(c, (dti_sock_t)s, &any)) < 0)
            return fail("bind", rc);
    }
    if (ip6) {
        rc = dti_connect6(c, (dti_sock_t)s, &to6, 10000);
    } else {
        struct dti_addr to = {ntohl(a.s_addr), (uint16_t)port};
        rc = dti_connect(c, (dti_sock_t)s, &to, 10000);
    }
    if (rc < 0)
        return fail("connect", rc);
    char *out = malloc(size), *in = malloc(size);
    if (!out || !in)
        return fail("malloc", -12);
    unsigned long total = 0;
    for (unsigned m = 0; m < messages; m++) {
        for (unsigned i = 0; i < size; i++)
            out[i] = (char)(m * 31 + i);
        ssize_t n = dti_send_all(c, (dti_sock_t)s, out, size, 10000);
        if (n < 0)
            return fail("send", (int)n);
        size_t got = 0;
        while (got < size) {
            n = dti_recv_wait(c, (dti_sock_t)s, in + got, size - got, 10000);
            if (n <= 0)
                return fail("recv", n == 0 ? -104 : (int)n);
            got += (size_t)n;
        }
        if (memcmp(in, out, size) != 0) {
            fprintf(stderr, "dti-echo-client: message %u came back different\n", m);
            return 1;
        }
        total += size;
    }
    dti_close(c, (dti_sock_t)s);
    dti_detach(d);
    free(in);
    free(out);
    printf("ok: %u messages, %lu bytes echoed\n", messages, total);
    return 0;
}
