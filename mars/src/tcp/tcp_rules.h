// tcp_rules.h: small rules of TCP input, pure functions of a segment's
// fields and a connection's numbers, shared by the files that apply the
// RFC 9293 3.10.7 segment-arrival rules (tcp_sync.cc, tcp_data.cc) and
// tested on their own (tests/unit/mars/tcp/tcp_rules_test.cc).
#pragma once

#include "tcp/tcp_options.h"
#include "base/wire.h"

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

// RFC 9293 3.10.7.4, first check: is a segment (seq, len bytes of payload,
// flags: its SYN and FIN count) acceptable to a receive window of wnd bytes
// at rcv_nxt? An empty segment exactly at rcv_nxt always is (window updates
// while our window is closed); with a zero window a segment at rcv_nxt
// without SYN is, for its control part (ACK, RST; the caller trims the data).
inline bool segment_acceptable(uint32_t rcv_nxt, uint32_t wnd, uint32_t seq, uint32_t len, uint8_t flags)
{
    const uint32_t seglen = len + ((flags & wire::kSyn) ? 1 : 0) + ((flags & wire::kFin) ? 1 : 0);
    bool ok;
    if (seglen == 0) {
        ok = wnd == 0 ? seq == rcv_nxt : (wire::seq_ge(seq, rcv_nxt) && wire::seq_lt(seq, rcv_nxt + wnd));
        // An ACK exactly at rcv_nxt is always fine (window updates while closed).
        ok = ok || seq == rcv_nxt;
    } else if (wnd == 0) {
        ok = false;
        // A zero window still takes ACKs and RSTs: handle the control part.
        if (seq == rcv_nxt && !(flags & wire::kSyn)) ok = true;
    } else {
        const uint32_t end = seq + seglen - 1;
        ok = (wire::seq_ge(seq, rcv_nxt) && wire::seq_lt(seq, rcv_nxt + wnd)) || (wire::seq_ge(end, rcv_nxt) && wire::seq_lt(end, rcv_nxt + wnd));
    }
    return ok;
}

} // namespace mars
