// digest.cc: CRC32C range digests over a socket's ring (see digest.h).
#include "digest.h"

#include <algorithm>
#include <cerrno>

#include <isa-l/crc.h>

namespace dti::engine::digest {

namespace {

// Distance from a to b in the free-running counter; "b is at or after a"
// when it is below kMaxLen.
inline uint32_t dist(uint32_t a, uint32_t b) { return b - a; }

// ISA-L takes an int length: feed it in pieces well below INT_MAX.
inline uint32_t crc_flat(uint32_t raw, const uint8_t *p, uint64_t n)
{
    constexpr uint64_t kPiece = 1u << 30;
    while (n > 0) {
        const uint64_t k = std::min(n, kPiece);
        raw = crc32_iscsi(const_cast<uint8_t *>(p), int(k), raw);
        p += k;
        n -= k;
    }
    return raw;
}

} // namespace

uint32_t crc_ring(uint32_t raw, const Ring &r, uint32_t from, uint32_t n)
{
    const uint32_t off = (r.origin + from) & r.mask;
    const uint32_t first = std::min(n, r.mask + 1 - off);
    raw = crc_flat(raw, r.base + off, first);
    if (n > first)
        raw = crc_flat(raw, r.base, n - first);
    return raw;
}

uint32_t crc32c(const void *p, uint64_t n) { return ~crc_flat(kInit, static_cast<const uint8_t *>(p), n); }

int Direction::add(const Request &q, const Ring &r, uint32_t floor, uint32_t avail, Done *done,
                   uint64_t *digested)
{
    if (q.len == 0 || q.len > kMaxLen)
        return -EINVAL;
    // The start must still be in the ring (at or after floor) and not absurdly
    // far ahead; the end must stay within half the counter of floor.
    const uint32_t start_d = dist(floor, q.start);
    if (start_d >= kMaxLen)
        return -ERANGE;
    if (uint64_t(start_d) + q.len > kMaxLen)
        return -EINVAL;
    const bool chain = q.flags & kChain;
    if (chain && chain_on_ && q.start != chain_end_)
        return -EINVAL;
    if (n_ == kMaxRanges)
        return -EBUSY;
    Range g{q.ctx, q.tag, q.start, q.start + q.len, kInit, q.expected, q.flags, false};
    if (chain) {
        bool behind = false;
        for (uint32_t i = 0; i < n_; i++)
            behind = behind || (ranges_[i].flags & kChain);
        g.wait_init = behind;
        if (!chain_on_)
            chain_raw_ = kInit; // a new chain
        g.raw = chain_raw_;
        chain_on_ = true;
        chain_end_ = g.end;
    }
    // What is already in the ring: [start, min(end, avail)).
    const uint32_t avail_d = dist(floor, avail);
    if (start_d < avail_d) {
        const uint32_t n = std::min(avail_d - start_d, q.len);
        g.raw = crc_ring(g.raw, r, q.start, n);
        g.next += n;
        *digested += n;
    }
    ranges_[n_++] = g;
    if (g.next == g.end) {
        finish(n_ - 1, done);
        return 1;
    }
    return 0;
}

uint32_t Direction::advance(const Ring &r, uint32_t avail, Done *out, uint64_t *digested)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_;) {
        Range &g = ranges_[i];
        const uint32_t ahead = dist(g.next, avail); // new bytes for this range
        if (ahead == 0 || ahead >= kMaxLen) {
            i++;
            continue;
        }
        const uint32_t n = std::min(ahead, dist(g.next, g.end));
        if (g.wait_init) { // its predecessor in the chain finished earlier in this loop
            g.raw = chain_raw_;
            g.wait_init = false;
        }
        g.raw = crc_ring(g.raw, r, g.next, n);
        g.next += n;
        *digested += n;
        if (g.next == g.end) {
            finish(i, &out[k++]);
            continue; // the next range moved into slot i
        }
        i++;
    }
    return k;
}

uint32_t Direction::end_beyond(uint32_t avail, int32_t res, Done *out)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_;) {
        if (dist(avail, ranges_[i].end) != 0 && dist(avail, ranges_[i].end) < kMaxLen) {
            out[k++] = Done{ranges_[i].ctx, ranges_[i].tag, res, 0};
            if (ranges_[i].flags & kChain)
                chain_on_ = false; // a broken chain cannot continue
            remove(i);
            continue;
        }
        i++;
    }
    return k;
}

uint32_t Direction::cancel(uint64_t ctx_mask, int32_t res, Done *out)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n_;) {
        if (ctx_mask >> (ranges_[i].ctx & 63) & 1) {
            out[k++] = Done{ranges_[i].ctx, ranges_[i].tag, res, 0};
            if (ranges_[i].flags & kChain)
                chain_on_ = false;
            remove(i);
            continue;
        }
        i++;
    }
    return k;
}

void Direction::finish(uint32_t i, Done *out)
{
    const Range &g = ranges_[i];
    const uint32_t crc = ~g.raw;
    const bool bad = (g.flags & kCheck) && crc != g.expected;
    *out = Done{g.ctx, g.tag, bad ? -EBADMSG : 0, crc};
    if (g.flags & kChain)
        chain_raw_ = g.raw;
    remove(i);
}

void Direction::remove(uint32_t i)
{
    for (uint32_t j = i + 1; j < n_; j++)
        ranges_[j - 1] = ranges_[j];
    n_--;
}

} // namespace dti::engine::digest
