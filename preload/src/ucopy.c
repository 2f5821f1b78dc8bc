/* Recoverable copies of the program's bytes (ucopy.h) and the shim's
 * SIGSEGV/SIGBUS handler in front of the program's.
 *
 * The kernel answers EFAULT for a buffer it cannot reach; the shim copies in
 * the program's thread, where such a buffer faults. Every instruction of the
 * shim's copies that touches the program's memory is listed in the exception
 * table (section eta_ucopy_ex: the instruction, where to resume); a fault
 * raised by the kernel (si_code > 0) at one of them resumes there, and the
 * copy reports how far it got. The table is read only when a fault happens:
 * the copies cost what a plain copy costs.
 *
 * Every other SIGSEGV/SIGBUS is the program's: the shim records the action
 * the program sets (sigaction, signal, ... through signals.c) and answers
 * queries with it exactly as set, while the kernel holds the shim's handler
 * with the program's mask and SA_NODEFER/SA_ONSTACK/SA_RESTART (so the kernel
 * masks as it would for the program's own handler). Such a fault goes to the
 * program's handler with the same siginfo and ucontext (SA_SIGINFO or not;
 * SA_RESETHAND emulated); under SIG_DFL (or SIG_IGN, which the kernel does
 * not honour for a fault) the action is reset to SIG_DFL and the handler
 * returns, so the instruction faults again and the program ends as it would
 * have (core dump, killed by the signal). A SIGSEGV/SIGBUS sent by kill()
 * goes to the program's action the same way (SIG_IGN: ignored; SIG_DFL: sent
 * again with the default action in place).
 *
 * Installed at start (the constructor, eta_signals_init()): from then on
 * every sigaction() of the program comes through the shim, and whatever was
 * installed before it (another library's constructor, a raw rt_sigaction)
 * is taken over as the program's action. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/uio.h>
#include <ucontext.h>

#include "signals.h"
#include "ucopy.h"

#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000 /* glibc adds it to every action it installs (x86-64) */
#endif

/* ---- the copy ------------------------------------------------------------ */

#if defined(__x86_64__)
/* rdi: dst, rsi: src, rdx: n; returns the bytes not copied. rep movsb
 * leaves rcx at the bytes still to copy when it faults (everything before
 * was stored), so the fixup returns it. */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl eta_ucopy\n"
        ".hidden eta_ucopy\n"
        ".type eta_ucopy, @function\n"
        "eta_ucopy:\n"
        "    movq %rdx, %rcx\n"
        "1:  rep movsb\n"
        "2:  movq %rcx, %rax\n"
        "    ret\n"
        ".size eta_ucopy, .-eta_ucopy\n"
        ".pushsection eta_ucopy_ex,\"a\"\n"
        ".balign 4\n"
        ".long 1b - .\n"
        ".long 2b - .\n"
        ".popsection\n");

struct ucopy_ex {
    int32_t insn, fixup; /* each relative to its own address */
};
extern const struct ucopy_ex __start_eta_ucopy_ex[] __attribute__((visibility("hidden")));
extern const struct ucopy_ex __stop_eta_ucopy_ex[] __attribute__((visibility("hidden")));

/* Where to resume after a fault at ip, or 0: not one of ours. */
static uintptr_t fixup_for(uintptr_t ip)
{
    for (const struct ucopy_ex *e = __start_eta_ucopy_ex; e < __stop_eta_ucopy_ex; e++)
        if ((uintptr_t)&e->insn + (intptr_t)e->insn == ip)
            return (uintptr_t)&e->fixup + (intptr_t)e->fixup;
    return 0;
}

static bool recover(ucontext_t *uc)
{
    uintptr_t to = fixup_for((uintptr_t)uc->uc_mcontext.gregs[REG_RIP]);
    if (!to)
        return false;
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)to;
    return true;
}
#else
size_t eta_ucopy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n); /* not recoverable here: faults as a memcpy would */
    return 0;
}

static bool recover(ucontext_t *uc)
{
    (void)uc;
    return false;
}
#endif

bool eta_ucopy_iov(const struct iovec *iov, int n, size_t off, void *flat, size_t len, bool to_iov)
{
    char *f = flat;
    for (int i = 0; i < n && len; i++) {
        if (off >= iov[i].iov_len) {
            off -= iov[i].iov_len;
            continue;
        }
        size_t k = iov[i].iov_len - off < len ? iov[i].iov_len - off : len;
        char *u = (char *)iov[i].iov_base + off;
        if ((to_iov ? eta_ucopy(u, f, k) : eta_ucopy(f, u, k)) != 0)
            return false;
        f += k;
        len -= k;
        off = 0;
    }
    return true;
}

/* ---- the program's action --------------------------------------------------
 * One record per signal, written under a lock with every signal blocked and
 * read by the handler under a sequence count (a handler may run on any
 * thread while another sets the action). */
struct prog_action {
    _Atomic unsigned seq; /* odd while being written */
    struct sigaction sa;  /* as the kernel would report it */
};
static struct prog_action prog_segv, prog_bus;
static atomic_flag writing = ATOMIC_FLAG_INIT;

