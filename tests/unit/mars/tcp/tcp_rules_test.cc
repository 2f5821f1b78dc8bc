// Tests of mars/src/tcp_rules.h, the pure rules of TCP input: RFC 9293
// 3.10.7.4's acceptability test (its four cases of segment length and
// window, SYN and FIN counting as a byte, sequence-number wrap), PAWS with
// one tick of tolerance (RFC 7323 5.3), and D-SACK recognition (RFC 2883 4).
#include "tcp_rules.h"

#include <gtest/gtest.h>

namespace {

using namespace mars;
using wire::kAck;
using wire::kFin;
using wire::kRst;
using wire::kSyn;

constexpr uint32_t kNxt = 1000;

TEST(SegmentAcceptable, EmptySegmentWithOpenWindow)
{
    EXPECT_TRUE(segment_acceptable(kNxt, 100, kNxt, 0, kAck));
    EXPECT_TRUE(segment_acceptable(kNxt, 100, kNxt + 99, 0, kAck));
    EXPECT_FALSE(segment_acceptable(kNxt, 100, kNxt + 100, 0, kAck)) << "past the window";
    EXPECT_FALSE(segment_acceptable(kNxt, 100, kNxt - 1, 0, kAck)) << "old";
    EXPECT_FALSE(segment_acceptable(kNxt, 100, kNxt - 1, 0, kRst));
}

TEST(SegmentAcceptable, EmptySegmentWithZeroWindow)
{
    EXPECT_TRUE(segment_acceptable(kNxt, 0, kNxt, 0, kAck)) << "window updates while closed";
    EXPECT_FALSE(segment_acceptable(kNxt, 0, kNxt + 1, 0, kAck));
    EXPECT_FALSE(segment_acceptable(kNxt, 0, kNxt - 1, 0, kAck));
}

TEST(SegmentAcceptable, DataWithOpenWindow)
{
    EXPECT_TRUE(segment_acceptable(kNxt, 100, kNxt, 50, kAck));
    EXPECT_TRUE(segment_acceptable(kNxt, 100, kNxt - 10, 50, kAck)) << "ends inside: partly old";
    EXPECT_TRUE(segment_acceptable(kNxt, 100, kNxt + 90, 50, kAck)) << "starts inside: trimmed later";
    EXPECT_FALSE(segment_acceptable(kNxt, 100, kNxt - 50, 50, kAck)) << "all of it old";
    EXPECT_FALSE(segment_acceptable(kNxt, 100, kNxt + 100, 50, kAck)) << "all of it past the window";
    // A FIN counts as a byte: a FIN right after old data reaches rcv_nxt.
    EXPECT_TRUE(segment_acceptable(kNxt, 100, kNxt - 50, 50, kAck | kFin));
    EXPECT_FALSE(segment_acceptable(kNxt, 100, kNxt - 51, 50, kAck | kFin));
}

TEST(SegmentAcceptable, DataWithZeroWindow)
{
    EXPECT_TRUE(segment_acceptable(kNxt, 0, kNxt, 50, kAck)) << "its ACK (and RST) still count";
    EXPECT_TRUE(segment_acceptable(kNxt, 0, kNxt, 0, kAck | kFin));
    EXPECT_FALSE(segment_acceptable(kNxt, 0, kNxt, 0, kSyn)) << "a SYN is not control-only";
    EXPECT_FALSE(segment_acceptable(kNxt, 0, kNxt + 1, 50, kAck));
    EXPECT_FALSE(segment_acceptable(kNxt, 0, kNxt - 1, 50, kAck));
}

TEST(SegmentAcceptable, AcrossSequenceWrap)
{
    const uint32_t nxt = 0xfffffff0u;
    EXPECT_TRUE(segment_acceptable(nxt, 100, 0x10, 10, kAck));
    EXPECT_TRUE(segment_acceptable(nxt, 100, nxt, 100, kAck));
    EXPECT_FALSE(segment_acceptable(nxt, 100, nxt + 100, 1, kAck));
    EXPECT_TRUE(segment_acceptable(nxt, 100, nxt - 5, 10, kAck));
}

TEST(Paws, OneTickOfTolerance)
{
    EXPECT_FALSE(paws_old(100, 100));
    EXPECT_FALSE(paws_old(101, 100));
    EXPECT_FALSE(paws_old(99, 100)) << "one tick older: a reordered original";
    EXPECT_TRUE(paws_old(98, 100));
    EXPECT_FALSE(paws_old(2, 0xffffffffu)) << "newer across the wrap";
    EXPECT_TRUE(paws_old(0xfffffff0u, 5)) << "older across the wrap";
}

TEST(Dsack, FirstBlockBelowTheAckOrInsideTheSecond)
{
    TcpOptions o{};
    o.n_sack = 1;
    o.sack[0] = SeqRange{100, 200};
    EXPECT_TRUE(is_dsack(o, 200)) << "at or below the cumulative ACK";
    EXPECT_TRUE(is_dsack(o, 300));
    EXPECT_FALSE(is_dsack(o, 150)) << "an ordinary SACK block";
    o.n_sack = 2;
    o.sack[1] = SeqRange{50, 250};
    EXPECT_TRUE(is_dsack(o, 10)) << "inside the second block";
    o.sack[1] = SeqRange{150, 250};
    EXPECT_FALSE(is_dsack(o, 10));
}

} // namespace
