/* dti/dti.h: libdti, the native API of the eta direct transport interface.
 *
 * C11, links libc only. An application attaches to a packet processing engine
 * (PPE, `eta-ppe`) over its UNIX control socket and receives one shared-memory
 * region. Inside the region live:
 *   - queue pairs ("contexts"): a command queue (app -> PPE) and an
 *     event/completion queue (PPE -> app), one pair per application thread;
 *   - a socket table the PPE writes (ring positions, state, addresses), so
 *     readiness, bytes readable/writable and names are read locally with no
 *     round trip;
 *   - per-socket receive and send byte rings the TCP stack writes into and
 *     reads from directly (one copy each way between the wire and memory the
 *     application can see);
 *   - a buffer pool the application allocates region buffers from.
 *
 * Model (liburing-like): dti_prep_*() queue a command in the calling thread's
 * context; dti_submit() publishes every queued command at once (one doorbell
 * at most, and only when the engine sleeps); dti_reap() returns completions
 * and socket events. Every command except the data-path ones (send commit,
 * receive release) completes exactly once with an errno-style result. A small
 * blocking layer (dti_socket(), dti_connect(), dti_accept(), ...) sits on top.
 *
 * Errors: functions return a negative value on failure: -errno (e.g.
 * -EAGAIN, -EINVAL, -ECONNREFUSED) or one of the DTI_E_* codes below.
 * dti_strerror() names both kinds.
 *
 * Threads: a dti_t (attachment) is shared by all threads of a process. Each
 * thread uses its own dti_ctx_t (dti_ctx_get() creates it on first use);
 * contexts never share a ring or a lock. Socket handles belong to the
 * attachment: a socket created or accepted in one thread's context may be used
 * through any other thread's context (accept in one thread, serve in another).
 * Completions go to the context that issued the command; socket events go to
 * the contexts that watch the socket (dti_prep_watch()). Per socket, at most
 * one thread may send and at most one thread may receive at a time (a sender
 * and a receiver in two different threads is fine); callers that need more
 * serialize themselves.
 *
 * fork(): with dti_fork_prepare()/dti_fork_parent()/dti_fork_child() around
 * it (see below), the child keeps using the same dti_t and every socket it
 * inherited; without them the child must not use the parent's dti_t.
 *
 * Several engines: when the PPE runs N engines (each owns the flows the
 * steering function gives it), dti_attach() attaches to every one of them
 * and each context gets a queue pair on each; none of this shows in the API.
 * New sockets of a context go to the engines in turn (a socket bound to a
 * port moves, at connect, to the engine that owns its flow: its handle stays
 * valid); a listener listens on
 * every engine under its one handle (connections come from any engine;
 * watches, accepts, DTI_ACCEPT_WAIT and close cover them all); dti_reap()
 * and dti_wait() serve every engine's queue. Limits (dti_get_limits()) are
 * per engine. Pool buffers belong to one engine's region: use
 * dti_buf_alloc_for() for posted receives and region-buffer sends.
 */
