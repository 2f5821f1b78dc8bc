/* The descriptor table and the objects it names: the table, the slab, the
 * reference counts, the markers of descriptors that are not the program's. */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "config.h"
#include "epoll.h"
#include "fdtable.h"
#include "real.h"
#include "sockobj.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init_table(void);
static void do_init(void)
{
    eta_real_resolve();
    eta_config_read();
    init_table();
}

void eta_init(void)
{
    pthread_once(&init_once, do_init);
}

struct eta_internal eta_internal_dti = {{ETA_OBJ_INTERNAL, 1}, NULL};

void eta_internal_own(_Atomic int *owner)
{
    int fd = atomic_load(owner);
    struct eta_internal *in = fd >= 0 && eta_fd_in_range(fd) ? eta_obj_alloc() : NULL;
    if (!in)
        return;
    in->obj.kind = ETA_OBJ_INTERNAL;
    atomic_init(&in->obj.refs, 0);
    in->owner = owner;
    eta_fd_set(fd, &in->obj);
}

bool eta_internal_owned(_Atomic int *owner)
{
    int fd = atomic_load(owner);
    struct eta_obj *o = fd >= 0 ? eta_fd_peek(fd) : NULL;
    return o && o->kind == ETA_OBJ_INTERNAL && ((struct eta_internal *)o)->owner == owner;
}

void eta_internal_drop(_Atomic int *owner)
{
    if (eta_internal_owned(owner))
        eta_fd_clear(atomic_load(owner));
}

/* ---- descriptor table and objects -------------------------------------- */

struct eta_obj *_Atomic *eta_fds;
_Atomic long eta_tracked;

/* Objects come from one reserved mapping with a lock-free free list, so the
 * wrappers never call malloc (socket(), accept() and close() are
 * async-signal-safe in POSIX and must stay so). */
#define SLOT_SIZE 384
static unsigned char *slab;
static _Atomic uint32_t slab_next = 1; /* slot 0 is never used */
static _Atomic uint64_t slab_free;     /* (tag << 32) | slot index, 0: empty */

static void init_table(void)
{
    void *t = mmap(NULL, sizeof(void *) * (size_t)ETA_FD_MAX, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *s = mmap(NULL, (size_t)SLOT_SIZE * ETA_FD_MAX, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (t == MAP_FAILED || s == MAP_FAILED) {
        eta_log("cannot reserve the descriptor table (%s): every socket goes to the kernel", strerror(errno));
        return;
    }
    slab = s;
    eta_fds = t;
}

/* The descriptor table's and the slab's reservations (mlock.c leaves them
 * locked on fault): [start, stop) overlaps one of them. */
bool eta_reserved_span(uintptr_t start, uintptr_t stop)
{
    const uintptr_t t = (uintptr_t)eta_fds, s = (uintptr_t)slab;
    const uintptr_t t_end = t + sizeof(void *) * (size_t)ETA_FD_MAX, s_end = s + (size_t)SLOT_SIZE * ETA_FD_MAX;
    return (t && start < t_end && stop > t) || (s && start < s_end && stop > s);
}

bool eta_fd_in_range(int fd)
{
    eta_init();
    return fd >= 0 && fd < ETA_FD_MAX && eta_fds;
}

static void *slot_alloc(void)
{
    uint64_t head = atomic_load(&slab_free);
    while (head & 0xffffffffu) {
        uint32_t idx = (uint32_t)head;
        uint32_t next = *(uint32_t *)(slab + (size_t)idx * SLOT_SIZE);
        uint64_t repl = ((head >> 32) + 1) << 32 | next;
        if (atomic_compare_exchange_weak(&slab_free, &head, repl))
            return memset(slab + (size_t)idx * SLOT_SIZE, 0, SLOT_SIZE);
    }
    uint32_t idx = atomic_fetch_add(&slab_next, 1);
    if (idx >= ETA_FD_MAX)
        return NULL;
    return slab + (size_t)idx * SLOT_SIZE;
}

static void slot_free(void *p)
{
    uint32_t idx = (uint32_t)(((unsigned char *)p - slab) / SLOT_SIZE);
    uint64_t head = atomic_load(&slab_free);
    for (;;) {
        *(uint32_t *)p = (uint32_t)head;
        uint64_t repl = ((head >> 32) + 1) << 32 | idx;
        if (atomic_compare_exchange_weak(&slab_free, &head, repl))
            return;
    }
}

_Static_assert(sizeof(struct eta_sock) <= SLOT_SIZE, "socket object outgrew its slot");

struct eta_sock *eta_sock_new(void)
{
    if (!slab)
        return NULL;
    struct eta_sock *s = slot_alloc();
    if (!s)
        return NULL;
    s->obj.kind = ETA_OBJ_SOCK;
    atomic_init(&s->obj.refs, 0);
    s->h = DTI_SOCK_INVALID;
    s->rcvtimeo_ms = -1;
    s->sndtimeo_ms = -1;
    return s;
}

void *eta_obj_alloc(void)
{
    return slab ? slot_alloc() : NULL;
}

void eta_obj_put(struct eta_obj *o) { eta_obj_unref(o); }

void eta_obj_destroy(struct eta_obj *o)
{
    switch (o->kind) {
    case ETA_OBJ_SOCK:
        eta_sock_release((struct eta_sock *)o);
        slot_free(o);
        break;
    case ETA_OBJ_EPOLL:
        eta_epoll_destroy(o);
        slot_free(o);
        break;
    case ETA_OBJ_INTERNAL:
        if (((struct eta_internal *)o)->owner)
            slot_free(o); /* the shim's own (eta_internal_own); libdti's marker is static */
        break;
    default:
        break;
    }
}

struct eta_obj *eta_fd_get(int fd)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (!o)
        return NULL;
    /* A concurrent close may drop the last reference between the load and
     * the increment; take a reference only while it is non-zero. */
    uint32_t r = atomic_load(&o->refs);
    do {
        if (r == 0)
            return NULL;
    } while (!atomic_compare_exchange_weak(&o->refs, &r, r + 1));
    return o;
}

struct eta_sock *eta_sock_accel(int fd) { return eta_sock_accel_inline(fd); }

struct eta_sock *eta_sock_get(int fd)
{
    struct eta_obj *o = eta_fd_get(fd);
    if (o && o->kind != ETA_OBJ_SOCK) {
        eta_obj_put(o);
        return NULL;
    }
    return (struct eta_sock *)o;
}

void eta_fd_set(int fd, struct eta_obj *o)
{
    if (!eta_fd_in_range(fd))
        return;
    eta_obj_ref(o);
    struct eta_obj *old = atomic_exchange(&eta_fds[fd], o);
    if (old)
        eta_obj_put(old);
    else
        atomic_fetch_add(&eta_tracked, 1);
}

void eta_fd_clear(int fd)
{
    if ((unsigned)fd >= ETA_FD_MAX || !eta_fds)
        return;
    struct eta_obj *old = atomic_exchange(&eta_fds[fd], NULL);
    if (old) {
        atomic_fetch_sub(&eta_tracked, 1);
        eta_obj_put(old);
    }
}
