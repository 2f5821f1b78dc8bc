/* accept and the listener stash (accept.c): connections accepted from the
 * PPE for a listener and kept until the program's accept takes them. */
#ifndef ETA_PRELOAD_ACCEPT_H
#define ETA_PRELOAD_ACCEPT_H

#include <stdbool.h>

#include "shim.h"

/* Accept one connection at a time (listeners may be shared after fork, a
 * pass or an exec). */
extern bool eta_listeners_shared;
/* Child, after joining: drops its holds on the parent's stashed connections. */
void eta_stash_after_fork_child(void);
/* Connections stashed for listener s, not yet returned by accept (they make
 * the listener readable). */
unsigned eta_stash_count(struct eta_sock *s);
/* Drops listener s's stashed connections without telling the PPE. */
void eta_stash_forget(struct eta_sock *s);
/* Aborts the connections stashed for listener s (it is closing). */
void eta_stash_abort(dti_ctx_t *c, struct eta_sock *s);
/* Listener s's stashed connections (copied), and one put back (exec). */
unsigned eta_stash_export(struct eta_sock *s, dti_sock_t *out, unsigned max);
bool eta_stash_import(struct eta_sock *s, dti_sock_t h);

#endif
