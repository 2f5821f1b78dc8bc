// Tests of the congestion control algorithms on a simulated ACK clock:
// initial windows, slow start, NewReno and CUBIC congestion avoidance,
// reductions, and arithmetic at extreme window sizes.
#include "cc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace mars {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSec = 1'000'000'000;

// One round trip of a cwnd-limited sender: a full window in flight, one ACK
// per `per_ack` bytes spread evenly over the RTT.
struct AckClock {
    const CcAlgo &algo;
    CcVars &cc;
    uint64_t rtt_ns;
    uint64_t now = 0;

    void round(uint32_t per_ack) {
        uint32_t window = cc.cwnd;
        uint32_t acks = window / per_ack;
        if (acks == 0) acks = 1;
        uint64_t step = rtt_ns / acks;
        for (uint32_t i = 0; i < acks; ++i) {
            now += step;
            algo.on_ack(cc, per_ack, window, rtt_ns, rtt_ns, now);
        }
        now += rtt_ns - step * acks;
    }
};

TEST(Cc, AlgoMapsEnum) {
    EXPECT_EQ(&cc_algo(CongestionControl::kCubic), &cc_cubic());
    EXPECT_EQ(&cc_algo(CongestionControl::kNewReno), &cc_newreno());
    EXPECT_STREQ(cc_cubic().name, "cubic");
    EXPECT_STREQ(cc_newreno().name, "newreno");
}

TEST(Cc, InitialWindow) {
    for (const CcAlgo *a : {&cc_newreno(), &cc_cubic()}) {
        CcVars cc;
        a->init(cc, 536, 0);
        EXPECT_EQ(cc.cwnd, 5360u) << a->name; // 10 * mss
        EXPECT_EQ(cc.mss, 536u);
        EXPECT_EQ(cc.ssthresh, 0xffffffffu);
        a->init(cc, 1460, 0);
        EXPECT_EQ(cc.cwnd, 14600u) << a->name;
        a->init(cc, 8960, 0);
        EXPECT_EQ(cc.cwnd, 17920u) << a->name; // 2 * mss
        a->init(cc, 4000, 0);
        EXPECT_EQ(cc.cwnd, 14600u) << a->name;
    }
}

TEST(Cc, SlowStartDoublesPerRtt) {
    for (const CcAlgo *a : {&cc_newreno(), &cc_cubic()}) {
        for (uint32_t acks_per_mss : {1u, 2u}) { // every segment, or delayed ACKs
            CcVars cc;
            a->init(cc, 1460, 0);
            AckClock clock{*a, cc, 10 * kMs};
            for (int r = 0; r < 8; ++r) {
                uint32_t before = cc.cwnd;
                clock.round(1460 * acks_per_mss);
                EXPECT_EQ(cc.cwnd, 2 * before) << a->name << " round " << r;
            }
        }
    }
}

TEST(Cc, SlowStartByteCountingLimitIsTwoMss) {
    CcVars cc;
    cc_newreno().init(cc, 1000, 0);
    uint32_t w = cc.cwnd;
    cc_newreno().on_ack(cc, 5000, w, 0, 0, 1); // a stretch ACK for 5 segments
    EXPECT_EQ(cc.cwnd, w + 2000);
    cc_newreno().on_ack(cc, 500, w, 0, 0, 2); // less than an mss: counts as acked
    EXPECT_EQ(cc.cwnd, w + 2500);
}

TEST(Cc, SlowStartStopsAtSsthresh) {
    CcVars cc;
    cc_newreno().init(cc, 1000, 0);
    cc.cwnd = 9500;
    cc.ssthresh = 10000;
    cc_newreno().on_ack(cc, 2000, 9500, 0, 0, 1);
    // 500 bytes reach ssthresh; the rest counts toward avoidance.
    EXPECT_EQ(cc.cwnd, 10000u);
}

TEST(Cc, NoGrowthWhenApplicationLimited) {
    for (const CcAlgo *a : {&cc_newreno(), &cc_cubic()}) {
        CcVars cc;
        a->init(cc, 1460, 0);
        uint32_t w = cc.cwnd;
        for (int i = 0; i < 100; ++i) a->on_ack(cc, 1460, 1460, kMs, kMs, uint64_t(i) * kMs);
        EXPECT_EQ(cc.cwnd, w) << a->name;
    }
}

