/* The program's signal handlers behind a counting trampoline (signals.c). */
#ifndef ETA_PRELOAD_SIGNALS_H
#define ETA_PRELOAD_SIGNALS_H

#include <signal.h>
#include <stdbool.h>

#include "shim.h"

/* Handlers of the program that ran on this thread, all of them and those
 * without SA_RESTART: the shim's trampoline counts each before calling the
 * program's handler. A wait samples them at its start (eta_wait). */
extern ETA_TLS unsigned eta_sig_handled;
extern ETA_TLS unsigned eta_sig_eintr;

/* Both counts when a blocking call began (eta_sig_mark_now(), at the start
 * of its general way): every handler that runs on the thread after it
 * interrupts the call, also one that runs before the call's wait took its
 * first look (eta_wait()). A handler that runs before the mark is as one the
 * kernel runs before the system call: it does not interrupt the call. */
struct eta_sig_mark {
    unsigned handled, eintr;
};
static inline struct eta_sig_mark eta_sig_mark_now(void)
{
    return (struct eta_sig_mark){eta_sig_handled, eta_sig_eintr};
}
/* Blocks every signal but the faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
 * SIGTRAP, SIGSYS: never blocked) on this thread; *orig: the mask before.
 * A waiter blocks them from its last look at the counts to its sleep, which
 * unblocks them atomically (ppoll, epoll_pwait with *orig), so a handler
 * that runs in between still ends the sleep. */
void eta_sig_block_async(sigset_t *orig);
/* Whether a blocked call interrupted by sig's handler restarts (SA_RESTART,
 * or no handler at all), after what the program installed. */
bool eta_signal_restarts(int sig);
/* TEST HOOK (signals.c): ETA_TEST_SIGNAL_AT_WAIT's signal, 0 when unset;
 * eta_sig_test_hook() is called where a blocking recv, accept or
 * epoll_wait begins its wait (not in waits that signals do not end). */
extern int eta_test_signal_at_wait;
void eta_sig_test_raise(void);
static inline void eta_sig_test_hook(void)
{
    if (ETA_UNLIKELY(eta_test_signal_at_wait))
        eta_sig_test_raise();
}
/* libc's sigaction(), past the shim's. */
int eta_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
/* Puts the trampoline in front of handlers installed before the shim's
 * wrappers were reached. Called by the constructor. */
void eta_signals_init(void);  /* also installs the fault handler (ucopy.c) */

#endif
