/* syscall(): programs that make system calls through libc's syscall()
 * rather than its wrappers reach the shim here, so a call on an accelerated
 * socket does what the wrapper would have done instead of acting on its
 * placeholder. libuv closes every descriptor with syscall(SYS_close, fd)
 * (uv__close_nocancel, to avoid glibc's cancellation point): without this,
 * Node.js and uvloop would close accelerated sockets without the PPE knowing
 * (no FIN, the hold kept) and the shim's table would keep the number, so a
 * socket that later got it would be taken for the old one.
 *
 * A call routes through the shim when a descriptor it names is one the shim
 * tracks (a socket, an emulated epoll set, a descriptor of libdti's), and the
 * readiness calls (poll, select and their variants) whenever the shim tracks
 * any, since their sets may hold one. Everything else is made as libc's
 * syscall() makes it: the instruction, six argument words, -1 and errno for
 * -4095..-1. An instruction executed by the program itself (inline assembly,
 * io_uring) is beyond any preload: preload/README.md lists it as a limit. */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

#include "bypass.h"
#include "fdtable.h"
#include "real.h"
#include "shim.h"

static bool tracked(long fd)
{
    return fd >= 0 && fd <= 0x7fffffff && eta_fd_peek((int)fd) != NULL;
}

/* The sigset argument of pselect6: a pointer to {sigset pointer, size}. */
struct pselect6_sig {
    const sigset_t *set;
    size_t size;
};

/* The call through the shim's own function (as the libc wrapper of the same
 * name would have been called), or false: not one the shim must see. */
