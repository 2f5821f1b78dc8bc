// The control plane (control.h), its protocol: attach (HELLO/WELCOME/REFUSED), contexts, FORK and
// EXEC, over each member's SOCK_SEQPACKET connection; and the kernel's
// privileged-port rule, taken from the credentials the kernel gives.
#include "control.h"
#include "commands.h"
#include "publisher.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <linux/capability.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dti::engine::detail {

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

// ---- control messages ----------------------------------------------------------------------

namespace ctl {

bool send_msg(int fd, const dti_ctl_msg &m, const int *fds, int nfds)
{
    iovec iov{const_cast<dti_ctl_msg *>(&m), sizeof m};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 3)];
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

// Receives one message without blocking; the first passed fd goes to
// *passed, the next n_more to more[] (others are closed) and,
// on a socket with SO_PASSCRED, the sender's kernel-given credentials to
// *cred (pid 0 when none came). `flags`: MSG_PEEK to leave it queued.
int recv_msg(int fd, dti_ctl_msg *m, int *passed, ucred *cred, int flags, int *more, int n_more)
{
    if (passed)
        *passed = -1;
    for (int i = 0; i < n_more; i++)
        more[i] = -1;
    int n_taken = 0;
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
                else if (passed && n_taken < n_more)
                    more[n_taken++] = f;
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

// ---- attach and control --------------------------------------------------------------------

int Control::attach(int fd, std::string *why)
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
    Group *gp = table_.new_group(why, &err);
    if (!gp) {
        ctl::refuse(fd, err, *why);
        return -err;
    }
    Group &group = *gp;
    int memfd = memfd_create("eta-dti", MFD_CLOEXEC);
    void *p = MAP_FAILED;
    if (memfd >= 0 && ftruncate(memfd, off_t(group.size)) == 0)
        p = mmap(nullptr, group.size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    group.doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p == MAP_FAILED || group.doorbell < 0) {
        *why = std::string("cannot create the shared region: ") + std::strerror(errno);
        ctl::refuse(fd, ENOMEM, *why);
        if (memfd >= 0)
            close(memfd);
        if (p != MAP_FAILED)
            munmap(p, group.size);
        if (group.doorbell >= 0)
            close(group.doorbell);
        group.doorbell = -1;
        table_.release_id(group);
        return -ENOMEM;
    }
    group.base = static_cast<uint8_t *>(p);
    group.owns_mapping = true;
    struct stat st;
    if (fstat(memfd, &st) == 0) { // what a PASS must show to hand the region on
        group.region_dev = st.st_dev;
        group.region_ino = st.st_ino;
    }
    layout_region_impl(group.base, group.lim, group.geo);
    table_.init_region(group);
    Member *mem = table_.new_member(group, -1, why, &err);
    if (!mem) {
        ctl::refuse(fd, err, *why);
        close(memfd);
        finalize(group);
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
    w.region_size = group.size;
    w.engine = lim_.engine_index;
    w.n_engines = lim_.n_engines;
    int fds[2] = {memfd, group.doorbell};
    bool sent = ctl::send_msg(fd, w, fds, 2);
    close(memfd);
    if (!sent) {
        *why = "cannot answer the application";
        release_member(*mem);
        finalize(group);
        return -EPIPE;
    }
    mem->fd = fd;
    stats_.refusals--;
    stats_.attaches++;
    return mem->id;
}

int Control::attach_memory(void *region, uint64_t size, uint32_t contexts)
{
    std::string why;
    int err = 0;
    Group *gp = table_.new_group(&why, &err);
    if (!gp)
        return -err;
    if (size < gp->size || contexts > gp->lim.max_contexts) {
        table_.release_id(*gp);
        return -EINVAL;
    }
    gp->base = static_cast<uint8_t *>(region);
    table_.init_region(*gp);
    Member *m = table_.new_member(*gp, -1, &why, &err);
    if (!m) {
        table_.release_id(*gp);
        return -err;
    }
    m->bind_service = true; // in the engine's own process (benchmarks, tests): its privileges
    for (uint32_t i = 0; i < contexts; i++) {
        gp->ctxs[i].open = true;
        gp->ctxs[i].member = m->id;
        m->ctx_mask |= uint64_t{1} << i;
        gp->ctxs[i].shadow.assign(gp->lim.evq_entries, dti_ev{});
        gp->live_ctxs.push_back(uint16_t(i));
    }
    return m->id;
}

void Control::control(int id)
{
    Member *mp = table_.member(id);
    if (!mp || mp->fd < 0)
        return;
    Member &me = *mp;
    Group &group = table_.group_of(me);
    for (int budget = 0; budget < 16; budget++) {
        dti_ctl_msg m{};
        int passed = -1, more[2];
        ucred cred{};
        int r = ctl::recv_msg(me.fd, &m, &passed, &cred, 0, more, 2);
        if (r == -EAGAIN || r == -EWOULDBLOCK || r == -EINTR)
            return;
        if (r <= 0 && r != -EPROTO) {
            detach(id);
            return;
        }
        if (m.type != DTI_CTL_PASS && m.type != DTI_CTL_CLAIM)
            for (int f : more)
                if (f >= 0)
                    close(f); // only PASS and CLAIM carry more than one
        if (r == -EPROTO || group.broken || group.dying) {
            if (passed >= 0)
                close(passed);
            if (m.type == DTI_CTL_PASS || m.type == DTI_CTL_CLAIM)
                for (int f : more)
                    if (f >= 0)
                        close(f);
            // Requests that wait for an answer get one: nobody hangs.
            if (r == 1 && (m.type == DTI_CTL_FORK || m.type == DTI_CTL_OPEN_CTX ||
                           m.type == DTI_CTL_EXEC || m.type == DTI_CTL_EXEC_HOLD || m.type == DTI_CTL_PASS ||
                           m.type == DTI_CTL_CLAIM))
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
        if (m.type == DTI_CTL_PASS) {
            const int fds[3] = {passed, more[0], more[1]};
            pass_socket(me, fds, m); // takes the fds
            continue;
        }
        if (m.type == DTI_CTL_CLAIM) {
            if (more[1] >= 0)
                close(more[1]);
            claim_socket(me, passed, more[0]); // takes both; may join another group
            if (!table_.member(id))
                return;
            continue;
        }
        if (passed >= 0)
            close(passed);
        if (m.type == DTI_CTL_OPEN_CTX) {
            uint32_t i = 0;
            while (i < group.ctxs.size() && group.ctxs[i].open)
                i++;
            if (i == group.ctxs.size()) {
                ctl::refuse(me.fd, DTI_E_LIMIT, "context limit reached (" + std::to_string(i) + ")");
                continue;
            }
            int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
            if (efd < 0) {
                ctl::refuse(me.fd, ENOMEM, "cannot create a wake eventfd");
                continue;
            }
            Ctx &c = group.ctxs[i];
            // Reset the queue pair and its rings (stale stamps would read as
            // fresh entries): its previous user is gone.
            std::memset(c.qp, 0, group.geo.ctx_stride);
            c = Ctx{id, true, false, false, false, efd, 0, 0, 0, 0, 0, {}, c.qp, c.cmds, c.evs};
            c.shadow.assign(group.lim.evq_entries, dti_ev{});
            group.live_ctxs.push_back(uint16_t(i));
            me.ctx_mask |= uint64_t{1} << i;
            dti_ctl_msg o{};
            o.magic = DTI_CTL_MAGIC;
            o.type = DTI_CTL_CTX_OPENED;
            o.abi_version = DTI_ABI_VERSION;
            o.index = i;
            if (!ctl::send_msg(me.fd, o, &efd, 1))
                close_ctx(group, uint16_t(i));
        } else if (m.type == DTI_CTL_CLOSE_CTX && m.index < group.ctxs.size() && group.ctxs[m.index].open &&
                   group.ctxs[m.index].member == id) {
            // Commands published before the close request still count (a
            // thread's last send before it exits): run them, unanswered.
            drain_ctx(group, uint16_t(m.index), false);
            close_ctx(group, uint16_t(m.index));
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
            if (Member *p = table_.member(me.exec_parent); p && p->exec_child == me.id)
                p->exec_child = -1;
            me.exec_parent = -1;
        }
    }
}

// A fork child's own pid, as the kernel gave it with its first message.
void Control::learn_pid(Member &m, const ucred &cred)
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
bool Control::may_bind_privileged(Member &m)
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
Member *Control::member_like(Member &parent, int child_fd)
{
    Group &group = table_.group_of(parent);
    std::string why;
    int err = 0;
    Member *child = table_.new_member(group, child_fd, &why, &err);
    if (!child) {
        close(child_fd);
        ctl::refuse(parent.fd, err, why);
        return nullptr;
    }
    drain_member(group, parent);
    if (group.broken) {
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

// FORK: `child_fd` (a SOCK_SEQPACKET socket the parent made and its child
// inherits) becomes the control connection of a new member of the parent's
// group, holding every socket the parent holds. The member ends when every
// copy of the other end is closed: the child's exit, or the parent's close
// when fork() failed. The answer goes to the parent.
void Control::fork_member(Member &parent, int child_fd)
{
    Group &group = table_.group_of(parent);
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
    for (uint32_t si = 0; si < group.slots.size(); si++)
        if (parent.holds[si])
            take_hold(group, *child, si);
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
void Control::exec_member(Member &parent, int child_fd, const dti_ctl_msg &m)
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
    if (table_.member(id) == child) { // the answer could be sent
        stats_.forks++;
        joined_.push_back(id);
    }
}

void Control::exec_hold(Member &parent, const dti_ctl_msg &m)
{
    Member *child = table_.member(parent.exec_child);
    if (!child || child->exec_parent != parent.id || child->group != parent.group ||
        m.index > DTI_CTL_HANDLES) {
        stats_.rejected_commands++;
        ctl::refuse(parent.fd, DTI_E_PROTOCOL, "EXEC_HOLD without a new member waiting for holds");
        return;
    }
    drain_member(table_.group_of(parent), parent);
    answer_exec(parent, *child, grant_holds(parent, *child, m));
}

// Gives `child` a hold on each listed handle that `parent` holds.
uint32_t Control::grant_holds(Member &parent, Member &child, const dti_ctl_msg &m)
{
    Group &group = table_.group_of(parent);
    uint32_t granted = 0;
    for (uint32_t i = 0; i < m.index && i < DTI_CTL_HANDLES; i++) {
        uint32_t h = 0, si = 0;
        std::memcpy(&h, m.text + i * sizeof h, sizeof h);
        if (table_.slot_of(group, parent, h, &si)) {
            take_hold(group, child, si);
            granted++;
        } else {
            stats_.rejected_commands++;
        }
    }
    return granted;
}

void Control::answer_exec(Member &parent, const Member &child, uint32_t granted)
{
    dti_ctl_msg o{};
    o.magic = DTI_CTL_MAGIC;
    o.type = DTI_CTL_EXECED;
    o.abi_version = DTI_ABI_VERSION;
    o.index = uint32_t(child.id);
    o.status = int32_t(granted);
    if (!ctl::send_msg(parent.fd, o, nullptr, 0))
        leave(*table_.members()[size_t(child.id)]);
}

} // namespace dti::engine::detail

namespace dti::engine {

void refuse_connection(int fd, int code, const std::string &why) { detail::ctl::refuse(fd, code, why); }

} // namespace dti::engine
