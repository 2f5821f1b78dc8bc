/* Lazy resolution of the real libc functions; see real.h for why. */
#include "real.h"

#include <dti/raw_syscall.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

long eta_raw_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    return dti_raw_result(dti_raw_syscall6(n, a, b, c, d, e, f));
}

#define ETA_REAL_DEFINE(ret, name, params) eta_real_##name##_fn eta_real_##name##_ptr;
ETA_REAL_FUNCTIONS(ETA_REAL_DEFINE)
#undef ETA_REAL_DEFINE

/* Raw system-call stand-ins, used only while the table is being resolved: a
 * call that dlsym itself triggers (through malloc, for instance) must not
 * recurse into resolution. They behave as the libc functions do for kernel
 * descriptors, which is all that can exist at that point. */
static int raw_socket(int d, int t, int p) { return (int)eta_raw_syscall(SYS_socket, d, t, p); }
static int raw_bind(int f, const struct sockaddr *a, socklen_t l) { return (int)eta_raw_syscall(SYS_bind, f, a, l); }
static int raw_listen(int f, int b) { return (int)eta_raw_syscall(SYS_listen, f, b); }
static int raw_accept(int f, struct sockaddr *a, socklen_t *l) { return (int)eta_raw_syscall(SYS_accept, f, a, l); }
static int raw_accept4(int f, struct sockaddr *a, socklen_t *l, int fl) { return (int)eta_raw_syscall(SYS_accept4, f, a, l, fl); }
static int raw_connect(int f, const struct sockaddr *a, socklen_t l) { return (int)eta_raw_syscall(SYS_connect, f, a, l); }
static ssize_t raw_read(int f, void *b, size_t n) { return eta_raw_syscall(SYS_read, f, b, n); }
static ssize_t raw_write(int f, const void *b, size_t n) { return eta_raw_syscall(SYS_write, f, b, n); }
static ssize_t raw_readv(int f, const struct iovec *v, int n) { return eta_raw_syscall(SYS_readv, f, v, n); }
static ssize_t raw_writev(int f, const struct iovec *v, int n) { return eta_raw_syscall(SYS_writev, f, v, n); }
static ssize_t raw_recvfrom(int f, void *b, size_t n, int fl, struct sockaddr *a, socklen_t *l)
{
    return eta_raw_syscall(SYS_recvfrom, f, b, n, fl, a, l);
}
static ssize_t raw_sendto(int f, const void *b, size_t n, int fl, const struct sockaddr *a, socklen_t l)
{
    return eta_raw_syscall(SYS_sendto, f, b, n, fl, a, l);
}
static ssize_t raw_recv(int f, void *b, size_t n, int fl) { return raw_recvfrom(f, b, n, fl, NULL, NULL); }
static ssize_t raw_send(int f, const void *b, size_t n, int fl) { return raw_sendto(f, b, n, fl, NULL, 0); }
static ssize_t raw_recvmsg(int f, struct msghdr *m, int fl) { return eta_raw_syscall(SYS_recvmsg, f, m, fl); }
static ssize_t raw_sendmsg(int f, const struct msghdr *m, int fl) { return eta_raw_syscall(SYS_sendmsg, f, m, fl); }
static int raw_recvmmsg(int f, struct mmsghdr *m, unsigned n, int fl, struct timespec *t)
{
    return (int)eta_raw_syscall(SYS_recvmmsg, f, m, n, fl, t);
}
static int raw_sendmmsg(int f, struct mmsghdr *m, unsigned n, int fl) { return (int)eta_raw_syscall(SYS_sendmmsg, f, m, n, fl); }
static ssize_t raw_sendfile(int o, int i, off_t *off, size_t n) { return eta_raw_syscall(SYS_sendfile, o, i, off, n); }
static ssize_t raw_splice(int i, loff_t *oi, int o, loff_t *oo, size_t n, unsigned int f)
{
    return eta_raw_syscall(SYS_splice, i, oi, o, oo, n, f);
}
static ssize_t raw_copy_file_range(int i, loff_t *oi, int o, loff_t *oo, size_t n, unsigned int f)
{
    return eta_raw_syscall(SYS_copy_file_range, i, oi, o, oo, n, f);
}
static int raw_close(int f) { return (int)eta_raw_syscall(SYS_close, f); }
static int raw_close_range(unsigned a, unsigned b, int fl) { return (int)eta_raw_syscall(SYS_close_range, a, b, fl); }
static int raw_shutdown(int f, int h) { return (int)eta_raw_syscall(SYS_shutdown, f, h); }
static int raw_fcntl(int f, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return (int)eta_raw_syscall(SYS_fcntl, f, cmd, arg);
}
static int raw_ioctl(int f, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return (int)eta_raw_syscall(SYS_ioctl, f, req, arg);
}
static int raw_getsockname(int f, struct sockaddr *a, socklen_t *l) { return (int)eta_raw_syscall(SYS_getsockname, f, a, l); }
static int raw_getpeername(int f, struct sockaddr *a, socklen_t *l) { return (int)eta_raw_syscall(SYS_getpeername, f, a, l); }
static int raw_setsockopt(int f, int lv, int o, const void *v, socklen_t l) { return (int)eta_raw_syscall(SYS_setsockopt, f, lv, o, v, l); }
static int raw_getsockopt(int f, int lv, int o, void *v, socklen_t *l) { return (int)eta_raw_syscall(SYS_getsockopt, f, lv, o, v, l); }
static int raw_dup(int f) { return (int)eta_raw_syscall(SYS_dup, f); }
static int raw_dup3(int a, int b, int fl) { return (int)eta_raw_syscall(SYS_dup3, a, b, fl); }
static int raw_dup2(int a, int b)
{
    if (a == b) /* dup3 refuses equal descriptors; dup2 checks validity instead. */
        return (int)eta_raw_syscall(SYS_fcntl, a, F_GETFD) < 0 ? -1 : b;
    return raw_dup3(a, b, 0);
}
static int raw_ppoll(struct pollfd *p, nfds_t n, const struct timespec *t, const sigset_t *m)
{
    return (int)eta_raw_syscall(SYS_ppoll, p, n, t, m, _NSIG / 8);
}
static int raw_poll(struct pollfd *p, nfds_t n, int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    return raw_ppoll(p, n, ms < 0 ? NULL : &t, NULL);
}
static int raw_select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t) { return (int)eta_raw_syscall(SYS_select, n, r, w, e, t); }
static int raw_pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t, const sigset_t *m)
{
    struct {
        const sigset_t *set;
        size_t size;
    } mask = {m, _NSIG / 8};
    return (int)eta_raw_syscall(SYS_pselect6, n, r, w, e, t, m ? &mask : NULL);
}
static int raw_epoll_create1(int fl) { return (int)eta_raw_syscall(SYS_epoll_create1, fl); }
static int raw_epoll_create(int size) { return size <= 0 ? (errno = EINVAL, -1) : raw_epoll_create1(0); }
static int raw_epoll_ctl(int e, int op, int f, struct epoll_event *ev) { return (int)eta_raw_syscall(SYS_epoll_ctl, e, op, f, ev); }
static int raw_epoll_pwait(int e, struct epoll_event *ev, int n, int ms, const sigset_t *m)
{
    return (int)eta_raw_syscall(SYS_epoll_pwait, e, ev, n, ms, m, _NSIG / 8);
}
static int raw_epoll_wait(int e, struct epoll_event *ev, int n, int ms) { return raw_epoll_pwait(e, ev, n, ms, NULL); }
static int raw_epoll_pwait2(int e, struct epoll_event *ev, int n, const struct timespec *t, const sigset_t *m)
{
    return (int)eta_raw_syscall(SYS_epoll_pwait2, e, ev, n, t, m, _NSIG / 8);
}
static pid_t raw_fork(void) { return (pid_t)eta_raw_syscall(SYS_fork); }
static int raw_execve(const char *p, char *const a[], char *const e[]) { return (int)eta_raw_syscall(SYS_execve, p, a, e); }
static int raw_execveat(int d, const char *p, char *const a[], char *const e[], int fl)
{
    return (int)eta_raw_syscall(SYS_execveat, d, p, a, e, fl);
}
static int raw_fexecve(int fd, char *const a[], char *const e[]) { return raw_execveat(fd, "", a, e, AT_EMPTY_PATH); }
/* No system call searches PATH; only used while dlsym itself runs. */
static int raw_execvpe(const char *f, char *const a[], char *const e[])
{
    return strchr(f, '/') ? raw_execve(f, a, e) : (errno = ENOSYS, -1);
}

