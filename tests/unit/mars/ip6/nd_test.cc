// Tests of mars/src/ip/nd (NeighborDiscovery) through the IPv6 layer, with
// no stack (ip6_fixture.h: recording PacketIo, virtual time). Covered: our
// link-local address, DAD (solicitations from ::, addresses PREFERRED and
// announced after a quiet second; a conflicting NA or a foreign DAD NS makes
// one DUPLICATE), NS answered with NA (flags and options right, the sender
// learnt), malformed ND refused, resolution with frames held and released,
// NUD REACHABLE -> STALE -> DELAY -> PROBE -> FAILED with waiting frames
// dropped and counted, the queue bound, shared mode learning without answering,
// an engine that is not the first (nd_follower) learning and resolving its
// own next hops without answering or probing for its addresses.
#include "ip6_fixture.h"

namespace {

using namespace mars;
using namespace mars::test;

Ip6Addr link_local_of(const MacAddr &m) { return ip6::link_local(m); }

TEST(Nd, LinkLocalIsModifiedEui64OfTheMac)
{
    const Ip6Addr ll = link_local_of(MacAddr{{0x00, 0x1b, 0x21, 0x3c, 0x4d, 0x5e}});
    const uint8_t want[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x1b, 0x21, 0xff, 0xfe, 0x3c, 0x4d, 0x5e};
    EXPECT_EQ(0, std::memcmp(ll.b, want, 16));
    Ip6Rig r;
    ASSERT_EQ(r.nd.n_addrs(), 2);
    EXPECT_TRUE(ip6::eq(r.nd.addr(0).addr, link_local_of(kOurMac)));
    EXPECT_TRUE(ip6::eq(r.nd.addr(1).addr, kOurIp));
}

TEST(Nd, DadSolicitsFromUnspecifiedThenAnnounces)
{
    Ip6Rig r;
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kTentative);
    r.nd.start(r.now);
    r.link.flush();
    ASSERT_EQ(r.io.sent.size(), 2u); // one per address
    for (size_t i = 0; i < 2; i++) {
        Sent s{r.io.sent[i]};
        ASSERT_TRUE(s.is_icmp6());
        EXPECT_EQ(s.type(), wire::kNdNeighborSolicit);
        EXPECT_TRUE(ip6::is_unspecified(s.ip()->src));
        EXPECT_EQ(s.ip()->hop_limit, 255);
        EXPECT_TRUE(ip6::eq(s.dst(), ip6::solicited_node(r.nd.addr(int(i)).addr.b)));
        EXPECT_TRUE(ip6::eq(s.target(), r.nd.addr(int(i)).addr));
        EXPECT_EQ(s.l4_len(), 24u) << "no source link-layer option from ::";
        EXPECT_TRUE(s.csum_good());
        const MacAddr m = ip6::multicast_mac(s.ip()->dst);
        EXPECT_EQ(0, std::memcmp(s.eth()->dst, m.b, 6));
        EXPECT_EQ(s.eth()->dst[0], 0x33);
    }
    r.io.sent.clear();
    // Tentative: an echo to it is not answered (RFC 4862 5.4).
    r.rx(echo(kPeerIp, kOurIp));
    EXPECT_TRUE(r.io.sent.empty());
    r.advance(kSec);
    EXPECT_EQ(r.nd.addr(0).state, AddrState::kPreferred);
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kPreferred);
    ASSERT_EQ(r.io.sent.size(), 2u); // unsolicited NAs
    for (size_t i = 0; i < 2; i++) {
        Sent s{r.io.sent[i]};
        EXPECT_EQ(s.type(), wire::kNdNeighborAdvert);
        EXPECT_TRUE(ip6::eq(s.dst(), ip6::all_nodes()));
        EXPECT_EQ(s.data(), wire::kNaOverride) << "override, not solicited";
        ASSERT_NE(s.lla(), nullptr);
        EXPECT_EQ(0, std::memcmp(s.lla(), kOurMac.b, 6));
        EXPECT_TRUE(s.csum_good());
    }
    EXPECT_EQ(r.stats.nd_dad_duplicates, 0u);
    EXPECT_EQ(r.io.outstanding, 0);
}