#ifndef DTI_DTI_H
#define DTI_DTI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version of the shared region and the control protocol. An engine and a
 * libdti of different versions refuse to attach (DTI_E_VERSION). 7: PASS
 * status 3, a standing offer of a listener (re-attach as one group). 8: each
 * socket's receive ring has its own size (it grows in place up to the slot's
 * reserve, dti_limits.rx_ring_size). 9: and each send ring (dti_sock_shared.tx_size, chosen
 * when the rings come: SO_SNDBUF or the default; the slot is two cache lines). 10: send
 * rings grow while the socket lives (DTI_OP_TX_GROW, dti_sock_shared.tx_want/tx_grow_ack),
 * and a received datagram record carries the IPv4 TOS and TTL in its flags
 * (DTI_DGRAM_TOS/TTL). 11: IPv6 endpoints on the control path (DTI_OP_BIND6,
 * DTI_OP_CONNECT6; a socket's IPv6 names in dti_sock_shared.name6/local6/remote6). 12:
 * IPv6 datagram sockets (BIND6 and CONNECT6 on them; DTI_DGRAM_IP6 records). 14:
 * IPv6 stream sockets spread over the engines (dti_flow_owner6; before, every
 * IPv6 socket lived on the first engine), the region header's app_ip6. */
#define DTI_ABI_VERSION 14u

/* Default control socket of the PPE; the environment variable ETA_SOCKET
 * overrides it. */
#define DTI_DEFAULT_SOCKET_PATH "/run/eta/ppe.sock"

/* ---- errors ----------------------------------------------------------- */

/* DTI-specific error codes, returned negated like errno values. They lie
 * above every errno value Linux defines. */
enum dti_error {
    DTI_E_NO_ENGINE = 4096,  /* no PPE listens at the control socket path */
    DTI_E_DENIED = 4097,     /* the PPE's configuration refuses this user */
    DTI_E_VERSION = 4098,    /* ABI version mismatch between libdti and the PPE */
    DTI_E_LIMIT = 4099,      /* a PPE limit was reached (attachments, contexts, sockets, memory) */
    DTI_E_ENGINE_GONE = 4100,/* the PPE exited or detached us: every pending op fails with this */
    DTI_E_BROKEN = 4101,     /* the PPE found this region corrupt and stopped serving it */
    DTI_E_PROTOCOL = 4102,   /* malformed message on the control socket */
    DTI_E_BAD_HANDLE = 4103, /* stale or unknown socket handle */
};

/* Text for an error returned by libdti: accepts -errno, errno, -DTI_E_* or
 * DTI_E_*. Never returns NULL; the string is static. */
const char *dti_strerror(int err);

/* ---- types ------------------------------------------------------------ */

typedef struct dti_attachment dti_t; /* one attachment of this process to a PPE */
typedef struct dti_ctx dti_ctx_t; /* one queue pair; one per thread */

/* A socket handle: the engine that serves it, an index and a generation,
 * always in [0, INT32_MAX], so it also fits in an int result. Valid in every
 * context of its attachment. */
typedef uint32_t dti_sock_t;
#define DTI_SOCK_INVALID ((dti_sock_t)0xffffffffu)

/* An IPv4 endpoint in host byte order (like the stack). */
struct dti_addr {
    uint32_t ip;
    uint16_t port;
};

/* An IPv6 endpoint (ABI 11): the address in network byte order, as in
 * struct in6_addr; the port in host order, as dti_addr's. An IPv4-mapped
 * address (::ffff:a.b.c.d) names the IPv4 address a.b.c.d: bind6/connect6
 * then act as bind/connect, and the socket is an IPv4 one. No scope id: the
 * engine serves one port, so a link-local address names its link. */
struct dti_addr6 {
    uint8_t ip[16];
    uint16_t port;
};

/* A piece of memory inside the region (ring data in place, or a pool
 * buffer). Ring views wrap at most once, so two of them describe one. */
struct dti_iov {
    void *base;
    size_t len;
};

/* A buffer allocated from the region's pool (dti_buf_alloc()). `offset` is
 * what commands carry; the engine never follows `ptr`. */
struct dti_buf {
    void *ptr;
    uint64_t offset;
    uint32_t len;
};

/* ---- attach / detach --------------------------------------------------- */

struct dti_attach_opts {
    /* Control socket path; NULL: $ETA_SOCKET, else DTI_DEFAULT_SOCKET_PATH. */
    const char *socket_path;
    /* Shown by eta-stat; NULL: the program name. At most 31 bytes are kept. */
    const char *name;
};

/* Attaches to the PPE. On failure returns a negative code and, when `why` is
 * not NULL, writes a sentence saying what went wrong (e.g. "no PPE at
 * /run/eta/ppe.sock (connect: No such file or directory)" or "ABI version
 * mismatch: libdti 1, PPE 2"). `opts` may be NULL. */
int dti_attach(const struct dti_attach_opts *opts, dti_t **out, char *why, size_t why_len);

/* Detaches: closes every context and the control connection and unmaps the
 * region. The PPE aborts sockets still open. Call after every thread has
 * stopped using the attachment. */
void dti_detach(dti_t *d);

/* After the PPE went (dti_engine_alive() == 0): gives back what the dead
 * attachment still holds -- the shared regions' memory (their mappings become
 * private zero pages, so nothing of the old PPE stays pinned), the control
 * connections, doorbells and every context's eventfd and wait fd -- while its
 * structures stay allocated: threads that still hold its contexts see a dead
 * engine (every call answers -DTI_E_ENGINE_GONE, nothing sleeps on a closed
 * descriptor) instead of freed memory. For a program that re-attaches to a new
 * PPE in a running process (dti_attach() again) and cannot know when every
 * thread has let go of the old one. A few KiB of bookkeeping stay allocated;
 * dti_detach() may still be called once no thread uses it. -EBUSY while the
 * engine is alive. */
int dti_retire(dti_t *d);
/* The same for an attachment the PPE still serves: it leaves the PPE (its
 * membership ends: the PPE closes the sockets only it held) and is retired.
 * For a process that joined another group (dti_claim) right after attaching
 * and must not stay a second, empty member of its own. */
int dti_leave(dti_t *d);

/* 1 while the engine serves this attachment; 0 once it has gone (control
 * socket hang-up) or declared the region broken. Cheap: a shared-memory read
 * plus, at most every call to dti_wait()/dti_reap() that finds nothing, a
 * non-blocking check of the control socket. */
int dti_engine_alive(dti_t *d);

/* The control socket: readable/hung-up when the PPE goes away. Exposed for
 * callers that build their own event loops; do not read or write it. */
int dti_control_fd(dti_t *d);

/* What the engine granted at attach. */
struct dti_limits {
    uint32_t max_contexts;   /* queue pairs (threads) per attachment */
    uint32_t max_sockets;    /* sockets per attachment */
    uint32_t cmdq_entries;   /* command queue size per context = command credits */
    uint32_t evq_entries;    /* event queue size per context */
    uint32_t rx_ring_size;   /* per-socket receive ring bytes at most (power of two): a socket's
                                ring starts smaller and may grow to this (autotuning) */
    uint32_t tx_ring_size;   /* per-socket send ring bytes at most (power of two): a socket's ring is
                                the engine's default or, with DTI_SO_SNDBUF set before its rings
                                came, one holding that (DTI_SO_SNDBUF reads it) */
    uint64_t pool_size;      /* bytes of region buffer pool */
    uint64_t region_size;    /* bytes mapped */
};
void dti_get_limits(const dti_t *d, struct dti_limits *out);

/* ---- fork ---------------------------------------------------------------
 * Sockets survive fork() with kernel file semantics when these run around it
 * (e.g. as pthread_atfork handlers):
 *   dti_fork_prepare(d)  in the parent, just before fork(): a round trip that
 *                        makes the child a member of this process's group
 *                        holding every socket the parent holds now;
 *   dti_fork_parent(d)   in the parent after fork(), whether it succeeded or
 *                        failed (a child that never came to be is dropped);
 *   dti_fork_child(d)    in the child: it gets its own control connection;
 *                        the parent's contexts stay the parent's (the child's
 *                        threads get new ones on first use).
 * Both processes then use the same handles: a socket closes (FIN) when the
 * last process holding it closes it or exits; a listener accepts in any of
 * them (each connection belongs to the process that accepted it); data of a
 * connected socket can be read and written from either, one process per
 * direction at a time, as for threads. A process that exits drops only its
 * own holds. The region buffer pool stays the parent's: dti_buf_alloc()
 * fails in the child. prepare returns 0 or a negative error; whatever it
 * returned, parent/child must follow (prepare holds the attachment's lock
 * until then). dti_fork_child() returns 0, or the error that left the child
 * without an attachment (it then behaves as after engine loss; the child may
 * dti_detach() and attach afresh). exec() ends the child's membership (the
 * connection is close-on-exec). */
int dti_fork_prepare(dti_t *d);
void dti_fork_parent(dti_t *d);
int dti_fork_child(dti_t *d);

/* ---- exec ---------------------------------------------------------------
 * Sockets can outlive exec(), as kernel sockets do. Just before it:
 *   dti_exec_prepare(d, keep, n, &fds)  a round trip (or one per 22 handles)
 *       that makes the image exec will start a member of this process's group
 *       holding the n sockets listed (each must be one this process holds:
 *       the PPE grants nothing else), and fills fds with what that image
 *       needs: its control connection, the region, the app-side socket state
 *       (ring positions) and the doorbell, all made inheritable (FD_CLOEXEC
 *       cleared). Returns how many of the n the member holds, or an error
 *       (nothing to undo then). On several engines a member is made on
 *       each, and listener groups and moved sockets travel too (links_fd).
 *   dti_exec_abort(d, &fds)  when exec() failed: the member goes (its control
 *       connection is closed), the process's own descriptors are close-on-exec
 *       again. The sockets stay this process's.
 * In the new image, dti_adopt_exec(&fds, &d, why, len) builds the dti_t from
 * them (validating each: a forged or stale set gives an error and touches
 * nothing else); every socket handle the old image held and listed works
 * unchanged, with the data that arrived before and during the exec. The old
 * image's membership ends with its control connection (close-on-exec). */
struct dti_exec_fds {
    int ctl_fd, region_fd, priv_fd, doorbell_fd;
    /* Several engines: a memfd with every other engine's four descriptors and
     * the listener groups and moved sockets to make again; -1 (or 0..2,
     * never its number): one engine. */
    int links_fd;
};
int dti_exec_prepare(dti_t *d, const dti_sock_t *keep, unsigned n, struct dti_exec_fds *out);
void dti_exec_abort(dti_t *d, const struct dti_exec_fds *fds);
int dti_adopt_exec(const struct dti_exec_fds *fds, dti_t **out, char *why, size_t why_len);
/* libdti's own descriptors of this attachment (control connections,
 * doorbells, region and state memfds of every engine): up to max of them in
 * fds; returns how many there are. A program's "close everything" must spare
 * them. */
int dti_own_fds(dti_t *d, int *fds, int max);
/* Every descriptor libdti holds for d: dti_own_fds()'s, a fork's pending
 * connection, and each context's eventfd and epoll set. Up to max in fds;
 * returns how many there are. */
int dti_fds_all(dti_t *d, int *fds, int max);
/* Descriptors libdti makes sit at high numbers, out of the program's way:
 * above a floor a little under RLIMIT_NOFILE's soft limit (at most 1024),
 * as a kernel-only process would never be given them before all lower ones.
 * dti_fd_aside() does the same for a caller's descriptor (the shim's own):
 * returns the number fd has now (fd itself when it cannot move, or fd < 0,
 * errno set); the close-on-exec flag is kept. always: moves fd even when it
 * is above the floor already (the program takes its number), to any free
 * number when none is free above the floor. */
int dti_fd_aside(int fd, int always);
/* The program takes descriptor number fd (dup2 onto it): if it is one of
 * libdti's for d, libdti moves it elsewhere first and closes fd. Returns the
 * new number, or -ENOENT when fd is not libdti's, or -errno. A thread of
 * libdti using that number at this moment may see it change under it. */
int dti_fd_move(dti_t *d, int fd);

/* ---- passing sockets to another process (SCM_RIGHTS) -------------------
 * A socket sent over a UNIX socket arrives as its kernel placeholder. The
 * sender, before its sendmsg: dti_pass(d, s, fd) registers socket s, whose
 * descriptor fd it sends (a round trip; the PPE keeps s open while it is in
 * flight, even if the sender closes it); if the sendmsg then fails,
 * dti_pass_withdraw(d, s, fd). The receiver, for a descriptor it received:
 * dti_claim(d, fd, may_join, &h, &joined) (a round trip): the PPE compares
 * the open file with the ones in flight (nothing the application writes names
 * the socket) and the receiver holds handle h too, as after fork. Same user
 * or root only (-EPERM); not in flight: -ENOENT. Returns 0: h is a handle of
 * d; 1: the socket is of another process's group, which this process joined
 * (may_join: it has no sockets of its own; -EXDEV when it may not): *joined
 * is a new attachment to that group (the caller's d is no longer needed).
 * On several engines both speak to every engine: a connection is claimed on
 * its own, a listener group on all of them (every sibling), and a joining
 * receiver becomes a member of the sender's group on each. */
int dti_pass(dti_t *d, dti_sock_t s, int fd, char *why, size_t why_len);
int dti_pass_withdraw(dti_t *d, dti_sock_t s, int fd);
int dti_claim(dti_t *d, int fd, int may_join, dti_sock_t *h, dti_t **joined, char *why, size_t why_len);
/* A standing offer of listening socket s, whose descriptor is fd (a round
 * trip per engine): after a PPE restart, the process that made an inherited
 * listener again offers it, and every other process that shares the same
 * open file (a forked server's workers, a receiver of it over SCM_RIGHTS)
 * claims it with dti_claim(), joining the offerer's group: one listener, one
 * group again. Unlike dti_pass it is never used up and holds nothing: it goes
 * with the socket's last close. Same user or root only, as for dti_pass.
 * 0; -EINVAL: not listening; on several engines s must have a member on each. */
int dti_offer(dti_t *d, dti_sock_t s, int fd, char *why, size_t why_len);

/* ---- contexts (one per thread) ----------------------------------------- */

/* Creates a new queue pair (a round trip on the control socket). */
int dti_ctx_create(dti_t *d, dti_ctx_t **out);
/* Closes a queue pair; commands not yet completed are dropped (their sockets
 * are unaffected). The context must not be in use by another thread. */
void dti_ctx_destroy(dti_ctx_t *c);
/* The calling thread's context, created on first use and destroyed when the
 * thread exits (or at dti_detach()). NULL with *err set on failure. */
dti_ctx_t *dti_ctx_get(dti_t *d, int *err);
dti_t *dti_ctx_owner(const dti_ctx_t *c);

/* A kernel fd that becomes readable when this context has something to reap
 * after dti_arm() returned 0, or when the engine goes away. Put it in your own
 * poll/epoll set (level-triggered is fine); after it fires call dti_disarm()
 * and reap. It is an epoll fd combining the context's wake eventfd and the
 * control socket; never read it yourself. */
int dti_ctx_wait_fd(const dti_ctx_t *c);

/* Arm-then-check sleep protocol (never loses a wakeup):
 *   r = dti_arm(c);  r == 0: nothing pending, safe to block on the wait fd;
 *                    r > 0: entries already pending (the context is left
 *                           disarmed): reap instead of sleeping; also while
 *                           a command ring that refused a command (-EAGAIN)
 *                           is still full, and once it has room again (the
 *                           releases it left owed sent): retry then;
 *                    r < 0: the engine is gone (-DTI_E_ENGINE_GONE) or broken.
 *   after waking:    dti_disarm(c) (drains the eventfd), then dti_reap().
 * The engine wakes only armed contexts, at most once per arming, and batches
 * its wakeups. A context that never arms costs the engine no syscalls and
 * makes none itself. */
int dti_arm(dti_ctx_t *c);
void dti_disarm(dti_ctx_t *c);

/* Waits until there is something to reap, the engine goes away, or
 * timeout_ms passes (-1: forever; 0: just check). Spins `spin_ns` (see
 * dti_ctx_set_spin()) before arming and sleeping. Returns 1 when entries are
 * pending, 0 on timeout, negative on engine loss. EINTR is retried, unless
 * the context is interruptible (below). A command ring that refused a
 * command (-EAGAIN) is not slept on: the wait naps 1 ms at a time until the
 * engine has taken commands from it (the data path's are not answered, so
 * no wakeup would say so), sends the receive releases it left owed, and
 * returns 1 with nothing to reap: retry what was refused. */
int dti_wait(dti_ctx_t *c, int timeout_ms);
/* on != 0: a signal that interrupts this context's sleep ends the wait with
 * -EINTR (dti_wait(), dti_wait_cqe() and the blocking layer built on them),
 * for callers that must answer EINTR as a system call would (a sockets
 * shim). dti_recv_posted() then cancels its post and returns the bytes that
 * landed before the cancel, or -EINTR when none did. Default: off (the wait
 * goes back to sleep after the handler ran). */
void dti_ctx_set_interruptible(dti_ctx_t *c, int on);
/* The most dti_wait() and the blocking layer poll before sleeping (default
 * 300000 ns; 0: sleep at once). Adaptive per context: the full budget after a
 * wait answered within spin_ns, half after one that took over four times
 * spin_ns (none below 1 us; then one probing spin every 32 waits), unchanged
 * in between. An idle program sleeps at once; a busy request/response loop
 * spins and makes no system call. */
void dti_ctx_set_spin(dti_ctx_t *c, uint64_t spin_ns);
/* The same policy for waits an application makes itself (an event loop over
 * several sources): how long this wait may spin (0: sleep at once), and,
 * when it is over (answered or timed out; not for a zero-timeout check), how
 * long it took. */
uint64_t dti_spin_begin(dti_ctx_t *c);
void dti_spin_end(dti_ctx_t *c, uint64_t waited_ns);
/* fixed != 0: every wait spins the whole spin_ns, paid or not (a program
 * that owns its core and wants the lowest latency; also the ablation of the
 * adaptive policy). */
void dti_ctx_set_spin_fixed(dti_ctx_t *c, int fixed);
/* What the next wait of this context will spin, in ns. */
uint64_t dti_ctx_spin_budget(const dti_ctx_t *c);

/* ---- commands ----------------------------------------------------------
 * dti_prep_*() write one command into the context's command queue without
 * publishing it. They return 0, or -EAGAIN when the queue is full or all
 * command credits are in flight (reap completions, then retry: never loss),
 * or -DTI_E_ENGINE_GONE. user_data comes back in the completion; values with
 * the top bit set are reserved for libdti's blocking layer.
 * dti_submit() publishes what was prepared and returns how many commands it
 * published (or a negative error). */

enum dti_op {
    DTI_OP_NOP = 1,        /* completes with 0; a round-trip probe */
    DTI_OP_SOCKET = 2,     /* res: the new handle */
    DTI_OP_BIND = 3,
    DTI_OP_LISTEN = 4,
    DTI_OP_ACCEPT = 5,     /* res: number of handles in cqe.accepted */
    DTI_OP_CONNECT = 6,    /* completes when the connection is up or has failed */
    DTI_OP_SHUTDOWN = 7,
    DTI_OP_CLOSE = 8,      /* graceful; the handle is invalid once submitted */
    DTI_OP_ABORT = 9,      /* RST; the handle is invalid once submitted */
    DTI_OP_SETSOCKOPT = 10,
    DTI_OP_GETSOCKOPT = 11,/* the value is in cqe.value */
    DTI_OP_WATCH = 12,     /* sets this context's event interest for a socket */
    DTI_OP_RECV_INTO = 13, /* copy received bytes into a pool buffer; res: bytes */
    DTI_OP_SEND_FROM = 14, /* queue bytes from a pool buffer; res: bytes taken */
    /* data-path commands: no completion, outcome visible in dti_sock_status() */
    DTI_OP_SEND = 15,      /* dti_send_commit() */
    DTI_OP_RECV_RELEASE = 16, /* dti_recv_release() */
    DTI_OP_DIGEST = 17,    /* CRC32C of a stream range; the digest is in cqe.value */
    DTI_OP_RECV_POST = 18, /* the engine writes received bytes into the caller's memory; res: bytes */
    DTI_OP_RECV_CANCEL = 19, /* ends the socket's post now (no completion of its own) */
    /* datagram sockets (DTI_SOCK_DGRAM; "Datagram sockets" below) */
    DTI_OP_SEND_DGRAMS = 20, /* sends the records in the send ring up to position `offset`; res: datagrams sent */
    DTI_OP_DGRAM_CONNECT = 21, /* default peer (arg0 ip, arg1 port); 0:0 dissolves it (AF_UNSPEC) */
    DTI_OP_MCAST = 22,     /* joins (value 0) or leaves (value 1) group arg0, source arg1 (0: any) */
    /* libdti's own (dti/README.md "Send rings that grow"): the send ring is now arg0 bytes */
    DTI_OP_TX_GROW = 23,   /* not signaled: answered in dti_sock_shared.tx_grow_ack */
    /* IPv6 (ABI 11; stream sockets): the address's 16 bytes in the command's
     * value and offset words (dti_abi.h), arg1 the port, arg0 flags */
    DTI_OP_BIND6 = 24,     /* arg0: DTI_BIND6_V6ONLY or 0 */
    DTI_OP_CONNECT6 = 25,  /* arg0: 0; completes as DTI_OP_CONNECT */
    /* IPv6 multicast (ABI 13; datagram sockets): joins (arg0 0) or leaves
     * (arg0 1) the group in the value and offset words, from the source in
     * the trace words (dti_cmd_source6_get/set; :: any source) */
    DTI_OP_MCAST6 = 26
};

/* DTI_OP_BIND6's flag: IPV6_V6ONLY. Without it a socket bound to :: is one
 * listener for both families (Linux's dual-stack socket): its IPv4
 * connections are IPv4 sockets (dti_getsockname6 shows them v4-mapped). */
#define DTI_BIND6_V6ONLY 1u

/* DTI_OP_SOCKET's arg0: the kind of socket. */
#define DTI_SOCK_STREAM 0u /* TCP */
#define DTI_SOCK_DGRAM 1u  /* UDP over IPv4 */

/* Socket options (values are int64_t; booleans are 0/1). */
enum dti_sockopt {
    DTI_SO_NODELAY = 1,      /* TCP_NODELAY */
    DTI_SO_CORK = 2,         /* TCP_CORK */
    DTI_SO_KEEPALIVE = 3,    /* SO_KEEPALIVE */
    DTI_SO_KEEPIDLE = 4,     /* TCP_KEEPIDLE, seconds */
    DTI_SO_KEEPINTVL = 5,    /* TCP_KEEPINTVL, seconds */
    DTI_SO_KEEPCNT = 6,      /* TCP_KEEPCNT */
    DTI_SO_MAXSEG = 7,       /* TCP_MAXSEG */
    DTI_SO_USER_TIMEOUT = 8, /* TCP_USER_TIMEOUT, ms */
    DTI_SO_LINGER = 9,       /* SO_LINGER seconds, -1: off */
    DTI_SO_REUSEADDR = 10,   /* SO_REUSEADDR */
    DTI_SO_REUSEPORT = 11,   /* SO_REUSEPORT */
    DTI_SO_TOS = 12,         /* IP_TOS */
    DTI_SO_RCVLOWAT = 13,    /* SO_RCVLOWAT */
    DTI_SO_RCVBUF = 14,      /* SO_RCVBUF: get: the receive ring's size now (it grows with autotuning);
                                before the ring exists (before connect, listeners): the size set, 0: none;
                                set: fixes the receive buffer (no autotuning, as on Linux), clamped to
                                the slot's reserve; larger than the ring, it grows the ring (now if
                                empty, else once drained; refused past the app's memory limit) */
    DTI_SO_SNDBUF = 15,      /* SO_SNDBUF: set: the send buffer as Linux keeps it (what the kernel
                                answers after a set: twice the value, clamped), clamped to the slot's
                                reserve; before the rings come (before connect, on a listener for its
                                connections) the send ring is the power of two holding it (its growth
                                refused past the app's memory limit: the default ring), set later it
                                is recorded only; get: the size set, else the ring's size (before the
                                rings: 0) */
    DTI_SO_NOTSENT_LOWAT = 16 /* TCP_NOTSENT_LOWAT, bytes, 0 .. UINT32_MAX (UINT32_MAX, the default: no
                                 limit): written-and-unsent bytes the socket holds before a write stops
                                 taking more. The engine then offers (tx_head, writable, DTI_POLLOUT) only
                                 what brings the unsent bytes up to the mark, none at or above it; inherited
                                 by accepted connections. An engine that predates it answers
                                 -ENOPROTOOPT, as for any unknown option (the region's layout did not
                                 change, so DTI_ABI_VERSION stays; dti/README.md) */,
    DTI_SO_TCLASS = 17        /* IPV6_TCLASS, -1 .. 255 (-1: the default, 0): the traffic class of an
                                 IPv6 connection's segments; DTI_SO_TOS is an IPv4 connection's, so a
                                 dual-stack socket keeps both, each for its family (the ECN bits are
                                 TCP's: not taken). Inherited by accepted connections. An engine that
                                 predates it answers -ENOPROTOOPT (DTI_ABI_VERSION stays) */,
    DTI_SO_MCAST_ALL = 18     /* IP_MULTICAST_ALL / IPV6_MULTICAST_ALL of a datagram socket, 0 or 1 (1, the
                                 default: a socket bound to the wildcard or a group gets that group's
                                 datagrams once any socket of the host joined it, as Linux; 0: only its
                                 own memberships'). A stream socket answers -ENOPROTOOPT */,
    DTI_SO_TTL = 19,          /* IP_TTL of a datagram socket's unicast IPv4 datagrams, 1..255, -1: the
                                 default (64); a stream socket answers -ENOPROTOOPT */
    DTI_SO_HOPLIMIT = 20,     /* IPV6_UNICAST_HOPS of its unicast IPv6 datagrams, 0..255, -1: the default */
    DTI_SO_MCAST_TTL = 21,    /* IP_MULTICAST_TTL of a datagram socket's IPv4 datagrams to groups, 0..255,
                                 -1: the default (1); 0: looped back only, never on the wire */
    DTI_SO_MCAST_HOPS = 22,   /* IPV6_MULTICAST_HOPS of its IPv6 datagrams to groups, as DTI_SO_MCAST_TTL */
    DTI_SO_MCAST_LOOP = 23,   /* IP_MULTICAST_LOOP, 0 or 1 (1, the default: a datagram it sends to a group
                                 also reaches the sockets of the engine's host that take the group, itself
                                 included) */
    DTI_SO_MCAST_LOOP6 = 24   /* IPV6_MULTICAST_LOOP, as DTI_SO_MCAST_LOOP for its IPv6 datagrams. An engine
                                 that predates 21..24 answers -ENOPROTOOPT (DTI_ABI_VERSION stays) */
};

/* Readiness bits; equal to Linux's POLLIN/POLLOUT/POLLERR/POLLHUP/POLLRDHUP so
 * a shim can pass them through to poll/epoll unchanged. */
#define DTI_POLLIN 0x001u    /* readable bytes, EOF, or connections to accept */
#define DTI_POLLOUT 0x004u   /* connected and send ring space */
#define DTI_POLLERR 0x008u   /* pending socket error (dti_sock_status().error) */
#define DTI_POLLHUP 0x010u   /* both directions closed, or reset */
#define DTI_POLLRDHUP 0x2000u /* peer sent FIN */

#define DTI_SHUT_RD 0
#define DTI_SHUT_WR 1
#define DTI_SHUT_RDWR 2

#define DTI_ACCEPT_WAIT 1u   /* complete only when at least one connection is there */
#define DTI_ACCEPT_MAX 8u    /* handles per accept completion, at most */

#define DTI_SEND_MORE 1u     /* like MSG_MORE: hold a partial segment */

int dti_prep_nop(dti_ctx_t *c, uint64_t user_data);
int dti_prep_socket(dti_ctx_t *c, uint64_t user_data);
int dti_prep_bind(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *local, uint64_t user_data);
int dti_prep_listen(dti_ctx_t *c, dti_sock_t s, int backlog, uint64_t user_data);
/* Takes up to `max` (<= DTI_ACCEPT_MAX) established connections. Without
 * DTI_ACCEPT_WAIT it completes at once (-EAGAIN when none is waiting); with
 * it, it completes when one arrives (one waiting accept per listener). */
int dti_prep_accept(dti_ctx_t *c, dti_sock_t listener, unsigned max, unsigned flags,
                    uint64_t user_data);
int dti_prep_connect(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *remote, uint64_t user_data);
/* IPv6 (ABI 11; stream sockets only: a datagram socket answers -EOPNOTSUPP).
 * bind6: an address of the PPE's port, or :: (flags: DTI_BIND6_V6ONLY);
 * connect6: an on-link destination (-ENETUNREACH otherwise), the SYN sent
 * once neighbour discovery found the peer (EHOSTUNREACH when it does not).
 * The engine refuses (-EINVAL, counted) flags it does not know, a port
 * above 65535, and a connect to port 0, to :: or to a multicast address.
 * With several engines IPv6 stream sockets are placed as IPv4 ones are (a
 * listener on every engine, a connection on its flow's owner:
 * dti_flow_owner6; dti/README.md "IPv6"). */
int dti_prep_bind6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *local, unsigned flags, uint64_t user_data);
int dti_prep_connect6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *remote, uint64_t user_data);
int dti_prep_shutdown(dti_ctx_t *c, dti_sock_t s, int how, uint64_t user_data);
int dti_prep_close(dti_ctx_t *c, dti_sock_t s, uint64_t user_data);
int dti_prep_abort(dti_ctx_t *c, dti_sock_t s, uint64_t user_data);
int dti_prep_setsockopt(dti_ctx_t *c, dti_sock_t s, int opt, int64_t value, uint64_t user_data);
int dti_prep_getsockopt(dti_ctx_t *c, dti_sock_t s, int opt, uint64_t user_data);
/* Sets which DTI_POLL* conditions of socket `s` post events to this context
 * (0: stop). Semantics: an event is posted when a watched condition becomes
 * true, and for DTI_POLLIN again whenever new bytes or connections arrive;
 * DTI_POLLOUT is one-shot (re-watch after send returns -EAGAIN). When a
 * watched condition already holds, an event is posted at once. */
