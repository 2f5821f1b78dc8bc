// The IPv6 layer inside a whole stack (Stack::create, a sim::RawPeer port,
// virtual time): input_frame's demux of EtherType 0x86dd and its multicast
// MAC check, announce() starting DAD, poll() finishing it (addrs6_tentative()
// counting down to 0), and the stack then answering NS and echo for its
// addresses (issue 31).
#include "ip6_fixture.h"
#include "raw_peer.h"

namespace {

using namespace mars;
using namespace mars::test;

std::vector<uint8_t> eth6(const MacAddr &dst, const MacAddr &src, const std::vector<uint8_t> &packet)
{
    std::vector<uint8_t> f(wire::kEthLen + packet.size());
    std::memcpy(f.data(), dst.b, 6);
    std::memcpy(f.data() + 6, src.b, 6);
    f[12] = 0x86;
    f[13] = 0xdd;
    std::memcpy(f.data() + wire::kEthLen, packet.data(), packet.size());
    return f;
}

std::vector<std::vector<uint8_t>> ipv6_only(std::vector<std::vector<uint8_t>> frames)
{
    std::vector<std::vector<uint8_t>> v;
    for (auto &f : frames)
        if (f.size() >= wire::kEthLen + wire::kIp6Len && f[12] == 0x86 && f[13] == 0xdd) v.push_back(std::move(f));
    return v;
}

sim::RawPeer::Options options()
{
    sim::RawPeer::Options o;
    o.stack.addr6[0] = Ip6Prefix{kOurIp, 64};
    o.stack.n_addr6 = 1;
    o.keep_raw = true;
    return o;
}

TEST(Ip6Stack, DadThenNeighbourSolicitationAndEchoAnswered)
{
    sim::RawPeer p(options());
    const MacAddr peer = p.peer_mac, ours = p.stack_mac;
    p.take_raw();
    EXPECT_EQ(p.stack().addrs6_tentative(), 2u); // link-local and 2001:2::1, until DAD ends
    p.stack().announce(p.now);
    EXPECT_EQ(p.stack().addrs6_tentative(), 2u);
    auto dad = ipv6_only(p.take_raw());
    ASSERT_EQ(dad.size(), 2u) << "one DAD solicitation per address";
    for (auto &f : dad) EXPECT_TRUE(ip6::is_unspecified(Sent{f}.ip()->src));
    // Tentative: not answered.
    p.inject(eth6(ours, peer, echo(kPeerIp, kOurIp)));
    EXPECT_TRUE(ipv6_only(p.take_raw()).empty());
    p.advance(kSec);
    EXPECT_EQ(p.stack().addrs6_tentative(), 0u) << "eta-ppe's READY waits for this";
    auto na_start = ipv6_only(p.take_raw());
    ASSERT_EQ(na_start.size(), 2u) << "unsolicited NAs once DAD is done";
    EXPECT_EQ(Sent{na_start[0]}.type(), wire::kNdNeighborAdvert);

    // NS to our solicited-node MAC (a multicast MAC the lone stack accepts).
    const Ip6Addr sn = ip6::solicited_node(kOurIp.b);
    p.inject(eth6(ip6::multicast_mac(sn.b), peer, ns(kPeerIp, sn, kOurIp)));
    auto na1 = ipv6_only(p.take_raw());
    ASSERT_EQ(na1.size(), 1u);
    Sent s{na1[0]};
    EXPECT_EQ(s.type(), wire::kNdNeighborAdvert);
    EXPECT_EQ(s.data(), wire::kNaSolicited | wire::kNaOverride);
    EXPECT_EQ(0, std::memcmp(s.eth()->dst, peer.b, 6));
    EXPECT_TRUE(s.csum_good());

    p.inject(eth6(ours, peer, echo(kPeerIp, kOurIp, 0x00070001)));
    auto rep = ipv6_only(p.take_raw());
    ASSERT_EQ(rep.size(), 1u);
    EXPECT_EQ(Sent{rep[0]}.type(), wire::kIcmp6EchoReply);
    EXPECT_EQ(Sent{rep[0]}.data(), 0x00070001u);
    EXPECT_TRUE(Sent{rep[0]}.csum_good());

    // Another node's solicited-node MAC: not ours.
    const uint64_t not_ours = p.stack().stats().drop_not_ours;
    const Ip6Addr other = ip6::solicited_node(addr(9).b);
    p.inject(eth6(ip6::multicast_mac(other.b), peer, ns(kPeerIp, other, addr(9))));
    EXPECT_EQ(p.stack().stats().drop_not_ours, not_ours + 1);
    EXPECT_TRUE(ipv6_only(p.take_raw()).empty());
    const StackStats &st = p.stack().stats();
    EXPECT_EQ(st.icmp6_echo_in, 2u);
    EXPECT_EQ(st.nd_ns_in, 1u);
    EXPECT_EQ(st.nd_na_out, 3u);
    EXPECT_EQ(st.nd_ns_out, 2u);
}

TEST(Ip6Stack, TentativeCountWhenSharingOrWithoutAddress6)
{
    sim::RawPeer::Options o = options();
    o.stack.pass_unclaimed = true; // the kernel does DAD for the address it shares
    sim::RawPeer shared(o);
    shared.stack().announce(shared.now);
    EXPECT_EQ(shared.stack().addrs6_tentative(), 0u);
    // No address6: the link-local address alone, tentative for DAD's second.
    sim::RawPeer::Options v4;
    sim::RawPeer plain(v4);
    plain.stack().announce(plain.now);
    EXPECT_EQ(plain.stack().addrs6_tentative(), 1u);
    plain.advance(kSec);
    EXPECT_EQ(plain.stack().addrs6_tentative(), 0u);
}

TEST(Ip6Stack, ResetStartsOver)
{
    sim::RawPeer p(options());
    p.stack().announce(p.now);
    p.advance(kSec);
    p.reset_stack();
    p.take_raw();
    // As new: the addresses are tentative again until the next announce().
    p.inject(eth6(p.stack_mac, p.peer_mac, echo(kPeerIp, kOurIp)));
    EXPECT_TRUE(ipv6_only(p.take_raw()).empty());
    EXPECT_EQ(p.stack().next_deadline_ns(), UINT64_MAX);
}

} // namespace
