/* exec: accelerated sockets that are not close-on-exec outlive exec(), as
 * kernel sockets do (inetd-style launchers, socat EXEC:, CGI, a server that
 * re-executes itself).
 *
 * Before the exec, the wrappers below make the new image a member of this
 * process's group in the PPE holding exactly those sockets
 * (dti_exec_prepare) and write a handover into an inheritable memfd named by
 * ETA_EXEC_STATE=<fd> in the new environment: libdti's descriptors, and per
 * descriptor its socket handle and what the shim keeps privately (listening,
 * non-blocking, hybrid, timeouts...). The shim of the new image reads it once
 * in its constructor (eta_exec_adopt), removes the variable, and adopts. If
 * exec fails, everything is undone and the error returned unchanged. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accept.h"
#include "attach.h"
#include "config.h"
#include "exec_handover.h"
#include "exec_state.h"
#include "fdtable.h"
#include "real.h"
#include "shim.h"
#include "sock6.h"
#include "sockobj.h"
#include "udp.h"
#include "udp_mcast.h"
#include "wait.h"

extern char **environ;

/* ---- the old image: before exec ----------------------------------------- */

struct exec_prep {
    bool active;
    int state_fd;
    struct dti_exec_fds fds;
    char **envp;      /* the environment handed to exec (mmap'd) */
    size_t envp_size;
    char var[48];     /* "ETA_EXEC_STATE=<fd>" */
    char *preload;    /* "LD_PRELOAD=..." put back for the new image (mmap'd), or NULL */
    size_t preload_size;
};

/* envp's "NAME=..." entry, or NULL. */
static const char *env_entry(char *const envp[], const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], name, len) == 0 && envp[i][len] == '=')
            return envp[i];
    return NULL;
}

/* The new image will load the shim only if its environment says so. */
static bool env_preloads_us(char *const envp[])
{
    const char *e = env_entry(envp, "LD_PRELOAD");
    return e && strstr(e + 11, "libeta-preload") != NULL;
}

/* ---- what the new image needs from this one's start-up environment ------- */

/* A program may exec with an environment of its own making: nginx's binary
 * upgrade passes only NGINX=<listeners> and TZ. Handing sockets to an image
 * that does not load the shim would leave them dead placeholders there, so
 * when there are sockets to hand over, the shim's LD_PRELOAD entry and the
 * ETA_* settings this process started with go back into what the program
 * passes (its own values win). Without sockets to hand over, the program's
 * environment is left exactly as given. Recorded at load, before the
 * program can change its environment. */
static const char *const carried_names[] = {"ETA_SOCKET", "ETA_NET", "ETA_LOG", "ETA_REQUIRE", "ETA_SPIN_US"};
#define N_CARRIED (sizeof carried_names / sizeof carried_names[0])
static char *carried[N_CARRIED]; /* "NAME=value" as at load, or NULL */
static char shim_path[4096];     /* our entry of LD_PRELOAD at load, or "" */

/* The LD_PRELOAD word (':' or ' ' separated) naming this library. */
static void remember_shim_path(const char *list)
{
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ": ");
        if (len > 0 && len < sizeof shim_path && memmem(p, len, "libeta-preload", 14)) {
            memcpy(shim_path, p, len);
            shim_path[len] = 0;
            return;
        }
        p += len + (p[len] != 0);
    }
}

__attribute__((constructor)) static void remember_start_env(void)
{
    remember_shim_path(getenv("LD_PRELOAD"));
    for (size_t i = 0; i < N_CARRIED; i++) {
        const char *v = getenv(carried_names[i]);
        if (v && asprintf(&carried[i], "%s=%s", carried_names[i], v) < 0)
            carried[i] = NULL;
    }
}

/* Entries build_env() adds beside envp's own (the ETA_* ones it lacks, and
 * LD_PRELOAD when it does not name the shim). */
static size_t env_additions(char *const envp[])
{
    size_t n = env_preloads_us(envp) ? 0 : 1;
    for (size_t i = 0; i < N_CARRIED; i++)
        n += carried[i] && !env_entry(envp, carried_names[i]);
    return n;
}

/* "LD_PRELOAD=<shim>" before whatever envp preloads, in mmap'd memory (this
 * may run in a vfork child, which must not touch the parent's heap). */
