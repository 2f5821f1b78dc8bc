// tcp_segment.h: a received TCP segment as the TCP rules see it, parsed
// once from its frame by tcp_input() (tcp_in.cc) after every check on the
// bytes (lengths, data offset, checksum, option syntax). The slow-path
// handlers (LISTEN, SYN-SENT, the synchronized states, ACK processing, data
// and FIN, TIME-WAIT) take this instead of header pointers, so they can be
// driven by tests with segments built in code (StackImpl::segment_input,
// tests/unit/mars/tcp/tcp_core_test.cc). The fast path never builds one: it
// works on the frame's bytes as loaded (frame_bytes.h).
#pragma once

#include "tcp/tcp_options.h"
#include "base/wire.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>

namespace mars {

struct TcpSegment {
    // The 4-tuple, host byte order.
    uint32_t src_ip = 0, dst_ip = 0;
    uint16_t sport = 0, dport = 0;
    uint32_t seq = 0, ack = 0;
    uint8_t flags = 0;  // wire::kSyn, kAck, ...
    uint16_t win = 0;   // as carried: not yet scaled
    TcpOptions opt;
    uint8_t *payload = nullptr;
    uint32_t len = 0;   // payload bytes
    // The received frame the payload lies in: the out-of-order queue keeps
    // it instead of copying the payload. Never null for a segment with data.
    PacketRef *frame = nullptr;
    // Over IPv6 (rx::Receiver::tcp6_input): the addresses (src_ip and
    // dst_ip are 0 then); nullptr for IPv4.
    const Ip6Addr *src6 = nullptr, *dst6 = nullptr;

    // Sequence space the segment occupies (SYN and FIN count one each).
    uint32_t seq_space() const
    {
        return len + ((flags & wire::kSyn) ? 1u : 0u) + ((flags & wire::kFin) ? 1u : 0u);
    }
};

} // namespace mars
