// Tests of mars/src/arp (ArpResolver) on its own, with no stack: requests on
// Linux's schedule (arp_probes, arp_retrans_ns), replies to requests for our
// address, RFC 826's merge rule, frames held until their neighbour resolves
// (and dropped when it FAILS after the last request), a failed neighbour
// resolved anew by the next frame for it, the bound on held frames, refresh before expiry, expiry,
// gratuitous ARP and malformed frames. The PacketIo is a recording fake
// (test fixture): frames it hands out come from a small pool, frames sent
// are kept for the test to read, and every buffer must come back.
#include "arp.h"
#include "recording_io.h"
#include "wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace {

using namespace mars;
using mars::test::RecordingIo;
using wire::be16;
using wire::be32;

constexpr uint64_t kSec = 1'000'000'000ull;
constexpr uint32_t kOurIp = 0xC6120001;   // 198.18.0.1
constexpr uint32_t kPeerIp = 0xC6120002;  // 198.18.0.2
constexpr uint32_t kOtherIp = 0xC6120003; // 198.18.0.3
const MacAddr kOurMac{{0x02, 0, 0, 0, 0, 1}};
const MacAddr kPeerMac{{0x02, 0, 0, 0, 0, 2}};

StackConfig config()
{
    StackConfig c;
    c.ip = kOurIp;
    c.mac = kOurMac;
    c.arp_pending_frames = 4;
    c.arp_timeout_ns = 60 * kSec;
    return c;
}

const wire::Arp &arp_of(const std::vector<uint8_t> &frame)
{
    return *reinterpret_cast<const wire::Arp *>(frame.data() + wire::kEthLen);
}

class ArpTest : public ::testing::Test {
  protected:
    ArpTest() : link(io, stats), arp(config(), link, stats) {}

    // An ARP frame from (sha, spa) about (tpa), as a received frame (the
    // fixture owns its bytes; the resolver releases it).
    PacketRef arp_frame(uint16_t op, const MacAddr &sha, uint32_t spa, uint32_t tpa, uint16_t len = 0)
    {
        rx.push_back(std::vector<uint8_t>(wire::kEthLen + sizeof(wire::Arp)));
        uint8_t *d = rx.back().data();
        auto *eth = reinterpret_cast<wire::Eth *>(d);
        std::memset(eth->dst, 0xff, 6);
        std::memcpy(eth->src, sha.b, 6);
        eth->type = be16(wire::kEtherArp);
        auto *a = reinterpret_cast<wire::Arp *>(d + wire::kEthLen);
        a->htype = be16(1);
        a->ptype = be16(wire::kEtherIpv4);
        a->hlen = 6;
        a->plen = 4;
        a->op = be16(op);
        std::memcpy(a->sha, sha.b, 6);
        a->spa = be32(spa);
        a->tpa = be32(tpa);
        io.outstanding++; // a received frame is a buffer the resolver must give back
        return PacketRef{d, d, uint16_t(len ? len : rx.back().size()), 0, 0};
    }
    // An IPv4 frame to send to hop (Ethernet destination left for ARP).
    PacketRef ipv4_frame(uint8_t marker)
    {
        PacketRef f;
        EXPECT_TRUE(link.alloc(&f));
        std::memset(f.data, 0, 64);
        f.data[wire::kEthLen] = marker;
        f.len = 64;
        return f;
    }
    void flush() { link.flush(); }

    RecordingIo io;
    StackStats stats{};
    Link link;
    ArpResolver arp;
    std::vector<std::vector<uint8_t>> rx;
};

