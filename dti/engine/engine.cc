// The engine side of the DTI: serves application regions over a Transport.
#include <dti/dti.h>
#include <dti/engine.h>

#include "dti_abi.h"
#include "digest.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>
#include <cstddef>
#include <cstring>

#include <linux/capability.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

namespace dti::engine {
namespace {

template <typename T> T load_acq(const T *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
template <typename T> void store_rel(T *p, T v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
template <typename T> void store_rlx(T *p, T v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

bool pow2(uint64_t v) { return v && !(v & (v - 1)); }
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

constexpr uint32_t kMaxContexts = 64; // watcher sets are 64-bit masks

struct Geometry {
    uint64_t ctx_offset, ctx_stride, sock_offset, data_offset, data_stride, pool_offset, size;
};

bool geometry(const Limits &l, Geometry *g)
{
    if (!pow2(l.cmdq_entries) || !pow2(l.evq_entries) || l.evq_entries < 2 * l.cmdq_entries ||
        l.cmdq_entries > DTI_CMDQ_MAX || l.evq_entries > DTI_EVQ_MAX || !pow2(l.rx_ring_size) || !pow2(l.tx_ring_size) ||
        l.rx_ring_size > (1u << 30) || l.tx_ring_size > (1u << 30) || l.max_contexts == 0 ||
        l.max_contexts > kMaxContexts || l.max_sockets == 0 || l.max_sockets > DTI_SLOT_MASK)
        return false;
    g->ctx_offset = 4096;
    g->ctx_stride = align_up(sizeof(dti_qp_header) + uint64_t{l.cmdq_entries} * sizeof(dti_cmd) +
                                 uint64_t{l.evq_entries} * sizeof(dti_ev),
                             DTI_CACHELINE);
    g->sock_offset = align_up(g->ctx_offset + g->ctx_stride * l.max_contexts, 4096);
    g->data_offset = align_up(g->sock_offset + uint64_t{l.max_sockets} * sizeof(dti_sock_shared), 4096);
    g->data_stride = uint64_t{l.rx_ring_size} + l.tx_ring_size;
    g->pool_offset = align_up(g->data_offset + g->data_stride * l.max_sockets, 4096);
    g->size = align_up(g->pool_offset + l.pool_size, 4096);
    return true;
}

// A command waiting for something to happen on a socket.
struct Pending {
    bool used = false;
    uint16_t ctx = 0;
    uint32_t tag = 0;
    uint32_t arg = 0;    // accept: max; recv_into: length
    uint64_t offset = 0; // recv_into: pool offset
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
    uint32_t embryos = 0;   // listener: connections waiting for accept
    uint64_t watchers = 0;
    uint32_t interest = 0;
    bool out_armed = false;
    uint32_t last_mask = 0, last_rx_tail = 0, last_accept = 0;
    bool dirty = false;
    Endpoint local, remote;
    Pending connect, accept, recv_into;
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

// One shared region and the sockets in it: the group of an application
// process and the children it forked (they inherit the mapping). Each of
// those processes is a Member with its own control connection, contexts and
// holds; public attachment ids are member ids.
struct Attachment {
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

    uint8_t *rx_ring(uint32_t slot) const { return base + geo.data_offset + geo.data_stride * slot; }
    uint8_t *tx_ring(uint32_t slot) const { return rx_ring(slot) + lim.rx_ring_size; }
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

// Whether the process that connected the control socket may bind ports
// below net.ipv4.ip_unprivileged_port_start: CAP_NET_BIND_SERVICE in its
// effective set (/proc/<pid>/status CapEff, as the kernel checks). Where its
// /proc entry cannot be read (another pid namespace), uid 0 decides.
bool may_bind_service(const ucred &cred)
{
    std::string path = "/proc/" + std::to_string(cred.pid) + "/status";
    FILE *f = std::fopen(path.c_str(), "re");
    if (!f)
        return cred.uid == 0;
    char line[256];
    bool found = false, cap = false;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long long eff = 0;
        if (std::sscanf(line, "CapEff: %llx", &eff) == 1) {
            found = true;
            cap = (eff >> CAP_NET_BIND_SERVICE) & 1;
            break;
        }
    }
    std::fclose(f);
    return found ? cap : cred.uid == 0;
}

// The start time (clock ticks after boot, /proc/<pid>/stat field 22) of a
// process: with the pid it names one process over the machine's uptime.
// 0 when it cannot be read.
uint64_t process_start_time(uint32_t pid)
{
    std::string path = "/proc/" + std::to_string(pid) + "/stat";
    FILE *f = std::fopen(path.c_str(), "re");
    if (!f)
        return 0;
    char buf[1024];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = 0;
    // The command name (field 2) may hold spaces and parentheses: count
    // fields from the last ')'.
    const char *p = std::strrchr(buf, ')');
    if (!p)
        return 0;
    unsigned long long start = 0;
    int field = 2;
    for (p++; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    if (field != 22 || std::sscanf(p, "%llu", &start) != 1)
        return 0;
    return start;
}

// CAP_NET_BIND_SERVICE of the process now: 1 or 0, or -1 when it cannot
// be told (gone, another pid namespace, its pid reused by another process).
int bind_service_now(uint32_t pid, uint64_t start)
{
    if (pid == 0 || start == 0)
        return -1;
    std::string path = "/proc/" + std::to_string(pid) + "/status";
    FILE *f = std::fopen(path.c_str(), "re");
    if (!f)
        return -1;
    char line[256];
    int cap = -1;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long long eff = 0;
        if (std::sscanf(line, "CapEff: %llx", &eff) == 1) {
            cap = int((eff >> CAP_NET_BIND_SERVICE) & 1);
            break;
        }
    }
    std::fclose(f);
    // Checked after reading: had the pid been reused meanwhile, the start
    // time tells.
    return process_start_time(pid) == start ? cap : -1;
}

// The first port anyone may bind (1024 unless the sysctl says otherwise).
uint32_t unprivileged_port_start()
{
    FILE *f = std::fopen("/proc/sys/net/ipv4/ip_unprivileged_port_start", "re");
    unsigned v = 1024;
    if (f) {
        if (std::fscanf(f, "%u", &v) != 1)
            v = 1024;
        std::fclose(f);
    }
    return v;
}

// Copies a command with word-sized relaxed atomic loads: the application may
// be scribbling on it concurrently; we read each word exactly once.
dti_cmd read_cmd(const dti_cmd *src)
{
    uint64_t w[sizeof(dti_cmd) / 8];
    const uint64_t *s = reinterpret_cast<const uint64_t *>(src);
    for (size_t i = 0; i < sizeof w / 8; i++)
        w[i] = __atomic_load_n(s + i, __ATOMIC_RELAXED);
    dti_cmd c;
    std::memcpy(&c, w, sizeof c);
    return c;
}

bool option_of(uint32_t opt, Option *out)
{
    switch (opt) {
    case DTI_SO_NODELAY: *out = Option::kNoDelay; return true;
    case DTI_SO_CORK: *out = Option::kCork; return true;
    case DTI_SO_KEEPALIVE: *out = Option::kKeepAlive; return true;
    case DTI_SO_KEEPIDLE: *out = Option::kKeepIdleSec; return true;
    case DTI_SO_KEEPINTVL: *out = Option::kKeepIntvlSec; return true;
    case DTI_SO_KEEPCNT: *out = Option::kKeepCnt; return true;
    case DTI_SO_MAXSEG: *out = Option::kMaxSeg; return true;
    case DTI_SO_USER_TIMEOUT: *out = Option::kUserTimeoutMs; return true;
    case DTI_SO_LINGER: *out = Option::kLingerSec; return true;
    case DTI_SO_REUSEADDR: *out = Option::kReuseAddr; return true;
    case DTI_SO_REUSEPORT: *out = Option::kReusePort; return true;
    case DTI_SO_TOS: *out = Option::kTos; return true;
    case DTI_SO_RCVLOWAT: *out = Option::kRcvLowat; return true;
    default: return false;
    }
}

class EngineImpl final : public Engine {
  public:
    EngineImpl(Transport &t, const Limits &l) : tr_(t), lim_(l) {}
    ~EngineImpl() override
    {
        for (auto &a : atts_)
            if (a)
                finalize(*a);
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
        return m ? group(*m).doorbell : -1;
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
    const Stats &stats() const override { return stats_; }
    int attach_memory(void *region, uint64_t size, uint32_t contexts) override;

  private:
    Attachment *get(int id) const
    {
        return id >= 0 && size_t(id) < atts_.size() ? atts_[size_t(id)].get() : nullptr;
    }
    Member *member(int id) const
    {
        return id >= 0 && size_t(id) < members_.size() ? members_[size_t(id)].get() : nullptr;
    }
    Attachment &group(const Member &m) const { return *atts_[size_t(m.group)]; }
    Member &owner(const Attachment &a, uint16_t ci) const { return *members_[size_t(a.ctxs[ci].member)]; }
    uint64_t tag_of(const Attachment &a, uint32_t slot) const
    {
        return uint64_t{a.epoch} << 48 | uint64_t(uint32_t(a.id)) << 32 | slot;
    }
    Attachment *att_of_tag(uint64_t user) const
    {
        Attachment *a = get(int((user >> 32) & 0xffff));
        return a && a->epoch == uint16_t(user >> 48) ? a : nullptr;
    }
    Attachment *new_attachment(std::string *why, int *err);
    Member *new_member(Attachment &a, int fd, std::string *why, int *err);
    void release_member(Member &m);
    void leave(Member &m);
    void close_ctx(Attachment &a, uint16_t ci);
    void drain_member(Attachment &a, const Member &m);
    void drain_ctx(Attachment &a, uint16_t ci, bool answer);
    void fork_member(Member &parent, int child_fd);
    Member *member_like(Member &parent, int child_fd);
    void learn_pid(Member &m, const ucred &cred);
    bool may_bind_privileged(Member &m);
    void exec_member(Member &parent, int child_fd, const dti_ctl_msg &m);
    void exec_hold(Member &parent, const dti_ctl_msg &m);
    uint32_t grant_holds(Member &parent, Member &child, const dti_ctl_msg &m);
    void answer_exec(Member &parent, const Member &child, uint32_t granted);
    void init_region(Attachment &a);
    void release_id(Attachment &a);
    void finalize(Attachment &a);
    void break_region(Attachment &a, int reason);
    void abort_all(Attachment &a, bool keep_closing);
    void maybe_finish(Attachment &a);

    // commands
    void process_ctx(Attachment &a, uint16_t ci, unsigned *work);
    void execute(Attachment &a, uint16_t ci, const dti_cmd &c);
    Slot *slot_of(Attachment &a, const Member &m, uint32_t handle, uint32_t *index);
    int32_t cmd_socket(Attachment &a, Member &m);
    void cmd_accept(Attachment &a, uint16_t ci, uint32_t ls, const dti_cmd &c);
    int32_t accept_some(Attachment &a, Member &m, uint32_t ls, uint32_t max, uint32_t *out);
    void take_hold(Attachment &a, Member &m, uint32_t si);
    void drop_hold(Attachment &a, Member &m, uint32_t si, bool abortive);
    void cmd_send(Attachment &a, uint32_t si, const dti_cmd &c);
    void cmd_release(Attachment &a, uint32_t si, const dti_cmd &c);
    int32_t cmd_send_from(Attachment &a, uint32_t si, const dti_cmd &c);
    void cmd_watch(Attachment &a, uint16_t ci, uint32_t si, uint32_t events);
    bool pool_range(const Attachment &a, uint64_t off, uint32_t len) const;
    bool try_recv_into(Attachment &a, uint32_t si);
    void cmd_digest(Attachment &a, uint16_t ci, uint32_t si, const dti_cmd &c);
    digest::Ring rx_digest_ring(const Attachment &a, uint32_t si) const
    {
        return digest::Ring{a.rx_ring(si), a.lim.rx_ring_size - 1, a.slots[si].rx_base};
    }
    digest::Ring tx_digest_ring(const Attachment &a, uint32_t si) const
    {
        return digest::Ring{a.tx_ring(si), a.lim.tx_ring_size - 1, a.slots[si].tx_base};
    }
    void digest_rx(Attachment &a, uint32_t si);
    void digest_tx(Attachment &a, uint32_t si);
    void digest_ends(Attachment &a, uint32_t si);
    void digests_done(Attachment &a, uint32_t si, const digest::Done *d, uint32_t n);

    // completions and events
    uint32_t ev_used(Attachment &a, Ctx &c, uint32_t want);
    bool complete(Attachment &a, uint16_t ci, uint32_t tag, int32_t res, uint32_t sock,
                  int64_t value = 0, const uint32_t *accepted = nullptr);
    void finish_pending(Attachment &a, Pending &p, int32_t res, uint32_t sock);
    void cancel_pending(Attachment &a, Slot &s, int32_t res, uint32_t sock);
    void publish(Attachment &a);
    static void to_publish(Attachment &a, uint16_t ci)
    {
        if (!a.ctxs[ci].published) {
            a.ctxs[ci].published = true;
            a.to_publish.push_back(ci);
        }
    }
    void post_event(Attachment &a, uint16_t ci, uint32_t sock, uint32_t mask);

    // socket state
    void mark(Attachment &a, uint32_t si);
    void refresh(Attachment &a, uint32_t si);
    void write_shared(Attachment &a, uint32_t si);
    void notify(Attachment &a, uint32_t si);
    void transport_events(unsigned *work);
    void on_event(const TransportEvent &e);
    void maybe_free(Attachment &a, uint32_t si);
    uint32_t handle(const Attachment &a, uint32_t si) const
    {
        return a.slots[si].gen << DTI_SLOT_BITS | si;
    }

    Transport &tr_;
    Limits lim_;
    Stats stats_;
    std::vector<std::unique_ptr<Attachment>> atts_; // groups (regions), by internal id
    std::vector<std::unique_ptr<Member>> members_;  // by public id
    std::vector<int> joined_;                       // members made by FORK, not yet taken
    uint16_t next_epoch_ = 1;
    std::vector<int> wake_fds_;
    std::vector<std::pair<Attachment *, uint16_t>> wake_ctxs_;
    bool sleeping_ = false;
};

// ---- attachments ---------------------------------------------------------------

Attachment *EngineImpl::new_attachment(std::string *why, int *err)
{
    size_t live = 0;
    for (auto &m : members_)
        live += m != nullptr;
    if (live >= lim_.max_attachments) {
        *why = "attachment limit reached (" + std::to_string(lim_.max_attachments) + ")";
        *err = DTI_E_LIMIT;
        return nullptr;
    }
    Geometry g;
    if (!geometry(lim_, &g) || g.size > lim_.max_region_bytes) {
        *why = "region of " + std::to_string(g.size) + " bytes exceeds the memory limit per application";
        *err = DTI_E_LIMIT;
        return nullptr;
    }
    size_t id = 0;
    while (id < atts_.size() && atts_[id])
        id++;
    if (id == atts_.size())
        atts_.emplace_back();
    if (id > 0xffff) {
        *why = "attachment ids exhausted";
        *err = DTI_E_LIMIT;
        return nullptr;
    }
    atts_[id] = std::make_unique<Attachment>();
    Attachment &a = *atts_[id];
    a.id = int(id);
    a.epoch = next_epoch_++;
    if (next_epoch_ == 0)
        next_epoch_ = 1;
    a.lim = lim_;
    a.geo = g;
    a.size = g.size;
    return &a;
}

// A process of group `a`; counts against max_attachments (one connection each).
Member *EngineImpl::new_member(Attachment &a, int fd, std::string *why, int *err)
{
    size_t id = 0, live = 0;
    for (auto &m : members_)
        live += m != nullptr;
    if (live >= lim_.max_attachments) {
        *why = "attachment limit reached (" + std::to_string(lim_.max_attachments) + ")";
        *err = DTI_E_LIMIT;
        return nullptr;
    }
    while (id < members_.size() && members_[id])
        id++;
    if (id == members_.size())
        members_.emplace_back();
    members_[id] = std::make_unique<Member>();
    Member &m = *members_[id];
    m.id = int(id);
    m.fd = fd;
    m.group = a.id;
    m.holds.assign(a.lim.max_sockets, false);
    a.members++;
    return &m;
}

void EngineImpl::release_member(Member &m)
{
    Attachment &a = group(m);
    a.members--;
    if (m.fd >= 0)
        close(m.fd);
    std::erase(joined_, m.id);
    members_[size_t(m.id)].reset();
}

void EngineImpl::init_region(Attachment &a)
{
    a.hdr = reinterpret_cast<dti_region_header *>(a.base);
    a.socks = reinterpret_cast<dti_sock_shared *>(a.base + a.geo.sock_offset);
    a.slots.assign(a.lim.max_sockets, Slot{});
    a.free_slots.clear();
    for (uint32_t i = a.lim.max_sockets; i-- > 0;)
        a.free_slots.push_back(i);
    a.ctxs.assign(a.lim.max_contexts, Ctx{});
    for (uint32_t i = 0; i < a.lim.max_contexts; i++) {
        uint8_t *qp = a.base + a.geo.ctx_offset + a.geo.ctx_stride * i;
        Ctx &c = a.ctxs[i];
        c.qp = reinterpret_cast<dti_qp_header *>(qp);
        c.cmds = reinterpret_cast<dti_cmd *>(qp + sizeof(dti_qp_header));
        c.evs = reinterpret_cast<dti_ev *>(qp + sizeof(dti_qp_header) + size_t{a.lim.cmdq_entries} * sizeof(dti_cmd));
    }
}

void layout_region_impl(void *region, const Limits &l, const Geometry &g)
{
    auto *h = static_cast<dti_region_header *>(region);
    std::memset(h, 0, sizeof *h);
    h->magic = DTI_REGION_MAGIC;
    h->abi_version = DTI_ABI_VERSION;
    h->header_size = sizeof *h;
    h->region_size = g.size;
    h->max_contexts = l.max_contexts;
    h->cmdq_entries = l.cmdq_entries;
    h->evq_entries = l.evq_entries;
    h->max_sockets = l.max_sockets;
    h->rx_ring_size = l.rx_ring_size;
    h->tx_ring_size = l.tx_ring_size;
    h->ctx_offset = g.ctx_offset;
    h->ctx_stride = g.ctx_stride;
    h->sock_offset = g.sock_offset;
    h->data_offset = g.data_offset;
    h->data_stride = g.data_stride;
    h->pool_offset = g.pool_offset;
    h->pool_size = l.pool_size;
    h->app_ip = l.app_ip;
    store_rel(&h->engine_state, uint32_t{DTI_ENGINE_ALIVE});
}

namespace ctl {

bool send_msg(int fd, const dti_ctl_msg &m, const int *fds, int nfds)
{
    iovec iov{const_cast<dti_ctl_msg *>(&m), sizeof m};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 2)];
    if (nfds > 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * size_t(nfds));
        cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * size_t(nfds));
        std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * size_t(nfds));
    }
    // Non-blocking: a reply is tiny and the socket buffer is empty after the
    // request; an app that does not read cannot stall the engine.
    return sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == ssize_t(sizeof m);
}

void refuse(int fd, int code, const std::string &why)
{
    dti_ctl_msg m{};
    m.magic = DTI_CTL_MAGIC;
    m.type = DTI_CTL_REFUSED;
    m.abi_version = DTI_ABI_VERSION;
    m.status = code;
    std::snprintf(m.text, sizeof m.text, "%s", why.c_str());
    send_msg(fd, m, nullptr, 0);
}

// Reads one message without blocking. The first descriptor sent with it is
// stored in *passed when the caller takes one (FORK); every other one is
// closed. 1: got one, 0: EOF, -EAGAIN, -errno.
// Receives one message; a passed fd goes to *passed (others are closed) and,
// on a socket with SO_PASSCRED, the sender's kernel-given credentials to
// *cred (pid 0 when none came). `flags`: MSG_PEEK to leave it queued.
int recv_msg(int fd, dti_ctl_msg *m, int *passed = nullptr, ucred *cred = nullptr, int flags = 0)
{
    if (passed)
        *passed = -1;
    if (cred)
        *cred = ucred{};
    iovec iov{m, sizeof *m};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 8) + CMSG_SPACE(sizeof(ucred))];
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC | flags);
    if (n < 0)
        return -errno;
    for (cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS &&
            cm->cmsg_len >= CMSG_LEN(sizeof(ucred)) && cred)
            std::memcpy(cred, CMSG_DATA(cm), sizeof *cred);
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int f;
                std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
                if (passed && *passed < 0)
                    *passed = f;
                else
                    close(f);
            }
        }
    }
    if (n == 0)
        return 0;
    if (size_t(n) != sizeof *m || m->magic != DTI_CTL_MAGIC)
        return -EPROTO;
    return 1;
}

} // namespace ctl

