// The socket table the application reads (dti_sock_shared), refreshed from
// the transport; event shielding; the transport's events.
#include "engine_impl.h"

#include <cerrno>

namespace dti::engine::detail {
namespace {

void EngineImpl::mark(Group &group, uint32_t si)
{
    if (!group.slots[si].dirty) {
        group.slots[si].dirty = true;
        group.dirty.push_back(si);
        table_work_ = true;
    }
}

void EngineImpl::refresh(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    settle_rx(group, si);
    if (s.has_sid && s.rings_out && (s.state & DTI_STATE_CONNECTED)) {
        RingLevels l;
        tr_.ring_levels(s.sid, &l);
        if (l.rx_rc == 0 && l.readable <= s.rx_size)
            s.rx_tail = s.rx_consumed + l.readable;
        if (l.tx_rc == 0 && l.writable <= group.lim.tx_ring_size)
            s.tx_head = s.tx_committed - (group.lim.tx_ring_size - l.writable);
    }
    // Digest the bytes that just became readable before the app can see
    // (and release) them: the same engine pass that placed them in the ring.
    if (s.dg.rx.pending())
        digest_rx(group, si);
    if (s.dg.rx.pending() || s.dg.tx.pending())
        digest_ends(group, si);
    // The addresses change until the connection exists, never after: a
    // connected socket's are read once, not on every refresh.
    if (s.has_sid && !s.ends_final) {
        SockInfo info;
        if (tr_.info(s.sid, &info) == 0) {
            s.local = info.local;
            s.remote = info.remote;
            s.ends_final = (s.state & DTI_STATE_CONNECTED) != 0;
        }
    }
    if (s.recv_into.used)
        try_recv_into(group, si);
    if (s.post.used)
        try_post(group, si);
    if (s.accept.used && s.embryos > 0) {
        uint32_t got[DTI_ACCEPT_MAX] = {};
        int32_t n = accept_some(group, owner(group, s.accept.ctx), si, s.accept.arg, got);
        if (n > 0) {
            Pending p = s.accept;
            s.accept.used = false;
            complete(group, p.ctx, p.tag, n, handle(group, si), 0, got);
        }
    }
    if (s.holders)
        write_shared(group, si);
}

void EngineImpl::write_shared(Group &group, uint32_t si)
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

// Event shielding: a watcher hears about a socket when a watched condition
// turns on, when new bytes or connections arrive (POLLIN), or when an armed
// POLLOUT holds; never for ACKs that change nothing it asked about.
void EngineImpl::notify(Group &group, uint32_t si)
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
    uint32_t h = handle(group, si);
    for (uint64_t w = s.watchers; w; w &= w - 1)
        post_event(group, uint16_t(__builtin_ctzll(w)), h, mask);
}

void EngineImpl::transport_events(unsigned *work)
{
    TransportEvent evs[64];
    for (int rounds = 0; rounds < 64; rounds++) {
        uint16_t n = tr_.events(evs, 64);
        for (uint16_t i = 0; i < n; i++)
            on_event(evs[i]);
        *work += n;
        if (n < 64)
            break;
    }
}

void EngineImpl::on_event(const TransportEvent &e)
{
    Group *gp = group_of_tag(e.user);
    uint32_t si = uint32_t(e.user);
    if (!gp || si >= gp->slots.size())
        return;
    Group &group = *gp;
    Slot &s = group.slots[si];
    if (!s.has_sid || s.sid != e.sock) {
        // An unaccepted connection reporting through its listener's tag:
        // only "acceptable" matters; the embryo count already says how many.
        if (s.state & DTI_STATE_LISTENING)
            mark(group, si);
        return;
    }
    uint32_t h = handle(group, si);
    if (e.bits & (kEvReset | kEvError)) {
        SockInfo info;
        int err = tr_.info(s.sid, &info) == 0 && info.error ? info.error
                                                            : ((e.bits & kEvReset) ? ECONNRESET : ETIMEDOUT);
        if ((s.state & DTI_STATE_CONNECTING) && (e.bits & kEvReset))
            err = ECONNREFUSED;
        s.error = -err;
        s.state |= (e.bits & kEvReset) ? DTI_STATE_RESET : DTI_STATE_FAILED;
        s.state &= ~DTI_STATE_CONNECTING;
        finish_pending(group, s.connect, -err, h);
    }
    if (e.bits & kEvConnected) {
        s.state = (s.state & ~DTI_STATE_CONNECTING) | DTI_STATE_CONNECTED | DTI_STATE_BOUND;
        RingSpan tv, rv;
        if (tr_.tx_view(s.sid, &tv) == 0 && tv.p[0])
            s.tx_base = uint32_t(tv.p[0] - group.tx_ring(si)) & (group.lim.tx_ring_size - 1);
        if (tr_.rx_view(s.sid, &rv) == 0 && rv.p[0])
            s.rx_base = uint32_t(rv.p[0] - group.rx_ring(si)) & (s.rx_size - 1);
        finish_pending(group, s.connect, 0, h);
    }
    if (e.bits & kEvPeerClosed)
        s.state |= DTI_STATE_RD_CLOSED;
    if (e.bits & kEvClosed) {
        s.has_sid = false;
        mark(group, si);
        maybe_free(group, si);
        return;
    }
    mark(group, si);
}

} // namespace
} // namespace dti::engine::detail
