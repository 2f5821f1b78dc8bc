// txlog.cc: RACK's transmission log (rack.h): send-order entries, merging
// when full, splitting, and the pieces an entry still answers for.
#include "tcp/rack.h"

namespace mars {

namespace {

bool before(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
bool at_or_before(uint32_t a, uint32_t b) { return int32_t(a - b) <= 0; }

} // namespace

void TxLog::erase(int i) {
    for (int j = i + 1; j < n_; ++j) m_[j - 1] = m_[j];
    const uint16_t low = uint16_t((1u << i) - 1);
    rtx_ = uint16_t((rtx_ & low) | ((rtx_ >> (i + 1)) << i));
    lost_ = uint16_t((lost_ & low) | ((lost_ >> (i + 1)) << i));
    --n_;
}

void TxLog::prune(uint32_t snd_una) {
    for (int i = 0; i < n_;) {
        if (at_or_before(m_[i].end, snd_una)) erase(i);
        else ++i;
    }
}

bool TxLog::merge_one() {
    for (int i = 0; i + 1 < n_; ++i) {
        if (m_[i].end != m_[i + 1].start || is_rtx(i) != is_rtx(i + 1) || is_lost(i) != is_lost(i + 1)) continue;
        m_[i].end = m_[i + 1].end;
        m_[i].last_us = m_[i + 1].last_us; // first_us stays the earlier one
        erase(i + 1);
        return true;
    }
    return false;
}

bool TxLog::has_room(uint32_t snd_una) {
    if (n_ < kMax) return true;
    prune(snd_una);
    return n_ < kMax || merge_one();
}

bool TxLog::record(uint32_t start, uint32_t end, uint32_t now_us, bool rtx, uint32_t snd_una) {
    if (n_ > 0) {
        TxMark &t = m_[n_ - 1];
        // Back to back in one burst: the same entry.
        if (t.end == start && t.last_us == now_us && is_rtx(n_ - 1) == rtx && !is_lost(n_ - 1)) {
            t.end = end;
            return true;
        }
    }
    if (!has_room(snd_una)) return false;
    m_[n_] = TxMark{start, end, now_us, now_us};
    if (rtx) rtx_ = uint16_t(rtx_ | (1u << n_));
    ++n_;
    return true;
}

bool TxLog::piece(int i, uint32_t from, uint32_t snd_una, const SackScoreboard &sb, SeqRange *out) const {
    const TxMark &e = m_[i];
    uint32_t a = from;
    if (before(a, e.start)) a = e.start;
    if (before(a, snd_una)) a = snd_una;
    while (before(a, e.end)) {
        bool skipped = false;
        for (int k = 0; k < sb.count() && !skipped; ++k) {
            const SeqRange &r = sb.range(k);
            if (at_or_before(r.start, a) && before(a, r.end)) a = r.end, skipped = true;
        }
        for (int j = i + 1; j < n_ && !skipped; ++j) {
            if (at_or_before(m_[j].start, a) && before(a, m_[j].end)) a = m_[j].end, skipped = true;
        }
        if (skipped) continue;
        uint32_t b = e.end;
        for (int k = 0; k < sb.count(); ++k)
            if (before(a, sb.range(k).start) && before(sb.range(k).start, b)) b = sb.range(k).start;
        for (int j = i + 1; j < n_; ++j)
            if (before(a, m_[j].start) && before(m_[j].start, b)) b = m_[j].start;
        *out = SeqRange{a, b};
        return true;
    }
    return false;
}

bool TxLog::split(int i, uint32_t seq, uint32_t snd_una) {
    // Full: no split (pruning would move entry i under the caller, merging
    // could undo the split); the caller waits for ACKs to make room.
    (void)snd_una;
    if (n_ == kMax || !(before(m_[i].start, seq) && before(seq, m_[i].end))) return false;
    for (int j = n_; j > i + 1; --j) m_[j] = m_[j - 1];
    // Bits above i move up by one; the new entry i+1 copies entry i's.
    const uint16_t low = uint16_t((1u << (i + 1)) - 1);
    rtx_ = uint16_t((rtx_ & low) | ((rtx_ & ~low) << 1) | (is_rtx(i) ? (1u << (i + 1)) : 0));
    lost_ = uint16_t((lost_ & low) | ((lost_ & ~low) << 1) | (is_lost(i) ? (1u << (i + 1)) : 0));
    m_[i + 1] = m_[i];
    m_[i + 1].start = seq;
    m_[i].end = seq;
    ++n_;
    return true;
}

int TxLog::latest_overlapping(uint32_t start, uint32_t end) const {
    for (int i = n_ - 1; i >= 0; --i)
        if (before(m_[i].start, end) && before(start, m_[i].end)) return i;
    return -1;
}

} // namespace mars