TEST_F(ArpTest, UnknownNeighbourIsRequestedOnceASecondThreeTimes)
{
    EXPECT_EQ(arp.lookup(kPeerIp, 1 * kSec), nullptr);
    flush();
    ASSERT_EQ(io.sent.size(), 1u);
    const wire::Arp &a = arp_of(io.sent[0]);
    EXPECT_EQ(be16(a.op), wire::kArpRequest);
    EXPECT_EQ(be32(a.tpa), kPeerIp);
    EXPECT_EQ(be32(a.spa), kOurIp);
    EXPECT_EQ(std::memcmp(a.sha, kOurMac.b, 6), 0);
    for (int i = 0; i < 6; i++) EXPECT_EQ(io.sent[0][i], 0xff) << "broadcast";
    EXPECT_EQ(stats.arp_requests_out, 1u);

    EXPECT_EQ(arp.next_deadline_ns(), 2 * kSec) << "the next request: arp_retrans_ns later";
    EXPECT_EQ(arp.lookup(kPeerIp, 1 * kSec + kSec / 2), nullptr);
    arp.poll(1 * kSec + kSec / 2);
    flush();
    EXPECT_EQ(io.sent.size(), 1u) << "one request a second";
    arp.poll(2 * kSec);
    EXPECT_EQ(arp.lookup(kPeerIp, 2 * kSec), nullptr);
    flush();
    EXPECT_EQ(io.sent.size(), 2u);
    arp.poll(3 * kSec);
    flush();
    EXPECT_EQ(io.sent.size(), 3u) << "arp_probes = 3";
    EXPECT_EQ(arp.failed_count(), 0u);
    arp.poll(4 * kSec);
    flush();
    EXPECT_EQ(io.sent.size(), 3u) << "no fourth request";
    ASSERT_EQ(arp.failed_count(), 1u) << "a second after the third request: FAILED";
    EXPECT_EQ(arp.failed_at(0), kPeerIp);
    EXPECT_EQ(stats.arp_failed, 1u);
    EXPECT_EQ(arp.next_deadline_ns(), UINT64_MAX) << "nothing in progress";
    arp.clear_failed();
    EXPECT_EQ(arp.failed_count(), 0u);
}

TEST_F(ArpTest, ProbesFollowTheConfiguredCountAndInterval)
{
    StackConfig c = config();
    c.arp_probes = 5;
    c.arp_retrans_ns = kSec / 4;
    ArpResolver quick(c, link, stats);
    EXPECT_EQ(quick.lookup(kPeerIp, kSec), nullptr);
    uint64_t t = kSec;
    while (quick.failed_count() == 0 && t < 10 * kSec) {
        t = quick.next_deadline_ns();
        quick.poll(t);
    }
    flush();
    EXPECT_EQ(io.sent.size(), 5u);
    EXPECT_EQ(t, kSec + 5 * (kSec / 4)) << "fails arp_retrans_ns after the fifth request";
    EXPECT_EQ(quick.failed_count(), 1u);
}

