// commands.h: the command path. Commands are taken from each context's
// queue (the consumer side of the command queue: the protocol, its stamps
// and invariants are in dti/QUEUES.md), copied once, checked by the decoder
// (decoder.h), then executed against the transport; commands that wait
// (connect, accept, RECV_INTO, RECV_POST, DIGEST) resume when the socket
// table is refreshed.
//   commands.cc  the command loop, each command, digests, the refresh
//   posted.cc    posted receives into the process's memory (RECV_POST)
//   udp.cc       datagram sockets (DTI_SOCK_DGRAM: SEND_DGRAMS, DGRAM_CONNECT, MCAST, MCAST6)
// execute() and the ring helpers are in the same translation unit as the
// loop and inlined into it; nothing on the path is virtual.
#pragma once

#include "decoder.h"
#include "publisher.h"
#include "state.h"
#include "table.h"

namespace dti::engine::detail {

class Control;

// Which commands a socket of each kind takes: the opcodes only one kind
// takes, one bit each. Set-up and lifetime commands (bind, options, watch,
// close, RECV_RELEASE) fit both; so do BIND6 and CONNECT6 (a datagram
// socket's CONNECT6 answers at once: udp.cc).
constexpr uint32_t op_bit(uint16_t op) { return uint32_t{1} << op; }
constexpr uint32_t kStreamOnlyOps = op_bit(DTI_OP_LISTEN) | op_bit(DTI_OP_ACCEPT) | op_bit(DTI_OP_CONNECT) |
                                    op_bit(DTI_OP_SHUTDOWN) | op_bit(DTI_OP_RECV_INTO) | op_bit(DTI_OP_SEND_FROM) |
                                    op_bit(DTI_OP_SEND) | op_bit(DTI_OP_DIGEST) | op_bit(DTI_OP_RECV_POST) |
                                    op_bit(DTI_OP_RECV_CANCEL) | op_bit(DTI_OP_TX_GROW);
constexpr uint32_t kDgramOnlyOps = op_bit(DTI_OP_SEND_DGRAMS) | op_bit(DTI_OP_DGRAM_CONNECT) | op_bit(DTI_OP_MCAST) |
                                   op_bit(DTI_OP_MCAST6);
static_assert(DTI_OP_MCAST < 32 && DTI_OP_TX_GROW < 32 && DTI_OP_CONNECT6 < 32 && DTI_OP_MCAST6 < 32,
              "every opcode the decoder lets through has a bit");

class Commands {
  public:
    Commands(Transport &t, const Limits &l, Stats &s, Table &table, Publisher &pub, Control &control)
        : tr_(t), lim_(l), stats_(s), table_(table), pub_(pub), control_(control)
    {
    }

    // The test process_ctx() starts with, inline in the poll loop: the slot
    // at the consumer index carries the next stamp (an idle context costs no
    // call).
    static bool command_waiting(const Group &group, const Ctx &c)
    {
        return load_acq(&c.cmds[c.cmd_cons & (group.lim.cmdq_entries - 1)].stamp) == c.cmd_cons + 1;
    }
    // Runs up to commands_per_poll commands of context ci; *work counts them.
    void process_ctx(Group &group, uint16_t ci, unsigned *work);
    // Slot si from the transport (ring levels, addresses), then what waits on
    // it (digests, RECV_INTO, RECV_POST, ACCEPT); then the socket table.
    // Inline here: the poll loop's table pass runs it for every changed slot.
    [[gnu::always_inline]] inline void refresh(Group &group, uint32_t si);