static bool make_preload(struct exec_prep *p, char *const envp[])
{
    const char *theirs = env_entry(envp, "LD_PRELOAD");
    const char *rest = theirs && theirs[11] ? theirs + 11 : NULL;
    p->preload_size = 12 + strlen(shim_path) + (rest ? 1 + strlen(rest) : 0);
    p->preload = mmap(NULL, p->preload_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p->preload == MAP_FAILED) {
        p->preload = NULL;
        return false;
    }
    snprintf(p->preload, p->preload_size, "LD_PRELOAD=%s%s%s", shim_path, rest ? ":" : "", rest ? rest : "");
    return true;
}

static void fill_entry(struct eta_exec_entry *e, int fd, struct eta_sock *s)
{
    *e = (struct eta_exec_entry){.fd = fd, .handle = s->h, .kind = ETA_EXEC_SOCKET, .listener_fd = -1};
    e->flags = (s->listening ? ETA_EXEC_LISTENING : 0) | (atomic_load(&s->nonblock) ? ETA_EXEC_NONBLOCK : 0) |
               (s->hybrid ? ETA_EXEC_HYBRID : 0) | (s->v6 ? ETA_EXEC_V6 : 0) | (s->dgram ? ETA_EXEC_DGRAM : 0) |
               (s->bound_kernel ? ETA_EXEC_BOUND_KERNEL : 0) |
               (s->connect_started ? ETA_EXEC_CONNECT_STARTED : 0) |
               (s->connect_reported ? ETA_EXEC_CONNECT_REPORTED : 0) |
               (atomic_load(&s->shut_wr) ? ETA_EXEC_SHUT_WR : 0) |
               (atomic_load(&s->shut_rd) ? ETA_EXEC_SHUT_RD : 0) |
               (s->v6 && s->v6only ? ETA_EXEC_V6ONLY : 0) | (s->v6 && s->local6 ? ETA_EXEC_LOCAL6 : 0) |
               (s->v6 && s->v6only_read0 ? ETA_EXEC_V6ONLY_READ0 : 0) |
               (s->dgram && s->mc_if4_ours && s->mc_if4 ? ETA_EXEC_MC_IF4_OURS : 0) |
               (s->hybrid && s->udp_kself ? ETA_EXEC_UDP_KSELF : 0);
    e->mc_if4 = s->dgram ? s->mc_if4 : 0;
    if (s->v6 && s->local6)
        eta_local6_ip(s, e->local6_ip); /* :: where it names none here: the next image refuses it too */
    e->backlog = s->backlog;
    e->pending_error = atomic_load(&s->pending_error);
    e->rcvtimeo_ms = s->rcvtimeo_ms;
    e->sndtimeo_ms = s->sndtimeo_ms;
    e->local_ip = s->local.ip;
    e->local_port = s->local.port;
    e->kernel_port = s->kernel_port;
}

/* Calls fn for every descriptor naming an accelerated socket of the current
 * attachment (not an orphan of a parent's, not one of a PPE that went). */
static void each_accel(void (*fn)(int fd, struct eta_sock *s, void *arg), void *arg)
{
    long tracked = atomic_load(&eta_tracked), seen = 0;
    for (int fd = 0; fd < ETA_FD_MAX && seen < tracked; fd++) {
        struct eta_obj *o = eta_fd_peek(fd);
        if (!o)
            continue;
        seen++;
        struct eta_sock *s = (struct eta_sock *)o;
        if (o->kind == ETA_OBJ_SOCK && atomic_load(&s->state) == ETA_SOCK_ACCEL &&
            s->generation == eta_generation && s->h != DTI_SOCK_INVALID)
            fn(fd, s, arg);
    }
}

static void release_one(int fd, struct eta_sock *s, void *arg)
{
    (void)fd;
    dti_recv_flush(arg, s->h);
}

/* libdti tells the engine of consumed receive bytes in batches. A process
 * that leaves without closing its sockets (exit, or an exec where some are
 * close-on-exec) tells it first: otherwise the engine, when the last process
 * holding such a socket is gone, sees bytes never taken and resets the
 * connection instead of finishing it (FIN) — inetd-style programs (cat under
 * socat's EXEC:...,nofork) exit without closing stdin and stdout. */
