/* libdti layer 0, base: the thin system-call layer: every system call libdti makes whose libc
 * wrapper libeta-preload.so interposes (it wraps socket, connect, send,
 * sendmsg, recvmsg, close, fcntl, getsockopt, read, write, poll and the
 * epoll calls for the program's sockets) is made here directly, so that the
 * shim neither sees nor pays for libdti's own descriptors and needs no
 * re-entrancy guard for them (liburing keeps its own syscall layer for the
 * same reason). What no one interposes (mmap, memfd_create, fstat,
 * socketpair, pthread, ...) stays libc's. allowed_imports.txt, beside this
 * file, lists the dynamic imports libdti may have (the dti_imports test).
 *
 * x86-64 and AArch64 use the instruction itself; elsewhere libc's syscall(2),
 * found past the shim, which interposes syscall() as well (and socketcall(2)
 * where the socket calls have no numbers of their own). Each wrapper answers as libc's does: -1 with errno on
 * failure, and no retry on EINTR (callers that loop on EINTR still do). */
#ifndef DTI_LIB_SYS_H
#define DTI_LIB_SYS_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dti/raw_syscall.h>

static inline ssize_t dti__sys_write(int fd, const void *buf, size_t n)
{
    return dti_raw_result(dti_raw_syscall6(SYS_write, fd, (long)buf, (long)n, 0, 0, 0));
}

static inline ssize_t dti__sys_read(int fd, void *buf, size_t n)
{
    return dti_raw_result(dti_raw_syscall6(SYS_read, fd, (long)buf, (long)n, 0, 0, 0));
}

static inline int dti__sys_poll0(struct pollfd *p, unsigned n)
{
    struct timespec zero = {0, 0};
    return (int)dti_raw_result(dti_raw_syscall6(SYS_ppoll, (long)p, (long)n, (long)&zero, 0, 0, 0));
}

static inline int dti__sys_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms)
{
    /* epoll_pwait without a signal mask is epoll_wait (which AArch64 lacks). */
    return (int)dti_raw_result(dti_raw_syscall6(SYS_epoll_pwait, epfd, (long)ev, max, ms, 0, 8));
}

static inline int dti__sys_close(int fd)
{
    return (int)dti_raw_result(dti_raw_syscall6(SYS_close, fd, 0, 0, 0, 0, 0));
}

static inline int dti__sys_fcntl(int fd, int cmd, long arg)
{
#ifdef SYS_fcntl64 /* 32-bit ABIs: the 64-bit-offset form, as glibc calls it */
    return (int)dti_raw_result(dti_raw_syscall6(SYS_fcntl64, fd, cmd, arg, 0, 0, 0));
#else
    return (int)dti_raw_result(dti_raw_syscall6(SYS_fcntl, fd, cmd, arg, 0, 0, 0));
#endif
}

static inline int dti__sys_epoll_create1(int flags)
{
    return (int)dti_raw_result(dti_raw_syscall6(SYS_epoll_create1, flags, 0, 0, 0, 0, 0));
}

static inline int dti__sys_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    return (int)dti_raw_result(dti_raw_syscall6(SYS_epoll_ctl, epfd, op, fd, (long)ev, 0, 0));
}

/* The socket calls: their own system call numbers where the architecture has
 * them (x86-64, AArch64, i386 since Linux 4.3's headers); socketcall(2) with
 * linux/net.h's call numbers on the older multiplexed ABIs. */
#ifdef SYS_socket
#define DTI__SOCKCALL(nr, call, a, b, c, d, e, f) dti_raw_syscall6(nr, a, b, c, d, e, f)
#else
#include <linux/net.h>
static inline long dti__socketcall(int call, long a, long b, long c, long d, long e, long f)
{
    long args[6] = {a, b, c, d, e, f};
    return dti_raw_syscall6(SYS_socketcall, call, (long)args, 0, 0, 0, 0);
}
#define DTI__SOCKCALL(nr, call, a, b, c, d, e, f) dti__socketcall(call, a, b, c, d, e, f)
#endif

static inline int dti__sys_socket(int domain, int type, int protocol)
{
    return (int)dti_raw_result(DTI__SOCKCALL(SYS_socket, SYS_SOCKET, domain, type, protocol, 0, 0, 0));
}

static inline int dti__sys_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    return (int)dti_raw_result(DTI__SOCKCALL(SYS_connect, SYS_CONNECT, fd, (long)sa, (long)len, 0, 0, 0));
}

/* send(2) is sendto(2) with no address (x86-64 and AArch64 have no send). */
static inline ssize_t dti__sys_send(int fd, const void *buf, size_t n, int flags)
{
    return dti_raw_result(DTI__SOCKCALL(SYS_sendto, SYS_SENDTO, fd, (long)buf, (long)n, flags, 0, 0));
}

static inline ssize_t dti__sys_sendmsg(int fd, const struct msghdr *mh, int flags)
{
    return dti_raw_result(DTI__SOCKCALL(SYS_sendmsg, SYS_SENDMSG, fd, (long)mh, flags, 0, 0, 0));
}

static inline ssize_t dti__sys_recvmsg(int fd, struct msghdr *mh, int flags)
{
    return dti_raw_result(DTI__SOCKCALL(SYS_recvmsg, SYS_RECVMSG, fd, (long)mh, flags, 0, 0, 0));
}

static inline int dti__sys_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    return (int)dti_raw_result(
        DTI__SOCKCALL(SYS_getsockopt, SYS_GETSOCKOPT, fd, level, name, (long)val, (long)len, 0));
}

#endif
