// Tests of the out-of-order queue: insert cases, limits, FIN, drain, SACK
// blocks, frame ownership (every frame released exactly once) and random
// reassembly against the original byte stream.
#include "ooo.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace mars {
namespace {

// Counts releases per frame handle; alloc/transmit are not used by the queue.
class FakeIo : public PacketIo {
  public:
    uint16_t alloc(PacketRef *, uint16_t) override { return 0; }
    uint16_t transmit(PacketRef *, uint16_t) override { return 0; }
    void release(PacketRef *frames, uint16_t n) override {
        ++release_calls;
        for (uint16_t i = 0; i < n; ++i) ++released[frames[i].handle];
    }
    std::map<void *, int> released;
    int release_calls = 0;
};

constexpr uint32_t kHeader = 54; // bytes of headers in front of the payload

// A stream of bytes and frames carved from it. Each frame is its own buffer
// (headers + a copy of the payload), as a NIC would deliver it.
struct Harness {
    explicit Harness(uint32_t base_seq, uint32_t stream_len, uint32_t pool_frames = 64)
        : base(base_seq), stream(stream_len) {
        for (uint32_t i = 0; i < stream_len; ++i) stream[i] = uint8_t(i * 7 + (i >> 8) + 3);
        EXPECT_TRUE(pool.init(pool_frames));
    }

    struct Frame {
        std::vector<uint8_t> bytes;
        PacketRef ref;
        uint32_t seq, len;
        bool fin;
    };

    // A frame carrying stream bytes [off, off+len) (+FIN).
    Frame *make(uint32_t off, uint32_t len, bool fin = false) {
        auto f = std::make_unique<Frame>();
        f->bytes.assign(kHeader + len, 0xee);
        std::copy(stream.begin() + off, stream.begin() + off + len, f->bytes.begin() + kHeader);
        f->ref = PacketRef{f.get(), f->bytes.data(), uint16_t(kHeader + len), 0, 0};
        f->seq = base + off;
        f->len = len;
        f->fin = fin;
        frames.push_back(std::move(f));
        return frames.back().get();
    }

    // Offers a frame to q; frames the queue does not keep are released here
    // (the caller's duty), so every frame ends up released exactly once.
    OooQueue::Insert offer(OooQueue &q, uint32_t off, uint32_t len, bool fin = false,
                           uint32_t max_frames = 1000) {
        Frame *f = make(off, len, fin);
        auto r = q.insert(pool, io, f->seq, f->ref.data + kHeader, len, fin, f->ref, max_frames);
        if (r != OooQueue::Insert::kQueued) io.release(&f->ref, 1);
        return r;
    }

    uint32_t drain(OooQueue &q, uint32_t rcv_nxt, bool *fin) {
        return q.drain(pool, io, rcv_nxt, fin, [&](const uint8_t *p, uint32_t n) {
            delivered.insert(delivered.end(), p, p + n);
        });
    }

    bool released(const Frame *f) const {
        auto it = io.released.find(f->ref.handle);
        return it != io.released.end() && it->second > 0;
    }

    // Every frame made so far was released exactly once.
    void expect_all_released_once() const {
        for (auto &f : frames) {
            auto it = io.released.find(f->ref.handle);
            ASSERT_NE(it, io.released.end()) << "leaked frame at seq " << f->seq;
            EXPECT_EQ(it->second, 1) << "frame at seq " << f->seq;
        }
        EXPECT_EQ(io.released.size(), frames.size());
    }

    std::vector<uint8_t> expected(uint32_t off, uint32_t len) const {
        return std::vector<uint8_t>(stream.begin() + off, stream.begin() + off + len);
    }

