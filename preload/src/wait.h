/* Waiting, reaping and watches (wait.c): the handle -> socket map, the
 * engine's completions and events dispatched to the sockets, the adaptive
 * spin-then-sleep wait every blocking call uses. */
#ifndef ETA_PRELOAD_WAIT_H
#define ETA_PRELOAD_WAIT_H

#include <stdbool.h>
#include <stdint.h>

#include "shim.h"
#include "signals.h"

/* The handle -> socket map the events are dispatched by. */
void eta_hmap_put(dti_sock_t h, struct eta_sock *s);
void eta_hmap_del(dti_sock_t h);
/* Forgets every entry (handles of a dead PPE). */
void eta_hmap_clear(void);

/* Makes the context report `mask` events of socket s (cached per socket).
 * 0, or libdti's error: -EAGAIN when the command queue stayed full.
 * POLLOUT is one-shot in the engine, and a watch believed still armed is not
 * sent again; an event not yet reaped may have consumed it. So a caller that
 * then waits must end its wait on any event for s (s->ev_seq moving), not
 * only on the state it wants, and call eta_watch() again: poll and epoll
 * loops do so by their rounds, a blocked send by its predicate (io_send.c). */
int eta_watch(dti_ctx_t *c, struct eta_sock *s, uint32_t mask);
/* Reaps and dispatches everything pending in the context (events bump the
 * sockets' ev_seq). Returns entries reaped. */
unsigned eta_pump(dti_ctx_t *c);

/* After a sleep on the context's wait fd: disarms, and says whether the
 * engine still serves us. A wake that brought entries is the engine's own
 * answer; only a wake with none (a timeout, a signal, a kernel descriptor,
 * the control socket's hang-up) pays dti_engine_alive()'s system call. */
bool eta_woken_alive(dti_ctx_t *c);
/* True when every installed signal handler has SA_RESTART: a blocking call
 * the shim emulates restarts after a signal, as the kernel's would. */
bool eta_signals_restart(void);

/* Waits until `ready(arg)` is true, the deadline passes (ns, 0: none) or a
 * signal arrives. Also wakes for `kfd` (a kernel fd, -1: none) becoming
 * readable. Spins as the context's adaptive policy allows (dti_spin_begin(),
 * at most ETA_SPIN_US), then sleeps on the context's wait fd.
 * `since`: the mark the call took when it began (signals.h); a handler that
 * ran after it, before this wait, counts as one that runs during it (a
 * SA_RESTART handler that the call goes on after moves the mark).
 * Returns 0 when ready, -ETIMEDOUT, -EINTR, or -EPIPE when the PPE went. */
int eta_wait(dti_ctx_t *c, bool (*ready)(void *), void *arg, uint64_t deadline_ns, int kfd,
             struct eta_sig_mark *since);
/* kfd | ETA_WAIT_KFD_RARE: kfd is looked at every 1,024 turns of the spin,
 * not every 64 (a UDP placeholder read for host-local senders alone,
 * sockobj.h udp_kself); the sleep watches it as any kfd. */
#define ETA_WAIT_KFD_RARE 0x40000000
/* eta_wait() for a caller that watched `wmask` of socket ws before it: a
 * sleep the watchdog ends sends that watch again (its POLLOUT is one-shot). */
int eta_wait_watch(dti_ctx_t *c, bool (*ready)(void *), void *arg, uint64_t deadline_ns, int kfd,
                   struct eta_sig_mark *since, struct eta_sock *ws, uint32_t wmask);

/* The watchdog (wait.c): no sleep on a context's wait fd lasts longer than
 * this; one that it ends is followed by a look at everything waited for, as
 * after a wake, and one-shot POLLOUT watches are sent again. Readiness found
 * by that look had no wakeup (lost: counted and said once). An idle sleeper
 * thus wakes once per period (eta-stat: watchdog_wakes). */
#define ETA_WATCHDOG_MS 1000
/* A sleep of `ms` (-1: forever) as the watchdog allows; *dog: it shortened it. */
int eta_watchdog_sleep_ms(int ms, bool *dog);
/* A sleep ended by the watchdog with nothing else to wake it: counted, and
 * the one-shot POLLOUT watches count as spent. */
void eta_watchdog_expired(void);
/* The look after it found something ready (`where`: the call, for the
 * message): a lost wakeup, counted, said once per process. */
void eta_lost_wakeup(const char *where);

#endif
