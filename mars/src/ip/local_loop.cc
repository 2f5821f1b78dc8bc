// local_loop.cc: frames to our own address, back in as received (local_loop.h).
#include "ip/local_loop.h"

#include "base/wire.h"

#include <cstring>

namespace mars {

using namespace wire;

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
    if (f.len >= kEthLen + kIpLen + kTcpLen) {
        const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(f.data + kEthLen);
        const unsigned ihl = (ip->ver_ihl & 0xf) * 4u;
        if (ip->proto == kProtoTcp && f.len >= kEthLen + ihl + kTcpLen) {
            const Tcp *th = reinterpret_cast<const Tcp *>(f.data + kEthLen + ihl);
            if ((th->flags & (kSyn | kAck | kRst)) == (kSyn | kAck)) stats_.local_conns++;
        }
    }
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
