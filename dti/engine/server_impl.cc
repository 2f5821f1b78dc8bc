// dti/engine/server_impl.cc: the engine side of the DTI: serves application regions over a Transport.
// The engine's modules are the ones server_impl.h lists; here: the poll
// loop that drives them, the transport's events, and Server::create.
#include "server_impl.h"

namespace dti::engine::detail {

unsigned ServerImpl::poll()
{
    stats_.polls++;
    unsigned work = 0;
    auto &groups = table_.groups();
    for (size_t i = 0; i < groups.size(); i++) {
        Group *group = groups[i].get();
        if (group && group->dying) {
            control_.maybe_finish(*group);
            continue;
        }
        if (!group || group->broken)
            continue;
        for (size_t k = 0; k < group->live_ctxs.size() && !group->broken; k++) {
            const uint16_t ci = group->live_ctxs[k];
            if (cmds_.command_waiting(*group, group->ctxs[ci])) // else process_ctx() would find nothing
                cmds_.process_ctx(*group, ci, &work);
        }
    }
    // The transport's events: asked here, so that an idle poll (none) makes
    // no call and sets up no frame for the loop over them.
    TransportEvent evs[64];
    if (const uint16_t n = tr_.events(evs, 64))
        transport_events(evs, n, &work);
    // Nothing marked dirty and nothing to publish since the last pass: the
    // pass below would find every list empty.
    if (!table_.take_work())
        return work;
    for (size_t i = 0; i < groups.size(); i++) {
        Group *group = groups[i].get();
        if (!group || !group->base) {
            if (group && (!group->dirty.empty() || !group->to_publish.empty()))
                table_.note_work(); // kept for a later pass, as before
            continue;
        }
        for (size_t k = 0; k < group->dirty.size(); k++) {
            uint32_t si = group->dirty[k];
            group->slots[si].dirty = false;
            if (!group->broken && !group->dying) {
                cmds_.refresh(*group, si);
                pub_.notify(*group, si);
            }
        }
        group->dirty.clear();
        if (!group->broken && !group->dying)
            pub_.publish(*group);
    }
    return work;
}

// The n > 0 events in evs (64 of room), then more while the transport has
// them (a full batch: ask again, at most 64 rounds per poll).
void ServerImpl::transport_events(TransportEvent *evs, uint16_t n, unsigned *work)
{
    for (int rounds = 1;; rounds++) {
        for (uint16_t i = 0; i < n; i++)
            on_event(evs[i]);
        *work += n;
        if (n < 64 || rounds == 64)
            break;
        n = tr_.events(evs, 64);
    }
}

void ServerImpl::on_event(const TransportEvent &e)
{
    Group *gp = table_.group_of_tag(e.user);
    uint32_t si = uint32_t(e.user);
    if (!gp || si >= gp->slots.size())
        return;
    Group &group = *gp;
    Slot &s = group.slots[si];
    if (!s.has_sid || s.sid != e.sock) {
        // An unaccepted connection reporting through its listener's tag:
        // only "acceptable" matters; the embryo count already says how many.
        if (s.state & DTI_STATE_LISTENING)
            table_.mark(group, si);
        return;
    }
    if (cmds_.trace.state == Trace::kWantEvent && (e.bits & kEvReadable)) {
        cmds_.trace.sock = e.sock; // latency sampling: this socket's event is published at the end of this poll
        cmds_.trace.state = Trace::kEventSeen;
        if (++cmds_.trace.token == 0) cmds_.trace.token = 1; // the program stamps its read (dti_abi.h)
        __atomic_store_n(&group.socks[si].trace, cmds_.trace.token, __ATOMIC_RELAXED);
    }
    uint32_t h = table_.handle(group, si);
    if (e.bits & (kEvReset | kEvError)) {
        SockInfo info;
        if (s.dgram) {
            // An ICMP error about a datagram it sent: pending until a reader
            // reports it (dti_abi.h err_seq), the socket as usable as before.
            if (tr_.dgram_info(s.sid, &info) == 0 && info.errors && info.error > 0) {
                store_rlx(&group.socks[si].err_last, -info.error);
                store_rel(&group.socks[si].err_seq, info.errors);
                pub_.notify_error(group, si); // news to its watchers, POLLERR (publisher.h)
            }
        } else {
            const int r = tr_.info(s.sid, &info);
            int err = r == 0 && info.error ? info.error : ((e.bits & kEvReset) ? ECONNRESET : ETIMEDOUT);
            if ((s.state & DTI_STATE_CONNECTING) && (e.bits & kEvReset))
                err = ECONNREFUSED;
            s.error = -err;
            s.state |= (e.bits & kEvReset) ? DTI_STATE_RESET : DTI_STATE_FAILED;
            s.state &= ~DTI_STATE_CONNECTING;
            pub_.finish_pending(group, s.connect, -err, h);
        }
    }
    if (e.bits & kEvConnected) {
        s.state = (s.state & ~DTI_STATE_CONNECTING) | DTI_STATE_CONNECTED | DTI_STATE_BOUND;
        RingSpan tv, rv;
        if (tr_.tx_view(s.sid, &tv) == 0 && tv.p[0])
            s.tx_base = uint32_t(tv.p[0] - group.tx_ring(si)) & (group.tx_size(si) - 1);
        if (tr_.rx_view(s.sid, &rv) == 0 && rv.p[0])
            s.rx_base = uint32_t(rv.p[0] - group.rx_ring(si)) & (s.rx_size - 1);
        pub_.finish_pending(group, s.connect, 0, h);
    }
    if (e.bits & kEvPeerClosed)
        s.state |= DTI_STATE_RD_CLOSED;
    if (e.bits & kEvClosed) {
        s.has_sid = false;
        table_.mark(group, si);
        table_.maybe_free(group, si);
        return;
    }
    table_.mark(group, si);
}

} // namespace dti::engine::detail

namespace dti::engine {

std::unique_ptr<Server> Server::create(Transport &transport, const Limits &limits, std::string *error)
{
    detail::Geometry g;
    if (!detail::geometry(limits, &g)) {
        if (error)
            *error = "unusable DTI limits: each queue and ring size must be a power of two, "
                     "evq_entries >= 2 * cmdq_entries, 1..64 contexts, 1..1048575 sockets";
        return nullptr;
    }
    if (limits.commands_per_poll == 0) {
        if (error)
            *error = "commands_per_poll must be positive";
        return nullptr;
    }
    return std::make_unique<detail::ServerImpl>(transport, limits);
}

} // namespace dti::engine