int EngineImpl::attach(int fd, std::string *why)
{
    dti_ctl_msg m{};
    int r = ctl::recv_msg(fd, &m);
    if (r == -EAGAIN || r == -EWOULDBLOCK) {
        *why = "no attach request yet";
        return -EAGAIN;
    }
    stats_.refusals++;
    if (r <= 0) {
        *why = r == 0 ? "the application hung up before attaching" : "malformed attach request";
        if (r < 0)
            ctl::refuse(fd, DTI_E_PROTOCOL, *why);
        return r == 0 ? -ECONNRESET : -DTI_E_PROTOCOL;
    }
    if (m.type != DTI_CTL_HELLO) {
        *why = "expected an attach request";
        ctl::refuse(fd, DTI_E_PROTOCOL, *why);
        return -DTI_E_PROTOCOL;
    }
    if (m.abi_version != DTI_ABI_VERSION) {
        *why = "DTI ABI version mismatch: application " + std::to_string(m.abi_version) + ", PPE " +
               std::to_string(DTI_ABI_VERSION);
        ctl::refuse(fd, DTI_E_VERSION, *why);
        return -DTI_E_VERSION;
    }
    ucred cred{};
    socklen_t cl = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
        *why = std::string("SO_PEERCRED: ") + std::strerror(errno);
        ctl::refuse(fd, DTI_E_DENIED, *why);
        return -DTI_E_DENIED;
    }
    if (!lim_.allowed_uids.empty() &&
        std::find(lim_.allowed_uids.begin(), lim_.allowed_uids.end(), uint32_t(cred.uid)) ==
            lim_.allowed_uids.end()) {
        *why = "uid " + std::to_string(cred.uid) + " is not allowed to attach";
        ctl::refuse(fd, DTI_E_DENIED, *why);
        return -DTI_E_DENIED;
    }
    int err = 0;
    Attachment *ap = new_attachment(why, &err);
    if (!ap) {
        ctl::refuse(fd, err, *why);
        return -err;
    }
    Attachment &a = *ap;
    int memfd = memfd_create("eta-dti", MFD_CLOEXEC);
    void *p = MAP_FAILED;
    if (memfd >= 0 && ftruncate(memfd, off_t(a.size)) == 0)
        p = mmap(nullptr, a.size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    a.doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p == MAP_FAILED || a.doorbell < 0) {
        *why = std::string("cannot create the shared region: ") + std::strerror(errno);
        ctl::refuse(fd, ENOMEM, *why);
        if (memfd >= 0)
            close(memfd);
        if (p != MAP_FAILED)
            munmap(p, a.size);
        if (a.doorbell >= 0)
            close(a.doorbell);
        a.doorbell = -1;
        release_id(a);
        return -ENOMEM;
    }
    a.base = static_cast<uint8_t *>(p);
    a.owns_mapping = true;
    layout_region_impl(a.base, a.lim, a.geo);
    init_region(a);
    Member *mem = new_member(a, -1, why, &err);
    if (!mem) {
        ctl::refuse(fd, err, *why);
        close(memfd);
        finalize(a);
        return -err;
    }
    mem->uid = uint32_t(cred.uid);
    mem->pid = uint32_t(cred.pid);
    mem->bind_service = may_bind_service(cred);
    mem->unprivileged_port_start = unprivileged_port_start();
    mem->cred_pid = uint32_t(cred.pid);
    mem->cred_start = process_start_time(uint32_t(cred.pid));
    m.text[sizeof m.text - 1] = 0;
    mem->name = m.text;
    dti_ctl_msg w{};
    w.magic = DTI_CTL_MAGIC;
    w.type = DTI_CTL_WELCOME;
    w.abi_version = DTI_ABI_VERSION;
    w.region_size = a.size;
    w.engine = lim_.engine_index;
    w.n_engines = lim_.n_engines;
    int fds[2] = {memfd, a.doorbell};
    bool sent = ctl::send_msg(fd, w, fds, 2);
    close(memfd);
    if (!sent) {
        *why = "cannot answer the application";
        release_member(*mem);
        finalize(a);
        return -EPIPE;
    }
    mem->fd = fd;
    stats_.refusals--;
    stats_.attaches++;
    return mem->id;
}

