// The control plane (control.h), passing sockets between processes: a socket one process sends to another
// over a UNIX socket (SCM_RIGHTS) arrives there as its kernel placeholder.
// The sender registers it (PASS, with its descriptor); the receiver claims
// it (CLAIM, with the descriptor it received). The engine compares the two
// open files itself (a socket's st_dev/st_ino, while the engine keeps the
// sender's copy open so the inode cannot be reused): nothing the
// application writes names the socket. The claimant then holds it, as after
// fork; a claimant of another group joins the sender's group (a member, like
// an exec'd image) if it sent the end of a new control connection.
#include "control.h"
#include "publisher.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <sys/stat.h>
#include <unistd.h>

namespace dti::engine::detail {

// In-flight passes per group: each holds a socket open and a descriptor in
// the engine. A sender whose receivers never claim (they do not run the
// shim) cannot make the engine keep more than this.
constexpr size_t kMaxPasses = 64;

// CLAIMED's index for a ticket: no socket of this engine (DTI_SOCK_INVALID).
constexpr uint32_t kNoSocket = 0xffffffffu;

static bool socket_identity(int fd, dev_t *dev, ino_t *ino)
{
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return false;
    *dev = st.st_dev;
    *ino = st.st_ino;
    return true;
}

static bool is_memfd_like(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (dev == 0 || (st.st_dev == dev && st.st_ino == ino));
}

static void close_passed(const int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

static dti_ctl_msg pass_reply(uint32_t type)
{
    dti_ctl_msg o{};
    o.magic = DTI_CTL_MAGIC;
    o.type = type;
    o.abi_version = DTI_ABI_VERSION;
    return o;
}

// Pass i is over without a claim (withdrawn): its hold goes; the last one
// closes the socket, as the kernel does when an in-flight file is dropped.
void Control::drop_pass(Group &group, size_t i)
{
    Pass p = group.passes[i];
    group.passes.erase(group.passes.begin() + std::ptrdiff_t(i));
    close(p.fd);
    if (p.ticket || p.standing)
        return; // no socket of this engine, or no hold of its own
    Slot &s = group.slots[p.slot];
    if (s.holders > 0 && --s.holders == 0)
        last_hold_gone(group, p.slot, false);
}

// Socket si is closed (its last hold went): its standing offers go with it,
// and with them the engine's copies of its placeholder.
void Control::drop_offers(Group &group, uint32_t si)
{
    for (size_t i = group.passes.size(); i-- > 0;)
        if (group.passes[i].standing && group.passes[i].slot == si) {
            close(group.passes[i].fd);
            group.passes.erase(group.passes.begin() + std::ptrdiff_t(i));
        }
}

// Forgets every pass (the group's sockets are being aborted: their holds
// are reset there).
void Control::drop_passes(Group &group)
{
    for (const Pass &p : group.passes)
        close(p.fd);
    group.passes.clear();
}

// PASS: fds[0] the socket's descriptor as the sender sends it, fds[1] and
// fds[2] the region and libdti's app-state memfds (kept once, for
// claimants of another group). Takes the fds.
void Control::pass_socket(Member &sender, const int fds[3], const dti_ctl_msg &m)
{
    Group &group = table_.group_of(sender);
    drain_member(group, sender); // what it published first counts (an accept it just made)
    dev_t dev = 0;
    ino_t ino = 0;
    uint32_t si = 0;
    if (!socket_identity(fds[0], &dev, &ino)) {
        close_passed(fds, 3);
        stats_.rejected_commands++;
        ctl::refuse(sender.fd, EBADF, "PASS needs the socket's descriptor");
        return;
    }
    auto passed = [&] {
        dti_ctl_msg o = pass_reply(DTI_CTL_PASSED);
        o.index = m.index;
        ctl::send_msg(sender.fd, o, nullptr, 0);
    };
    if (m.status == 1) { // withdraw: the sendmsg failed, nothing is in flight
        close_passed(fds, 3);
        for (size_t i = group.passes.size(); i-- > 0;)
            if (group.passes[i].dev == dev && group.passes[i].ino == ino && group.passes[i].handle == m.index &&
                !group.passes[i].standing) {
                drop_pass(group, i);
                break;
            }
        return passed();
    }
    const bool ticket = m.status == 2; // several engines: no socket here, the group's door
    const bool standing = m.status == 3;  // a listener made again after a PPE restart
    if (!ticket && !table_.slot_of(group, sender, m.index, &si)) {
        close_passed(fds, 3);
        stats_.rejected_commands++;
        ctl::refuse(sender.fd, DTI_E_BAD_HANDLE, "PASS of a socket this process does not hold");
        return;
    }
    if (standing && !(group.slots[si].state & DTI_STATE_LISTENING)) {
        close_passed(fds, 3);
        stats_.rejected_commands++;
        ctl::refuse(sender.fd, EINVAL, "only a listening socket can be offered to the processes sharing it");
        return;
    }
    if (standing)
        for (const Pass &p : group.passes)
            if (p.standing && p.dev == dev && p.ino == ino) { // offered already (by another member)
                close_passed(fds, 3);
                return passed();
            }
    // Standing offers do not count: at most one per listening socket.
    if (!standing && size_t(std::count_if(group.passes.begin(), group.passes.end(),
                                          [](const Pass &p) { return !p.standing; })) >= kMaxPasses) {
        close_passed(fds, 3);
        ctl::refuse(sender.fd, DTI_E_LIMIT,
                    std::to_string(kMaxPasses) + " sockets already in flight and not claimed by their receivers");
        return;
    }
    // The region memfd must be the one this engine made; libdti's app-state
    // memfd can only be checked for being a regular file.
    if (group.region_fd < 0 && is_memfd_like(fds[1], group.region_dev, group.region_ino) &&
        is_memfd_like(fds[2], 0, 0)) {
        group.region_fd = fds[1];
        group.priv_fd = fds[2];
    } else {
        close_passed(fds + 1, 2);
    }
    group.passes.push_back(Pass{si, m.index, sender.uid, dev, ino, fds[0], ticket, m.engine, standing});
    if (!ticket && !standing)
        group.slots[si].holders++; // in flight: open even if the sender closes it now
    passed();
}

// CLAIM: `fd` a descriptor the claimant received; join_fd (or -1) the end
// of a new control connection, should the socket be of another group.
// Takes both.
void Control::claim_socket(Member &claimant, int fd, int join_fd)
{
    dev_t dev = 0;
    ino_t ino = 0;
    const int id = claimant.id;
    auto refuse = [&](int code, const std::string &why) {
        close_passed(&join_fd, 1);
        stats_.rejected_commands++;
        ctl::refuse(claimant.fd, code, why);
    };
    bool ident = socket_identity(fd, &dev, &ino);
    if (fd >= 0)
        close(fd);
    if (!ident)
        return refuse(EBADF, "CLAIM needs a socket descriptor");
    // What the claimant published first counts: a process that passed a
    // socket to itself and closed it before the receive has that CLOSE in
    // its queue, and its hold must go before the claim gives it one again
    // (else the claim finds the hold still there and the CLOSE, taken after,
    // ends the socket).
    drain_member(table_.group_of(claimant), claimant);
    // A socket in flight first (one pass, one claim), then a standing offer
    // (a listener made again after a PPE restart, claimed by each process
    // that shares its descriptor).
    Group *from = nullptr;
    size_t pi = 0;
    for (bool standing : {false, true}) {
        for (auto &g : table_.groups()) {
            if (!g || g->broken || g->dying)
                continue;
            for (size_t i = 0; i < g->passes.size() && !from; i++)
                if (g->passes[i].dev == dev && g->passes[i].ino == ino && g->passes[i].standing == standing) {
                    from = g.get();
                    pi = i;
                }
            if (from)
                break;
        }
        if (from)
            break;
    }
    if (!from)
        return refuse(ENOENT, "not a socket in flight from a process of this PPE (never passed, already "
                              "claimed, or its sender's group has ended)");
    const Pass p = from->passes[pi];
    if (claimant.uid != 0 && claimant.uid != p.uid)
        return refuse(EPERM, "passed by uid " + std::to_string(p.uid) + ": only that user or root may take it");
    dti_ctl_msg o = pass_reply(DTI_CTL_CLAIMED);
    o.index = p.ticket ? kNoSocket : p.handle;
    o.engine = p.engine;
    if (from->id == claimant.group) {
        close_passed(&join_fd, 1);
        if (!p.ticket)
            take_hold(*from, claimant, p.slot);
        if (!p.standing)
            drop_pass(*from, pi); // the claimant's hold keeps it open
        o.status = 0;
        ctl::send_msg(claimant.fd, o, nullptr, 0);
        return;
    }
    if (join_fd < 0 || from->region_fd < 0 || from->priv_fd < 0)
        return refuse(EXDEV, "the socket belongs to another process group, which this process cannot join "
                             "(it holds sockets of its own)");
    std::string why;
    int err = 0;
    Member *m = table_.new_member(*from, join_fd, &why, &err);
    if (!m)
        return refuse(err, why); // new_member did not take join_fd: the lambda closes it
    Member &claim_src = *table_.members()[size_t(id)];
    int on = 1;
    setsockopt(join_fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
    m->uid = claim_src.uid;
    m->pid = claim_src.pid;
    m->bind_service = claim_src.bind_service;
    m->unprivileged_port_start = claim_src.unprivileged_port_start;
    m->cred_pid = claim_src.cred_pid;
    m->cred_start = claim_src.cred_start;
    m->name = claim_src.name;
    if (!p.ticket)
        take_hold(*from, *m, p.slot);
    if (!p.standing)
        drop_pass(*from, pi);
    o.status = 1;
    o.region_size = from->size;
    int out[3] = {from->region_fd, from->priv_fd, from->doorbell};
    if (!ctl::send_msg(claim_src.fd, o, out, 3)) {
        leave(*m);
        return;
    }
    stats_.forks++;
    joined_.push_back(m->id);
}

} // namespace dti::engine::detail
