// publisher.h: what the engine tells the application. Completions and
// events are built in each context's private shadow and stamped into its
// event queue at publish (the event queue's producer side, dti/QUEUES.md);
// event shielding (notify) decides which socket changes a watcher hears of;
// wakeups are batched per poll, and the sleep protocol keeps a command from
// being stranded while the engine sleeps. Code: completions.cc.
//
// ev_used() and complete() run for every command, notify() and publish() in
// every table pass: they are inline here.
#pragma once

#include "state.h"
#include "table.h"

#include <cstddef>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

namespace dti::engine::detail {

class Control;

// The event queue's producer side (the protocol: dti/QUEUES.md, "Stamps").
// Copies a finished entry into the ring, body then stamp back to back (the
// app polls that very slot: a body written long before its stamp would make
// the line cross twice). Called by publish(), after the socket table is up to
// date: an app that sees a completion (say, of connect) must also see the
// socket state that goes with it.
inline void put_entry(dti_ev *slot, const dti_ev &v, uint32_t index)
{
    auto *d = reinterpret_cast<uint8_t *>(slot);
    auto *s = reinterpret_cast<const uint8_t *>(&v);
    std::memcpy(d, s, offsetof(dti_ev, stamp));
    std::memcpy(d + offsetof(dti_ev, sock), s + offsetof(dti_ev, sock), sizeof v - offsetof(dti_ev, sock));
    store_rel(&slot->stamp, uint16_t(index + 1));
}


class Publisher {
  public:
    Publisher(Table &table, Stats &stats, Control &control) : table_(table), stats_(stats), control_(control) {}

    // Entries of context c's event queue the app has not consumed. The
    // app's ev_cons is on its own cache line; the last value read is an
    // upper bound on what is used, so it is reread (and validated) only when
    // that bound leaves less than `want` entries free. A hostile value breaks
    // the region (then: evq_entries).
    uint32_t ev_used(Group &group, Ctx &c, uint32_t want)
    {
        uint32_t used = c.ev_prod - c.ev_cons_seen;
        return used + want <= group.lim.evq_entries ? used : ev_reread(group, c);
    }
    // A completion for context ci; false when nobody will read it (context
    // closed or draining, region broken).
    bool complete(Group &group, uint16_t ci, uint32_t tag, int32_t res, uint32_t sock, int64_t value = 0,
                  const uint32_t *accepted = nullptr);
    // A waiting command answered (a post that landed bytes: with their count).
    void finish_pending(Group &group, Pending &p, int32_t res, uint32_t sock);
    // Every command waiting on slot s answered with res (its last hold went).
    void cancel_pending(Group &group, Slot &s, int32_t res, uint32_t sock);
    // Event shielding: events for slot si's watchers, if it changed in a
    // way they asked about. Inline here, as publish(): the poll loop's table
    // pass runs them for every changed slot and group.
    [[gnu::always_inline]] inline void notify(Group &group, uint32_t si);
    inline void notify_error(Group &group, uint32_t si);
    // Stamps the group's new entries into the event queues; wakes sleepers.
    [[gnu::always_inline]] inline void publish(Group &group);

    // ---- wakeups and sleep ----
    std::span<const int> wakeups() const { return wake_fds_; }
    void clear_wakeups();
    void flush_wakeups();
    bool prepare_sleep();
    void end_sleep();
    std::vector<int> doorbell_fds() const;
    // The region broke: every open context's sleeper is woken to see it.
    void wake_all(Group &group);
    // Context ci closes / the group goes: no wakeup for it stays listed.
    void forget_ctx(Group &group, uint16_t ci);
    void forget_group(const Group &group);

  private:
    uint32_t ev_reread(Group &group, Ctx &c);
    void overrun(Group &group);
    void post_event(Group &group, uint16_t ci, uint32_t sock, uint32_t mask);
    void to_publish(Group &group, uint16_t ci)
    {
        if (!group.ctxs[ci].published) {
            group.ctxs[ci].published = true;
            group.to_publish.push_back(ci);
            table_.note_work();
        }
    }
    void list_wake(Group &group, uint16_t ci);
    void relist_wakes();

    Table &table_;
    Stats &stats_;
    Control &control_; // break_region(), when the app broke the queue's rules
    std::vector<int> wake_fds_;
    std::vector<std::pair<Group *, uint16_t>> wake_ctxs_;
    bool sleeping_ = false;
};

inline bool Publisher::complete(Group &group, uint16_t ci, uint32_t tag, int32_t res, uint32_t sock, int64_t value,
                                const uint32_t *accepted)
{
    if (ci >= group.ctxs.size() || !group.ctxs[ci].open || group.broken || group.ctxs[ci].draining)
        return false;
    Ctx &c = group.ctxs[ci];
    if (ev_used(group, c, 1) >= group.lim.evq_entries) {
        overrun(group); // only an app that ignored its credits gets here
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

inline void Publisher::finish_pending(Group &group, Pending &p, int32_t res, uint32_t sock)
{
    if (!p.used)
        return;
    p.used = false;
    // A post that already wrote bytes into the process answers with their
    // count whatever ended it: the application must learn where it stands.
    complete(group, p.ctx, p.tag, p.landed ? int32_t(p.landed) : res, sock);
}

// Event shielding: a watcher hears about a socket when a watched condition
// turns on, when new bytes or connections arrive (POLLIN), or when an armed
// POLLOUT holds; never for ACKs that change nothing it asked about.
inline void Publisher::notify(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    if (!s.holders || s.watchers == 0)
        return;
    uint32_t readable = s.rx_tail - s.rx_consumed;
    // (s.tx_size: set when the rings came and kept until the slot is free; a
    // socket without rings is not connected, so writable means nothing there.)
    uint32_t writable = s.tx_size - (s.tx_committed - s.tx_head);
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

// A datagram socket's new asynchronous error (server_impl.cc; dti_abi.h
// err_seq): news to every watcher at once (POLLERR with what else holds),
// also while an older one waits unread. Here, on the error's own rare path,
// so that notify() -- every event of every socket -- pays nothing for it.
inline void Publisher::notify_error(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    if (!s.holders || s.watchers == 0)
        return;
    const uint32_t mask = dti_events_of(s.state, s.error, s.rx_tail - s.rx_consumed,
                                        s.tx_size - (s.tx_committed - s.tx_head), s.embryos) | DTI_POLLERR;
    const uint32_t h = table_.handle(group, si);
    for (uint64_t w = s.watchers; w; w &= w - 1)
        post_event(group, uint16_t(__builtin_ctzll(w)), h, mask);
}

inline void Publisher::publish(Group &group)
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

} // namespace dti::engine::detail