static void release_owed(bool may_make_context)
{
    if (!atomic_load(&eta_tracked) || atomic_load(&eta_engine_dead) || !eta_dti_attached())
        return;
    dti_ctx_t *c = may_make_context ? eta_ctx() : eta_ctx_cached();
    if (!c)
        return;
    each_accel(release_one, c);
}

__attribute__((destructor)) static void release_owed_at_exit(void) { release_owed(true); }

/* ---- a vfork() child's own descriptors ---------------------------------- */

/* A vfork child (CPython's subprocess) shares the shim's memory with its
 * parent, so its dup2()s and close()s leave the descriptor map alone
 * (sock.c). What it did is noted here instead, for its exec to hand over the
 * right sockets (subprocess.Popen(stdin=conn) dup2s the connection onto 0).
 * Keyed by the child's pid: a later vfork child starts afresh. */
#define VFORK_NOTES 32
static struct {
    pid_t pid;
    unsigned n;
    struct {
        int fd;
        struct eta_obj *o; /* NULL: not one of ours (closed, or another file) */
    } d[VFORK_NOTES];
} vfork_notes;

static bool vfork_noted(int fd, struct eta_obj **o)
{
    if (vfork_notes.pid != getpid())
        return false;
    for (unsigned i = 0; i < vfork_notes.n; i++)
        if (vfork_notes.d[i].fd == fd) {
            *o = vfork_notes.d[i].o;
            return true;
        }
    return false;
}

/* The object descriptor fd names in this process (a vfork child's notes first). */
static struct eta_obj *obj_at(int fd)
{
    struct eta_obj *o;
    return vfork_noted(fd, &o) ? o : eta_fd_peek(fd);
}

void eta_vfork_note(int fd, int from)
{
    pid_t me = getpid();
    if (vfork_notes.pid != me) {
        vfork_notes.n = 0;
        vfork_notes.pid = me;
    }
    struct eta_obj *o = from >= 0 ? obj_at(from) : NULL;
    for (unsigned i = 0; i < vfork_notes.n; i++)
        if (vfork_notes.d[i].fd == fd) {
            vfork_notes.d[i].o = o;
            return;
        }
    if (vfork_notes.n < VFORK_NOTES)
        vfork_notes.d[vfork_notes.n++].fd = fd, vfork_notes.d[vfork_notes.n - 1].o = o;
}

/* The accelerated descriptors exec keeps (not FD_CLOEXEC), and connections
 * their listeners' stashes hold. Entries go to a mmap'd array. */
static bool keep_fd(int fd, struct eta_obj *o, struct eta_exec_entry *v, uint32_t *n, size_t cap, bool vfork)
{
    if (!o || o->kind != ETA_OBJ_SOCK)
        return false;
    struct eta_sock *s = (struct eta_sock *)o;
    if (atomic_load(&s->state) != ETA_SOCK_ACCEL || s->generation != eta_generation || s->h == DTI_SOCK_INVALID)
        return false;
    int fl = real_fcntl(fd, F_GETFD);
    struct stat st;
    if (fl < 0 || (fl & FD_CLOEXEC) || *n + 1 + DTI_ACCEPT_MAX > cap || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return false;
    fill_entry(&v[(*n)++], fd, s);
    if (s->listening && vfork) {
        /* The parent lives on and keeps accepting on it: from now on both
         * take one connection at a time (as after fork), and what its stash
         * holds stays its own. */
        eta_listeners_shared = true;
    } else if (s->listening) {
        dti_sock_t stashed[DTI_ACCEPT_MAX];
        unsigned k = eta_stash_export(s, stashed, DTI_ACCEPT_MAX);
        for (unsigned i = 0; i < k; i++)
            v[(*n)++] = (struct eta_exec_entry){.fd = -1, .handle = stashed[i], .kind = ETA_EXEC_STASHED,
                                                .listener_fd = fd};
    }
    return true;
}

static struct eta_exec_entry *collect(uint32_t *n_out, size_t *size_out)
{
    long tracked = atomic_load(&eta_tracked);
    size_t cap = (size_t)(tracked + VFORK_NOTES) * (1 + DTI_ACCEPT_MAX);
    size_t size = sizeof(struct eta_exec_entry) * cap;
    struct eta_exec_entry *v = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED)
        return NULL;
    uint32_t n = 0;
    long seen = 0;
    const bool vfork = eta_vfork_child();
    for (int fd = 0; fd < ETA_FD_MAX && seen < tracked; fd++) {
        struct eta_obj *o = eta_fd_peek(fd);
        if (!o)
            continue;
        seen++;
        keep_fd(fd, obj_at(fd), v, &n, cap, vfork);
    }
    /* A vfork child's descriptors the map does not name (dup2 targets). */
    for (unsigned i = 0; vfork && vfork_notes.pid == getpid() && i < vfork_notes.n; i++)
        if (!eta_fd_peek(vfork_notes.d[i].fd))
            keep_fd(vfork_notes.d[i].fd, vfork_notes.d[i].o, v, &n, cap, vfork);
    *n_out = n;
    *size_out = size;
    return v;
}

