// Tests of the SACK scoreboard: merging, filtering, trimming, capacity, and
// the RFC 6675 queries against a brute-force per-byte model.
#include "sack.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace mars {
namespace {

std::vector<std::pair<uint32_t, uint32_t>> ranges_of(const SackScoreboard &sb) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (int i = 0; i < sb.count(); ++i) out.emplace_back(sb.range(i).start, sb.range(i).end);
    return out;
}

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

TEST(Sack, MergesOverlappingAdjacentAndOutOfOrder) {
    SackScoreboard sb;
    const uint32_t una = 1000, nxt = 10000;
    SeqRange b1{3000, 4000};
    EXPECT_EQ(sb.update(una, nxt, &b1, 1), 1000u);
    SeqRange b2{2000, 2500}; // below, out of order
    EXPECT_EQ(sb.update(una, nxt, &b2, 1), 500u);
    EXPECT_EQ(ranges_of(sb), (Ranges{{2000, 2500}, {3000, 4000}}));
    SeqRange b3{4000, 4500}; // adjacent above
    EXPECT_EQ(sb.update(una, nxt, &b3, 1), 500u);
    EXPECT_EQ(ranges_of(sb), (Ranges{{2000, 2500}, {3000, 4500}}));
    SeqRange b4{2400, 3100}; // overlaps both: joins them
    EXPECT_EQ(sb.update(una, nxt, &b4, 1), 500u);
    EXPECT_EQ(ranges_of(sb), (Ranges{{2000, 4500}}));
    SeqRange b5{2100, 2200}; // inside: nothing new
    EXPECT_EQ(sb.update(una, nxt, &b5, 1), 0u);
    SeqRange b6{1500, 2000}; // adjacent below
    EXPECT_EQ(sb.update(una, nxt, &b6, 1), 500u);
    EXPECT_EQ(ranges_of(sb), (Ranges{{1500, 4500}}));
    EXPECT_EQ(sb.sacked_bytes(), 3000u);
    EXPECT_TRUE(sb.is_sacked(1500));
    EXPECT_TRUE(sb.is_sacked(4499));
    EXPECT_FALSE(sb.is_sacked(4500));
    EXPECT_FALSE(sb.is_sacked(1499));
    EXPECT_EQ(sb.high_sacked(una), 4500u);
}

TEST(Sack, SeveralBlocksInOneAck) {
    SackScoreboard sb;
    SeqRange blocks[3] = {{7000, 8000}, {3000, 4000}, {5000, 6000}};
    EXPECT_EQ(sb.update(1000, 9000, blocks, 3), 3000u);
    EXPECT_EQ(ranges_of(sb), (Ranges{{3000, 4000}, {5000, 6000}, {7000, 8000}}));
    SeqRange cover{3500, 7500};
    EXPECT_EQ(sb.update(1000, 9000, &cover, 1), 2000u);
    EXPECT_EQ(ranges_of(sb), (Ranges{{3000, 8000}}));
    EXPECT_EQ(sb.sacked_bytes(), 5000u);
}

TEST(Sack, IgnoresBlocksOutsideTheWindow) {
    SackScoreboard sb;
    const uint32_t una = 1000, nxt = 5000;
    SeqRange bad[] = {
        {500, 1000},  // D-SACK below snd_una
        {200, 900},   // D-SACK below snd_una
        {4000, 5001}, // ends beyond snd_nxt
        {6000, 7000}, // wholly beyond snd_nxt
        {3000, 3000}, // empty
        {3000, 2000}, // inverted
    };
    EXPECT_EQ(sb.update(una, nxt, bad, 6), 0u);
    EXPECT_TRUE(sb.empty());
    SeqRange edge{4000, 5000}; // ends exactly at snd_nxt: fine
    EXPECT_EQ(sb.update(una, nxt, &edge, 1), 1000u);
    SeqRange straddle{800, 1200}; // only the part above snd_una counts
    EXPECT_EQ(sb.update(una, nxt, &straddle, 1), 200u);
    EXPECT_EQ(ranges_of(sb), (Ranges{{1000, 1200}, {4000, 5000}}));
}

