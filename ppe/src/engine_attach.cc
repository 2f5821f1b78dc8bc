// ppe/src/engine_attach.cc: an engine's side of attaching programs — the
// connections the control thread hands over (Engine::offer_connection, the
// Mailbox), HELLO read by the DTI engine, and the io_uring polls that watch
// each attached program's control socket and doorbell until it detaches.
// The loop that runs them is in engine.cc.
#include "engine.h"

#include "engine_ring.h"
#include "log.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ppe {

using namespace engine_ring;

bool Engine::offer_connection(int fd)
{
    if (!inbox_.push(reinterpret_cast<void *>(intptr_t(fd)))) return false;
    kick();
    return true;
}

void Engine::accept_connections()
{
    while (void *p = inbox_.pop()) try_attach(int(reinterpret_cast<intptr_t>(p)));
}

// Attach: the DTI engine reads HELLO, checks the peer and the limits, and
// answers WELCOME or REFUSED itself. Not yet readable: poll and come back.
void Engine::try_attach(int fd)
{
    std::string why;
    const int id = dti_->attach(fd, &why);
    if (id == -EAGAIN) {
        const uint64_t seq = next_seq_++;
        io_uring_sqe *sqe = get_sqe(&ring_);
        io_uring_prep_poll_add(sqe, fd, POLLIN | POLLRDHUP);
        io_uring_sqe_set_data64(sqe, seq << 8 | kTagHello);
        hellos_.emplace_back(fd, seq);
        io_uring_submit(&ring_);
        return;
    }
    if (id < 0) {
        log(LogLevel::kInfo, "engine %u: attach refused: %s", index_, why.c_str());
        close(fd);
        return;
    }
    reconcile_watches(); // first: a doorbell fd number may have been reused
    watch_control(id);
    refresh_owners();
    for (const auto &a : dti_->attachments())
        if (a.id == id)
            log(LogLevel::kInfo, "engine %u: attached %s (pid %u, uid %u), region %llu bytes", index_, a.name.c_str(),
                a.pid, a.uid, static_cast<unsigned long long>(a.region_bytes));
}

// Multishot polls on the attachment's control socket (context requests,
// and the hang-up that says the application is gone) and on its doorbell
// (which wakes a sleeping engine). Both are removed when it detaches.
void Engine::watch_control(int id)
{
    // Processes forked from an application share its doorbell: each watch
    // polls it, so it stays watched while any of them lives.
    Watch w{id, dti_->control_fd(id), dti_->doorbell_fd(id), next_seq_++};
    watches_.push_back(w);
    arm_poll(w.ctl_fd, w.seq << 8 | kTagControl, POLLIN | POLLRDHUP | POLLHUP);
    if (w.bell_fd >= 0) arm_poll(w.bell_fd, w.seq << 8 | kTagDoorbell, POLLIN);
    io_uring_submit(&ring_);
}

void Engine::arm_poll(int fd, uint64_t tag, unsigned mask)
{
    io_uring_sqe *sqe = get_sqe(&ring_);
    io_uring_prep_poll_multishot(sqe, fd, mask);
    io_uring_sqe_set_data64(sqe, tag);
}

// A multishot poll ended on its own (the kernel may end one at any time).
void Engine::rearm(uint64_t tag)
{
    for (const Watch &w : watches_) {
        if (w.seq != tag >> 8 || dti_->control_fd(w.id) != w.ctl_fd) continue;
        if ((tag & 0xff) == kTagControl) arm_poll(w.ctl_fd, tag, POLLIN | POLLRDHUP | POLLHUP);
        else arm_poll(w.bell_fd, tag, POLLIN);
        io_uring_submit(&ring_);
    }
}

void Engine::on_control_ready(uint64_t seq)
{
    for (const Watch &w : watches_) {
        if (w.seq != seq) continue;
        if (dti_->control_fd(w.id) == w.ctl_fd) {
            dti_->control(w.id); // on hang-up: drop its holds (last of its group: RST every socket, reclaim, close)
            if (dti_->control_fd(w.id) != w.ctl_fd)
                log(LogLevel::kInfo, "engine %u: application %d detached", index_, w.id);
        }
        break;
    }
    reconcile_watches();
    for (int id : dti_->take_joined()) watch_control(id); // fork children of that application
    refresh_owners();
}

uint32_t Engine::owner_uid(uint64_t user, void *engine)
{
    const auto *e = static_cast<const Engine *>(engine);
    const size_t group = size_t((user >> 32) & 0xffff);
    return group < e->group_uid_.size() ? e->group_uid_[group] : UINT32_MAX;
}

// Attach and fork time only (attachments() allocates): binds read the table.
void Engine::refresh_owners()
{
    for (const auto &a : dti_->attachments()) {
        if (a.group < 0) continue;
        if (size_t(a.group) >= group_uid_.size()) group_uid_.resize(size_t(a.group) + 1, UINT32_MAX);
        group_uid_[size_t(a.group)] = a.uid;
    }
}

// Drops the polls of attachments that are gone (hang-up, broken region,
// shutdown): io_uring holds a reference to the socket until the poll is
// removed, and the application must see the socket close.
void Engine::reconcile_watches()
{
    bool removed = false;
    for (Watch &w : watches_) {
        if (dti_->control_fd(w.id) == w.ctl_fd) continue;
        for (uint64_t kind : {kTagControl, kTagDoorbell}) {
            io_uring_sqe *sqe = get_sqe(&ring_);
            io_uring_prep_poll_remove(sqe, w.seq << 8 | kind);
            io_uring_sqe_set_data64(sqe, kTagCancel);
        }
        w.seq = 0;
        removed = true;
    }
    if (!removed) return;
    std::erase_if(watches_, [](const Watch &w) { return w.seq == 0; });
    io_uring_submit(&ring_);
}

} // namespace ppe
