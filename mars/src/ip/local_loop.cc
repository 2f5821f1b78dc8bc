// local_loop.cc: frames to our own address, back in as received (local_loop.h).
#include "ip/local_loop.h"

#include "base/wire.h"
#include "ip/ipv6_wire.h"

#include <cstring>

namespace mars {

using namespace wire;

namespace {

// f (our own output) is a TCP SYN-ACK, over IPv4 or IPv6 (our IPv6 output
// carries no extension header: TCP follows the fixed header).
bool syn_ack(const PacketRef &f)
{
    const Tcp *th = nullptr;
    const uint16_t type = be16(reinterpret_cast<const Eth *>(f.data)->type);
    if (type == kEtherIpv4 && f.len >= kEthLen + kIpLen + kTcpLen) {
        const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(f.data + kEthLen);
        const unsigned ihl = (ip->ver_ihl & 0xf) * 4u;
        if (ip->proto == kProtoTcp && f.len >= kEthLen + ihl + kTcpLen)
            th = reinterpret_cast<const Tcp *>(f.data + kEthLen + ihl);
    } else if (type == kEtherIpv6 && f.len >= kEthLen + kIp6Len + kTcpLen) {
        const Ipv6 *ip = reinterpret_cast<const Ipv6 *>(f.data + kEthLen);
        if (ip->next == kProtoTcp) th = reinterpret_cast<const Tcp *>(f.data + kEthLen + kIp6Len);
    }
    return th && (th->flags & (kSyn | kAck | kRst)) == (kSyn | kAck);
}

} // namespace

void LocalLoop::push(PacketRef &f, const MacAddr &mac, Link &link)
{
    // Never TSO or by-reference frames (local_loop.h); a frame too short for
    // its headers cannot come from our own output either.
    if (f.flags & (kTxTcpSeg | kTxExternal) || tail_ - head_ >= kCapacity) {
        stats_.drop_local_full++;
        link.release(f);
        return;
    }
    std::memcpy(reinterpret_cast<Eth *>(f.data)->dst, mac.b, 6);
    stats_.local_frames++;
    stats_.local_bytes += f.len;
    // A listener of ours answering a SYN from ourselves: a local connection
    // served in the stack (counted once, at its SYN-ACK).
    if (syn_ack(f)) stats_.local_conns++;
    f.flags = kRxIpCsumGood | kRxL4CsumGood;
    f.room = 0;
    q_[tail_++ & (kCapacity - 1)] = f;
}

uint16_t LocalLoop::take(PacketRef *out, uint16_t max)
{
    uint16_t n = 0;
    while (n < max && head_ != tail_) out[n++] = q_[head_++ & (kCapacity - 1)];
    return n;
}

void LocalLoop::discard(Link &link)
{
    while (head_ != tail_) link.release(q_[head_++ & (kCapacity - 1)]);
    head_ = tail_ = 0;
}

} // namespace mars