/* Version 3's memberships: each UDP entry's engine memberships (the shim's
 * record, udp_mcast.c), in entry order, in a mmap'd array (*size_out bytes;
 * NULL when there are none). */
static struct eta_mcast_rec *collect_mcast(struct eta_exec_entry *v, uint32_t n, uint32_t *total, size_t *size_out)
{
    size_t cap = 0;
    for (uint32_t i = 0; i < n; i++)
        cap += v[i].kind == ETA_EXEC_SOCKET && (v[i].flags & ETA_EXEC_DGRAM) ? ETA_EXEC_MCAST_MAX : 0;
    *total = 0;
    *size_out = cap * sizeof(struct eta_mcast_rec);
    struct eta_mcast_rec *m = cap ? mmap(NULL, *size_out, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                   : NULL;
    if (m == MAP_FAILED)
        return NULL;
    for (uint32_t i = 0; m && i < n; i++) {
        struct eta_obj *o = v[i].kind == ETA_EXEC_SOCKET && (v[i].flags & ETA_EXEC_DGRAM) ? obj_at(v[i].fd) : NULL;
        v[i].n_mcast = o && o->kind == ETA_OBJ_SOCK ? eta_udp_mcast_export((struct eta_sock *)o, m + *total) : 0;
        *total += v[i].n_mcast;
    }
    return m;
}

static void undo(struct exec_prep *p)
{
    if (!p->active)
        return;
    int saved = errno;
    if (p->state_fd >= 0)
        real_close(p->state_fd);
    dti_exec_abort(eta_dti_attached(), &p->fds);
    if (p->envp)
        munmap(p->envp, p->envp_size);
    if (p->preload)
        munmap(p->preload, p->preload_size);
    p->active = false;
    errno = saved;
}

/* The environment for the new image: envp without any ETA_EXEC_STATE, plus
 * ours, plus what it needs to load the shim (env_additions()). */
static bool build_env(struct exec_prep *p, char *const envp[])
{
    size_t n = 0;
    while (envp && envp[n])
        n++;
    bool add_preload = !env_preloads_us(envp);
    if (add_preload && !make_preload(p, envp))
        return false;
    p->envp_size = (n + 2 + env_additions(envp)) * sizeof(char *);
    char **v = mmap(NULL, p->envp_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED)
        return false;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(envp[i], ETA_EXEC_ENV "=", sizeof ETA_EXEC_ENV) != 0 &&
            !(add_preload && strncmp(envp[i], "LD_PRELOAD=", 11) == 0))
            v[k++] = envp[i];
    if (add_preload)
        v[k++] = p->preload;
    for (size_t i = 0; i < N_CARRIED; i++)
        if (carried[i] && !env_entry(envp, carried_names[i]))
            v[k++] = carried[i];
    snprintf(p->var, sizeof p->var, ETA_EXEC_ENV "=%d", p->state_fd);
    v[k++] = p->var;
    v[k] = NULL;
    p->envp = v;
    if (add_preload)
        ETA_DEBUG("exec: the program's environment for the new image does not load the shim; "
                  "%s put back so the sockets handed over stay accelerated", p->preload);
    return true;
}

