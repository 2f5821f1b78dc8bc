// frame_bytes.h: reading a received frame's fixed fields as loaded from the
// wire (unaligned, no byte swapping), shared by the fast path (fast_path.h)
// and receive coalescing (rx_coalesce.cc, rx_coalesce6.cc).
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
constexpr uint16_t kWireEtherIpv6 = 0xdd86;         // ethertype 86 dd
constexpr uint16_t kWireFragMask = 0xff3f;          // MF and the offset, network order
constexpr uint16_t kWireProtoTcp = uint16_t(kProtoTcp) << 8; // TTL byte, then protocol
constexpr uint32_t kWireTsPrefix = 0x0a080101;      // NOP NOP TS 10

} // namespace mars::wire
