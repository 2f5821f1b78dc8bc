// The command path (commands.h): commands taken from each context's queue
// (dti/QUEUES.md), copied once, checked by the decoder (decoder.h), then
// executed against the transport; payload digests; the refresh that
// resumes waiting commands.
#include "commands.h"
#include "control.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dti::engine::detail {

// Copies a command with word-sized relaxed atomic loads: the application may
// be scribbling on it concurrently; we read each word exactly once.
static dti_cmd read_cmd(const dti_cmd *src)
{
    uint64_t w[sizeof(dti_cmd) / 8];
    const uint64_t *s = reinterpret_cast<const uint64_t *>(src);
#pragma GCC unroll 8 // one load and store per word: the loop's own counting was half the cost
    for (size_t i = 0; i < sizeof w / 8; i++)
        w[i] = __atomic_load_n(s + i, __ATOMIC_RELAXED);
    dti_cmd c;
    std::memcpy(&c, w, sizeof c);
    return c;
}

// The command queue's consumer: the protocol (stamps, indices, room in the
// event queue, what a hostile application can and cannot do) is
// dti/QUEUES.md; this loop and command_waiting() (commands.h) are its
// engine side.
void Commands::process_ctx(Group &group, uint16_t ci, unsigned *work)
{
    Ctx &c = group.ctxs[ci];
    uint32_t mask = group.lim.cmdq_entries - 1;
    uint32_t done = 0;
    // A command is there when its slot carries the stamp cmd_cons + 1: the
    // engine reads one cache line per command, never the app's producer
    // index. A wrong stamp just means "nothing yet": only that app waits.
    for (; done < group.lim.commands_per_poll && !group.broken; done++) {
        const dti_cmd *slot = &c.cmds[c.cmd_cons & mask];
        if (load_acq(&slot->stamp) != c.cmd_cons + 1)
            break;
        // Room for the completion is guaranteed by credits for an honest app;
        // if the app broke that rule, stop here (it reaps, we continue).
        uint32_t used = c.draining ? 0 : pub_.ev_used(group, c, 1);
        if (group.broken || used >= group.lim.evq_entries)
            break;
        dti_cmd cmd = read_cmd(slot);
        c.cmd_cons++;
        stats_.commands++;
        execute(group, ci, cmd);
    }
    if (done > 0 && !group.broken)
        store_rel(&c.qp->cmd_cons, c.cmd_cons);
    *work += done;
}