/* Everything the new image needs, or nothing (then exec goes on as before:
 * accelerated descriptors arrive as plain placeholders). Returns the
 * environment to pass to exec. */
static char *const *prepare(struct exec_prep *p, char *const envp[])
{
    *p = (struct exec_prep){.state_fd = -1, .fds = {-1, -1, -1, -1, -1}};
    /* Nothing here attaches or makes a context: in a vfork() child (Python's
     * subprocess, for one) this runs in the parent's memory with the child's
     * descriptor table, and either would leave the parent with descriptors
     * it does not have. Everything made here is either handed to the new
     * image or undone. */
    dti_t *d = atomic_load(&eta_tracked) ? eta_dti_attached() : NULL;
    if (!d || eta_cfg.disabled || atomic_load(&eta_engine_dead) || (!env_preloads_us(envp) && !shim_path[0]))
        return envp;
    release_owed(false); /* close-on-exec sockets end with this image; the rest carry on */
    uint32_t n = 0;
    size_t size = 0;
    struct eta_exec_entry *v = collect(&n, &size);
    if (!v || n == 0) {
        if (v)
            munmap(v, size);
        return envp;
    }
    dti_sock_t *handles = mmap(NULL, sizeof *handles * n, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int rc = -ENOMEM;
    if (handles != MAP_FAILED) {
        for (uint32_t i = 0; i < n; i++)
            handles[i] = v[i].handle;
        rc = dti_exec_prepare(d, handles, n, &p->fds);
        munmap(handles, sizeof *handles * n);
    }
    uint32_t n_mcast = 0;
    size_t mcast_size = 0;
    struct eta_mcast_rec *m = rc >= 0 ? collect_mcast(v, n, &n_mcast, &mcast_size) : NULL;
    if (rc >= 0) {
        p->active = true;
        p->state_fd = dti_fd_aside(memfd_create(ETA_EXEC_MEMFD, 0), 0); /* inherited by the new image */
        struct eta_exec_head h = {.magic = ETA_EXEC_MAGIC, .version = ETA_EXEC_VERSION,
                                  .entry_size = sizeof(struct eta_exec_entry), .pid = getpid(), .n = n,
                                  .ctl_fd = p->fds.ctl_fd, .region_fd = p->fds.region_fd,
                                  .priv_fd = p->fds.priv_fd, .doorbell_fd = p->fds.doorbell_fd,
                                  .flags = (eta_listeners_shared ? ETA_EXEC_LISTENERS_SHARED : 0) |
                                           (p->fds.links_fd >= 0 ? ETA_EXEC_LINKS : 0),
                                  .links_fd = p->fds.links_fd >= 0 ? p->fds.links_fd : 0};
        bool ok = p->state_fd >= 0 && pwrite(p->state_fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
                  pwrite(p->state_fd, v, sizeof *v * n, sizeof h) == (ssize_t)(sizeof *v * n) &&
                  (!n_mcast || pwrite(p->state_fd, m, sizeof *m * n_mcast, sizeof h + sizeof *v * n) ==
                                   (ssize_t)(sizeof *m * n_mcast)) &&
                  build_env(p, envp);
        if (!ok) {
            ETA_DEBUG("exec: cannot write the handover (%s): sockets arrive unconnected", strerror(errno));
            undo(p);
        } else if ((uint32_t)rc < n) {
            ETA_DEBUG("exec: the PPE gave the new image %d of %u sockets", rc, n);
        }
    } else {
        static _Atomic bool warned;
        if (!atomic_exchange(&warned, true))
            eta_log("warning: exec: %u accelerated socket%s cannot be handed to the new image (%s): %s "
                    "there as unconnected kernel sockets", n, n == 1 ? "" : "s",
                    dti_strerror(rc),
                    n == 1 ? "it arrives" : "they arrive");
    }
    munmap(v, size);
    if (m)
        munmap(m, mcast_size);
    return p->active ? p->envp : envp;
}

ETA_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    struct exec_prep p;
    char *const *env = prepare(&p, envp);
    int rc = ETA_REAL(execve)(path, argv, env);
    undo(&p);
    return rc;
}

ETA_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    struct exec_prep p;
    char *const *env = prepare(&p, envp);
    int rc = ETA_REAL(execvpe)(file, argv, env);
    undo(&p);
    return rc;
}

