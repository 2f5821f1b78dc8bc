/* dti_abi.h: the wire format of the DTI shared region and control protocol.
 *
 * Shared by libdti (C11) and the engine side (C++20); not installed. Fields
 * that the other side reads concurrently are accessed only through the
 * __atomic builtins (GCC/Clang) on both sides: plain integers in the structs
 * keep the layout identical in C and C++.
 *
 * Ownership (who writes what) is the safety contract: the engine treats every
 * byte the application can write as hostile. App-written fields are marked
 * [app]; engine-written ones [eng]. Every offset is from the region start.
 */
#ifndef DTI_ABI_H
#define DTI_ABI_H

#include <stddef.h>
#include <stdint.h>

#include <dti/dti.h> /* DTI_STATE_*, DTI_POLL*: the readiness rule below */

#define DTI_REGION_MAGIC 0x31305254444154ull /* "ETADTR01" little-endian-ish tag */
#define DTI_CACHELINE 64u

/* ---- control protocol (SOCK_SEQPACKET on the PPE's UNIX socket) -------- */

enum dti_ctl_type {
    DTI_CTL_HELLO = 1,      /* app -> PPE: attach request */
    DTI_CTL_WELCOME = 2,    /* PPE -> app: ok + fds [region memfd, doorbell eventfd] */
    DTI_CTL_REFUSED = 3,    /* PPE -> app: error code + reason text */
    DTI_CTL_OPEN_CTX = 4,   /* app -> PPE: new queue pair */
    DTI_CTL_CTX_OPENED = 5, /* PPE -> app: index + fd [wake eventfd] */
    DTI_CTL_CLOSE_CTX = 6,  /* app -> PPE: queue pair index (no reply) */
    DTI_CTL_FORK = 7,       /* app -> PPE: fd [the child's control socket]: a new
                               member of this app's group holding what the sender holds */
    DTI_CTL_FORKED = 8,     /* PPE -> app: the member exists (index: its id) */
    DTI_CTL_EXEC = 9,       /* app -> PPE: fd [the new image's control socket]: a new member of
                               this app's group holding only the handles listed (index: how many,
                               text: up to DTI_CTL_HANDLES of them, each one the sender holds) */
    DTI_CTL_EXEC_HOLD = 10, /* app -> PPE: more handles (index: count, text) for the member the
                               sender's last EXEC made, before that member spoke (its HELLO) */
    DTI_CTL_EXECED = 11,    /* PPE -> app: EXEC/EXEC_HOLD done (index: the member's id,
                               status: how many of the handles listed it now holds) */
    DTI_CTL_PASS = 12,      /* app -> PPE: fds [the socket's descriptor, region memfd, app-state
                               memfd]: socket `index` (a handle the sender holds) is in flight to
                               another process (SCM_RIGHTS); status 1: withdraw (the send failed);
                               status 2 (several engines): a ticket, no socket of this engine, only
                               the way into the sender's group here; engine: the engine of the
                               application's own socket, echoed in CLAIMED; status 3: a standing
                               offer of a listening socket (re-attach after a PPE restart): every
                               process sharing its descriptor may claim it, until its last close */
    DTI_CTL_PASSED = 13,    /* PPE -> app: PASS registered (or withdrawn) */
    DTI_CTL_CLAIM = 14,     /* app -> PPE: fds [a descriptor it received, optionally the end of a
                               new control connection to join the sender's group] */
    DTI_CTL_CLAIMED = 15,   /* PPE -> app: index: the handle, now held; status 0: in the claimant's
                               own group; 1: in the sender's group, joined through the end it sent:
                               fds [region memfd, app-state memfd, doorbell], region_size;
                               index 0xffffffff: a ticket's (no socket here); engine: PASS's */
};
/* Handles one EXEC/EXEC_HOLD message carries in its text. */
#define DTI_CTL_HANDLES 22u
/* HELLO sent on a connection that is already a member (a fork child's) only
 * updates the pid shown by eta-stat; no reply. */