    uint32_t base;
    std::vector<uint8_t> stream;
    OooPool pool;
    FakeIo io;
    std::vector<std::unique_ptr<Frame>> frames;
    std::vector<uint8_t> delivered;
};

using Insert = OooQueue::Insert;

std::vector<std::pair<uint32_t, uint32_t>> blocks(const Harness &h, const OooQueue &q,
                                                  int max = 8) {
    SeqRange out[8];
    int n = q.sack_blocks(h.pool, out, max);
    std::vector<std::pair<uint32_t, uint32_t>> v;
    for (int i = 0; i < n; ++i) v.emplace_back(out[i].start - h.base, out[i].end - h.base);
    return v;
}

using Blocks = std::vector<std::pair<uint32_t, uint32_t>>;

TEST(OooPool, InitAndCapacity) {
    OooPool pool;
    ASSERT_TRUE(pool.init(16));
    EXPECT_EQ(pool.capacity(), 16u);
    EXPECT_EQ(pool.used(), 0u);
}

TEST(Ooo, InsertFrontMiddleEnd) {
    Harness h(1000, 10000);
    OooQueue q;
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(h.offer(q, 500, 100), Insert::kQueued);  // first
    EXPECT_EQ(h.offer(q, 900, 100), Insert::kQueued);  // end
    EXPECT_EQ(h.offer(q, 100, 100), Insert::kQueued);  // front
    EXPECT_EQ(h.offer(q, 700, 100), Insert::kQueued);  // middle
    EXPECT_EQ(q.frames(), 4u);
    EXPECT_EQ(h.pool.used(), 4u);
    // Most recently added to first (RFC 2018 4), not in sequence order.
    EXPECT_EQ(blocks(h, q), (Blocks{{700, 800}, {100, 200}, {900, 1000}, {500, 600}}));
    // Fill everything from 0: drains in order.
    bool fin = true;
    uint32_t nxt = h.drain(q, h.base + 0, &fin);
    EXPECT_EQ(nxt, h.base); // gap at [0, 100)
    EXPECT_FALSE(fin);
    for (uint32_t off : {0u, 200u, 300u, 400u, 600u, 800u}) {
        EXPECT_EQ(h.offer(q, off, 100), Insert::kQueued);
    }
    nxt = h.drain(q, h.base, &fin);
    EXPECT_EQ(nxt, h.base + 1000);
    EXPECT_EQ(h.delivered, h.expected(0, 1000));
    EXPECT_TRUE(q.empty());
    EXPECT_EQ(q.frames(), 0u);
    EXPECT_EQ(h.pool.used(), 0u);
    h.expect_all_released_once();
}

TEST(Ooo, ExactDuplicate) {
    Harness h(5, 1000);
    OooQueue q;
    EXPECT_EQ(h.offer(q, 100, 100), Insert::kQueued);
    EXPECT_EQ(h.offer(q, 100, 100), Insert::kDuplicate);
    EXPECT_EQ(h.offer(q, 120, 30), Insert::kDuplicate); // inside
    EXPECT_EQ(q.frames(), 1u);
    EXPECT_EQ(h.pool.used(), 1u);
    q.clear(h.pool, h.io);
    EXPECT_EQ(h.pool.used(), 0u);
    h.expect_all_released_once();
}

TEST(Ooo, PartialOverlapsKeepOlderBytes) {
    Harness h(0, 1000);
    OooQueue q;
    ASSERT_EQ(h.offer(q, 200, 100), Insert::kQueued);
    // Overlaps the front of the queued segment: trimmed to [150, 200).
    ASSERT_EQ(h.offer(q, 150, 100), Insert::kQueued);
    // Overlaps its back: trimmed to [300, 350).
    ASSERT_EQ(h.offer(q, 250, 100), Insert::kQueued);
    EXPECT_EQ(q.frames(), 3u);
    EXPECT_EQ(blocks(h, q), (Blocks{{150, 350}}));
    // Spans a gap between two queued ones: only the hole is new.
    ASSERT_EQ(h.offer(q, 400, 50), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 340, 70), Insert::kQueued); // new bytes [350, 400)
    EXPECT_EQ(blocks(h, q), (Blocks{{150, 450}}));
    EXPECT_EQ(q.frames(), 5u);
    // The older copy wins: corrupt nothing; delivered bytes equal the stream.
    ASSERT_EQ(h.offer(q, 0, 150), Insert::kQueued);
    bool fin = false;
    EXPECT_EQ(h.drain(q, 0, &fin), 450u);
    EXPECT_EQ(h.delivered, h.expected(0, 450));
    h.expect_all_released_once();
}