TEST(Nd, ConflictingNaMakesTentativeAddressDuplicate)
{
    Ip6Rig r;
    r.nd.start(r.now);
    r.link.flush();
    r.io.sent.clear();
    // Another node holds 2001:2::1 and says so.
    r.rx(na(kOurIp, ip6::all_nodes(), kOurIp, wire::kNaOverride), ip6::multicast_mac(ip6::all_nodes().b));
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kDuplicate);
    EXPECT_EQ(r.stats.nd_dad_duplicates, 1u);
    r.advance(kSec);
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kDuplicate) << "never used";
    EXPECT_EQ(r.nd.addr(0).state, AddrState::kPreferred);
    ASSERT_EQ(r.io.sent.size(), 1u) << "only the link-local address is announced";
    EXPECT_TRUE(ip6::eq(Sent{r.io.sent[0]}.target(), r.nd.addr(0).addr));
    r.io.sent.clear();
    r.rx(echo(kPeerIp, kOurIp));
    EXPECT_TRUE(r.io.sent.empty()) << "a duplicate address answers nothing";
    r.rx(ns(kPeerIp, ip6::solicited_node(kOurIp.b), kOurIp), ip6::multicast_mac(ip6::solicited_node(kOurIp.b).b));
    EXPECT_TRUE(r.io.sent.empty());
    EXPECT_EQ(r.io.outstanding, 0);
}

TEST(Nd, ForeignDadSolicitationMakesTentativeAddressDuplicate)
{
    Ip6Rig r;
    r.nd.start(r.now);
    const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
    r.rx(ns(Ip6Addr{}, sn, kOurIp, false), ip6::multicast_mac(sn.b));
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kDuplicate);
    EXPECT_EQ(r.stats.nd_dad_duplicates, 1u);
}

TEST(Nd, SolicitationAnsweredWithSolicitedOverrideAdvertisement)
{
    Ip6Rig r;
    r.up();
    const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
    r.rx(ns(kPeerIp, sn, kOurIp), ip6::multicast_mac(sn.b));
    EXPECT_EQ(r.stats.nd_ns_in, 1u);
    ASSERT_EQ(r.io.sent.size(), 1u);
    Sent s{r.io.sent[0]};
    EXPECT_EQ(s.type(), wire::kNdNeighborAdvert);
    EXPECT_EQ(s.data(), wire::kNaSolicited | wire::kNaOverride);
    EXPECT_TRUE(ip6::eq(s.src(), kOurIp));
    EXPECT_TRUE(ip6::eq(s.dst(), kPeerIp));
    EXPECT_TRUE(ip6::eq(s.target(), kOurIp));
    EXPECT_EQ(s.ip()->hop_limit, 255);
    EXPECT_EQ(0, std::memcmp(s.eth()->dst, kPeerMac.b, 6));
    EXPECT_EQ(0, std::memcmp(s.eth()->src, kOurMac.b, 6));
    ASSERT_NE(s.lla(), nullptr);
    EXPECT_EQ(s.lla()[-2], wire::kNdOptTargetLla);
    EXPECT_EQ(0, std::memcmp(s.lla(), kOurMac.b, 6));
    EXPECT_TRUE(s.csum_good());
    // The sender was learnt from its source link-layer option (STALE, RFC 4861 7.2.3).
    const Neighbor6 *e = r.nd.peek(kPeerIp);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->state, NudState::kStale);
    EXPECT_EQ(0, std::memcmp(e->mac.b, kPeerMac.b, 6));
    EXPECT_EQ(r.stats.nd_na_out, 3u); // two unsolicited at start, this one
    EXPECT_EQ(r.io.outstanding, 0);
}