TEST(Sack, AdvanceTrimsAndDrops) {
    SackScoreboard sb;
    SeqRange blocks[3] = {{2000, 3000}, {4000, 5000}, {6000, 7000}};
    sb.update(1000, 8000, blocks, 3);
    sb.advance(1500);
    EXPECT_EQ(sb.count(), 3);
    sb.advance(3000);
    EXPECT_EQ(ranges_of(sb), (Ranges{{4000, 5000}, {6000, 7000}}));
    EXPECT_EQ(sb.sacked_bytes(), 2000u);
    sb.advance(4500);
    EXPECT_EQ(ranges_of(sb), (Ranges{{4500, 5000}, {6000, 7000}}));
    EXPECT_EQ(sb.sacked_bytes(), 1500u);
    sb.advance(7000);
    EXPECT_TRUE(sb.empty());
    EXPECT_EQ(sb.sacked_bytes(), 0u);
    EXPECT_EQ(sb.high_sacked(7000), 7000u);
}

TEST(Sack, ClearForgetsEverything) {
    SackScoreboard sb;
    SeqRange b{2000, 3000};
    sb.update(1000, 8000, &b, 1);
    sb.clear();
    EXPECT_TRUE(sb.empty());
    EXPECT_EQ(sb.sacked_bytes(), 0u);
    EXPECT_FALSE(sb.is_sacked(2500));
}

TEST(Sack, CapacityOverflowKeepsLowestRanges) {
    SackScoreboard sb;
    const uint32_t una = 0, nxt = 1'000'000;
    for (int i = 0; i < SackScoreboard::kMaxRanges; ++i) {
        SeqRange b{uint32_t(1000 + 200 * i), uint32_t(1100 + 200 * i)};
        sb.update(una, nxt, &b, 1);
    }
    ASSERT_EQ(sb.count(), SackScoreboard::kMaxRanges);
    uint32_t top = sb.range(SackScoreboard::kMaxRanges - 1).start;
    // A new highest range does not fit.
    SeqRange high{50000, 50100};
    sb.update(una, nxt, &high, 1);
    EXPECT_EQ(sb.count(), SackScoreboard::kMaxRanges);
    EXPECT_FALSE(sb.is_sacked(50000));
    // A new lowest range pushes the highest out.
    SeqRange low{100, 200};
    EXPECT_EQ(sb.update(una, nxt, &low, 1), 100u);
    EXPECT_EQ(sb.count(), SackScoreboard::kMaxRanges);
    EXPECT_EQ(sb.range(0).start, 100u);
    EXPECT_FALSE(sb.is_sacked(top));
    EXPECT_EQ(sb.sacked_bytes(), 100u * SackScoreboard::kMaxRanges);
    // Merging frees a slot again.
    SeqRange join{1100, 1200};
    sb.update(una, nxt, &join, 1);
    EXPECT_EQ(sb.count(), SackScoreboard::kMaxRanges - 1);
}

TEST(Sack, WrapsAroundSequenceSpace) {
    SackScoreboard sb;
    const uint32_t una = 0xfffff000u, nxt = 0x00002000u;
    SeqRange blocks[2] = {{0x00000800u, 0x00001000u}, {0xfffff800u, 0x00000100u}};
    EXPECT_EQ(sb.update(una, nxt, blocks, 2), 0x800u + 0x900u);
    ASSERT_EQ(sb.count(), 2);
    EXPECT_EQ(sb.range(0).start, 0xfffff800u);
    EXPECT_EQ(sb.range(0).end, 0x00000100u);
    EXPECT_TRUE(sb.is_sacked(0xffffffffu));
    EXPECT_TRUE(sb.is_sacked(0));
    EXPECT_FALSE(sb.is_sacked(0x100));
    EXPECT_EQ(sb.high_sacked(una), 0x1000u);
    SeqRange fill{0x100, 0x800};
    sb.update(una, nxt, &fill, 1);
    EXPECT_EQ(ranges_of(sb), (Ranges{{0xfffff800u, 0x1000u}}));
    sb.advance(0x10);
    EXPECT_EQ(ranges_of(sb), (Ranges{{0x10u, 0x1000u}}));
    EXPECT_EQ(sb.sacked_bytes(), 0xff0u);
}

TEST(Sack, IsLostByRangeCount) {
    SackScoreboard sb;
    const uint32_t mss = 1000;
    // Three small (1-byte) discontiguous ranges: far less than 2*mss bytes.
    SeqRange blocks[3] = {{5000, 5001}, {6000, 6001}, {7000, 7001}};
    sb.update(1000, 10000, blocks, 3);
    EXPECT_TRUE(sb.is_lost(1000, mss));
    EXPECT_TRUE(sb.is_lost(4999, mss));
    EXPECT_FALSE(sb.is_lost(5000, mss)); // only two ranges start above it
    EXPECT_FALSE(sb.is_lost(5500, mss));
}

