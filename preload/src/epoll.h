/* What the rest of the shim asks of the epoll sets (epoll.c; the sets'
 * internals are epoll_set.h). */
#ifndef ETA_PRELOAD_EPOLL_H
#define ETA_PRELOAD_EPOLL_H

#include "shim.h"

/* Called when an accelerated fd is closed: it leaves every epoll set. */
void eta_epoll_forget_fd(int fd, struct eta_sock *s);
/* The readiness of s may have changed (an engine event, a connection
 * stashed, a shutdown): its epoll entries go on their sets' ready queues. */
void eta_epoll_touch(struct eta_sock *s);
/* The set's own release when its object's last reference goes (fdtable.c). */
void eta_epoll_destroy(struct eta_obj *o);

#endif