ETA_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    struct exec_prep p;
    char *const *env = prepare(&p, envp);
    int rc = ETA_REAL(fexecve)(fd, argv, env);
    undo(&p);
    return rc;
}

ETA_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
    struct exec_prep p;
    char *const *env = prepare(&p, envp);
    int rc = ETA_REAL(execveat)(dirfd, path, argv, env, flags);
    undo(&p);
    return rc;
}

ETA_EXPORT int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

ETA_EXPORT int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

/* execl, execlp, execle: the list into an array, bounded as the kernel
 * bounds arguments (E2BIG beyond). */
#define EXEC_MAX_ARGS 4096
static int collect_args(const char *arg0, va_list ap, char **argv)
{
    int n = 0;
    argv[n++] = (char *)arg0;
    while (argv[n - 1]) {
        if (n == EXEC_MAX_ARGS) {
            errno = E2BIG;
            return -1;
        }
        argv[n++] = va_arg(ap, char *);
    }
    return n;
}

ETA_EXPORT int execl(const char *path, const char *arg, ...)
{
    char *argv[EXEC_MAX_ARGS];
    va_list ap;
    va_start(ap, arg);
    int n = collect_args(arg, ap, argv);
    va_end(ap);
    return n < 0 ? -1 : execve(path, argv, environ);
}

ETA_EXPORT int execlp(const char *file, const char *arg, ...)
{
    char *argv[EXEC_MAX_ARGS];
    va_list ap;
    va_start(ap, arg);
    int n = collect_args(arg, ap, argv);
    va_end(ap);
    return n < 0 ? -1 : execvpe(file, argv, environ);
}

ETA_EXPORT int execle(const char *path, const char *arg, ...)
{
    char *argv[EXEC_MAX_ARGS];
    va_list ap;
    va_start(ap, arg);
    int n = collect_args(arg, ap, argv);
    char *const *envp = n < 0 ? NULL : va_arg(ap, char *const *);
    va_end(ap);
    return n < 0 ? -1 : execve(path, argv, envp);
}

/* ---- the new image: adopting ------------------------------------------- */

static struct eta_sock *adopt_one(dti_ctx_t *c, const struct eta_exec_entry *e, const struct eta_mcast_rec *m)
{
    struct stat st;
    struct dti_sock_info info;
    if (!eta_fd_in_range(e->fd) || eta_fd_peek(e->fd) || fstat(e->fd, &st) < 0 || !S_ISSOCK(st.st_mode) ||
        dti_sock_status(c, e->handle, &info) < 0)
        return NULL;
    struct eta_sock *s = eta_sock_new();
    if (!s)
        return NULL;
    s->h = e->handle;
    s->generation = eta_generation;
    s->listening = e->flags & ETA_EXEC_LISTENING;
    s->backlog = e->backlog;
    s->hybrid = e->flags & ETA_EXEC_HYBRID;
    s->udp_kself = s->hybrid && (e->flags & ETA_EXEC_UDP_KSELF);
    s->v6 = e->flags & ETA_EXEC_V6;
    s->v6only = e->flags & ETA_EXEC_V6ONLY; /* a re-listen binds as the program bound (sock6.c) */
    s->v6only_read0 = e->flags & ETA_EXEC_V6ONLY_READ0;
    if (e->flags & ETA_EXEC_LOCAL6) { /* the address, not the old image's index: ETA_NET may differ */
        uint8_t l6 = eta_local6_of(e->local6_ip);
        s->local6 = l6 ? l6 : ETA_LOCAL6_UNKNOWN;
    }
    s->dgram = e->flags & ETA_EXEC_DGRAM;
    if (s->dgram) {
        eta_udp_cmsg_refresh(e->fd, s); /* IP_PKTINFO, SO_TIMESTAMP...: the kernel socket kept them */
        s->mc_if4 = e->mc_if4;
        s->mc_if4_ours = e->flags & ETA_EXEC_MC_IF4_OURS;
        eta_udp_mcast_import(s, m, e->n_mcast); /* checked: exec_state.c */
    }
    s->bound_kernel = e->flags & ETA_EXEC_BOUND_KERNEL;
    s->connect_started = e->flags & ETA_EXEC_CONNECT_STARTED;
    s->connect_reported = e->flags & ETA_EXEC_CONNECT_REPORTED;
    atomic_store(&s->nonblock, (e->flags & ETA_EXEC_NONBLOCK) != 0);
    atomic_store(&s->shut_wr, (e->flags & ETA_EXEC_SHUT_WR) != 0);
    atomic_store(&s->shut_rd, (e->flags & ETA_EXEC_SHUT_RD) != 0);
    atomic_store(&s->pending_error, e->pending_error);
    s->rcvtimeo_ms = e->rcvtimeo_ms;
    atomic_store(&s->opts_set, ETA_OPT_ALL); /* set in the old image: a re-listen reads them all back */
    s->sndtimeo_ms = e->sndtimeo_ms;
    s->local = (struct dti_addr){e->local_ip, e->local_port};
    s->kernel_port = e->kernel_port;
    eta_hmap_put(s->h, s);
    atomic_store(&s->state, ETA_SOCK_ACCEL);
    return s;
}

