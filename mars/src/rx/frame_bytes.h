// frame_bytes.h: reading a received frame's fixed fields as loaded from the
// wire (unaligned, no byte swapping), shared by the express path (tcp_in.cc)
// and receive coalescing (rx_coalesce.cc).
#pragma once

#include "rx/host.h"
#include "base/wire.h"

#include <cstdint>
#include <cstring>

namespace mars::wire {

inline uint32_t load32(const void *p)
{
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

inline uint16_t load16(const void *p)
{
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

// Byte patterns of a frame's fixed fields as loaded little-endian from the wire.
constexpr uint32_t kWireIpv4NoOptions = 0x00450008; // ethertype 08 00, version 4 / IHL 5 (byte 3: TOS, any)
constexpr uint32_t kWireIpv4Mask = 0x00ffffff;
constexpr uint16_t kWireEtherIpv4 = 0x0008;         // ethertype 08 00
constexpr uint16_t kWireFragMask = 0xff3f;          // MF and the offset, network order
constexpr uint16_t kWireProtoTcp = uint16_t(kProtoTcp) << 8; // TTL byte, then protocol
constexpr uint32_t kWireTsPrefix = 0x0a080101;      // NOP NOP TS 10

} // namespace mars::wire

namespace mars {

using namespace wire;

// Every check the demux would make on a frame of connection s, done on the
// frame's bytes as loaded, then header prediction proper (state, flags,
// sequence number, options layout, window, nothing in recovery or held).
__attribute__((always_inline)) inline bool rx::Receiver::predicts(const PacketRef &f, const Sock &s, unsigned *doff_out,
                                                                unsigned *len_out) const
{
    const uint8_t *d = f.data;
    if (f.len < kHeadersLen) return false;
    if (load32(d) != wire_mac_lo_ || load16(d + 4) != wire_mac_hi_ ||
        (load32(d + 12) & kWireIpv4Mask) != kWireIpv4NoOptions)
        return false;
    const Ipv4 *ip = reinterpret_cast<const Ipv4 *>(d + kEthLen);
    const unsigned total = be16(ip->total_len);
    const Tcp *th = reinterpret_cast<const Tcp *>(d + kEthLen + kIpLen);
    if (ip->dst != wire_ip_ || ip->src != s.wire_rip || load32(th) != s.wire_ports ||
        total + kEthLen > f.len || total < kIpLen + kTcpLen || (ip->frag & kWireFragMask) ||
        (load16(&ip->ttl) & 0xff00) != kWireProtoTcp || ip->ttl == 0)
        return false;
    const unsigned doff = (th->doff >> 4) * 4u;
    const unsigned len = total - kIpLen;
    // The data offset must lie inside the segment before the options are read.
    if (doff > len || (doff != kTcpLen && (doff != kTcpLen + 12 || load32(th + 1) != kWireTsPrefix))) return false;
    if (!(f.flags & kRxIpCsumGood) && !csum_ok(csum_add(0, ip, kIpLen))) return false;
    if (s.state != TcpState::kEstablished || (th->flags & (kSyn | kFin | kRst | kUrg | kAck)) != kAck ||
        be32(th->seq) != s.rcv_nxt || s.snd_nxt != s.snd_max ||
        uint32_t(be16(th->win)) << s.snd_wscale != s.snd_wnd ||
        (s.flags & (kFInRecovery | kFRtoRecovery | kFTlpOut | kFRdShut | kFHasRings)) != kFHasRings || !s.rec.sack.empty() ||
        !s.rec.ooo.empty())
        return false;
    *doff_out = doff;
    *len_out = len;
    return true;
}

} // namespace mars
