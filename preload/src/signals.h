/* The program's signal handlers behind a counting trampoline (signals.c). */
#ifndef ETA_PRELOAD_SIGNALS_H
#define ETA_PRELOAD_SIGNALS_H

#include <stdbool.h>

#include "shim.h"

/* Handlers of the program that ran on this thread, all of them and those
 * without SA_RESTART: the shim's trampoline counts each before calling the
 * program's handler. A wait samples them at its start (eta_wait). */
extern ETA_TLS unsigned eta_sig_handled;
extern ETA_TLS unsigned eta_sig_eintr;
/* Whether a blocked call interrupted by sig's handler restarts (SA_RESTART,
 * or no handler at all), after what the program installed. */
bool eta_signal_restarts(int sig);
/* Puts the trampoline in front of handlers installed before the shim's
 * wrappers were reached. Called by the constructor. */
void eta_signals_init(void);

#endif
