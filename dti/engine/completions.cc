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

// The event queue's producer side (the protocol: dti/QUEUES.md, "Stamps").
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

void Publisher::publish(Group &group)
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
            list_wake(group, ci);
        }
    }
    group.to_publish.clear();
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

// Event shielding: a watcher hears about a socket when a watched condition
// turns on, when new bytes or connections arrive (POLLIN), or when an armed
// POLLOUT holds; never for ACKs that change nothing it asked about.
void Publisher::notify(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    if (!s.holders || s.watchers == 0)
        return;
    uint32_t readable = s.rx_tail - s.rx_consumed;
    uint32_t writable = group.lim.tx_ring_size - (s.tx_committed - s.tx_head);
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
    uint32_t h = table_.handle(group, si);
    for (uint64_t w = s.watchers; w; w &= w - 1)
        post_event(group, uint16_t(__builtin_ctzll(w)), h, mask);
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