TEST(Cc, NewRenoAvoidanceOneMssPerRtt) {
    for (uint32_t mss : {536u, 1460u, 8960u}) {
        CcVars cc;
        cc_newreno().init(cc, mss, 0);
        cc.cwnd = 50 * mss;
        cc.ssthresh = 40 * mss;
        AckClock clock{cc_newreno(), cc, 20 * kMs};
        uint32_t start = cc.cwnd;
        for (int r = 0; r < 30; ++r) clock.round(mss);
        EXPECT_GE(cc.cwnd, start + 29 * mss) << mss;
        EXPECT_LE(cc.cwnd, start + 30 * mss) << mss;
        // Delayed ACKs give the same growth with byte counting.
        start = cc.cwnd;
        for (int r = 0; r < 30; ++r) clock.round(2 * mss);
        EXPECT_GE(cc.cwnd, start + 29 * mss) << mss;
        EXPECT_LE(cc.cwnd, start + 30 * mss) << mss;
    }
}

TEST(Cc, NewRenoReductions) {
    const CcAlgo &a = cc_newreno();
    CcVars cc;
    a.init(cc, 1000, 0);
    cc.cwnd = 40000;
    a.on_congestion(cc, 30000, 0);
    EXPECT_EQ(cc.ssthresh, 15000u);
    EXPECT_EQ(cc.cwnd, 15000u);
    cc.cwnd = 18000; // the core inflated during recovery
    a.on_recovery_exit(cc, 0);
    EXPECT_EQ(cc.cwnd, 15000u);
    a.on_congestion(cc, 3000, 0); // floor of 2 mss
    EXPECT_EQ(cc.ssthresh, 2000u);
    EXPECT_EQ(cc.cwnd, 2000u);
    cc.cwnd = 50000;
    a.on_rto(cc, 50000, 0);
    EXPECT_EQ(cc.ssthresh, 25000u);
    EXPECT_EQ(cc.cwnd, 1000u);
    a.on_recovery_exit(cc, 0); // never raises cwnd
    EXPECT_EQ(cc.cwnd, 1000u);
}

TEST(Cc, IdleRestartAndMssChange) {
    for (const CcAlgo *a : {&cc_newreno(), &cc_cubic()}) {
        CcVars cc;
        a->init(cc, 1460, 0);
        cc.cwnd = 100 * 1460;
        cc.ssthresh = 50 * 1460;
        a->on_idle_restart(cc, 0);
        EXPECT_EQ(cc.cwnd, 14600u) << a->name;
        EXPECT_EQ(cc.ssthresh, 75u * 1460) << a->name;
        a->on_idle_restart(cc, 0); // already small: unchanged
        EXPECT_EQ(cc.cwnd, 14600u);
        a->on_mss_change(cc, 1000);
        EXPECT_EQ(cc.mss, 1000u);
        EXPECT_EQ(cc.cwnd, 10000u) << a->name; // still 10 segments
        EXPECT_EQ(cc.ssthresh, 75000u) << a->name;
        CcVars fresh;
        a->init(fresh, 1460, 0);
        a->on_mss_change(fresh, 536);
        EXPECT_EQ(fresh.ssthresh, 0xffffffffu); // "infinite" stays infinite
        EXPECT_EQ(fresh.cwnd, 5360u);
    }
}

// ---- CUBIC ---------------------------------------------------------------

double w_cubic_segments(double t, double k, double w_max_seg) {
    return 0.4 * (t - k) * (t - k) * (t - k) + w_max_seg;
}

// Puts a CUBIC sender into congestion avoidance after a loss at w_max segments.
void lose_at(CcVars &cc, uint32_t mss, uint32_t w_max_seg, uint64_t now) {
    cc_cubic().init(cc, mss, 0);
    cc.cwnd = w_max_seg * mss;
    cc_cubic().on_congestion(cc, cc.cwnd, now);
    cc_cubic().on_recovery_exit(cc, now);
}

