/* Descriptors in bulk and in copies: close_range() and closefrom(), dup(),
 * dup2(), dup3() (and eta_dup_result() for fcntl's F_DUPFD). A program may use
 * every descriptor number a kernel process could: the shim's and libdti's own
 * descriptors are never closed by a program's bulk close and move aside when
 * a program dup2()s onto one of their numbers. close() and the socket
 * lifecycle are sock.c's. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <unistd.h>

#include "attach.h"
#include "exec_handover.h"
#include "fdtable.h"
#include "real.h"
#include "shim.h"
#include "sock.h"
#include "sockobj.h"

/* Bulk closing: close_range() (with or without CLOSE_RANGE_CLOEXEC and
 * CLOSE_RANGE_UNSHARE), closefrom() (glibc's calls its internal close_range,
 * which no preload sees) and syscall(SYS_close_range) (syscall.c) all come
 * here. libdti's descriptors (its control connections, doorbells, memfds, and
 * every thread context's eventfd and epoll set) and the shim's own are left
 * alone, as if the program had never had them (it had not); the program's
 * accelerated sockets in the range are closed as close() closes each. */
#define KEEP_MAX 512

static void sort_ints(int *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

ETA_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    dti_t *d = eta_dti_attached();
    if ((atomic_load(&eta_tracked) == 0 && !d) || first > last ||
        (flags & ~(CLOSE_RANGE_CLOEXEC | CLOSE_RANGE_UNSHARE)))
        return real_close_range(first, last, flags); /* nothing of ours, or the kernel's EINVAL */
    const bool cloexec = flags & CLOSE_RANGE_CLOEXEC;
    /* A vfork child (Python's subprocess closing all but pass_fds) spares them
     * too: its exec hands libdti's descriptors to the new image. The map is its
     * parent's: it forgets nothing there. */
    const bool vfork_child = eta_vfork_child();
    int keep[KEEP_MAX];
    int nk = 0;
    if (d) {
        nk = dti_fds_all(d, keep, KEEP_MAX);
        if (nk > KEEP_MAX)
            nk = KEEP_MAX;
    }
    unsigned hi = last < ETA_FD_MAX - 1 ? last : ETA_FD_MAX - 1;
    for (unsigned fd = first; fd <= hi && atomic_load(&eta_tracked) > 0; fd++) {
        struct eta_obj *o = eta_fd_peek((int)fd);
        if (!o)
            continue;
        if (o->kind == ETA_OBJ_INTERNAL) {
            if (nk < KEEP_MAX)
                keep[nk++] = (int)fd;
        } else if (!cloexec && !vfork_child) {
            eta_fd_clear((int)fd); /* forgotten before the kernel frees the number, as close() */
        }
    }
    sort_ints(keep, nk);
    unsigned from = first;
    bool called = false;
    for (int i = 0; i < nk; i++) {
        if (keep[i] < 0 || (unsigned)keep[i] < from || (unsigned)keep[i] > last)
            continue;
        if ((unsigned)keep[i] > from) {
            if (real_close_range(from, (unsigned)keep[i] - 1, flags) != 0)
                return -1;
            called = true;
        }
        from = (unsigned)keep[i] + 1;
        if (from == 0)
            return 0; /* kept UINT_MAX itself */
    }
    if (from <= last) {
        called = true;
        if (real_close_range(from, last, flags) != 0)
            return -1;
    }
    if (!called && (flags & CLOSE_RANGE_UNSHARE))
        return unshare(CLONE_FILES);
    return 0;
}

ETA_EXPORT void closefrom(int lowfd)
{
    unsigned first = lowfd < 0 ? 0 : (unsigned)lowfd;
    if (close_range(first, ~0u, 0) == 0)
        return;
    /* No close_range in this kernel (before 5.9): one by one, as glibc's
     * fallback, up to the descriptor limit; close() spares ours. */
    struct rlimit r;
    rlim_t top = getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY ? r.rlim_cur : 65536;
    if (top > ETA_FD_MAX)
        top = ETA_FD_MAX;
    int saved = errno;
    for (rlim_t fd = first; fd < top; fd++)
        close((int)fd);
    errno = saved;
}

/* A new descriptor names the same object as the old one. */
int eta_dup_result(int oldfd, int newfd)
{
    if (newfd >= 0 && atomic_load(&eta_tracked) && eta_vfork_child()) {
        eta_vfork_note(newfd, oldfd); /* the map is its parent's */
        return newfd;
    }
    if (newfd < 0)
        return newfd;
    struct eta_obj *o = eta_fd_get(oldfd);
    if (o) {
        if (o->kind != ETA_OBJ_INTERNAL)
            eta_fd_set(newfd, o);
        eta_obj_put(o);
    } else {
        eta_fd_clear(newfd);
    }
    return newfd;
}

static bool is_internal(int fd)
{
    struct eta_obj *o = eta_fd_peek(fd);
    return o && o->kind == ETA_OBJ_INTERNAL;
}

ETA_EXPORT int dup(int fd)
{
    if (is_internal(fd))
        return fail(EBADF); /* not the program's */
    return eta_dup_result(fd, real_dup(fd));
}

/* dup2/dup3 onto a number the shim or libdti holds: what is there moves
 * aside (eta_fd_take), and the program gets the number, as it would without
 * eta. Checked first: an invalid fd or newfd leaves everything as it was. */
static int take_for_dup(int fd, int newfd)
{
    if (eta_vfork_child() || real_fcntl(fd, F_GETFD) < 0 || newfd < 0 || is_internal(fd))
        return 0; /* the kernel answers (EBADF); a vfork child's descriptors are its own to lose */
    if (!is_internal(newfd) && !eta_dti_attached())
        return 0;
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && (rlim_t)newfd >= r.rlim_cur)
        return 0; /* the kernel answers EBADF (a limit lowered under our descriptors): ours stay */
    return eta_fd_take(newfd);
}

ETA_EXPORT int dup2(int fd, int newfd)
{
    if (fd == newfd)
        return real_dup2(fd, newfd);
    if (atomic_load_explicit(&eta_tracked, memory_order_relaxed) == 0)
        return eta_dup_result(fd, real_dup2(fd, newfd));
    if (is_internal(fd))
        return fail(EBADF); /* not the program's */
    if (take_for_dup(fd, newfd) != 0)
        return -1;
    return eta_dup_result(fd, real_dup2(fd, newfd));
}

ETA_EXPORT int dup3(int fd, int newfd, int flags)
{
    if (fd == newfd || atomic_load_explicit(&eta_tracked, memory_order_relaxed) == 0)
        return eta_dup_result(fd, real_dup3(fd, newfd, flags));
    if (is_internal(fd))
        return fail(EBADF);
    if (take_for_dup(fd, newfd) != 0)
        return -1;
    return eta_dup_result(fd, real_dup3(fd, newfd, flags));
}