TEST(Sack, IsLostByBytes) {
    SackScoreboard sb;
    const uint32_t mss = 1000;
    SeqRange b{3000, 5001}; // one range, 2001 bytes
    sb.update(1000, 10000, &b, 1);
    EXPECT_TRUE(sb.is_lost(1000, mss));
    EXPECT_TRUE(sb.is_lost(2999, mss));
    EXPECT_FALSE(sb.is_lost(3000, mss)); // 2000 bytes above: not more than 2*mss
    SackScoreboard exact;
    SeqRange e{3000, 5000}; // exactly 2*mss: not lost
    exact.update(1000, 10000, &e, 1);
    EXPECT_FALSE(exact.is_lost(1000, mss));
    EXPECT_EQ(exact.pipe(1000, 10000, 1000, mss), 7000u);
}

TEST(Sack, NextLostWalksHolesUpToMss) {
    SackScoreboard sb;
    const uint32_t mss = 1000;
    // Holes: [1000,2000) [3000,5500) [6000,7000) [8000,8500), then SACKed
    // [8500,8600).
    SeqRange blocks[4] = {{2000, 3000}, {5500, 6000}, {7000, 8000}, {8500, 8600}};
    sb.update(1000, 9000, blocks, 4);
    SeqRange out{};
    ASSERT_TRUE(sb.next_lost(1000, 9000, 1000, mss, &out));
    EXPECT_EQ(out.start, 1000u);
    EXPECT_EQ(out.end, 2000u);
    ASSERT_TRUE(sb.next_lost(1000, 9000, 2000, mss, &out)); // skips the SACKed range
    EXPECT_EQ(out.start, 3000u);
    EXPECT_EQ(out.end, 4000u); // at most mss
    ASSERT_TRUE(sb.next_lost(1000, 9000, 5000, mss, &out));
    EXPECT_EQ(out.start, 5000u);
    EXPECT_EQ(out.end, 5500u); // stops at the SACKed range
    // [6000,7000) has two ranges and 1100 bytes above it: not lost.
    EXPECT_FALSE(sb.next_lost(1000, 9000, 5500, mss, &out));
    EXPECT_FALSE(sb.next_lost(1000, 9000, 8000, mss, &out));
    // high_rxt at or beyond snd_nxt: nothing.
    EXPECT_FALSE(sb.next_lost(1000, 9000, 9000, mss, &out));
    SackScoreboard none;
    EXPECT_FALSE(none.next_lost(1000, 9000, 1000, mss, &out));
}

// ---- brute-force model ---------------------------------------------------

struct ByteModel {
    uint32_t una;
    std::vector<bool> sacked; // index: offset from una

    std::vector<std::pair<uint32_t, uint32_t>> runs() const { // offsets
        std::vector<std::pair<uint32_t, uint32_t>> out;
        for (uint32_t i = 0; i < sacked.size();) {
            if (!sacked[i]) {
                ++i;
                continue;
            }
            uint32_t j = i;
            while (j < sacked.size() && sacked[j]) ++j;
            out.emplace_back(i, j);
            i = j;
        }
        return out;
    }
    void add(uint32_t s, uint32_t e) { // offsets
        for (uint32_t i = s; i < e; ++i) sacked[i] = true;
        auto r = runs();
        if (r.size() > size_t(SackScoreboard::kMaxRanges))
            for (uint32_t i = r.back().first; i < r.back().second; ++i) sacked[i] = false;
    }
    // lost[i]: RFC 6675 IsLost for the byte at offset i, straight from the
    // definition (runs starting above i, SACKed bytes above i).
    std::vector<bool> lost_table(uint32_t mss) const {
        const size_t n = sacked.size();
        std::vector<uint32_t> runs_starting_after(n + 1, 0), bytes_after(n + 1, 0);
        for (size_t i = n; i-- > 0;) {
            bool run_start_next = i + 1 < n && sacked[i + 1] && !sacked[i];
            runs_starting_after[i] = runs_starting_after[i + 1] + (run_start_next ? 1 : 0);
            bytes_after[i] = bytes_after[i + 1] + (i + 1 < n && sacked[i + 1] ? 1 : 0);
        }
        // Runs that start after i lie wholly above it.
        std::vector<bool> lost(n);
        for (size_t i = 0; i < n; ++i)
            lost[i] = runs_starting_after[i] >= SackScoreboard::kDupThresh ||
                      bytes_after[i] > uint64_t(SackScoreboard::kDupThresh - 1) * mss;
        return lost;
    }
    uint32_t pipe(const std::vector<bool> &lost, uint32_t rxt_off) const {
        uint32_t p = 0;
        for (uint32_t i = 0; i < sacked.size(); ++i) {
            if (sacked[i]) continue;
            if (!lost[i]) ++p;
            if (i < rxt_off) ++p;
        }
        return p;
    }
    bool next_lost(const std::vector<bool> &lost, uint32_t from, uint32_t mss, uint32_t *s,
                   uint32_t *e) const {
        for (uint32_t i = from; i < sacked.size(); ++i) {
            if (sacked[i] || !lost[i]) continue;
            uint32_t j = i;
            while (j < sacked.size() && !sacked[j] && j - i < mss) ++j;
            *s = i;
            *e = j;
            return true;
        }
        return false;
    }
};

