/* Listening again on a PPE that came back (see core.c, "re-attach"): every
 * listening socket of an older generation is made again on the current
 * attachment, behind the same descriptor and object. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "shim.h"

void eta_hmap_put(dti_sock_t h, struct eta_sock *s);

/* Makes listener s (of an older generation) listen on the current PPE: a
 * new socket with the options the kernel placeholder holds (every option set
 * on an accelerated socket reached it too), the same address and port, the
 * same backlog; on several engines dti_listen makes the group. 0 or an errno
 * value; on failure s stays as it was (silent, or its kernel half). */
static int relisten(dti_ctx_t *c, int fd, struct eta_sock *s)
{
    int h = dti_socket(c);
    if (h < 0)
        return eta_errno_from_dti(h);
    eta_stash_forget(s); /* connections of the old PPE: their handles mean nothing now */
    dti_sock_t old = s->h;
    s->h = (dti_sock_t)h;
    eta_carry_options(c, fd, s);
    int r = dti_bind(c, s->h, &s->local);
    if (r == 0)
        r = dti_listen(c, s->h, s->backlog);
    if (r < 0) {
        dti_prep_close(c, s->h, 0);
        dti_submit(c);
    }
    if (r < 0) {
        s->h = old;
        return eta_errno_from_dti(r);
    }
    atomic_store(&s->watch_ctx, 0); /* watched in a context of the old PPE */
    atomic_store(&s->watch_mask, 0);
    eta_hmap_put(s->h, s);
    atomic_fetch_add(&s->ev_seq, 1);
    __atomic_store_n(&s->generation, eta_generation, __ATOMIC_RELEASE); /* usable from here on */
    return 0;
}

unsigned eta_relisten_all(unsigned *failed)
{
    *failed = 0;
    dti_ctx_t *c = eta_ctx();
    if (!c || !eta_fds)
        return 0;
    unsigned made = 0;
    long left = atomic_load(&eta_tracked);
    for (int fd = 0; fd < ETA_FD_MAX && left > 0; fd++) {
        struct eta_obj *o = eta_fd_get(fd);
        if (!o)
            continue;
        left--;
        struct eta_sock *s = (struct eta_sock *)o;
        /* Duplicates name one object: the first name makes it again. */
        if (o->kind == ETA_OBJ_SOCK && s->listening && atomic_load(&s->state) == ETA_SOCK_ACCEL &&
            s->generation != eta_generation && s->generation >= eta_fork_generation) {
            char addr[64];
            snprintf(addr, sizeof addr, "%s%u.%u.%u.%u:%u", s->hybrid ? "INADDR_ANY " : "", s->local.ip >> 24,
                     (s->local.ip >> 16) & 255, (s->local.ip >> 8) & 255, s->local.ip & 255, s->local.port);
            int err = relisten(c, fd, s);
            if (err == 0) {
                made++;
                if (eta_cfg.log_accel)
                    eta_log("fd %d: listening again on the new PPE (%s)", fd, addr);
            } else {
                (*failed)++;
                eta_log("fd %d: cannot listen on the new PPE at %s: %s; %s", fd, addr, strerror(err),
                        s->hybrid ? "its kernel half goes on alone" : "it stays silent");
            }
        }
        eta_obj_put(o);
    }
    return made;
}

