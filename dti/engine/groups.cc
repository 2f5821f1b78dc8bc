// The control plane (control.h), its groups: a region and the processes that share it (members), each
// with its contexts and its holds on sockets (kernel file semantics).
#include "control.h"
#include "commands.h"
#include "publisher.h"

#include <algorithm>
#include <cerrno>

#include <sys/mman.h>
#include <unistd.h>

namespace dti::engine::detail {

// ---- groups and members --------------------------------------------------------------------

void Control::release_member(Member &m)
{
    Group &group = table_.group_of(m);
    group.members--;
    if (m.fd >= 0)
        close(m.fd);
    std::erase(joined_, m.id);
    table_.members()[size_t(m.id)].reset();
}

// Closes a queue pair: its watches and waiting commands go with it.
void Control::close_ctx(Group &group, uint16_t ci)
{
    Ctx &c = group.ctxs[ci];
    if (Member *m = table_.member(c.member))
        m->ctx_mask &= ~(uint64_t{1} << ci);
    c.open = false;
    c.member = -1;
    std::erase(group.live_ctxs, ci);
    std::erase(group.to_publish, ci);
    c.published = false;
    if (c.wake_fd >= 0)
        close(c.wake_fd);
    c.wake_fd = -1;
    uint64_t bit = uint64_t{1} << ci;
    for (Slot &s : group.slots) {
        s.watchers &= ~bit;
        for (Pending *p : {&s.connect, &s.accept, &s.recv_into, &s.post})
            if (p->used && p->ctx == ci)
                p->used = false;
        // Its digest ranges go unanswered too: a later context at this
        // index must never get their completions.
        digest::Done gone[digest::kMaxRanges];
        s.dg.rx.cancel(bit, 0, gone);
        s.dg.tx.cancel(bit, 0, gone);
    }
    pub_.forget_ctx(group, ci);
}

// Runs every command the context has published; `answer`: with completions
// (else it is closing and nobody would read them).
void Control::drain_ctx(Group &group, uint16_t ci, bool answer)
{
    Ctx &c = group.ctxs[ci];
    c.draining = !answer;
    unsigned work = 0;
    for (uint32_t k = 0; k <= group.lim.cmdq_entries / group.lim.commands_per_poll + 1 && !group.broken; k++)
        cmds_.process_ctx(group, ci, &work);
    c.draining = false;
}

// Runs what the member's contexts have published, so that a snapshot of its
// holds (fork) reflects every close it issued before asking.
void Control::drain_member(Group &group, const Member &m)
{
    for (uint16_t ci : std::vector<uint16_t>(group.live_ctxs))
        if (group.ctxs[ci].member == m.id)
            drain_ctx(group, ci, true);
}

// ---- holds ---------------------------------------------------------------------------------

void Control::take_hold(Group &group, Member &m, uint32_t si)
{
    Slot &s = group.slots[si];
    if (m.holds[si])
        return;
    m.holds[si] = true;
    m.held++;
    if (s.holders++ == 0)
        group.open_sockets++;
}

// CLOSE/ABORT from a member, or its exit: its hold goes. The transport
// close (or abort) happens when the last hold goes, as for a kernel file;
// until then only the member's own watches and waiting commands end.
void Control::drop_hold(Group &group, Member &m, uint32_t si, bool abortive)
{
    Slot &s = group.slots[si];
    if (!m.holds[si])
        return;
    m.holds[si] = false;
    m.held--;
    if (--s.holders > 0) {
        s.watchers &= ~m.ctx_mask;
        for (Pending *p : {&s.connect, &s.accept, &s.recv_into, &s.post})
            if (p->used && ((m.ctx_mask >> p->ctx) & 1))
                pub_.finish_pending(group, *p, -ECANCELED, table_.handle(group, si));
        digest::Done d[digest::kMaxRanges];
        for (digest::Direction *dir : {&s.dg.rx, &s.dg.tx}) {
            uint32_t n = dir->cancel(m.ctx_mask, -ECANCELED, d);
            for (uint32_t i = 0; i < n; i++)
                pub_.complete(group, d[i].ctx, d[i].tag, d[i].res, table_.handle(group, si));
        }
        if (s.watchers == 0)
            s.interest = 0;
        return;
    }
    last_hold_gone(group, si, abortive);
}

// Nobody holds socket si any more (no member, no pass in flight): closed
// (or aborted) as the kernel closes a file at its last close.
void Control::last_hold_gone(Group &group, uint32_t si, bool abortive)
{
    Slot &s = group.slots[si];
    pub_.cancel_pending(group, s, -ECANCELED, table_.handle(group, si));
    group.open_sockets--;
    s.watchers = 0;
    store_rel(&group.socks[si].gen, 0u); // the handle is dead at once
    drop_offers(group, si);
    if (s.has_sid) {
        int r = s.dgram ? tr_.dgram_close(s.sid) : abortive ? tr_.abort(s.sid) : tr_.close(s.sid);
        // abort() frees at once; so does a close() the transport refuses.
        if (abortive || r < 0)
            s.has_sid = false;
    }
    table_.maybe_free(group, si);
}

// ---- leaving -------------------------------------------------------------------------------

// Aborts every socket of the region (a dead application's connections get a
// RST). With keep_closing, sockets the application had already closed (no
// holder, the transport still sending the rest and the FIN) or shut down for
// writing are left to finish, as the kernel finishes them after its process
// exits; the region stays mapped until the transport hands their rings back
// (maybe_finish).
void Control::abort_all(Group &group, bool keep_closing)
{
    drop_passes(group); // their holds go with every other below
    for (auto &m : table_.members())
        if (m && m->group == group.id) {
            m->holds.assign(m->holds.size(), false);
            m->held = 0;
        }
    for (uint32_t i = 0; i < group.slots.size(); i++) {
        Slot &s = group.slots[i];
        s.connect.used = s.accept.used = s.recv_into.used = s.post.used = false;
        // A socket the application shut down for writing (it said it was
        // done: socat and many tools shutdown(SHUT_WR) and then exit
        // without close()) finishes like a closed one instead of losing
        // the unsent tail to a reset.
        const bool done_sending = s.holders && (s.state & DTI_STATE_WR_CLOSED) && s.has_sid &&
                                  !(s.state & (DTI_STATE_LISTENING | DTI_STATE_RESET | DTI_STATE_FAILED));
        const bool closing = s.holders == 0 && s.has_sid && !(s.state & DTI_STATE_LISTENING);
        if (s.holders) {
            s.holders = 0;
            group.open_sockets--;
        }
        if (keep_closing && done_sending) {
            if (tr_.close(s.sid) < 0)
                s.has_sid = false; // refused: the transport has already let it go
        } else if (s.has_sid && !(keep_closing && closing)) {
            (void)(s.dgram ? tr_.dgram_close(s.sid) : tr_.abort(s.sid));
            s.has_sid = false;
        }
        table_.maybe_free(group, i);
    }
}

void Control::break_region(Group &group, int reason)
{
    if (group.broken)
        return;
    group.broken = true;
    stats_.broken_regions++;
    store_rlx(&group.hdr->broken_reason, int32_t(reason));
    store_rel(&group.hdr->engine_state, uint32_t{DTI_ENGINE_BROKEN});
    abort_all(group, false);
    // Wake sleepers so they see the state; the app detaches, and its hang-up
    // brings us to detach().
    pub_.wake_all(group);
}

void Control::detach(int id)
{
    Member *m = table_.member(id);
    if (!m)
        return;
    stats_.detaches++;
    leave(*m);
}

// A process leaves its group (hang-up, detach). Its contexts close and its
// holds drop: sockets other members still hold stay as they are; sockets
// nobody holds any more are closed, as the kernel does at exit. The last
// member takes the region with it: every socket left is aborted.
void Control::leave(Member &m)
{
    Group &group = table_.group_of(m);
    if (group.members == 1) {
        // What it published before it went still counts: a close() just
        // before exit is a graceful close, not an abort.
        if (!group.broken)
            drain_member(group, m);
        for (Ctx &c : group.ctxs)
            c.member = -1; // the id may be reused by another group's member
        release_member(m);
        group.dying = true;
        if (group.hdr && !group.broken)
            store_rel(&group.hdr->engine_state, uint32_t{DTI_ENGINE_GONE});
        abort_all(group, !group.broken);
        maybe_finish(group);
        return;
    }
    // What it published before it went still counts (its last send).
    for (uint16_t ci = 0; ci < group.ctxs.size(); ci++)
        if (group.ctxs[ci].open && group.ctxs[ci].member == m.id) {
            drain_ctx(group, ci, false);
            close_ctx(group, ci);
        }
    for (uint32_t si = 0; si < group.slots.size() && m.held > 0; si++)
        if (m.holds[si])
            drop_hold(group, m, si, false);
    release_member(m);
}

void Control::maybe_finish(Group &group)
{
    // The region stays mapped until the transport has returned every ring it
    // held: it may write into them until then.
    if (group.dying && group.rings_out == 0)
        finalize(group);
}

void Control::finalize(Group &group)
{
    for (auto &m : table_.members())
        if (m && m->group == group.id)
            release_member(*m);
    for (Ctx &c : group.ctxs)
        if (c.wake_fd >= 0)
            close(c.wake_fd);
    pub_.forget_group(group);
    if (group.doorbell >= 0)
        close(group.doorbell);
    drop_passes(group);
    for (int *fd : {&group.region_fd, &group.priv_fd})
        if (*fd >= 0) {
            close(*fd);
            *fd = -1;
        }
    if (group.owns_mapping && group.base)
        munmap(group.base, group.size);
    table_.release_id(group);
}

void Control::shutdown()
{
    for (size_t i = 0; i < table_.members().size(); i++)
        if (table_.members()[i])
            detach(int(i));
}

std::vector<AttachmentInfo> Control::attachments() const
{
    std::vector<AttachmentInfo> out;
    for (auto &m : table_.members()) {
        if (!m)
            continue;
        const Group &group = table_.group_of(*m);
        out.push_back({m->id, m->uid, m->pid, m->name, uint32_t(__builtin_popcountll(m->ctx_mask)), m->held,
                       group.size, group.broken, group.id});
    }
    return out;
}

} // namespace dti::engine::detail
