/* A UDP socket's multicast record (mcast_record.h): its checks. The pass
 * record's file is the sender's, but may be stale or forged: everything is
 * checked before anything is used. */
#include "mcast_record.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(struct eta_mcast_rec) == 52, "the membership record's layout");

int eta_record_refused(char *why, size_t wl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, wl, fmt, ap);
    va_end(ap);
    return -1;
}

bool eta_mcast_rec_ok(bool v6_socket, const struct eta_mcast_rec *r)
{
    static const uint8_t zero[16];
    bool ok = r->v6 <= 1 && r->has_source <= 1 && r->zero == 0 && r->ifindex >= 0;
    if (ok && r->v6)
        ok = v6_socket && r->group6[0] == 0xff && !r->group4 && !r->source4 && !r->if_addr4 &&
             (r->has_source || memcmp(r->source6, zero, sizeof zero) == 0);
    else if (ok)
        ok = (r->group4 >> 28) == 14 && (r->has_source || !r->source4) && memcmp(r->group6, zero, sizeof zero) == 0 &&
             memcmp(r->source6, zero, sizeof zero) == 0;
    return ok;
}

int eta_pass_mcast_read(int fd, int v6_socket, struct eta_pass_mcast_head *h, struct eta_mcast_rec *out, char *why,
                        size_t wl)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return eta_record_refused(why, wl, "%s", strerror(errno));
    if (!S_ISREG(st.st_mode) || (st.st_uid != geteuid() && st.st_uid != 0))
        return eta_record_refused(why, wl, "not a regular file of this user (uid %u)", (unsigned)st.st_uid);
    if (st.st_size < (off_t)sizeof *h || pread(fd, h, sizeof *h, 0) != (ssize_t)sizeof *h)
        return eta_record_refused(why, wl, "too short (%lld bytes)", (long long)st.st_size);
    if (h->magic != ETA_PASS_MCAST_MAGIC || h->version != ETA_PASS_MCAST_VERSION ||
        h->rec_size != sizeof(struct eta_mcast_rec))
        return eta_record_refused(why, wl, "not a record of this shim (magic %#x, version %u, records of %u bytes)", h->magic,
                   (unsigned)h->version, (unsigned)h->rec_size);
    if (h->n > ETA_MCAST_REC_MAX || (uint64_t)st.st_size != sizeof *h + (uint64_t)h->n * sizeof *out)
        return eta_record_refused(why, wl, "%u memberships (at most %u) do not fit its size %lld", h->n, ETA_MCAST_REC_MAX,
                   (long long)st.st_size);
    if ((h->flags & ~(uint32_t)(ETA_PASS_MCAST_V6 | ETA_PASS_MCAST_IF4_OURS)) ||
        !(h->flags & ETA_PASS_MCAST_V6) != !v6_socket || ((h->flags & ETA_PASS_MCAST_IF4_OURS) && !h->mc_if4))
        return eta_record_refused(why, wl, "flags %#x (IP_MULTICAST_IF %#x) do not fit the socket received", h->flags, h->mc_if4);
    const size_t bytes = h->n * sizeof *out;
    if (bytes && pread(fd, out, bytes, sizeof *h) != (ssize_t)bytes)
        return eta_record_refused(why, wl, "cannot read its memberships");
    for (uint32_t i = 0; i < h->n; i++)
        if (!eta_mcast_rec_ok(v6_socket, &out[i]))
            return eta_record_refused(why, wl, "membership %u is not one the shim makes", i);
    return 0;
}