// Runs one command copied out of a queue. The decoder has checked what needs
// no state (decoder.h); here the handle is checked against the issuing
// member's holds, then the command acts on its socket. A command the decoder
// refused is answered only after that check: an application sees the handle
// judged first, then the arguments, as always.
void Commands::execute(Group &group, uint16_t ctx_index, const dti_cmd &raw)
{
    const Decoded decoded = decode_command(raw, bounds_of(group));
    const Command &cmd = decoded.cmd;
    if (decoded.reject == Reject::kBadTag) {
        stats_.rejected_commands++;
        return; // no valid tag to answer with: the app's own bookkeeping is corrupt
    }
    if (cmd.op == DTI_OP_NOP) {
        pub_.complete(group, ctx_index, cmd.tag, 0, cmd.handle);
        return;
    }
    Member &member = table_.owner(group, ctx_index);
    if (cmd.op == DTI_OP_SOCKET) {
        int32_t result = cmd_socket(group, member, cmd.count);
        pub_.complete(group, ctx_index, cmd.tag, result, result >= 0 ? uint32_t(result) : cmd.handle);
        return;
    }
    const uint32_t slot_index = cmd.slot;
    Slot *slot = decoded.reject == Reject::kBadSocket ? nullptr : held_slot(group, member, cmd);
    if (!slot) {
        stats_.rejected_commands++;
        if (cmd.signaled)
            pub_.complete(group, ctx_index, cmd.tag, -DTI_E_BAD_HANDLE, cmd.handle);
        return;
    }
    if (!decoded.ok()) {
        refuse_command(group, ctx_index, slot_index, decoded);
        return;
    }
    if (__builtin_expect(!op_fits(*slot, cmd.op), 0)) {
        // A stream command on a datagram socket or the reverse (udp.cc).
        stats_.rejected_commands++;
        if (cmd.signaled)
            pub_.complete(group, ctx_index, cmd.tag, -EOPNOTSUPP, cmd.handle);
        return;
    }
    int32_t result = 0;
    switch (cmd.op) {
    case DTI_OP_BIND:
    case DTI_OP_BIND6:
        result = cmd_bind(group, member, slot_index, cmd);
        break;
    case DTI_OP_LISTEN:
        result = tr_.listen(slot->sid, int(cmd.count));
        if (result == 0)
            slot->state = (slot->state | DTI_STATE_LISTENING) & ~DTI_STATE_CONNECTING;
        break;
    case DTI_OP_ACCEPT:
        cmd_accept(group, ctx_index, slot_index, cmd);
        return;
    case DTI_OP_CONNECT6:
        if (slot->dgram) {
            result = cmd_dgram_connect(group, slot_index, cmd);
            break;
        }
        [[fallthrough]];
    case DTI_OP_CONNECT:
        if (cmd_connect(group, ctx_index, slot_index, cmd, &result))
            return; // completes on kEvConnected / kEvError / kEvReset
        break;
    case DTI_OP_SHUTDOWN:
        if (!(slot->state & DTI_STATE_CONNECTED)) {
            result = -ENOTCONN;
        } else {
            if (cmd.shut_wr)
                take_unsent(group, slot_index);
            result = slot->has_sid ? tr_.shutdown(slot->sid, cmd.shut_rd, cmd.shut_wr) : 0;
            if (result == 0 && cmd.shut_wr)
                slot->state |= DTI_STATE_WR_CLOSED;
        }
        break;
    case DTI_OP_CLOSE:
    case DTI_OP_ABORT:
        if (cmd.op == DTI_OP_CLOSE)
            take_unsent(group, slot_index);
        control_.drop_hold(group, member, slot_index, cmd.op == DTI_OP_ABORT);
        break;
    case DTI_OP_SETSOCKOPT:
    case DTI_OP_GETSOCKOPT: {
        int64_t v = 0;
        if (cmd.ring_option) {
            // SO_RCVBUF set fixes the receive buffer the transport offers (no
            // autotuning, as on Linux), clamped to what a ring of the slot
            // can hold (as Linux clamps to rmem_max); a buffer larger than
            // the ring grows it (Server::grow_rx, asked for by the transport
            // now if the ring is empty or not yet there, else once the app
            // has drained it). Reading tells the ring's size now.
            // Before the ring exists (before connect, a listener) reading
            // tells the size set, 0 if none: libdti carries it to a
            // listener's siblings on other engines and to a socket it moves.
            if (cmd.op == DTI_OP_SETSOCKOPT && cmd.option == DTI_SO_RCVBUF && slot->has_sid) {
                slot->rcvbuf_set = uint32_t(std::clamp<int64_t>(cmd.value, 4096, group.geo.rx_reserve));
                (void)(slot->dgram ? tr_.dgram_set_option(slot->sid, Option::kRcvBuf, slot->rcvbuf_set)
                                   : tr_.set_option(slot->sid, Option::kRcvBuf, slot->rcvbuf_set));
                table_.settle_rx(group, slot_index); // grown: the base for the new size, before the app reads
                table_.mark(group, slot_index);
            }
            // SO_SNDBUF set is the size Linux keeps (twice the value, clamped:
            // libdti's caller asks the kernel); it sizes the send ring when the
            // rings come (provide: before connect, or on a listener for its
            // connections), and stops send-buffer autotuning. On a socket that
            // has its rings, a larger size is published for the writer, which
            // grows the ring at its next write (dti/README.md "Send rings that
            // grow"); a smaller one leaves the ring as it is (it never shrinks).
            if (cmd.op == DTI_OP_SETSOCKOPT && cmd.option == DTI_SO_SNDBUF) {
                slot->sndbuf_set = uint32_t(std::clamp<int64_t>(cmd.value, 4096, group.geo.tx_reserve));
                if (slot->rings_out && !slot->dgram)
                    table_.want_tx_size(group, slot_index, slot->sndbuf_set);
                table_.mark(group, slot_index);
            }
            if (cmd.option == DTI_SO_RCVBUF)
                v = slot->rx_size ? slot->rx_size : slot->rcvbuf_set;
            else
                v = slot->sndbuf_set ? slot->sndbuf_set : slot->tx_size;
        } else if (cmd.op == DTI_OP_SETSOCKOPT) {
            result = slot->dgram ? tr_.dgram_set_option(slot->sid, cmd.transport_option, cmd.value)
                                 : tr_.set_option(slot->sid, cmd.transport_option, cmd.value);
            // TCP_NOTSENT_LOWAT changes what the app may write: publish the
            // send side again (tx_head, POLLOUT) now, not at the next ACK.
            if (result == 0 && cmd.option == DTI_SO_NOTSENT_LOWAT) table_.mark(group, slot_index);
        } else {
            result = slot->dgram ? tr_.dgram_get_option(slot->sid, cmd.transport_option, &v)
                                 : tr_.get_option(slot->sid, cmd.transport_option, &v);
        }
        pub_.complete(group, ctx_index, cmd.tag, result, cmd.handle, v);
        return;
    }
    case DTI_OP_WATCH:
        cmd_watch(group, ctx_index, slot_index, cmd.flags);
        break;
    case DTI_OP_RECV_POST:
        cmd_post(group, ctx_index, slot_index, cmd);
        return;
    case DTI_OP_RECV_CANCEL:
        cmd_cancel_post(group, slot_index);
        return;
    case DTI_OP_RECV_INTO:
        if (slot->recv_into.used || slot->post.used) {
            result = -EBUSY;
        } else {
            slot->recv_into = Pending{true, ctx_index, cmd.tag, cmd.length, cmd.offset};
            try_recv_into(group, slot_index);
            return;
        }
        break;
    case DTI_OP_SEND_FROM:
        take_unsent(group, slot_index);
        result = cmd_send_from(group, slot_index, cmd);
        break;
    case DTI_OP_SEND:
        cmd_send(group, slot_index, cmd, raw);
        return;
    case DTI_OP_TX_GROW:
        cmd_tx_grow(group, slot_index, cmd);
        return;
    case DTI_OP_RECV_RELEASE:
        if (slot->dgram)
            dgram_release(group, slot_index, cmd);
        else
            cmd_release(group, slot_index, cmd);
        return;
    case DTI_OP_SEND_DGRAMS:
        result = cmd_send_dgrams(group, slot_index, cmd);
        break;
    case DTI_OP_DGRAM_CONNECT:
        result = cmd_dgram_connect(group, slot_index, cmd);
        break;
    case DTI_OP_MCAST:
    case DTI_OP_MCAST6:
        result = cmd_mcast(group, slot_index, cmd);
        break;
    case DTI_OP_DIGEST:
        if (cmd.flags & DTI_DIGEST_TX)
            take_unsent(group, slot_index);
        cmd_digest(group, ctx_index, slot_index, cmd);
        return;
    default: // the decoder lets no other opcode through
        stats_.rejected_commands++;
        result = -EOPNOTSUPP;
        break;
    }
    table_.mark(group, slot_index);
    pub_.complete(group, ctx_index, cmd.tag, result, cmd.handle);
}