struct dti_ctl_msg {
    uint32_t magic;       /* DTI_CTL_MAGIC */
    uint32_t type;        /* enum dti_ctl_type */
    uint32_t abi_version; /* sender's DTI_ABI_VERSION */
    int32_t status;       /* REFUSED: positive DTI_E_* / errno */
    uint32_t index;       /* OPEN/CLOSE/CTX_OPENED: queue pair index */
    uint32_t pid;         /* HELLO: informational (SO_PEERCRED is what counts) */
    uint64_t region_size; /* WELCOME */
    uint32_t engine;      /* HELLO: the engine wanted (DTI_ENGINE_ANY: any); WELCOME: the engine serving it */
    uint32_t n_engines;   /* WELCOME: engines the PPE runs; an app attaches to each of them */
    char text[88];        /* HELLO: app name; REFUSED: reason */
};
#define DTI_ENGINE_ANY 0xffffffffu
#define DTI_MAX_ENGINES 8u
#define DTI_CTL_MAGIC 0x4c544344u /* "DCTL" */

/* ---- region header (offset 0) ------------------------------------------ */

enum dti_engine_state {
    DTI_ENGINE_ALIVE = 1,
    DTI_ENGINE_GONE = 2,   /* engine detached this region (shutdown) */
    DTI_ENGINE_BROKEN = 3, /* engine found the region corrupt; broken_reason says why */
};

struct dti_region_header {
    /* [eng] written once before the fd is handed over; read-only after. */
    uint64_t magic;
    uint32_t abi_version;
    uint32_t header_size;
    uint64_t region_size;
    uint32_t max_contexts;
    uint32_t cmdq_entries; /* power of two */
    uint32_t evq_entries;  /* power of two, >= 2 * cmdq_entries */
    uint32_t max_sockets;
    uint32_t rx_ring_size; /* power of two: bytes reserved for each slot's receive ring, its
                              largest size; the ring itself is dti_sock_shared.rx_size */
    uint32_t tx_ring_size; /* power of two: bytes reserved for each slot's send ring, its largest
                              size; the ring itself is dti_sock_shared.tx_size (ABI 9) */
    uint64_t ctx_offset;   /* first queue pair */
    uint64_t ctx_stride;
    uint64_t sock_offset;  /* socket table: max_sockets * sizeof(dti_sock_shared) */
    uint64_t data_offset;  /* slot i: rx ring at data_offset + i*data_stride, tx after it */
    uint64_t data_stride;
    uint64_t pool_offset;  /* region buffer pool (app-managed) */
    uint64_t pool_size;
    uint32_t app_ip;       /* the IPv4 address application sockets use (host order; 0: unknown) */
    uint8_t app_ip6[16];   /* the IPv6 address a socket bound to :: connects from to a destination that is
                              not link-local (the port's first address6, network order; 0: none). ABI 14 */
    uint8_t app_ll6[16];   /* and to a link-local one: the port's link-local address (fe80::/64 and the
                              modified EUI-64 of its MAC; 0: unknown). ABI 14 */
    uint8_t pad0[DTI_CACHELINE * 3 - 140];
    /* [eng] live state, own cache line */
    uint32_t engine_state;   /* enum dti_engine_state */
    int32_t broken_reason;   /* positive DTI_E_* / errno */
    uint32_t engine_sleeping;/* 1: engine sleeps; ring the doorbell after publishing */
    uint8_t pad1[DTI_CACHELINE - 12];
};

/* ---- queue pair ---------------------------------------------------------- */

struct dti_qp_header {
    uint32_t cmd_prod;  /* [app] commands published (free-running); read by the
                           engine only before it sleeps: entries carry stamps */
    uint8_t pad0[DTI_CACHELINE - 4];
    uint32_t cmd_cons;  /* [eng] commands consumed */
    uint8_t pad1[DTI_CACHELINE - 4];
    uint32_t ev_prod;   /* [eng] entries published (for the wake protocol) */
    uint8_t pad2[DTI_CACHELINE - 4];
    uint32_t ev_cons;   /* [app] entries consumed */
    uint8_t pad3[DTI_CACHELINE - 4];
    uint32_t armed;     /* [app sets 1, eng swaps to 0 when it wakes] wake word */
    uint8_t pad4[DTI_CACHELINE - 4];
    uint32_t ev_overflow; /* [eng] count of events dropped for room (rarely written) */
    uint8_t pad5[DTI_CACHELINE - 4];
};
/* Followed by cmdq_entries * dti_cmd, then evq_entries * dti_ev.
 * Consumers poll the stamp of the next entry, not the producer index: one
 * cache line crosses per entry instead of two. evq_entries <= 32768 so a
 * stale 16-bit stamp from the previous lap never matches. */
