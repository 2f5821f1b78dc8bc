// rack.h: the sender's transmission log for RACK-TLP (RFC 8985).
//
// MARS keeps no retransmission queue (segments are rebuilt from the send
// ring), so RACK's per-segment transmit times live here instead: a short log
// of sequence ranges in the order they were sent, each with the time of its
// first and last transmission. Segments one tcp_output() call sends back to
// back share one entry (one `now`), so on an ACK-clocked flow the log holds a
// few entries per round trip. When it is full, two neighbours that continue
// each other in sequence and status are merged: the merged entry keeps the
// earliest time for deliveries (RACK.xmit_ts never runs ahead) and the latest
// for loss (nothing is declared lost early), so merging only ever delays a
// detection. A later entry covering the same bytes is a retransmission and
// supersedes the earlier one for those bytes.
//
// Times are microseconds modulo 2^32 (compared as differences; a flow's log
// spans far less than the 35 minutes that allows).
#pragma once

#include "tcp/sack.h"

#include <cstdint>

namespace mars {

struct TxMark {
    uint32_t start, end;        // [start, end) sent
    uint32_t first_us, last_us; // earliest and latest transmission time it stands for
};

class TxLog {
  public:
    static constexpr int kMax = 16;

    void clear() { n_ = 0, rtx_ = 0, lost_ = 0; }
    // Records [start, end) sent at now_us (rtx: a retransmission). Entries
    // wholly below snd_una go first. False when no room could be made (the
    // caller decides: a retransmission waits, new data drops the oldest).
    bool record(uint32_t start, uint32_t end, uint32_t now_us, bool rtx, uint32_t snd_una);
    // Whether a retransmission (a new, separate entry) can be recorded now.
    bool has_room(uint32_t snd_una);
    // Forgets entries wholly below snd_una.
    void prune(uint32_t snd_una);
    void drop_oldest() { if (n_) erase(0); }

    int size() const { return n_; }
    const TxMark &at(int i) const { return m_[i]; }
    bool is_rtx(int i) const { return (rtx_ >> i) & 1; }
    bool is_lost(int i) const { return (lost_ >> i) & 1; }
    void mark_lost(int i) { lost_ = uint16_t(lost_ | (1u << i)); }

    // The first piece of entry i at or after `from` that is still this
    // entry's to answer for: not below snd_una, not SACKed, not sent again by
    // a later entry. [a, b) ends at the next SACKed or resent byte.
    bool piece(int i, uint32_t from, uint32_t snd_una, const SackScoreboard &sb, SeqRange *out) const;
    // Splits entry i at seq (inside it) into two with the same times.
    // False when there is no room.
    bool split(int i, uint32_t seq, uint32_t snd_una);
    // Index of the latest entry holding a byte of [start, end), or -1.
    int latest_overlapping(uint32_t start, uint32_t end) const;

  private:
    void erase(int i);
    bool merge_one();

    TxMark m_[kMax];
    uint16_t rtx_ = 0, lost_ = 0; // bit i: entry i
    uint8_t n_ = 0;
};

// RACK-TLP and PRR state of one connection (cold: only the slow path and the
// timers look at it).
struct RackVars {
    TxLog log;
    uint32_t xmit_us = 0;   // RACK.xmit_ts: latest transmission known delivered
    uint32_t end_seq = 0;   // RACK.end_seq of that transmission
    uint64_t rtt_ns = 0;    // RACK.rtt
    uint32_t fack = 0;      // highest sequence number delivered (ACKed or SACKed); see fack_ahead
    bool valid = false;     // xmit_us/end_seq/rtt_ns are set
    // fack is above snd_una (something beyond the cumulative ACK was SACKed).
    // Otherwise fack stands for snd_una, whatever it holds: it starts before
    // the ISN is known, and the fast path moves snd_una without touching it,
    // so a wrap-around comparison with it would mean nothing (issue 35).
    bool fack_ahead = false;
    bool reordering_seen = false;
    uint8_t reo_wnd_mult = 1;     // RFC 8985 6.2 step 4, raised by D-SACKs
    uint8_t recoveries_left = 16; // recoveries before reo_wnd_mult resets
    uint32_t dsack_round_end = 0; // one raise per round trip: until this is acked
    bool timer_is_pto = false;    // what rack_timer is armed for
    uint64_t last_data_ns = 0;    // last data segment sent (the probe timer's base)
    // TLP (RFC 8985 7)
    uint32_t tlp_end = 0;   // TLP.end_seq, valid with kFTlpOut
    bool tlp_is_rtx = false;
    // PRR (RFC 6937)
    uint32_t prr_delivered = 0, prr_out = 0, recover_fs = 0;
};

} // namespace mars