// A command the decoder refused, from a member that holds its socket: the
// answer each command got when its own case checked its arguments.
void Commands::refuse_command(Group &group, uint16_t ctx_index, uint32_t slot_index, const Decoded &d)
{
    const Command &cmd = d.cmd;
    switch (cmd.op) {
    case DTI_OP_SEND:
    case DTI_OP_RECV_RELEASE:
    case DTI_OP_RECV_CANCEL:
    case DTI_OP_TX_GROW:
        stats_.rejected_commands++;
        return; // not signaled: the app lied about a length; drop it
    case DTI_OP_SETSOCKOPT:
    case DTI_OP_GETSOCKOPT:
    case DTI_OP_ACCEPT:
    case DTI_OP_DIGEST:
        pub_.complete(group, ctx_index, cmd.tag, reject_result(d.reject), cmd.handle);
        return; // nothing changed on the socket
    default:
        if (d.reject == Reject::kUnknownOp || d.reject == Reject::kBadAddress6) // (hostile, not a mistake)
            stats_.rejected_commands++;
        table_.mark(group, slot_index);
        pub_.complete(group, ctx_index, cmd.tag, reject_result(d.reject), cmd.handle);
        return;
    }
}

int32_t Commands::cmd_socket(Group &group, Member &m, uint32_t kind)
{
    if (kind != DTI_SOCK_STREAM && kind != DTI_SOCK_DGRAM)
        return -EPROTONOSUPPORT;
    if (group.free_slots.empty())
        return -EMFILE;
    uint32_t si = group.free_slots.back();
    Slot &s = group.slots[si];
    // A datagram socket takes its rings now (provide(), inside dgram_open):
    // the slot must be a live holder's by then, so it is set up first.
    const bool dgram = kind == DTI_SOCK_DGRAM;
    if (dgram) {
        group.free_slots.pop_back();
        const uint32_t gen = s.gen % DTI_GEN_MAX + 1;
        s = Slot{};
        s.gen = gen;
        s.in_free_list = false;
        s.holders = 1; // provisional: provide() gives rings only to a held slot
        int64_t sid = tr_.dgram_open(table_.tag_of(group, si));
        s.holders = 0;
        if (sid < 0) {
            s.in_free_list = true;
            group.free_slots.push_back(si);
            return int32_t(sid);
        }
        s.has_sid = true;
        s.sid = SockId(sid);
        s.dgram = true;
        s.ends_final = true; // local and remote are read at bind, connect and send (dgram_ends)
        s.state = DTI_STATE_DGRAM;
        stats_.dgram_sockets++;
        reset_written(group, si);
        control_.take_hold(group, m, si);
        table_.write_shared(group, si);
        store_rel(&group.socks[si].gen, gen);
        return int32_t(table_.handle(group, si));
    }
    int64_t sid = tr_.open(table_.tag_of(group, si));
    if (sid < 0)
        return int32_t(sid);
    group.free_slots.pop_back();
    uint32_t gen = s.gen % DTI_GEN_MAX + 1;
    s = Slot{};
    s.gen = gen;
    s.in_free_list = false;
    s.has_sid = true;
    s.sid = SockId(sid);
    reset_written(group, si);
    control_.take_hold(group, m, si);
    table_.write_shared(group, si);
    store_rel(&group.socks[si].gen, gen);
    return int32_t(table_.handle(group, si));
}