void check_against_model(uint32_t seed, uint32_t base, int max_blocks) {
    std::mt19937 rng(seed);
    const uint32_t window = 200 + rng() % 600;
    const uint32_t mss = 1 + rng() % 60;
    ByteModel m{base, std::vector<bool>(window, false)};
    SackScoreboard sb;
    int n_acks = 1 + int(rng() % max_blocks);
    for (int a = 0; a < n_acks; ++a) {
        SeqRange blocks[4];
        int nb = 1 + int(rng() % 4);
        for (int b = 0; b < nb; ++b) {
            uint32_t s = rng() % (window + 40), len = 1 + rng() % 40;
            blocks[b] = SeqRange{base + s - 20, base + s - 20 + len};
        }
        sb.update(base, base + window, blocks, nb);
        for (int b = 0; b < nb; ++b) {
            int32_t s = int32_t(blocks[b].start - base), e = int32_t(blocks[b].end - base);
            if (e <= 0 || e > int32_t(window)) continue;
            m.add(uint32_t(s < 0 ? 0 : s), uint32_t(e));
        }
    }
    auto runs = m.runs();
    ASSERT_EQ(sb.count(), int(runs.size())) << "seed " << seed;
    uint32_t total = 0;
    for (int i = 0; i < sb.count(); ++i) {
        EXPECT_EQ(sb.range(i).start, base + runs[i].first) << "seed " << seed;
        EXPECT_EQ(sb.range(i).end, base + runs[i].second) << "seed " << seed;
        total += runs[i].second - runs[i].first;
    }
    EXPECT_EQ(sb.sacked_bytes(), total);
    const std::vector<bool> lost = m.lost_table(mss);
    for (uint32_t off = 0; off < window; ++off) {
        ASSERT_EQ(sb.is_sacked(base + off), bool(m.sacked[off])) << "seed " << seed;
        ASSERT_EQ(sb.is_lost(base + off, mss), bool(lost[off]))
            << "seed " << seed << " off " << off << " mss " << mss;
    }
    for (int k = 0; k < 6; ++k) {
        uint32_t rxt = rng() % (window + 1);
        ASSERT_EQ(sb.pipe(base, base + window, base + rxt, mss), m.pipe(lost, rxt))
            << "seed " << seed << " rxt " << rxt << " mss " << mss;
        SeqRange out{};
        uint32_t s = 0, e = 0;
        bool want = m.next_lost(lost, rxt, mss, &s, &e);
        ASSERT_EQ(sb.next_lost(base, base + window, base + rxt, mss, &out), want)
            << "seed " << seed;
        if (want) {
            EXPECT_EQ(out.start, base + s);
            EXPECT_EQ(out.end, base + e);
        }
    }
    // high_rxt below snd_una counts as no retransmission.
    EXPECT_EQ(sb.pipe(base, base + window, base - 5, mss), m.pipe(lost, 0));
}

TEST(Sack, RandomAgainstByteModel) {
    for (uint32_t seed = 1; seed <= 300; ++seed) check_against_model(seed, 1'000'000, 6);
}

TEST(Sack, RandomAgainstByteModelAcrossWrap) {
    for (uint32_t seed = 1; seed <= 300; ++seed) check_against_model(seed, 0xffffff00u, 6);
}

TEST(Sack, RandomOverflowAgainstByteModel) {
    // Many blocks: the scoreboard fills up and must drop the highest ranges.
    for (uint32_t seed = 1; seed <= 100; ++seed) check_against_model(seed, 0xfffffe00u + seed, 40);
}

} // namespace
} // namespace mars
