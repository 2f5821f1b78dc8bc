/* What every file of libeta-preload.so shares: the macros of its wrappers and
 * the types libdti and the published counters define. Each part of the shim
 * has its own header (preload/README.md, "Module map"); include those. */
#ifndef ETA_PRELOAD_SHIM_H
#define ETA_PRELOAD_SHIM_H

#include <dti/dti.h>
#include <eta/preload_stats.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define ETA_EXPORT __attribute__((visibility("default")))
#define ETA_TLS __thread __attribute__((tls_model("initial-exec")))
/* The shim's own data, declared hidden where it is declared, not only where
 * it is defined (-fvisibility=hidden covers definitions): other files then
 * load it PC-relative in one instruction, not through the GOT in two (the
 * data path's wrappers read several per call). */
#define ETA_HIDDEN __attribute__((visibility("hidden")))
/* glibc declares the sockaddr arguments as transparent unions in GNU C;
 * definitions must match, then take the pointer out. */
#if defined(__USE_GNU) && !defined(__cplusplus) && defined(__GNUC__)
#define ETA_SA(a) ((a).__sockaddr__)
#else
#define ETA_SA(a) (a)
#endif
#define ETA_LIKELY(x) __builtin_expect(!!(x), 1)
#define ETA_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* The objects behind descriptors (fdtable.h, sockobj.h, epoll_set.h). */
struct eta_obj;
struct eta_sock;
struct eta_epoll;

#endif