#define DTI_EVQ_MAX 32768u
#define DTI_CMDQ_MAX 32768u

struct dti_cmd { /* 64 bytes, [app] */
    uint64_t user_data;
    uint16_t op;        /* enum dti_op */
    uint16_t flags;
    uint32_t sock;      /* handle */
    uint32_t arg0;      /* ip / backlog / max / how / opt / n / len */
    uint32_t arg1;      /* port / flags / buffer length */
    int64_t value;      /* setsockopt value */
    uint64_t offset;    /* pool buffer offset */
                        /* BIND6/CONNECT6 (ABI 11): value and offset hold the IPv6
                         * address's 16 bytes in network order (value's 8 first, as
                         * they lie in memory: dti_cmd_addr6_get/set) */
    uint32_t tag;       /* libdti's in-flight slot, echoed in the completion */
    /* SEND only, latency sampling (dti_sock_shared.trace): the TSC when the
     * program read the traced request (0: not stamped: an older libdti, or no
     * read of a traced socket since), the ticks from that read to this
     * SEND's submission, and from the program's wakeup (the sleep it
     * returned from last) to the read (0: it did not sleep). Hints only:
     * the engine checks them against its own stamps. */
    uint32_t trace_submit;
    uint64_t trace_read;
    uint32_t trace_woken;
    uint32_t stamp;     /* index + 1, stored last (release): "this entry is published" */
};

struct dti_ev { /* 64 bytes, [eng] */
    uint64_t user_data;
    int64_t value;
    int32_t res;
    uint8_t kind;       /* enum dti_cqe_kind */
    uint8_t op;
    uint16_t stamp;     /* (index + 1) mod 2^16, stored last (release) */
    uint32_t sock;
    uint32_t events;    /* events: DTI_POLL*; completions: the command's tag */
    uint32_t accepted[8];
};

/* The IPv6 address of a BIND6/CONNECT6 command: the 16 bytes of its value
 * and offset words, in memory order (no byte swapping on either side). */
static inline void dti_cmd_addr6_set(struct dti_cmd *c, const uint8_t ip[16])
{
    __builtin_memcpy(&c->value, ip, 8);
    __builtin_memcpy(&c->offset, ip + 8, 8);
}
static inline void dti_cmd_addr6_get(const struct dti_cmd *c, uint8_t ip[16])
{
    __builtin_memcpy(ip, &c->value, 8);
    __builtin_memcpy(ip + 8, &c->offset, 8);
}

/* The source of an MCAST6 command (ABI 13; :: any source): the 16 bytes of
 * the trace words (trace_submit, trace_read, trace_woken: contiguous, and
 * read by the engine for SEND only), in network order. */
#define DTI_CMD_SOURCE6_OFFSET 44u
static inline void dti_cmd_source6_set(struct dti_cmd *c, const uint8_t ip[16])
{
    __builtin_memcpy((char *)c + DTI_CMD_SOURCE6_OFFSET, ip, 16);
}
static inline void dti_cmd_source6_get(const struct dti_cmd *c, uint8_t ip[16])
{
    __builtin_memcpy(ip, (const char *)c + DTI_CMD_SOURCE6_OFFSET, 16);
}

/* ---- socket table --------------------------------------------------------- */

/* Two cache lines per socket slot (the second only the send ring's size),
 * written by the engine, but for tx_written / tx_noted: the app pairs it with
 * its private rx_head / tx_tail. */
