/* dti-pdu-server: receives framed messages with data digests, a miniature of
 * an NVMe/TCP data PDU, and checks each digest with the one the engine
 * computed while placing the bytes (libdti only: the program never runs a
 * CRC itself and never reads the payload to check it).
 *
 *   dti-pdu-server [--socket PATH] [--port N] [--out FILE] [--digests FILE]
 *
 * Wire format (little-endian), repeated until the client closes:
 *   header  8 bytes: u8 type (0x07), u8 flags, u16 reserved, u32 payload length
 *   payload length bytes
 *   DDGST   u32 CRC32C of the payload (initial ~0, final complement)
 *
 * Right after a header it asks the engine for the digest of the next
 * `length` bytes (DTI_OP_DIGEST), before the payload has necessarily
 * arrived; the completion carries the CRC32C, which it compares with the
 * trailer. Serves one connection. --out writes the payloads (for a byte-exact
 * check), --digests one line per PDU: "INDEX LENGTH CRC ok|BAD".
 * Prints "pdus N bytes B digest-ok N mismatches M"; exits 0, or 3 when a
 * digest did not match, 1 on errors.
 */
#include <dti/dti.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PDU_TYPE_DATA 0x07
#define MAX_PAYLOAD (16u << 20)
#define IN_FLIGHT 64 /* digest completions remembered, by PDU index mod 64 */
#define WAIT_MS 10000

struct server {
    dti_ctx_t *c;
    dti_sock_t s;
    int have[IN_FLIGHT];
    int32_t res[IN_FLIGHT];
    uint32_t crc[IN_FLIGHT];
};

static void die(const char *what, int err)
{
    fprintf(stderr, "dti-pdu-server: %s: %s\n", what, dti_strerror(err));
    exit(1);
}

/* Waits for entries and keeps digest completions (user_data = PDU index);
 * socket events only wake us. Returns dti_wait()'s result. */
static int pump(struct server *v)
{
    int w = dti_wait(v->c, WAIT_MS);
    struct dti_cqe e[32];
    unsigned n;
    while ((n = dti_reap(v->c, e, 32)) > 0)
        for (unsigned i = 0; i < n; i++)
            if (e[i].kind == DTI_CQE_COMPLETION && e[i].op == DTI_OP_DIGEST) {
                unsigned k = (unsigned)(e[i].user_data % IN_FLIGHT);
                v->have[k] = 1;
                v->res[k] = e[i].res;
                v->crc[k] = (uint32_t)e[i].value;
            }
    return w;
}

/* Takes n bytes off the stream in place: copied to dst if given, written
 * to out if given, else just released. 1: the stream ended cleanly before
 * the first byte; 0: done; negative: error (-EPIPE: ended in the middle). */
static int take(struct server *v, void *dst, size_t n, FILE *out)
{
    size_t done = 0;
    while (done < n) {
        struct dti_iov iov[2];
        ssize_t got = dti_recv_borrow(v->c, v->s, iov);
        if (got == -EAGAIN) {
            if (pump(v) <= 0)
                return -ETIMEDOUT;
            continue;
        }
        if (got == 0)
            return done == 0 ? 1 : -EPIPE;
        if (got < 0)
            return (int)got;
        size_t use = (size_t)got < n - done ? (size_t)got : n - done, left = use;
        for (int k = 0; k < 2 && left > 0; k++) {
            size_t piece = iov[k].len < left ? iov[k].len : left;
            if (dst)
                memcpy((uint8_t *)dst + (use - left), iov[k].base, piece);
            if (out && fwrite(iov[k].base, 1, piece, out) != piece)
                return -EIO;
            left -= piece;
        }
        int rc = dti_recv_release(v->c, v->s, use);
        if (rc < 0)
            return rc;
        if (dst)
            dst = (uint8_t *)dst + use;
        done += use;
    }
    return 0;
}

static uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

