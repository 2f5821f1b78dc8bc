/* Configuration (the environment, read once), the PPE's network, logging and
 * the counters published for eta-stat (config.c). The lowest layer: calls
 * nothing of the shim but real.h. */
#ifndef ETA_PRELOAD_CONFIG_H
#define ETA_PRELOAD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "decide.h"
#include "shim.h"

struct eta_config {
    char socket_path[256]; /* ETA_SOCKET or /run/eta/ppe.sock */
    bool require;          /* ETA_REQUIRE=1 */
    bool disabled;         /* ETA_DISABLE=1: everything to the kernel (counted) */
    bool log_fallback;     /* ETA_LOG has "fallback" (or "all") */
    bool log_accel;        /* ETA_LOG has "accel" (or "all") */
    bool log_debug;        /* ETA_LOG has "debug" (or "all") */
    uint64_t spin_ns;      /* ETA_SPIN_US * 1000 */
    char net_override[512];/* ETA_NET: the PPE's addresses/routes, else <socket>.net */
};
extern struct eta_config eta_cfg;

/* Reads the environment into eta_cfg (eta_init() calls it once). */
void eta_config_read(void);

/* The PPE's addresses and routes: ETA_NET, else <socket>.net (eta_net_load(),
 * at attach; a description that is missing or bad accelerates nothing, said
 * once). */
extern struct eta_net eta_net;
void eta_net_load(void);
/* The same at a re-attach (attach.c): a restarted PPE may list other
 * addresses, routes or sharing; what it publishes replaces the previous
 * description (said when it differs; kept when the new one cannot be read).
 * ETA_NET, where set, is kept. */
void eta_net_reload(void);

/* Monotonic time in ns (vDSO; no system call). */
uint64_t eta_now_ns(void);

/* ---- logging and counters --------------------------------------------- */

void eta_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define ETA_DEBUG(...)             \
    do {                           \
        if (eta_cfg.log_debug)     \
            eta_log(__VA_ARGS__);  \
    } while (0)

/* Counts one socket sent to the kernel (ETA_R_NONE: one accelerated). */
void eta_count(enum eta_reason r, int fd, const char *detail);
extern struct eta_preload_stats *eta_stats;
#define ETA_STAT_ADD(field, n) __atomic_fetch_add(&eta_stats->field, (n), __ATOMIC_RELAXED)

/* Maps <socket>.preload/<pid> and moves the counters there, unless done
 * already (at the first attach). Best effort. */
void eta_stats_publish_once(void);
/* In a fork child: the counters are its own from here on; `joined` (its
 * inherited sockets work): published again, with those sockets open. */
void eta_stats_after_fork(bool joined);

#endif