/* ISO C gives no conversion from a data pointer to a function pointer; copy
 * the representation, as POSIX guarantees dlsym's result may be used so. */
static void store_symbol(void *slot, void *sym)
{
    void *copy = NULL;
    memcpy(&copy, &sym, sizeof copy);
    __atomic_store_n((void **)slot, copy, __ATOMIC_RELEASE);
}

static void install_fallbacks(void)
{
#define ETA_FALLBACK(ret, name, params)                                        \
    if (!__atomic_load_n(&eta_real_##name##_ptr, __ATOMIC_ACQUIRE))           \
        __atomic_store_n(&eta_real_##name##_ptr, raw_##name, __ATOMIC_RELEASE);
    ETA_REAL_FUNCTIONS(ETA_FALLBACK)
#undef ETA_FALLBACK
}

void eta_real_resolve(void)
{
    static int done;
    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        return;
    int saved = errno;
    /* Fallbacks first: from here on no entry is empty, so a call that dlsym
     * makes (on this or another thread) runs as a plain system call. */
    install_fallbacks();
#define ETA_RESOLVE(ret, name, params)                 \
    {                                                  \
        void *sym = dlsym(RTLD_NEXT, #name);           \
        if (sym)                                       \
            store_symbol(&eta_real_##name##_ptr, sym); \
    }
    ETA_REAL_FUNCTIONS(ETA_RESOLVE)
#undef ETA_RESOLVE
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    errno = saved;
}
