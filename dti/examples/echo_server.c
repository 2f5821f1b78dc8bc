/* dti-echo-server: an echo server on the native DTI API (libdti only).
 *
 *   dti-echo-server [--socket PATH] [--port N] [--count N] [--ip6 ADDR]
 *
 * --ip6: listen over IPv6 on ADDR only (dti_bind6 with DTI_BIND6_V6ONLY;
 * an address of the PPE's port: its address6), else on every IPv4 address.
 * Single thread, asynchronous: it watches its sockets, reaps events, takes
 * new connections in batches, and echoes in place: received bytes are
 * borrowed from the receive ring and copied straight into reserved send ring
 * space (the only copy on the application side), then released/committed.
 * Exits after serving --count connections (default: forever).
 */
#include <dti/dti.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CONNS 256

static void die(const char *what, int err)
{
    fprintf(stderr, "dti-echo-server: %s: %s\n", what, dti_strerror(err));
    exit(1);
}

/* Echoes what is readable and fits; returns 1 when the connection is done. */
static int echo(dti_ctx_t *c, dti_sock_t s)
{
    for (;;) {
        struct dti_iov in[2], out[2];
        ssize_t n = dti_recv_borrow(c, s, in);
        if (n == 0)
            return 1; /* EOF: the client is done */
        if (n == -EAGAIN || n == -DTI_E_BAD_HANDLE)
            return 0; /* nothing yet, or a stale event for a closed socket */
        if (n < 0)
            return 1; /* reset or error */
        ssize_t room = dti_send_reserve(c, s, out);
        if (room == -EAGAIN) {
            /* Send ring full: ask for POLLOUT (one-shot) and come back. */
            dti_prep_watch(c, s, DTI_POLLIN | DTI_POLLOUT, 0);
            dti_submit(c);
            return 0;
        }
        if (room < 0)
            return 1;
        size_t todo = (size_t)(n < room ? n : room), done = 0;
        size_t ii = 0, io = 0, oi = 0, oo = 0; /* piece index and offset, in and out */
        while (done < todo) {
            size_t k = in[ii].len - io;
            if (out[oi].len - oo < k)
                k = out[oi].len - oo;
            if (todo - done < k)
                k = todo - done;
            memcpy((char *)out[oi].base + oo, (char *)in[ii].base + io, k);
            done += k;
            io += k;
            oo += k;
            if (io == in[ii].len) {
                ii++;
                io = 0;
            }
            if (oo == out[oi].len) {
                oi++;
                oo = 0;
            }
        }
        if (dti_send_commit(c, s, todo, 0) < 0 || dti_recv_release(c, s, todo) < 0)
            return 1;
    }
}

int main(int argc, char **argv)
{
    struct dti_attach_opts opts = {NULL, "dti-echo-server"};
    unsigned port = 7007;
    long count = -1;
    const char *ip6 = NULL; /* --ip6: listen on this IPv6 address only (IPV6_V6ONLY) */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--socket"))
            opts.socket_path = argv[i + 1];
        else if (!strcmp(argv[i], "--port"))
            port = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--count"))
            count = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--ip6"))
            ip6 = argv[i + 1];
        else {
            fprintf(stderr, "usage: dti-echo-server [--socket PATH] [--port N] [--count N] [--ip6 ADDR]\n");
            return 2;
        }
    }
    dti_t *d;
    char why[256];
    int rc = dti_attach(&opts, &d, why, sizeof why);
    if (rc < 0) {
        fprintf(stderr, "dti-echo-server: %s\n", why);
        return 1;
    }
    dti_ctx_t *c = dti_ctx_get(d, &rc);
    if (!c)
        die("context", rc);
    int l = dti_socket(c);
    if (l < 0)
        die("socket", l);
    if (ip6) {
        struct dti_addr6 at = {.port = (uint16_t)port};
        if (inet_pton(AF_INET6, ip6, at.ip) != 1) {
            fprintf(stderr, "dti-echo-server: --ip6 %s is not an IPv6 address\n", ip6);
            return 2;
        }
        if ((rc = dti_bind6(c, (dti_sock_t)l, &at, DTI_BIND6_V6ONLY)) < 0)
            die("bind6", rc);
    } else {
        struct dti_addr any = {0, (uint16_t)port};
        if ((rc = dti_bind(c, (dti_sock_t)l, &any)) < 0)
            die("bind", rc);
    }
    if ((rc = dti_listen(c, (dti_sock_t)l, 64)) < 0)
        die("listen", rc);
    if ((rc = dti_prep_watch(c, (dti_sock_t)l, DTI_POLLIN, 0)) < 0)
        die("watch", rc);
    dti_submit(c);
    printf("listening on port %u\n", port);
    fflush(stdout);

    long served = 0;
    unsigned open = 0;
    while (count < 0 || served < count || open > 0) {
        int w = dti_wait(c, -1);
        if (w < 0)
            die("wait", w);
        struct dti_cqe ev[32];
        unsigned n = dti_reap(c, ev, 32);
        for (unsigned i = 0; i < n; i++) {
            if (ev[i].kind == DTI_CQE_COMPLETION) {
                if (ev[i].op == DTI_OP_ACCEPT && ev[i].res > 0) {
                    for (int k = 0; k < ev[i].res; k++) {
                        open++;
                        dti_prep_watch(c, ev[i].accepted[k], DTI_POLLIN, 0);
                    }
                    dti_submit(c);
                } else if (ev[i].res < 0 && ev[i].res != -EAGAIN && ev[i].op != DTI_OP_CLOSE) {
                    die("command", ev[i].res);
                }
                continue;
            }
            if (ev[i].kind == DTI_CQE_RESCAN)
                continue; /* we echo whatever is readable on each event anyway */
            if (ev[i].sock == (dti_sock_t)l) {
                dti_prep_accept(c, (dti_sock_t)l, DTI_ACCEPT_MAX, 0, 0);
                dti_submit(c);
            } else if (echo(c, ev[i].sock)) {
                dti_prep_close(c, ev[i].sock, 0);
                dti_submit(c);
                open--;
                served++;
            }
        }
    }
    printf("served %ld connections\n", served);
    dti_close(c, (dti_sock_t)l);
    dti_detach(d);
    return 0;
}
