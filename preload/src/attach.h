/* The PPE attachment of this process (attach.c): attach on first use, the
 * PPE's liveness, re-attach after it went, the calling thread's DTI context,
 * the attachment across fork, joining another process's group, adopting
 * one after exec. Calls config.c and fdtable.c below it; a re-attach calls
 * up into wait.c (eta_hmap_clear) and relisten.c (eta_relisten_all). */
#ifndef ETA_PRELOAD_ATTACH_H
#define ETA_PRELOAD_ATTACH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <dti/dti_view.h>

#include "shim.h"

/* The attachment of this process, or NULL when there is none (no PPE, or a
 * fork child before it attached). Attaches on first call. Never blocks for
 * long: one connect to the control socket. */
dti_t *eta_dti(void);
/* True in a vfork() child before it execs: the shim's memory is its
 * parent's, the descriptor table its own, so wrappers that would change the
 * descriptor table's map (close, dup) leave it alone. A system call. */
bool eta_vfork_child(void);
/* The attachment if there is one now; never attaches. */
dti_t *eta_dti_attached(void);
/* The calling thread's context, NULL when not attached (errno set). */
dti_ctx_t *eta_ctx(void);
/* Generation of the attachment: bumped in a fork child that could not join
 * the parent's group, so that sockets made under the parent's attachment are
 * recognised (orphans). */
extern ETA_HIDDEN uint32_t eta_generation;
/* Bumped in every fork child: caches of kernel objects shared with the
 * parent after fork (epoll's inner set) are rebuilt. */
extern ETA_HIDDEN uint32_t eta_fork_epoch;
/* eta_generation set by the last fork child that could not join its parent's
 * group: sockets older than it are the parent's (fork-child orphans); older
 * ones of a later generation were made on a PPE that went (re-attach). */
extern ETA_HIDDEN uint32_t eta_fork_generation;
/* Set once the PPE is known to be gone (control socket hang-up, region
 * marked gone): accelerated sockets then fail, new ones go to the kernel.
 * A flag, because dti_engine_alive() makes a system call. */
extern ETA_HIDDEN _Atomic bool eta_engine_dead;
/* dti_engine_alive() that also sets eta_engine_dead. */
bool eta_engine_check(dti_t *d);
void eta_mark_engine_dead(void);
/* Bumped when readiness may have changed anywhere (events were lost, the
 * PPE went): every epoll set looks at all of its members again. */
extern ETA_HIDDEN _Atomic uint32_t eta_rescan_seq;
/* True when the PPE has been attached, or an attach is still possible. */
bool eta_ppe_usable(void);
/* Converts a libdti result (-errno or -DTI_E_*) to an errno value; the
 * PPE's being gone marks it dead. */
int eta_errno_from_dti(int res);

/* Re-attach after the PPE went: tries dti_attach() again when the backoff
 * allows (50 ms, doubling to 1 s); on success the attachment is replaced,
 * eta_generation and eta_fork_epoch are bumped, listeners are made again on
 * the new PPE and the old attachment is retired. True when attached to a
 * live PPE now. Never blocks on another thread (try-lock). */
bool eta_reattach_try(void);
/* -1 when no re-attach is due (the PPE serves us, or never did); else the ms
 * until the next try: a wait that has nothing else to wake it for a new PPE
 * sleeps at most this long, then calls eta_reattach_try(). */
int eta_reattach_wait_ms(void);

/* Makes d (a member of another process's group, joined by a claim: pass_fds.c)
 * this process's attachment, as a re-attach does. False when another thread
 * holds the attachment lock. */
bool eta_attach_join(dti_t *d);
/* The same with the attach lock held (relisten.c); leave_old: the old
 * attachment leaves its group on the PPE, else it is retired. */
void eta_attach_join_locked(dti_t *d, bool leave_old);
/* Makes d (adopted after exec: exec_handover.c) this process's attachment. */
void eta_attach_adopted(dti_t *d);

/* The program takes number fd (dup2/dup3 onto it): a descriptor of the
 * shim's or libdti's there is moved aside first. 0, or -1 with errno when it
 * could not be (no free number left: EMFILE). */
int eta_fd_take(int fd);

/* fork (pthread_atfork, from init.c). prepare: re-attaches first when the
 * PPE went while this process slept, holds the attach lock across fork();
 * true when the child will join this process's group. parent: releases it.
 * child: joins the group (true: its inherited sockets work), else forgets
 * the parent's attachment (they are orphans). */
bool eta_attach_fork_prepare(void);
void eta_attach_fork_parent(void);
bool eta_attach_fork_child(void);
/* At load: the process the shim's memory belongs to (eta_vfork_child()). */
void eta_attach_loaded(void);

/* The calling thread's context as eta_ctx() cached it, while the cache is
 * current: eta_ctx()'s fast half, inlined into the data path. NULL: call
 * eta_ctx(). (Anything that replaces the attachment bumps eta_fork_epoch.) */
extern ETA_TLS dti_ctx_t *eta_tls_ctx;
extern ETA_TLS uint32_t eta_tls_ctx_epoch;
extern ETA_TLS uint64_t eta_tls_ctx_serial;
/* eta_tls_ctx's command queue (libdti's dti_note_view()), set with it: the
 * send fast path queues its SEND there itself (io_fast.c send_noted()). */
extern ETA_TLS struct dti_note_view eta_tls_note;
/* A number naming context c for as long as it lives, never reused (a
 * thread's context is freed when the thread ends, and the next thread's may
 * get its address); 0 when c is not the calling thread's cached context.
 * Caches of "already watched from this context" key on it. */
static inline uint64_t eta_ctx_serial(dti_ctx_t *c)
{
    return c && c == eta_tls_ctx ? eta_tls_ctx_serial : 0;
}
static inline dti_ctx_t *eta_ctx_cached(void)
{
    return ETA_LIKELY(eta_tls_ctx_epoch == eta_fork_epoch) ? eta_tls_ctx : NULL;
}

#endif