int dti_prep_watch(dti_ctx_t *c, dti_sock_t s, uint32_t events, uint64_t user_data);
/* Posted receive: the engine copies up to buf->len received bytes into the
 * pool buffer and completes with the count (0: EOF); waits for data. */
int dti_prep_recv_into(dti_ctx_t *c, dti_sock_t s, const struct dti_buf *buf, uint64_t user_data);
/* Posted receive into the caller's own memory (any address, not the pool):
 * the engine writes received bytes straight into [buf, buf + len) of the
 * calling process (process_vm_writev on the engine's core), consumes them
 * from the receive ring in order, and completes with the count once at least
 * `min` bytes landed (min 0 counts as 1; larger than len counts as len), or
 * with what landed when the stream ends or fails (then 0 at EOF, the
 * socket's error after a reset, as dti_recv() would answer). One post per
 * socket at a time (a second: -EBUSY); while it is out the receive side is
 * busy for dti_recv()/borrow/view (-EBUSY). Errors: -EFAULT (an address the
 * process cannot be written at), -EOPNOTSUPP (the engine cannot write into
 * this process: another pid namespace, ptrace refused; libdti's callers then
 * copy from the ring themselves). dti_prep_recv_cancel() ends it early: the
 * post completes at once with the bytes that landed (-ECANCELED when none);
 * a post that already completed is not touched. Either way the post's own
 * completion is the one answer; no byte is lost or duplicated. */