TEST(Nd, MalformedNeighborDiscoveryIsDropped)
{
    Ip6Rig r;
    r.up();
    const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
    const MacAddr snm = ip6::multicast_mac(sn.b);
    r.rx(ns(kPeerIp, sn, kOurIp, true, 254), snm); // routed: hop limit not 255
    // An option of length 0.
    std::vector<uint8_t> body = nd_body(kOurIp, wire::kNdOptSourceLla);
    body[17] = 0;
    r.rx(packet6(kPeerIp, sn, wire::kProtoIcmp6, icmp6(kPeerIp, sn, wire::kNdNeighborSolicit, 0, 0, body), 255), snm);
    // Too short for a target.
    r.rx(packet6(kPeerIp, sn, wire::kProtoIcmp6, icmp6(kPeerIp, sn, wire::kNdNeighborSolicit, 0, 0, {1, 2, 3}), 255), snm);
    // A DAD solicitation must not carry a source link-layer option.
    r.rx(ns(Ip6Addr{}, sn, kOurIp, true), snm);
    // A solicited NA to a multicast group.
    r.rx(na(kPeerIp, ip6::all_nodes(), kPeerIp, wire::kNaSolicited), ip6::multicast_mac(ip6::all_nodes().b));
    EXPECT_EQ(r.stats.nd_drop_invalid, 5u);
    EXPECT_TRUE(r.io.sent.empty());
    EXPECT_EQ(r.nd.peek(kPeerIp), nullptr);
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kPreferred);
    EXPECT_EQ(r.io.outstanding, 0);
}

// A neighbour that answers, then stops: REACHABLE, STALE after 30 s, DELAY
// on use, PROBE after 5 s (unicast solicitations), FAILED after the last;
// the next frames wait for a new resolution and are dropped when it fails.
TEST(Nd, NeighbourThatStopsAnsweringFails)
{
    Ip6Rig r;
    r.up();
    // An echo reply to an unknown neighbour waits for resolution.
    r.rx(echo(kPeerIp, kOurIp));
    ASSERT_EQ(r.io.sent.size(), 1u);
    {
        Sent s{r.io.sent[0]};
        EXPECT_EQ(s.type(), wire::kNdNeighborSolicit);
        EXPECT_TRUE(ip6::eq(s.dst(), ip6::solicited_node(kPeerIp.b)));
        EXPECT_TRUE(ip6::eq(s.src(), kOurIp));
        ASSERT_NE(s.lla(), nullptr);
        EXPECT_EQ(0, std::memcmp(s.lla(), kOurMac.b, 6));
    }
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kIncomplete);
    EXPECT_EQ(r.nd.frames_waiting(), 1u);
    r.io.sent.clear();
    r.rx(na(kPeerIp, kOurIp, kPeerIp, wire::kNaSolicited | wire::kNaOverride));
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kReachable);
    ASSERT_EQ(r.io.sent.size(), 1u) << "the held echo reply leaves";
    EXPECT_EQ(Sent{r.io.sent[0]}.type(), wire::kIcmp6EchoReply);
    EXPECT_EQ(0, std::memcmp(Sent{r.io.sent[0]}.eth()->dst, kPeerMac.b, 6));
    r.io.sent.clear();

    r.advance(NeighborDiscovery::kReachableNs);
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kStale);
    EXPECT_TRUE(r.io.sent.empty()) << "STALE sends nothing until used";
    r.rx(echo(kPeerIp, kOurIp)); // used: DELAY, the frame goes out at once
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kDelay);
    ASSERT_EQ(r.io.sent.size(), 1u);
    r.io.sent.clear();
    r.advance(NeighborDiscovery::kDelayNs);
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kProbe);
    for (int probe = 0; probe < 3; probe++) {
        ASSERT_EQ(r.io.sent.size(), 1u) << "probe " << probe;
        Sent s{r.io.sent[0]};
        EXPECT_EQ(s.type(), wire::kNdNeighborSolicit);
        EXPECT_TRUE(ip6::eq(s.dst(), kPeerIp)) << "unicast probe";
        EXPECT_EQ(0, std::memcmp(s.eth()->dst, kPeerMac.b, 6));
        r.io.sent.clear();
        r.advance(kSec);
    }
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kFailed);
    EXPECT_EQ(r.stats.nd_failed, 1u);
    ASSERT_EQ(r.nd.failed_count(), 1u);
    EXPECT_TRUE(ip6::eq(r.nd.failed_at(0), kPeerIp));
    r.nd.clear_failed();
    EXPECT_TRUE(r.io.sent.empty());

    // Traffic for a FAILED neighbour starts a new resolution; unanswered,
    // the frames that waited are dropped and counted.
    r.rx(echo(kPeerIp, kOurIp, 0x12340002));
    r.rx(echo(kPeerIp, kOurIp, 0x12340003));
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kIncomplete);
    EXPECT_EQ(r.nd.frames_waiting(), 2u);
    r.advance(kSec);
    r.advance(kSec);
    r.advance(kSec);
    EXPECT_EQ(r.io.sent.size(), 3u) << "three multicast solicitations";
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kFailed);
    EXPECT_EQ(r.stats.nd_failed, 2u);
    EXPECT_EQ(r.stats.nd_drop_unresolved, 2u);
    EXPECT_EQ(r.nd.frames_waiting(), 0u);
    EXPECT_EQ(r.nd.next_deadline_ns(), UINT64_MAX) << "nothing left to time";
    EXPECT_EQ(r.io.outstanding, 0);
}

