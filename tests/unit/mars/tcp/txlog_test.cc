// Tests of RACK's transmission log (mars/src/rack.h): coalescing within a
// burst, retransmissions superseding, pruning, merging when full (times
// kept conservative), splitting, and the flag bits following their entries.
#include "rack.h"

#include <gtest/gtest.h>

#include <vector>

namespace mars {
namespace {

struct Entry {
    uint32_t start, end, first, last;
    bool rtx, lost;
    bool operator==(const Entry &) const = default;
};

std::vector<Entry> entries(const TxLog &log)
{
    std::vector<Entry> v;
    for (int i = 0; i < log.size(); i++) {
        const TxMark &m = log.at(i);
        v.push_back({m.start, m.end, m.first_us, m.last_us, log.is_rtx(i), log.is_lost(i)});
    }
    return v;
}

TEST(TxLog, OneBurstIsOneEntryAndARetransmissionSupersedes)
{
    TxLog log;
    ASSERT_TRUE(log.record(1000, 2000, 10, false, 1000));
    ASSERT_TRUE(log.record(2000, 3000, 10, false, 1000)); // same burst: extended
    ASSERT_TRUE(log.record(3000, 4000, 20, false, 1000)); // later: a new entry
    ASSERT_TRUE(log.record(1000, 1500, 30, true, 1000));  // resend of the first bytes
    EXPECT_EQ(entries(log), (std::vector<Entry>{{1000, 3000, 10, 10, false, false},
                                                {3000, 4000, 20, 20, false, false},
                                                {1000, 1500, 30, 30, true, false}}));
    SackScoreboard sb;
    SeqRange r;
    // Entry 0 answers for [1500, 3000) only: [1000, 1500) was sent again.
    ASSERT_TRUE(log.piece(0, 1000, 1000, sb, &r));
    EXPECT_EQ(r.start, 1500u);
    EXPECT_EQ(r.end, 3000u);
    // SACKed bytes are skipped and end a piece.
    SeqRange block{2000, 2500};
    sb.update(1000, 4000, &block, 1);
    ASSERT_TRUE(log.piece(0, 1000, 1000, sb, &r));
    EXPECT_EQ(r.start, 1500u);
    EXPECT_EQ(r.end, 2000u);
    ASSERT_TRUE(log.piece(0, 2000, 1000, sb, &r));
    EXPECT_EQ(r.start, 2500u);
    EXPECT_EQ(r.end, 3000u);
    EXPECT_EQ(log.latest_overlapping(1200, 1300), 2);
    EXPECT_EQ(log.latest_overlapping(2000, 2100), 0);
}

TEST(TxLog, FullLogMergesNeighboursConservativelyAndKeepsFlags)
{
    TxLog log;
    uint32_t seq = 0;
    for (int i = 0; i < TxLog::kMax; i++, seq += 100) ASSERT_TRUE(log.record(seq, seq + 100, 10 * i, false, 0));
    log.mark_lost(1);
    ASSERT_EQ(log.size(), TxLog::kMax);
    // Full: entries 0 and 1 differ in loss status, 2 and 3 are merged.
    ASSERT_TRUE(log.record(seq, seq + 100, 1000, false, 0));
    ASSERT_EQ(log.size(), TxLog::kMax);
    auto e = entries(log);
    EXPECT_EQ(e[0], (Entry{0, 100, 0, 0, false, false}));
    EXPECT_EQ(e[1], (Entry{100, 200, 10, 10, false, true}));
    // The merged entry keeps the earliest time for deliveries and the
    // latest for loss.
    EXPECT_EQ(e[2], (Entry{200, 400, 20, 30, false, false}));
    EXPECT_EQ(e[3], (Entry{400, 500, 40, 40, false, false}));
    EXPECT_EQ(e.back(), (Entry{seq, seq + 100, 1000, 1000, false, false}));
    // Pruning drops what snd_una passed, bits follow their entries.
    log.prune(200);
    e = entries(log);
    EXPECT_EQ(e[0], (Entry{200, 400, 20, 30, false, false}));
    for (auto &x : e) EXPECT_FALSE(x.lost);
}

TEST(TxLog, SplitKeepsTimesAndFlagsOnBothHalves)
{
    TxLog log;
    ASSERT_TRUE(log.record(0, 1000, 5, false, 0));
    ASSERT_TRUE(log.record(0, 300, 9, true, 0));
    ASSERT_TRUE(log.record(1000, 2000, 9, false, 0));
    ASSERT_TRUE(log.split(0, 400, 0));
    ASSERT_TRUE(log.split(1, 700, 0)); // bits of the entries above move up
    EXPECT_EQ(entries(log), (std::vector<Entry>{{0, 400, 5, 5, false, false},
                                                {400, 700, 5, 5, false, false},
                                                {700, 1000, 5, 5, false, false},
                                                {0, 300, 9, 9, true, false},
                                                {1000, 2000, 9, 9, false, false}}));
    log.mark_lost(1);
    ASSERT_TRUE(log.split(3, 100, 0));
    auto e = entries(log);
    EXPECT_TRUE(e[1].lost);
    EXPECT_TRUE(e[3].rtx && e[4].rtx);
    EXPECT_EQ(e[4], (Entry{100, 300, 9, 9, true, false}));
    EXPECT_FALSE(e[5].rtx || e[5].lost);
}

} // namespace
} // namespace mars
