/* libdti layer 4, the public calls (dti/dti.h): what its files share. They
 * may call every layer below (route.h, queue.h, link.h, base.h). */
#ifndef DTI_LIB_API_H
#define DTI_LIB_API_H

#include "route.h"

#pragma GCC visibility push(hidden)

/* lifecycle.c: the attachment's key for per-thread contexts (dti_ctx_get). */
void dti__init_tls(struct dti_attachment *d);

/* lifecycle_exec.c: the attachment of a new member of a group on one engine,
 * from what its maker handed over (dti_adopt_exec without the links); main:
 * the application's dti_t (thread contexts), else a link of it. Adopts
 * engines 1..n-1 of per[] as links of d (each handed-over set is taken:
 * closed when its adoption fails). Used by sock_pass.c (dti_claim). */
int dti__adopt_links(struct dti_attachment *d, const struct dti_exec_fds *per, uint32_t n_engines, char *why,
                     size_t wl);
int dti__adopt_one(const struct dti_exec_fds *fds, uint32_t engine, bool main, struct dti_attachment **out,
                   char *why, size_t wl);

#pragma GCC visibility pop

#endif