static struct prog_action *prog_of(int sig)
{
    return sig == SIGSEGV ? &prog_segv : sig == SIGBUS ? &prog_bus : NULL;
}

bool eta_fault_sig(int sig)
{
    return prog_of(sig) != NULL;
}

static void prog_read(struct prog_action *p, struct sigaction *out)
{
    for (;;) {
        unsigned s = atomic_load_explicit(&p->seq, memory_order_acquire);
        if (s & 1)
            continue;
        memcpy(out, &p->sa, sizeof *out);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&p->seq, memory_order_relaxed) == s)
            return;
    }
}

static void prog_write(struct prog_action *p, const struct sigaction *sa)
{
    atomic_fetch_add_explicit(&p->seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    memcpy(&p->sa, sa, sizeof *sa);
    atomic_fetch_add_explicit(&p->seq, 1, memory_order_release);
}

static void on_fault(int sig, siginfo_t *info, void *ucv);

static bool is_ours(const struct sigaction *k)
{
    return (k->sa_flags & SA_SIGINFO) && k->sa_sigaction == on_fault;
}

/* What the kernel holds for the program's action: the shim's handler,
 * masking as the program's would. */
static void kernel_action(const struct sigaction *prog, struct sigaction *k)
{
    memset(k, 0, sizeof *k);
    k->sa_sigaction = on_fault;
    if (prog->sa_handler == SIG_DFL || prog->sa_handler == SIG_IGN) {
        sigemptyset(&k->sa_mask);
        k->sa_flags = SA_SIGINFO | SA_ONSTACK;
    } else {
        k->sa_mask = prog->sa_mask;
        k->sa_flags = SA_SIGINFO | (prog->sa_flags & (SA_NODEFER | SA_ONSTACK | SA_RESTART));
    }
}

int eta_fault_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    struct prog_action *p = prog_of(sig);
    sigset_t all, orig;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &orig);
    while (atomic_flag_test_and_set_explicit(&writing, memory_order_acquire))
        ;
    struct sigaction prev;
    prog_read(p, &prev);
    int rc = 0;
    if (act) {
        struct sigaction rec = *act, k;
        rec.sa_flags |= SA_RESTORER; /* as glibc's sigaction() reports it back */
        sigdelset(&rec.sa_mask, SIGKILL);
        sigdelset(&rec.sa_mask, SIGSTOP);
        kernel_action(&rec, &k);
        /* Recorded before the kernel can call the handler with it; the
         * kernel checks the flags and mask (as for the program's own). */
        prog_write(p, &rec);
        rc = eta_real_sigaction(sig, &k, NULL);
        if (rc != 0)
            prog_write(p, &prev);
    }
    atomic_flag_clear_explicit(&writing, memory_order_release);
    int e = errno;
    pthread_sigmask(SIG_SETMASK, &orig, NULL);
    errno = e;
    if (rc == 0 && old)
        *old = prev;
    return rc;
}

/* ---- the handler ------------------------------------------------------------ */

static void on_fault(int sig, siginfo_t *info, void *ucv)
{
    ucontext_t *uc = ucv;
    /* A fault the kernel raised at one of the shim's copies: resume at its
     * fixup. (A signal sent by kill() is never a fault of ours.) */
    if (info && info->si_code > 0 && recover(uc))
        return;
    struct prog_action *p = prog_of(sig);
    struct sigaction a;
    prog_read(p, &a);
    bool sent = !info || info->si_code <= 0;
    if (a.sa_handler == SIG_IGN && sent)
        return; /* an ignored signal from kill() */
    if (a.sa_handler == SIG_DFL || a.sa_handler == SIG_IGN) {
        /* The default action, as the kernel takes it for a fault (also for
         * SIG_IGN): in place, and the faulting instruction runs again. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        eta_real_sigaction(sig, &dfl, NULL);
        if (sent)
            raise(sig); /* delivered as this handler returns (sig is blocked until then) */
        return;
    }
    if (a.sa_flags & SA_RESETHAND) { /* the kernel resets it on delivery */
        struct sigaction dfl = a;
        dfl.sa_handler = SIG_DFL;
        dfl.sa_flags &= ~SA_SIGINFO;
        while (atomic_flag_test_and_set_explicit(&writing, memory_order_acquire))
            ;
        prog_write(p, &dfl);
        atomic_flag_clear_explicit(&writing, memory_order_release);
    }
    if (a.sa_flags & SA_SIGINFO)
        a.sa_sigaction(sig, info, ucv);
    else
        a.sa_handler(sig);
}

void eta_fault_init(void)
{
    int saved = errno;
    const int sigs[] = {SIGSEGV, SIGBUS};
    for (int i = 0; i < 2; i++) {
        struct sigaction k, mine;
        if (eta_real_sigaction(sigs[i], NULL, &k) != 0 || is_ours(&k))
            continue;
        prog_write(prog_of(sigs[i]), &k); /* what was there: the program's */
        kernel_action(&k, &mine);
        eta_real_sigaction(sigs[i], &mine, NULL);
    }
    errno = saved;
}
