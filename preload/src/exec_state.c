/* Reading the exec handover (exec_state.h). The environment variable and the
 * memfd may be stale (a program passed its environment on to another) or
 * forged: everything is checked before anything is used. */
#include "exec_state.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(offsetof(struct eta_exec_entry, local6_ip) == ETA_EXEC_ENTRY_V1_SIZE, "version 1's entry is a prefix");
_Static_assert(offsetof(struct eta_exec_entry, mc_if4) == ETA_EXEC_ENTRY_V2_SIZE, "version 2's entry is a prefix");

static bool fd_ok(int32_t fd, int max_fd) { return fd >= 0 && fd < max_fd; }

/* Some socket entry is listener fd l. */
static bool is_listener(const struct eta_exec_entry *v, uint32_t n, int32_t l)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i].kind == ETA_EXEC_SOCKET && v[i].fd == l && (v[i].flags & ETA_EXEC_LISTENING))
            return true;
    return false;
}

static int check_entries(const struct eta_exec_head *h, const struct eta_exec_entry *v, int state_fd,
                         int max_fd, char *why, size_t wl)
{
    const int32_t own[] = {h->ctl_fd, h->region_fd, h->priv_fd, h->doorbell_fd, state_fd, h->links_fd};
    const unsigned n_own = h->flags & ETA_EXEC_LINKS ? 6 : 5;
    for (unsigned i = 0; i < n_own; i++) {
        if (!fd_ok(own[i], max_fd))
            return eta_record_refused(why, wl, "descriptor %d is out of range", (int)own[i]);
        for (unsigned j = 0; j < i; j++)
            if (own[i] == own[j])
                return eta_record_refused(why, wl, "descriptor %d is named twice", (int)own[i]);
    }
    for (uint32_t i = 0; i < h->n; i++) {
        const struct eta_exec_entry *e = &v[i];
        if (e->kind == ETA_EXEC_STASHED) {
            if (e->fd != -1 || !is_listener(v, h->n, e->listener_fd))
                return eta_record_refused(why, wl, "entry %u: a stashed connection without its listener", i);
            continue;
        }
        if (e->kind != ETA_EXEC_SOCKET)
            return eta_record_refused(why, wl, "entry %u: unknown kind %u", i, e->kind);
        if (!fd_ok(e->fd, max_fd))
            return eta_record_refused(why, wl, "entry %u: descriptor %d is out of range", i, (int)e->fd);
        for (unsigned j = 0; j < n_own; j++)
            if (e->fd == own[j])
                return eta_record_refused(why, wl, "entry %u: descriptor %d is libdti's", i, (int)e->fd);
        for (uint32_t j = 0; j < i; j++)
            if (v[j].kind == ETA_EXEC_SOCKET && v[j].fd == e->fd)
                return eta_record_refused(why, wl, "entry %u: descriptor %d is named twice", i, (int)e->fd);
        static const uint8_t zero[16];
        const uint32_t v6_flags = ETA_EXEC_V6ONLY | ETA_EXEC_LOCAL6 | ETA_EXEC_V6ONLY_READ0;
        if (h->version == 1 && (e->flags & v6_flags))
            return eta_record_refused(why, wl, "entry %u: version 2 flags in a version 1 handover", i);
        if (!(e->flags & ETA_EXEC_V6) && ((e->flags & v6_flags) ||
                                          memcmp(e->local6_ip, zero, sizeof zero) != 0))
            return eta_record_refused(why, wl, "entry %u: IPv6 fields on an IPv4 socket", i);
        if (e->rcvtimeo_ms < -1 || e->sndtimeo_ms < -1 || e->pending_error < 0 || e->pending_error > 4095)
            return eta_record_refused(why, wl, "entry %u: options out of range", i);
        if (h->version < 3 && (e->flags & ETA_EXEC_MC_IF4_OURS))
            return eta_record_refused(why, wl, "entry %u: version 3 flags in a version %u handover", i, (unsigned)h->version);
        if (!(e->flags & ETA_EXEC_DGRAM) && (e->mc_if4 || e->n_mcast || (e->flags & ETA_EXEC_MC_IF4_OURS)))
            return eta_record_refused(why, wl, "entry %u: multicast fields on a TCP socket", i);
        if (e->n_mcast > ETA_EXEC_MCAST_MAX || ((e->flags & ETA_EXEC_MC_IF4_OURS) && !e->mc_if4))
            return eta_record_refused(why, wl, "entry %u: %u memberships (at most %u), or IP_MULTICAST_IF without an address", i,
                       e->n_mcast, ETA_EXEC_MCAST_MAX);
    }
    return 0;
}