int main(int argc, char **argv)
{
    const char *path = NULL, *out_path = NULL, *dig_path = NULL;
    int port = 7010;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--socket") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else if (!strcmp(argv[i], "--digests") && i + 1 < argc)
            dig_path = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--socket PATH] [--port N] [--out FILE] [--digests FILE]\n", argv[0]);
            return 1;
        }
    }
    if (port <= 0 || port > 65535) {
        fprintf(stderr, "dti-pdu-server: --port must be 1..65535\n");
        return 1;
    }
    FILE *out = out_path ? fopen(out_path, "wb") : NULL;
    FILE *dig = dig_path ? fopen(dig_path, "w") : NULL;
    if ((out_path && !out) || (dig_path && !dig)) {
        perror("dti-pdu-server: open");
        return 1;
    }
    dti_t *d;
    char why[256];
    struct dti_attach_opts opts = {path, "dti-pdu-server"};
    if (dti_attach(&opts, &d, why, sizeof why) < 0) {
        fprintf(stderr, "dti-pdu-server: %s\n", why);
        return 1;
    }
    int err = 0;
    struct server v = {0};
    v.c = dti_ctx_get(d, &err);
    if (!v.c)
        die("context", err);
    int l = dti_socket(v.c);
    if (l < 0)
        die("socket", l);
    struct dti_addr any = {0, (uint16_t)port};
    if ((err = dti_bind(v.c, (dti_sock_t)l, &any)) < 0)
        die("bind", err);
    if ((err = dti_listen(v.c, (dti_sock_t)l, 4)) < 0)
        die("listen", err);
    printf("listening on port %d\n", port);
    fflush(stdout);
    int s = dti_accept(v.c, (dti_sock_t)l, NULL, -1);
    if (s < 0)
        die("accept", s);
    v.s = (dti_sock_t)s;
    if ((err = dti_prep_watch(v.c, v.s, DTI_POLLIN, 0)) < 0 || (err = dti_submit(v.c)) < 0)
        die("watch", err);

    unsigned long long bytes = 0;
    unsigned pdus = 0, ok = 0, bad = 0;
    for (;; pdus++) {
        uint8_t hdr[8];
        int rc = take(&v, hdr, sizeof hdr, NULL);
        if (rc == 1)
            break; /* the client closed between PDUs */
        if (rc < 0)
            die("header", rc);
        uint32_t len = le32(hdr + 4);
        if (hdr[0] != PDU_TYPE_DATA || len == 0 || len > MAX_PAYLOAD) {
            fprintf(stderr, "dti-pdu-server: PDU %u: bad header (type %u, length %u)\n", pdus, hdr[0], len);
            return 1;
        }
        /* The digest of the payload, asked before it has (all) arrived. */
        unsigned k = pdus % IN_FLIGHT;
        v.have[k] = 0;
        while ((rc = dti_prep_digest(v.c, v.s, DTI_DIGEST_RX, 0, len, 0, pdus)) == -EAGAIN)
            if (pump(&v) < 0)
                die("digest", -EAGAIN);
        if (rc < 0)
            die("digest", rc);
        dti_submit(v.c);
        if ((rc = take(&v, NULL, len, out)) != 0)
            die("payload", rc == 1 ? -EPIPE : rc);
        uint8_t trailer[4];
        if ((rc = take(&v, trailer, 4, NULL)) != 0)
            die("digest trailer", rc == 1 ? -EPIPE : rc);
        while (!v.have[k])
            if (pump(&v) <= 0)
                die("waiting for the digest", -ETIMEDOUT);
        if (v.res[k] < 0)
            die("digest", v.res[k]);
        int match = v.crc[k] == le32(trailer);
        ok += match;
        bad += !match;
        bytes += len;
        if (dig)
            fprintf(dig, "%u %u %08x %s\n", pdus, len, v.crc[k], match ? "ok" : "BAD");
    }
    printf("pdus %u bytes %llu digest-ok %u mismatches %u\n", pdus, bytes, ok, bad);
    dti_close(v.c, v.s);
    dti_close(v.c, (dti_sock_t)l);
    dti_detach(d);
    if ((out && fclose(out) != 0) || (dig && fclose(dig) != 0)) {
        perror("dti-pdu-server: write");
        return 1;
    }
    return bad ? 3 : 0;
}