void Commands::cmd_accept(Group &group, uint16_t ci, uint32_t ls, const Command &c)
{
    Slot &l = group.slots[ls];
    uint32_t max = c.count; // 1..DTI_ACCEPT_MAX (decoder)
    if (!(l.state & DTI_STATE_LISTENING)) {
        pub_.complete(group, ci, c.tag, -EINVAL, c.handle);
        return;
    }
    if (l.accept.used) {
        pub_.complete(group, ci, c.tag, -EBUSY, c.handle);
        return;
    }
    uint32_t got[DTI_ACCEPT_MAX] = {};
    int32_t n = accept_some(group, table_.owner(group, ci), ls, max, got);
    if (n > 0 || !(c.flags & DTI_ACCEPT_WAIT)) {
        pub_.complete(group, ci, c.tag, n > 0 ? n : -EAGAIN, c.handle, 0, got);
        return;
    }
    l.accept = Pending{true, ci, c.tag, max, 0};
}

// Takes up to max connections from the transport and turns their embryo slots
// into sockets the accepting member holds (a listener shared by several
// processes hands each connection to the one that accepted it).
int32_t Commands::accept_some(Group &group, Member &m, uint32_t ls, uint32_t max, uint32_t *out)
{
    int32_t n = 0;
    while (uint32_t(n) < max) {
        int64_t sid = tr_.accept(group.slots[ls].sid, table_.tag_of(group, ls));
        if (sid < 0)
            break;
        // Which embryo is it? Found by its receive ring: rx_view() points p[0]
        // at the read position even when nothing is readable (the Transport
        // contract) and answers for a connection that was reset or failed
        // before this accept (MARS keeps such a child queued with its error,
        // and its rings, as Linux does), where tx_view() refuses it. The
        // ring memory came from provide(), so the position lies inside one
        // slot's receive ring: the slot is its offset over the data stride.
        // (The transport's own id-to-user map would name the listener, not
        // the embryo; a new Transport call is not needed for this.)
        RingSpan tv{}, rv{};
        uint32_t ri = UINT32_MAX;
        if (tr_.rx_view(SockId(sid), &rv) == 0 && rv.p[0]) {
            const uint8_t *data = group.base + group.geo.data_offset;
            if (rv.p[0] >= data) {
                const uint64_t off = uint64_t(rv.p[0] - data);
                const uint64_t idx = off / group.geo.data_stride;
                if (idx < group.slots.size() && off % group.geo.data_stride < group.slots[idx].rx_size &&
                    group.slots[idx].embryo && group.slots[idx].parent == ls && group.slots[idx].rings_out)
                    ri = uint32_t(idx);
            }
        }
        if (ri == UINT32_MAX) {
            tr_.abort(SockId(sid)); // the transport broke its contract; drop the connection
            continue;
        }
        // The send ring's write position: a live connection's tx_view();
        // a reset one takes no data (tx_view() refuses it), so 0.
        uint32_t tx_base = 0;
        if (tr_.tx_view(SockId(sid), &tv) == 0 && tv.p[0] >= group.tx_ring(ri) &&
            tv.p[0] < group.tx_ring(ri) + group.tx_size(ri))
            tx_base = uint32_t(tv.p[0] - group.tx_ring(ri));
        Slot &s = group.slots[ri];
        Slot &l = group.slots[ls];
        if (l.embryos > 0)
            l.embryos--;
        s.embryo = false;
        s.has_sid = true;
        s.sid = SockId(sid);
        s.gen = s.gen % DTI_GEN_MAX + 1;
        s.state = DTI_STATE_CONNECTED | DTI_STATE_BOUND;
        s.tx_base = tx_base;
        s.rx_base = uint32_t(rv.p[0] - group.rx_ring(ri)) & (s.rx_size - 1);
        s.rx_consumed = 0;
        s.rx_tail = rv.total();
        s.tx_committed = 0;
        s.tx_head = 0;
        reset_written(group, ri);
        control_.take_hold(group, m, ri);
        tr_.set_user(SockId(sid), table_.tag_of(group, ri));
        SockInfo info;
        if (tr_.info(SockId(sid), &info) == 0) {
            take_ends(group, ri, info);
            s.ends_final = true;
            if (info.peer_closed)
                s.state |= DTI_STATE_RD_CLOSED;
            if (info.error > 0) {
                // Reset (or failed) before the accept: the program gets the
                // socket in that state, as from Linux: what arrived before
                // the reset is readable first, then the error (ECONNRESET),
                // and poll() says POLLERR|POLLHUP. The transport's
                // kEvReset that follows the accept says the same again.
                s.error = -info.error;
                s.state |= info.error == ECONNRESET ? DTI_STATE_RESET : DTI_STATE_FAILED;
            }
        }
        table_.write_shared(group, ri);
        store_rel(&group.socks[ri].gen, s.gen);
        out[n++] = table_.handle(group, ri);
        table_.mark(group, ri);
    }
    table_.mark(group, ls);
    return n;
}

