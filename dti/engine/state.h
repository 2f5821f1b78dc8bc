// state.h: the engine's data model, shared by its modules (not installed;
// eta-ppe sees only <dti/engine.h>): a region's geometry, its socket slots
// and queue-pair contexts (Group), the processes attached to it (Member),
// sockets in flight between processes (Pass). Plain data: the modules that
// act on it are table.h (the region and socket table), publisher.h
// (completions, events, wakes), commands.h (the command path) and control.h
// (attach, groups, pass); server_impl.h composes them.
#pragma once

#include <dti/dti.h>
#include <dti/engine.h>

#include "digest.h"
#include "dti_abi.h"

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dti::engine::detail {

template <typename T> inline T load_acq(const T *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
template <typename T> inline void store_rel(T *p, T v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
template <typename T> inline void store_rlx(T *p, T v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

inline bool pow2(uint64_t v) { return v && !(v & (v - 1)); }
inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

constexpr uint32_t kMaxContexts = 64; // watcher sets are 64-bit masks

struct Geometry {
    uint64_t ctx_offset, ctx_stride, sock_offset, data_offset, data_stride, pool_offset, size;
    uint32_t rx_reserve; // each slot's receive ring at most (Limits::rx_ring_max)
    uint32_t tx_reserve; // each slot's send ring at most (Limits::tx_ring_max)
    uint64_t committed;  // bytes in use with every ring at its starting size
};

// The region's layout for these limits; false when they are unusable.
bool geometry(const Limits &l, Geometry *g); // region.cc
// Writes the region header (the application checks it at attach).
void layout_region_impl(void *region, const Limits &l, const Geometry &g);

// A command waiting for something to happen on a socket.
struct Pending {
    bool used = false;
    uint16_t ctx = 0;
    uint32_t tag = 0;
    uint32_t arg = 0;    // accept: max; recv_into, post: length
    uint64_t offset = 0; // recv_into: pool offset; post: address in the process
    uint32_t least = 0;  // post: complete once this many bytes landed
    uint32_t landed = 0; // post: bytes already written into the process
    uint32_t pid = 0;    // post: the process written into (its member's SO_PEERCRED pid)
};

struct Slot {
    uint32_t gen = 0;
    uint32_t holders = 0;   // members of the group that hold the handle (kernel: open files)
    bool has_sid = false;   // the transport knows this socket
    bool rings_out = false; // the transport holds this slot's rings
    bool embryo = false;    // passive open not yet accepted
    bool in_free_list = true;
    SockId sid = kNoSock;
    uint32_t parent = 0;    // embryo: listener slot
    uint32_t state = 0;     // DTI_STATE_*
    int32_t error = 0;
    uint32_t rx_consumed = 0, rx_tail = 0, tx_committed = 0, tx_head = 0;
    uint32_t rx_base = 0, tx_base = 0;
    uint32_t rx_size = 0;   // the receive ring now (grows in place: grow_rx)
    uint32_t rcvbuf_set = 0; // SO_RCVBUF as set (clamped; 0: never): read back before the ring exists
    uint32_t tx_size = 0;    // the send ring, chosen when the rings come (0: none yet); grows (TX_GROW)
    uint32_t tx_want = 0;    // the size last published in tx_want (autotuning, SO_SNDBUF; 0: none)
    uint32_t tx_grow_acks = 0; // TX_GROW commands answered since the rings came (tx_grow_ack)
    uint32_t sndbuf_set = 0; // SO_SNDBUF as Linux keeps it (clamped; 0: never); accepted slots inherit it
    bool rx_rebase = false; // grown: rx_base is recomputed for the new size (settle_rx)
    uint32_t embryos = 0;   // listener: connections waiting for accept
    uint64_t watchers = 0;
    uint32_t interest = 0;
    bool out_armed = false;
    uint32_t last_mask = 0, last_rx_tail = 0, last_accept = 0;
    bool dirty = false;
    bool ends_final = false; // local and remote are the connection's: refresh() stops asking info()
    bool dgram = false;      // a datagram socket (udp.cc): record rings, its own commands
    bool ipv6 = false;       // its names are IPv6 ones (setup.cc: dti_sock_shared.name6)
    bool v6only = false;     // bound with DTI_BIND6_V6ONLY (published in name6)
    Endpoint local, remote;
    Pending connect, accept, recv_into;
    Pending post; // RECV_POST: received bytes go straight into the process's memory (posted.cc)
    digest::SocketDigests dg; // CRC32C ranges waiting for bytes (DTI_OP_DIGEST)
};

struct Ctx {
    int member = -1;       // the process (member) the queue pair belongs to
    bool open = false;
    bool draining = false; // closing: run what is queued, answer nothing
    bool published = false;
    bool wake_listed = false;
    int wake_fd = -1;
    uint32_t cmd_cons = 0, ev_prod = 0, ev_overflow = 0;
    uint32_t ev_cons_seen = 0; // last ev_cons read (validated); reread only when short of room
    uint32_t ev_stamped = 0;   // entries below this are visible to the app
    std::vector<dti_ev> shadow; // entries are built here and copied out at publish
    dti_qp_header *qp = nullptr;
    dti_cmd *cmds = nullptr;
    dti_ev *evs = nullptr;
};

// A socket one member sent to another process with SCM_RIGHTS, until that
// process claims it by showing the PPE the same open file (pass.cc).
struct Pass {
    uint32_t slot = 0;
    uint32_t handle = 0;
    uint32_t uid = 0; // the sender's: only that user or root may claim it
    dev_t dev = 0;    // the placeholder's identity: st_dev/st_ino of a socket
    ino_t ino = 0;    // name one socket while the PPE keeps `fd` open
    int fd = -1;      // the PPE's copy: the inode cannot be reused meanwhile
    // Several engines: one descriptor is passed on every engine. A ticket
    // (PASS status 2) carries no socket of this engine, only the way into
    // the sender's group here; `engine` (echoed in CLAIMED) names the engine
    // of the application's own socket.
    bool ticket = false;
    uint32_t engine = 0;
    // A standing offer (PASS status 3): a listener made again after a PPE
    // restart, for the other processes that share its placeholder (a forked
    // server's workers) to claim, each a hold. Never consumed by a claim, no
    // hold of its own: it goes when the listener's last hold goes.
    bool standing = false;
};

// One shared region and the sockets in it: the group of an application
// process and the children it forked (they inherit the mapping). Each of
// those processes is a Member with its own control connection, contexts and
// holds; public attachment ids are member ids.
struct Group {
    int id = -1;
    uint16_t epoch = 0;
    uint32_t members = 0;
    int doorbell = -1;
    bool owns_mapping = false;
    bool broken = false;
    bool dying = false;
    uint8_t *base = nullptr;
    uint64_t size = 0;
    dti_region_header *hdr = nullptr;
    dti_sock_shared *socks = nullptr;
    Limits lim;
    Geometry geo;
    std::vector<Slot> slots;
    std::vector<uint32_t> free_slots;
    std::vector<Ctx> ctxs;
    std::vector<uint16_t> live_ctxs;  // indices of open contexts: the poll loop visits only these
    std::vector<uint16_t> to_publish; // contexts with entries not yet stamped
    std::vector<uint32_t> dirty;
    uint32_t rings_out = 0;
    uint32_t open_sockets = 0;
    uint64_t rx_grown = 0; // bytes live rings have grown beyond their starting size
    uint64_t tx_grown = 0; // bytes live send rings (SO_SNDBUF, grown) hold beyond tx_ring_size
    // Sockets in flight to another process (SCM_RIGHTS; pass.cc): each holds
    // its socket open, as the kernel's in-flight file does, until claimed.
    std::vector<Pass> passes;
    dev_t region_dev = 0;  // the region memfd's identity (fstat at attach): a
    ino_t region_ino = 0;  // PASS must send this file to be handed on
    int region_fd = -1;    // for a claimant joining the group (from the first PASS)
    int priv_fd = -1;      // libdti's app-state memfd (idem)

    uint8_t *rx_ring(uint32_t slot) const { return base + geo.data_offset + geo.data_stride * slot; }
    uint8_t *tx_ring(uint32_t slot) const { return rx_ring(slot) + geo.rx_reserve; }
    // A slot's send ring size: its own once its rings came, else the default.
    uint32_t tx_size(uint32_t slot) const { return slots[slot].tx_size ? slots[slot].tx_size : lim.tx_ring_size; }
};

// One process attached to a group: the creator of the region, or a child
// that joined it at fork. Holds are per member and per socket slot: a socket
// stays open while any member holds it (kernel file semantics).
struct Member {
    int id = -1;
    int fd = -1;   // control connection (-1: attach_memory)
    int group = -1;
    uint32_t uid = 0, pid = 0; // pid: what eta-stat shows (a fork child's HELLO may set it)
    // The kernel's rule for ports below net.ipv4.ip_unprivileged_port_start:
    // binding them needs CAP_NET_BIND_SERVICE. Taken at attach from the
    // process the control socket's SO_PEERCRED names (never from the region),
    // and again at each such BIND from the process the kernel vouches for:
    // cred_pid (SO_PEERCRED at attach; a fork child's SCM_CREDENTIALS, which
    // the kernel fills in for the sender), with its start time so a reused
    // pid is not mistaken for it. 0: not known (the rule taken at attach or
    // inherited at fork applies).
    bool bind_service = false;
    uint32_t unprivileged_port_start = 1024;
    uint32_t cred_pid = 0;
    uint64_t cred_start = 0;
    std::string name;
    std::vector<bool> holds;
    uint32_t held = 0;
    uint64_t ctx_mask = 0; // its queue pairs
    // exec: the member this one's last EXEC made, which may still be given
    // holds (EXEC_HOLD) until it speaks; and, on that member, who made it.
    int exec_child = -1;
    int exec_parent = -1;
};


} // namespace dti::engine::detail
