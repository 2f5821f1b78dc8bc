/* The send fast path's one word (preload/src/sockobj.h, tx_fast; issue 33):
 * set when the send view is taken on an accelerated socket of this
 * attachment that is not shut for writing, and ended by each change that
 * makes send_fast()'s old checks fail: a failed take, shutdown for writing,
 * the socket no longer accelerated (the PPE refused it: kernel; a remake
 * that failed: orphan), a re-attach (eta_generation), the PPE gone. Each
 * case starts from a usable word, so a change that fails to end it fails
 * here. White-box: the helpers sock.c and eta_take_tx_view() use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sockobj.h"

/* The globals the helpers read (attach.c's, in the shim). */
uint32_t eta_generation = 1;
_Atomic bool eta_engine_dead;

static int failures;

#define CHECK(cond, what)                                                                                  \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "tx_fast_test: %s: expected %s\n", what, #cond);                              \
            failures++;                                                                                    \
        }                                                                                                  \
    } while (0)

static struct eta_sock *usable(void)
{
    static _Alignas(64) unsigned char mem[sizeof(struct eta_sock)];
    memset(mem, 0, sizeof mem);
    struct eta_sock *s = (struct eta_sock *)mem;
    s->obj.kind = ETA_OBJ_SOCK;
    s->generation = eta_generation;
    atomic_store(&s->state, ETA_SOCK_ACCEL);
    s->connect_started = true;
    CHECK(!eta_tx_fast_ok(s), "no view taken yet");
    atomic_store(&s->txv_state, 1); /* the taker's */
    eta_tx_view_settle(s, 0);
    CHECK(eta_tx_fast_ok(s), "the view taken");
    return s;
}

int main(void)
{
    struct eta_sock *s = usable();
    atomic_store(&s->txv_state, 1);
    eta_tx_view_settle(s, -ENOTCONN);
    CHECK(!eta_tx_fast_ok(s), "a take that failed");

    s = usable();
    eta_sock_shut_wr(s);
    CHECK(!eta_tx_fast_ok(s), "shutdown(SHUT_WR)");
    atomic_store(&s->txv_state, 1);
    eta_tx_view_settle(s, 0);
    CHECK(!eta_tx_fast_ok(s), "shut for writing, the view taken again");

    s = usable();
    eta_sock_unaccel(s, ETA_SOCK_KERNEL);
    CHECK(!eta_tx_fast_ok(s), "the PPE refused the socket (kernel)");
    atomic_store(&s->txv_state, 1);
    eta_tx_view_settle(s, 0);
    CHECK(!eta_tx_fast_ok(s), "kernel, the view taken again");

    s = usable();
    eta_sock_unaccel(s, ETA_SOCK_ORPHAN);
    CHECK(!eta_tx_fast_ok(s), "a remake that failed (orphan)");

    s = usable();
    eta_generation++; /* a re-attach */
    CHECK(!eta_tx_fast_ok(s), "a re-attach");
    atomic_store(&s->txv_state, 1);
    eta_tx_view_settle(s, 0);
    CHECK(!eta_tx_fast_ok(s), "a socket of the old attachment, its view taken again");

    s = usable(); /* of the new attachment */
    atomic_store(&eta_engine_dead, true);
    CHECK(!eta_tx_fast_ok(s), "the PPE went");
    atomic_store(&eta_engine_dead, false);
    CHECK(eta_tx_fast_ok(s), "(the word itself still set)");

    if (failures) {
        fprintf(stderr, "tx_fast_test: %d failed\n", failures);
        return 1;
    }
    printf("tx_fast_test: ok\n");
    return 0;
}
