/* libdti layer 4, public calls: exec. Handing this process's sockets to the
 * image exec() starts, and that image adopting them. The region and the
 * app-side socket state are memfds (they hold the truth: ring positions,
 * socket table), so the new image maps the same memory; what was private to
 * the old image (contexts, the closed handles, the pool's allocation map)
 * starts empty, as in a fork child. */
#include "api.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static void say(char *why, size_t wl, const char *fmt, ...)
{
    if (!why || !wl)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, wl, fmt, ap);
    va_end(ap);
}

static int set_cloexec(int fd, bool on)
{
    int fl = dti__sys_fcntl(fd, F_GETFD, 0);
    if (fl < 0)
        return -errno;
    fl = on ? fl | FD_CLOEXEC : fl & ~FD_CLOEXEC;
    return dti__sys_fcntl(fd, F_SETFD, fl) < 0 ? -errno : 0;
}

/* The places d keeps descriptors in (links, contexts); call with no lock. */
static int *fd_slot(struct dti_attachment *d, int fd)
{
    for (uint32_t e = 0; e < (d->n_links ? d->n_links : 1); e++) {
        struct dti_attachment *l = d->n_links ? d->links[e] : d;
        if (!l)
            continue;
        int *own[] = {&l->ctl_fd, &l->doorbell_fd, &l->region_fd, &l->priv_fd, &l->fork_fd};
        for (unsigned i = 0; i < sizeof own / sizeof own[0]; i++)
            if (*own[i] == fd)
                return own[i];
        for (struct dti_ctx *c = l->contexts; c; c = c->next_all) {
            if (c->wake_fd == fd)
                return &c->wake_fd;
            if (c->wait_fd == fd)
                return &c->wait_fd;
        }
    }
    return NULL;
}

int dti_fds_all(dti_t *d, int *fds, int max)
{
    int n = 0;
    for (uint32_t e = 0; d && e < d->n_links; e++) {
        struct dti_attachment *l = d->links[e];
        pthread_mutex_lock(&l->lock);
        int own[] = {l->ctl_fd, l->doorbell_fd, l->region_fd, l->priv_fd, l->fork_fd};
        for (unsigned i = 0; i < sizeof own / sizeof own[0]; i++)
            if (own[i] >= 0) {
                if (n < max)
                    fds[n] = own[i];
                n++;
            }
        for (struct dti_ctx *c = l->contexts; c; c = c->next_all) {
            int cf[] = {c->wake_fd, c->wait_fd};
            for (unsigned i = 0; i < 2; i++)
                if (cf[i] >= 0) {
                    if (n < max)
                        fds[n] = cf[i];
                    n++;
                }
        }
        pthread_mutex_unlock(&l->lock);
    }
    return n;
}

int dti_fd_move(dti_t *d, int fd)
{
    if (!d || fd < 0)
        return -ENOENT;
    /* The context list and the control socket's users take the main lock
     * (each link's contexts under its own: take them all, in order). */
    for (uint32_t e = 0; e < d->n_links; e++)
        pthread_mutex_lock(&d->links[e]->lock);
    int *slot = fd_slot(d, fd);
    int rc = -ENOENT;
    if (slot) {
        rc = dti__fd_move_forced(fd);
        if (rc >= 0)
            *slot = rc;
    }
    for (uint32_t e = d->n_links; e-- > 0;)
        pthread_mutex_unlock(&d->links[e]->lock);
    return rc;
}

/* One EXEC (first batch, with the member's end) or EXEC_HOLD message and
 * its answer: how many of the batch the member got. */
