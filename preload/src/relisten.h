/* Listeners made again on a new PPE after a re-attach (relisten.c). */
#ifndef ETA_PRELOAD_RELISTEN_H
#define ETA_PRELOAD_RELISTEN_H

/* Makes every listening socket of an older generation listen again on the
 * current attachment. Returns how many; *failed counts refusals, *shared
 * those claimed from (or offered to) the process group. */
unsigned eta_relisten_all(unsigned *failed, unsigned *shared);

#endif
