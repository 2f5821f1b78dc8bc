/* io_uring on an accelerated socket: said loudly, never silent.
 *
 * An io_uring request is carried out by the kernel, which holds only the
 * placeholder of an accelerated socket (its bytes are in the PPE): a read
 * there fails (ENOTCONN) or waits forever. liburing makes its system calls
 * with inline instructions, so no preload can stand between it and the
 * kernel; but programs link liburing dynamically (Debian's liburing2), and
 * its exported functions can be interposed. Before each submission goes on
 * to liburing, the requests it publishes (sqe_head..sqe_tail of the ring's
 * submission queue, which liburing's io_uring_get_sqe() filled) are looked
 * at: one on a descriptor the shim accelerated is counted (bypass_refused,
 * shown by eta-stat) and the program is warned once, with what to do. The
 * requests go on unchanged (the program then sees the kernel's errors).
 * Registered files are checked when they are registered (a request with
 * IOSQE_FIXED_FILE names a table index, not a descriptor). A program that
 * drives io_uring without liburing (its own instructions) is beyond reach:
 * preload/README.md lists it.
 *
 * Only the layout of liburing's public structures (liburing.h, liburing 2.x)
 * is used here; the shim does not link liburing: the functions it forwards
 * to are found in the process (RTLD_NEXT) when a program calls them. */
#include <dlfcn.h>
#include <errno.h>
#include <liburing.h>
#include <string.h>

#include "bypass.h"
#include "config.h"
#include "fdtable.h"
#include "shim.h"
#include "sockobj.h"

static _Atomic bool warned;

/* fd names an accelerated socket: counted, and the first time said. */
static void check_fd(int fd, const char *what, unsigned opcode)
{
    struct eta_sock *s = fd >= 0 ? eta_sock_accel(fd) : NULL;
    if (!s)
        return;
    eta_obj_put(&s->obj);
    ETA_STAT_ADD(bypass_refused, 1);
    if (atomic_exchange(&warned, true))
        return;
    if (opcode != ~0u)
        eta_log("warning: io_uring request (opcode %u) on accelerated socket fd %d: io_uring goes to the "
                "kernel, which holds only a placeholder of it, so the request fails or never completes; run "
                "this program without eta (ETA_DISABLE=1 in its environment, or not under eta-run)",
                opcode, fd);
    else
        eta_log("warning: %s registers accelerated socket fd %d with io_uring: io_uring goes to the kernel, "
                "which holds only a placeholder of it, so requests on it fail or never complete; run this "
                "program without eta (ETA_DISABLE=1 in its environment, or not under eta-run)",
                what, fd);
}

void eta_uring_check_files(const int *fds, unsigned n, const char *what)
{
    if (!fds || !atomic_load_explicit(&eta_tracked, memory_order_relaxed))
        return;
    for (unsigned i = 0; i < n; i++)
        check_fd(fds[i], what, ~0u);
}

/* The requests a submission will publish. */
static void check_ring(const struct io_uring *ring)
{
    if (!ring || !atomic_load_explicit(&eta_tracked, memory_order_relaxed))
        return;
    const struct io_uring_sq *sq = &ring->sq;
    unsigned mask = sq->ring_mask ? sq->ring_mask : (sq->kring_mask ? *sq->kring_mask : 0);
    unsigned pending = sq->sqe_tail - sq->sqe_head;
    if (!sq->sqes || pending > mask + 1)
        return; /* not a ring liburing filled as we know it */
    for (unsigned i = sq->sqe_head; i != sq->sqe_tail; i++) {
        const struct io_uring_sqe *e = &sq->sqes[i & mask];
        if (e->opcode != IORING_OP_NOP && !(e->flags & IOSQE_FIXED_FILE))
            check_fd(e->fd, "io_uring", e->opcode);
    }
}

/* liburing's own function `name`, found on first use. */
static void *next_fn(void **cache, const char *name)
{
    void *f = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!f) {
        f = dlsym(RTLD_NEXT, name);
        __atomic_store_n(cache, f, __ATOMIC_RELEASE);
    }
    return f;
}

/* Calls liburing's `name` (declared in liburing.h: same prototype as ours). */
#define FORWARD(name, ...)                                          \
    static void *cache;                                             \
    __typeof__(name) *fn;                                           \
    void *sym = next_fn(&cache, #name);                             \
    memcpy(&fn, &sym, sizeof fn);                                   \
    return fn ? fn(__VA_ARGS__) : -ENOSYS

ETA_EXPORT int io_uring_submit(struct io_uring *ring)
{
    check_ring(ring);
    FORWARD(io_uring_submit, ring);
}

ETA_EXPORT int io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr)
{
    check_ring(ring);
    FORWARD(io_uring_submit_and_wait, ring, wait_nr);
}

ETA_EXPORT int io_uring_submit_and_wait_timeout(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
                                                unsigned wait_nr, struct __kernel_timespec *ts, sigset_t *sigmask)
{
    check_ring(ring);
    FORWARD(io_uring_submit_and_wait_timeout, ring, cqe_ptr, wait_nr, ts, sigmask);
}

ETA_EXPORT int io_uring_submit_and_get_events(struct io_uring *ring)
{
    check_ring(ring);
    FORWARD(io_uring_submit_and_get_events, ring);
}

ETA_EXPORT int io_uring_register_files(struct io_uring *ring, const int *files, unsigned nr_files)
{
    eta_uring_check_files(files, nr_files, "io_uring_register_files()");
    FORWARD(io_uring_register_files, ring, files, nr_files);
}

ETA_EXPORT int io_uring_register_files_tags(struct io_uring *ring, const int *files, const __u64 *tags,
                                            unsigned nr)
{
    eta_uring_check_files(files, nr, "io_uring_register_files_tags()");
    FORWARD(io_uring_register_files_tags, ring, files, tags, nr);
}

ETA_EXPORT int io_uring_register_files_update(struct io_uring *ring, unsigned off, const int *files,
                                              unsigned nr_files)
{
    eta_uring_check_files(files, nr_files, "io_uring_register_files_update()");
    FORWARD(io_uring_register_files_update, ring, off, files, nr_files);
}

ETA_EXPORT int io_uring_register_files_update_tag(struct io_uring *ring, unsigned off, const int *files,
                                                  const __u64 *tags, unsigned nr_files)
{
    eta_uring_check_files(files, nr_files, "io_uring_register_files_update_tag()");
    FORWARD(io_uring_register_files_update_tag, ring, off, files, tags, nr_files);
}