int EngineImpl::attach_memory(void *region, uint64_t size, uint32_t contexts)
{
    std::string why;
    int err = 0;
    Attachment *ap = new_attachment(&why, &err);
    if (!ap)
        return -err;
    if (size < ap->size || contexts > ap->lim.max_contexts) {
        release_id(*ap);
        return -EINVAL;
    }
    ap->base = static_cast<uint8_t *>(region);
    init_region(*ap);
    Member *m = new_member(*ap, -1, &why, &err);
    if (!m) {
        release_id(*ap);
        return -err;
    }
    m->bind_service = true; // in the engine's own process (benchmarks, tests): its privileges
    for (uint32_t i = 0; i < contexts; i++) {
        ap->ctxs[i].open = true;
        ap->ctxs[i].member = m->id;
        m->ctx_mask |= uint64_t{1} << i;
        ap->ctxs[i].shadow.assign(ap->lim.evq_entries, dti_ev{});
        ap->live_ctxs.push_back(uint16_t(i));
    }
    return m->id;
}

void EngineImpl::control(int id)
{
    Member *mp = member(id);
    if (!mp || mp->fd < 0)
        return;
    Member &me = *mp;
    Attachment &a = group(me);
    for (int budget = 0; budget < 16; budget++) {
        dti_ctl_msg m{};
        int passed = -1;
        ucred cred{};
        int r = ctl::recv_msg(me.fd, &m, &passed, &cred);
        if (r == -EAGAIN || r == -EWOULDBLOCK || r == -EINTR)
            return;
        if (r <= 0 && r != -EPROTO) {
            detach(id);
            return;
        }
        if (r == -EPROTO || a.broken || a.dying) {
            if (passed >= 0)
                close(passed);
            // Requests that wait for an answer get one: nobody hangs.
            if (r == 1 && (m.type == DTI_CTL_FORK || m.type == DTI_CTL_OPEN_CTX ||
                           m.type == DTI_CTL_EXEC || m.type == DTI_CTL_EXEC_HOLD))
                ctl::refuse(me.fd, DTI_E_BROKEN, "this application's shared region is broken");
            continue;
        }
        if (m.type == DTI_CTL_FORK) {
            fork_member(me, passed); // takes the fd
            continue;
        }
        if (m.type == DTI_CTL_EXEC) {
            exec_member(me, passed, m); // takes the fd
            continue;
        }
        if (passed >= 0)
            close(passed);
        if (m.type == DTI_CTL_OPEN_CTX) {
            uint32_t i = 0;
            while (i < a.ctxs.size() && a.ctxs[i].open)
                i++;
            if (i == a.ctxs.size()) {
                ctl::refuse(me.fd, DTI_E_LIMIT, "context limit reached (" + std::to_string(i) + ")");
                continue;
            }
            int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
            if (efd < 0) {
                ctl::refuse(me.fd, ENOMEM, "cannot create a wake eventfd");
                continue;
            }
            Ctx &c = a.ctxs[i];
            // Reset the queue pair and its rings (stale stamps would read as
            // fresh entries): its previous user is gone.
            std::memset(c.qp, 0, a.geo.ctx_stride);
            c = Ctx{id, true, false, false, false, efd, 0, 0, 0, 0, 0, {}, c.qp, c.cmds, c.evs};
            c.shadow.assign(a.lim.evq_entries, dti_ev{});
            a.live_ctxs.push_back(uint16_t(i));
            me.ctx_mask |= uint64_t{1} << i;
            dti_ctl_msg o{};
            o.magic = DTI_CTL_MAGIC;
            o.type = DTI_CTL_CTX_OPENED;
            o.abi_version = DTI_ABI_VERSION;
            o.index = i;
            if (!ctl::send_msg(me.fd, o, &efd, 1))
                close_ctx(a, uint16_t(i));
        } else if (m.type == DTI_CTL_CLOSE_CTX && m.index < a.ctxs.size() && a.ctxs[m.index].open &&
                   a.ctxs[m.index].member == id) {
            // Commands published before the close request still count (a
            // thread's last send before it exits): run them, unanswered.
            drain_ctx(a, uint16_t(m.index), false);
            close_ctx(a, uint16_t(m.index));
        } else if (m.type == DTI_CTL_EXEC_HOLD) {
            exec_hold(me, m);
        } else if (m.type == DTI_CTL_HELLO) {
            // A fork child (or an exec'd image) telling who it is. What it
            // writes is shown only while nothing better is known; the kernel's
            // credentials (SO_PASSCRED, set at FORK) are trusted and replace it.
            // A process that attached keeps its SO_PEERCRED pid.
            if (me.cred_pid == 0)
                me.pid = m.pid;
            learn_pid(me, cred);
            m.text[sizeof m.text - 1] = 0;
            if (m.text[0])
                me.name = m.text; // an exec'd image: its program's name
            // An exec'd image speaking for itself: it can be given no more.
            if (Member *p = member(me.exec_parent); p && p->exec_child == me.id)
                p->exec_child = -1;
            me.exec_parent = -1;
        }
    }
}

// Closes a queue pair: its watches and waiting commands go with it.
void EngineImpl::close_ctx(Attachment &a, uint16_t ci)
{
    Ctx &c = a.ctxs[ci];
    if (Member *m = member(c.member))
        m->ctx_mask &= ~(uint64_t{1} << ci);
    c.open = false;
    c.member = -1;
    std::erase(a.live_ctxs, ci);
    std::erase(a.to_publish, ci);
    c.published = false;
    if (c.wake_fd >= 0)
        close(c.wake_fd);
    c.wake_fd = -1;
    uint64_t bit = uint64_t{1} << ci;
    for (Slot &s : a.slots) {
        s.watchers &= ~bit;
        for (Pending *p : {&s.connect, &s.accept, &s.recv_into})
            if (p->used && p->ctx == ci)
                p->used = false;
        // Its digest ranges go unanswered too: a later context at this
        // index must never get their completions.
        digest::Done gone[digest::kMaxRanges];
        s.dg.rx.cancel(bit, 0, gone);
        s.dg.tx.cancel(bit, 0, gone);
    }
    std::erase_if(wake_ctxs_, [&](auto &w) { return w.first == &a && w.second == ci; });
    if (c.wake_listed) {
        c.wake_listed = false;
        wake_fds_.clear();
        for (auto &w : wake_ctxs_)
            wake_fds_.push_back(w.first->ctxs[w.second].wake_fd);
    }
}

// Runs every command the context has published; `answer`: with completions
// (else it is closing and nobody would read them).
void EngineImpl::drain_ctx(Attachment &a, uint16_t ci, bool answer)
{
    Ctx &c = a.ctxs[ci];
    c.draining = !answer;
    unsigned work = 0;
    for (uint32_t k = 0; k <= a.lim.cmdq_entries / a.lim.commands_per_poll + 1 && !a.broken; k++)
        process_ctx(a, ci, &work);
    c.draining = false;
}

// Runs what the member's contexts have published, so that a snapshot of its
// holds (fork) reflects every close it issued before asking.
void EngineImpl::drain_member(Attachment &a, const Member &m)
{
    for (uint16_t ci : std::vector<uint16_t>(a.live_ctxs))
        if (a.ctxs[ci].member == m.id)
            drain_ctx(a, ci, true);
}

// FORK: `child_fd` (a SOCK_SEQPACKET socket the parent made and its child
// inherits) becomes the control connection of a new member of the parent's
// group, holding every socket the parent holds. The member ends when every
// copy of the other end is closed: the child's exit, or the parent's close
// when fork() failed. The answer goes to the parent.
// A fork child's own pid, as the kernel gave it with its first message.
void EngineImpl::learn_pid(Member &m, const ucred &cred)
{
    if (cred.pid <= 0 || m.cred_pid != 0)
        return;
    m.pid = m.cred_pid = uint32_t(cred.pid);
    m.cred_start = process_start_time(m.cred_pid);
}