static bool through_shim(long n, long a, long b, long c, long d, long e, long f, long *ret)
{
    (void)f;
    switch (n) {
    /* calls on one descriptor, the first argument */
    case SYS_read: if (!tracked(a)) return false; *ret = read((int)a, (void *)b, (size_t)c); return true;
    case SYS_write: if (!tracked(a)) return false; *ret = write((int)a, (const void *)b, (size_t)c); return true;
    case SYS_readv: if (!tracked(a)) return false; *ret = readv((int)a, (const struct iovec *)b, (int)c); return true;
    case SYS_writev: if (!tracked(a)) return false; *ret = writev((int)a, (const struct iovec *)b, (int)c); return true;
    case SYS_recvfrom:
        if (!tracked(a)) return false;
        *ret = recvfrom((int)a, (void *)b, (size_t)c, (int)d, (struct sockaddr *)e, (socklen_t *)f);
        return true;
    case SYS_sendto:
        if (!tracked(a)) return false;
        *ret = sendto((int)a, (const void *)b, (size_t)c, (int)d, (const struct sockaddr *)e, (socklen_t)f);
        return true;
    case SYS_recvmsg: if (!tracked(a)) return false; *ret = recvmsg((int)a, (struct msghdr *)b, (int)c); return true;
    case SYS_sendmsg: if (!tracked(a)) return false; *ret = sendmsg((int)a, (const struct msghdr *)b, (int)c); return true;
    case SYS_recvmmsg:
        if (!tracked(a)) return false;
        *ret = recvmmsg((int)a, (struct mmsghdr *)b, (unsigned)c, (int)d, (struct timespec *)e);
        return true;
    case SYS_sendmmsg:
        if (!tracked(a)) return false;
        *ret = sendmmsg((int)a, (struct mmsghdr *)b, (unsigned)c, (int)d);
        return true;
    case SYS_shutdown: if (!tracked(a)) return false; *ret = shutdown((int)a, (int)b); return true;
    case SYS_bind: if (!tracked(a)) return false; *ret = bind((int)a, (const struct sockaddr *)b, (socklen_t)c); return true;
    case SYS_listen: if (!tracked(a)) return false; *ret = listen((int)a, (int)b); return true;
    case SYS_connect:
        if (!tracked(a)) return false;
        *ret = connect((int)a, (const struct sockaddr *)b, (socklen_t)c);
        return true;
    case SYS_accept:
        if (!tracked(a)) return false;
        *ret = accept((int)a, (struct sockaddr *)b, (socklen_t *)c);
        return true;
    case SYS_accept4:
        if (!tracked(a)) return false;
        *ret = accept4((int)a, (struct sockaddr *)b, (socklen_t *)c, (int)d);
        return true;
    case SYS_getsockname:
        if (!tracked(a)) return false;
        *ret = getsockname((int)a, (struct sockaddr *)b, (socklen_t *)c);
        return true;
    case SYS_getpeername:
        if (!tracked(a)) return false;
        *ret = getpeername((int)a, (struct sockaddr *)b, (socklen_t *)c);
        return true;
    case SYS_setsockopt:
        if (!tracked(a)) return false;
        *ret = setsockopt((int)a, (int)b, (int)c, (const void *)d, (socklen_t)e);
        return true;
    case SYS_getsockopt:
        if (!tracked(a)) return false;
        *ret = getsockopt((int)a, (int)b, (int)c, (void *)d, (socklen_t *)e);
        return true;
    case SYS_fcntl: if (!tracked(a)) return false; *ret = fcntl((int)a, (int)b, c); return true;
    case SYS_ioctl: if (!tracked(a)) return false; *ret = ioctl((int)a, (unsigned long)b, (void *)c); return true;
    case SYS_close: if (!tracked(a)) return false; *ret = close((int)a); return true;
    case SYS_dup: if (!tracked(a)) return false; *ret = dup((int)a); return true;
    /* calls naming two descriptors: either may be the shim's */
    /* (the target may be a descriptor of libdti's the table does not name: a
     * thread context's, which dup2() moves aside) */
#ifdef SYS_dup2
    case SYS_dup2: *ret = dup2((int)a, (int)b); return true;
#endif
    case SYS_dup3: *ret = dup3((int)a, (int)b, (int)c); return true;
#ifdef SYS_close_range
    /* closing in bulk spares libdti's descriptors and the shim's (sock.c) */
    case SYS_close_range: *ret = close_range((unsigned)a, (unsigned)b, (int)c); return true;
#endif
    case SYS_sendfile:
        if (!tracked(a) && !tracked(b)) return false;
        *ret = sendfile((int)a, (int)b, (off_t *)c, (size_t)d);
        return true;
    case SYS_splice:
        if (!tracked(a) && !tracked(c)) return false;
        *ret = splice((int)a, (loff_t *)b, (int)c, (loff_t *)d, (size_t)e, (unsigned)f);
        return true;
    case SYS_copy_file_range:
        if (!tracked(a) && !tracked(c)) return false;
        *ret = copy_file_range((int)a, (loff_t *)b, (int)c, (loff_t *)d, (size_t)e, (unsigned)f);
        return true;
    /* epoll: the set, or the member being changed */
    case SYS_epoll_ctl:
        if (!tracked(a) && !tracked(c)) return false;
        *ret = epoll_ctl((int)a, (int)b, (int)c, (struct epoll_event *)d);
        return true;
#ifdef SYS_epoll_wait
    case SYS_epoll_wait:
        if (!tracked(a)) return false;
        *ret = epoll_wait((int)a, (struct epoll_event *)b, (int)c, (int)d);
        return true;
#endif
    case SYS_epoll_pwait:
        if (!tracked(a)) return false;
        *ret = epoll_pwait((int)a, (struct epoll_event *)b, (int)c, (int)d, (const sigset_t *)e);
        return true;
    /* readiness over sets of descriptors: any may be the shim's */
#ifdef SYS_poll
    case SYS_poll: *ret = poll((struct pollfd *)a, (nfds_t)b, (int)c); return true;
#endif
    case SYS_ppoll:
        *ret = ppoll((struct pollfd *)a, (nfds_t)b, (const struct timespec *)c, (const sigset_t *)d);
        return true;
#ifdef SYS_select
    case SYS_select:
        *ret = select((int)a, (fd_set *)b, (fd_set *)c, (fd_set *)d, (struct timeval *)e);
        return true;
#endif
    case SYS_pselect6: {
        const struct pselect6_sig *sig = (const struct pselect6_sig *)f;
        *ret = pselect((int)a, (fd_set *)b, (fd_set *)c, (fd_set *)d, (const struct timespec *)e,
                       sig ? sig->set : NULL);
        return true;
    }
#ifdef SYS_io_uring_register
    /* io_uring made by hand: registered files that are accelerated sockets
     * are said (uring.c); the call itself is made unchanged. */
    case SYS_io_uring_register:
        if (b == 2 /* IORING_REGISTER_FILES */)
            eta_uring_check_files((const int *)c, (unsigned)d, "syscall(SYS_io_uring_register)");
        return false;
#endif
    default:
        return false;
    }
}

ETA_EXPORT long syscall(long n, ...)
{
    va_list ap;
    va_start(ap, n);
    /* As glibc's syscall(): six argument words, whatever the call takes. */
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    long ret;
    if (ETA_UNLIKELY(atomic_load_explicit(&eta_tracked, memory_order_relaxed) != 0) &&
        through_shim(n, a, b, c, d, e, f, &ret))
        return ret;
    return eta_raw_syscall6(n, a, b, c, d, e, f);
}
