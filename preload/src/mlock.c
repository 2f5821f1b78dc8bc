/* mlockall(): a program that locks its memory locks what it uses, not what
 * eta reserved. Under eta-run a process holds reservations it mostly never
 * touches: the PPE's shared region (rings for every socket the PPE allows,
 * several GiB of address space), libdti's socket state, and the shim's
 * descriptor table and object slab (MAP_NORESERVE, ~400 MiB). The kernel's
 * mlockall(MCL_CURRENT) faults in every page of every mapping: the region's
 * pages are shared memory, charged to the machine, and a program that
 * locks itself (common among latency-sensitive ones) ended in the OOM
 * killer.
 *
 * So the shim makes the call with MCL_ONFAULT added (every mapping locked,
 * nothing faulted in), then, unless the program asked for MCL_ONFAULT
 * itself, locks each of the program's own mappings again with mlock(),
 * which faults them in as the kernel's mlockall would have; eta's are left
 * locked on fault: their pages in use are locked, the others are locked
 * when first used. MCL_FUTURE without MCL_ONFAULT is then made again alone
 * (it changes no existing mapping), so the program's later mappings are
 * faulted in at once as before; libdti maps a region it attaches later
 * without access first and opens it afterwards, which faults in nothing
 * (dti/lib/link.c, dti__map_region). Errors are the kernel's (the first
 * call's); populating is best effort, as in the kernel's mlockall. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdtable.h"
#include "real.h"
#include "shim.h"

#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif

/* Mappings eta reserved, by the name /proc/self/maps shows for them. */
static bool eta_named(const char *path, size_t n)
{
    static const char *const names[] = {"/memfd:eta-dti", "/memfd:dti-"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t k = strlen(names[i]);
        if (n >= k && memcmp(path, names[i], k) == 0)
            return true;
    }
    return false;
}

static uintptr_t hex(const char **p, const char *end)
{
    uintptr_t v = 0;
    for (; *p < end; (*p)++) {
        char ch = **p;
        unsigned d = ch >= '0' && ch <= '9' ? (unsigned)(ch - '0')
                     : ch >= 'a' && ch <= 'f' ? (unsigned)(ch - 'a' + 10)
                                              : 16u;
        if (d == 16)
            break;
        v = v * 16 + d;
    }
    return v;
}

/* One line of /proc/self/maps: "start-end perms offset dev inode   path". */
static void lock_line(const char *l, const char *end)
{
    const char *p = l;
    uintptr_t start = hex(&p, end);
    if (p >= end || *p != '-')
        return;
    p++;
    uintptr_t stop = hex(&p, end);
    if (stop <= start)
        return;
    /* the path: after four more fields (perms, offset, device, inode) */
    const char *q = p;
    for (int field = 0; field < 4 && q < end; field++) {
        while (q < end && *q == ' ')
            q++;
        while (q < end && *q != ' ')
            q++;
    }
    while (q < end && *q == ' ')
        q++;
    if (eta_named(q, (size_t)(end - q)) || eta_reserved_span(start, stop))
        return;
    if (end - q >= 10 && memcmp(q, "[vsyscall]", 10) == 0)
        return;
    (void)eta_raw_syscall(SYS_mlock, start, stop - start); /* best effort, as mlockall's own */
}

static void lock_own_mappings(void)
{
    int fd = (int)eta_raw_syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    char buf[8192];
    size_t have = 0;
    for (;;) {
        long n = eta_raw_syscall(SYS_read, fd, buf + have, sizeof buf - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        size_t off = 0;
        for (;;) {
            char *nl = memchr(buf + off, '\n', have - off);
            if (!nl)
                break;
            lock_line(buf + off, nl);
            off = (size_t)(nl - buf) + 1;
        }
        memmove(buf, buf + off, have - off);
        have -= off;
        if (have == sizeof buf) /* a line longer than the buffer: skip it */
            have = 0;
    }
    if (have)
        lock_line(buf, buf + have);
    (void)eta_raw_syscall(SYS_close, fd);
}

ETA_EXPORT int mlockall(int flags)
{
    if ((flags & ~(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)) || !(flags & MCL_CURRENT) || (flags & MCL_ONFAULT))
        return (int)eta_raw_syscall(SYS_mlockall, flags); /* the kernel's answer, or nothing eta must change */
    int rc = (int)eta_raw_syscall(SYS_mlockall, flags | MCL_ONFAULT);
    if (rc != 0)
        return rc;
    int saved = errno;
    lock_own_mappings();
    if (flags & MCL_FUTURE)
        (void)eta_raw_syscall(SYS_mlockall, MCL_FUTURE);
    errno = saved;
    return 0;
}
