/* The real libc functions the shim wraps, resolved lazily with
 * dlsym(RTLD_NEXT).
 *
 * Why lazily: the shim's wrappers can run before its constructor does (other
 * libraries' constructors, the dynamic loader's own calls, a malloc
 * implementation reading /proc while dlsym allocates). The first call of any
 * wrapper resolves the whole table once; a call that arrives while that
 * resolution is under way on the same thread (dlsym -> malloc -> read) goes
 * straight to the system call, so there is no recursion and nothing is lost.
 */
#ifndef ETA_PRELOAD_REAL_H
#define ETA_PRELOAD_REAL_H

#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

/* A system call made with the instruction, never through libc's syscall():
 * the shim interposes that one (syscall.c), and its own raw calls must not
 * come back into the shim. -1 and errno as libc's syscall() reports. */
long eta_raw_syscall6(long n, long a, long b, long c, long d, long e, long f);
#define ETA_RAW_SYSCALL7_(n, a, b, c, d, e, f, ...) \
    eta_raw_syscall6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
/* eta_raw_syscall(SYS_x, args...): up to six arguments, the rest zero. */
#define eta_raw_syscall(...) ETA_RAW_SYSCALL7_(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)

/* X(return type, name, parameter list) for every function the shim wraps. */
#define ETA_REAL_FUNCTIONS(X)                                                        \
    X(int, socket, (int, int, int))                                                  \
    X(int, bind, (int, const struct sockaddr *, socklen_t))                          \
    X(int, listen, (int, int))                                                       \
    X(int, accept, (int, struct sockaddr *, socklen_t *))                            \
    X(int, accept4, (int, struct sockaddr *, socklen_t *, int))                      \
    X(int, connect, (int, const struct sockaddr *, socklen_t))                       \
    X(ssize_t, read, (int, void *, size_t))                                          \
    X(ssize_t, write, (int, const void *, size_t))                                   \
    X(ssize_t, readv, (int, const struct iovec *, int))                              \
    X(ssize_t, writev, (int, const struct iovec *, int))                             \
    X(ssize_t, recv, (int, void *, size_t, int))                                     \
    X(ssize_t, send, (int, const void *, size_t, int))                               \
    X(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *)) \
    X(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t)) \
    X(ssize_t, recvmsg, (int, struct msghdr *, int))                                 \
    X(ssize_t, sendmsg, (int, const struct msghdr *, int))                           \
    X(int, recvmmsg, (int, struct mmsghdr *, unsigned int, int, struct timespec *))  \
    X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int))                     \
    X(ssize_t, sendfile, (int, int, off_t *, size_t))                                \
    X(ssize_t, splice, (int, loff_t *, int, loff_t *, size_t, unsigned int))          \
    X(ssize_t, copy_file_range, (int, loff_t *, int, loff_t *, size_t, unsigned int)) \
    X(int, close, (int))                                                             \
    X(int, close_range, (unsigned int, unsigned int, int))                           \
    X(int, shutdown, (int, int))                                                     \
    X(int, fcntl, (int, int, ...))                                                   \
    X(int, ioctl, (int, unsigned long, ...))                                         \
    X(int, getsockname, (int, struct sockaddr *, socklen_t *))                       \
    X(int, getpeername, (int, struct sockaddr *, socklen_t *))                       \
    X(int, setsockopt, (int, int, int, const void *, socklen_t))                     \
    X(int, getsockopt, (int, int, int, void *, socklen_t *))                         \
    X(int, dup, (int))                                                               \
    X(int, dup2, (int, int))                                                         \
    X(int, dup3, (int, int, int))                                                    \
    X(int, poll, (struct pollfd *, nfds_t, int))                                     \
    X(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *)) \
    X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *))            \
    X(int, pselect, (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *)) \
    X(int, epoll_create, (int))                                                      \
    X(int, epoll_create1, (int))                                                     \
    X(int, epoll_ctl, (int, int, int, struct epoll_event *))                         \
    X(int, epoll_wait, (int, struct epoll_event *, int, int))                        \
    X(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *))     \
    X(int, epoll_pwait2, (int, struct epoll_event *, int, const struct timespec *, const sigset_t *)) \
    X(pid_t, fork, (void))                                                           \
    X(int, execve, (const char *, char *const[], char *const[]))                     \
    X(int, execvpe, (const char *, char *const[], char *const[]))                    \
    X(int, fexecve, (int, char *const[], char *const[]))                             \
    X(int, execveat, (int, const char *, char *const[], char *const[], int))

