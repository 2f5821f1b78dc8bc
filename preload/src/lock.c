/* preload/src/lock.c: the slow halves of struct eta_lock (see lock.h). The
 * classic three-state futex mutex: a waiter marks the word 2 ("someone may
 * sleep") before sleeping, so the unlock that sees 2 knows to wake one; a
 * woken thread takes the lock as 2 again, since others may still sleep. */
#include "lock.h"
#include "real.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

void eta_lock_wait(struct eta_lock *l)
{
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
        /* Returns at once if the word is no longer 2 (EAGAIN), on a wake,
         * or on a signal (EINTR): every case tries again. */
        eta_raw_syscall(SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void eta_lock_wake(struct eta_lock *l)
{
    eta_raw_syscall(SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
