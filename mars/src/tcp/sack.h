// sack.h: the sender's SACK scoreboard and RFC 6675 loss recovery helpers.
//
// Holds the SACKed ranges above snd.una reported by the peer (merged, sorted,
// at most kMaxRanges; when full the highest ranges are dropped, which only
// makes recovery more conservative). Sequence arithmetic is modulo 2^32.
#pragma once

#include <cstdint>

namespace mars {

struct SeqRange {
    uint32_t start, end; // [start, end)
};

class SackScoreboard {
  public:
    static constexpr int kMaxRanges = 16;
    static constexpr uint32_t kDupThresh = 3;

    // Forgets everything (RTO, connection start).
    void clear();
    // Drops ranges below the new cumulative ACK.
    void advance(uint32_t snd_una);
    // Merges the blocks of one ACK, ignoring blocks outside (snd_una, snd_nxt]
    // (RFC 2883 D-SACKs and garbage). Returns bytes newly SACKed.
    uint32_t update(uint32_t snd_una, uint32_t snd_nxt, const SeqRange *blocks, int n);

    bool empty() const { return n_ == 0; }
    bool is_sacked(uint32_t seq) const;
    uint32_t sacked_bytes() const { return sacked_; }
    // Highest SACKed sequence number + 1 (snd_una when none).
    uint32_t high_sacked(uint32_t snd_una) const;

    // RFC 6675 IsLost(seq): kDupThresh discontiguous SACKed ranges above seq,
    // or more than (kDupThresh - 1) * mss bytes SACKed above it.
    bool is_lost(uint32_t seq, uint32_t mss) const;
    // RFC 6675 SetPipe: bytes believed in flight.
    uint32_t pipe(uint32_t snd_una, uint32_t snd_nxt, uint32_t high_rxt, uint32_t mss) const;
    // RFC 6675 NextSeg rule (1): the first unSACKed, lost range at or above
    // max(snd_una, high_rxt) and below snd_nxt, at most mss long. Returns
    // false when there is none (the caller then sends new data, rule 2, or
    // falls back to rule 3 itself).
    bool next_lost(uint32_t snd_una, uint32_t snd_nxt, uint32_t high_rxt, uint32_t mss,
                   SeqRange *out) const;

    int count() const { return n_; }
    const SeqRange &range(int i) const { return r_[i]; }

  private:
    uint32_t merge(uint32_t start, uint32_t end);
    uint32_t lost_boundary(uint32_t snd_una, uint32_t mss) const;
    uint32_t unsacked_between(uint32_t snd_una, uint32_t from, uint32_t to) const;

    SeqRange r_[kMaxRanges];
    int n_ = 0;
    uint32_t sacked_ = 0;
};

} // namespace mars