int dti_prep_recv_post(dti_ctx_t *c, dti_sock_t s, void *buf, uint32_t len, uint32_t min, uint64_t user_data);
int dti_prep_recv_cancel(dti_ctx_t *c, dti_sock_t s);
/* The blocking form: returns once at least `min` bytes are in buf (0 counts
 * as 1; more than len as len), the stream ended or failed, or timeout_ms
 * passed (< 0: forever). The bytes the ring already holds are copied by the
 * caller (no round trip); the rest of buf is posted when it is at least the
 * threshold and the engine can write into this process, else copied as the
 * bytes come. Returns the bytes received (0: EOF) or a negative error; bytes
 * taken before an end, an error or the timeout are returned first (the end
 * or the error answers the next call). On timeout a post is cancelled: its
 * landed bytes count, -ETIMEDOUT when none came. */
ssize_t dti_recv_posted(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, size_t min, int timeout_ms);
/* Posts below this many bytes are not worth a round trip through the engine
 * (measured: a post costs the program a wakeup, ~27 us on the 2-core lab VM,
 * against ~0.5 ns a byte for reading from the ring; 16 KiB posts cost 3x the
 * copy, 64 KiB about break even, 256 KiB a quarter: dti/README.md "Posted
 * receive into the program's memory"): dti_recv_posted() copies below it. */