static int check_mcast(const struct eta_exec_entry *e, const struct eta_mcast_rec *r, uint32_t k, char *why,
                       size_t wl)
{
    return eta_mcast_rec_ok(e->flags & ETA_EXEC_V6, r) ? 0
                                               : eta_record_refused(why, wl, "membership %u (of fd %d) is not one the shim makes", k,
                                                     (int)e->fd);
}

/* Version 3's memberships after the entries: their number is the sum of
 * the entries' n_mcast, each checked against its entry. */
static int read_mcast(int fd, off_t at, off_t size, const struct eta_exec_head *h, const struct eta_exec_entry *v,
                      struct eta_mcast_rec **out, char *why, size_t wl)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < h->n; i++)
        total += v[i].n_mcast;
    if ((uint64_t)size != (uint64_t)at + total * sizeof(struct eta_mcast_rec))
        return eta_record_refused(why, wl, "%llu memberships do not fit its size %lld", (unsigned long long)total, (long long)size);
    if (!total)
        return 0;
    struct eta_mcast_rec *m = calloc(total, sizeof *m);
    if (!m)
        return eta_record_refused(why, wl, "out of memory");
    if (pread(fd, m, total * sizeof *m, at) != (ssize_t)(total * sizeof *m)) {
        free(m);
        return eta_record_refused(why, wl, "cannot read the handover's memberships");
    }
    uint64_t k = 0;
    for (uint32_t i = 0; i < h->n; i++)
        for (uint32_t j = 0; j < v[i].n_mcast; j++, k++)
            if (check_mcast(&v[i], &m[k], (uint32_t)k, why, wl) < 0) {
                free(m);
                return -1;
            }
    if (out)
        *out = m;
    else
        free(m);
    return 0;
}

int eta_exec_state_read(int fd, pid_t pid, int max_fd, struct eta_exec_head *head,
                        struct eta_exec_entry **entries, struct eta_mcast_rec **mcast, char *why, size_t wl)
{
    *entries = NULL;
    if (mcast)
        *mcast = NULL;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return eta_record_refused(why, wl, "descriptor %d: %s", fd, strerror(errno));
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof *head)
        return eta_record_refused(why, wl, "descriptor %d is not a handover (size %lld)", fd, (long long)st.st_size);
    if (pread(fd, head, sizeof *head, 0) != (ssize_t)sizeof *head)
        return eta_record_refused(why, wl, "cannot read the handover");
    const size_t esize = head->version == 1   ? ETA_EXEC_ENTRY_V1_SIZE
                         : head->version == 2 ? ETA_EXEC_ENTRY_V2_SIZE
                                              : sizeof(struct eta_exec_entry);
    if (head->magic != ETA_EXEC_MAGIC || head->version < 1 || head->version > ETA_EXEC_VERSION)
        return eta_record_refused(why, wl, "not a handover of this shim (magic %#x, version %u; this shim reads 1 to %u)",
                   head->magic, (unsigned)head->version, ETA_EXEC_VERSION);
    if (head->entry_size != esize)
        return eta_record_refused(why, wl, "version %u entries of %u bytes, not %zu", (unsigned)head->version,
                   (unsigned)head->entry_size, esize);
    if (head->pid != (int32_t)pid)
        return eta_record_refused(why, wl, "stale: written by process %d, this is %d", (int)head->pid, (int)pid);
    const uint64_t mcast_at = sizeof *head + (uint64_t)head->n * esize; /* version 3: the memberships */
    if (head->n == 0 || head->n > ETA_EXEC_MAX_ENTRIES || (uint64_t)st.st_size < mcast_at ||
        (head->version < 3 && (uint64_t)st.st_size != mcast_at))
        return eta_record_refused(why, wl, "%u entries do not fit its size %lld", head->n, (long long)st.st_size);
    size_t bytes = esize * head->n;
    struct eta_exec_entry *v = calloc(head->n, sizeof *v);
    if (!v)
        return eta_record_refused(why, wl, "out of memory");
    if (pread(fd, v, bytes, sizeof *head) != (ssize_t)bytes) {
        free(v);
        return eta_record_refused(why, wl, "cannot read the handover's entries");
    }
    if (esize != sizeof *v) /* versions 1 and 2: each entry to its place, its later fields zero */
        for (uint32_t i = head->n; i-- > 0;) {
            struct eta_exec_entry e = {0};
            memcpy(&e, (const char *)v + (size_t)i * esize, esize);
            v[i] = e;
        }
    if (check_entries(head, v, fd, max_fd, why, wl) < 0 ||
        read_mcast(fd, (off_t)mcast_at, st.st_size, head, v, mcast, why, wl) < 0) {
        free(v);
        return -1;
    }
    *entries = v;
    return 0;
}