TEST_F(ArpTest, FailedNeighbourIsResolvedAgainByTheNextFrame)
{
    ASSERT_EQ(arp.lookup(kPeerIp, kSec), nullptr);
    for (uint64_t t = 2; t <= 4; t++) arp.poll(t * kSec);
    ASSERT_EQ(arp.failed_count(), 1u);
    arp.clear_failed();
    flush();
    const size_t before = io.sent.size();
    // Linux: a packet for a FAILED neighbour starts probing again.
    EXPECT_EQ(arp.lookup(kPeerIp, 10 * kSec), nullptr);
    flush();
    ASSERT_EQ(io.sent.size(), before + 1);
    EXPECT_EQ(be32(arp_of(io.sent.back()).tpa), kPeerIp);
    EXPECT_EQ(arp.next_deadline_ns(), 11 * kSec);
    // This time it answers: resolved, and no failure.
    PacketRef reply = arp_frame(wire::kArpReply, kPeerMac, kPeerIp, kOurIp);
    arp.input(reply, 10 * kSec + 1000);
    EXPECT_NE(arp.peek(kPeerIp), nullptr);
    for (uint64_t t = 11; t <= 14; t++) arp.poll(t * kSec);
    EXPECT_EQ(arp.failed_count(), 0u);
    EXPECT_EQ(stats.arp_failed, 1u);
    flush();
    EXPECT_EQ(io.sent.size(), before + 1) << "no request after the reply";
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(ArpTest, HeldFramesLeaveInOrderWhenTheReplyComes)
{
    const uint32_t gen = arp.generation();
    ASSERT_EQ(arp.lookup(kPeerIp, kSec), nullptr);
    PacketRef a = ipv4_frame(1), b = ipv4_frame(2);
    arp.hold(kPeerIp, a, kSec);
    arp.hold(kPeerIp, b, kSec);
    EXPECT_EQ(arp.frames_waiting(), 2u);
    EXPECT_EQ(arp.next_deadline_ns(), 2 * kSec);
    PacketRef reply = arp_frame(wire::kArpReply, kPeerMac, kPeerIp, kOurIp);
    arp.input(reply, kSec + 1000);
    flush();
    EXPECT_EQ(arp.frames_waiting(), 0u);
    EXPECT_EQ(arp.next_deadline_ns(), UINT64_MAX);
    ASSERT_EQ(io.sent.size(), 3u); // the request, then the two frames in order
    for (int i = 0; i < 2; i++) {
        EXPECT_EQ(std::memcmp(io.sent[1 + i].data(), kPeerMac.b, 6), 0);
        EXPECT_EQ(io.sent[1 + i][wire::kEthLen], i + 1);
    }
    EXPECT_NE(arp.generation(), gen) << "a new MAC invalidates prebuilt headers";
    const MacAddr *mac = arp.lookup(kPeerIp, 2 * kSec);
    ASSERT_NE(mac, nullptr);
    EXPECT_EQ(std::memcmp(mac->b, kPeerMac.b, 6), 0);
    ASSERT_NE(arp.peek(kPeerIp), nullptr);
    EXPECT_EQ(stats.arp_replies_in, 1u);
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(ArpTest, RequestForUsIsAnsweredAndTeachesTheSender)
{
    PacketRef req = arp_frame(wire::kArpRequest, kPeerMac, kPeerIp, kOurIp);
    arp.input(req, kSec);
    flush();
    ASSERT_EQ(io.sent.size(), 1u);
    EXPECT_EQ(std::memcmp(io.sent[0].data(), kPeerMac.b, 6), 0) << "unicast to the requester";
    const wire::Arp &a = arp_of(io.sent[0]);
    EXPECT_EQ(be16(a.op), wire::kArpReply);
    EXPECT_EQ(be32(a.spa), kOurIp);
    EXPECT_EQ(std::memcmp(a.sha, kOurMac.b, 6), 0);
    EXPECT_EQ(be32(a.tpa), kPeerIp);
    EXPECT_EQ(std::memcmp(a.tha, kPeerMac.b, 6), 0);
    EXPECT_EQ(stats.arp_requests_in, 1u);
    EXPECT_EQ(stats.arp_replies_out, 1u);
    EXPECT_NE(arp.lookup(kPeerIp, kSec), nullptr) << "the sender was learned: no request needed";
    flush();
    EXPECT_EQ(io.sent.size(), 1u);
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(ArpTest, RequestForSomeoneElseTeachesOnlyKnownSenders)
{
    // RFC 826: a stranger's request for another host adds nothing...
    PacketRef req = arp_frame(wire::kArpRequest, kPeerMac, kPeerIp, kOtherIp);
    arp.input(req, kSec);
    flush();
    EXPECT_TRUE(io.sent.empty()) << "not for us: no reply";
    EXPECT_EQ(arp.peek(kPeerIp), nullptr);
    // ...but updates a neighbour already in the cache.
    EXPECT_EQ(arp.lookup(kPeerIp, 2 * kSec), nullptr);
    PacketRef again = arp_frame(wire::kArpRequest, kPeerMac, kPeerIp, kOtherIp);
    arp.input(again, 2 * kSec);
    EXPECT_NE(arp.peek(kPeerIp), nullptr);
    flush();
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(ArpTest, HeldFramesAreBoundedAndDroppedWhenTheNeighbourFails)
{
    ASSERT_EQ(arp.lookup(kPeerIp, kSec), nullptr);
    for (uint8_t i = 0; i < 5; i++) {
        PacketRef f = ipv4_frame(i);
        arp.hold(kPeerIp, f, kSec);
    }
    EXPECT_EQ(arp.frames_waiting(), 4u) << "arp_pending_frames = 4";
    EXPECT_EQ(stats.drop_arp_queue_full, 1u);
    arp.poll(kSec + kSec / 2); // not due yet
    flush();
    EXPECT_EQ(io.sent.size(), 1u);
    arp.poll(2 * kSec); // second request
    arp.poll(3 * kSec); // third request
    flush();
    EXPECT_EQ(io.sent.size(), 3u);
    EXPECT_EQ(arp.frames_waiting(), 4u);
    arp.poll(4 * kSec); // three unanswered: FAILED, the frames go
    flush();
    EXPECT_EQ(arp.frames_waiting(), 0u);
    EXPECT_EQ(stats.drop_arp_queue_full, 1u);
    EXPECT_EQ(stats.drop_arp_unresolved, 4u);
    EXPECT_EQ(stats.arp_failed, 1u);
    EXPECT_EQ(io.sent.size(), 3u);
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(ArpTest, NeighbourInUseIsRefreshedBeforeItExpires)
{
    ASSERT_EQ(arp.lookup(kPeerIp, kSec), nullptr);
    PacketRef reply = arp_frame(wire::kArpReply, kPeerMac, kPeerIp, kOurIp);
    arp.input(reply, kSec); // expires at 61 s
    flush();
    const size_t before = io.sent.size();
    EXPECT_NE(arp.lookup(kPeerIp, 40 * kSec), nullptr);
    flush();
    EXPECT_EQ(io.sent.size(), before) << "more than a quarter of its life left";
    EXPECT_NE(arp.lookup(kPeerIp, 50 * kSec), nullptr) << "still good while it is refreshed";
    flush();
    ASSERT_EQ(io.sent.size(), before + 1);
    EXPECT_EQ(be16(arp_of(io.sent.back()).op), wire::kArpRequest);
    const uint32_t gen = arp.generation();
    EXPECT_EQ(arp.lookup(kPeerIp, 61 * kSec), nullptr) << "expired";
    EXPECT_NE(arp.generation(), gen);
    EXPECT_EQ(arp.peek(kPeerIp), nullptr);
    flush();
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(ArpTest, AnnounceIsARequestForOurOwnAddress)
{
    arp.announce();
    flush();
    ASSERT_EQ(io.sent.size(), 1u);
    EXPECT_EQ(be16(arp_of(io.sent[0]).op), wire::kArpRequest);
    EXPECT_EQ(be32(arp_of(io.sent[0]).tpa), kOurIp);
    EXPECT_EQ(be32(arp_of(io.sent[0]).spa), kOurIp);
}

TEST_F(ArpTest, MalformedFramesAreDroppedAndCounted)
{
    PacketRef shortf = arp_frame(wire::kArpReply, kPeerMac, kPeerIp, kOurIp, wire::kEthLen + 10);
    arp.input(shortf, kSec);
    PacketRef bad = arp_frame(wire::kArpReply, kPeerMac, kPeerIp, kOurIp);
    reinterpret_cast<wire::Arp *>(bad.data + wire::kEthLen)->hlen = 8;
    arp.input(bad, kSec);
    const MacAddr multicast{{0x01, 0, 0x5e, 0, 0, 1}};
    PacketRef bogus = arp_frame(wire::kArpReply, multicast, kPeerIp, kOurIp);
    arp.input(bogus, kSec);
    flush();
    EXPECT_EQ(stats.drop_arp, 3u);
    EXPECT_EQ(arp.peek(kPeerIp), nullptr);
    EXPECT_TRUE(io.sent.empty());
    EXPECT_EQ(io.released, 3);
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(ArpTest, HeldFramesGoBackWhenDiscarded)
{
    ASSERT_EQ(arp.lookup(kPeerIp, kSec), nullptr);
    PacketRef f = ipv4_frame(7);
    arp.hold(kPeerIp, f, kSec);
    arp.discard_waiting();
    flush();
    EXPECT_EQ(arp.frames_waiting(), 0u);
    EXPECT_EQ(io.outstanding, 0);
}

} // namespace