/* Descriptor fd names the socket adopted for handle h already (a dup). */
static struct eta_sock *adopted_for(const struct eta_exec_entry *v, uint32_t upto, dti_sock_t h)
{
    for (uint32_t i = 0; i < upto; i++)
        if (v[i].kind == ETA_EXEC_SOCKET && v[i].handle == h) {
            struct eta_obj *o = eta_fd_peek(v[i].fd);
            if (o && o->kind == ETA_OBJ_SOCK)
                return (struct eta_sock *)o;
        }
    return NULL;
}

static void adopt_entries(const struct eta_exec_entry *v, const struct eta_mcast_rec *m, uint32_t n,
                          unsigned *adopted, unsigned *refused)
{
    uint64_t at = 0; /* entry i's memberships: m[at] on (exec_state.h) */
    dti_ctx_t *c = eta_ctx();
    for (uint32_t i = 0; !c && i < n; i++)
        *refused += v[i].kind == ETA_EXEC_SOCKET; /* no context: none can be used */
    for (uint32_t i = 0; c && i < n; at += v[i].n_mcast, i++) {
        if (v[i].kind != ETA_EXEC_SOCKET)
            continue;
        struct eta_sock *s = adopted_for(v, i, v[i].handle);
        if (!s && (s = adopt_one(c, &v[i], m ? m + at : NULL)) != NULL)
            ETA_STAT_ADD(accel_open, 1);
        if (s) {
            eta_fd_set(v[i].fd, &s->obj);
            ++*adopted;
        } else {
            ++*refused; /* stays the plain kernel socket it is */
        }
    }
    for (uint32_t i = 0; c && i < n; i++) {
        if (v[i].kind != ETA_EXEC_STASHED)
            continue;
        struct eta_obj *o = eta_fd_peek(v[i].listener_fd);
        if (!o || o->kind != ETA_OBJ_SOCK || !eta_stash_import((struct eta_sock *)o, v[i].handle)) {
            if (dti_prep_close(c, v[i].handle, 0) == 0) /* nobody can accept it here: let it go */
                dti_submit(c);
        }
    }
}

/* stdin, stdout and stderr over an adopted socket (an inetd-style child, git
 * daemon's upload-pack): glibc's streams read and write through its internal
 * read and write, which no preload sees, so a program that writes to stdout
 * with printf/fwrite and fflush (git's ls-refs) would write to the kernel
 * placeholder: EPIPE, SIGPIPE, the client sees the connection end. Each such
 * stream is replaced, before main, by one of the same buffering that reads
 * and writes through the shim's read() and write(); fileno() still names the
 * descriptor, fclose() closes it. */
static ssize_t std_read(void *cookie, char *buf, size_t n)
{
    return read((int)(intptr_t)cookie, buf, n);
}

static ssize_t std_write(void *cookie, const char *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = write((int)(intptr_t)cookie, buf + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return done ? (ssize_t)done : -1;
        done += (size_t)w;
    }
    return (ssize_t)done;
}

static int std_close(void *cookie)
{
    return close((int)(intptr_t)cookie);
}

