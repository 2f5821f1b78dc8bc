// The publisher (publisher.h): completions and events built in a private
// shadow, stamped into the application's event queue at publish; event
// shielding; wakeups (batched) and the sleep protocol.
#include "publisher.h"
#include "control.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <unistd.h>

namespace dti::engine::detail {

// ev_used()'s slow path: the bound it keeps leaves too little room, so the
// app's ev_cons is read again.
uint32_t Publisher::ev_reread(Group &group, Ctx &c)
{
    uint32_t cons = load_acq(&c.qp->ev_cons);
    uint32_t used = c.ev_prod - cons;
    // Hostile value: it may not run ahead of what we produced, nor move back.
    if (used > group.lim.evq_entries || cons - c.ev_cons_seen > c.ev_prod - c.ev_cons_seen) {
        control_.break_region(group, DTI_E_BROKEN);
        return group.lim.evq_entries;
    }
    c.ev_cons_seen = cons;
    return used;
}

// A completion found no room: the app ignored its credits.
void Publisher::overrun(Group &group) { control_.break_region(group, DTI_E_BROKEN); }

void Publisher::cancel_pending(Group &group, Slot &s, int32_t res, uint32_t sock)
{
    finish_pending(group, s.connect, res, sock);
    finish_pending(group, s.accept, res, sock);
    finish_pending(group, s.recv_into, res, sock);
    finish_pending(group, s.post, res, sock);
    digest::Done d[digest::kMaxRanges];
    for (digest::Direction *dir : {&s.dg.rx, &s.dg.tx}) {
        uint32_t n = dir->cancel(~0ull, res, d);
        for (uint32_t i = 0; i < n; i++)
            complete(group, d[i].ctx, d[i].tag, d[i].res, sock);
    }
}

void Publisher::post_event(Group &group, uint16_t ci, uint32_t sock, uint32_t mask)
{
    Ctx &c = group.ctxs[ci];
    if (!c.open || c.draining)
        return;
    // Keep cmdq_entries slots free for completions: events never take a
    // completion's room; when they do not fit, the app is told to rescan.
    if (ev_used(group, c, group.lim.cmdq_entries + 1) + group.lim.cmdq_entries >= group.lim.evq_entries) {
        if (group.broken)
            return;
        c.ev_overflow++;
        store_rel(&c.qp->ev_overflow, c.ev_overflow);
        to_publish(group, ci);
        stats_.events_dropped++;
        return;
    }
    dti_ev v{};
    v.kind = DTI_CQE_EVENT;
    v.sock = sock;
    v.events = mask;
    c.shadow[c.ev_prod & (group.lim.evq_entries - 1)] = v;
    c.ev_prod++;
    to_publish(group, ci);
    stats_.events_posted++;
}

void Publisher::clear_wakeups()
{
    for (auto &w : wake_ctxs_)
        w.first->ctxs[w.second].wake_listed = false;
    wake_ctxs_.clear();
    wake_fds_.clear();
}

void Publisher::flush_wakeups()
{
    for (int fd : wake_fds_) {
        uint64_t one = 1;
        ssize_t n = write(fd, &one, sizeof one);
        (void)n; // EAGAIN: the counter is saturated, the app wakes anyway
        stats_.wakeups++;
    }
    clear_wakeups();
}

bool Publisher::prepare_sleep()
{
    for (auto &group : table_.groups())
        if (group && group->hdr && !group->broken && !group->dying)
            __atomic_store_n(&group->hdr->engine_sleeping, 1u, __ATOMIC_SEQ_CST);
    sleeping_ = true;
    // Sleeping flag stored (SC), then every queue re-checked (SC); apps store
    // cmd_prod (SC), then read the flag (SC): a command is never stranded.
    for (auto &group : table_.groups()) {
        if (!group || !group->hdr || group->broken || group->dying)
            continue;
        for (Ctx &c : group->ctxs) {
            // A producer index that moved but no stamped entry behind it is
            // garbage from a hostile app: it must not keep the engine awake.
            if (c.open && __atomic_load_n(&c.qp->cmd_prod, __ATOMIC_SEQ_CST) != c.cmd_cons &&
                load_acq(&c.cmds[c.cmd_cons & (group->lim.cmdq_entries - 1)].stamp) == c.cmd_cons + 1) {
                end_sleep();
                return false;
            }
        }
    }
    return true;
}

void Publisher::end_sleep()
{
    if (!sleeping_)
        return;
    sleeping_ = false;
    for (auto &group : table_.groups()) {
        if (group && group->hdr && !group->broken && !group->dying) {
            store_rlx(&group->hdr->engine_sleeping, 0u);
            if (group->doorbell >= 0) {
                uint64_t v;
                if (read(group->doorbell, &v, sizeof v) == ssize_t(sizeof v))
                    stats_.doorbells_seen++;
            }
        }
    }
}

std::vector<int> Publisher::doorbell_fds() const
{
    std::vector<int> out;
    for (auto &group : table_.groups())
        if (group && group->doorbell >= 0 && !group->dying)
            out.push_back(group->doorbell);
    return out;
}

void Publisher::list_wake(Group &group, uint16_t ci)
{
    group.ctxs[ci].wake_listed = true;
    wake_fds_.push_back(group.ctxs[ci].wake_fd);
    wake_ctxs_.emplace_back(&group, ci);
}

void Publisher::wake_all(Group &group)
{
    for (uint16_t i = 0; i < group.ctxs.size(); i++)
        if (group.ctxs[i].open && group.ctxs[i].wake_fd >= 0 && !group.ctxs[i].wake_listed)
            list_wake(group, i);
}

void Publisher::relist_wakes()
{
    wake_fds_.clear();
    for (auto &w : wake_ctxs_)
        wake_fds_.push_back(w.first->ctxs[w.second].wake_fd);
}

void Publisher::forget_ctx(Group &group, uint16_t ci)
{
    std::erase_if(wake_ctxs_, [&](auto &w) { return w.first == &group && w.second == ci; });
    if (group.ctxs[ci].wake_listed) {
        group.ctxs[ci].wake_listed = false;
        relist_wakes();
    }
}

void Publisher::forget_group(const Group &group)
{
    std::erase_if(wake_ctxs_, [&](auto &w) { return w.first == &group; });
    relist_wakes();
}

} // namespace dti::engine::detail