struct dti_sock_shared {
    uint32_t gen;          /* generation of the live handle; 0: slot free */
    uint32_t rx_tail;      /* bytes the engine produced into the rx ring (free-running) */
    uint32_t tx_head;      /* send ring bytes the engine released (free-running); the app writes up to
                              tx_head + ring size. With DTI_SO_NOTSENT_LOWAT set it stays behind what
                              was released while the unsent bytes are near the mark (dti.h) */
    uint32_t state;        /* DTI_STATE_* */
    int32_t error;         /* -errno, 0 if none */
    uint32_t accept_ready; /* listeners */
    uint32_t local_ip;
    uint32_t remote_ip;
    uint16_t local_port;
    uint16_t remote_port;
    uint32_t seq;          /* bumped after every change */
    uint32_t rx_base;      /* value rx positions start from when handed to the app */
    uint32_t tx_base;
    /* [app] Send coalescing: tx_written is the app's tx_tail (bytes written
     * into the send ring, free-running from 0 like the engine's count of bytes
     * taken), stored before the SEND that covers them. tx_noted is 1 while a
     * SEND with DTI_SEND_TAIL the app queued has not been taken: the app sets
     * it when it queues one and writes no other SEND while it stays 1; the
     * engine swaps it to 0 (seq_cst) before it loads tx_written and then takes
     * every byte up to that. The app stores tx_written (seq_cst) and then loads
     * tx_noted (seq_cst): it sees 1 only while the engine's swap is still to
     * come, whose load then sees the bytes. So no byte is left without a SEND
     * that will take it. */
    uint32_t tx_written;
    uint32_t tx_noted;
    /* [eng] The receive ring's size now (a power of two, at most the
     * header's rx_ring_size, which the slot reserves). The ring grows in
     * place (same start, larger power of two) only while the app has
     * released every byte; the engine stores rx_size (and rx_base) before
     * the rx_tail store (release) that publishes any byte at the new size,
     * so a reader loads rx_tail (acquire) first, then rx_size and rx_base. */
    uint32_t rx_size;
    /* [eng] Latency sampling (ppe/README.md "Latency breakdown"): the token
     * of the engine's last trace whose readable event was this socket's,
     * stored before the event is published. A reader that finds a token it
     * has not seen stamps its read with the TSC and the SEND of its reply
     * carries the stamps (dti_cmd.trace_*). Never 0 once set. */
    uint32_t trace;
    /* ---- second cache line (ABI 9): read when the socket's rings come and
     * by the writer's slow paths, rarely written ---- */
    /* [eng] The send ring's size (a power of two, at most the header's
     * tx_ring_size, which the slot reserves): chosen when the socket's rings
     * come (SO_SNDBUF set before connect or on the listener, else the
     * engine's default) and stored before the state (release) that makes
     * the socket writable. It grows (ABI 10) only when the writer asks
     * (DTI_OP_TX_GROW): the engine stores the new size (release) before it
     * bumps tx_grow_ack. Readers mask with (tx_size - 1) & (reserve - 1): a
     * confused engine cannot send a write past the slot. */
    uint32_t tx_size;
    /* [eng] The size the engine would like the send ring to have (0 or <=
     * tx_size: none): send-buffer autotuning from the congestion window, or
     * SO_SNDBUF set on a live socket. The writer, which alone moves bytes in
     * the ring, grows it when it next finds this larger (libdti: data.c). */
    uint32_t tx_want;
    /* [eng] GROW commands the engine answered for this socket (free-running
     * from 0 when the rings come), stored (release) after tx_size: a grow
     * is done when this moves; tx_size then says whether it was taken. */
    uint32_t tx_grow_ack;
    /* [eng] IPv6 names (ABI 11): name6 is DTI_NAME6_IPV6 (| DTI_NAME6_V6ONLY)
     * for an IPv6 socket, whose addresses are local6/remote6 (network byte
     * order; the ports stay in local_port/remote_port, and local_ip/remote_ip
     * are 0), else 0 (an IPv4 socket: local_ip/remote_ip). Written with the
     * first cache line's names and covered by the same seq (a reader retries
     * a torn read), name6 stored (release) after the addresses. */
    uint32_t name6;
    uint8_t local6[16];
    uint8_t remote6[16];
    /* [eng] A datagram socket's asynchronous errors (ICMP or ICMPv6 about a
     * datagram it sent, as Linux's sk_err; issue 31): err_last the latest
     * (-errno), stored before err_seq (release), which counts them from 0
     * when the rings come. A reader reports each new count once (libdti
     * keeps the count it reported in its private slot state, shared with
     * fork children as the kernel's sk_err is one per socket). An engine
     * that predates them leaves both 0: no errors, as before. */
    uint32_t err_seq;
    int32_t err_last;
    uint8_t pad_tx[DTI_CACHELINE - 56];
};
#define DTI_NAME6_IPV6 1u   /* the socket is an IPv6 one (bind6, connect6, or accepted over IPv6) */
#define DTI_NAME6_V6ONLY 2u /* bound with DTI_BIND6_V6ONLY (a listener's siblings are bound alike) */

/* SEND's arg1 bits beyond DTI_SEND_MORE (dti.h). Without either, SEND takes
 * arg0 more bytes (native callers that manage the ring themselves). */