static int exec_batch(struct dti_attachment *d, uint32_t type, int pass, const dti_sock_t *h, unsigned n)
{
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = type, .abi_version = DTI_ABI_VERSION,
                            .pid = (uint32_t)getpid(), .index = n};
    for (unsigned i = 0; i < n; i++)
        memcpy(m.text + i * sizeof(uint32_t), &h[i], sizeof(uint32_t));
    int rc = pass >= 0 ? dti__ctl_send_fd(d->ctl_fd, &m, pass) : dti__ctl_send(d->ctl_fd, &m);
    struct dti_ctl_msg r;
    int fd = -1;
    if (rc == 0)
        rc = dti__ctl_recv(d->ctl_fd, &r, &fd, 1);
    if (rc > 0)
        dti__sys_close(fd); /* the PPE sends none with this answer */
    if (rc == -DTI_E_ENGINE_GONE || rc == -EPIPE || rc == -ECONNRESET) {
        dti__mark_dead(d, DTI_E_ENGINE_GONE);
        return -DTI_E_ENGINE_GONE;
    }
    if (rc < 0)
        return rc;
    if (r.type == DTI_CTL_EXECED)
        return r.status >= 0 && (unsigned)r.status <= n ? r.status : -DTI_E_PROTOCOL;
    return r.type == DTI_CTL_REFUSED && r.status > 0 ? -r.status : -DTI_E_PROTOCOL;
}

/* Makes link l's member for the new image holding the n engine handles h
 * (EXEC, then EXEC_HOLD for the rest): its control end in *ctl. Returns how
 * many it holds. */
static int prepare_link(struct dti_attachment *l, const dti_sock_t *h, unsigned n, int *ctl)
{
    *ctl = -1;
    if (!dti__check_alive(l, false))
        return -l->dead_reason;
    if (l->region_fd < 0 || l->priv_fd < 0 || l->doorbell_fd < 0)
        return -EBADF;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    /* No other thread halfway through a request on the control socket. */
    pthread_mutex_lock(&l->lock);
    unsigned first = n < DTI_CTL_HANDLES ? n : DTI_CTL_HANDLES;
    int rc = exec_batch(l, DTI_CTL_EXEC, sv[1], h, first);
    dti__sys_close(sv[1]);
    int granted = rc;
    for (unsigned at = first; rc >= 0 && at < n; at += DTI_CTL_HANDLES) {
        unsigned k = n - at < DTI_CTL_HANDLES ? n - at : DTI_CTL_HANDLES;
        rc = exec_batch(l, DTI_CTL_EXEC_HOLD, -1, h + at, k);
        granted += rc;
    }
    pthread_mutex_unlock(&l->lock);
    if (rc < 0) {
        dti__sys_close(sv[0]); /* the member, if made, leaves */
        return rc;
    }
    *ctl = dti__fd_aside(sv[0]); /* the new image keeps this number */
    return granted;
}

/* link l's descriptors for the new image inheritable (or close-on-exec
 * again: on = false). */
static int link_inheritable(struct dti_attachment *l, int ctl, bool inherit)
{
    int fds[] = {ctl, l->region_fd, l->priv_fd, l->doorbell_fd};
    int rc = 0;
    for (unsigned i = 0; i < 4; i++)
        if (fds[i] >= 0 && set_cloexec(fds[i], !inherit) < 0 && rc == 0)
            rc = -errno;
    return rc;
}

/* ---- several engines: the links and the groups the new image makes again ---
 * A memfd (`dti-exec-links`, inheritable, named by dti_exec_fds.links_fd)
 * holds each engine's four descriptors for the new image, then one record
 * per listener group (its members) and per moved socket (where it went):
 * what libdti kept in process memory only. */
#define EXEC_LINKS_MAGIC 0x4b4e4c44u /* "DLNK" */
#define EXEC_LINKS_MIN_FD 3
enum { EXEC_REC_GROUP = 1, EXEC_REC_MOVE = 2 };
struct exec_links_head {
    uint32_t magic, n_engines, n_records, reserved;
    int32_t fds[DTI_MAX_ENGINES][4]; /* ctl, region, priv, doorbell */
};
struct exec_links_rec {
    uint32_t kind, app, n;
    uint32_t part[DTI_MAX_ENGINES]; /* GROUP: the members; MOVE: part[0] where app moved */
};