// The kernel's rule, applied when the BIND comes: CAP_NET_BIND_SERVICE in
// the process's effective set now (a process that dropped it after
// attaching is refused). A control-path command: two small /proc reads,
// only for ports below ip_unprivileged_port_start. Where the process cannot
// be read (another pid namespace, or a fork child that has not said who it
// is) the rule taken at attach, or inherited at fork, applies.
bool EngineImpl::may_bind_privileged(Member &m)
{
    if (m.cred_pid == 0 && m.fd >= 0) {
        // A fork child's HELLO may still be queued on its control socket
        // (commands and control messages are read on separate paths): look.
        dti_ctl_msg msg{};
        int passed = -1;
        ucred cred{};
        if (ctl::recv_msg(m.fd, &msg, &passed, &cred, MSG_PEEK) == 1 && msg.type == DTI_CTL_HELLO)
            learn_pid(m, cred);
        if (passed >= 0)
            close(passed); // a peek installs passed fds too; the real read takes them again
    }
    int now = bind_service_now(m.cred_pid, m.cred_start);
    return now >= 0 ? now == 1 : m.bind_service;
}

// Whether fd is what FORK and EXEC must pass: one end of a SOCK_SEQPACKET
// UNIX socket pair (the new member's control connection).
static bool is_seqpacket_unix(int fd)
{
    int type = 0, domain = 0;
    socklen_t tl = sizeof type, dl = sizeof domain;
    return fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 &&
           getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) == 0 && type == SOCK_SEQPACKET &&
           domain == AF_UNIX;
}