// SEND of c.length > 0 bytes (decoder) the app wrote into the send ring.
// SEND: commits the send ring's bytes up to a stream position (dti_abi.h):
// with DTI_SEND_TAIL the app's tx_written (every byte written so far: one
// SEND per burst), with DTI_SEND_END the command's own end, else arg0 more.
// Bytes an earlier SEND already took are not taken twice.
void Commands::cmd_send(Group &group, uint32_t si, const Command &c, const dti_cmd &raw)
{
    Slot &s = group.slots[si];
    uint32_t end = s.tx_committed + c.length;
    if (c.flags & DTI_SEND_TAIL)
        end = take_written(group, si);
    else if (c.flags & DTI_SEND_END)
        end = uint32_t(c.offset);
    const bool traced = trace.state == Trace::kWantCommand;
    if (!commit_to(group, si, end, (c.flags & DTI_SEND_MORE) && !(c.flags & DTI_SEND_TAIL)))
        stats_.rejected_commands++; // not sendable or more than was free: the app lied; drop it
    else if (traced && trace.state == Trace::kCommandSeen) [[unlikely]] {
        trace.read_tsc = raw.trace_read; // the program's stamps of the reply: hints the sampler checks
        trace.submit_ticks = raw.trace_submit;
        trace.woken_ticks = raw.trace_woken;
    }
}