#define DTI_RECV_POST_MIN 65536u

/* Region-buffer send: the engine queues bytes from the pool buffer; completes
 * with how many it took (fewer when the send ring is short of space); the
 * buffer is the caller's again once completed. */
int dti_prep_send_from(dti_ctx_t *c, dti_sock_t s, const struct dti_buf *buf, uint32_t len,
                       unsigned flags, uint64_t user_data);

/* ---- payload digests (CRC32C computed by the engine) -------------------
 * The engine computes the CRC32C of a range of a connection's byte stream
 * where it already handles the bytes, so the application need not read them
 * a second time: received bytes when they become in-order and readable (in
 * the engine pass that placed them in the receive ring), sent bytes when
 * they are committed. The digest is the standard CRC32C (Castagnoli, as the
 * iSCSI and NVMe/TCP data digests: initial value ~0, final complement; the
 * CRC32C of "123456789" is 0xe3069283).
 *
 * A range is `len` bytes (1 .. 2^31) starting `skip` bytes after the
 * application's current position in that direction: receive, the next byte
 * dti_recv()/dti_recv_borrow() would return (borrowed bytes not yet released
 * and MSG_PEEK-style looks count as not consumed); send, the next byte
 * dti_send()/dti_send_commit() will queue. Bytes already there are digested
 * at once; the command completes when the whole range has arrived (receive)
 * or been committed (send), with cqe.value = the digest (low 32 bits) and
 * cqe.res = 0. With DTI_DIGEST_CHECK the engine compares it with `expected`:
 * a mismatch completes with -EBADMSG (cqe.value still the digest) and counts
 * in eta-stat. Errors: -ERANGE (the start was already released), -EINVAL
 * (empty or too long range, bad flags, a chain gap), -EBUSY (8 ranges wait
 * per direction already), -ENODATA (the stream ended before the range),
 * -ECANCELED (the socket was closed), the socket's error (reset).
 * DTI_DIGEST_CHAIN: a running digest. Each chained range must start where the
 * previous chained range of that direction ended; it reports the CRC32C of
 * all bytes from the first chained range's start through its own end.
 * A range request holds a command credit until it completes. */