TEST(Cubic, ReductionAndK) {
    const uint32_t mss = 1460;
    CcVars cc;
    lose_at(cc, mss, 1000, 0);
    EXPECT_EQ(cc.ssthresh, 700u * mss);
    EXPECT_EQ(cc.cwnd, 700u * mss);
    CubicView v = cc_cubic_view(cc);
    EXPECT_DOUBLE_EQ(v.w_max, 1000.0 * mss);
    EXPECT_FALSE(v.in_epoch);
    // The epoch (and K) starts with the first ACK in avoidance.
    cc_cubic().on_ack(cc, mss, cc.cwnd, 100 * kMs, 100 * kMs, 5 * kSec);
    v = cc_cubic_view(cc);
    EXPECT_TRUE(v.in_epoch);
    EXPECT_EQ(v.epoch_ns, 5 * kSec);
    EXPECT_NEAR(v.k_sec, std::cbrt(300.0 / 0.4), 1e-9); // K = cbrt(W_max (1 - beta) / C)
    EXPECT_NEAR(v.k_sec, 9.0856, 1e-3);
}

TEST(Cubic, WindowFollowsCubicCurve) {
    const uint32_t mss = 1460;
    const uint64_t rtt = 100 * kMs;
    const double w_max = 1000;
    CcVars cc;
    lose_at(cc, mss, uint32_t(w_max), 0);
    AckClock clock{cc_cubic(), cc, rtt};
    double k = std::cbrt(w_max * 0.3 / 0.4);
    bool checked_plateau = false;
    for (int r = 0; r < 160; ++r) { // 16 s: concave, plateau, convex
        clock.round(mss);
        CubicView v = cc_cubic_view(cc);
        double t = double(clock.now - v.epoch_ns) * 1e-9;
        double seg = double(cc.cwnd) / mss;
        double lo = w_cubic_segments(t, k, w_max), hi = w_cubic_segments(t + 0.1, k, w_max);
        // cwnd aims one RTT ahead of the curve; it may lag by a little.
        EXPECT_GE(seg, lo - 0.02 * lo) << "t=" << t;
        EXPECT_LE(seg, hi + 0.02 * hi) << "t=" << t;
        if (!checked_plateau && t >= k) {
            checked_plateau = true;
            EXPECT_NEAR(seg, w_max, 2.0); // back at W_max after K seconds
        }
    }
    EXPECT_TRUE(checked_plateau);
    EXPECT_GT(double(cc.cwnd) / mss, w_max + 100); // convex growth beyond W_max
}

TEST(Cubic, FastConvergenceLowersWmax) {
    const uint32_t mss = 1000;
    CcVars cc;
    lose_at(cc, mss, 100, 0); // W_max = 100
    EXPECT_DOUBLE_EQ(cc_cubic_view(cc).w_max, 100000.0);
    cc.cwnd = 80 * mss; // a second loss below the old maximum
    cc_cubic().on_congestion(cc, cc.cwnd, 0);
    EXPECT_DOUBLE_EQ(cc_cubic_view(cc).w_max, 80000.0 * 1.7 / 2);
    EXPECT_EQ(cc.cwnd, 56u * mss);
    cc.cwnd = 120 * mss; // a loss above it: W_max is the window at the loss
    cc_cubic().on_congestion(cc, cc.cwnd, 0);
    EXPECT_DOUBLE_EQ(cc_cubic_view(cc).w_max, 120000.0);
}

TEST(Cubic, RenoFriendlyRegionAtSmallRtt) {
    const uint32_t mss = 1460;
    const uint64_t rtt = 1 * kMs;
    CcVars cc;
    lose_at(cc, mss, 20, 0); // cwnd 14 segments, K ~ 2.47 s
    AckClock clock{cc_cubic(), cc, rtt};
    double w_est = 14; // segments; the RFC 9438 4.3 model
    for (int r = 0; r < 200; ++r) {
        clock.round(mss);
        double alpha = w_est >= 20 ? 1.0 : 3 * 0.3 / 1.7;
        w_est += alpha;
    }
    CubicView v = cc_cubic_view(cc);
    double t = double(clock.now - v.epoch_ns) * 1e-9;
    double cubic = w_cubic_segments(t, v.k_sec, 20);
    double seg = double(cc.cwnd) / mss;
    EXPECT_LT(cubic, 20.0);     // the cubic curve alone would still be below W_max
    EXPECT_GT(seg, 150.0);      // ...but the window grew like Reno's
    EXPECT_NEAR(seg, w_est, 0.05 * w_est);
    EXPECT_NEAR(v.w_est / mss, seg, 1.0);
}

