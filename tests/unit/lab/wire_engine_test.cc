// The impairment engine of eta-wire, driven with its own clock and fixed
// seeds: tc-netem argument parsing, and each impairment's effect on frames.
#include "impair.hpp"
#include "netem.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace eta::wire;

namespace
{

constexpr std::uint64_t ms = 1'000'000;

NetemConfig parsed(const std::string &line)
{
    NetemConfig c;
    std::string error;
    EXPECT_TRUE(parse_netem_line(line, c, error)) << line << ": " << error;
    return c;
}

std::string rejection(const std::string &line)
{
    NetemConfig c;
    std::string error;
    EXPECT_FALSE(parse_netem_line(line, c, error)) << line;
    return error;
}

// Binomial bounds with a wide margin (6 standard deviations): a correct
// engine cannot miss them, a wrong probability does by far.
void expect_binomial(std::uint64_t hits, std::uint64_t n, double p)
{
    double mean = static_cast<double>(n) * p;
    double margin = 6 * std::sqrt(static_cast<double>(n) * p * (1 - p)) + 1;
    EXPECT_NEAR(static_cast<double>(hits), mean, margin) << "n=" << n << " p=" << p;
}

} // namespace

TEST(NetemParse, FullSyntax)
{
    NetemConfig c =
        parsed("limit 500 delay 5ms 1ms 25% distribution normal loss random 1% 10% "
               "duplicate 2% corrupt 0.1% reorder 10% 50% gap 3 rate 100mbit 20 64 4 seed 7");
    EXPECT_EQ(c.limit, 500u);
    EXPECT_EQ(c.delay_ns, 5 * static_cast<std::int64_t>(ms));
    EXPECT_EQ(c.jitter_ns, 1 * static_cast<std::int64_t>(ms));
    EXPECT_DOUBLE_EQ(c.delay_correlation, 0.25);
    EXPECT_EQ(c.distribution, JitterShape::normal);
    EXPECT_DOUBLE_EQ(c.loss.probability, 0.01);
    EXPECT_DOUBLE_EQ(c.loss.correlation, 0.10);
    EXPECT_DOUBLE_EQ(c.duplicate.probability, 0.02);
    EXPECT_DOUBLE_EQ(c.corrupt.probability, 0.001);
    EXPECT_DOUBLE_EQ(c.reorder.probability, 0.10);
    EXPECT_DOUBLE_EQ(c.reorder.correlation, 0.50);
    EXPECT_EQ(c.gap, 3u);
    EXPECT_EQ(c.rate_bits_per_s, 100'000'000u);
    EXPECT_EQ(c.packet_overhead, 20);
    EXPECT_EQ(c.cell_size, 64u);
    EXPECT_EQ(c.cell_overhead, 4);
    EXPECT_TRUE(c.has_seed);
    EXPECT_EQ(c.seed, 7u);
    EXPECT_FALSE(c.is_transparent());
}