// A new member of parent's group on control connection child_fd (a fork
// child, or the image after exec), with the parent's identity and rights;
// NULL once the parent was told why not. Commands the parent issued before
// count first (a close before fork or exec). Its first message (libdti's
// HELLO) will carry its own pid from the kernel: privileged binds are then
// checked against that process's capabilities.
Member *EngineImpl::member_like(Member &parent, int child_fd)
{
    Attachment &a = group(parent);
    std::string why;
    int err = 0;
    Member *child = new_member(a, child_fd, &why, &err);
    if (!child) {
        close(child_fd);
        ctl::refuse(parent.fd, err, why);
        return nullptr;
    }
    drain_member(a, parent);
    if (a.broken) {
        release_member(*child);
        ctl::refuse(parent.fd, DTI_E_BROKEN, "this application's shared region is broken");
        return nullptr;
    }
    int on = 1;
    setsockopt(child_fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
    child->uid = parent.uid;
    child->pid = parent.pid;
    child->bind_service = parent.bind_service;
    child->unprivileged_port_start = parent.unprivileged_port_start;
    child->name = parent.name;
    return child;
}

void EngineImpl::fork_member(Member &parent, int child_fd)
{
    Attachment &a = group(parent);
    if (!is_seqpacket_unix(child_fd)) {
        if (child_fd >= 0)
            close(child_fd);
        stats_.rejected_commands++;
        ctl::refuse(parent.fd, DTI_E_PROTOCOL, "FORK needs a SOCK_SEQPACKET UNIX socket");
        return;
    }
    Member *child = member_like(parent, child_fd);
    if (!child)
        return;
    for (uint32_t si = 0; si < a.slots.size(); si++)
        if (parent.holds[si])
            take_hold(a, *child, si);
    dti_ctl_msg o{};
    o.magic = DTI_CTL_MAGIC;
    o.type = DTI_CTL_FORKED;
    o.abi_version = DTI_ABI_VERSION;
    o.index = uint32_t(child->id);
    if (!ctl::send_msg(parent.fd, o, nullptr, 0)) {
        leave(*child);
        return;
    }
    stats_.forks++;
    joined_.push_back(child->id);
}

// EXEC: like FORK, but the new member (the process's image after exec())
// holds only the sockets the request lists, each of which the sender must
// hold: descriptors that are close-on-exec do not reach the new image, and
// a forged handle grants nothing. More come with EXEC_HOLD until the new
// member speaks. The answer says how many holds the member got.
void EngineImpl::exec_member(Member &parent, int child_fd, const dti_ctl_msg &m)
{
    if (!is_seqpacket_unix(child_fd) || m.index > DTI_CTL_HANDLES) {
        if (child_fd >= 0)
            close(child_fd);
        stats_.rejected_commands++;
        ctl::refuse(parent.fd, DTI_E_PROTOCOL, "EXEC needs a SOCK_SEQPACKET UNIX socket and at most " +
                                                   std::to_string(DTI_CTL_HANDLES) + " handles");
        return;
    }
    Member *child = member_like(parent, child_fd); // exec keeps the process (setuid images aside: see README)
    if (!child)
        return;
    child->exec_parent = parent.id;
    parent.exec_child = child->id;
    const int id = child->id;
    answer_exec(parent, *child, grant_holds(parent, *child, m));
    if (member(id) == child) { // the answer could be sent
        stats_.forks++;
        joined_.push_back(id);
    }
}

void EngineImpl::exec_hold(Member &parent, const dti_ctl_msg &m)
{
    Member *child = member(parent.exec_child);
    if (!child || child->exec_parent != parent.id || child->group != parent.group ||
        m.index > DTI_CTL_HANDLES) {
        stats_.rejected_commands++;
        ctl::refuse(parent.fd, DTI_E_PROTOCOL, "EXEC_HOLD without a new member waiting for holds");
        return;
    }
    drain_member(group(parent), parent);
    answer_exec(parent, *child, grant_holds(parent, *child, m));
}

// Gives `child` a hold on each listed handle that `parent` holds.
uint32_t EngineImpl::grant_holds(Member &parent, Member &child, const dti_ctl_msg &m)
{
    Attachment &a = group(parent);
    uint32_t granted = 0;
    for (uint32_t i = 0; i < m.index && i < DTI_CTL_HANDLES; i++) {
        uint32_t h = 0, si = 0;
        std::memcpy(&h, m.text + i * sizeof h, sizeof h);
        if (slot_of(a, parent, h, &si)) {
            take_hold(a, child, si);
            granted++;
        } else {
            stats_.rejected_commands++;
        }
    }
    return granted;
}

void EngineImpl::answer_exec(Member &parent, const Member &child, uint32_t granted)
{
    dti_ctl_msg o{};
    o.magic = DTI_CTL_MAGIC;
    o.type = DTI_CTL_EXECED;
    o.abi_version = DTI_ABI_VERSION;
    o.index = uint32_t(child.id);
    o.status = int32_t(granted);
    if (!ctl::send_msg(parent.fd, o, nullptr, 0))
        leave(*members_[size_t(child.id)]);
}

// Aborts every socket of the region (a dead application's connections get a
// RST). With keep_closing, sockets the application had already closed (no
// holder, the transport still sending the rest and the FIN) or shut down for
// writing are left to finish, as the kernel finishes them after its process
// exits; the region stays mapped until the transport hands their rings back
// (maybe_finish).
void EngineImpl::abort_all(Attachment &a, bool keep_closing)
{
    for (auto &m : members_)
        if (m && m->group == a.id) {
            m->holds.assign(m->holds.size(), false);
            m->held = 0;
        }
    for (uint32_t i = 0; i < a.slots.size(); i++) {
        Slot &s = a.slots[i];
        s.connect.used = s.accept.used = s.recv_into.used = false;
        // A socket the application shut down for writing (it said it was
        // done: socat and many tools shutdown(SHUT_WR) and then exit
        // without close()) finishes like a closed one instead of losing
        // the unsent tail to a reset.
        const bool done_sending = s.holders && (s.state & DTI_STATE_WR_CLOSED) && s.has_sid &&
                                  !(s.state & (DTI_STATE_LISTENING | DTI_STATE_RESET | DTI_STATE_FAILED));
        const bool closing = s.holders == 0 && s.has_sid && !(s.state & DTI_STATE_LISTENING);
        if (s.holders) {
            s.holders = 0;
            a.open_sockets--;
        }
        if (keep_closing && done_sending) {
            if (tr_.close(s.sid) < 0)
                s.has_sid = false; // refused: the transport has already let it go
        } else if (s.has_sid && !(keep_closing && closing)) {
            tr_.abort(s.sid);
            s.has_sid = false;
        }
        maybe_free(a, i);
    }
}

void EngineImpl::break_region(Attachment &a, int reason)
{
    if (a.broken)
        return;
    a.broken = true;
    stats_.broken_regions++;
    store_rlx(&a.hdr->broken_reason, int32_t(reason));
    store_rel(&a.hdr->engine_state, uint32_t{DTI_ENGINE_BROKEN});
    abort_all(a, false);
    // Wake sleepers so they see the state; the app detaches, and its hang-up
    // brings us to detach().
    for (uint16_t i = 0; i < a.ctxs.size(); i++)
        if (a.ctxs[i].open && a.ctxs[i].wake_fd >= 0 && !a.ctxs[i].wake_listed) {
            a.ctxs[i].wake_listed = true;
            wake_fds_.push_back(a.ctxs[i].wake_fd);
            wake_ctxs_.emplace_back(&a, i);
        }
}

void EngineImpl::detach(int id)
{
    Member *m = member(id);
    if (!m)
        return;
    stats_.detaches++;
    leave(*m);
}

// A process leaves its group (hang-up, detach). Its contexts close and its
// holds drop: sockets other members still hold stay as they are; sockets
// nobody holds any more are closed, as the kernel does at exit. The last
// member takes the region with it: every socket left is aborted.
void EngineImpl::leave(Member &m)
{
    Attachment &a = group(m);
    if (a.members == 1) {
        // What it published before it went still counts: a close() just
        // before exit is a graceful close, not an abort.
        if (!a.broken)
            drain_member(a, m);
        for (Ctx &c : a.ctxs)
            c.member = -1; // the id may be reused by another group's member
        release_member(m);
        a.dying = true;
        if (a.hdr && !a.broken)
            store_rel(&a.hdr->engine_state, uint32_t{DTI_ENGINE_GONE});
        abort_all(a, !a.broken);
        maybe_finish(a);
        return;
    }
    // What it published before it went still counts (its last send).
    for (uint16_t ci = 0; ci < a.ctxs.size(); ci++)
        if (a.ctxs[ci].open && a.ctxs[ci].member == m.id) {
            drain_ctx(a, ci, false);
            close_ctx(a, ci);
        }
    for (uint32_t si = 0; si < a.slots.size() && m.held > 0; si++)
        if (m.holds[si])
            drop_hold(a, m, si, false);
    release_member(m);
}

void EngineImpl::maybe_finish(Attachment &a)
{
    // The region stays mapped until the transport has returned every ring it
    // held: it may write into them until then.
    if (a.dying && a.rings_out == 0)
        finalize(a);
}

void EngineImpl::finalize(Attachment &a)
{
    for (auto &m : members_)
        if (m && m->group == a.id)
            release_member(*m);
    for (Ctx &c : a.ctxs)
        if (c.wake_fd >= 0)
            close(c.wake_fd);
    std::erase_if(wake_ctxs_, [&](auto &w) { return w.first == &a; });
    wake_fds_.clear();
    for (auto &w : wake_ctxs_)
        wake_fds_.push_back(w.first->ctxs[w.second].wake_fd);
    if (a.doorbell >= 0)
        close(a.doorbell);
    if (a.owns_mapping && a.base)
        munmap(a.base, a.size);
    release_id(a);
}

void EngineImpl::release_id(Attachment &a) { atts_[size_t(a.id)].reset(); }

void EngineImpl::shutdown()
{
    for (size_t i = 0; i < members_.size(); i++)
        if (members_[i])
            detach(int(i));
}

std::vector<AttachmentInfo> EngineImpl::attachments() const
{
    std::vector<AttachmentInfo> out;
    for (auto &m : members_) {
        if (!m)
            continue;
        const Attachment &a = group(*m);
        out.push_back({m->id, m->uid, m->pid, m->name, uint32_t(__builtin_popcountll(m->ctx_mask)), m->held,
                       a.size, a.broken, a.id});
    }
    return out;
}

// ---- buffer provider --------------------------------------------------------------

bool EngineImpl::provide(uint64_t user, RingMemory *out)
{
    Attachment *ap = att_of_tag(user);
    uint32_t si = uint32_t(user);
    if (!ap || ap->dying || ap->broken || si >= ap->slots.size())
        return false;
    Attachment &a = *ap;
    Slot &owner = a.slots[si];
    uint32_t ri = si;
    if (owner.state & DTI_STATE_LISTENING) {
        // Passive open: a new slot of the listener's application, not yet
        // visible to it (an embryo) until accepted.
        if (a.free_slots.empty())
            return false;
        ri = a.free_slots.back();
        a.free_slots.pop_back();
        Slot &e = a.slots[ri];
        uint32_t gen = e.gen;
        e = Slot{};
        e.gen = gen;
        e.in_free_list = false;
        e.embryo = true;
        e.parent = si;
        owner.embryos++;
        mark(a, si);
    } else if (owner.rings_out || !owner.holders) {
        return false;
    }
    Slot &r = a.slots[ri];
    r.rings_out = true;
    a.rings_out++;
    *out = RingMemory{a.rx_ring(ri), a.lim.rx_ring_size, a.tx_ring(ri), a.lim.tx_ring_size};
    return true;
}

void EngineImpl::reclaim(uint64_t user, const RingMemory &mem)
{
    Attachment *ap = att_of_tag(user);
    if (!ap || !ap->base)
        return;
    Attachment &a = *ap;
    uint8_t *data = a.base + a.geo.data_offset;
    if (mem.rx < data)
        return;
    uint64_t off = uint64_t(mem.rx - data);
    uint32_t si = uint32_t(off / a.geo.data_stride);
    if (off % a.geo.data_stride != 0 || si >= a.slots.size() || !a.slots[si].rings_out)
        return;
    Slot &s = a.slots[si];
    s.rings_out = false;
    a.rings_out--;
    if (s.embryo) {
        // Died before anyone accepted it.
        s.embryo = false;
        Slot &l = a.slots[s.parent];
        if (l.embryos > 0)
            l.embryos--;
        mark(a, s.parent);
    }
    maybe_free(a, si);
    // A dying attachment is finalized from poll() or detach(), never from
    // inside a transport call that may be iterating over it.
}

void EngineImpl::maybe_free(Attachment &a, uint32_t si)
{
    Slot &s = a.slots[si];
    if (s.holders || s.has_sid || s.rings_out || s.embryo || s.in_free_list)
        return;
    s.in_free_list = true;
    a.free_slots.push_back(si);
}

// ---- commands ----------------------------------------------------------------------------

unsigned EngineImpl::poll()
{
    stats_.polls++;
    unsigned work = 0;
    for (size_t i = 0; i < atts_.size(); i++) {
        Attachment *a = atts_[i].get();
        if (a && a->dying) {
            maybe_finish(*a);
            continue;
        }
        if (!a || a->broken)
            continue;
        for (size_t k = 0; k < a->live_ctxs.size() && !a->broken; k++)
            process_ctx(*a, a->live_ctxs[k], &work);
    }
    transport_events(&work);
    for (size_t i = 0; i < atts_.size(); i++) {
        Attachment *a = atts_[i].get();
        if (!a || !a->base)
            continue;
        for (size_t k = 0; k < a->dirty.size(); k++) {
            uint32_t si = a->dirty[k];
            a->slots[si].dirty = false;
            if (!a->broken && !a->dying) {
                refresh(*a, si);
                notify(*a, si);
            }
        }
        a->dirty.clear();
        if (!a->broken && !a->dying)
            publish(*a);
    }
    return work;
}

void EngineImpl::process_ctx(Attachment &a, uint16_t ci, unsigned *work)
{
    Ctx &c = a.ctxs[ci];
    uint32_t mask = a.lim.cmdq_entries - 1;
    uint32_t done = 0;
    // A command is there when its slot carries the stamp cmd_cons + 1: the
    // engine reads one cache line per command, never the app's producer
    // index. A wrong stamp just means "nothing yet": only that app waits.
    for (; done < a.lim.commands_per_poll && !a.broken; done++) {
        const dti_cmd *slot = &c.cmds[c.cmd_cons & mask];
        if (load_acq(&slot->stamp) != c.cmd_cons + 1)
            break;
        // Room for the completion is guaranteed by credits for an honest app;
        // if the app broke that rule, stop here (it reaps, we continue).
        uint32_t used = c.draining ? 0 : ev_used(a, c, 1);
        if (a.broken || used >= a.lim.evq_entries)
            break;
        dti_cmd cmd = read_cmd(slot);
        c.cmd_cons++;
        stats_.commands++;
        execute(a, ci, cmd);
    }
    if (done > 0 && !a.broken)
        store_rel(&c.qp->cmd_cons, c.cmd_cons);
    *work += done;
}

// The slot of a handle the issuing member holds: a process may use only the
// sockets it created, accepted or inherited (and has not closed).
Slot *EngineImpl::slot_of(Attachment &a, const Member &m, uint32_t h, uint32_t *index)
{
    uint32_t si = h & DTI_SLOT_MASK, gen = h >> DTI_SLOT_BITS;
    if (si >= a.slots.size() || gen == 0 || a.slots[si].gen != gen || !a.slots[si].holders || !m.holds[si])
        return nullptr;
    *index = si;
    return &a.slots[si];
}

void EngineImpl::execute(Attachment &a, uint16_t ci, const dti_cmd &c)
{
    uint32_t tag = c.tag;
    bool signaled = c.op != DTI_OP_SEND && c.op != DTI_OP_RECV_RELEASE;
    if (signaled && tag >= a.lim.cmdq_entries) {
        stats_.rejected_commands++;
        return; // no valid tag to answer with: the app's own bookkeeping is corrupt
    }
    if (c.op == DTI_OP_NOP) {
        complete(a, ci, tag, 0, c.sock);
        return;
    }
    Member &m = owner(a, ci);
    if (c.op == DTI_OP_SOCKET) {
        int32_t r = cmd_socket(a, m);
        complete(a, ci, tag, r, r >= 0 ? uint32_t(r) : c.sock);
        return;
    }
    uint32_t si = 0;
    Slot *s = slot_of(a, m, c.sock, &si);
    if (!s) {
        stats_.rejected_commands++;
        if (signaled)
            complete(a, ci, tag, -DTI_E_BAD_HANDLE, c.sock);
        return;
    }
    int32_t r = 0;
    switch (c.op) {
    case DTI_OP_BIND:
        if (c.arg1 > 0xffff) {
            r = -EINVAL;
        } else if (c.arg1 != 0 && c.arg1 < m.unprivileged_port_start && !may_bind_privileged(m)) {
            r = -EACCES; // as the kernel: a privileged port needs CAP_NET_BIND_SERVICE
        } else {
            r = tr_.bind(s->sid, Endpoint{c.arg0, uint16_t(c.arg1)});
            if (r == 0)
                s->state |= DTI_STATE_BOUND;
        }
        break;
    case DTI_OP_LISTEN:
        r = tr_.listen(s->sid, int(std::min<uint32_t>(c.arg0, 65535)));
        if (r == 0)
            s->state = (s->state | DTI_STATE_LISTENING) & ~DTI_STATE_CONNECTING;
        break;
    case DTI_OP_ACCEPT:
        cmd_accept(a, ci, si, c);
        return;
    case DTI_OP_CONNECT:
        if (c.arg1 > 0xffff || c.arg1 == 0) {
            r = -EINVAL;
        } else if (s->state & (DTI_STATE_CONNECTING | DTI_STATE_CONNECTED)) {
            r = (s->state & DTI_STATE_CONNECTED) ? -EISCONN : -EALREADY;
        } else if (s->state & DTI_STATE_LISTENING) {
            r = -EINVAL;
        } else {
            r = tr_.connect(s->sid, Endpoint{c.arg0, uint16_t(c.arg1)});
            if (r == 0) {
                s->state |= DTI_STATE_CONNECTING;
                s->connect = Pending{true, ci, tag, 0, 0};
                mark(a, si);
                return; // completes on kEvConnected / kEvError / kEvReset
            }
        }
        break;
    case DTI_OP_SHUTDOWN: {
        bool rd = c.arg0 == DTI_SHUT_RD || c.arg0 == DTI_SHUT_RDWR;
        bool wr = c.arg0 == DTI_SHUT_WR || c.arg0 == DTI_SHUT_RDWR;
        if (!rd && !wr) {
            r = -EINVAL;
        } else if (!(s->state & DTI_STATE_CONNECTED)) {
            r = -ENOTCONN;
        } else {
            r = s->has_sid ? tr_.shutdown(s->sid, rd, wr) : 0;
            if (r == 0 && wr)
                s->state |= DTI_STATE_WR_CLOSED;
        }
        break;
    }
    case DTI_OP_CLOSE:
    case DTI_OP_ABORT:
        drop_hold(a, m, si, c.op == DTI_OP_ABORT);
        break;
    case DTI_OP_SETSOCKOPT:
    case DTI_OP_GETSOCKOPT: {
        int64_t v = 0;
        Option o;
        if (c.arg0 == DTI_SO_RCVBUF || c.arg0 == DTI_SO_SNDBUF) {
            // Ring sizes are fixed per attachment: setting is accepted and
            // has no effect (programs tune these routinely), reading tells the truth.
            v = c.arg0 == DTI_SO_RCVBUF ? a.lim.rx_ring_size : a.lim.tx_ring_size;
        } else if (!option_of(c.arg0, &o)) {
            r = -ENOPROTOOPT;
        } else if (c.op == DTI_OP_SETSOCKOPT) {
            r = tr_.set_option(s->sid, o, c.value);
        } else {
            r = tr_.get_option(s->sid, o, &v);
        }
        complete(a, ci, tag, r, c.sock, v);
        return;
    }
    case DTI_OP_WATCH:
        cmd_watch(a, ci, si, c.arg0);
        break;
    case DTI_OP_RECV_INTO:
        if (!pool_range(a, c.offset, c.arg0) || c.arg0 == 0) {
            r = -EINVAL;
        } else if (s->recv_into.used) {
            r = -EBUSY;
        } else {
            s->recv_into = Pending{true, ci, tag, c.arg0, c.offset};
            try_recv_into(a, si);
            return;
        }
        break;
    case DTI_OP_SEND_FROM:
        r = cmd_send_from(a, si, c);
        break;
    case DTI_OP_SEND:
        cmd_send(a, si, c);
        return;
    case DTI_OP_RECV_RELEASE:
        cmd_release(a, si, c);
        return;
    case DTI_OP_DIGEST:
        cmd_digest(a, ci, si, c);
        return;
    default:
        stats_.rejected_commands++;
        r = -EOPNOTSUPP;
        break;
    }
    mark(a, si);
    complete(a, ci, tag, r, c.sock);
}

int32_t EngineImpl::cmd_socket(Attachment &a, Member &m)
{
    if (a.free_slots.empty())
        return -EMFILE;
    uint32_t si = a.free_slots.back();
    Slot &s = a.slots[si];
    int64_t sid = tr_.open(tag_of(a, si));
    if (sid < 0)
        return int32_t(sid);
    a.free_slots.pop_back();
    uint32_t gen = s.gen % DTI_GEN_MAX + 1;
    s = Slot{};
    s.gen = gen;
    s.in_free_list = false;
    s.has_sid = true;
    s.sid = SockId(sid);
    take_hold(a, m, si);
    write_shared(a, si);
    store_rel(&a.socks[si].gen, gen);
    return int32_t(handle(a, si));
}

void EngineImpl::cmd_accept(Attachment &a, uint16_t ci, uint32_t ls, const dti_cmd &c)
{
    Slot &l = a.slots[ls];
    uint32_t max = std::min<uint32_t>(c.arg0, DTI_ACCEPT_MAX);
    if (!(l.state & DTI_STATE_LISTENING) || max == 0) {
        complete(a, ci, c.tag, -EINVAL, c.sock);
        return;
    }
    if (l.accept.used) {
        complete(a, ci, c.tag, -EBUSY, c.sock);
        return;
    }
    uint32_t got[DTI_ACCEPT_MAX] = {};
    int32_t n = accept_some(a, owner(a, ci), ls, max, got);
    if (n > 0 || !(c.arg1 & DTI_ACCEPT_WAIT)) {
        complete(a, ci, c.tag, n > 0 ? n : -EAGAIN, c.sock, 0, got);
        return;
    }
    l.accept = Pending{true, ci, c.tag, max, 0};
}

// Takes up to max connections from the transport and turns their embryo slots
// into sockets the accepting member holds (a listener shared by several
// processes hands each connection to the one that accepted it).
int32_t EngineImpl::accept_some(Attachment &a, Member &m, uint32_t ls, uint32_t max, uint32_t *out)
{
    int32_t n = 0;
    while (uint32_t(n) < max) {
        int64_t sid = tr_.accept(a.slots[ls].sid, tag_of(a, ls));
        if (sid < 0)
            break;
        // Which embryo is it? Its (untouched) send ring is all free space,
        // so tx_view() spans the whole ring and gives us its base.
        RingSpan tv, rv;
        uint32_t ri = UINT32_MAX;
        if (tr_.tx_view(SockId(sid), &tv) == 0 && tv.total() == a.lim.tx_ring_size &&
            tr_.rx_view(SockId(sid), &rv) == 0) {
            uint8_t *base = tv.n[1] ? tv.p[1] : tv.p[0];
            uint8_t *data = a.base + a.geo.data_offset;
            if (base >= data) {
                uint64_t off = uint64_t(base - data) - a.lim.rx_ring_size;
                uint64_t idx = off / a.geo.data_stride;
                if (off % a.geo.data_stride == 0 && idx < a.slots.size() && a.slots[idx].embryo &&
                    a.slots[idx].parent == ls)
                    ri = uint32_t(idx);
            }
        }
        if (ri == UINT32_MAX) {
            tr_.abort(SockId(sid)); // the transport broke its contract; drop the connection
            continue;
        }
        Slot &s = a.slots[ri];
        Slot &l = a.slots[ls];
        if (l.embryos > 0)
            l.embryos--;
        s.embryo = false;
        s.has_sid = true;
        s.sid = SockId(sid);
        s.gen = s.gen % DTI_GEN_MAX + 1;
        s.state = DTI_STATE_CONNECTED | DTI_STATE_BOUND;
        s.tx_base = uint32_t(tv.p[0] - a.tx_ring(ri));
        s.rx_base = rv.p[0] ? uint32_t(rv.p[0] - a.rx_ring(ri)) & (a.lim.rx_ring_size - 1) : 0;
        s.rx_consumed = 0;
        s.rx_tail = rv.total();
        s.tx_committed = 0;
        s.tx_head = 0;
        take_hold(a, m, ri);
        tr_.set_user(SockId(sid), tag_of(a, ri));
        SockInfo info;
        if (tr_.info(SockId(sid), &info) == 0) {
            s.local = info.local;
            s.remote = info.remote;
            if (info.peer_closed)
                s.state |= DTI_STATE_RD_CLOSED;
        }
        write_shared(a, ri);
        store_rel(&a.socks[ri].gen, s.gen);
        out[n++] = handle(a, ri);
        mark(a, ri);
    }
    mark(a, ls);
    return n;
}

void EngineImpl::take_hold(Attachment &a, Member &m, uint32_t si)
{
    Slot &s = a.slots[si];
    if (m.holds[si])
        return;
    m.holds[si] = true;
    m.held++;
    if (s.holders++ == 0)
        a.open_sockets++;
}

// CLOSE/ABORT from a member, or its exit: its hold goes. The transport
// close (or abort) happens when the last hold goes, as for a kernel file;
// until then only the member's own watches and waiting commands end.
void EngineImpl::drop_hold(Attachment &a, Member &m, uint32_t si, bool abortive)
{
    Slot &s = a.slots[si];
    if (!m.holds[si])
        return;
    m.holds[si] = false;
    m.held--;
    if (--s.holders > 0) {
        s.watchers &= ~m.ctx_mask;
        for (Pending *p : {&s.connect, &s.accept, &s.recv_into})
            if (p->used && ((m.ctx_mask >> p->ctx) & 1))
                finish_pending(a, *p, -ECANCELED, handle(a, si));
        digest::Done d[digest::kMaxRanges];
        for (digest::Direction *dir : {&s.dg.rx, &s.dg.tx}) {
            uint32_t n = dir->cancel(m.ctx_mask, -ECANCELED, d);
            for (uint32_t i = 0; i < n; i++)
                complete(a, d[i].ctx, d[i].tag, d[i].res, handle(a, si));
        }
        if (s.watchers == 0)
            s.interest = 0;
        return;
    }
    cancel_pending(a, s, -ECANCELED, handle(a, si));
    a.open_sockets--;
    s.watchers = 0;
    store_rel(&a.socks[si].gen, 0u); // the handle is dead at once
    if (s.has_sid) {
        int r = abortive ? tr_.abort(s.sid) : tr_.close(s.sid);
        // abort() frees at once; so does a close() the transport refuses.
        if (abortive || r < 0)
            s.has_sid = false;
    }
    maybe_free(a, si);
}

void EngineImpl::cmd_send(Attachment &a, uint32_t si, const dti_cmd &c)
{
    Slot &s = a.slots[si];
    RingSpan v;
    if (!s.has_sid || !(s.state & DTI_STATE_CONNECTED) || (s.state & DTI_STATE_WR_CLOSED) ||
        tr_.tx_view(s.sid, &v) != 0 || c.arg0 == 0 || c.arg0 > v.total()) {
        stats_.rejected_commands++;
        return; // not sendable or more than was free: the app lied; drop it
    }
    if (tr_.tx_commit(s.sid, c.arg0, c.arg1 & DTI_SEND_MORE) == 0) {
        s.tx_committed += c.arg0;
        if (s.dg.tx.pending())
            digest_tx(a, si);
    }
    mark(a, si);
}

void EngineImpl::cmd_release(Attachment &a, uint32_t si, const dti_cmd &c)
{
    Slot &s = a.slots[si];
    if (c.arg0 == 0 || c.arg0 > s.rx_tail - s.rx_consumed || s.recv_into.used) {
        stats_.rejected_commands++;
        return;
    }
    if (s.has_sid)
        tr_.rx_consume(s.sid, c.arg0);
    s.rx_consumed += c.arg0;
    mark(a, si);
}

bool EngineImpl::pool_range(const Attachment &a, uint64_t off, uint32_t len) const
{
    return off >= a.geo.pool_offset && off - a.geo.pool_offset <= a.lim.pool_size &&
           len <= a.lim.pool_size - (off - a.geo.pool_offset);
}

int32_t EngineImpl::cmd_send_from(Attachment &a, uint32_t si, const dti_cmd &c)
{
    Slot &s = a.slots[si];
    if (!pool_range(a, c.offset, c.arg0))
        return -EINVAL;
    if (!s.has_sid || !(s.state & DTI_STATE_CONNECTED))
        return s.error ? s.error : -ENOTCONN;
    if (s.state & DTI_STATE_WR_CLOSED)
        return -EPIPE;
    RingSpan v;
    if (tr_.tx_view(s.sid, &v) != 0)
        return -EPIPE;
    uint32_t n = std::min(c.arg0, v.total());
    const uint8_t *src = a.base + c.offset;
    uint32_t first = std::min(n, v.n[0]);
    std::memcpy(v.p[0], src, first);
    if (n > first)
        std::memcpy(v.p[1], src + first, n - first);
    if (n > 0 && tr_.tx_commit(s.sid, n, c.arg1 & DTI_SEND_MORE) == 0) {
        s.tx_committed += n;
        if (s.dg.tx.pending())
            digest_tx(a, si);
    }
    return int32_t(n);
}

// ---- payload digests (digest.h) ---------------------------------------------

void EngineImpl::cmd_digest(Attachment &a, uint16_t ci, uint32_t si, const dti_cmd &c)
{
    Slot &s = a.slots[si];
    const uint32_t h = handle(a, si);
    if (c.arg0 & ~uint32_t(DTI_DIGEST_TX | DTI_DIGEST_CHECK | DTI_DIGEST_CHAIN)) {
        complete(a, ci, c.tag, -EINVAL, h);
        return;
    }
    if (!(s.state & DTI_STATE_CONNECTED) || !s.has_sid) {
        complete(a, ci, c.tag, s.error ? s.error : -ENOTCONN, h);
        return;
    }
    const bool tx = c.arg0 & DTI_DIGEST_TX;
    uint32_t flags = 0;
    if (c.arg0 & DTI_DIGEST_CHECK)
        flags |= digest::kCheck;
    if (c.arg0 & DTI_DIGEST_CHAIN)
        flags |= digest::kChain;
    const digest::Request q{ci, c.tag, uint32_t(c.offset), c.arg1, flags, uint32_t(c.value)};
    digest::Done d{};
    uint64_t bytes = 0;
    int r;
    if (tx) {
        r = s.dg.tx.add(q, tx_digest_ring(a, si), s.tx_head, s.tx_committed, &d, &bytes);
        stats_.digest_tx_bytes += bytes;
    } else {
        r = s.dg.rx.add(q, rx_digest_ring(a, si), s.rx_consumed, s.rx_tail, &d, &bytes);
        stats_.digest_rx_bytes += bytes;
    }
    if (r < 0) {
        complete(a, ci, c.tag, r, h);
        return;
    }
    stats_.digest_ranges++;
    if (r == 1)
        digests_done(a, si, &d, 1);
    else
        mark(a, si); // the stream may already have ended: refresh decides
}

void EngineImpl::digest_rx(Attachment &a, uint32_t si)
{
    digest::Done d[digest::kMaxRanges];
    uint64_t bytes = 0;
    uint32_t n = a.slots[si].dg.rx.advance(rx_digest_ring(a, si), a.slots[si].rx_tail, d, &bytes);
    stats_.digest_rx_bytes += bytes;
    digests_done(a, si, d, n);
}

void EngineImpl::digest_tx(Attachment &a, uint32_t si)
{
    digest::Done d[digest::kMaxRanges];
    uint64_t bytes = 0;
    uint32_t n = a.slots[si].dg.tx.advance(tx_digest_ring(a, si), a.slots[si].tx_committed, d, &bytes);
    stats_.digest_tx_bytes += bytes;
    digests_done(a, si, d, n);
}

// Ranges that can no longer fill: the receive stream ended (FIN, reset,
// failure) or the send side was shut down.
void EngineImpl::digest_ends(Attachment &a, uint32_t si)
{
    Slot &s = a.slots[si];
    digest::Done d[digest::kMaxRanges];
    const bool broken = s.state & (DTI_STATE_RESET | DTI_STATE_FAILED);
    if (s.dg.rx.pending() && (broken || (s.state & DTI_STATE_RD_CLOSED))) {
        uint32_t n = s.dg.rx.end_beyond(s.rx_tail, s.error ? s.error : -ENODATA, d);
        digests_done(a, si, d, n);
    }
    if (s.dg.tx.pending() && (broken || (s.state & DTI_STATE_WR_CLOSED))) {
        uint32_t n = s.dg.tx.end_beyond(s.tx_committed, s.error ? s.error : -EPIPE, d);
        digests_done(a, si, d, n);
    }
}

void EngineImpl::digests_done(Attachment &a, uint32_t si, const digest::Done *d, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (d[i].res == -EBADMSG)
            stats_.digest_mismatches++;
        complete(a, d[i].ctx, d[i].tag, d[i].res, handle(a, si), int64_t(d[i].crc));
    }
}

