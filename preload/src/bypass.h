/* Calls that would bypass the data path: refused loudly (bypass.c), and
 * io_uring's registered files said and counted (uring.c). */
#ifndef ETA_PRELOAD_BYPASS_H
#define ETA_PRELOAD_BYPASS_H

/* Refuses call on accelerated socket fd: EINVAL, counted, one warning per
 * `which` (0..31, one per call name). Returns -1. */
int eta_bypass_refused(const char *call, int fd, unsigned which);
/* Descriptors registered with io_uring (fds[n]) that are accelerated
 * sockets are counted and said, once per program. */
void eta_uring_check_files(const int *fds, unsigned n, const char *what);

#endif