TEST(Ooo, NewSegmentCoversSeveralQueued) {
    Harness h(0, 2000);
    OooQueue q;
    ASSERT_EQ(h.offer(q, 100, 10), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 120, 10), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 150, 10), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 300, 10), Insert::kQueued);
    auto *a = h.frames[0].get(), *b = h.frames[1].get(), *c = h.frames[2].get();
    ASSERT_EQ(h.offer(q, 90, 100), Insert::kQueued); // covers the first three
    EXPECT_TRUE(h.released(a));
    EXPECT_TRUE(h.released(b));
    EXPECT_TRUE(h.released(c));
    EXPECT_FALSE(h.released(h.frames[3].get()));
    EXPECT_EQ(q.frames(), 2u);
    EXPECT_EQ(h.pool.used(), 2u);
    EXPECT_EQ(blocks(h, q), (Blocks{{90, 190}, {300, 310}}));
    // Covers one and overlaps the front of the next: both effects at once.
    ASSERT_EQ(h.offer(q, 50, 140), Insert::kQueued); // replaces [90, 190)
    EXPECT_EQ(blocks(h, q), (Blocks{{50, 190}, {300, 310}}));
    ASSERT_EQ(h.offer(q, 200, 105), Insert::kQueued); // [200, 300) new
    EXPECT_EQ(blocks(h, q), (Blocks{{200, 310}, {50, 190}}));
    ASSERT_EQ(h.offer(q, 195, 200), Insert::kQueued); // covers [200,300) and [300,310)
    EXPECT_EQ(blocks(h, q), (Blocks{{195, 395}, {50, 190}}));
    EXPECT_EQ(q.frames(), 2u);
    bool fin = false;
    ASSERT_EQ(h.offer(q, 0, 50), Insert::kQueued);
    EXPECT_EQ(h.drain(q, 0, &fin), 190u);
    EXPECT_EQ(h.delivered, h.expected(0, 190));
    q.clear(h.pool, h.io);
    h.expect_all_released_once();
}

TEST(Ooo, FinWithData) {
    Harness h(0, 1000);
    OooQueue q;
    ASSERT_EQ(h.offer(q, 200, 100, true), Insert::kQueued);
    bool fin = false;
    ASSERT_EQ(h.offer(q, 100, 100), Insert::kQueued);
    EXPECT_EQ(h.drain(q, 50, &fin), 50u); // gap [50,100): FIN not in order
    EXPECT_FALSE(fin);
    EXPECT_EQ(h.drain(q, 100, &fin), 300u);
    EXPECT_TRUE(fin);
    EXPECT_EQ(h.delivered, h.expected(100, 200));
    h.expect_all_released_once();
}

TEST(Ooo, FinOnlySegments) {
    Harness h(0, 1000);
    OooQueue q;
    // A bare FIN right after queued data attaches to it.
    ASSERT_EQ(h.offer(q, 100, 100), Insert::kQueued);
    EXPECT_EQ(h.offer(q, 200, 0, true), Insert::kDuplicate);
    EXPECT_EQ(q.frames(), 1u);
    bool fin = false;
    EXPECT_EQ(h.drain(q, 100, &fin), 200u);
    EXPECT_TRUE(fin);

    // A bare FIN with a gap before it is held as a marker, then absorbed by
    // data ending at it.
    OooQueue q2;
    EXPECT_EQ(h.offer(q2, 500, 0, true), Insert::kQueued);
    EXPECT_EQ(q2.frames(), 1u);
    EXPECT_EQ(blocks(h, q2), Blocks{}); // no data: no SACK block
    EXPECT_EQ(h.offer(q2, 500, 0, true), Insert::kDuplicate);
    ASSERT_EQ(h.offer(q2, 400, 100), Insert::kQueued);
    EXPECT_EQ(q2.frames(), 1u); // the marker was freed, its FIN kept
    EXPECT_EQ(h.drain(q2, 400, &fin), 500u);
    EXPECT_TRUE(fin);

    // A marker stays when data ends short of it; drain reports it when reached.
    OooQueue q3;
    EXPECT_EQ(h.offer(q3, 700, 0, true), Insert::kQueued);
    ASSERT_EQ(h.offer(q3, 600, 50), Insert::kQueued);
    EXPECT_EQ(h.drain(q3, 600, &fin), 650u);
    EXPECT_FALSE(fin);
    ASSERT_EQ(h.offer(q3, 650, 50), Insert::kQueued);
    EXPECT_EQ(h.drain(q3, 650, &fin), 700u);
    EXPECT_TRUE(fin);
    EXPECT_TRUE(q3.empty());

    // A FIN inside queued data is ignored; a duplicate carrying the FIN that
    // ends where queued data ends attaches it.
    OooQueue q4;
    ASSERT_EQ(h.offer(q4, 800, 100), Insert::kQueued);
    EXPECT_EQ(h.offer(q4, 850, 0, true), Insert::kDuplicate);
    EXPECT_EQ(h.drain(q4, 800, &fin), 900u);
    EXPECT_FALSE(fin);
    ASSERT_EQ(h.offer(q4, 950, 50), Insert::kQueued);
    EXPECT_EQ(h.offer(q4, 960, 40, true), Insert::kDuplicate);
    EXPECT_EQ(h.drain(q4, 950, &fin), 1000u);
    EXPECT_TRUE(fin);
    h.expect_all_released_once();
}

