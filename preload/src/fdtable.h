/* The descriptor table and the objects it names (fdtable.c): a reserved
 * table from descriptor number to reference-counted object, the slab the
 * objects come from (no malloc: socket, accept and close stay
 * async-signal-safe), the markers of descriptors that are not the program's.
 * Calls config.c and real.c below it; destroying an object calls its kind's
 * release above it (sock.c, epoll.c). */
#ifndef ETA_PRELOAD_FDTABLE_H
#define ETA_PRELOAD_FDTABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shim.h"

/* Reads the environment and reserves the table, once; safe from any wrapper
 * at any time. */
void eta_init(void);

enum eta_kind {
    ETA_OBJ_SOCK = 1,    /* an AF_INET stream socket the shim tracks */
    ETA_OBJ_EPOLL = 2,   /* an epoll instance with accelerated members */
    ETA_OBJ_INTERNAL = 3 /* a descriptor libdti uses: not the program's */
};

struct eta_obj {
    uint32_t kind;
    _Atomic uint32_t refs; /* descriptors naming it + calls using it */
};

/* ETA_OBJ_INTERNAL: a descriptor of libdti's (owner NULL: libdti moves it,
 * dti_fd_move()) or of the shim's own (owner: where the shim keeps its
 * number, updated when the program takes that number and the descriptor is
 * moved aside). Every internal marker is one of these. */
struct eta_internal {
    struct eta_obj obj;
    _Atomic int *owner;
};
/* The marker for libdti's descriptors (static, never freed). */
extern struct eta_internal eta_internal_dti;
/* Marks *owner's descriptor as the shim's own (epoll's wake-up eventfd). */
void eta_internal_own(_Atomic int *owner);
/* Forgets that marker (the descriptor is closed or no longer used). */
void eta_internal_drop(_Atomic int *owner);
/* Whether *owner's number is still marked as that descriptor of the shim's
 * (a fork child inherits the marks with the descriptors; a number the shim
 * stopped tracking may name anything now and is never closed by it). */
bool eta_internal_owned(_Atomic int *owner);

/* The table from descriptor number to object. Descriptors beyond it are
 * never accelerated (counted as ETA_R_FD_RANGE). */
#define ETA_FD_MAX (1 << 20)
/* [start, stop) overlaps the descriptor table's or the slab's reservation. */
bool eta_reserved_span(uintptr_t start, uintptr_t stop);
extern ETA_HIDDEN struct eta_obj *_Atomic *eta_fds;
extern ETA_HIDDEN _Atomic long eta_tracked; /* entries in use: 0 means every fd is the kernel's */

static inline struct eta_obj *eta_fd_peek(int fd)
{
    if (ETA_LIKELY(atomic_load_explicit(&eta_tracked, memory_order_relaxed) == 0))
        return NULL;
    if ((unsigned)fd >= ETA_FD_MAX || !eta_fds)
        return NULL;
    return atomic_load_explicit(&eta_fds[fd], memory_order_acquire);
}

/* Takes a reference on the object of fd (NULL: a plain kernel fd). */
struct eta_obj *eta_fd_get(int fd);
void eta_obj_put(struct eta_obj *o);
/* A reference on o unless its last one is already gone (a concurrent close):
 * eta_fd_get()'s second half, for callers that peeked first. */
static inline bool eta_obj_tryref(struct eta_obj *o)
{
    uint32_t r = atomic_load_explicit(&o->refs, memory_order_relaxed);
    do {
        if (r == 0)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&o->refs, &r, r + 1, memory_order_acquire,
                                                    memory_order_relaxed));
    return true;
}
/* What eta_obj_put() does when the last reference went. */
void eta_obj_destroy(struct eta_obj *o);
/* eta_obj_put(), inlined where it is hot. */
static inline void eta_obj_unref(struct eta_obj *o)
{
    if (ETA_UNLIKELY(atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1))
        eta_obj_destroy(o);
}
static inline struct eta_obj *eta_obj_ref(struct eta_obj *o)
{
    atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
    return o;
}
/* Binds fd to o (taking a reference); drops whatever fd named before. */
void eta_fd_set(int fd, struct eta_obj *o);
/* Forgets fd (after the kernel closed it); drops its reference. */
void eta_fd_clear(int fd);
bool eta_fd_in_range(int fd);

/* A zeroed slot of the slab for an object (epoll.c), NULL when none is left. */
void *eta_obj_alloc(void);
/* A new socket object (no reference yet), NULL when none is left. */
struct eta_sock *eta_sock_new(void);
/* The socket behind fd with a reference, or NULL when fd is not one. */
struct eta_sock *eta_sock_get(int fd);

#endif
