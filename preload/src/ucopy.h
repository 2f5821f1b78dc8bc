/* Copies between the program's buffers and the rings whose fault is
 * recoverable (ucopy.c): a buffer that reaches into an unmapped hole (or a
 * mapping past the end of its file: SIGBUS) makes the copy report a fault
 * instead of killing the program, as the kernel's copy_from_user() does.
 *
 * How: every instruction of these copies that touches the program's memory
 * is listed, with the place to resume at, in the section eta_ucopy_ex (an
 * exception table, as the kernel keeps one). The shim's SIGSEGV/SIGBUS
 * handler (ucopy.c) looks the faulting instruction's address up there and,
 * when it is one of them, resumes at its fixup; any other fault goes to the
 * program's handler (or its default action) unchanged. The copies cost
 * nothing for it: the table is only read when a fault happens. */
#ifndef ETA_PRELOAD_UCOPY_H
#define ETA_PRELOAD_UCOPY_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shim.h"

/* Copies n bytes from src to dst; returns 0, or the bytes not copied when
 * the copy faulted (those before the fault were copied). Either side may be
 * the program's. (rep movsb: byte-exact where it stops.) */
size_t eta_ucopy(void *dst, const void *src, size_t n);

#if defined(__x86_64__)
/* One entry of the exception table: the listed instruction and where to
 * resume when it faults, each relative to its own field. */
#define ETA_UCOPY_EX(insn)                                                                                       \
    ".pushsection eta_ucopy_ex,\"a\"\n.balign 4\n.long " insn " - .\n.long %l[fault] - .\n.popsection\n"

/* Copies n <= 64 bytes (n >= 1) as dti__copy_small() does (two overlapping
 * moves of the largest power of two not above n), inline; false when it
 * faulted (then some of dst may have been written). */