TEST(Ooo, PerConnectionShare) {
    Harness h(0, 1000, 100);
    OooQueue q;
    const uint32_t share = 3;
    EXPECT_EQ(h.offer(q, 100, 10, false, share), Insert::kQueued);
    EXPECT_EQ(h.offer(q, 200, 10, false, share), Insert::kQueued);
    EXPECT_EQ(h.offer(q, 300, 10, false, share), Insert::kQueued);
    EXPECT_EQ(h.offer(q, 400, 10, false, share), Insert::kNoRoom);
    EXPECT_EQ(h.offer(q, 400, 0, true, share), Insert::kNoRoom);
    EXPECT_EQ(q.frames(), 3u);
    // Duplicates are still recognised when full.
    EXPECT_EQ(h.offer(q, 100, 10, false, share), Insert::kDuplicate);
    // A segment replacing queued ones fits even at the limit.
    EXPECT_EQ(h.offer(q, 150, 200, false, share), Insert::kQueued);
    EXPECT_EQ(q.frames(), 2u);
    EXPECT_EQ(blocks(h, q), (Blocks{{150, 350}, {100, 110}}));
    q.clear(h.pool, h.io);
    h.expect_all_released_once();
}

TEST(Ooo, PoolLimitAcrossConnections) {
    Harness h(0, 1000, 4);
    OooQueue a, b;
    EXPECT_EQ(h.offer(a, 100, 10), Insert::kQueued);
    EXPECT_EQ(h.offer(a, 200, 10), Insert::kQueued);
    EXPECT_EQ(h.offer(b, 100, 10), Insert::kQueued);
    EXPECT_EQ(h.offer(b, 200, 10), Insert::kQueued);
    EXPECT_EQ(h.pool.used(), 4u);
    EXPECT_EQ(h.offer(a, 300, 10), Insert::kNoRoom);
    EXPECT_EQ(h.offer(b, 300, 10), Insert::kNoRoom);
    // Replacing a queued segment needs no new slot.
    EXPECT_EQ(h.offer(b, 190, 30), Insert::kQueued);
    EXPECT_EQ(h.pool.used(), 4u);
    bool fin = false;
    h.offer(a, 0, 100); // kNoRoom: the core copies in-order data directly
    EXPECT_EQ(h.drain(a, 100, &fin), 110u);
    EXPECT_EQ(h.pool.used(), 3u);
    EXPECT_EQ(h.offer(b, 300, 10), Insert::kQueued);
    a.clear(h.pool, h.io);
    b.clear(h.pool, h.io);
    EXPECT_EQ(h.pool.used(), 0u);
    h.expect_all_released_once();
}

TEST(Ooo, SequenceWraparound) {
    Harness h(0xffffff00u, 1024);
    OooQueue q;
    // [0x80, 0x180) straddles 2^32 (base + 0x100 == 0).
    ASSERT_EQ(h.offer(q, 0x180, 0x80), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 0x80, 0x100), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 0xc0, 0x100), Insert::kDuplicate); // all of it is queued
    EXPECT_EQ(blocks(h, q), (Blocks{{0x80, 0x200}}));
    SeqRange out[2];
    ASSERT_EQ(q.sack_blocks(h.pool, out, 2), 1);
    EXPECT_EQ(out[0].start, 0xffffff80u);
    EXPECT_EQ(out[0].end, 0x100u);
    ASSERT_EQ(h.offer(q, 0x300, 0x10, true), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 0x1f0, 0x120), Insert::kQueued); // fills the gap, replaces the FIN segment
    bool fin = false;
    ASSERT_EQ(h.offer(q, 0, 0x80), Insert::kQueued);
    EXPECT_EQ(h.drain(q, h.base, &fin), h.base + 0x310);
    EXPECT_TRUE(fin);
    EXPECT_EQ(h.delivered, h.expected(0, 0x310));
    h.expect_all_released_once();
}