// A new handle in a slot: the app's send words start from 0 with it (the
// last handle's tail must not look like bytes written for this one).
void Commands::reset_written(Group &group, uint32_t si)
{
    store_rlx(&group.socks[si].tx_noted, 0u);
    store_rel(&group.socks[si].tx_written, 0u);
}

// The app's tail, after clearing tx_noted: the swap comes first, so a write
// that saw tx_noted still 1 (and queued no SEND) is seen by this load.
uint32_t Commands::take_written(Group &group, uint32_t si)
{
    dti_sock_shared &sh = group.socks[si];
    __atomic_exchange_n(&sh.tx_noted, 0u, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&sh.tx_written, __ATOMIC_SEQ_CST);
}

// Commits the bytes between what was taken and `end`; nothing when `end` is
// not ahead (an earlier SEND took them). false: the app lied.
bool Commands::commit_to(Group &group, uint32_t si, uint32_t end, bool more)
{
    Slot &s = group.slots[si];
    const uint32_t n = end - s.tx_committed;
    if (n == 0 || int32_t(n) < 0)
        return true;
    // tx_commit() itself refuses more than the ring's free space (the
    // Transport contract): no tx_view() first.
    if (!s.has_sid || !(s.state & DTI_STATE_CONNECTED) || (s.state & DTI_STATE_WR_CLOSED) ||
        tr_.tx_commit(s.sid, n, more) != 0)
        return false;
    s.tx_committed += n;
    if (trace.state == Trace::kWantCommand && s.sid == trace.sock) {
        trace.state = Trace::kCommandSeen;
        trace.read_tsc = 0; // cmd_send() fills in its command's stamps
    }
    if (s.dg.tx.pending())
        digest_tx(group, si);
    table_.mark(group, si);
    return true;
}

// Before a command that must come after the bytes written so far (shutdown,
// close, a region-buffer send, a send digest): take them, in case their
// SEND waits in another thread's queue (a write that found tx_noted set
// queued none of its own).
void Commands::take_unsent(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    if (!s.has_sid || !(s.state & DTI_STATE_CONNECTED) || (s.state & DTI_STATE_WR_CLOSED))
        return;
    if (__atomic_load_n(&group.socks[si].tx_written, __ATOMIC_SEQ_CST) == s.tx_committed)
        return; // nothing unsent (and tx_noted, if set, belongs to a SEND still to come)
    commit_to(group, si, take_written(group, si), false);
}

// RECV_RELEASE of c.length > 0 bytes (decoder) the app has read.
void Commands::cmd_release(Group &group, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    if (c.length > s.rx_tail - s.rx_consumed || s.recv_into.used || s.post.used) {
        stats_.rejected_commands++;
        return;
    }
    table_.consume_rx(group, si, c.length);
    table_.mark(group, si);
}

// SEND_FROM a pool buffer: [c.offset, c.offset + c.length) is inside the
// pool (decoder).
int32_t Commands::cmd_send_from(Group &group, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    if (!s.has_sid || !(s.state & DTI_STATE_CONNECTED))
        return s.error ? s.error : -ENOTCONN;
    if (s.state & DTI_STATE_WR_CLOSED)
        return -EPIPE;
    RingSpan v;
    if (tr_.tx_view(s.sid, &v) != 0)
        return -EPIPE;
    uint32_t n = std::min(c.length, v.total());
    const uint8_t *src = group.base + c.offset;
    uint32_t first = std::min(n, v.n[0]);
    std::memcpy(v.p[0], src, first);
    if (n > first)
        std::memcpy(v.p[1], src + first, n - first);
    if (n > 0 && tr_.tx_commit(s.sid, n, c.flags & DTI_SEND_MORE) == 0) {
        s.tx_committed += n;
        if (trace.state == Trace::kWantCommand && s.sid == trace.sock)
            trace.state = Trace::kCommandSeen;
        if (s.dg.tx.pending())
            digest_tx(group, si);
    }
    return int32_t(n);
}

// ---- payload digests (digest.h) ---------------------------------------------