#define DTI_SEND_TAIL 2u /* take every byte up to tx_written (arg0: this call's, for the record); never MORE */
#define DTI_SEND_END 4u  /* take the bytes up to position `offset` (MORE sends: what follows is not theirs) */

/* An engine's handle = gen << DTI_SLOT_BITS | slot, gen in [1, DTI_GEN_MAX]:
 * what commands and events carry. What the application holds adds the
 * engine: app handle = engine << DTI_ENGINE_SHIFT | engine's handle (engine 0:
 * the same value), always below 2^31. */
#define DTI_SLOT_BITS 20u
#define DTI_SLOT_MASK ((1u << DTI_SLOT_BITS) - 1u)
#define DTI_ENGINE_SHIFT 28u
#define DTI_GEN_MAX ((1u << (DTI_ENGINE_SHIFT - DTI_SLOT_BITS)) - 1u)
#define DTI_LOCAL_MASK ((1u << DTI_ENGINE_SHIFT) - 1u)

#define DTI_POOL_BLOCK 2048u

/* The readiness rule, the one both sides apply: poll bits (DTI_POLL*) of a
 * socket in `state` with `err` pending, `readable` bytes, `writable` bytes of
 * send space and `acc` connections waiting to be accepted. libdti computes
 * it from its own view (what the app has consumed); the engine from its own
 * (what it was told) to decide which events to post. */
static inline uint32_t dti_events_of(uint32_t state, int32_t err, uint32_t readable, uint32_t writable,
                                     uint32_t acc)
{
    uint32_t ev = 0;
    if (readable > 0 || acc > 0 || (state & DTI_STATE_RD_CLOSED))
        ev |= DTI_POLLIN;
    if ((state & (DTI_STATE_CONNECTED | DTI_STATE_DGRAM)) && !(state & DTI_STATE_WR_CLOSED) && writable > 0)
        ev |= DTI_POLLOUT;
    if (state & DTI_STATE_RD_CLOSED)
        ev |= DTI_POLLRDHUP;
    if (state & (DTI_STATE_RESET | DTI_STATE_FAILED))
        ev |= DTI_POLLIN | DTI_POLLRDHUP | DTI_POLLHUP;
    if ((state & DTI_STATE_RD_CLOSED) && (state & DTI_STATE_WR_CLOSED))
        ev |= DTI_POLLHUP;
    if (err)
        ev |= DTI_POLLERR;
    return ev;
}

/* ---- flow steering ------------------------------------------------------ */

/* The engine that owns a TCP flow when the PPE runs n engines. The PPE steers
 * every received segment to its owner, its stacks pick ephemeral ports whose
 * flows they own, and libdti places an explicitly bound socket on the owner
 * of the flow it connects: one function on every side, so nobody needs
 * shared state to agree.
 *
 * It is the NIC's own choice where the NIC has RSS, so that no segment needs
 * a hop between engines there: the Toeplitz hash (Microsoft RSS) of
 * (source address, destination address, source port, destination port) with
 * the key 0x6d5a repeated, which eta-ppe programs into every RSS device, and
 * an indirection table whose entry i is (i mod 64) mod n (DTI_FLOW_RETA_SPAN).
 * That key repeats every 16 bits, so the 32-bit window of the key that an
 * input bit selects depends only on the bit's position modulo 16: the hash
 * of the 96-bit input equals the hash of its six 16-bit words XORed together
 * (dti_flow_fold; IPv6's 36-byte input likewise: dti_flow_fold6). The fold
 * is the same in both directions, so the hash is symmetric, as the steering
 * needs. Devices without RSS (net_af_packet
 * spreads by the kernel's fanout hash, which no one outside the kernel can
 * compute) get their segments steered to the owner in software.
 * Host byte order throughout, but for IPv6 addresses (their 16 bytes as on
 * the wire). */
#define DTI_FLOW_RETA_SPAN 64u

static inline uint16_t dti_flow_fold(uint32_t ip_a, uint16_t port_a, uint32_t ip_b, uint16_t port_b)
{
    return (uint16_t)((ip_a >> 16) ^ ip_a ^ (ip_b >> 16) ^ ip_b ^ port_a ^ port_b);
}

/* Toeplitz with the 0x6d5a key over a folded input: each set bit j (from the
 * most significant) selects the key's 32 bits starting at bit j. */