TEST(NetemParse, UnitsAsTcReadsThem)
{
    EXPECT_EQ(parsed("delay 100").delay_ns, 100'000); // bare time: microseconds
    EXPECT_EQ(parsed("delay 1.5ms").delay_ns, 1'500'000);
    EXPECT_EQ(parsed("delay 2s").delay_ns, 2'000'000'000);
    EXPECT_EQ(parsed("delay 250usec").delay_ns, 250'000);
    EXPECT_EQ(parsed("rate 1000").rate_bits_per_s, 1000u); // bare rate: bit/s
    EXPECT_EQ(parsed("rate 1gbit").rate_bits_per_s, 1'000'000'000u);
    EXPECT_EQ(parsed("rate 10mbps").rate_bits_per_s, 80'000'000u);
    EXPECT_EQ(parsed("rate 1Mibit").rate_bits_per_s, 1'048'576u);
    EXPECT_DOUBLE_EQ(parsed("loss 3").loss.probability, 0.03); // bare percentage
    EXPECT_DOUBLE_EQ(parsed("drop 100%").loss.probability, 1.0);
    EXPECT_EQ(parsed("reorder 10% delay 1ms").gap, 1u); // tc's default gap
    EXPECT_TRUE(parsed("").is_transparent());
    EXPECT_TRUE(parsed("limit 10").is_transparent());
}

TEST(NetemParse, RejectsWithReasons)
{
    EXPECT_NE(rejection("loss").find("needs"), std::string::npos);
    EXPECT_NE(rejection("loss 150%").find("0% to 100%"), std::string::npos);
    EXPECT_NE(rejection("loss -1%").find("bad loss"), std::string::npos);
    EXPECT_NE(rejection("delay fast").find("bad delay"), std::string::npos);
    EXPECT_NE(rejection("delay 5parsecs").find("bad delay"), std::string::npos);
    EXPECT_NE(rejection("delay 2h").find("bad delay"), std::string::npos);
    EXPECT_NE(rejection("delay 61s").find("60s"), std::string::npos);
    EXPECT_NE(rejection("bandwidth 1mbit").find("unknown netem argument"), std::string::npos);
    EXPECT_NE(rejection("reorder 10%").find("without some delay"), std::string::npos);
    EXPECT_NE(rejection("delay 5ms distribution normal").find("jitter"), std::string::npos);
    EXPECT_NE(rejection("delay 5ms 1ms distribution pareto").find("not implemented"),
              std::string::npos);
    EXPECT_NE(rejection("loss gemodel 1%").find("not implemented"), std::string::npos);
    EXPECT_NE(rejection("ecn").find("not implemented"), std::string::npos);
    EXPECT_NE(rejection("limit 0").find("bad limit"), std::string::npos);
    EXPECT_NE(rejection("rate 0bit").find("bad rate"), std::string::npos);
    EXPECT_NE(rejection("rate 10furlongs").find("bad rate"), std::string::npos);
    EXPECT_NE(rejection("seed -3").find("bad seed"), std::string::npos);
    EXPECT_NE(rejection("seed x1").find("bad seed"), std::string::npos);
}

TEST(NetemParse, DescribeParsesBackToTheSame)
{
    NetemConfig a = parsed("delay 5ms 300us 25% distribution normal loss 1.5% duplicate 2% 5% "
                           "corrupt 0.1% reorder 10% gap 4 rate 100mbit -4 64 2 limit 77 seed 42");
    NetemConfig b = parsed(describe(a));
    EXPECT_EQ(describe(a), describe(b));
    EXPECT_EQ(b.delay_ns, a.delay_ns);
    EXPECT_EQ(b.jitter_ns, a.jitter_ns);
    EXPECT_EQ(b.packet_overhead, -4);
    EXPECT_EQ(b.gap, 4u);
    EXPECT_EQ(b.seed, 42u);
}

TEST(Rng, SameSeedSameStreamOtherSeedOtherStream)
{
    Rng a(1), b(1), c(2);
    bool differs = false;
    for (int i = 0; i < 1000; ++i) {
        std::uint64_t x = a.next();
        EXPECT_EQ(x, b.next());
        differs |= x != c.next();
    }
    EXPECT_TRUE(differs);
    Rng u(3);
    for (int i = 0; i < 10000; ++i) {
        double v = u.unit();
        ASSERT_GE(v, 0.0);
        ASSERT_LT(v, 1.0);
        ASSERT_LT(u.below(7), 7u);
    }
}

TEST(Impairer, TransparentPassesEveryFrameAtOnce)
{
    Impairer imp(parsed(""), 9);
    for (std::uint64_t t = 0; t < 1000; ++t) {
        Verdict v = imp.admit(t * 1000, 100);
        ASSERT_EQ(v.count, 1u);
        EXPECT_EQ(v.copies[0].due_ns, t * 1000);
        EXPECT_FALSE(v.copies[0].corrupt);
    }
}

TEST(Impairer, LossRateMatchesAndSeedRepeats)
{
    const std::uint64_t n = 100000;
    auto run = [&](std::uint64_t seed) {
        Impairer imp(parsed("loss 10%"), seed);
        std::vector<std::uint32_t> kept;
        for (std::uint64_t i = 0; i < n; ++i)
            kept.push_back(imp.admit(i, 100).count);
        EXPECT_EQ(imp.counters().lost, std::count(kept.begin(), kept.end(), 0u));
        return kept;
    };
    std::vector<std::uint32_t> first = run(5);
    expect_binomial(static_cast<std::uint64_t>(std::count(first.begin(), first.end(), 0u)), n,
                    0.10);
    EXPECT_EQ(first, run(5));
    EXPECT_NE(first, run(6));
    // A seed in the settings overrides the one the wire picks.
    Impairer a(parsed("loss 50% seed 11"), 1), b(parsed("loss 50% seed 11"), 2);
    for (int i = 0; i < 1000; ++i)
        ASSERT_EQ(a.admit(0, 60).count, b.admit(0, 60).count);
}

TEST(Impairer, AllLostAtHundredPercent)
{
    Impairer imp(parsed("loss 100%"), 1);
    for (int i = 0; i < 1000; ++i)
        ASSERT_EQ(imp.admit(0, 60).count, 0u);
}

TEST(Impairer, DuplicatesBothCopiesLeave)
{
    const std::uint64_t n = 50000;
    Impairer imp(parsed("duplicate 20% delay 1ms"), 3);
    std::uint64_t twice = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        Verdict v = imp.admit(i, 100);
        ASSERT_GE(v.count, 1u);
        if (v.count == 2) {
            ++twice;
            EXPECT_EQ(v.copies[1].due_ns, i + ms);
        }
    }
    expect_binomial(twice, n, 0.20);
}

TEST(Impairer, FixedDelayIsExact)
{
    Impairer imp(parsed("delay 7ms"), 1);
    for (std::uint64_t t = 0; t < 100; ++t)
        EXPECT_EQ(imp.admit(t * ms, 100).copies[0].due_ns, t * ms + 7 * ms);
}

TEST(Impairer, UniformJitterStaysInRange)
{
    Impairer imp(parsed("delay 10ms 2ms"), 4);
    double sum = 0;
    const int n = 20000;
    bool varied = false;
    std::uint64_t first = 0;
    for (int i = 0; i < n; ++i) {
        std::uint64_t d = imp.admit(0, 100).copies[0].due_ns;
        ASSERT_GE(d, 8 * ms);
        ASSERT_LE(d, 12 * ms);
        if (i == 0) first = d;
        varied |= d != first;
        sum += static_cast<double>(d);
    }
    EXPECT_TRUE(varied);
    EXPECT_NEAR(sum / n, 10.0 * ms, 0.05 * ms);
}

TEST(Impairer, NormalJitterHasTheGivenSpread)
{
    Impairer imp(parsed("delay 50ms 5ms distribution normal"), 8);
    const int n = 40000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
        double d = static_cast<double>(imp.admit(0, 100).copies[0].due_ns) / ms;
        sum += d;
        sq += d * d;
    }
    double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(mean, 50.0, 0.2);
    EXPECT_NEAR(sd, 5.0, 0.2);
}

TEST(Impairer, NegativeJitteredDelayClampsToNow)
{
    Impairer imp(parsed("delay 1ms 10ms"), 2);
    for (int i = 0; i < 1000; ++i)
        ASSERT_GE(imp.admit(5 * ms, 100).copies[0].due_ns, 5 * ms);
}

TEST(Impairer, ReorderSendsSomeAtOnceOthersDelayed)
{
    const std::uint64_t n = 40000;
    Impairer imp(parsed("delay 10ms reorder 25%"), 12);
    std::uint64_t at_once = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
        Fate f = imp.admit(i * 1000, 100).copies[0];
        if (f.reordered) {
            EXPECT_EQ(f.due_ns, i * 1000);
            ++at_once;
        } else {
            EXPECT_EQ(f.due_ns, i * 1000 + 10 * ms);
        }
    }
    expect_binomial(at_once, n, 0.25);
    EXPECT_EQ(imp.counters().reordered, at_once);
}

TEST(Impairer, ReorderGapDelaysGapMinusOneFramesFirst)
{
    Impairer imp(parsed("delay 1ms reorder 100% gap 5"), 1);
    for (int i = 0; i < 50; ++i) {
        bool reordered = imp.admit(0, 100).copies[0].reordered;
        EXPECT_EQ(reordered, i % 5 == 4) << "frame " << i;
    }
}

TEST(Impairer, RateSerializesBackToBackFrames)
{
    // 8 Mbit/s: 1000 bytes take 1 ms on the wire.
    Impairer imp(parsed("rate 8mbit"), 1);
    EXPECT_EQ(imp.serialization_ns(1000), 1 * ms);
    for (std::uint64_t i = 1; i <= 10; ++i)
        EXPECT_EQ(imp.admit(0, 1000).copies[0].due_ns, i * ms);
    // After the link went idle, a frame waits only its own serialization.
    EXPECT_EQ(imp.admit(100 * ms, 1000).copies[0].due_ns, 101 * ms);
    // Delay and rate: the frame leaves when both allow.
    Impairer both(parsed("delay 5ms rate 8mbit"), 1);
    EXPECT_EQ(both.admit(0, 1000).copies[0].due_ns, 6 * ms);
    EXPECT_EQ(both.admit(0, 1000).copies[0].due_ns, 7 * ms);
}

TEST(Impairer, RateOverheadsAsNetem)
{
    Impairer ovh(parsed("rate 8mbit 24"), 1);
    EXPECT_EQ(ovh.serialization_ns(1000), 1024 * 1000u); // (1000 + 24) bytes at 1 byte/us
    Impairer cells(parsed("rate 8mbit 0 64 5"), 1);
    EXPECT_EQ(cells.serialization_ns(100), 2 * 69 * 1000u); // 2 cells of 64 + 5 bytes
}

TEST(Impairer, CorruptionFlipsOneBitPastTheEthernetHeader)
{
    Impairer imp(parsed("corrupt 100%"), 6);
    std::vector<std::uint8_t> seen(100, 0);
    for (int round = 0; round < 2000; ++round) {
        std::vector<std::uint8_t> frame(100, 0xa5), before = frame;
        Verdict v = imp.admit(0, 100);
        ASSERT_EQ(v.count, 1u);
        ASSERT_TRUE(v.copies[0].corrupt);
        imp.corrupt(frame);
        int flipped = 0;
        for (std::size_t i = 0; i < frame.size(); ++i) {
            flipped += __builtin_popcount(static_cast<unsigned>(frame[i] ^ before[i]));
            if (frame[i] != before[i]) {
                EXPECT_GE(i, 14u);
                seen[i] = 1;
            }
        }
        ASSERT_EQ(flipped, 1);
    }
    // Spread over the whole payload, not one favourite byte.
    EXPECT_EQ(std::count(seen.begin() + 14, seen.end(), 1), 86);
    std::vector<std::uint8_t> header_only(14, 0x11), copy = header_only;
    imp.corrupt(header_only);
    EXPECT_EQ(header_only, copy);
}

TEST(Impairer, CorruptRateMatches)
{
    const std::uint64_t n = 50000;
    Impairer imp(parsed("corrupt 5%"), 21);
    std::uint64_t corrupt = 0;
    for (std::uint64_t i = 0; i < n; ++i)
        corrupt += imp.admit(0, 100).copies[0].corrupt;
    expect_binomial(corrupt, n, 0.05);
}

TEST(Impairer, ReconfigureWithSeedRestartsTheStream)
{
    Impairer a(parsed("loss 30%"), 1), b(parsed("loss 30%"), 99);
    for (int i = 0; i < 100; ++i)
        a.admit(0, 60);
    a.reconfigure(parsed("loss 40% seed 5"));
    b.reconfigure(parsed("loss 40% seed 5"));
    for (int i = 0; i < 1000; ++i)
        ASSERT_EQ(a.admit(0, 60).count, b.admit(0, 60).count);
    EXPECT_DOUBLE_EQ(a.config().loss.probability, 0.40);
}

TEST(Impairer, CorrelatedLossComesInLongerRuns)
{
    auto mean_run = [](const std::string &line) {
        Impairer imp(parsed(line), 17);
        std::uint64_t runs = 0, lost = 0;
        bool prev = false;
        for (int i = 0; i < 200000; ++i) {
            bool l = imp.admit(0, 60).count == 0;
            lost += l;
            runs += l && !prev;
            prev = l;
        }
        return static_cast<double>(lost) / static_cast<double>(runs);
    };
    EXPECT_GT(mean_run("loss 20% 90%"), 1.5 * mean_run("loss 20%"));
}

TEST(DelayQueue, OrdersByDueThenArrival)
{
    DelayQueue q(16);
    q.push(30, 0, 1);
    q.push(10, 1, 1);
    q.push(20, 2, 1);
    q.push(10, 3, 1);
    q.push(0, 4, 1);
    std::vector<std::uint32_t> order;
    while (!q.empty())
        order.push_back(q.pop().slot);
    EXPECT_EQ(order, (std::vector<std::uint32_t>{4, 1, 3, 2, 0}));
}

TEST(FramePool, TakeGiveAndGrowKeepFrames)
{
    FramePool pool(64, 2);
    std::uint32_t a = pool.take(), b = pool.take();
    EXPECT_NE(a, b);
    EXPECT_TRUE(pool.empty());
    pool.data(a)[0] = 0x42;
    pool.data(b)[63] = 0x24;
    pool.grow(8);
    EXPECT_EQ(pool.capacity(), 8u);
    EXPECT_EQ(pool.data(a)[0], 0x42);
    EXPECT_EQ(pool.data(b)[63], 0x24);
    std::vector<std::uint32_t> got;
    while (!pool.empty())
        got.push_back(pool.take());
    EXPECT_EQ(got.size(), 6u);
    pool.give(a);
    EXPECT_EQ(pool.take(), a);
}