// DIGEST with known flags (decoder); its start and length are checked
// against the stream by the direction's add().
void Commands::cmd_digest(Group &group, uint16_t ci, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    const uint32_t h = table_.handle(group, si);
    if (!(s.state & DTI_STATE_CONNECTED) || !s.has_sid) {
        pub_.complete(group, ci, c.tag, s.error ? s.error : -ENOTCONN, h);
        return;
    }
    const bool tx = c.flags & DTI_DIGEST_TX;
    uint32_t flags = 0;
    if (c.flags & DTI_DIGEST_CHECK)
        flags |= digest::kCheck;
    if (c.flags & DTI_DIGEST_CHAIN)
        flags |= digest::kChain;
    const digest::Request q{ci, c.tag, uint32_t(c.offset), c.length, flags, uint32_t(c.value)};
    digest::Done d{};
    uint64_t bytes = 0;
    int r;
    if (tx) {
        r = s.dg.tx.add(q, tx_digest_ring(group, si), s.tx_head, s.tx_committed, &d, &bytes);
        stats_.digest_tx_bytes += bytes;
    } else {
        table_.settle_rx(group, si);
        r = s.dg.rx.add(q, rx_digest_ring(group, si), s.rx_consumed, s.rx_tail, &d, &bytes);
        stats_.digest_rx_bytes += bytes;
    }
    if (r < 0) {
        pub_.complete(group, ci, c.tag, r, h);
        return;
    }
    stats_.digest_ranges++;
    if (r == 1)
        digests_done(group, si, &d, 1);
    else
        table_.mark(group, si); // the stream may already have ended: refresh decides
}

void Commands::digest_rx(Group &group, uint32_t si)
{
    digest::Done d[digest::kMaxRanges];
    uint64_t bytes = 0;
    table_.settle_rx(group, si);
    uint32_t n = group.slots[si].dg.rx.advance(rx_digest_ring(group, si), group.slots[si].rx_tail, d, &bytes);
    stats_.digest_rx_bytes += bytes;
    digests_done(group, si, d, n);
}

void Commands::digest_tx(Group &group, uint32_t si)
{
    digest::Done d[digest::kMaxRanges];
    uint64_t bytes = 0;
    uint32_t n = group.slots[si].dg.tx.advance(tx_digest_ring(group, si), group.slots[si].tx_committed, d, &bytes);
    stats_.digest_tx_bytes += bytes;
    digests_done(group, si, d, n);
}

// Ranges that can no longer fill: the receive stream ended (FIN, reset,
// failure) or the send side was shut down.
void Commands::digest_ends(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    digest::Done d[digest::kMaxRanges];
    const bool broken = s.state & (DTI_STATE_RESET | DTI_STATE_FAILED);
    if (s.dg.rx.pending() && (broken || (s.state & DTI_STATE_RD_CLOSED))) {
        uint32_t n = s.dg.rx.end_beyond(s.rx_tail, s.error ? s.error : -ENODATA, d);
        digests_done(group, si, d, n);
    }
    if (s.dg.tx.pending() && (broken || (s.state & DTI_STATE_WR_CLOSED))) {
        uint32_t n = s.dg.tx.end_beyond(s.tx_committed, s.error ? s.error : -EPIPE, d);
        digests_done(group, si, d, n);
    }
}

void Commands::digests_done(Group &group, uint32_t si, const digest::Done *d, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (d[i].res == -EBADMSG)
            stats_.digest_mismatches++;
        pub_.complete(group, d[i].ctx, d[i].tag, d[i].res, table_.handle(group, si), int64_t(d[i].crc));
    }
}