static void std_stream_over_socket(FILE **stream, int fd, const char *mode, int buffering)
{
    struct eta_obj *o = eta_fd_peek(fd);
    if (!*stream || !o || o->kind != ETA_OBJ_SOCK || fileno(*stream) != fd)
        return;
    cookie_io_functions_t io = {.read = std_read, .write = std_write, .seek = NULL, .close = std_close};
    FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);
    if (!f)
        return; /* stays glibc's own: stdio on it reaches the placeholder */
    f->_fileno = fd; /* fileno(stdout) still names it (glibc's cookie streams say -1) */
    if (buffering == _IONBF)
        setvbuf(f, NULL, _IONBF, 0);
    *stream = f;
    ETA_DEBUG("exec: %s on fd %d goes through the shim", fd == 0 ? "stdin" : fd == 1 ? "stdout" : "stderr", fd);
}

static void std_streams_over_sockets(void)
{
    std_stream_over_socket(&stdin, 0, "r", _IOFBF);
    std_stream_over_socket(&stdout, 1, "w", _IOFBF);
    std_stream_over_socket(&stderr, 2, "w", _IONBF);
}

void eta_exec_adopt(void)
{
    const char *var = getenv(ETA_EXEC_ENV);
    if (!var)
        return;
    char text[32];
    snprintf(text, sizeof text, "%s", var);
    unsetenv(ETA_EXEC_ENV); /* the program and what it starts never see it */
    char why[200] = "";
    char *end = NULL;
    errno = 0;
    long fd = strtol(text, &end, 10);
    if (errno || end == text || *end || fd < 0 || fd >= ETA_FD_MAX) {
        eta_log("warning: ignoring %s='%s': not a descriptor number; inherited sockets stay unconnected",
                ETA_EXEC_ENV, text);
        return;
    }
    char link[64], target[96] = "";
    snprintf(link, sizeof link, "/proc/self/fd/%ld", fd);
    ssize_t tl = readlink(link, target, sizeof target - 1);
    if (tl > 0)
        target[tl] = 0;
    if (tl <= 0 || strncmp(target, "/memfd:" ETA_EXEC_MEMFD, sizeof "/memfd:" ETA_EXEC_MEMFD - 1) != 0) {
        eta_log("warning: ignoring %s=%ld: that descriptor is not a handover from exec; inherited sockets "
                "stay unconnected", ETA_EXEC_ENV, fd);
        return; /* not ours: left alone */
    }
    struct eta_exec_head h;
    struct eta_exec_entry *v = NULL;
    struct eta_mcast_rec *m = NULL;
    int rc = eta_exec_state_read((int)fd, getpid(), ETA_FD_MAX, &h, &v, &m, why, sizeof why);
    real_close((int)fd);
    if (rc < 0) {
        eta_log("warning: ignoring the handover from exec (%s): inherited sockets stay unconnected", why);
        return;
    }
    if (eta_cfg.disabled) {
        free(v);
        free(m);
        return;
    }
    struct dti_exec_fds fds = {h.ctl_fd, h.region_fd, h.priv_fd, h.doorbell_fd,
                               h.flags & ETA_EXEC_LINKS ? h.links_fd : -1};
    dti_t *d = NULL;
    rc = dti_adopt_exec(&fds, &d, why, sizeof why);
    if (rc < 0) {
        eta_log("warning: cannot adopt the sockets handed over at exec (%s): they stay unconnected", why);
        free(v);
        free(m);
        return;
    }
    eta_attach_adopted(d);
    if (h.flags & ETA_EXEC_LISTENERS_SHARED)
        eta_listeners_shared = true;
    unsigned adopted = 0, refused = 0;
    adopt_entries(v, m, h.n, &adopted, &refused);
    free(v);
    free(m);
    if (adopted)
        std_streams_over_sockets();
    if (refused)
        eta_log("warning: %u descriptor%s handed over at exec could not be adopted (not a socket, or not "
                "one the PPE gave this image): they stay unconnected", refused, refused == 1 ? "" : "s");
    ETA_DEBUG("exec: adopted %u accelerated descriptor%s", adopted, adopted == 1 ? "" : "s");
}
