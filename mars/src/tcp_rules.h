// tcp_rules.h: small rules of TCP input shared by the files that apply the
// RFC 9293 3.10.7 segment-arrival rules (tcp_sync.cc, tcp_data.cc).
#pragma once

#include "tcp_options.h"

#include <cstdint>

namespace mars {

constexpr uint64_t kPawsIdleNs = 24ull * 24 * 3600 * 1'000'000'000ull; // RFC 7323 5.5

// RFC 7323 5.3 R1 with one tick of tolerance, as Linux (TCP_PAWS_WINDOW):
// an original that was reordered or duplicated behind a fresh retransmission
// carries a TSval a tick older than TS.Recent and is still good data. A
// sequence-number wrap, which PAWS is for, is far older than that.
constexpr uint32_t kPawsWindow = 1;
inline bool paws_old(uint32_t tsval, uint32_t ts_recent) { return int32_t(ts_recent - tsval) > int32_t(kPawsWindow); }

// RFC 2883 4: the first SACK block reports a duplicate when it lies below
// the cumulative ACK or inside the second block.
inline bool is_dsack(const TcpOptions &opt, uint32_t ack)
{
    const SeqRange &d = opt.sack[0];
    if (int32_t(d.end - ack) <= 0) return true;
    return opt.n_sack > 1 && int32_t(opt.sack[1].start - d.start) <= 0 && int32_t(d.end - opt.sack[1].end) <= 0;
}

} // namespace mars
