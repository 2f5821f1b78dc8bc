/* libdti's own system calls for its hot paths (the doorbell, the wake
 * counter, the liveness poll, the wait): made directly rather than through
 * libc's wrappers, so that a library interposing those wrappers in the same
 * process (libeta-preload.so, which wraps read/write/poll/epoll_wait for the
 * program's sockets) neither sees nor pays for them. x86-64 and AArch64 use
 * the instruction itself; elsewhere syscall(2), which no one interposes. */
#ifndef DTI_LIB_SYS_H
#define DTI_LIB_SYS_H

#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
static inline long dti__raw6(long nr, long a, long b, long c, long d, long e, long f)
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
static inline long dti__raw6(long nr, long a, long b, long c, long d, long e, long f)
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
static inline long dti__raw6(long nr, long a, long b, long c, long d, long e, long f)
{
    long r = syscall(nr, a, b, c, d, e, f);
    return r < 0 ? -errno : r;
}
#endif

/* The kernel's -errno answers become -1 with errno, as libc's would. */
static inline long dti__sys_result(long r)
{
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

static inline ssize_t dti__sys_write(int fd, const void *buf, size_t n)
{
    return dti__sys_result(dti__raw6(SYS_write, fd, (long)buf, (long)n, 0, 0, 0));
}

static inline ssize_t dti__sys_read(int fd, void *buf, size_t n)
{
    return dti__sys_result(dti__raw6(SYS_read, fd, (long)buf, (long)n, 0, 0, 0));
}

static inline int dti__sys_poll0(struct pollfd *p, unsigned n)
{
    struct timespec zero = {0, 0};
    return (int)dti__sys_result(dti__raw6(SYS_ppoll, (long)p, (long)n, (long)&zero, 0, 0, 0));
}

static inline int dti__sys_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms)
{
    /* epoll_pwait without a signal mask is epoll_wait (which AArch64 lacks). */
    return (int)dti__sys_result(dti__raw6(SYS_epoll_pwait, epfd, (long)ev, max, ms, 0, 8));
}

#endif
