// Completions and events: built in a private shadow, stamped into the
// application's event queue at publish; wakeups (batched) and the sleep
// protocol.
#include "engine_impl.h"

#include <cstddef>
#include <cstring>

#include <unistd.h>

namespace dti::engine::detail {
namespace {

// Entries of the event queue the app has not consumed. The app's ev_cons is
// on its own cache line; the last value read is an upper bound on what is
// used, so it is reread (and validated) only when that bound leaves less
// than `want` entries free.
uint32_t EngineImpl::ev_used(Group &group, Ctx &c, uint32_t want)
{
    uint32_t used = c.ev_prod - c.ev_cons_seen;
    if (used + want <= group.lim.evq_entries)
        return used;
    uint32_t cons = load_acq(&c.qp->ev_cons);
    used = c.ev_prod - cons;
    // Hostile value: it may not run ahead of what we produced, nor move back.
    if (used > group.lim.evq_entries || cons - c.ev_cons_seen > c.ev_prod - c.ev_cons_seen) {
        break_region(group, DTI_E_BROKEN);
        return group.lim.evq_entries;
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

bool EngineImpl::complete(Group &group, uint16_t ci, uint32_t tag, int32_t res, uint32_t sock,
                          int64_t value, const uint32_t *accepted)
{
    if (ci >= group.ctxs.size() || !group.ctxs[ci].open || group.broken || group.ctxs[ci].draining)
        return false;
    Ctx &c = group.ctxs[ci];
    if (ev_used(group, c, 1) >= group.lim.evq_entries) {
        // Only an app that ignored its credits gets here.
        break_region(group, DTI_E_BROKEN);
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
    c.shadow[c.ev_prod & (group.lim.evq_entries - 1)] = v;
    c.ev_prod++;
    to_publish(group, ci);
    stats_.completions++;
    return true;
}

void EngineImpl::finish_pending(Group &group, Pending &p, int32_t res, uint32_t sock)
{
    if (!p.used)
        return;
    p.used = false;
    // A post that already wrote bytes into the process answers with their
    // count whatever ended it: the application must learn where it stands.
    complete(group, p.ctx, p.tag, p.landed ? int32_t(p.landed) : res, sock);
}

void EngineImpl::cancel_pending(Group &group, Slot &s, int32_t res, uint32_t sock)
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

void EngineImpl::post_event(Group &group, uint16_t ci, uint32_t sock, uint32_t mask)
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

void EngineImpl::publish(Group &group)
{
    for (uint16_t ci : group.to_publish) {
        Ctx &c = group.ctxs[ci];
        c.published = false;
        uint32_t mask = group.lim.evq_entries - 1;
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
            wake_ctxs_.emplace_back(&group, ci);
        }
    }
    group.to_publish.clear();
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
    for (auto &group : groups_)
        if (group && group->hdr && !group->broken && !group->dying)
            __atomic_store_n(&group->hdr->engine_sleeping, 1u, __ATOMIC_SEQ_CST);
    sleeping_ = true;
    // Sleeping flag stored (SC), then every queue re-checked (SC); apps store
    // cmd_prod (SC), then read the flag (SC): a command is never stranded.
    for (auto &group : groups_) {
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

void EngineImpl::end_sleep()
{
    if (!sleeping_)
        return;
    sleeping_ = false;
    for (auto &group : groups_) {
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

std::vector<int> EngineImpl::doorbell_fds() const
{
    std::vector<int> out;
    for (auto &group : groups_)
        if (group && group->doorbell >= 0 && !group->dying)
            out.push_back(group->doorbell);
    return out;
}

} // namespace
} // namespace dti::engine::detail