TEST(Ooo, DrainSkipsBytesBelowRcvNxtAndStopsAtGap) {
    Harness h(0, 1000);
    OooQueue q;
    ASSERT_EQ(h.offer(q, 100, 100), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 200, 100), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 400, 100), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 500, 50), Insert::kQueued);
    // In-order data up to 250 was copied directly by the core.
    bool fin = true;
    int calls_before = h.io.release_calls;
    EXPECT_EQ(h.drain(q, 250, &fin), 300u);
    EXPECT_FALSE(fin);
    EXPECT_EQ(h.delivered, h.expected(250, 50));
    EXPECT_EQ(h.io.release_calls, calls_before + 1); // released as one burst
    EXPECT_TRUE(h.released(h.frames[0].get()));
    EXPECT_TRUE(h.released(h.frames[1].get()));
    EXPECT_EQ(q.frames(), 2u);
    // A segment wholly below rcv_nxt is released without delivering.
    h.delivered.clear();
    EXPECT_EQ(h.drain(q, 600, &fin), 600u);
    EXPECT_TRUE(h.delivered.empty());
    EXPECT_TRUE(q.empty());
    h.expect_all_released_once();
}

TEST(Ooo, SackBlocksMostRecentFirstAndMaximal) {
    Harness h(0, 5000);
    OooQueue q;
    ASSERT_EQ(h.offer(q, 1000, 100), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 1100, 100), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 2000, 100), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 3000, 100), Insert::kQueued);
    ASSERT_EQ(h.offer(q, 4000, 100), Insert::kQueued);
    EXPECT_EQ(blocks(h, q), (Blocks{{4000, 4100}, {3000, 3100}, {2000, 2100}, {1000, 1200}}));
    ASSERT_EQ(h.offer(q, 1200, 100), Insert::kQueued);
    EXPECT_EQ(blocks(h, q), (Blocks{{1000, 1300}, {4000, 4100}, {3000, 3100}, {2000, 2100}}));
    EXPECT_EQ(blocks(h, q, 3), (Blocks{{1000, 1300}, {4000, 4100}, {3000, 3100}}));
    ASSERT_EQ(h.offer(q, 3050, 100), Insert::kQueued); // trimmed to [3100, 3150)
    EXPECT_EQ(blocks(h, q, 2), (Blocks{{3000, 3150}, {1000, 1300}}));
    EXPECT_EQ(h.offer(q, 2000, 50), Insert::kDuplicate); // a duplicate also leads
    EXPECT_EQ(blocks(h, q, 1), (Blocks{{2000, 2100}}));
    SeqRange none[1];
    EXPECT_EQ(q.sack_blocks(h.pool, none, 0), 0);
    q.clear(h.pool, h.io);
    EXPECT_EQ(blocks(h, q), Blocks{});
    h.expect_all_released_once();
}

// ---- random reassembly ------------------------------------------------------

