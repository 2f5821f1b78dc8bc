/* Calls that bypass the shim's data path: the kernel would move an
 * accelerated socket's bytes (splice, copy_file_range, sendfile from it),
 * or stdio would read its placeholder (fdopen). Each fails loudly instead: a
 * clear errno, one warning per call, the bypass_refused counter. (sendfile
 * onto an accelerated socket works: io.c; passing one to another process
 * works: pass.c.) */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim.h"

/* Calls that make the kernel move bytes to or from a descriptor cannot reach
 * an accelerated socket: its bytes are in the PPE, the kernel holds only a
 * placeholder. They fail with EINVAL (what Linux answers where a descriptor
 * does not support the call), counted, with one warning per call name. */
static int bypass_refused_err(const char *call, int fd, unsigned which, int err)
{
    static _Atomic unsigned warned;
    ETA_STAT_ADD(bypass_refused, 1);
    if (!(atomic_fetch_or(&warned, 1u << which) & (1u << which)))
        eta_log("warning: %s() on accelerated socket fd %d is not supported (the PPE carries its bytes, not "
                "the kernel): %s; use read()/write() on it",
                call, fd, strerrorname_np(err));
    errno = err;
    return -1;
}

int eta_bypass_refused(const char *call, int fd, unsigned which)
{
    return bypass_refused_err(call, fd, which, EINVAL);
}

/* stdio reads and writes through glibc's internal read/write, which no
 * preload sees: a stream on an accelerated socket would read the placeholder.
 * fdopen() on one fails (EOPNOTSUPP) instead of a stream that cannot work. */
ETA_EXPORT FILE *fdopen(int fd, const char *mode)
{
    struct eta_sock *s = eta_sock_accel(fd);
    if (ETA_UNLIKELY(s != NULL)) {
        eta_obj_put(&s->obj);
        bypass_refused_err("fdopen", fd, 3, EOPNOTSUPP);
        return NULL;
    }
    static FILE *(*real_fdopen)(int, const char *);
    FILE *(*fn)(int, const char *) = __atomic_load_n(&real_fdopen, __ATOMIC_ACQUIRE);
    if (!fn) {
        void *sym = dlsym(RTLD_NEXT, "fdopen");
        memcpy(&fn, &sym, sizeof fn); /* ISO C has no object-to-function pointer cast */
        if (!fn) {
            errno = ENOSYS;
            return NULL;
        }
        __atomic_store_n(&real_fdopen, fn, __ATOMIC_RELEASE);
    }
    return fn(fd, mode);
}

/* The accelerated one of two descriptors (-1: neither). */
static int accel_either(int a, int b)
{
    struct eta_sock *s = eta_sock_accel(a);
    if (s) {
        eta_obj_put(&s->obj);
        return a;
    }
    s = eta_sock_accel(b);
    if (s) {
        eta_obj_put(&s->obj);
        return b;
    }
    return -1;
}

ETA_EXPORT ssize_t splice(int in_fd, loff_t *in_off, int out_fd, loff_t *out_off, size_t len, unsigned int flags)
{
    int fd = accel_either(in_fd, out_fd);
    if (ETA_UNLIKELY(fd >= 0))
        return eta_bypass_refused("splice", fd, 0);
    return real_splice(in_fd, in_off, out_fd, out_off, len, flags);
}

ETA_EXPORT ssize_t copy_file_range(int in_fd, loff_t *in_off, int out_fd, loff_t *out_off, size_t len,
                                   unsigned int flags)
{
    int fd = accel_either(in_fd, out_fd);
    if (ETA_UNLIKELY(fd >= 0))
        return eta_bypass_refused("copy_file_range", fd, 1);
    return real_copy_file_range(in_fd, in_off, out_fd, out_off, len, flags);
}


/* ---- syscall(): libuv closes descriptors with syscall(SYS_close, fd) --------
 * (uv__close_nocancel, to avoid glibc's cancellation point), so Node.js and
 * uvloop close accelerated sockets without calling close(): the PPE socket
 * would stay open (no FIN) and the shim's table would keep the number, so a
 * socket that later gets it would be taken for the old one. syscall() with
 * SYS_close on a descriptor the shim tracks goes through close(); every other
 * call is made as libc would make it. */
static long raw_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    long ret;
#if defined(__x86_64__)
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    ret = x0;
#else
    /* Elsewhere libc's own, found once (the raw_* fallbacks of real.c that
     * come here during that lookup are not expected on these targets). */
    static long (*libc_syscall)(long, ...);
    long (*fn)(long, ...) = __atomic_load_n(&libc_syscall, __ATOMIC_ACQUIRE);
    if (!fn) {
        void *sym = dlsym(RTLD_NEXT, "syscall");
        memcpy(&fn, &sym, sizeof fn);
        if (!fn) {
            errno = ENOSYS;
            return -1;
        }
        __atomic_store_n(&libc_syscall, fn, __ATOMIC_RELEASE);
    }
    return fn(n, a, b, c, d, e, f);
#endif
    if (ret < 0 && ret > -4096) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
}

ETA_EXPORT long syscall(long n, ...)
{
    va_list ap;
    va_start(ap, n);
    /* As glibc's syscall(): six argument words, whatever the call takes. */
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (ETA_UNLIKELY(n == SYS_close && eta_fd_peek((int)a) != NULL))
        return close((int)a); /* the shim's close: the PPE hold and the table entry go */
    return raw_syscall6(n, a, b, c, d, e, f);
}
