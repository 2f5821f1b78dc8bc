// table.h: the region and socket table. Table owns the engine's groups
// (regions) and members (attached processes) by id, allocates them, and
// keeps each region's memory and socket table:
//   region.cc        the region's layout and the ring memory the transport
//                    borrows for each socket (provide, reclaim, grow_rx)
//   socket_table.cc  groups and members by id, and the socket table the
//                    application reads (dti_sock_shared)
// The per-command helpers (mark, settle_rx, consume_rx, write_shared,
// lookups) are inline here: the command path in another translation unit
// calls them for every command.
#pragma once

#include "state.h"

#include <memory>
#include <string>
#include <vector>

namespace dti::engine::detail {

class Table {
  public:
    Table(Transport &t, const Limits &l, Stats &s) : tr_(t), lim_(l), stats_(s) {}

    // ---- groups and members by id (socket_table.cc) ----
    std::vector<std::unique_ptr<Group>> &groups() { return groups_; }
    const std::vector<std::unique_ptr<Group>> &groups() const { return groups_; }
    std::vector<std::unique_ptr<Member>> &members() { return members_; }
    const std::vector<std::unique_ptr<Member>> &members() const { return members_; }
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
    // The transport's user word of slot si: epoch, group id and slot.
    static uint64_t tag_of(const Group &group, uint32_t slot)
    {
        return uint64_t{group.epoch} << 48 | uint64_t(uint32_t(group.id)) << 32 | slot;
    }
    Group *group_of_tag(uint64_t user) const
    {
        Group *group = get(int((user >> 32) & 0xffff));
        return group && group->epoch == uint16_t(user >> 48) ? group : nullptr;
    }
    static uint32_t handle(const Group &group, uint32_t si) { return group.slots[si].gen << DTI_SLOT_BITS | si; }
    // The slot of a handle member m holds: a process may use only the
    // sockets it created, accepted or inherited (and has not closed).
    static Slot *slot_of(Group &group, const Member &m, uint32_t h, uint32_t *index)
    {
        uint32_t si = h & DTI_SLOT_MASK, gen = h >> DTI_SLOT_BITS;
        if (si >= group.slots.size() || gen == 0 || group.slots[si].gen != gen || !group.slots[si].holders ||
            !m.holds[si])
            return nullptr;
        *index = si;
        return &group.slots[si];
    }
    // A new group (region) with the engine's limits, not yet mapped; null
    // with *why and *err when the limits forbid it.
    Group *new_group(std::string *why, int *err);
    // A process of `group`; counts against max_attachments (one connection each).
    Member *new_member(Group &group, int fd, std::string *why, int *err);
    void release_id(Group &group) { groups_[size_t(group.id)].reset(); }

    // ---- the region (region.cc) ----
    void init_region(Group &group);
    bool provide(uint64_t user, RingMemory *out);
    void reclaim(uint64_t user, const RingMemory &mem);
    bool grow_rx(uint64_t user, RingMemory *mem, uint32_t want);
    // Send-buffer autotuning (Server::want_tx): ignored once SO_SNDBUF was set.
    void want_tx(uint64_t user, const RingMemory &mem, uint32_t want);
    // Publishes the power of two holding `want` (within the reserve) as the
    // send ring's wanted size when it is larger than the ring and than what
    // was published before (dti_sock_shared.tx_want).
    void want_tx_size(Group &group, uint32_t si, uint32_t want);
    // A grown ring's rx_base, found again before anything reads the ring.
    void settle_rx(Group &group, uint32_t si)
    {
        if (group.slots[si].rx_rebase)
            rebase_rx(group, si);
    }
    // Bytes the app took go back to the transport, which may grow the ring
    // right then (its autotuning runs at releases): the base is found again
    // at once, while the transport still holds the rings.
    void consume_rx(Group &group, uint32_t si, uint32_t n)
    {
        Slot &s = group.slots[si];
        if (s.has_sid)
            tr_.rx_consume(s.sid, n);
        s.rx_consumed += n;
        settle_rx(group, si);
    }
    // Slot si back on the free list once nothing refers to it.
    void maybe_free(Group &group, uint32_t si);

    // ---- the socket table (socket_table.cc) ----
    // Slot si changed: the next table pass refreshes it and notifies. Always
    // inline: a slot is marked several times per transaction, and most marks
    // find it marked already (three instructions); as a call, the vector's
    // growth path made it cost about 25 each.
    [[gnu::always_inline]] void mark(Group &group, uint32_t si)
    {
        if (!group.slots[si].dirty) {
            group.slots[si].dirty = true;
            group.dirty.push_back(si);
            work_ = true;
        }
    }
    // The slot's state into the table the application reads.
    void write_shared(Group &group, uint32_t si);
    // Whether the table and publish pass has work (mark(), or an entry to
    // publish: note_work()); taking it clears it.
    void note_work() { work_ = true; }
    bool take_work()
    {
        if (!work_)
            return false; // an idle poll only reads the flag
        work_ = false;
        return true;
    }

  private:
    void rebase_rx(Group &group, uint32_t si);
    Slot *ring_owner(Group &group, const uint8_t *rx);
    void release_growth(Group &group, uint32_t si);
    uint32_t size_tx(Group &group, uint32_t sndbuf);

    Transport &tr_;
    const Limits &lim_;
    Stats &stats_;
    std::vector<std::unique_ptr<Group>> groups_;   // groups (regions), by internal id
    std::vector<std::unique_ptr<Member>> members_; // by public id
    uint16_t next_epoch_ = 1;
    bool work_ = false;
};

inline void Table::write_shared(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    dti_sock_shared &sh = group.socks[si];
    settle_rx(group, si);
    store_rlx(&sh.local_ip, s.local.ip);
    store_rlx(&sh.local_port, s.local.port);
    store_rlx(&sh.remote_ip, s.remote.ip);
    store_rlx(&sh.remote_port, s.remote.port);
    // Size and base before the tail (release): bytes at a grown ring's new
    // size are published only with them.
    store_rlx(&sh.rx_size, s.rx_size);
    store_rlx(&sh.rx_base, s.rx_base);
    store_rlx(&sh.tx_base, s.tx_base);
    store_rlx(&sh.error, s.error);
    store_rlx(&sh.accept_ready, s.embryos);
    store_rel(&sh.rx_tail, s.rx_tail);
    store_rel(&sh.tx_head, s.tx_head);
    store_rel(&sh.state, s.state);
    store_rel(&sh.seq, __atomic_load_n(&sh.seq, __ATOMIC_RELAXED) + 1);
}

} // namespace dti::engine::detail