#define ETA_REAL_DECLARE(ret, name, params) \
    typedef ret(*eta_real_##name##_fn) params; \
    extern eta_real_##name##_fn eta_real_##name##_ptr;
ETA_REAL_FUNCTIONS(ETA_REAL_DECLARE)
#undef ETA_REAL_DECLARE

/* Resolves every entry of the table; safe to call from any thread, any
 * number of times. */
void eta_real_resolve(void);

/* real_NAME(args...) calls the real libc function. */
#define ETA_REAL(name) (__atomic_load_n(&eta_real_##name##_ptr, __ATOMIC_ACQUIRE) ? eta_real_##name##_ptr : (eta_real_resolve(), eta_real_##name##_ptr))

#define real_socket(...) ETA_REAL(socket)(__VA_ARGS__)
#define real_bind(...) ETA_REAL(bind)(__VA_ARGS__)
#define real_listen(...) ETA_REAL(listen)(__VA_ARGS__)
#define real_accept(...) ETA_REAL(accept)(__VA_ARGS__)
#define real_accept4(...) ETA_REAL(accept4)(__VA_ARGS__)
#define real_connect(...) ETA_REAL(connect)(__VA_ARGS__)
#define real_read(...) ETA_REAL(read)(__VA_ARGS__)
#define real_write(...) ETA_REAL(write)(__VA_ARGS__)
#define real_readv(...) ETA_REAL(readv)(__VA_ARGS__)
#define real_writev(...) ETA_REAL(writev)(__VA_ARGS__)
#define real_recv(...) ETA_REAL(recv)(__VA_ARGS__)
#define real_send(...) ETA_REAL(send)(__VA_ARGS__)
#define real_recvfrom(...) ETA_REAL(recvfrom)(__VA_ARGS__)
#define real_sendto(...) ETA_REAL(sendto)(__VA_ARGS__)
#define real_recvmsg(...) ETA_REAL(recvmsg)(__VA_ARGS__)
#define real_sendmsg(...) ETA_REAL(sendmsg)(__VA_ARGS__)
#define real_recvmmsg(...) ETA_REAL(recvmmsg)(__VA_ARGS__)
#define real_sendmmsg(...) ETA_REAL(sendmmsg)(__VA_ARGS__)
#define real_sendfile(...) ETA_REAL(sendfile)(__VA_ARGS__)
#define real_splice(...) ETA_REAL(splice)(__VA_ARGS__)
#define real_copy_file_range(...) ETA_REAL(copy_file_range)(__VA_ARGS__)
#define real_close(...) ETA_REAL(close)(__VA_ARGS__)
#define real_close_range(...) ETA_REAL(close_range)(__VA_ARGS__)
#define real_shutdown(...) ETA_REAL(shutdown)(__VA_ARGS__)
#define real_fcntl(...) ETA_REAL(fcntl)(__VA_ARGS__)
#define real_ioctl(...) ETA_REAL(ioctl)(__VA_ARGS__)
#define real_getsockname(...) ETA_REAL(getsockname)(__VA_ARGS__)
#define real_getpeername(...) ETA_REAL(getpeername)(__VA_ARGS__)
#define real_setsockopt(...) ETA_REAL(setsockopt)(__VA_ARGS__)
#define real_getsockopt(...) ETA_REAL(getsockopt)(__VA_ARGS__)
#define real_dup(...) ETA_REAL(dup)(__VA_ARGS__)
#define real_dup2(...) ETA_REAL(dup2)(__VA_ARGS__)
#define real_dup3(...) ETA_REAL(dup3)(__VA_ARGS__)
#define real_poll(...) ETA_REAL(poll)(__VA_ARGS__)
#define real_ppoll(...) ETA_REAL(ppoll)(__VA_ARGS__)
#define real_select(...) ETA_REAL(select)(__VA_ARGS__)
#define real_pselect(...) ETA_REAL(pselect)(__VA_ARGS__)
#define real_epoll_create(...) ETA_REAL(epoll_create)(__VA_ARGS__)
#define real_epoll_create1(...) ETA_REAL(epoll_create1)(__VA_ARGS__)
#define real_epoll_ctl(...) ETA_REAL(epoll_ctl)(__VA_ARGS__)
#define real_epoll_wait(...) ETA_REAL(epoll_wait)(__VA_ARGS__)
#define real_epoll_pwait(...) ETA_REAL(epoll_pwait)(__VA_ARGS__)
#define real_epoll_pwait2(...) ETA_REAL(epoll_pwait2)(__VA_ARGS__)
#define real_fork(...) ETA_REAL(fork)(__VA_ARGS__)

#endif