#define DTI_DIGEST_RX 0u    /* the receive direction (default) */
#define DTI_DIGEST_TX 1u    /* the send direction */
#define DTI_DIGEST_CHECK 2u /* compare with `expected`: -EBADMSG on mismatch */
#define DTI_DIGEST_CHAIN 4u /* continue the direction's running digest */
int dti_prep_digest(dti_ctx_t *c, dti_sock_t s, unsigned flags, uint32_t skip, uint32_t len,
                    uint32_t expected, uint64_t user_data);
int dti_submit(dti_ctx_t *c);

/* ---- completions and events ------------------------------------------- */

enum dti_cqe_kind {
    DTI_CQE_COMPLETION = 1, /* a command finished: op, res, user_data (+ accepted/value) */
    DTI_CQE_EVENT = 2,      /* a watched socket changed: sock, events */
    DTI_CQE_RESCAN = 3      /* events were dropped for lack of room: re-check every
                               watched socket with dti_sock_poll() (state is never lost) */
};

struct dti_cqe {
    uint64_t user_data;
    int64_t value;      /* DTI_OP_GETSOCKOPT: the option's value */
    int32_t res;        /* >= 0 success, < 0 -errno / -DTI_E_* */
    uint16_t kind;      /* enum dti_cqe_kind */
    uint16_t op;        /* enum dti_op (completions) */
    dti_sock_t sock;    /* the socket the command or event is about */
    uint32_t events;    /* DTI_CQE_EVENT: DTI_POLL* bits ready now */
    dti_sock_t accepted[DTI_ACCEPT_MAX]; /* DTI_OP_ACCEPT: res handles */
};

