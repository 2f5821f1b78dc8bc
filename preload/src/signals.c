/* The program's signal handlers, seen by the shim's waiter.
 *
 * A blocked call the shim emulates waits by spinning, then sleeping in a
 * ppoll(). A handler that runs during the spin (or between the last check
 * and the sleep) leaves no EINTR behind, so without help the call would go
 * on waiting, where the kernel's call would have returned EINTR (a program
 * that breaks a blocking read with alarm() hangs). So the shim installs its
 * own trampoline in front of every handler the program installs
 * (sigaction, signal, bsd_signal, sysv_signal, siginterrupt): it counts the
 * signal on the thread it runs on (the kernel delivers a signal to one
 * thread, and that thread's call is the one interrupted) and then calls the
 * program's handler as the kernel would have. sigaction(sig, NULL, &old)
 * answers what the program installed, never the trampoline. SIG_DFL and
 * SIG_IGN pass through untouched. See README "Signals". */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "real.h"
#include "shim.h"
#include "signals.h"
#include "ucopy.h"

ETA_TLS unsigned eta_sig_handled; /* handlers run on this thread */
ETA_TLS unsigned eta_sig_eintr;   /* ... of which without SA_RESTART */

/* The program's handler for each signal, when the trampoline stands in
 * front of it (handler 0: not wrapped). mask: what it asked for, answered by
 * sigaction(sig, NULL, &old) (the kernel holds the same). */
struct prog_handler {
    _Atomic uintptr_t handler;
    _Atomic int flags;
};
static struct prog_handler prog[NSIG];

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
static sigaction_fn real_sigaction_ptr;

int eta_real_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    sigaction_fn f = __atomic_load_n(&real_sigaction_ptr, __ATOMIC_ACQUIRE);
    if (!f) {
        void *sym = dlsym(RTLD_NEXT, "sigaction");
        if (!sym) {
            errno = ENOSYS;
            return -1;
        }
        memcpy(&f, &sym, sizeof f);
        __atomic_store_n(&real_sigaction_ptr, f, __ATOMIC_RELEASE);
    }
    return f(sig, act, old);
}

static void trampoline(int sig, siginfo_t *info, void *uc)
{
    uintptr_t h = atomic_load_explicit(&prog[sig].handler, memory_order_acquire);
    int flags = atomic_load_explicit(&prog[sig].flags, memory_order_relaxed);
    /* Counted first: a handler that longjmps out has still run. */
    eta_sig_handled++;
    if (!(flags & SA_RESTART))
        eta_sig_eintr++;
    if (flags & SA_RESETHAND) /* the kernel reset it to SIG_DFL on delivery */
        atomic_store_explicit(&prog[sig].handler, 0, memory_order_release);
    if (h == 0 || h == (uintptr_t)SIG_DFL || h == (uintptr_t)SIG_IGN)
        return; /* replaced by SIG_DFL/SIG_IGN while this one was being delivered */
    if (flags & SA_SIGINFO) {
        void (*f)(int, siginfo_t *, void *);
        memcpy(&f, &h, sizeof f);
        f(sig, info, uc);
    } else {
        void (*f)(int);
        memcpy(&f, &h, sizeof f);
        f(sig);
    }
}

void eta_sig_block_async(sigset_t *orig)
{
    sigset_t block;
    sigfillset(&block);
    sigdelset(&block, SIGSEGV);
    sigdelset(&block, SIGBUS);
    sigdelset(&block, SIGFPE);
    sigdelset(&block, SIGILL);
    sigdelset(&block, SIGTRAP);
    sigdelset(&block, SIGSYS);
    pthread_sigmask(SIG_BLOCK, &block, orig);
}

static bool wrappable(int sig)
{
    return sig > 0 && sig < NSIG && sig != SIGKILL && sig != SIGSTOP;
}

/* Faults are delivered to the thread that caused them, in the program's own
 * code, never while a shim wait blocks: they need no counting trampoline.
 * SIGFPE, SIGILL, SIGTRAP and SIGSYS handlers go to the kernel untouched;
 * SIGSEGV and SIGBUS have the shim's fault handler in front (ucopy.c: a
 * fault in the shim's copy of a program's buffer is EFAULT, every other one
 * the program's). */
static bool synchronous(int sig)
{
    return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP || sig == SIGSYS;
}

static bool is_trampoline(const struct sigaction *sa)
{
    return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == trampoline;
}

/* What the program installed, from what the kernel holds (k). */
static void as_program(int sig, const struct sigaction *k, uintptr_t h, int flags, struct sigaction *out)
{
    *out = *k;
    if (!is_trampoline(k))
        return;
    memcpy(&out->sa_sigaction, &h, sizeof h);
    out->sa_flags = (k->sa_flags & ~SA_SIGINFO) | (flags & SA_SIGINFO);
    (void)sig;
}

