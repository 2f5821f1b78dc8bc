/* Configuration (the environment, read once), the PPE's network, logging and
 * the counters published for eta-stat. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "port_ifindex.h"
#include "decide.h"
#include "real.h"

struct eta_config eta_cfg;
struct eta_net eta_net;

/* Counters live in private memory until the file is mapped, so updates never
 * need a check. */
static struct eta_preload_stats private_stats;
struct eta_preload_stats *eta_stats = &private_stats;

uint64_t eta_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- configuration ----------------------------------------------------- */

static bool env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0 && strcmp(v, "no") != 0;
}

static bool log_has(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        if ((len == n && strncmp(p, word, n) == 0) || (len == 3 && strncmp(p, "all", 3) == 0) ||
            (len == 1 && *p == '1'))
            return true;
        p += len;
        if (*p)
            p++;
    }
    return false;
}

void eta_config_read(void)
{
    const char *sock = getenv("ETA_SOCKET");
    snprintf(eta_cfg.socket_path, sizeof eta_cfg.socket_path, "%s",
             sock && *sock ? sock : DTI_DEFAULT_SOCKET_PATH);
    eta_cfg.require = env_flag("ETA_REQUIRE");
    eta_cfg.disabled = env_flag("ETA_DISABLE");
    const char *log = getenv("ETA_LOG");
    eta_cfg.log_fallback = log_has(log, "fallback");
    eta_cfg.log_accel = log_has(log, "accel");
    eta_cfg.log_debug = log_has(log, "debug");
    eta_cfg.spin_ns = 100000; /* 100 us: preload/README.md "Readiness and waiting" */
    const char *spin = getenv("ETA_SPIN_US");
    if (spin && *spin) {
        char *end;
        unsigned long us = strtoul(spin, &end, 10);
        if (*end == 0 && us <= 1000000)
            eta_cfg.spin_ns = us * 1000ull;
        else
            eta_log("ETA_SPIN_US='%s' is not a number of microseconds (0 to 1000000); using %llu",
                    spin, (unsigned long long)(eta_cfg.spin_ns / 1000));
    }
    const char *net = getenv("ETA_NET");
    if (net)
        snprintf(eta_cfg.net_override, sizeof eta_cfg.net_override, "%s", net);
}

/* ---- logging ----------------------------------------------------------- */

void eta_log(const char *fmt, ...)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "eta[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + ((size_t)m < sizeof buf - (size_t)n - 1 ? (size_t)m : sizeof buf - (size_t)n - 2);
    buf[len++] = '\n';
    int saved = errno;
    ssize_t w = real_write(2, buf, len);
    (void)w;
    errno = saved;
}

/* ---- counters published for eta-stat ----------------------------------- */

static char stats_file[320];
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

static void stats_remove(void)
{
    if (stats_file[0] && eta_stats->pid == (int32_t)getpid())
        unlink(stats_file);
}

/* Maps <socket>.preload/<pid> and moves the counters there. Best effort: a
 * directory the process may not write leaves them private (ETA_LOG still
 * shows every fallback). */
static void stats_publish(void)
{
    char dir[290];
    snprintf(dir, sizeof dir, "%s.preload", eta_cfg.socket_path);
    if (mkdir(dir, 01777) == 0)
        chmod(dir, 01777); /* the umask must not keep other users out */
    snprintf(stats_file, sizeof stats_file, "%s/%d", dir, (int)getpid());
    int fd = open(stats_file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    void *p = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, sizeof(struct eta_preload_stats)) == 0)
        p = mmap(NULL, sizeof(struct eta_preload_stats), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0)
        real_close(fd);
    if (p == MAP_FAILED) {
        ETA_DEBUG("cannot publish counters at %s: %s", stats_file, strerror(errno));
        stats_file[0] = 0;
        return;
    }
    struct eta_preload_stats *s = p;
    memcpy(s, &private_stats, sizeof *s);
    s->magic = ETA_PRELOAD_STATS_MAGIC;
    s->version = ETA_PRELOAD_STATS_VERSION;
    s->pid = (int32_t)getpid();
    FILE *f = fopen("/proc/self/comm", "re");
    if (f) {
        if (fgets(s->comm, sizeof s->comm, f))
            s->comm[strcspn(s->comm, "\n")] = 0;
        fclose(f);
    }
    __atomic_store_n(&eta_stats, s, __ATOMIC_RELEASE);
    static bool registered;
    if (!registered) {
        registered = true;
        atexit(stats_remove);
    }
}

