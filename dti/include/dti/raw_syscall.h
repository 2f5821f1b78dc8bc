/* dti/raw_syscall.h: a system call made with the instruction itself, never
 * through libc's syscall() -- for this tree's own users only: libdti
 * (lib/sys.h) and the LD_PRELOAD shim (preload/src/real.c). The shim
 * interposes syscall() and the libc socket, I/O and epoll wrappers, so their
 * own raw calls must not come back into it. Not installed, not part of the
 * native API (dti.h); libc only (dti/README.md, "Its own system calls").
 *
 * x86-64 and AArch64 use the instruction; elsewhere libc's syscall(2), found
 * past the shim with dlsym(RTLD_NEXT) (an import allowed_imports.txt, checked
 * on x86-64, does not list). */
#ifndef DTI_RAW_SYSCALL_H
#define DTI_RAW_SYSCALL_H

#include <errno.h>

/* The kernel's answer: the result, or -errno. */
#if defined(__x86_64__)
static inline long dti_raw_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(__aarch64__)
static inline long dti_raw_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    return x0;
}
#else
#include <dlfcn.h>
#include <string.h>
static inline long dti_raw_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
    static long (*libc_syscall)(long, ...);
    long (*fn)(long, ...) = __atomic_load_n(&libc_syscall, __ATOMIC_ACQUIRE);
    if (!fn) {
        void *sym = dlsym(RTLD_NEXT, "syscall");
        memcpy(&fn, &sym, sizeof fn);
        if (!fn)
            return -ENOSYS;
        __atomic_store_n(&libc_syscall, fn, __ATOMIC_RELEASE);
    }
    long r = fn(nr, a, b, c, d, e, f);
    return r < 0 ? -errno : r;
}
#endif

/* The kernel's -errno answers become -1 with errno, as libc's would. */
static inline long dti_raw_result(long r)
{
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

#endif