static int shim_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (eta_fault_sig(sig)) /* SIGSEGV, SIGBUS: the shim's handler stays in front (ucopy.c) */
        return eta_fault_sigaction(sig, act, old);
    if (!wrappable(sig) || synchronous(sig))
        return eta_real_sigaction(sig, act, old);
    uintptr_t prev_h = atomic_load_explicit(&prog[sig].handler, memory_order_acquire);
    int prev_flags = atomic_load_explicit(&prog[sig].flags, memory_order_relaxed);
    struct sigaction k, kold;
    int rc;
    if (!act) {
        rc = eta_real_sigaction(sig, NULL, &kold);
    } else if (act->sa_handler == SIG_DFL || act->sa_handler == SIG_IGN) {
        /* Passed through; forgotten once the kernel no longer calls it. */
        rc = eta_real_sigaction(sig, act, &kold);
        if (rc == 0)
            atomic_store_explicit(&prog[sig].handler, 0, memory_order_release);
    } else {
        uintptr_t h;
        if (act->sa_flags & SA_SIGINFO)
            memcpy(&h, &act->sa_sigaction, sizeof h);
        else
            memcpy(&h, &act->sa_handler, sizeof h);
        /* Recorded before the kernel can call the trampoline with it. */
        atomic_store_explicit(&prog[sig].flags, act->sa_flags, memory_order_relaxed);
        atomic_store_explicit(&prog[sig].handler, h, memory_order_release);
        k = *act;
        k.sa_sigaction = trampoline;
        k.sa_flags |= SA_SIGINFO;
        rc = eta_real_sigaction(sig, &k, &kold);
        if (rc != 0) { /* refused (bad flags, ...): as it was */
            atomic_store_explicit(&prog[sig].flags, prev_flags, memory_order_relaxed);
            atomic_store_explicit(&prog[sig].handler, prev_h, memory_order_release);
        }
    }
    if (rc == 0 && old)
        as_program(sig, &kold, prev_h, prev_flags, old);
    return rc;
}

ETA_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return shim_sigaction(sig, act, old);
}

ETA_EXPORT int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);
ETA_EXPORT int __sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    return shim_sigaction(sig, act, old);
}

/* glibc's signal() and friends call its sigaction internally, past the shim:
 * done here with glibc's semantics. */
static sigset_t interrupting; /* siginterrupt(sig, 1): signal() without SA_RESTART */

static __sighandler_t install(int sig, __sighandler_t h, int flags, bool mask_self)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    if (mask_self && wrappable(sig))
        sigaddset(&sa.sa_mask, sig);
    if (shim_sigaction(sig, &sa, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

ETA_EXPORT __sighandler_t signal(int sig, __sighandler_t h)
{
    if (h == SIG_ERR || !wrappable(sig)) {
        errno = EINVAL;
        return SIG_ERR;
    }
    return install(sig, h, sigismember(&interrupting, sig) == 1 ? 0 : SA_RESTART, true);
}

ETA_EXPORT __sighandler_t bsd_signal(int sig, __sighandler_t h)
{
    return signal(sig, h);
}

ETA_EXPORT __sighandler_t sysv_signal(int sig, __sighandler_t h);
ETA_EXPORT __sighandler_t sysv_signal(int sig, __sighandler_t h)
{
    if (h == SIG_ERR || !wrappable(sig)) {
        errno = EINVAL;
        return SIG_ERR;
    }
    return install(sig, h, SA_RESETHAND | SA_NODEFER, false);
}

ETA_EXPORT int siginterrupt(int sig, int flag)
{
    struct sigaction sa;
    if (!wrappable(sig) || shim_sigaction(sig, NULL, &sa) != 0) {
        errno = EINVAL;
        return -1;
    }
    if (flag) {
        sigaddset(&interrupting, sig);
        sa.sa_flags &= ~SA_RESTART;
    } else {
        sigdelset(&interrupting, sig);
        sa.sa_flags |= SA_RESTART;
    }
    return shim_sigaction(sig, &sa, NULL);
}

bool eta_signal_restarts(int sig)
{
    if (!wrappable(sig))
        return true;
    struct sigaction sa;
    if (eta_real_sigaction(sig, NULL, &sa) != 0 || sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)
        return true;
    if (is_trampoline(&sa))
        return atomic_load_explicit(&prog[sig].flags, memory_order_relaxed) & SA_RESTART;
    return sa.sa_flags & SA_RESTART;
}

/* Handlers installed before the shim's wrappers were reached (a library's
 * constructor calling glibc internals, or a raw rt_sigaction): the
 * trampoline goes in front of them too. */
/* TEST HOOK (tests/unit/preload posted_prog `eintr_early`), off unless
 * ETA_TEST_SIGNAL_AT_WAIT=SIG is set: a blocking recv's, accept's or
 * epoll_wait's wait raises SIG on
 * its own thread before its first look, when the program has a handler for
 * SIG: the one moment a signal from outside cannot be aimed at. */
int eta_test_signal_at_wait;

void eta_sig_test_raise(void)
{
    int sig = eta_test_signal_at_wait;
    uintptr_t h = atomic_load_explicit(&prog[sig].handler, memory_order_acquire);
    if (h != 0 && h != (uintptr_t)SIG_DFL && h != (uintptr_t)SIG_IGN)
        raise(sig);
}

void eta_signals_init(void)
{
    eta_fault_init();
    int saved = errno;
    const char *t = getenv("ETA_TEST_SIGNAL_AT_WAIT");
    if (t && atoi(t) > 0 && atoi(t) < NSIG && wrappable(atoi(t)) && !synchronous(atoi(t)))
        eta_test_signal_at_wait = atoi(t);
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (!wrappable(sig) || synchronous(sig) || eta_real_sigaction(sig, NULL, &sa) != 0)
            continue;
        if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN || is_trampoline(&sa))
            continue;
        (void)shim_sigaction(sig, &sa, NULL);
    }
    errno = saved;
}