// Copies readable bytes into a posted pool buffer; true when it completed.
bool EngineImpl::try_recv_into(Attachment &a, uint32_t si)
{
    Slot &s = a.slots[si];
    Pending &p = s.recv_into;
    if (!p.used)
        return false;
    uint32_t readable = s.rx_tail - s.rx_consumed;
    if (readable == 0 && s.has_sid) {
        RingSpan v;
        if (tr_.rx_view(s.sid, &v) == 0) {
            s.rx_tail = s.rx_consumed + v.total();
            readable = v.total();
        }
    }
    if (s.dg.rx.pending())
        digest_rx(a, si); // before the copy releases the bytes
    int32_t res;
    if (readable > 0) {
        uint32_t n = std::min(readable, p.arg);
        uint32_t mask = a.lim.rx_ring_size - 1;
        uint32_t off = (s.rx_base + s.rx_consumed) & mask;
        uint32_t first = std::min(n, a.lim.rx_ring_size - off);
        uint8_t *dst = a.base + p.offset;
        std::memcpy(dst, a.rx_ring(si) + off, first);
        if (n > first)
            std::memcpy(dst + first, a.rx_ring(si), n - first);
        if (s.has_sid)
            tr_.rx_consume(s.sid, n);
        s.rx_consumed += n;
        res = int32_t(n);
    } else if (s.error) {
        res = s.error;
    } else if (s.state & (DTI_STATE_RD_CLOSED | DTI_STATE_RESET | DTI_STATE_FAILED)) {
        res = 0;
    } else {
        return false;
    }
    Pending done = p;
    p.used = false;
    complete(a, done.ctx, done.tag, res, handle(a, si));
    mark(a, si);
    return true;
}