TEST(Nd, ConfirmKeepsNeighbourReachable)
{
    Ip6Rig r;
    r.up();
    r.rx(ns(kPeerIp, kOurIp, kOurIp)); // learnt STALE
    r.nd.confirm(kPeerIp, r.now);
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kReachable);
}

TEST(Nd, WaitingFramesAreBounded)
{
    Ip6Rig r;
    r.up();
    for (int i = 0; i < 70; i++) r.rx(echo(kPeerIp, kOurIp, 0x12340000u + uint32_t(i)));
    EXPECT_EQ(r.nd.frames_waiting(), 64u);
    EXPECT_EQ(r.stats.nd_drop_queue_full, 6u);
    r.nd.discard_waiting();
    EXPECT_EQ(r.io.outstanding, 0);
}

// Our own addresses are never neighbours (issue 29, local connections over
// IPv6): no solicitation for one, no cache entry from an NS claiming one,
// and a frame held for one goes to the local loop, which a layer tested alone
// has not: dropped and counted, its buffer back.
TEST(Nd, OurOwnAddressIsNeverSolicitedNorLearnt)
{
    Ip6Rig r;
    r.up();
    for (const Ip6Addr &own : {kOurIp, ip6::link_local(kOurMac)}) {
        EXPECT_EQ(r.nd.lookup(own, r.now), nullptr);
        r.link.flush();
        EXPECT_TRUE(r.io.sent.empty()) << "our own address solicited";
        EXPECT_EQ(r.nd.peek(own), nullptr);
    }
    const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
    r.rx(ns(kOurIp, sn, kOurIp), ip6::multicast_mac(sn.b)); // from our own address, with a link-layer option
    EXPECT_EQ(r.stats.nd_ns_in, 1u);
    EXPECT_EQ(r.nd.peek(kOurIp), nullptr) << "an NS taught the cache our own address";
    r.io.sent.clear();
    PacketRef f{};
    ASSERT_TRUE(r.link.alloc(&f));
    r.nd.hold(kOurIp, f);
    EXPECT_EQ(r.nd.frames_waiting(), 0u);
    EXPECT_EQ(r.stats.nd_drop_unresolved, 1u);
    r.advance(10 * kSec);
    EXPECT_TRUE(r.io.sent.empty());
    EXPECT_EQ(r.stats.nd_failed, 0u);
    EXPECT_EQ(r.io.outstanding, 0);
}

