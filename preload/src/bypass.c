/* Calls that bypass the shim's data path: the kernel would move an
 * accelerated socket's bytes (splice, copy_file_range, sendfile from it),
 * or stdio would read its placeholder (fdopen). Each fails loudly instead: a
 * clear errno, one warning per call, the bypass_refused counter. (sendfile
 * onto an accelerated socket works: io_sendfile.c; passing one to another process
 * works: pass_fds.c; a raw syscall() on one goes through the shim: syscall.c.) */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bypass.h"
#include "config.h"
#include "fdtable.h"
#include "real.h"
#include "shim.h"
#include "sockobj.h"

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
