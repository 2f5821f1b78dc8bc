// sack.cc: the sender's SACK scoreboard (RFC 2018 blocks, RFC 6675 IsLost,
// SetPipe and NextSeg rule 1).
//
// Ranges are kept sorted and disjoint, with adjacent ranges merged, so every
// stored range is a maximal SACKed run. All queries work on offsets from
// snd.una or on signed sequence differences, which is correct as long as
// everything lies within 2^31 bytes of snd.una (the TCP window guarantees it).
#include "tcp/sack.h"

namespace mars {

namespace {

bool before(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
bool at_or_before(uint32_t a, uint32_t b) { return int32_t(a - b) <= 0; }
uint32_t later(uint32_t a, uint32_t b) { return before(a, b) ? b : a; }
uint32_t earlier(uint32_t a, uint32_t b) { return before(a, b) ? a : b; }
// Offset of seq from base, 0 for anything below base.
uint32_t offset(uint32_t seq, uint32_t base) { return before(seq, base) ? 0 : seq - base; }

} // namespace

void SackScoreboard::clear() {
    n_ = 0;
    sacked_ = 0;
}

void SackScoreboard::advance(uint32_t snd_una) {
    int drop = 0;
    while (drop < n_ && at_or_before(r_[drop].end, snd_una)) {
        sacked_ -= r_[drop].end - r_[drop].start;
        ++drop;
    }
    if (drop > 0) {
        for (int i = drop; i < n_; ++i) r_[i - drop] = r_[i];
        n_ -= drop;
    }
    if (n_ > 0 && before(r_[0].start, snd_una)) {
        sacked_ -= snd_una - r_[0].start;
        r_[0].start = snd_una;
    }
}

uint32_t SackScoreboard::update(uint32_t snd_una, uint32_t snd_nxt, const SeqRange *blocks,
                                int n) {
    uint32_t added = 0;
    for (int b = 0; b < n; ++b) {
        uint32_t start = blocks[b].start, end = blocks[b].end;
        // Only blocks that end inside (snd_una, snd_nxt] say anything new;
        // a block straddling snd_una contributes its part above it.
        if (!before(start, end) || !before(snd_una, end) || before(snd_nxt, end)) continue;
        if (before(start, snd_una)) start = snd_una;
        added += merge(start, end);
    }
    return added;
}

// Inserts [start, end) into the sorted list, merging with every range it
// overlaps or touches. Returns the bytes it covered that were not SACKed.
uint32_t SackScoreboard::merge(uint32_t start, uint32_t end) {
    // First range that ends at or after start (touching counts).
    int lo = 0;
    while (lo < n_ && before(r_[lo].end, start)) ++lo;
    // One past the last range that starts at or before end.
    int hi = lo;
    while (hi < n_ && at_or_before(r_[hi].start, end)) ++hi;

    uint32_t covered_before = 0;
    for (int i = lo; i < hi; ++i) {
        uint32_t s = later(r_[i].start, start), e = earlier(r_[i].end, end);
        if (before(s, e)) covered_before += e - s;
    }
    uint32_t added = (end - start) - covered_before;

    if (hi > lo) {
        // Collapse r_[lo, hi) and the new block into r_[lo].
        SeqRange merged{earlier(r_[lo].start, start), later(r_[hi - 1].end, end)};
        for (int i = lo; i < hi; ++i) sacked_ -= r_[i].end - r_[i].start;
        r_[lo] = merged;
        sacked_ += merged.end - merged.start;
        int gone = hi - lo - 1;
        for (int i = hi; i < n_; ++i) r_[i - gone] = r_[i];
        n_ -= gone;
        return added;
    }
    // A new range at position lo. When full, the highest range is dropped
    // (or the new one, if it would itself be the highest).
    if (n_ == kMaxRanges) {
        if (lo == n_) return added;
        sacked_ -= r_[n_ - 1].end - r_[n_ - 1].start;
        --n_;
    }
    for (int i = n_; i > lo; --i) r_[i] = r_[i - 1];
    r_[lo] = SeqRange{start, end};
    sacked_ += end - start;
    ++n_;
    return added;
}

bool SackScoreboard::is_sacked(uint32_t seq) const {
    for (int i = 0; i < n_; ++i) {
        if (before(seq, r_[i].start)) return false;
        if (before(seq, r_[i].end)) return true;
    }
    return false;
}

uint32_t SackScoreboard::high_sacked(uint32_t snd_una) const {
    return n_ > 0 ? r_[n_ - 1].end : snd_una;
}

bool SackScoreboard::is_lost(uint32_t seq, uint32_t mss) const {
    const uint64_t threshold = uint64_t(kDupThresh - 1) * mss;
    uint32_t ranges_above = 0;
    uint64_t bytes_above = 0;
    for (int i = n_ - 1; i >= 0; --i) {
        if (at_or_before(r_[i].end, seq + 1)) break; // nothing above seq from here down
        if (before(seq, r_[i].start)) {
            ++ranges_above;
            bytes_above += r_[i].end - r_[i].start;
        } else {
            bytes_above += r_[i].end - (seq + 1);
        }
        if (ranges_above >= kDupThresh || bytes_above > threshold) return true;
    }
    return false;
}

// IsLost(seq) can only turn from true to false as seq grows, so the lost
// sequence numbers are exactly [snd_una, boundary). Returns that boundary as
// an offset from snd_una (0: nothing is lost).
uint32_t SackScoreboard::lost_boundary(uint32_t snd_una, uint32_t mss) const {
    uint32_t boundary = 0;
    // Rule 1: kDupThresh ranges lie wholly above seq while seq is below the
    // start of the kDupThresh-th highest range.
    if (n_ >= int(kDupThresh)) boundary = offset(r_[n_ - int(kDupThresh)].start, snd_una);
    // Rule 2: find the highest range where the SACKed bytes above seq can
    // exceed the threshold; inside it the count drops by one per byte.
    const uint64_t threshold = uint64_t(kDupThresh - 1) * mss;
    uint64_t above = 0; // bytes in the ranges above range i
    for (int i = n_ - 1; i >= 0; --i) {
        uint64_t len = r_[i].end - r_[i].start;
        if (above + len > threshold) {
            // seq in range i is lost while (end - 1 - seq) + above > threshold.
            uint32_t b = offset(r_[i].end - 1 - uint32_t(threshold - above), snd_una);
            if (b > boundary) boundary = b;
            break;
        }
        above += len;
    }
    return boundary;
}

// Unsacked bytes in [snd_una + from, snd_una + to), offsets from snd_una.
uint32_t SackScoreboard::unsacked_between(uint32_t snd_una, uint32_t from, uint32_t to) const {
    if (from >= to) return 0;
    uint32_t holes = to - from;
    for (int i = 0; i < n_; ++i) {
        uint32_t s = offset(r_[i].start, snd_una), e = offset(r_[i].end, snd_una);
        if (s < from) s = from;
        if (e > to) e = to;
        if (s < e) holes -= e - s;
    }
    return holes;
}

uint32_t SackScoreboard::pipe(uint32_t snd_una, uint32_t snd_nxt, uint32_t high_rxt,
                              uint32_t mss) const {
    uint32_t flight = offset(snd_nxt, snd_una);
    uint32_t lost = lost_boundary(snd_una, mss);
    if (lost > flight) lost = flight;
    uint32_t rxt = offset(high_rxt, snd_una);
    if (rxt > flight) rxt = flight;
    // Each unSACKed byte counts once unless lost, plus once more if it was
    // retransmitted.
    return unsacked_between(snd_una, lost, flight) + unsacked_between(snd_una, 0, rxt);
}

bool SackScoreboard::next_lost(uint32_t snd_una, uint32_t snd_nxt, uint32_t high_rxt,
                               uint32_t mss, SeqRange *out) const {
    uint32_t flight = offset(snd_nxt, snd_una);
    uint32_t lost = lost_boundary(snd_una, mss);
    if (lost > flight) lost = flight;
    uint32_t at = offset(high_rxt, snd_una);
    for (int i = 0; i < n_ && at < lost; ++i) {
        uint32_t s = offset(r_[i].start, snd_una), e = offset(r_[i].end, snd_una);
        if (e <= at) continue;
        if (s <= at) {
            at = e; // inside a SACKed range: skip past it
            continue;
        }
        // at is in the hole before range i.
        uint32_t end = s;
        if (end - at > mss) end = at + mss;
        *out = SeqRange{snd_una + at, snd_una + end};
        return true;
    }
    // Lost bytes always lie below some SACKed range, so nothing is left here.
    return false;
}

} // namespace mars