void EngineImpl::cmd_watch(Attachment &a, uint16_t ci, uint32_t si, uint32_t events)
{
    Slot &s = a.slots[si];
    uint64_t bit = uint64_t{1} << ci;
    events &= DTI_POLLIN | DTI_POLLOUT | DTI_POLLERR | DTI_POLLHUP | DTI_POLLRDHUP;
    if (events == 0) {
        s.watchers &= ~bit;
        if (s.watchers == 0)
            s.interest = 0;
        return;
    }
    s.watchers |= bit;
    s.interest |= events | DTI_POLLERR | DTI_POLLHUP;
    if (events & DTI_POLLOUT)
        s.out_armed = true;
    // Report what already holds: forget what we last told, then notify().
    s.last_mask &= ~events;
    s.last_rx_tail = s.rx_tail - 1;
    mark(a, si);
}

// ---- completions, events, wakeups ----------------------------------------------------------

// Entries of the event queue the app has not consumed. The app's ev_cons is
// on its own cache line; the last value read is an upper bound on what is
// used, so it is reread (and validated) only when that bound leaves less
// than `want` entries free.
uint32_t EngineImpl::ev_used(Attachment &a, Ctx &c, uint32_t want)
{
    uint32_t used = c.ev_prod - c.ev_cons_seen;
    if (used + want <= a.lim.evq_entries)
        return used;
    uint32_t cons = load_acq(&c.qp->ev_cons);
    used = c.ev_prod - cons;
    // Hostile value: it may not run ahead of what we produced, nor move back.
    if (used > a.lim.evq_entries || cons - c.ev_cons_seen > c.ev_prod - c.ev_cons_seen) {
        break_region(a, DTI_E_BROKEN);
        return a.lim.evq_entries;
    }
    c.ev_cons_seen = cons;
    return used;
}

// Copies a finished entry into the ring, body then stamp back to back (the
// app polls that very slot: a body written long before its stamp would make
// the line cross twice). Called by publish(), after the socket table is up to
// date: an app that sees a completion (say, of connect) must also see the
// socket state that goes with it.
static void put_entry(dti_ev *slot, const dti_ev &v, uint32_t index)
{
    auto *d = reinterpret_cast<uint8_t *>(slot);
    auto *s = reinterpret_cast<const uint8_t *>(&v);
    std::memcpy(d, s, offsetof(dti_ev, stamp));
    std::memcpy(d + offsetof(dti_ev, sock), s + offsetof(dti_ev, sock), sizeof v - offsetof(dti_ev, sock));
    store_rel(&slot->stamp, uint16_t(index + 1));
}

bool EngineImpl::complete(Attachment &a, uint16_t ci, uint32_t tag, int32_t res, uint32_t sock,
                          int64_t value, const uint32_t *accepted)
{
    if (ci >= a.ctxs.size() || !a.ctxs[ci].open || a.broken || a.ctxs[ci].draining)
        return false;
    Ctx &c = a.ctxs[ci];
    if (ev_used(a, c, 1) >= a.lim.evq_entries) {
        // Only an app that ignored its credits gets here.
        break_region(a, DTI_E_BROKEN);
        return false;
    }
    dti_ev v{};
    v.kind = DTI_CQE_COMPLETION;
    v.res = res;
    v.sock = sock;
    v.events = tag;
    v.value = value;
    if (accepted && res > 0)
        std::memcpy(v.accepted, accepted, sizeof(uint32_t) * uint32_t(res));
    c.shadow[c.ev_prod & (a.lim.evq_entries - 1)] = v;
    c.ev_prod++;
    to_publish(a, ci);
    stats_.completions++;
    return true;
}

void EngineImpl::finish_pending(Attachment &a, Pending &p, int32_t res, uint32_t sock)
{
    if (!p.used)
        return;
    p.used = false;
    complete(a, p.ctx, p.tag, res, sock);
}

void EngineImpl::cancel_pending(Attachment &a, Slot &s, int32_t res, uint32_t sock)
{
    finish_pending(a, s.connect, res, sock);
    finish_pending(a, s.accept, res, sock);
    finish_pending(a, s.recv_into, res, sock);
    digest::Done d[digest::kMaxRanges];
    for (digest::Direction *dir : {&s.dg.rx, &s.dg.tx}) {
        uint32_t n = dir->cancel(~0ull, res, d);
        for (uint32_t i = 0; i < n; i++)
            complete(a, d[i].ctx, d[i].tag, d[i].res, sock);
    }
}

void EngineImpl::post_event(Attachment &a, uint16_t ci, uint32_t sock, uint32_t mask)
{
    Ctx &c = a.ctxs[ci];
    if (!c.open || c.draining)
        return;
    // Keep cmdq_entries slots free for completions: events never take a
    // completion's room; when they do not fit, the app is told to rescan.
    if (ev_used(a, c, a.lim.cmdq_entries + 1) + a.lim.cmdq_entries >= a.lim.evq_entries) {
        if (a.broken)
            return;
        c.ev_overflow++;
        store_rel(&c.qp->ev_overflow, c.ev_overflow);
        to_publish(a, ci);
        stats_.events_dropped++;
        return;
    }
    dti_ev v{};
    v.kind = DTI_CQE_EVENT;
    v.sock = sock;
    v.events = mask;
    c.shadow[c.ev_prod & (a.lim.evq_entries - 1)] = v;
    c.ev_prod++;
    to_publish(a, ci);
    stats_.events_posted++;
}