  private:
    // Inlined into process_ctx(), its only caller: the call would cost
    // about 20 instructions per command.
    [[gnu::always_inline]] inline void execute(Group &group, uint16_t ctx_index, const dti_cmd &raw);
    void refuse_command(Group &group, uint16_t ctx_index, uint32_t slot_index, const Decoded &d);
    static CommandBounds bounds_of(const Group &group)
    {
        return CommandBounds{group.lim.cmdq_entries, group.lim.max_sockets, group.geo.pool_offset, group.lim.pool_size};
    }
    // slot_of() for a decoded command (the decoder checked the slot index
    // against max_sockets and that the generation is not 0).
    static Slot *held_slot(Group &group, const Member &m, const Command &cmd)
    {
        Slot &s = group.slots[cmd.slot];
        return s.gen == cmd.gen && s.holders && m.holds[cmd.slot] ? &s : nullptr;
    }
    int32_t cmd_socket(Group &group, Member &m, uint32_t kind);
    // Set-up commands of either family (setup.cc): BIND/BIND6 answer at
    // once; CONNECT/CONNECT6 return true when the answer comes later
    // (kEvConnected, kEvError, kEvReset), else the answer in *result.
    int32_t cmd_bind(Group &group, Member &m, uint32_t si, const Command &c);
    bool cmd_connect(Group &group, uint16_t ci, uint32_t si, const Command &c, int32_t *result);
    // A socket's names from the transport into its slot and the table
    // entry's IPv6 names (setup.cc): the refresh while the socket is not
    // connected, and accept.
    void take_ends(Group &group, uint32_t si, const SockInfo &info);
    // Whether op (one the decoder let through) applies to slot s's kind
    // (kStreamOnlyOps, kDgramOnlyOps above). Inline: it runs for every command.
    static bool op_fits(const Slot &s, uint16_t op)
    {
        return !(((s.dgram ? kStreamOnlyOps : kDgramOnlyOps) >> op) & 1);
    }
    // Datagram sockets (udp.cc): the datagram commands; a receive release in
    // whole records; the addresses read again.
    int32_t cmd_send_dgrams(Group &group, uint32_t si, const Command &c);
    // DGRAM_CONNECT, and CONNECT6 on a datagram socket.
    int32_t cmd_dgram_connect(Group &group, uint32_t si, const Command &c);
    int32_t cmd_mcast(Group &group, uint32_t si, const Command &c);
    void dgram_release(Group &group, uint32_t si, const Command &c);
    void dgram_ends(Group &group, uint32_t si);
    void cmd_accept(Group &group, uint16_t ci, uint32_t ls, const Command &c);
    int32_t accept_some(Group &group, Member &m, uint32_t ls, uint32_t max, uint32_t *out);
    // The data path's commands, inlined into the command loop (commands.cc)
    // as they were when the engine was one translation unit.
    // `raw`: the command as copied (its latency stamps, dti_abi.h dti_cmd.trace_*).
    [[gnu::always_inline]] inline void cmd_send(Group &group, uint32_t si, const Command &c, const dti_cmd &raw);
    [[gnu::always_inline]] inline uint32_t take_written(Group &group, uint32_t si);
    void reset_written(Group &group, uint32_t si);
    bool commit_to(Group &group, uint32_t si, uint32_t end, bool more);
    void take_unsent(Group &group, uint32_t si);
    [[gnu::always_inline]] inline void cmd_release(Group &group, uint32_t si, const Command &c);
    int32_t cmd_send_from(Group &group, uint32_t si, const Command &c);
    void cmd_tx_grow(Group &group, uint32_t si, const Command &c);
    void cmd_watch(Group &group, uint16_t ci, uint32_t si, uint32_t events);
    bool try_recv_into(Group &group, uint32_t si);
    void resume_accept(Group &group, uint32_t si);
    // Posted receive into the process's own memory (posted.cc).
    void cmd_post(Group &group, uint16_t ci, uint32_t si, const Command &c);
    void cmd_cancel_post(Group &group, uint32_t si);
    void try_post(Group &group, uint32_t si);
    void end_post(Group &group, uint32_t si, int32_t res);
    // Payload digests (digest.h).
    void cmd_digest(Group &group, uint16_t ci, uint32_t si, const Command &c);
    static digest::Ring rx_digest_ring(const Group &group, uint32_t si)
    {
        return digest::Ring{group.rx_ring(si), group.slots[si].rx_size - 1, group.slots[si].rx_base};
    }
    static digest::Ring tx_digest_ring(const Group &group, uint32_t si)
    {
        return digest::Ring{group.tx_ring(si), group.tx_size(si) - 1, group.slots[si].tx_base};
    }
    void digest_rx(Group &group, uint32_t si);
    void digest_tx(Group &group, uint32_t si);
    void digest_ends(Group &group, uint32_t si);
    void digests_done(Group &group, uint32_t si, const digest::Done *d, uint32_t n);

  public:
    Trace trace; // latency sampling (engine.h): a SEND of trace.sock is the reply

  private:
    Transport &tr_;
    const Limits &lim_;
    Stats &stats_;
    Table &table_;
    Publisher &pub_;
    Control &control_; // holds (SOCKET, ACCEPT, CLOSE), the privileged-port rule (BIND)
};

inline void Commands::refresh(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    table_.settle_rx(group, si);
    if (s.has_sid && s.rings_out && (s.state & DTI_STATE_CONNECTED)) {
        RingLevels l;
        tr_.ring_levels(s.sid, &l);
        if (l.rx_rc == 0 && l.readable <= s.rx_size)
            s.rx_tail = s.rx_consumed + l.readable;
        if (l.tx_rc == 0 && l.writable <= s.tx_size) // (a slot with rings has its size: provide)
            s.tx_head = s.tx_committed - (s.tx_size - l.writable);
    } else if (s.has_sid && s.rings_out && (s.state & DTI_STATE_DGRAM)) {
        RingSpan v; // the records waiting; the send ring is the engine's (cmd_send_dgrams)
        if (tr_.dgram_rx_view(s.sid, &v) == 0 && v.total() <= s.rx_size)
            s.rx_tail = s.rx_consumed + v.total();
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
            take_ends(group, si, info);
            s.ends_final = (s.state & DTI_STATE_CONNECTED) != 0;
        }
    }
    if (s.recv_into.used)
        try_recv_into(group, si);
    if (s.post.used)
        try_post(group, si);
    if (s.accept.used && s.embryos > 0)
        resume_accept(group, si);
    if (s.holders)
        table_.write_shared(group, si);
}

} // namespace dti::engine::detail