void eta_count(enum eta_reason r, int fd, const char *detail)
{
    ETA_STAT_ADD(fallbacks[r], 1);
    if (r == ETA_R_NONE) {
        if (eta_cfg.log_accel)
            eta_log("fd %d: accelerated (%s)", fd, detail ? detail : "");
    } else if (eta_cfg.log_fallback) {
        eta_log("fd %d: kernel socket, reason %s%s%s", fd, eta_reason_name(r), detail ? ": " : "",
                detail ? detail : "");
    }
}

/* Reads the PPE's network description (ETA_NET, else <socket>.net) into
 * *out: 0, or -1 having said why (out zeroed where it was bad). */
static int net_read(struct eta_net *out)
{
    char why[256]; /* the longest message, "unknown line ...", is about 190 */
    char text[4096];
    const char *src = eta_cfg.net_override;
    char path[300];
    if (!src[0]) {
        snprintf(path, sizeof path, "%s.net", eta_cfg.socket_path);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? real_read(fd, text, sizeof text - 1) : -1;
        if (fd >= 0)
            real_close(fd);
        if (n < 0) {
            eta_log("warning: the PPE publishes no addresses at %s (%s): no socket can be accelerated; "
                    "set ETA_NET='port A.B.C.D/P' to name them",
                    path, strerror(errno));
            return -1;
        }
        text[n] = 0;
        src = text;
    }
    if (eta_net_parse(src, out, why, sizeof why) != 0) {
        eta_log("warning: bad PPE network description %s: %s; no socket will be accelerated",
                eta_cfg.net_override[0] ? "in ETA_NET" : path, why);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

/* The PPE's addresses and routes, at attach. */
void eta_net_load(void)
{
    net_read(&eta_net);
    eta_net_fill_link6(&eta_net); /* a shared port's interface, for link-local scopes */
}

void eta_net_reload(void)
{
    if (eta_cfg.net_override[0])
        return; /* the program's ETA_NET holds for its life */
    struct eta_net fresh;
    memset(&fresh, 0, sizeof fresh);
    if (net_read(&fresh) != 0) {
        eta_log("re-attach: keeping the previous PPE's network description");
        return;
    }
    fresh.link6_ifindex = eta_net.link6_ifindex; /* looked up once per process (port_ifindex.h) */
    fresh.has_link6 = eta_net.has_link6;
    memcpy(fresh.link6, eta_net.link6, sizeof fresh.link6);
    if (memcmp(&fresh, &eta_net, sizeof fresh) == 0)
        return;
    /* Readers take no lock: one that decides while this copy runs may decide
     * one socket by a mix of the two descriptions (kernel or PPE: either is
     * a working socket), never read past the arrays (the counts are bounded). */
    memcpy(&eta_net, &fresh, sizeof fresh);
    eta_log("re-attach: the new PPE's network description differs from the previous one's: %u IPv4 and %u IPv6 "
            "addresses, %u routes%s", fresh.n_ports, fresh.n_ports6, fresh.n_routes + fresh.n_routes6,
            fresh.self_shared ? ", shared with the kernel" : "");
}


void eta_stats_publish_once(void)
{
    pthread_mutex_lock(&stats_lock);
    if (!stats_file[0])
        stats_publish();
    pthread_mutex_unlock(&stats_lock);
}

/* The child's counters are its own; the sockets it inherited are open in it. */
void eta_stats_after_fork(bool joined)
{
    pthread_mutex_init(&stats_lock, NULL);
    uint64_t open = eta_stats->accel_open;
    if (eta_stats != &private_stats) {
        memset(&private_stats, 0, sizeof private_stats);
        eta_stats = &private_stats;
        stats_file[0] = 0;
    }
    if (joined) {
        private_stats.accel_open = open;
        private_stats.attached = 1;
        stats_publish();
    }
}
