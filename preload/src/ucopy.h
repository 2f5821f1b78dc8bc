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
 * resume when it faults (the C label lbl), each relative to its own field. */
#define ETA_UCOPY_EX(insn, lbl)                                                                                  \
    ".pushsection eta_ucopy_ex,\"a\"\n.balign 4\n.long " insn " - .\n.long %l[" #lbl "] - .\n.popsection\n"

/* Copies n bytes, 1 <= n <= 64, as dti__copy_small() does (two overlapping
 * moves of the largest power of two not above n), inline; a fault jumps to
 * the label `fault` of the enclosing function (then some of dst may have
 * been written). A label, not a result: the common path then has no test
 * and no value more to keep (the fast paths' budgets). */
#define ETA_UCOPY_SMALL(dst, src, len, fault)                                                                     \
    do {                                                                                                          \
        char *d_ = (char *)(dst);                                                                                 \
        const char *s_ = (const char *)(src);                                                                     \
        size_t n_ = (len);                                                                                        \
        if (n_ == 64) {                                                                                           \
            __asm__ __volatile__ goto("1: movdqu (%[s]), %%xmm0\n2: movdqu 16(%[s]), %%xmm1\n"                    \
                                      "3: movdqu 32(%[s]), %%xmm2\n4: movdqu 48(%[s]), %%xmm3\n"                  \
                                      "5: movdqu %%xmm0, (%[d])\n6: movdqu %%xmm1, 16(%[d])\n"                    \
                                      "7: movdqu %%xmm2, 32(%[d])\n8: movdqu %%xmm3, 48(%[d])\n"                  \
                                      ETA_UCOPY_EX("1b", fault) ETA_UCOPY_EX("2b", fault)                         \
                                      ETA_UCOPY_EX("3b", fault) ETA_UCOPY_EX("4b", fault)                         \
                                      ETA_UCOPY_EX("5b", fault) ETA_UCOPY_EX("6b", fault)                         \
                                      ETA_UCOPY_EX("7b", fault) ETA_UCOPY_EX("8b", fault)                         \
                                      :                                                                           \
                                      : [d] "r"(d_), [s] "r"(s_)                                                  \
                                      : "xmm0", "xmm1", "xmm2", "xmm3", "memory"                                  \
                                      : fault);                                                                   \
        } else if (n_ >= 32) {                                                                                    \
            __asm__ __volatile__ goto("1: movdqu (%[s]), %%xmm0\n2: movdqu 16(%[s]), %%xmm1\n"                    \
                                      "3: movdqu -32(%[s],%[n]), %%xmm2\n4: movdqu -16(%[s],%[n]), %%xmm3\n"      \
                                      "5: movdqu %%xmm0, (%[d])\n6: movdqu %%xmm1, 16(%[d])\n"                    \
                                      "7: movdqu %%xmm2, -32(%[d],%[n])\n8: movdqu %%xmm3, -16(%[d],%[n])\n"      \
                                      ETA_UCOPY_EX("1b", fault) ETA_UCOPY_EX("2b", fault)                         \
                                      ETA_UCOPY_EX("3b", fault) ETA_UCOPY_EX("4b", fault)                         \
                                      ETA_UCOPY_EX("5b", fault) ETA_UCOPY_EX("6b", fault)                         \
                                      ETA_UCOPY_EX("7b", fault) ETA_UCOPY_EX("8b", fault)                         \
                                      :                                                                           \
                                      : [d] "r"(d_), [s] "r"(s_), [n] "r"(n_)                                     \
                                      : "xmm0", "xmm1", "xmm2", "xmm3", "memory"                                  \
                                      : fault);                                                                   \
        } else if (n_ >= 16) {                                                                                    \
            __asm__ __volatile__ goto("1: movdqu (%[s]), %%xmm0\n2: movdqu -16(%[s],%[n]), %%xmm1\n"              \
                                      "3: movdqu %%xmm0, (%[d])\n4: movdqu %%xmm1, -16(%[d],%[n])\n"              \
                                      ETA_UCOPY_EX("1b", fault) ETA_UCOPY_EX("2b", fault)                         \
                                      ETA_UCOPY_EX("3b", fault) ETA_UCOPY_EX("4b", fault)                         \
                                      :                                                                           \
                                      : [d] "r"(d_), [s] "r"(s_), [n] "r"(n_)                                     \
                                      : "xmm0", "xmm1", "memory"                                                  \
                                      : fault);                                                                   \
        } else if (n_ >= 8) {                                                                                     \
            __asm__ __volatile__ goto("1: movq (%[s]), %%xmm0\n2: movq -8(%[s],%[n]), %%xmm1\n"                   \
                                      "3: movq %%xmm0, (%[d])\n4: movq %%xmm1, -8(%[d],%[n])\n"                   \
                                      ETA_UCOPY_EX("1b", fault) ETA_UCOPY_EX("2b", fault)                         \
                                      ETA_UCOPY_EX("3b", fault) ETA_UCOPY_EX("4b", fault)                         \
                                      :                                                                           \
                                      : [d] "r"(d_), [s] "r"(s_), [n] "r"(n_)                                     \
                                      : "xmm0", "xmm1", "memory"                                                  \
                                      : fault);                                                                   \
        } else if (n_ >= 4) {                                                                                     \
            __asm__ __volatile__ goto("1: movd (%[s]), %%xmm0\n2: movd -4(%[s],%[n]), %%xmm1\n"                   \
                                      "3: movd %%xmm0, (%[d])\n4: movd %%xmm1, -4(%[d],%[n])\n"                   \
                                      ETA_UCOPY_EX("1b", fault) ETA_UCOPY_EX("2b", fault)                         \
                                      ETA_UCOPY_EX("3b", fault) ETA_UCOPY_EX("4b", fault)                         \
                                      :                                                                           \
                                      : [d] "r"(d_), [s] "r"(s_), [n] "r"(n_)                                     \
                                      : "xmm0", "xmm1", "memory"                                                  \
                                      : fault);                                                                   \
        } else { /* 1 to 3 bytes: the first, the last and the middle one */                                     \
            unsigned t_;                                                                                          \
            __asm__ __volatile__ goto("1: movzbl (%[s]), %k[t]\n2: movb %b[t], (%[d])\n"                          \
                                      "3: movzbl -1(%[s],%[n]), %k[t]\n4: movb %b[t], -1(%[d],%[n])\n"            \
                                      "5: movzbl (%[s],%[h]), %k[t]\n6: movb %b[t], (%[d],%[h])\n"                \
                                      ETA_UCOPY_EX("1b", fault) ETA_UCOPY_EX("2b", fault)                         \
                                      ETA_UCOPY_EX("3b", fault) ETA_UCOPY_EX("4b", fault)                         \
                                      ETA_UCOPY_EX("5b", fault) ETA_UCOPY_EX("6b", fault)                         \
                                      : [t] "=&r"(t_)                                                             \
                                      : [d] "r"(d_), [s] "r"(s_), [n] "r"(n_), [h] "r"(n_ / 2)                    \
                                      : "memory"                                                                  \
                                      : fault);                                                                   \
            (void)t_;                                                                                             \
        }                                                                                                         \
    } while (0)
#else
#define ETA_UCOPY_SMALL(dst, src, len, fault)                                                                     \
    do {                                                                                                          \
        if (eta_ucopy((dst), (src), (len)) != 0)                                                                  \
            goto fault;                                                                                           \
    } while (0)
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
