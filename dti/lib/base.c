/* libdti layer 0, base (base.h): the clock, error texts and libdti's own
 * descriptors kept out of the program's way. Calls nothing of libdti. */
#include "base.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

const char *dti_strerror(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case 0: return "success";
    case DTI_E_NO_ENGINE: return "no PPE is listening at the control socket";
    case DTI_E_DENIED: return "the PPE refuses this user";
    case DTI_E_VERSION: return "DTI ABI version mismatch between libdti and the PPE";
    case DTI_E_LIMIT: return "a PPE limit was reached";
    case DTI_E_ENGINE_GONE: return "the PPE has gone away";
    case DTI_E_BROKEN: return "the PPE found this application's shared region corrupt";
    case DTI_E_PROTOCOL: return "malformed DTI control message";
    case DTI_E_BAD_HANDLE: return "unknown or stale DTI socket handle";
    default: break;
    }
    /* strerror() is not thread-safe in general, but glibc returns static
     * strings for known values; unknown values get a fixed text. */
    if (err < 4096)
        return strerrordesc_np(err) ? strerrordesc_np(err) : "unknown error";
    return "unknown error";
}

uint64_t dti__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- libdti's descriptors out of the program's way --------------------------
 * A kernel-only process gets its descriptors lowest first, and programs rely
 * on it: OpenSSH's sshd re-exec dup2()s its startup pipe and config onto 4
 * and 5 without checking. So libdti's descriptors (and the shim's, through
 * dti_fd_aside()) sit just under the soft RLIMIT_NOFILE (at most 1024, so
 * the kernel's descriptor table stays small), where a program only gets
 * a number after every lower one; the floor is read again each time (a
 * program may lower the limit: descriptors already above it stay valid). */
#define FD_ASIDE_TOP 1024

static int fd_floor(void)
{
    struct rlimit r;
    long top = FD_ASIDE_TOP;
    /* prlimit64 as a raw call: libdti's imports stay as listed. */
    if (dti_raw_syscall6(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, (long)&r, 0, 0) == 0 && r.rlim_cur < (rlim_t)top)
        top = (long)r.rlim_cur;
    if (top < 16)
        return -1; /* no room to stand aside in */
    return (int)(top - (top >= 256 ? 64 : top / 4));
}

static int fd_dup_above(int fd, int floor)
{
    int fl = dti__sys_fcntl(fd, F_GETFD, 0);
    if (fl < 0)
        return -1;
    return dti__sys_fcntl(fd, (fl & FD_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, floor);
}

int dti__fd_aside(int fd)
{
    int floor = fd_floor();
    if (fd < 0 || floor < 0 || fd >= floor)
        return fd;
    int saved = errno;
    int n = fd_dup_above(fd, floor);
    errno = saved;
    if (n < 0)
        return fd; /* every number up there taken: it stays where it is */
    dti__sys_close(fd);
    return n;
}

/* fd moved to another number (above the floor when one is free there):
 * the new number, or -errno. */
int dti__fd_move_forced(int fd)
{
    int floor = fd_floor();
    int n = floor >= 0 ? fd_dup_above(fd, floor) : -1;
    if (n < 0)
        n = fd_dup_above(fd, 0); /* nothing free up there: any number but this one */
    if (n < 0)
        return -errno;
    dti__sys_close(fd);
    return n;
}

int dti_fd_aside(int fd, int always)
{
    if (!always || fd < 0)
        return dti__fd_aside(fd);
    int n = dti__fd_move_forced(fd);
    if (n < 0) {
        errno = -n;
        return fd;
    }
    return n;
}