static inline uint32_t dti_flow_hash_of_fold(uint16_t v)
{
    const uint64_t key48 = 0x6d5a6d5a6d5aull;
    uint32_t h = 0;
    for (unsigned j = 0; j < 16; j++)
        h ^= (uint32_t)(key48 >> (16 - j)) & (0u - ((v >> (15 - j)) & 1u));
    return h;
}

static inline uint32_t dti_flow_hash(uint32_t ip_a, uint16_t port_a, uint32_t ip_b, uint16_t port_b)
{
    return dti_flow_hash_of_fold(dti_flow_fold(ip_a, port_a, ip_b, port_b));
}

static inline uint32_t dti_flow_owner(uint32_t ip_a, uint16_t port_a, uint32_t ip_b, uint16_t port_b,
                                      uint32_t n_engines)
{
    if (n_engines <= 1) return 0;
    return (dti_flow_hash(ip_a, port_a, ip_b, port_b) % DTI_FLOW_RETA_SPAN) % n_engines;
}

/* IPv6 TCP flows (ABI 14): the NIC's RSS input is (source address,
 * destination address, source port, destination port), 36 bytes, and with
 * the same 16-bit periodic key its hash is the hash of the XOR of its 18
 * 16-bit words. Addresses in network order (16 bytes each), ports in host
 * order. Symmetric, as dti_flow_owner. */
static inline uint16_t dti_flow_fold6(const uint8_t *ip_a, uint16_t port_a, const uint8_t *ip_b, uint16_t port_b)
{
    uint16_t v = (uint16_t)(port_a ^ port_b);
    for (unsigned i = 0; i < 16; i += 2)
        v ^= (uint16_t)((ip_a[i] ^ ip_b[i]) << 8 | (ip_a[i + 1] ^ ip_b[i + 1]));
    return v;
}

static inline uint32_t dti_flow_hash6(const uint8_t *ip_a, uint16_t port_a, const uint8_t *ip_b, uint16_t port_b)
{
    return dti_flow_hash_of_fold(dti_flow_fold6(ip_a, port_a, ip_b, port_b));
}

static inline uint32_t dti_flow_owner6(const uint8_t *ip_a, uint16_t port_a, const uint8_t *ip_b, uint16_t port_b,
                                       uint32_t n_engines)
{
    if (n_engines <= 1) return 0;
    return (dti_flow_hash6(ip_a, port_a, ip_b, port_b) % DTI_FLOW_RETA_SPAN) % n_engines;
}

#ifdef __cplusplus
static_assert(sizeof(struct dti_ctl_msg) == 128, "control message layout");
static_assert(sizeof(struct dti_region_header) == 4 * DTI_CACHELINE, "header layout");
static_assert(sizeof(struct dti_qp_header) == 6 * DTI_CACHELINE, "qp layout");
static_assert(sizeof(struct dti_cmd) == 64, "cmd layout");
static_assert(offsetof(struct dti_cmd, trace_submit) == DTI_CMD_SOURCE6_OFFSET &&
                  offsetof(struct dti_cmd, trace_woken) == DTI_CMD_SOURCE6_OFFSET + 12, "MCAST6 source words");
static_assert(sizeof(struct dti_ev) == 64, "ev layout");
static_assert(sizeof(struct dti_sock_shared) == 2 * DTI_CACHELINE, "sock layout");
static_assert(sizeof(struct dti_dgram) == DTI_DGRAM_ALIGN, "datagram record layout");
#else
_Static_assert(sizeof(struct dti_ctl_msg) == 128, "control message layout");
_Static_assert(sizeof(struct dti_region_header) == 4 * DTI_CACHELINE, "header layout");
_Static_assert(sizeof(struct dti_qp_header) == 6 * DTI_CACHELINE, "qp layout");
_Static_assert(sizeof(struct dti_cmd) == 64, "cmd layout");
_Static_assert(offsetof(struct dti_cmd, trace_submit) == DTI_CMD_SOURCE6_OFFSET &&
                   offsetof(struct dti_cmd, trace_woken) == DTI_CMD_SOURCE6_OFFSET + 12, "MCAST6 source words");
_Static_assert(sizeof(struct dti_ev) == 64, "ev layout");
_Static_assert(sizeof(struct dti_sock_shared) == 2 * DTI_CACHELINE, "sock layout");
_Static_assert(sizeof(struct dti_dgram) == DTI_DGRAM_ALIGN, "datagram record layout");
#endif

#endif /* DTI_ABI_H */
