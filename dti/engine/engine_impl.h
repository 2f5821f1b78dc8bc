// engine_impl.h: the engine's internal interface, shared by its files (not
// installed; eta-ppe sees only <dti/engine.h>). One EngineImpl serves every
// region of one engine thread; its methods live in the file of their concern:
//   control.cc       the control protocol over the SEQPACKET socket (HELLO,
//                    WELCOME, OPEN/CLOSE_CTX, FORK, EXEC, SCM_RIGHTS,
//                    credentials and the privileged-port rule)
//   groups.cc        process groups, their members and holds
//   region.cc        region layout and the ring memory given to the transport
//   commands.cc      taking commands from the queues and executing them
//                    (decoder.h checks each one first)
//   posted.cc        posted receives into the process's memory (RECV_POST)
//   completions.cc   completions, events, wakeups and the sleep protocol
//   socket_table.cc  the socket table the application reads, transport events
//   engine.cc        the poll loop and Engine::create
//
// These files are compiled as one translation unit (meson unity build of
// dti_engine_lib, meson.build) and everything here is in an anonymous
// namespace, as when it was one file: the compiler then inlines the command
// loop (read, decode, execute, complete) as before the split. Measured with
// callgrind, instructions of Engine::poll() per command, see dti/README.md.
#pragma once

#include <dti/dti.h>
#include <dti/engine.h>

