/* The shim's start and its fork hooks: the top of the layers, the one place
 * that calls every part's set-up. */
#include <pthread.h>

#include "accept.h"
#include "attach.h"
#include "config.h"
#include "exec_handover.h"
#include "exec_handover.h"
#include "fdtable.h"
#include "signals.h"

/* fork: the child joins the parent's group in the PPE and keeps every
 * accelerated socket it inherited (attach.c). Listeners are shared with the
 * child from then on: one connection is accepted at a time. */
static void fork_prepare(void)
{
    eta_init();
    if (eta_attach_fork_prepare())
        eta_listeners_shared = true;
}

static void fork_parent(void)
{
    eta_attach_fork_parent();
}

/* Joined: the child drops its holds on the parent's stashed connections. */
static void fork_child(void)
{
    if (eta_attach_fork_child())
        eta_stash_after_fork_child();
}

__attribute__((constructor)) static void eta_constructor(void)
{
    eta_attach_loaded();
    eta_signals_init();
    eta_init();
    /* fork: the child joins the parent's PPE group. glibc runs these for
     * its internal forks too (daemon()); posix_spawn/system do not fork. */
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    /* exec: the previous image's sockets, when it handed them over. */
    eta_exec_adopt();
    /* ETA_REQUIRE: fail at start, not at the first socket. */
    if (eta_cfg.require && !eta_cfg.disabled)
        (void)eta_dti();
}