// Sharing the port: the kernel does DAD and answers; we learn.
TEST(Nd, SharedModeLearnsButNeitherAnswersNorProbes)
{
    Ip6Rig r(true);
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kPreferred);
    r.nd.start(r.now);
    r.link.flush();
    EXPECT_TRUE(r.io.sent.empty()) << "no DAD when sharing";
    const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
    r.rx(ns(kPeerIp, sn, kOurIp), ip6::multicast_mac(sn.b));
    EXPECT_TRUE(r.io.sent.empty()) << "the kernel answers";
    ASSERT_EQ(r.io.passed.size(), 1u);
    EXPECT_EQ(r.io.reasons[0], Unclaimed::kIpv6);
    ASSERT_NE(r.nd.peek(kPeerIp), nullptr);
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kStale);
    // The kernel's own NA for our address, seen on the wire: no conflict.
    r.rx(na(kOurIp, ip6::all_nodes(), kOurIp, wire::kNaOverride, kOurMac), ip6::multicast_mac(ip6::all_nodes().b));
    EXPECT_EQ(r.stats.nd_dad_duplicates, 0u);
    EXPECT_EQ(r.io.passed.size(), 2u);
    EXPECT_EQ(r.io.outstanding, 0);
}

// Several engines on one port: every engine sees each NS and NA (ppe
// steer.h), the first answers and probes; another runs DAD's states and timer
// silently (no address used before the first may use it, the same conflicts
// seen), learns from what it sees and resolves its own next hops, but sends
// no advertisement (one NA per solicitation on the wire, not one per engine).
TEST(Nd, FollowerEngineLearnsAndResolvesButNeitherAnswersNorProbes)
{
    Ip6Rig r(false, true);
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kTentative);
    r.nd.start(r.now);
    r.link.flush();
    EXPECT_TRUE(r.io.sent.empty()) << "no DAD solicitation from a follower";
    r.rx(echo(kPeerIp, kOurIp));
    EXPECT_TRUE(r.io.sent.empty()) << "tentative: no echo reply while the first engine probes";
    r.advance(kSec);
    EXPECT_EQ(r.nd.addr(0).state, AddrState::kPreferred);
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kPreferred);
    EXPECT_TRUE(r.io.sent.empty()) << "no announcement from a follower";
    const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
    r.rx(ns(kPeerIp, sn, kOurIp), ip6::multicast_mac(sn.b));
    EXPECT_TRUE(r.io.sent.empty()) << "the first engine answers";
    EXPECT_TRUE(r.io.passed.empty()) << "nothing for a kernel: the port is not shared";
    ASSERT_NE(r.nd.peek(kPeerIp), nullptr) << "learnt from the solicitation";
    EXPECT_EQ(r.nd.peek(kPeerIp)->state, NudState::kStale);
    // A DAD probe for our address (from ::) is the first engine's to defend.
    r.rx(ns(Ip6Addr{}, sn, kOurIp, false), ip6::multicast_mac(sn.b));
    EXPECT_TRUE(r.io.sent.empty());
    // Its own next hop: solicited by this engine, resolved by the NA the
    // steering shares with it.
    const Ip6Addr other = [] {
        Ip6Addr a = kPeerIp;
        a.b[15] ^= 0x40;
        return a;
    }();
    r.rx(echo(other, kOurIp));
    ASSERT_EQ(r.io.sent.size(), 1u);
    EXPECT_EQ(Sent{r.io.sent[0]}.type(), wire::kNdNeighborSolicit);
    r.io.sent.clear();
    r.rx(na(other, kOurIp, other, wire::kNaSolicited | wire::kNaOverride));
    ASSERT_EQ(r.io.sent.size(), 1u) << "the held echo reply leaves";
    EXPECT_EQ(Sent{r.io.sent[0]}.type(), wire::kIcmp6EchoReply);
    EXPECT_EQ(r.io.outstanding, 0);
}

// A follower sees another node's DAD for a tentative address as the first
// engine does: duplicate on both.
TEST(Nd, FollowerSeesTheSameConflicts)
{
    Ip6Rig r(false, true);
    r.nd.start(r.now);
    const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
    r.rx(ns(Ip6Addr{}, sn, kOurIp, false), ip6::multicast_mac(sn.b));
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kDuplicate);
    r.advance(kSec);
    EXPECT_EQ(r.nd.addr(1).state, AddrState::kDuplicate);
    EXPECT_TRUE(r.io.sent.empty());
}

} // namespace