/* Sorts the handles to keep by engine (each group member, a moved socket
 * and where it went) into lists[e] (n each), and their records into recs.
 * Returns how many records. */
static uint32_t sort_keep(struct dti_attachment *d, const dti_sock_t *keep, unsigned n, dti_sock_t *lists,
                          unsigned *counts, struct exec_links_rec *recs)
{
    uint32_t n_rec = 0;
    for (unsigned i = 0; i < n; i++) {
        dti_sock_t h = keep[i];
        if (h == DTI_SOCK_INVALID || dti__engine_of(h) >= d->n_links)
            continue; /* grants nothing anywhere */
        struct dti_group *g = dti__group_of_app(d, h);
        dti_sock_t to = g ? DTI_SOCK_INVALID : dti__moved_to(d, h);
        struct exec_links_rec *r = &recs[n_rec];
        *r = (struct exec_links_rec){.app = h};
        if (g) {
            r->kind = EXEC_REC_GROUP;
            for (uint32_t k = 0; k < g->n; k++)
                r->part[r->n++] = g->member[k];
            n_rec++;
        } else if (to != DTI_SOCK_INVALID) {
            r->kind = EXEC_REC_MOVE;
            r->part[r->n++] = to;
            r->part[r->n++] = h; /* the slot it left stays held: no other socket takes that handle */
            n_rec++;
        } else {
            r->part[r->n++] = h;
        }
        for (uint32_t k = 0; k < r->n; k++) {
            uint32_t e = dti__engine_of(r->part[k]);
            lists[e * n + counts[e]++] = r->part[k] & DTI_LOCAL_MASK;
        }
        if (!r->kind)
            *r = (struct exec_links_rec){0};
    }
    return n_rec;
}

/* Writes the links memfd: an inheritable descriptor, or an error. */
static int write_links(struct dti_attachment *d, const int *ctl, const struct exec_links_rec *recs, uint32_t n_rec)
{
    size_t size = sizeof(struct exec_links_head) + sizeof *recs * n_rec;
    int made = dti__fd_aside(memfd_create("dti-exec-links", 0));
    if (made < 0)
        return -errno;
    /* Never 0..2, which a four-value struct dti_exec_fds initializer
     * leaves in links_fd: the new image takes those for "one engine". */
    int fd = made >= EXEC_LINKS_MIN_FD ? made : dti__sys_fcntl(made, F_DUPFD, EXEC_LINKS_MIN_FD);
    if (fd != made)
        dti__sys_close(made);
    if (fd < 0)
        return -EMFILE;
    uint8_t *m = ftruncate(fd, (off_t)size) == 0
                     ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                     : MAP_FAILED;
    if (m == MAP_FAILED) {
        int e = errno;
        dti__sys_close(fd);
        return -e;
    }
    struct exec_links_head *h = (struct exec_links_head *)m;
    *h = (struct exec_links_head){.magic = EXEC_LINKS_MAGIC, .n_engines = d->n_links, .n_records = n_rec};
    for (uint32_t e = 0; e < d->n_links; e++) {
        const struct dti_attachment *l = d->links[e];
        int32_t f[4] = {ctl[e], l->region_fd, l->priv_fd, l->doorbell_fd};
        memcpy(h->fds[e], f, sizeof f);
    }
    memcpy(m + sizeof *h, recs, sizeof *recs * n_rec);
    munmap(m, size);
    return fd;
}

/* Several engines: a member on each, holding its share of the sockets. No
 * heap: this may run in a vfork() child, in its parent's memory. */