static inline __attribute__((always_inline)) bool eta_ucopy_small(void *dst, const void *src, uint32_t n)
{
    char *d = (char *)dst;
    const char *s = (const char *)src;
    if (n == 64) {
        __asm__ __volatile__ goto("1: movdqu (%[s]), %%xmm0\n"
                     "2: movdqu 16(%[s]), %%xmm1\n"
                     "3: movdqu 32(%[s]), %%xmm2\n"
                     "4: movdqu 48(%[s]), %%xmm3\n"
                     "5: movdqu %%xmm0, (%[d])\n"
                     "6: movdqu %%xmm1, 16(%[d])\n"
                     "7: movdqu %%xmm2, 32(%[d])\n"
                     "8: movdqu %%xmm3, 48(%[d])\n" ETA_UCOPY_EX("1b") ETA_UCOPY_EX("2b") ETA_UCOPY_EX("3b")
                         ETA_UCOPY_EX("4b") ETA_UCOPY_EX("5b") ETA_UCOPY_EX("6b") ETA_UCOPY_EX("7b")
                             ETA_UCOPY_EX("8b")
                     :
                     : [d] "r"(d), [s] "r"(s)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "memory"
                     : fault);
    } else if (n >= 32) {
        __asm__ __volatile__ goto("1: movdqu (%[s]), %%xmm0\n"
                     "2: movdqu 16(%[s]), %%xmm1\n"
                     "3: movdqu (%[s2]), %%xmm2\n"
                     "4: movdqu 16(%[s2]), %%xmm3\n"
                     "5: movdqu %%xmm0, (%[d])\n"
                     "6: movdqu %%xmm1, 16(%[d])\n"
                     "7: movdqu %%xmm2, (%[d2])\n"
                     "8: movdqu %%xmm3, 16(%[d2])\n" ETA_UCOPY_EX("1b") ETA_UCOPY_EX("2b") ETA_UCOPY_EX("3b")
                         ETA_UCOPY_EX("4b") ETA_UCOPY_EX("5b") ETA_UCOPY_EX("6b") ETA_UCOPY_EX("7b")
                             ETA_UCOPY_EX("8b")
                     :
                     : [d] "r"(d), [s] "r"(s), [d2] "r"(d + n - 32), [s2] "r"(s + n - 32)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "memory"
                     : fault);
    } else if (n >= 16) {
        __asm__ __volatile__ goto("1: movdqu (%[s]), %%xmm0\n"
                     "2: movdqu (%[s2]), %%xmm1\n"
                     "3: movdqu %%xmm0, (%[d])\n"
                     "4: movdqu %%xmm1, (%[d2])\n" ETA_UCOPY_EX("1b") ETA_UCOPY_EX("2b") ETA_UCOPY_EX("3b")
                         ETA_UCOPY_EX("4b")
                     :
                     : [d] "r"(d), [s] "r"(s), [d2] "r"(d + n - 16), [s2] "r"(s + n - 16)
                     : "xmm0", "xmm1", "memory"
                     : fault);
    } else if (n >= 8) {
        __asm__ __volatile__ goto("1: movq (%[s]), %%xmm0\n"
                     "2: movq (%[s2]), %%xmm1\n"
                     "3: movq %%xmm0, (%[d])\n"
                     "4: movq %%xmm1, (%[d2])\n" ETA_UCOPY_EX("1b") ETA_UCOPY_EX("2b") ETA_UCOPY_EX("3b")
                         ETA_UCOPY_EX("4b")
                     :
                     : [d] "r"(d), [s] "r"(s), [d2] "r"(d + n - 8), [s2] "r"(s + n - 8)
                     : "xmm0", "xmm1", "memory"
                     : fault);
    } else if (n >= 4) {
        __asm__ __volatile__ goto("1: movd (%[s]), %%xmm0\n"
                     "2: movd (%[s2]), %%xmm1\n"
                     "3: movd %%xmm0, (%[d])\n"
                     "4: movd %%xmm1, (%[d2])\n" ETA_UCOPY_EX("1b") ETA_UCOPY_EX("2b") ETA_UCOPY_EX("3b")
                         ETA_UCOPY_EX("4b")
                     :
                     : [d] "r"(d), [s] "r"(s), [d2] "r"(d + n - 4), [s2] "r"(s + n - 4)
                     : "xmm0", "xmm1", "memory"
                     : fault);
    } else { /* 1 to 3 bytes: the first, the last and the middle one */
        unsigned t;
        __asm__ __volatile__ goto("1: movzbl (%[s]), %k[t]\n"
                     "2: movb %b[t], (%[d])\n"
                     "3: movzbl (%[s2]), %k[t]\n"
                     "4: movb %b[t], (%[d2])\n"
                     "5: movzbl (%[s3]), %k[t]\n"
                     "6: movb %b[t], (%[d3])\n" ETA_UCOPY_EX("1b") ETA_UCOPY_EX("2b") ETA_UCOPY_EX("3b")
                         ETA_UCOPY_EX("4b") ETA_UCOPY_EX("5b") ETA_UCOPY_EX("6b")
                     : [t] "=&r"(t)
                     : [d] "r"(d), [s] "r"(s), [d2] "r"(d + n - 1), [s2] "r"(s + n - 1), [d3] "r"(d + n / 2),
                       [s3] "r"(s + n / 2)
                     : "memory"
                     : fault);
        (void)t;
    }
    return true;
fault:
    return false;
}
#else
static inline bool eta_ucopy_small(void *dst, const void *src, uint32_t n)
{
    return eta_ucopy(dst, src, n) == 0;
}
#endif

/* Copies len bytes between the iovec at byte offset off and flat memory
 * (to_iov: into the iovec); true when all were copied, false when a piece
 * faulted. */
bool eta_ucopy_iov(const struct iovec *iov, int n, size_t off, void *flat, size_t len, bool to_iov);

/* The program's action for SIGSEGV/SIGBUS, which the shim's handler stands
 * in front of (signals.c's sigaction() asks here for these two). */
bool eta_fault_sig(int sig);
int eta_fault_sigaction(int sig, const struct sigaction *act, struct sigaction *old);
/* Installs the shim's SIGSEGV and SIGBUS handlers, taking over what was
 * installed before as the program's; the constructor's (signals.c). */
void eta_fault_init(void);

#endif
