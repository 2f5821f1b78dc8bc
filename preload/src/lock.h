/* preload/src/lock.h: the shim's small mutex, for locks taken on every call
 * (an epoll set's). Uncontended, lock and unlock are one atomic instruction
 * each (glibc's pthread_mutex_lock/unlock cost ~55 instructions together,
 * measured with benchmarks/preload/shim-instructions); a thread that finds it
 * held sleeps on a futex, so waiting costs no CPU. Not recursive, no owner
 * checks: like a default pthread mutex. After fork() a lock another thread
 * held stays held in the child, as a pthread mutex would. */
#ifndef ETA_PRELOAD_LOCK_H
#define ETA_PRELOAD_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* 0: free, 1: held, 2: held and a thread may sleep waiting for it. */
struct eta_lock {
    _Atomic uint32_t v;
};
#define ETA_LOCK_INIT {0}

void eta_lock_wait(struct eta_lock *l);  /* lock.c: the contended lock */
void eta_lock_wake(struct eta_lock *l);  /* lock.c: wakes one sleeper */

static inline bool eta_trylock(struct eta_lock *l)
{
    uint32_t free_ = 0;
    return atomic_compare_exchange_strong_explicit(&l->v, &free_, 1, memory_order_acquire, memory_order_relaxed);
}

static inline void eta_lock(struct eta_lock *l)
{
    if (__builtin_expect(!eta_trylock(l), 0))
        eta_lock_wait(l);
}

static inline void eta_unlock(struct eta_lock *l)
{
    if (__builtin_expect(atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2, 0))
        eta_lock_wake(l);
}

#endif