/* Non-blocking: copies up to `max` pending entries, returns how many. When
 * the engine is gone, commands still in flight complete here with
 * -DTI_E_ENGINE_GONE. */
unsigned dti_reap(dti_ctx_t *c, struct dti_cqe *out, unsigned max);

/* Whether dti_reap() has entries to return, read without a system call or
 * a write (for a poll loop that looks at socket state first and reaps only
 * when something came). It does not look for a departed engine: keep calling
 * dti_reap() (or dti_wait()) now and then to learn of that. */
int dti_cq_ready(const dti_ctx_t *c);

/* Commands submitted and not yet reaped (credits in use). */
unsigned dti_inflight(const dti_ctx_t *c);

/* ---- local socket state (no round trip) ------------------------------- */

#define DTI_STATE_CONNECTING 0x01u
#define DTI_STATE_CONNECTED 0x02u
#define DTI_STATE_LISTENING 0x04u
#define DTI_STATE_RD_CLOSED 0x08u  /* peer FIN seen */
#define DTI_STATE_WR_CLOSED 0x10u  /* our side shut down for writing */
#define DTI_STATE_RESET 0x20u
#define DTI_STATE_FAILED 0x40u     /* connection failed: error says why */
#define DTI_STATE_BOUND 0x80u
#define DTI_STATE_DGRAM 0x100u     /* a datagram socket: writable while its send ring has room */

struct dti_sock_info {
    uint32_t readable;     /* bytes that dti_recv() would return now */
    uint32_t writable;     /* bytes dti_send() would take now */
    uint32_t accept_ready; /* listeners: connections waiting */
    uint32_t events;       /* DTI_POLL* ready now */
    uint32_t state;        /* DTI_STATE_* */
    int32_t error;         /* pending error as -errno, 0 if none */
};

/* Fills *out from the region. -DTI_E_BAD_HANDLE for an unknown/stale handle. */
int dti_sock_status(dti_ctx_t *c, dti_sock_t s, struct dti_sock_info *out);
/* DTI_POLL* ready now (0 for a bad handle: check dti_sock_status()). */
uint32_t dti_sock_poll(dti_ctx_t *c, dti_sock_t s);
/* Takes the pending error (SO_ERROR semantics: reading clears it locally).
 * A datagram socket's is an ICMP error about a datagram it sent (a connected
 * socket's port unreachable: -ECONNREFUSED...), reported once: by this call,
 * or by the next dti_dgram_recv/recv6/sendmmsg, which answer it before
 * anything else, as Linux's UDP does. dti_dgram_borrow/borrow6 leave it;
 * dti_sock_poll() shows DTI_POLLERR while it waits. */