// Copies readable bytes into a posted pool buffer; true when it completed.
bool Commands::try_recv_into(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    Pending &p = s.recv_into;
    if (!p.used)
        return false;
    uint32_t readable = s.rx_tail - s.rx_consumed;
    if (readable == 0 && s.has_sid) {
        RingSpan v;
        if (tr_.rx_view(s.sid, &v) == 0) {
            s.rx_tail = s.rx_consumed + v.total();
            readable = v.total();
        }
    }
    if (s.dg.rx.pending())
        digest_rx(group, si); // before the copy releases the bytes
    int32_t res;
    if (readable > 0) {
        uint32_t n = std::min(readable, p.arg);
        table_.settle_rx(group, si);
        uint32_t mask = s.rx_size - 1;
        uint32_t off = (s.rx_base + s.rx_consumed) & mask;
        uint32_t first = std::min(n, s.rx_size - off);
        uint8_t *dst = group.base + p.offset;
        std::memcpy(dst, group.rx_ring(si) + off, first);
        if (n > first)
            std::memcpy(dst + first, group.rx_ring(si), n - first);
        table_.consume_rx(group, si, n);
        res = int32_t(n);
    } else if (s.error) {
        res = s.error;
    } else if (s.state & (DTI_STATE_RD_CLOSED | DTI_STATE_RESET | DTI_STATE_FAILED)) {
        res = 0;
    } else {
        return false;
    }
    Pending done = p;
    p.used = false;
    pub_.complete(group, done.ctx, done.tag, res, table_.handle(group, si));
    table_.mark(group, si);
    return true;
}

void Commands::cmd_watch(Group &group, uint16_t ci, uint32_t si, uint32_t events)
{
    Slot &s = group.slots[si];
    uint64_t bit = uint64_t{1} << ci;
    // events: only DTI_POLL* bits (the decoder masked the rest)
    if (events == 0) {
        s.watchers &= ~bit;
        if (s.watchers == 0)
            s.interest = 0;
        return;
    }
    s.watchers |= bit;
    s.interest |= events | DTI_POLLERR | DTI_POLLHUP;
    if (events & DTI_POLLOUT) {
        s.out_armed = true;
        // The writer waits for room: every byte it published is taken first
        // (their SENDs came before this watch, so this finds none, unless one
        // was lost: then the ring would stay full for ever).
        take_unsent(group, si);
    }
    // Report what already holds: forget what we last told, then notify().
    s.last_mask &= ~events;
    s.last_rx_tail = s.rx_tail - 1;
    table_.mark(group, si);
}

// ACCEPT waiting on listener si, which has connections now.
void Commands::resume_accept(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    uint32_t got[DTI_ACCEPT_MAX] = {};
    int32_t n = accept_some(group, table_.owner(group, s.accept.ctx), si, s.accept.arg, got);
    if (n > 0) {
        Pending p = s.accept;
        s.accept.used = false;
        pub_.complete(group, p.ctx, p.tag, n, table_.handle(group, si), 0, got);
    }
}

// TX_GROW (dti/README.md "Send rings that grow"): the writer copied every
// byte the transport may still read to its offset at `c.length` and, until
// this is answered, writes each new byte at both sizes' offsets; every SEND
// queued before it has been taken. The ring becomes that size here, in the
// transport first (which refuses while frames in flight point into the
// ring), then in the table (release), then the answer (tx_grow_ack). The size
// comes from shared memory: a power of two larger than the ring, within the
// slot's reserve, else refused and counted; the memory limit as for a ring
// sized by SO_SNDBUF. A refused grow withdraws the published wish (tx_want)
// so that the writer does not ask again for it.
void Commands::cmd_tx_grow(Group &group, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    const uint32_t want = c.length;
    const uint32_t start = group.lim.tx_ring_size;
    bool done = false;
    if (!s.has_sid || !s.rings_out || !(s.state & DTI_STATE_CONNECTED) || !pow2(want) || want <= s.tx_size ||
        want > group.geo.tx_reserve) {
        stats_.tx_grow_refusals++;
    } else {
        const uint64_t before = s.tx_size > start ? s.tx_size - start : 0;
        const uint64_t more = (want > start ? want - start : 0) - before;
        if (group.geo.committed + group.rx_grown + group.tx_grown + more > group.lim.max_region_bytes) {
            stats_.tx_size_refusals++;
        } else if (tr_.tx_grow(s.sid, want) != 0) {
            stats_.tx_grow_refusals++;
        } else {
            group.tx_grown += more;
            s.tx_size = want;
            stats_.tx_ring_grows++;
            store_rel(&group.socks[si].tx_size, want);
            done = true;
        }
    }
    if (!done)
        store_rlx(&group.socks[si].tx_want, 0u);
    store_rel(&group.socks[si].tx_grow_ack, ++s.tx_grow_acks);
    table_.mark(group, si); // tx_head and POLLOUT at the new size
}

} // namespace dti::engine::detail