void EngineImpl::publish(Attachment &a)
{
    for (uint16_t ci : a.to_publish) {
        Ctx &c = a.ctxs[ci];
        c.published = false;
        uint32_t mask = a.lim.evq_entries - 1;
        for (; c.ev_stamped != c.ev_prod; c.ev_stamped++)
            put_entry(&c.evs[c.ev_stamped & mask], c.shadow[c.ev_stamped & mask], c.ev_stamped);
        // Publish, then look at the wake word; the app arms, then looks at
        // ev_prod. Both pairs are sequentially consistent, so one of the two
        // sees the other's store: no lost wakeup.
        __atomic_store_n(&c.qp->ev_prod, c.ev_prod, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&c.qp->armed, __ATOMIC_SEQ_CST) &&
            __atomic_exchange_n(&c.qp->armed, 0u, __ATOMIC_SEQ_CST) && c.wake_fd >= 0 &&
            !c.wake_listed) {
            c.wake_listed = true;
            wake_fds_.push_back(c.wake_fd);
            wake_ctxs_.emplace_back(&a, ci);
        }
    }
    a.to_publish.clear();
}

void EngineImpl::clear_wakeups()
{
    for (auto &w : wake_ctxs_)
        w.first->ctxs[w.second].wake_listed = false;
    wake_ctxs_.clear();
    wake_fds_.clear();
}

void EngineImpl::flush_wakeups()
{
    for (int fd : wake_fds_) {
        uint64_t one = 1;
        ssize_t n = write(fd, &one, sizeof one);
        (void)n; // EAGAIN: the counter is saturated, the app wakes anyway
        stats_.wakeups++;
    }
    clear_wakeups();
}

bool EngineImpl::prepare_sleep()
{
    for (auto &a : atts_)
        if (a && a->hdr && !a->broken && !a->dying)
            __atomic_store_n(&a->hdr->engine_sleeping, 1u, __ATOMIC_SEQ_CST);
    sleeping_ = true;
    // Sleeping flag stored (SC), then every queue re-checked (SC); apps store
    // cmd_prod (SC), then read the flag (SC): a command is never stranded.
    for (auto &a : atts_) {
        if (!a || !a->hdr || a->broken || a->dying)
            continue;
        for (Ctx &c : a->ctxs) {
            // A producer index that moved but no stamped entry behind it is
            // garbage from a hostile app: it must not keep the engine awake.
            if (c.open && __atomic_load_n(&c.qp->cmd_prod, __ATOMIC_SEQ_CST) != c.cmd_cons &&
                load_acq(&c.cmds[c.cmd_cons & (a->lim.cmdq_entries - 1)].stamp) == c.cmd_cons + 1) {
                end_sleep();
                return false;
            }
        }
    }
    return true;
}

void EngineImpl::end_sleep()
{
    if (!sleeping_)
        return;
    sleeping_ = false;
    for (auto &a : atts_) {
        if (a && a->hdr && !a->broken && !a->dying) {
            store_rlx(&a->hdr->engine_sleeping, 0u);
            if (a->doorbell >= 0) {
                uint64_t v;
                if (read(a->doorbell, &v, sizeof v) == ssize_t(sizeof v))
                    stats_.doorbells_seen++;
            }
        }
    }
}

std::vector<int> EngineImpl::doorbell_fds() const
{
    std::vector<int> out;
    for (auto &a : atts_)
        if (a && a->doorbell >= 0 && !a->dying)
            out.push_back(a->doorbell);
    return out;
}

// ---- socket state ------------------------------------------------------------------------

void EngineImpl::mark(Attachment &a, uint32_t si)
{
    if (!a.slots[si].dirty) {
        a.slots[si].dirty = true;
        a.dirty.push_back(si);
    }
}

void EngineImpl::refresh(Attachment &a, uint32_t si)
{
    Slot &s = a.slots[si];
    if (s.has_sid && s.rings_out && (s.state & DTI_STATE_CONNECTED)) {
        RingSpan v;
        if (tr_.rx_view(s.sid, &v) == 0 && v.total() <= a.lim.rx_ring_size)
            s.rx_tail = s.rx_consumed + v.total();
        if (tr_.tx_view(s.sid, &v) == 0 && v.total() <= a.lim.tx_ring_size)
            s.tx_head = s.tx_committed - (a.lim.tx_ring_size - v.total());
    }
    // Digest the bytes that just became readable before the app can see
    // (and release) them: the same engine pass that placed them in the ring.
    if (s.dg.rx.pending())
        digest_rx(a, si);
    if (s.dg.rx.pending() || s.dg.tx.pending())
        digest_ends(a, si);
    if (s.has_sid) {
        SockInfo info;
        if (tr_.info(s.sid, &info) == 0) {
            s.local = info.local;
            s.remote = info.remote;
        }
    }
    if (s.recv_into.used)
        try_recv_into(a, si);
    if (s.accept.used && s.embryos > 0) {
        uint32_t got[DTI_ACCEPT_MAX] = {};
        int32_t n = accept_some(a, owner(a, s.accept.ctx), si, s.accept.arg, got);
        if (n > 0) {
            Pending p = s.accept;
            s.accept.used = false;
            complete(a, p.ctx, p.tag, n, handle(a, si), 0, got);
        }
    }
    if (s.holders)
        write_shared(a, si);
}

void EngineImpl::write_shared(Attachment &a, uint32_t si)
{
    Slot &s = a.slots[si];
    dti_sock_shared &sh = a.socks[si];
    store_rlx(&sh.local_ip, s.local.ip);
    store_rlx(&sh.local_port, s.local.port);
    store_rlx(&sh.remote_ip, s.remote.ip);
    store_rlx(&sh.remote_port, s.remote.port);
    store_rlx(&sh.rx_base, s.rx_base);
    store_rlx(&sh.tx_base, s.tx_base);
    store_rlx(&sh.error, s.error);
    store_rlx(&sh.accept_ready, s.embryos);
    store_rel(&sh.rx_tail, s.rx_tail);
    store_rel(&sh.tx_head, s.tx_head);
    store_rel(&sh.state, s.state);
    store_rel(&sh.seq, __atomic_load_n(&sh.seq, __ATOMIC_RELAXED) + 1);
}

// Event shielding: a watcher hears about a socket when a watched condition
// turns on, when new bytes or connections arrive (POLLIN), or when an armed
// POLLOUT holds; never for ACKs that change nothing it asked about.
void EngineImpl::notify(Attachment &a, uint32_t si)
{
    Slot &s = a.slots[si];
    if (!s.holders || s.watchers == 0)
        return;
    uint32_t readable = s.rx_tail - s.rx_consumed;
    uint32_t writable = a.lim.tx_ring_size - (s.tx_committed - s.tx_head);
    uint32_t mask = dti_events_of(s.state, s.error, readable, writable, s.embryos);
    bool post = (s.interest & mask & ~s.last_mask) != 0;
    if ((s.interest & DTI_POLLIN) &&
        ((s.rx_tail != s.last_rx_tail && readable > 0) || s.embryos > s.last_accept))
        post = true;
    // End of stream is news to a POLLIN watcher even while POLLIN already
    // holds here: the app releases consumed bytes in batches, so our
    // `readable` may count bytes it has taken and it may be waiting for more.
    if ((s.interest & DTI_POLLIN) && (mask & ~s.last_mask & DTI_POLLRDHUP))
        post = true;
    if (s.out_armed && (mask & DTI_POLLOUT))
        post = true;
    s.last_mask = mask;
    s.last_rx_tail = s.rx_tail;
    s.last_accept = s.embryos;
    if (!post)
        return;
    if (mask & DTI_POLLOUT)
        s.out_armed = false;
    uint32_t h = handle(a, si);
    for (uint64_t w = s.watchers; w; w &= w - 1)
        post_event(a, uint16_t(__builtin_ctzll(w)), h, mask);
}

void EngineImpl::transport_events(unsigned *work)
{
    TransportEvent evs[64];
    for (int rounds = 0; rounds < 64; rounds++) {
        uint16_t n = tr_.events(evs, 64);
        for (uint16_t i = 0; i < n; i++)
            on_event(evs[i]);
        *work += n;
        if (n < 64)
            break;
    }
}

void EngineImpl::on_event(const TransportEvent &e)
{
    Attachment *ap = att_of_tag(e.user);
    uint32_t si = uint32_t(e.user);
    if (!ap || si >= ap->slots.size())
        return;
    Attachment &a = *ap;
    Slot &s = a.slots[si];
    if (!s.has_sid || s.sid != e.sock) {
        // An unaccepted connection reporting through its listener's tag:
        // only "acceptable" matters; the embryo count already says how many.
        if (s.state & DTI_STATE_LISTENING)
            mark(a, si);
        return;
    }
    uint32_t h = handle(a, si);
    if (e.bits & (kEvReset | kEvError)) {
        SockInfo info;
        int err = tr_.info(s.sid, &info) == 0 && info.error ? info.error
                                                            : ((e.bits & kEvReset) ? ECONNRESET : ETIMEDOUT);
        if ((s.state & DTI_STATE_CONNECTING) && (e.bits & kEvReset))
            err = ECONNREFUSED;
        s.error = -err;
        s.state |= (e.bits & kEvReset) ? DTI_STATE_RESET : DTI_STATE_FAILED;
        s.state &= ~DTI_STATE_CONNECTING;
        finish_pending(a, s.connect, -err, h);
    }
    if (e.bits & kEvConnected) {
        s.state = (s.state & ~DTI_STATE_CONNECTING) | DTI_STATE_CONNECTED | DTI_STATE_BOUND;
        RingSpan tv, rv;
        if (tr_.tx_view(s.sid, &tv) == 0 && tv.p[0])
            s.tx_base = uint32_t(tv.p[0] - a.tx_ring(si)) & (a.lim.tx_ring_size - 1);
        if (tr_.rx_view(s.sid, &rv) == 0 && rv.p[0])
            s.rx_base = uint32_t(rv.p[0] - a.rx_ring(si)) & (a.lim.rx_ring_size - 1);
        finish_pending(a, s.connect, 0, h);
    }
    if (e.bits & kEvPeerClosed)
        s.state |= DTI_STATE_RD_CLOSED;
    if (e.bits & kEvClosed) {
        s.has_sid = false;
        mark(a, si);
        maybe_free(a, si);
        return;
    }
    mark(a, si);
}

} // namespace

uint64_t region_bytes(const Limits &limits)
{
    Geometry g;
    return geometry(limits, &g) ? g.size : 0;
}

void layout_region(void *region, uint64_t size, const Limits &limits)
{
    Geometry g;
    if (geometry(limits, &g) && size >= g.size)
        layout_region_impl(region, limits, g);
}

void refuse_connection(int fd, int code, const std::string &why) { ctl::refuse(fd, code, why); }

std::unique_ptr<Engine> Engine::create(Transport &transport, const Limits &limits, std::string *error)
{
    Geometry g;
    if (!geometry(limits, &g)) {
        if (error)
            *error = "unusable DTI limits: each queue and ring size must be a power of two, "
                     "evq_entries >= 2 * cmdq_entries, 1..64 contexts, 1..1048575 sockets";
        return nullptr;
    }
    if (limits.commands_per_poll == 0) {
        if (error)
            *error = "commands_per_poll must be positive";
        return nullptr;
    }
    return std::make_unique<EngineImpl>(transport, limits);
}

} // namespace dti::engine
