// udp.cc: datagram sockets (DTI_SOCK_DGRAM, UDP over IPv4 and IPv6) on the command
// path. The socket's receive ring is the transport's ring of records
// (dti_dgram layout), read in place by the application; its send ring holds
// the application's records, which SEND_DGRAMS hands to the transport one
// datagram at a time (dti/README.md "Datagram sockets"). Everything read
// from the send ring is the application's memory: each record header is
// copied once and checked before anything follows it.
#include "commands.h"
#include "control.h"

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace dti::engine::detail {

// A datagram socket's addresses, after what may change them (bind, connect,
// the first send of an unbound socket).
void Commands::dgram_ends(Group &group, uint32_t si)
{
    Slot &s = group.slots[si];
    SockInfo info;
    if (s.has_sid && tr_.dgram_info(s.sid, &info) == 0) {
        take_ends(group, si, info); // an IPv6 socket's names into the table entry too (name6)
        if (info.local.port || (info.ipv6 && info.local6.port))
            s.state |= DTI_STATE_BOUND;
    }
    table_.mark(group, si);
}

// SEND_DGRAMS: the records between what was taken (tx_committed) and the
// command's position. Each record: a whole dti_dgram header inside the ring
// before its end, a size that is the record's own (header, an IPv6 one's
// addresses, len, aligned) and no more than what is left; pad records are
// skipped. A record with DTI_DGRAM_TO goes to its destination (IPv6 with
// DTI_DGRAM_IP6), one without to the connected peer (through the IPv6 call
// on an IPv6 socket: its peer may be either family). A record that
// fails a check ends the batch (counted; the rest is dropped: the
// application wrote something else than records). The ring is released up
// to the position whatever happened: nothing is left for a later command to
// find half-read.
int32_t Commands::cmd_send_dgrams(Group &group, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    const uint32_t size = group.tx_size(si);
    const uint32_t end = uint32_t(c.offset);
    uint32_t pos = s.tx_committed;
    if (end - pos > size) {
        stats_.dgram_bad_records++;
        return -EINVAL; // behind what was taken, or more than the ring: nothing taken
    }
    const uint8_t *ring = group.tx_ring(si);
    int32_t sent = 0, first_error = 0;
    bool failed = false, bad = false;
    while (pos != end) {
        const uint32_t off = pos & (size - 1);
        const uint32_t left = end - pos;
        dti_dgram h;
        if (left < sizeof h || size - off < sizeof h) {
            bad = true;
            break;
        }
        std::memcpy(&h, ring + off, sizeof h); // once: the application may scribble on it meanwhile
        const bool ip6 = (h.flags & DTI_DGRAM_IP6) != 0;
        if (h.size < DTI_DGRAM_ALIGN || (h.size & (DTI_DGRAM_ALIGN - 1)) || h.size > left || h.size > size - off ||
            (!(h.flags & DTI_DGRAM_PAD) &&
             (h.len > (ip6 ? DTI_DGRAM6_MAX : DTI_DGRAM_MAX) || dti_dgram_record_size(h.len, h.flags) != h.size))) {
            bad = true;
            break;
        }
        if (!(h.flags & DTI_DGRAM_PAD) && !failed) {
            const uint8_t *payload = ring + off + sizeof h;
            const bool to = (h.flags & DTI_DGRAM_TO) != 0;
            const int tos = (h.flags & DTI_DGRAM_TOS_SET) ? int((h.flags >> 8) & 0xff) : -1;
            int64_t r;
            if (ip6) {
                Endpoint6 dst6;
                std::memcpy(dst6.ip, payload + offsetof(dti_dgram6, dst), 16); // inside the record: size checked
                dst6.port = h.dst_port;
                payload += sizeof(dti_dgram6);
                r = tr_.dgram_send6(s.sid, to ? &dst6 : nullptr, payload, h.len, tos);
            } else if (!to && s.ipv6) {
                r = tr_.dgram_send6(s.sid, nullptr, payload, h.len, tos);
            } else {
                const Endpoint dst{h.dst_ip, h.dst_port};
                r = tr_.dgram_send(s.sid, to ? &dst : nullptr, payload, h.len, tos);
            }
            if (r < 0) {
                // sendmmsg's rule: what was sent counts; the first failure
                // ends the batch (its error when it is the first datagram).
                failed = true;
                first_error = sent == 0 ? int32_t(r) : 0;
                stats_.dgram_send_errors++;
            } else {
                sent++;
                stats_.dgram_sent++;
            }
        }
        pos += h.size;
    }
    if (bad)
        stats_.dgram_bad_records++;
    s.tx_committed = end;
    s.tx_head = end; // the ring is free again (published before the completion)
    if (s.local.port == 0)
        dgram_ends(group, si); // an unbound socket's first send bound it
    table_.mark(group, si);
    if (sent > 0)
        return sent;
    if (first_error)
        return first_error;
    return bad ? -EINVAL : 0;
}

int32_t Commands::cmd_dgram_connect(Group &group, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    const int r = c.op == DTI_OP_CONNECT6 ? tr_.dgram_connect6(s.sid, endpoint6_of(c)) : tr_.dgram_connect(s.sid, c.address);
    if (r == 0)
        dgram_ends(group, si);
    return r;
}

int32_t Commands::cmd_mcast(Group &group, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    if (c.op == DTI_OP_MCAST6) {
        uint8_t g[16], src[16];
        mcast6_of(c, g, src);
        return tr_.dgram_membership6(s.sid, g, src, c.flags == 0);
    }
    return tr_.dgram_membership(s.sid, c.address.ip, c.length, c.flags == 0);
}

// RECV_RELEASE on a datagram socket: the transport takes whole records only
// and says so; a release it refuses (not on a record's end: the application
// lied) changes nothing on either side.
void Commands::dgram_release(Group &group, uint32_t si, const Command &c)
{
    Slot &s = group.slots[si];
    if (c.length > s.rx_tail - s.rx_consumed || !s.has_sid || tr_.dgram_rx_consume(s.sid, c.length) != 0) {
        stats_.rejected_commands++;
        stats_.dgram_bad_records++;
        return;
    }
    s.rx_consumed += c.length;
    table_.mark(group, si);
}

} // namespace dti::engine::detail
