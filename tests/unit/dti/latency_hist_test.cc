// dti/include/dti/latency_hist.h: bucket boundaries, recording, merging,
// percentiles on known data, the empty and the overflowing histogram.
#include <dti/latency_hist.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

TEST(LatencyHist, SmallValuesHaveABucketEach)
{
    for (uint64_t v = 0; v < 32; v++) {
        EXPECT_EQ(eta_hist_index(v), v) << v;
        EXPECT_EQ(eta_hist_lowest(uint32_t(v)), v);
        EXPECT_EQ(eta_hist_highest(uint32_t(v)), v);
    }
}

TEST(LatencyHist, BucketsTileTheRangeAtOneSixteenth)
{
    // Every bucket starts where the one before ended, holds its own bounds,
    // and is at most 1/16 of its lowest value wide.
    for (uint32_t i = 1; i < ETA_HIST_OVERFLOW; i++) {
        const uint64_t lo = eta_hist_lowest(i), hi = eta_hist_highest(i);
        ASSERT_EQ(lo, eta_hist_highest(i - 1) + 1) << i;
        ASSERT_LE(lo, hi);
        ASSERT_EQ(eta_hist_index(lo), i);
        ASSERT_EQ(eta_hist_index(hi), i);
        if (lo >= ETA_HIST_SUB) {
            ASSERT_LE(hi - lo + 1, lo / ETA_HIST_SUB) << i;
        }
    }
    // Powers of two start a bucket: 2^e is the lowest of bucket (e-3)*16.
    for (uint32_t e = 4; e <= ETA_HIST_TOP_EXP; e++) EXPECT_EQ(eta_hist_index(uint64_t(1) << e), (e - 3) * 16) << e;
    EXPECT_EQ(eta_hist_highest(ETA_HIST_OVERFLOW - 1), (uint64_t(1) << 36) - 1);
}

TEST(LatencyHist, OverflowBucketKeepsTheTrueMax)
{
    eta_hist h{};
    EXPECT_EQ(eta_hist_index(uint64_t(1) << 36), ETA_HIST_OVERFLOW);
    EXPECT_EQ(eta_hist_index(UINT64_MAX), ETA_HIST_OVERFLOW);
    eta_hist_record(&h, 100);
    eta_hist_record(&h, uint64_t(1) << 40);
    EXPECT_EQ(h.buckets[ETA_HIST_OVERFLOW], 1u);
    EXPECT_EQ(eta_hist_count(&h), 2u);
    EXPECT_EQ(h.max, uint64_t(1) << 40);
    EXPECT_EQ(eta_hist_quantile(&h, 1.0), uint64_t(1) << 40); // the overflow bucket answers max
    EXPECT_EQ(eta_hist_quantile(&h, 0.5), eta_hist_highest(eta_hist_index(100)));
}

TEST(LatencyHist, EmptyAnswersZero)
{
    eta_hist h{};
    EXPECT_EQ(eta_hist_count(&h), 0u);
    EXPECT_EQ(eta_hist_quantile(&h, 0.5), 0u);
    EXPECT_EQ(eta_hist_quantile(&h, 0.999), 0u);
    EXPECT_EQ(eta_hist_count_upto(&h, UINT64_MAX), 0u);
}

TEST(LatencyHist, PercentilesOfKnownData)
{
    // 1..10000 ns: the rank-r sample is r; each answer is the upper end of
    // r's bucket, so never below r and at most 1/16 above it.
    eta_hist h{};
    uint64_t sum = 0;
    for (uint64_t v = 1; v <= 10000; v++) eta_hist_record(&h, v), sum += v;
    EXPECT_EQ(eta_hist_count(&h), 10000u);
    EXPECT_EQ(h.sum, sum);
    EXPECT_EQ(h.max, 10000u);
    const std::pair<double, uint64_t> want[] = {{0.5, 5000}, {0.9, 9000}, {0.99, 9900}, {0.999, 9990}, {1.0, 10000}};
    for (const auto &[q, exact] : want) {
        const uint64_t got = eta_hist_quantile(&h, q);
        EXPECT_GE(got, exact) << q;
        EXPECT_LE(got, exact + exact / 16) << q;
        EXPECT_EQ(got, std::min<uint64_t>(eta_hist_highest(eta_hist_index(exact)), 10000)) << q;
    }
    // One sample: every quantile is that sample's bucket, capped by max.
    eta_hist one{};
    eta_hist_record(&one, 12345);
    EXPECT_EQ(eta_hist_quantile(&one, 0.0), 12345u);
    EXPECT_EQ(eta_hist_quantile(&one, 0.999), 12345u);
}

TEST(LatencyHist, MergeEqualsRecordingEverythingInOne)
{
    std::mt19937_64 rng(33);
    eta_hist a{}, b{}, all{};
    for (int i = 0; i < 20000; i++) {
        const uint64_t v = rng() >> (rng() % 64); // every magnitude
        eta_hist_record(i % 3 ? &a : &b, v);
        eta_hist_record(&all, v);
    }
    eta_hist m{};
    eta_hist_merge(&m, &a);
    eta_hist_merge(&m, &b);
    EXPECT_EQ(m.sum, all.sum);
    EXPECT_EQ(m.max, all.max);
    for (uint32_t i = 0; i < ETA_HIST_BUCKETS; i++) ASSERT_EQ(m.buckets[i], all.buckets[i]) << i;
    for (double q : {0.5, 0.9, 0.99, 0.999}) EXPECT_EQ(eta_hist_quantile(&m, q), eta_hist_quantile(&all, q));
}

TEST(LatencyHist, CountUpToIsCumulative)
{
    eta_hist h{};
    for (uint64_t v : {100u, 200u, 300u, 5000u, 70000u}) eta_hist_record(&h, v);
    EXPECT_EQ(eta_hist_count_upto(&h, 127), 1u);  // 100
    EXPECT_EQ(eta_hist_count_upto(&h, 255), 2u);  // 200
    EXPECT_EQ(eta_hist_count_upto(&h, 511), 3u);  // 300
    EXPECT_EQ(eta_hist_count_upto(&h, 8191), 4u);
    EXPECT_EQ(eta_hist_count_upto(&h, (uint64_t(1) << 17) - 1), 5u);
}

TEST(LatencyHist, CopyOfAHistogramBeingWritten)
{
    eta_hist h{}, c{};
    for (uint64_t v = 0; v < 1000; v++) eta_hist_record(&h, v * 7);
    eta_hist_copy(&c, &h);
    EXPECT_EQ(eta_hist_count(&c), 1000u);
    EXPECT_EQ(c.sum, h.sum);
    EXPECT_EQ(c.max, 999u * 7);
}

} // namespace