static int prepare_links(struct dti_attachment *d, const dti_sock_t *keep, unsigned n, struct dti_exec_fds *out)
{
    size_t lists_size = sizeof(dti_sock_t) * DTI_MAX_ENGINES * (n ? n : 1);
    size_t recs_size = sizeof(struct exec_links_rec) * (n ? n : 1);
    dti_sock_t *lists = mmap(NULL, lists_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct exec_links_rec *recs = mmap(NULL, recs_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int rc = lists == MAP_FAILED || recs == MAP_FAILED ? -ENOMEM : 0;
    unsigned counts[DTI_MAX_ENGINES] = {0};
    int ctl[DTI_MAX_ENGINES];
    for (uint32_t e = 0; e < DTI_MAX_ENGINES; e++)
        ctl[e] = -1;
    uint32_t n_rec = rc == 0 ? sort_keep(d, keep, n, lists, counts, recs) : 0;
    unsigned listed = 0, granted = 0;
    for (uint32_t e = 0; rc == 0 && e < d->n_links; e++) {
        int got = prepare_link(d->links[e], lists + e * n, counts[e], &ctl[e]);
        rc = got < 0 ? got : link_inheritable(d->links[e], ctl[e], true);
        listed += counts[e];
        granted += got > 0 ? (unsigned)got : 0;
    }
    int links_fd = rc == 0 ? write_links(d, ctl, recs, n_rec) : -1;
    if (rc == 0 && links_fd < 0)
        rc = links_fd;
    if (lists != MAP_FAILED)
        munmap(lists, lists_size);
    if (recs != MAP_FAILED)
        munmap(recs, recs_size);
    if (rc < 0) {
        for (uint32_t e = 0; e < d->n_links; e++) {
            if (ctl[e] >= 0)
                dti__sys_close(ctl[e]); /* that member leaves */
            (void)link_inheritable(d->links[e], -1, false);
        }
        return rc;
    }
    struct dti_attachment *l0 = d->links[0];
    *out = (struct dti_exec_fds){ctl[0], l0->region_fd, l0->priv_fd, l0->doorbell_fd, links_fd};
    /* What was refused counts against the sockets the caller listed. */
    unsigned missing = listed - granted;
    return missing >= n ? 0 : (int)(n - missing);
}

int dti_exec_prepare(dti_t *d, const dti_sock_t *keep, unsigned n, struct dti_exec_fds *out)
{
    if (!d || !out || (n && !keep))
        return -EINVAL;
    *out = (struct dti_exec_fds){-1, -1, -1, -1, -1};
    if (!dti__check_alive(d, false))
        return -d->dead_reason;
    if (d->n_links > 1)
        return prepare_links(d, keep, n, out);
    int ctl = -1;
    int granted = prepare_link(d, keep, n, &ctl);
    if (granted < 0)
        return granted;
    *out = (struct dti_exec_fds){ctl, d->region_fd, d->priv_fd, d->doorbell_fd, -1};
    int rc = link_inheritable(d, ctl, true);
    if (rc < 0) {
        dti_exec_abort(d, out);
        *out = (struct dti_exec_fds){-1, -1, -1, -1, -1};
        return rc;
    }
    return granted;
}

/* The links memfd's header, mapped read-only; NULL when fd is not one. */
static const struct exec_links_head *map_links(int fd, size_t *size)
{
    struct stat st;
    char path[64], target[96];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t tl = readlink(path, target, sizeof target - 1);
    if (fd < 0 || tl <= 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size < sizeof(struct exec_links_head))
        return NULL;
    target[tl] = 0;
    if (strncmp(target, "/memfd:dti-exec-links", 21) != 0)
        return NULL;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        return NULL;
    const struct exec_links_head *h = m;
    *size = (size_t)st.st_size;
    if (h->magic != EXEC_LINKS_MAGIC || h->n_engines < 2 || h->n_engines > DTI_MAX_ENGINES ||
        h->n_records > (*size - sizeof *h) / sizeof(struct exec_links_rec)) {
        munmap(m, *size);
        return NULL;
    }
    return h;
}

void dti_exec_abort(dti_t *d, const struct dti_exec_fds *fds)
{
    if (!d || !fds)
        return;
    size_t size = 0;
    const struct exec_links_head *h = fds->links_fd >= EXEC_LINKS_MIN_FD ? map_links(fds->links_fd, &size) : NULL;
    for (uint32_t e = 1; h && e < h->n_engines && e < d->n_links; e++)
        if (h->fds[e][0] >= 0)
            dti__sys_close(h->fds[e][0]); /* that engine's member leaves */
    if (h)
        munmap((void *)h, size);
    if (fds->links_fd >= EXEC_LINKS_MIN_FD)
        dti__sys_close(fds->links_fd);
    if (fds->ctl_fd >= 0)
        dti__sys_close(fds->ctl_fd);
    for (uint32_t e = 0; e < d->n_links; e++)
        (void)link_inheritable(d->links[e], -1, false);
}

/* Closes one engine's handed-over descriptors (an adoption that failed). */
static void close_set(const struct dti_exec_fds *f)
{
    int fds[] = {f->ctl_fd, f->region_fd, f->priv_fd, f->doorbell_fd};
    for (unsigned i = 0; i < 4; i++)
        if (fds[i] >= 0)
            dti__sys_close(fds[i]);
}

/* The descriptor is what the handover says it is. */
static bool is_seqpacket(int fd)
{
    int type = 0, domain = 0;
    socklen_t tl = sizeof type, dl = sizeof domain;
    return dti__sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 &&
           dti__sys_getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) == 0 && type == SOCK_SEQPACKET &&
           domain == AF_UNIX;
}

static bool is_anon_inode(int fd, const char *what)
{
    char path[64], target[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0)
        return false;
    target[n] = 0;
    return strstr(target, what) != NULL;
}

static bool is_memfd(int fd)
{
    struct stat st;
    char path[64], target[96];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return false;
    target[n] = 0;
    return strncmp(target, "/memfd:", 7) == 0;
}

int dti__adopt_one(const struct dti_exec_fds *fds, uint32_t engine, bool main, struct dti_attachment **out,
                   char *why, size_t wl)
{
    *out = NULL;
    if (fds->ctl_fd < 0 || !is_seqpacket(fds->ctl_fd)) {
        say(why, wl, "descriptor %d is not a control connection", fds->ctl_fd);
        return -EBADF;
    }
    if (fds->region_fd < 0 || !is_memfd(fds->region_fd) || fds->priv_fd < 0 || !is_memfd(fds->priv_fd)) {
        say(why, wl, "descriptors %d and %d are not the shared region and socket state", fds->region_fd,
            fds->priv_fd);
        return -EBADF;
    }
    if (fds->doorbell_fd < 0 || !is_anon_inode(fds->doorbell_fd, "eventfd")) {
        say(why, wl, "descriptor %d is not the doorbell", fds->doorbell_fd);
        return -EBADF;
    }
    struct dti_attachment *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->ctl_fd = d->doorbell_fd = d->fork_fd = d->region_fd = d->priv_fd = -1;
    d->engine = engine;
    if (main) {
        d->n_links = 1;
        d->links[0] = d;
    }
    pthread_mutex_init(&d->lock, NULL);
    int rc = dti__map_region(d, fds->region_fd, fds->priv_fd, why, wl);
    /* From here the descriptors are this attachment's (dti_detach closes
     * them): close-on-exec again, as at attach. */
    int own[] = {fds->ctl_fd, fds->region_fd, fds->priv_fd, fds->doorbell_fd};
    for (unsigned i = 0; i < 4; i++) {
        (void)set_cloexec(own[i], true);
        own[i] = dti__fd_aside(own[i]); /* handed over at a low number (an older libdti): moved up */
    }
    d->ctl_fd = own[0];
    d->region_fd = own[1];
    d->priv_fd = own[2];
    d->doorbell_fd = own[3];
    d->pool_blocks = 0; /* the old image's allocation map is gone with it */
    if (rc == 0 && !dti__check_alive(d, true)) {
        say(why, wl, "the PPE no longer serves the sockets handed over at exec");
        rc = -d->dead_reason;
    }
    if (rc < 0) {
        dti_detach(d);
        return rc;
    }
    /* Tells the PPE (eta-stat) who we are, and that the member is complete. */
    struct dti_ctl_msg m = {.magic = DTI_CTL_MAGIC, .type = DTI_CTL_HELLO, .abi_version = DTI_ABI_VERSION,
                            .pid = (uint32_t)getpid()};
    snprintf(m.text, sizeof m.text, "%s", program_invocation_short_name);
    (void)dti__sys_send(d->ctl_fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (main)
        dti__init_tls(d);
    *out = d;
    return 0;
}

int dti__adopt_links(struct dti_attachment *d, const struct dti_exec_fds *per, uint32_t n_engines, char *why,
                     size_t wl)
{
    for (uint32_t e = 1; e < n_engines; e++) {
        struct dti_attachment *l = NULL;
        int rc = dti__adopt_one(&per[e], e, false, &l, why, wl);
        if (rc < 0) {
            if (rc == -EBADF) /* refused before it took them */
                for (uint32_t k = e; k < n_engines; k++)
                    close_set(&per[k]);
            else
                for (uint32_t k = e + 1; k < n_engines; k++)
                    close_set(&per[k]);
            return rc;
        }
        d->links[e] = l;
        d->n_links = e + 1;
    }
    return 0;
}

/* The groups and moves the old image had, in d. */
static void restore_records(struct dti_attachment *d, const struct exec_links_head *h)
{
    const struct exec_links_rec *r = (const struct exec_links_rec *)(h + 1);
    for (uint32_t i = 0; i < h->n_records; i++) {
        if (r[i].n > DTI_MAX_ENGINES)
            continue;
        if (r[i].kind == EXEC_REC_GROUP)
            (void)dti__group_restore(d, r[i].app, r[i].part, r[i].n);
        else if (r[i].kind == EXEC_REC_MOVE && r[i].n >= 1)
            (void)dti__move_restore(d, r[i].app, r[i].part[0]);
    }
}

int dti_adopt_exec(const struct dti_exec_fds *fds, dti_t **out, char *why, size_t wl)
{
    if (!fds || !out)
        return -EINVAL;
    *out = NULL;
    size_t size = 0;
    const struct exec_links_head *h = NULL;
    if (fds->links_fd >= EXEC_LINKS_MIN_FD && !(h = map_links(fds->links_fd, &size))) {
        say(why, wl, "descriptor %d is not the engines' handover", fds->links_fd);
        return -EBADF;
    }
    struct dti_attachment *d = NULL;
    int rc = dti__adopt_one(fds, 0, true, &d, why, wl);
    if (h) {
        struct dti_exec_fds per[DTI_MAX_ENGINES];
        for (uint32_t e = 0; e < h->n_engines; e++)
            per[e] = (struct dti_exec_fds){h->fds[e][0], h->fds[e][1], h->fds[e][2], h->fds[e][3], -1};
        if (rc == 0)
            rc = dti__adopt_links(d, per, h->n_engines, why, wl);
        else if (rc != -EBADF)
            for (uint32_t e = 1; e < h->n_engines; e++)
                close_set(&per[e]);
        if (rc == 0)
            restore_records(d, h);
        munmap((void *)h, size);
        if (rc != -EBADF || d)
            dti__sys_close(fds->links_fd);
    }
    if (rc < 0) {
        if (d)
            dti_detach(d);
        return rc;
    }
    *out = d;
    return 0;
}

int dti_own_fds(dti_t *d, int *fds, int max)
{
    int n = 0;
    for (uint32_t e = 0; d && e < d->n_links; e++) {
        struct dti_attachment *l = d->links[e];
        int own[] = {l->ctl_fd, l->doorbell_fd, l->region_fd, l->priv_fd};
        for (unsigned i = 0; i < 4; i++)
            if (own[i] >= 0) {
                if (n < max)
                    fds[n] = own[i];
                n++;
            }
    }
    return n;
}