#include "decoder.h"
#include "digest.h"
#include "dti_abi.h"

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dti::engine::detail {
namespace {

template <typename T> T load_acq(const T *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
template <typename T> void store_rel(T *p, T v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
template <typename T> void store_rlx(T *p, T v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

inline bool pow2(uint64_t v) { return v && !(v & (v - 1)); }
inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

constexpr uint32_t kMaxContexts = 64; // watcher sets are 64-bit masks

struct Geometry {
    uint64_t ctx_offset, ctx_stride, sock_offset, data_offset, data_stride, pool_offset, size;
    uint32_t rx_reserve; // each slot's receive ring at most (Limits::rx_ring_max)
    uint64_t committed;  // bytes in use with every ring at its starting size
};

// The region's layout for these limits; false when they are unusable.
bool geometry(const Limits &l, Geometry *g);
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
    bool rx_rebase = false; // grown: rx_base is recomputed for the new size (settle_rx)
    uint32_t embryos = 0;   // listener: connections waiting for accept
    uint64_t watchers = 0;
    uint32_t interest = 0;
    bool out_armed = false;
    uint32_t last_mask = 0, last_rx_tail = 0, last_accept = 0;
    bool dirty = false;
    bool ends_final = false; // local and remote are the connection's: refresh() stops asking info()
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
    // Sockets in flight to another process (SCM_RIGHTS; pass.cc): each holds
    // its socket open, as the kernel's in-flight file does, until claimed.
    std::vector<Pass> passes;
    dev_t region_dev = 0;  // the region memfd's identity (fstat at attach): a
    ino_t region_ino = 0;  // PASS must send this file to be handed on
    int region_fd = -1;    // for a claimant joining the group (from the first PASS)
    int priv_fd = -1;      // libdti's app-state memfd (idem)

    uint8_t *rx_ring(uint32_t slot) const { return base + geo.data_offset + geo.data_stride * slot; }
    uint8_t *tx_ring(uint32_t slot) const { return rx_ring(slot) + geo.rx_reserve; }
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

// The privileged-port rule (control.cc).
bool may_bind_service(const ucred &cred);
uint64_t process_start_time(uint32_t pid);
int bind_service_now(uint32_t pid, uint64_t start);
uint32_t unprivileged_port_start();

// Control messages (control.cc).
namespace ctl {
bool send_msg(int fd, const dti_ctl_msg &m, const int *fds, int nfds);
void refuse(int fd, int code, const std::string &why);
int recv_msg(int fd, dti_ctl_msg *m, int *passed = nullptr, ucred *cred = nullptr, int flags = 0,
             int *more = nullptr, int n_more = 0);
} // namespace ctl

class EngineImpl final : public Engine {
  public:
    EngineImpl(Transport &t, const Limits &l) : tr_(t), lim_(l) {}
    ~EngineImpl() override
    {
        for (auto &group : groups_)
            if (group)
                finalize(*group);
    }

    int attach(int fd, std::string *why) override;
    void control(int id) override;
    void detach(int id) override;
    void shutdown() override;
    int control_fd(int id) const override
    {
        const Member *m = member(id);
        return m ? m->fd : -1;
    }
    int doorbell_fd(int id) const override
    {
        const Member *m = member(id);
        return m ? group_of(*m).doorbell : -1;
    }
    std::vector<int> take_joined() override { return std::exchange(joined_, {}); }
    std::vector<AttachmentInfo> attachments() const override;
    unsigned poll() override;
    std::span<const int> wakeups() const override { return wake_fds_; }
    void clear_wakeups() override;
    void flush_wakeups() override;
    bool prepare_sleep() override;
    void end_sleep() override;
    std::vector<int> doorbell_fds() const override;
    bool provide(uint64_t user, RingMemory *out) override;
    void reclaim(uint64_t user, const RingMemory &mem) override;
    bool grow_rx(uint64_t user, RingMemory *mem, uint32_t want) override;
    const Stats &stats() const override { return stats_; }
    int attach_memory(void *region, uint64_t size, uint32_t contexts) override;

  private:
    Group *get(int id) const
    {
        return id >= 0 && size_t(id) < groups_.size() ? groups_[size_t(id)].get() : nullptr;
    }
    Member *member(int id) const
    {
        return id >= 0 && size_t(id) < members_.size() ? members_[size_t(id)].get() : nullptr;
    }
    Group &group_of(const Member &m) const { return *groups_[size_t(m.group)]; }
    Member &owner(const Group &group, uint16_t ci) const { return *members_[size_t(group.ctxs[ci].member)]; }
    uint64_t tag_of(const Group &group, uint32_t slot) const
    {
        return uint64_t{group.epoch} << 48 | uint64_t(uint32_t(group.id)) << 32 | slot;
    }
    Group *group_of_tag(uint64_t user) const
    {
        Group *group = get(int((user >> 32) & 0xffff));
        return group && group->epoch == uint16_t(user >> 48) ? group : nullptr;
    }
    Group *new_group(std::string *why, int *err);
    Member *new_member(Group &group, int fd, std::string *why, int *err);
    void release_member(Member &m);
    void leave(Member &m);
    void close_ctx(Group &group, uint16_t ci);
    void drain_member(Group &group, const Member &m);
    void drain_ctx(Group &group, uint16_t ci, bool answer);
    void fork_member(Member &parent, int child_fd);
    Member *member_like(Member &parent, int child_fd);
    void learn_pid(Member &m, const ucred &cred);
    bool may_bind_privileged(Member &m);
    void exec_member(Member &parent, int child_fd, const dti_ctl_msg &m);
    void exec_hold(Member &parent, const dti_ctl_msg &m);
    uint32_t grant_holds(Member &parent, Member &child, const dti_ctl_msg &m);
    void answer_exec(Member &parent, const Member &child, uint32_t granted);
    // Passing sockets between processes (pass.cc).
    void pass_socket(Member &sender, const int fds[3], const dti_ctl_msg &m);
    void claim_socket(Member &claimant, int fd, int join_fd);
    void drop_pass(Group &group, size_t i);
    void drop_passes(Group &group);
    void drop_offers(Group &group, uint32_t si);
    void last_hold_gone(Group &group, uint32_t si, bool abortive);
    void init_region(Group &group);
    Slot *ring_owner(Group &group, const uint8_t *rx);
    void settle_rx(Group &group, uint32_t si);
    void consume_rx(Group &group, uint32_t si, uint32_t n);
    void release_growth(Group &group, uint32_t si);
    void release_id(Group &group);
    void finalize(Group &group);
    void break_region(Group &group, int reason);
    void abort_all(Group &group, bool keep_closing);
    void maybe_finish(Group &group);

    // commands
    // The test process_ctx() starts with, inline in poll(): the slot at the
    // consumer index carries the next stamp (an idle context costs no call).
    static bool command_waiting(const Group &group, const Ctx &c)
    {
        return load_acq(&c.cmds[c.cmd_cons & (group.lim.cmdq_entries - 1)].stamp) == c.cmd_cons + 1;
    }
    void process_ctx(Group &group, uint16_t ci, unsigned *work);
    // Inlined into process_ctx(), its only caller, as when the engine was one
    // file: the call would cost about 20 instructions per command.
    [[gnu::always_inline]] inline void execute(Group &group, uint16_t ctx_index, const dti_cmd &raw);
    void refuse_command(Group &group, uint16_t ctx_index, uint32_t slot_index, const Decoded &d);
    CommandBounds bounds_of(const Group &group) const
    {
        return CommandBounds{group.lim.cmdq_entries, group.lim.max_sockets, group.geo.pool_offset, group.lim.pool_size};
    }
    Slot *slot_of(Group &group, const Member &m, uint32_t handle, uint32_t *index);
    // slot_of() for a decoded command (the decoder checked the slot index
    // against max_sockets and that the generation is not 0).
    static Slot *held_slot(Group &group, const Member &m, const Command &cmd)
    {
        Slot &s = group.slots[cmd.slot];
        return s.gen == cmd.gen && s.holders && m.holds[cmd.slot] ? &s : nullptr;
    }
    int32_t cmd_socket(Group &group, Member &m);
    void cmd_accept(Group &group, uint16_t ci, uint32_t ls, const Command &c);
    int32_t accept_some(Group &group, Member &m, uint32_t ls, uint32_t max, uint32_t *out);
    void take_hold(Group &group, Member &m, uint32_t si);
    void drop_hold(Group &group, Member &m, uint32_t si, bool abortive);
    void cmd_send(Group &group, uint32_t si, const Command &c);
    uint32_t take_written(Group &group, uint32_t si);
    void reset_written(Group &group, uint32_t si);
    bool commit_to(Group &group, uint32_t si, uint32_t end, bool more);
    void take_unsent(Group &group, uint32_t si);
    void cmd_release(Group &group, uint32_t si, const Command &c);
    int32_t cmd_send_from(Group &group, uint32_t si, const Command &c);
    void cmd_watch(Group &group, uint16_t ci, uint32_t si, uint32_t events);
    bool try_recv_into(Group &group, uint32_t si);
    // Posted receive into the process's own memory (posted.cc).
    void cmd_post(Group &group, uint16_t ci, uint32_t si, const Command &c);
    void cmd_cancel_post(Group &group, uint32_t si);
    void try_post(Group &group, uint32_t si);
    void end_post(Group &group, uint32_t si, int32_t res);
    void cmd_digest(Group &group, uint16_t ci, uint32_t si, const Command &c);
    digest::Ring rx_digest_ring(const Group &group, uint32_t si) const
    {
        return digest::Ring{group.rx_ring(si), group.slots[si].rx_size - 1, group.slots[si].rx_base};
    }
    digest::Ring tx_digest_ring(const Group &group, uint32_t si) const
    {
        return digest::Ring{group.tx_ring(si), group.lim.tx_ring_size - 1, group.slots[si].tx_base};
    }
    void digest_rx(Group &group, uint32_t si);
    void digest_tx(Group &group, uint32_t si);
    void digest_ends(Group &group, uint32_t si);
    void digests_done(Group &group, uint32_t si, const digest::Done *d, uint32_t n);

    // completions and events
    uint32_t ev_used(Group &group, Ctx &c, uint32_t want);
    bool complete(Group &group, uint16_t ci, uint32_t tag, int32_t res, uint32_t sock,
                  int64_t value = 0, const uint32_t *accepted = nullptr);
    void finish_pending(Group &group, Pending &p, int32_t res, uint32_t sock);
    void cancel_pending(Group &group, Slot &s, int32_t res, uint32_t sock);
    void publish(Group &group);
    void to_publish(Group &group, uint16_t ci)
    {
        if (!group.ctxs[ci].published) {
            group.ctxs[ci].published = true;
            group.to_publish.push_back(ci);
            table_work_ = true;
        }
    }
    void post_event(Group &group, uint16_t ci, uint32_t sock, uint32_t mask);

    // socket state
    void mark(Group &group, uint32_t si);
    void refresh(Group &group, uint32_t si);
    void write_shared(Group &group, uint32_t si);
    void notify(Group &group, uint32_t si);
    void transport_events(unsigned *work);
    void on_event(const TransportEvent &e);
    void maybe_free(Group &group, uint32_t si);
    uint32_t handle(const Group &group, uint32_t si) const
    {
        return group.slots[si].gen << DTI_SLOT_BITS | si;
    }

    Transport &tr_;
    Limits lim_;
    Stats stats_;
    std::vector<std::unique_ptr<Group>> groups_; // groups (regions), by internal id
    std::vector<std::unique_ptr<Member>> members_;  // by public id
    std::vector<int> joined_;                       // members made by FORK, not yet taken
    uint16_t next_epoch_ = 1;
    std::vector<int> wake_fds_;
    std::vector<std::pair<Group *, uint16_t>> wake_ctxs_;
    bool sleeping_ = false;
    // Set by mark() and to_publish(): poll()'s table and publish pass has work.
    bool table_work_ = false;
};

} // namespace
} // namespace dti::engine::detail