// Returns how many arrivals the queue kept (to show the test exercised it).
int reassemble(uint32_t seed, uint32_t base, uint32_t share, uint32_t pool_frames) {
    int queued = 0;
    std::mt19937 rng(seed);
    const uint32_t total = 2000 + rng() % 6000;
    Harness h(base, total, pool_frames);
    OooQueue q;
    uint32_t rcv_nxt = base;
    bool fin_seen = false;
    std::vector<bool> have(total + 1, false); // bytes the queue holds or delivered

    // The core's part: in-order data is copied directly, the rest offered to
    // the queue, then the queue drained.
    uint32_t latest = UINT32_MAX; // offset of the last arrival the queue took
    auto arrive = [&](uint32_t off, uint32_t len) {
        latest = UINT32_MAX;
        bool fin = off + len == total;
        uint32_t seq = base + off, end = seq + len;
        if (int32_t(end - rcv_nxt) < 0 || (end == rcv_nxt && !fin) || fin_seen) {
            h.io.release(&h.make(off, len, fin)->ref, 1); // old duplicate
            return;
        }
        if (int32_t(seq - rcv_nxt) <= 0) {
            auto *f = h.make(off, len, fin);
            uint32_t skip = rcv_nxt - seq;
            h.delivered.insert(h.delivered.end(), f->ref.data + kHeader + skip,
                               f->ref.data + kHeader + len);
            rcv_nxt = end;
            h.io.release(&f->ref, 1);
            if (fin) fin_seen = true;
        } else {
            Insert r = h.offer(q, off, len, fin, share);
            queued += r == Insert::kQueued;
            if (r != Insert::kNoRoom) {
                std::fill(have.begin() + off, have.begin() + off + len, true);
                latest = off;
            }
        }
        bool fin_now = false;
        rcv_nxt = h.drain(q, rcv_nxt, &fin_now);
        if (fin_now) {
            ASSERT_EQ(rcv_nxt, base + total) << "seed " << seed;
            fin_seen = true;
        }
        ASSERT_LE(q.frames(), share);
        ASSERT_EQ(h.pool.used(), q.frames());
        // SACK blocks are disjoint, maximal runs of held data above
        // rcv_nxt, the one holding the latest queued arrival first.
        SeqRange blk[8];
        int n = q.sack_blocks(h.pool, blk, 8);
        if (latest != UINT32_MAX && int32_t(base + latest - rcv_nxt) > 0) {
            ASSERT_GT(n, 0) << "seed " << seed;
            ASSERT_TRUE(int32_t(blk[0].start - (base + latest)) <= 0 &&
                        int32_t(base + latest - blk[0].end) < 0)
                << "seed " << seed << ": first block misses the latest arrival at " << latest;
        }
        for (int i = 0; i < n; ++i) {
            ASSERT_LT(int32_t(rcv_nxt - blk[i].start), 0) << "seed " << seed;
            ASSERT_LT(int32_t(blk[i].start - blk[i].end), 0);
            const uint32_t lo = blk[i].start - base, hi = blk[i].end - base;
            for (uint32_t b = lo; b < hi; ++b) ASSERT_TRUE(have[b]) << "seed " << seed << " block byte " << b;
            ASSERT_FALSE(have[lo - 1]) << "seed " << seed << ": block " << lo << "-" << hi << " not maximal";
            ASSERT_TRUE(hi == total || !have[hi]) << "seed " << seed << ": block " << lo << "-" << hi << " not maximal";
            for (int j = 0; j < i; ++j)
                ASSERT_TRUE(int32_t(blk[i].start - blk[j].end) > 0 ||
                            int32_t(blk[j].start - blk[i].end) > 0);
        }
    };

    // Random pieces in random order with duplicates and overlaps.
    std::vector<std::pair<uint32_t, uint32_t>> pieces;
    for (uint32_t off = 0; off < total;) {
        uint32_t len = std::min(total - off, 1 + uint32_t(rng() % 300));
        pieces.emplace_back(off, len);
        off += len;
    }
    for (int extra = int(rng() % 80); extra > 0; --extra) {
        uint32_t off = rng() % total;
        uint32_t len = std::min(total - off, 1 + uint32_t(rng() % 600));
        pieces.emplace_back(off, len);
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    for (auto &p : pieces) {
        arrive(p.first, p.second);
        if (::testing::Test::HasFatalFailure()) return queued;
    }
    // The sender retransmits from rcv_nxt until everything is in.
    while (!fin_seen) {
        uint32_t off = rcv_nxt - base;
        arrive(off, std::min(total - off, 536u));
        if (::testing::Test::HasFatalFailure()) return queued;
    }
    EXPECT_EQ(rcv_nxt, base + total);
    EXPECT_EQ(h.delivered, h.stream) << "seed " << seed;
    q.clear(h.pool, h.io);
    EXPECT_EQ(h.pool.used(), 0u);
    h.expect_all_released_once();
    return queued;
}

TEST(Ooo, RandomReassembly) {
    int queued = 0;
    for (uint32_t seed = 1; seed <= 150; ++seed) {
        queued += reassemble(seed, seed * 2654435761u, 1000, 1000);
        if (HasFailure()) return;
    }
    EXPECT_GT(queued, 500);
}

TEST(Ooo, RandomReassemblyAcrossWrap) {
    int queued = 0;
    for (uint32_t seed = 1; seed <= 150; ++seed) {
        queued += reassemble(seed, 0xffffffffu - seed * 37, 1000, 1000);
        if (HasFailure()) return;
    }
    EXPECT_GT(queued, 500);
}

TEST(Ooo, RandomReassemblyUnderTightLimits) {
    int queued = 0;
    for (uint32_t seed = 1; seed <= 150; ++seed) {
        queued += reassemble(seed, 0xfffff000u + seed, 1 + seed % 8, 1 + seed % 5);
        if (HasFailure()) return;
    }
    EXPECT_GT(queued, 500);
}

} // namespace
} // namespace mars