TEST(Cubic, RtoResetsEpochWithKZero) {
    const uint32_t mss = 1460;
    CcVars cc;
    lose_at(cc, mss, 100, 0);
    AckClock clock{cc_cubic(), cc, 50 * kMs};
    for (int r = 0; r < 5; ++r) clock.round(mss);
    uint32_t w = cc.cwnd;
    cc_cubic().on_rto(cc, w, clock.now);
    EXPECT_EQ(cc.cwnd, mss);
    EXPECT_EQ(cc.ssthresh, uint32_t(uint64_t(w) * 7 / 10));
    EXPECT_FALSE(cc_cubic_view(cc).in_epoch);
    // Slow start back to ssthresh, then an epoch from the window there.
    while (cc.cwnd < cc.ssthresh) clock.round(mss);
    clock.round(mss);
    CubicView v = cc_cubic_view(cc);
    EXPECT_TRUE(v.in_epoch);
    EXPECT_EQ(v.k_sec, 0.0);
    EXPECT_DOUBLE_EQ(v.w_max, double(cc.ssthresh));
}

TEST(Cubic, IdleRestartDoesNotCountIdleTime) {
    const uint32_t mss = 1460;
    CcVars cc;
    lose_at(cc, mss, 100, 0);
    cc_cubic().on_ack(cc, mss, cc.cwnd, 10 * kMs, 10 * kMs, 1 * kSec);
    EXPECT_TRUE(cc_cubic_view(cc).in_epoch);
    cc_cubic().on_idle_restart(cc, 100 * kSec);
    EXPECT_FALSE(cc_cubic_view(cc).in_epoch);
    EXPECT_EQ(cc.cwnd, 14600u);
}

TEST(Cc, HugeWindowsAndTinyMss) {
    for (const CcAlgo *a : {&cc_newreno(), &cc_cubic()}) {
        for (uint32_t mss : {1u, 64u, 65535u}) {
            CcVars cc;
            a->init(cc, mss, 0);
            cc.cwnd = 1u << 30;
            cc.ssthresh = 1u << 29;
            a->on_congestion(cc, 1u << 30, 0);
            a->on_recovery_exit(cc, 0);
            uint32_t prev = cc.cwnd;
            EXPECT_GE(prev, 1u << 29) << a->name;
            EXPECT_LE(prev, 1u << 30) << a->name;
            // Long epochs, big ACKs: growth stays bounded and monotone.
            for (int i = 0; i < 2000; ++i) {
                uint64_t now = uint64_t(i) * 50 * kSec;
                a->on_ack(cc, 0xffffffffu, 0xffffffffu, 100 * kMs, 100 * kMs, now);
                ASSERT_GE(cc.cwnd, prev) << a->name << " mss " << mss;
                ASSERT_LE(cc.cwnd, 1u << 31) << a->name << " mss " << mss;
                prev = cc.cwnd;
            }
            a->on_congestion(cc, 0xffffffffu, 0);
            EXPECT_GE(cc.ssthresh, 2 * mss);
            EXPECT_LE(cc.ssthresh, 0xffffffffu / 10 * 7 + 1);
            a->on_rto(cc, 0xffffffffu, 0);
            EXPECT_EQ(cc.cwnd, mss);
            // Slow start from 1 mss with ssthresh near 2^32 does not wrap.
            cc.ssthresh = 0xfffffffeu;
            for (int i = 0; i < 100; ++i) {
                a->on_ack(cc, 0xffffffffu, 0xffffffffu, kMs, kMs, uint64_t(i));
                ASSERT_GE(cc.cwnd, mss);
            }
            a->on_mss_change(cc, 9000);
            EXPECT_GE(cc.cwnd, 9000u);
            a->on_mss_change(cc, 1);
            EXPECT_GE(cc.cwnd, 1u);
        }
    }
}

TEST(Cubic, StateFitsInPriv) {
    // Compile-time checked in cc.cc; here: the view reads back what init set.
    CcVars cc;
    cc_cubic().init(cc, 1460, 0);
    CubicView v = cc_cubic_view(cc);
    EXPECT_EQ(v.w_max, 0.0);
    EXPECT_FALSE(v.in_epoch);
}

} // namespace
} // namespace mars
