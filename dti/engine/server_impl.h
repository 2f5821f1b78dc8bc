// server_impl.h: the engine's composition root (not installed; eta-ppe sees
// only <dti/engine.h>). ServerImpl serves every region of one engine
// thread: it owns the modules and the state they share (the transport, the
// limits, the statistics), forwards Server's calls to them, and runs the
// poll loop (server_impl.cc):
//   table.h      the region and socket table (Table)
//   publisher.h  completions, events, wakes (Publisher)
//   commands.h   the command path: decoder, commands, posted reads (Commands)
//   control.h    the control plane: attach, groups, pass (Control)
// The modules call each other directly (plain member functions, no virtual
// calls); what runs for every command is inline in their headers.
#pragma once

#include <dti/engine.h>

#include "commands.h"
#include "control.h"
#include "publisher.h"
#include "state.h"
#include "table.h"

#include <span>
#include <string>
#include <vector>

namespace dti::engine::detail {

class ServerImpl final : public Server {
  public:
    ServerImpl(Transport &t, const Limits &l)
        : tr_(t), lim_(l), table_(tr_, lim_, stats_), pub_(table_, stats_, control_),
          cmds_(tr_, lim_, stats_, table_, pub_, control_), control_(tr_, lim_, stats_, table_, pub_, cmds_)
    {
    }
    ~ServerImpl() override
    {
        for (auto &group : table_.groups())
            if (group)
                control_.finalize(*group);
    }

    int attach(int fd, std::string *why) override { return control_.attach(fd, why); }
    void control(int id) override { control_.control(id); }
    void detach(int id) override { control_.detach(id); }
    void shutdown() override { control_.shutdown(); }
    int control_fd(int id) const override
    {
        const Member *m = table_.member(id);
        return m ? m->fd : -1;
    }
    int doorbell_fd(int id) const override
    {
        const Member *m = table_.member(id);
        return m ? table_.group_of(*m).doorbell : -1;
    }
    std::vector<int> take_joined() override { return control_.take_joined(); }
    std::vector<AttachmentInfo> attachments() const override { return control_.attachments(); }
    unsigned poll() override;
    std::span<const int> wakeups() const override { return pub_.wakeups(); }
    void clear_wakeups() override { pub_.clear_wakeups(); }
    void flush_wakeups() override { pub_.flush_wakeups(); }
    bool prepare_sleep() override { return pub_.prepare_sleep(); }
    void end_sleep() override { pub_.end_sleep(); }
    std::vector<int> doorbell_fds() const override { return pub_.doorbell_fds(); }
    bool provide(uint64_t user, RingMemory *out) override { return table_.provide(user, out); }
    void reclaim(uint64_t user, const RingMemory &mem) override { table_.reclaim(user, mem); }
    bool grow_rx(uint64_t user, RingMemory *mem, uint32_t want) override { return table_.grow_rx(user, mem, want); }
    void want_tx(uint64_t user, const RingMemory &mem, uint32_t want) override { table_.want_tx(user, mem, want); }
    const Stats &stats() const override { return stats_; }
    Trace &trace() override { return cmds_.trace; }
    int attach_memory(void *region, uint64_t size, uint32_t contexts) override
    {
        return control_.attach_memory(region, size, contexts);
    }

  private:
    // The transport's events: socket state, connects finished (server_impl.cc).
    void transport_events(TransportEvent *evs, uint16_t n, unsigned *work);
    [[gnu::always_inline]] inline void on_event(const TransportEvent &e); // only from transport_events()

    Transport &tr_;
    const Limits lim_;
    Stats stats_;
    Table table_;
    Publisher pub_;
    Commands cmds_;
    Control control_;
};

} // namespace dti::engine::detail