int dti_sock_take_error(dti_ctx_t *c, dti_sock_t s);
int dti_getsockname(dti_ctx_t *c, dti_sock_t s, struct dti_addr *out);
int dti_getpeername(dti_ctx_t *c, dti_sock_t s, struct dti_addr *out); /* -ENOTCONN */
/* Either family (ABI 11): 6 for an IPv6 socket, 4 for an IPv4 one (its
 * address then v4-mapped, ::ffff:a.b.c.d, as Linux shows an IPv4 peer of a
 * dual-stack socket), or a negative error (getpeername6: -ENOTCONN). The
 * IPv4 calls above, on an IPv6 socket, give address 0 and the port. */
int dti_getsockname6(dti_ctx_t *c, dti_sock_t s, struct dti_addr6 *out);
int dti_getpeername6(dti_ctx_t *c, dti_sock_t s, struct dti_addr6 *out);

/* ---- data path (no completions; the command is published at once) ----- */

/* Zero-copy receive: describes the readable bytes in place (up to two
 * pieces). Returns the total (> 0), 0 at EOF, -EAGAIN when nothing is there
 * yet, or the socket's error. The bytes stay valid until released. */
ssize_t dti_recv_borrow(dti_ctx_t *c, dti_sock_t s, struct dti_iov iov[2]);
/* Gives back the first n borrowed bytes (n <= what borrow reported). The
 * bytes are the caller's no longer at once; the engine hears of released
 * bytes in batches (a quarter of the receive ring, or sooner with the next
 * other command on the socket), so a small read costs no command and no
 * doorbell. Never fails for a full command queue (what cannot be queued now
 * goes with a later command); errors: a bad handle, n beyond what is
 * readable (-EINVAL). */
int dti_recv_release(dti_ctx_t *c, dti_sock_t s, size_t n);
/* Copying receive: up to len bytes; 0 at EOF; -EAGAIN when none yet. */
ssize_t dti_recv(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len);

/* Views (dti_rx_view, dti_tx_view and their inline helpers): dti/dti_view.h. */
#include <dti/dti_view.h>

/* Zero-copy send: describes free space in the send ring (up to two pieces)
 * for the caller to fill. Returns the total (> 0), -EAGAIN when full, or an
 * error (-EPIPE after shutdown, -ENOTCONN, the socket's error). */
ssize_t dti_send_reserve(dti_ctx_t *c, dti_sock_t s, struct dti_iov iov[2]);
/* Queues the first n reserved bytes for sending (flags: DTI_SEND_MORE).
 * -EAGAIN: the command queue is full and nothing was queued (the space stays
 * reserved, its bytes unsent); call again after dti_reap()/dti_wait(). */
int dti_send_commit(dti_ctx_t *c, dti_sock_t s, size_t n, unsigned flags);
/* Copying send: takes as much as fits, returns it, or -EAGAIN when full. */
ssize_t dti_send(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len, unsigned flags);

/* ---- region buffers ---------------------------------------------------- */

/* Allocates len bytes (rounded up to 2 KiB) of the region's pool; -ENOMEM
 * when none is left. Thread-safe; meant for setup, not for every request. */
int dti_buf_alloc(dti_t *d, uint32_t len, struct dti_buf *out);
/* The same, in the region of the engine that serves socket s: what posted
 * receives and region-buffer sends on s need when the PPE runs several
 * engines (dti_buf_alloc() gives engine 0's; a buffer of another engine's
 * region makes dti_prep_recv_into()/dti_prep_send_from() fail with -EXDEV).
 * On one engine both are the same. */
int dti_buf_alloc_for(dti_t *d, dti_sock_t s, uint32_t len, struct dti_buf *out);
void dti_buf_free(dti_t *d, const struct dti_buf *buf);

/* ---- datagram sockets (UDP over IPv4): dti/dti_dgram.h ------------------ */
#include <dti/dti_dgram.h>

/* ---- blocking convenience layer ---------------------------------------
 * Each submits one command and waits for its completion (other entries
 * reaped meanwhile are kept and returned by later dti_reap() calls).
 * timeout_ms: -1 forever. -ETIMEDOUT on timeout (the command stays in
 * flight and its completion is dropped when it comes). */

int dti_socket(dti_ctx_t *c);   /* returns the handle or a negative error */
int dti_bind(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *local);
int dti_listen(dti_ctx_t *c, dti_sock_t s, int backlog);
/* Waits for one connection; returns its handle, stores the peer if asked. */
int dti_accept(dti_ctx_t *c, dti_sock_t listener, struct dti_addr *peer, int timeout_ms);
int dti_connect(dti_ctx_t *c, dti_sock_t s, const struct dti_addr *remote, int timeout_ms);
int dti_bind6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *local, unsigned flags);
int dti_connect6(dti_ctx_t *c, dti_sock_t s, const struct dti_addr6 *remote, int timeout_ms);
int dti_shutdown(dti_ctx_t *c, dti_sock_t s, int how);
int dti_close(dti_ctx_t *c, dti_sock_t s);
int dti_abort(dti_ctx_t *c, dti_sock_t s);
int dti_setsockopt(dti_ctx_t *c, dti_sock_t s, int opt, int64_t value);
int dti_getsockopt(dti_ctx_t *c, dti_sock_t s, int opt, int64_t *value);
/* Blocks until at least one byte (or EOF / error); returns like dti_recv(). */
ssize_t dti_recv_wait(dti_ctx_t *c, dti_sock_t s, void *buf, size_t len, int timeout_ms);
/* Blocks until all len bytes are queued; returns len or an error. */
ssize_t dti_send_all(dti_ctx_t *c, dti_sock_t s, const void *buf, size_t len, int timeout_ms);
/* Submits a digest request (see dti_prep_digest()) and waits for it:
 * 0 (digest matches or no check) or -EBADMSG with *crc set; else an error. */
int dti_digest(dti_ctx_t *c, dti_sock_t s, unsigned flags, uint32_t skip, uint32_t len, uint32_t expected,
               uint32_t *crc, int timeout_ms);
/* Waits for a specific completion (by user_data) of an already submitted
 * command. 1: found, 0: timeout, < 0: error. */
int dti_wait_cqe(dti_ctx_t *c, uint64_t user_data, struct dti_cqe *out, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* DTI_DTI_H */
