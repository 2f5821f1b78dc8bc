/* sendmmsg on an accelerated UDP socket: consecutive datagrams for the
 * engine go in one batch (one dti_dgram_sendmmsg: a SEND_DGRAMS round trip
 * per ring's worth) instead of a round trip each. Each message is checked
 * as sendmsg checks it (udp.c eta_udp_prepare); one that needs something
 * else (a hybrid's kernel half for its destination, UDP_SEGMENT, more
 * pieces than the batch holds, a msg_len the program cannot have written)
 * or that fails its checks ends the batch: the batch goes first, then that
 * message alone through eta_udp_send(), as sendmsg would send it.
 *
 * Linux's answers (net/socket.c __sys_sendmmsg): the messages in order; the
 * count of those sent; each one's msg_len set to its bytes; an error on the
 * first message is the call's -1 and errno, an error on a later one ends
 * the call with the count so far and is lost (the program's retry from the
 * first unsent message meets it again); a message whose msg_len cannot be
 * written went but is not counted, and ends the call (EFAULT when first). */
#include <errno.h>
#include <string.h>

#include "io.h"
#include "udp.h"

/* The batch's bounds: fixed arrays on the stack (messages; iovec pieces). */
#define ETA_MMSG_BATCH 32u
#define ETA_MMSG_PIECES 64u

struct batch {
    struct dti_dgram_msg m[ETA_MMSG_BATCH];
    struct eta_udp_dst d[ETA_MMSG_BATCH];
    struct dti_iov pieces[ETA_MMSG_PIECES];
    unsigned first, n, np; /* vec[first .. first + n) in the batch, pieces used */
    dti_ctx_t *c;
};

/* The batch to the engine, each sent message's msg_len written. Returns
 * false when the call ends here (not all sent, or a msg_len not written;
 * *done counts what was), errno the first message's error. */
static bool flush(struct eta_sock *s, struct batch *b, struct mmsghdr *vec, unsigned *done)
{
    if (!b->n)
        return true;
    const unsigned n = b->n;
    b->n = b->np = 0;
    int r = eta_udp_commit(b->c, s, b->m, b->d, n);
    if (r < 0)
        return false;
    for (unsigned k = 0; k < (unsigned)r; k++) {
        const unsigned len = (unsigned)b->d[k].len;
        if (!uput(&vec[b->first + k].msg_len, &len, sizeof len)) {
            errno = EFAULT; /* written a moment ago: another thread unmapped it */
            return false;
        }
        ++*done;
    }
    return (unsigned)r == n;
}

int eta_udp_sendmmsg(int fd, struct eta_sock *s, struct mmsghdr *vec, unsigned vlen, int flags)
{
    struct batch b;
    b.n = b.np = 0;
    b.c = NULL;
    unsigned done = 0;
    for (unsigned i = 0; i < vlen; i++) {
        const struct msghdr *h = &vec[i].msg_hdr; /* readable: sendmmsg checked vec */
        /* msg_len written back as it is: a program that cannot have it
         * written sends this one alone (the kernel's put_user after it). */
        const unsigned was = vec[i].msg_len;
        const bool len_ok = uput(&vec[i].msg_len, &was, sizeof was);
        const size_t iovlen = h->msg_iovlen;
        if (len_ok && iovlen <= ETA_MMSG_PIECES) {
            if (b.n == ETA_MMSG_BATCH || iovlen > ETA_MMSG_PIECES - b.np)
                if (!flush(s, &b, vec, &done))
                    return done ? (int)done : -1;
            if (!b.n)
                b.first = i;
            int p = eta_udp_prepare(fd, s, h->msg_iov, (int)iovlen, flags, h->msg_name, h->msg_namelen,
                                    h->msg_control, h->msg_controllen, &b.c, &b.m[b.n], &b.d[b.n],
                                    &b.pieces[b.np]);
            if (p == ETA_UDP_READY) {
                b.n++;
                b.np += (unsigned)iovlen;
                continue;
            }
            if (p < 0) { /* the messages before it go; its error is the call's when none did */
                const int e = errno;
                if (!flush(s, &b, vec, &done) || done)
                    return done ? (int)done : -1;
                errno = e;
                return -1;
            }
        }
        /* This one alone, as sendmsg sends it, after the batch. */
        if (!flush(s, &b, vec, &done))
            return done ? (int)done : -1;
        ssize_t r = eta_udp_send(fd, s, h->msg_iov, (int)iovlen, flags, h->msg_name, h->msg_namelen,
                                 h->msg_control, h->msg_controllen);
        if (r < 0)
            return done ? (int)done : -1;
        const unsigned len = (unsigned)r;
        if (!uput(&vec[i].msg_len, &len, sizeof len)) /* as the kernel's put_user: EFAULT (the bytes went) */
            return done ? (int)done : (int)fail(EFAULT);
        done++;
    }
    if (!flush(s, &b, vec, &done))
        return done ? (int)done : -1;
    return (int)done;
}
