/* eta/preload_stats.h: what libeta-preload.so publishes for eta-stat.
 *
 * Every process running under the shim that creates a socket keeps one file
 *     <control socket path>.preload/<pid>
 * (default /run/eta/ppe.sock.preload/1234), a fixed-size binary struct
 * below, mapped shared. The shim updates the counters with relaxed atomic
 * adds; readers map the file read-only and may see values mid-update but
 * never torn 64-bit words. The process removes its file when it exits
 * normally; a reader skips (and may delete) files whose pid no longer
 * exists (kill(pid, 0) fails with ESRCH).
 *
 * C11 and C++ compatible; no dependency.
 */
#ifndef ETA_PRELOAD_STATS_H
#define ETA_PRELOAD_STATS_H

#include <stdint.h>

#define ETA_PRELOAD_STATS_MAGIC 0x31444c5250415445ull /* "ETAPRLD1" */
#define ETA_PRELOAD_STATS_VERSION 1u

/* Reasons a socket went to the kernel; index into `fallbacks`. Same order as
 * enum eta_reason in preload/src/decide.h. */
#define ETA_PRELOAD_REASONS(X) \
    X(0, "accelerated")        \
    X(1, "not-inet")           \
    X(2, "ipv6")               \
    X(3, "not-stream")         \
    X(4, "not-tcp")            \
    X(5, "no-ppe")             \
    X(6, "not-routed")         \
    X(7, "loopback")           \
    X(8, "kernel-address")     \
    X(9, "ppe-refused")        \
    X(10, "fd-range")          \
    X(11, "fork-child")        \
    X(12, "disabled")          \
    X(13, "local")
#define ETA_PRELOAD_N_REASONS 16

struct eta_preload_stats {
    uint64_t magic;
    uint32_t version;
    int32_t pid;
    char comm[16];
    /* 1 while attached to a PPE, 0 when not (never attached, or it went). */
    uint32_t attached;
    /* Times this process attached again to a PPE that came back (it was the
     * padding word before: older files read 0). */
    uint32_t reattaches;
    /* fallbacks[0] counts sockets that went to the PPE; the rest count
     * sockets sent to the kernel, by reason. */
    uint64_t fallbacks[ETA_PRELOAD_N_REASONS];
    uint64_t accel_open;      /* accelerated sockets open now */
    uint64_t accepted;        /* connections accepted through the PPE */
    uint64_t kernel_accepted; /* connections accepted from the kernel half of an INADDR_ANY listener */
    uint64_t sleeps;          /* waits that went to sleep after spinning */
    uint64_t spins;           /* waits that ended while spinning */
    /* Appended in version 1 (older files end before it): calls refused on an
     * accelerated socket because the kernel would have to move its bytes
     * (splice, sendfile or copy_file_range with it as the source). */
    uint64_t bypass_refused;
    /* Appended after it (older files end before them): large blocking reads
     * the engine wrote straight into the program's buffer (posted receive),
     * the bytes it wrote so, and posts it refused (it may not write into this
     * process: those reads copy from the ring). */
    uint64_t posted_reads;
    uint64_t posted_bytes;
    uint64_t post_refused;
    /* Appended after them (older files end before them): receives on a UDP
     * socket bound to INADDR_ANY (a hybrid) that looked at its kernel half (one
     * non-blocking recvmsg system call each), and those that found nothing
     * there. */
    uint64_t udp_kernel_looks;
    uint64_t udp_kernel_empty;
    /* Appended after them (older files end before them): sleeps the shim's
     * watchdog ended (it bounds every sleep on the PPE at 1 s: an idle
     * waiter counts one a second), and of those, the ones whose look found
     * a socket ready that no wakeup had announced (a lost wakeup: 0 unless
     * something is wrong; preload/README.md "The watchdog"). */
    uint64_t watchdog_wakes;
    uint64_t lost_wakeups;
};

/* ---- reading them (for eta-stat and other tools) ------------------------
 * eta_preload_stats_each(socket_path, fn, arg) calls fn once for each live
 * process publishing counters next to the control socket socket_path (a
 * snapshot copied out of <socket_path>.preload/<pid>). Files that are short,
 * of another magic or version, or name another pid are skipped, as are files
 * of processes that no longer exist. fn returns 0 to go on, anything else to
 * stop. Returns the number of processes passed to fn, or -errno when the
 * directory cannot be read (-ENOENT: no process ever published). Needs only
 * libc; usable from C and C++. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline int eta_preload_stats_each(const char *socket_path,
                                         int (*fn)(const struct eta_preload_stats *st, void *arg), void *arg)
{
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s.preload", socket_path) >= (int)sizeof dir)
        return -ENAMETOOLONG;
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int listed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end = NULL;
        long pid = strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || pid <= 0)
            continue;
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct eta_preload_stats st;
        ssize_t n = read(fd, &st, sizeof st);
        close(fd);
        if (n != (ssize_t)sizeof st || st.magic != ETA_PRELOAD_STATS_MAGIC ||
            st.version != ETA_PRELOAD_STATS_VERSION || st.pid != (int32_t)pid)
            continue;
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            continue; /* died without removing its file */
        st.comm[sizeof st.comm - 1] = '\0';
        listed++;
        if (fn(&st, arg) != 0)
            break;
    }
    closedir(d);
    return listed;
}

#endif
