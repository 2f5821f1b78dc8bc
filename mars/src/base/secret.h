// secret.h: keyed hashes for initial sequence numbers (RFC 6528) and SYN
// cookies (RFC 4987). The 128-bit key comes from StackConfig::isn_secret.
#pragma once

#include "base/flow_table.h"

#include <cstddef>
#include <cstdint>

namespace mars {

// SipHash-2-4 of data under a 128-bit key.
uint64_t siphash24(const uint64_t key[2], const void *data, size_t len);

// RFC 6528: ISN = M + F(localip, localport, remoteip, remoteport, secret),
// M a timer ticking every 4 microseconds (derived from now_ns).
uint32_t isn_generate(const uint64_t key[2], const FlowKey &flow, uint64_t now_ns);

// MSS values a SYN cookie can carry (3 bits: index 0..7), ascending.
inline constexpr uint16_t kCookieMss[8] = {536, 1200, 1300, 1380, 1440, 1460, 4312, 8960};
// The largest index whose value is <= mss (0 if mss < 536).
int cookie_mss_index(uint16_t mss);

// A SYN cookie ISN for a SYN with sequence number peer_isn on `flow`, carrying
// mss_index and a coarse time counter (64 s units). Cookies are accepted for
// about two counter periods.
uint32_t syncookie_encode(const uint64_t key[2], const FlowKey &flow, uint32_t peer_isn,
                          int mss_index, uint64_t now_ns);
// Checks the ACK of a cookie handshake: `cookie` is ack-1, peer_isn is seq-1.
// Returns the mss index, or -1 when the cookie is forged or expired.
int syncookie_decode(const uint64_t key[2], const FlowKey &flow, uint32_t peer_isn,
                     uint32_t cookie, uint64_t now_ns);

} // namespace mars
