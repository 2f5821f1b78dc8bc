// Tests of mars/src/ip/ipv6 and icmp6 (Ipv6Layer) with no stack
// (ip6_fixture.h). Covered: the IPv6 pseudo-header checksum, the multicast
// MAC check, echo answered, every header check and its counter (short,
// payload length, version, multicast source, bad ICMPv6 checksum, not ours),
// extension headers (hop-by-hop skipped, unknown options by their action
// bits, hop-by-hop not first refused, routing with segments left refused
// (type 0) and with none skipped, fragments dropped), unknown next header
// and TCP/UDP nobody takes answered with parameter problem / unreachable,
// the error rate limit, errors quoting our packets handed up (packet too
// big lowering the path MTU, never below 1280, never raised), time exceeded
// generated, output on-link only, and shared mode passing everything on;
// multicast groups and MLD queries asked of / handed to the upper layer.
#include "ip6_fixture.h"

namespace {

using namespace mars;
using namespace mars::test;

// The pseudo-header checksum against a plain big-endian sum over the RFC 8200 8.1 layout.
TEST(Ip6Checksum, PseudoHeaderMatchesPlainSum)
{
    const Ip6Addr s = kPeerIp, d = kOurIp;
    std::vector<uint8_t> msg = {0x80, 0, 0, 0, 0x12, 0x34, 0, 1, 'a', 'b', 'c'};
    uint32_t sum = 0;
    std::vector<uint8_t> all(s.b, s.b + 16);
    all.insert(all.end(), d.b, d.b + 16);
    const uint32_t len = uint32_t(msg.size());
    const uint8_t lenb[8] = {uint8_t(len >> 24), uint8_t(len >> 16), uint8_t(len >> 8), uint8_t(len), 0, 0, 0, 58};
    all.insert(all.end(), lenb, lenb + 8);
    all.insert(all.end(), msg.begin(), msg.end());
    if (all.size() & 1) all.push_back(0);
    for (size_t i = 0; i < all.size(); i += 2) sum += uint32_t(all[i] << 8 | all[i + 1]);
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    const uint16_t want = uint16_t(~sum);
    const uint16_t got = csum_finish(pseudo_sum6(s.b, d.b, 58, len) + csum_add(0, msg.data(), msg.size()));
    EXPECT_EQ(be16(got), want);
}

TEST(Ip6, AcceptsAllNodesAndOurSolicitedNodeMacs)
{
    Ip6Rig r;
    const MacAddr all = ip6::multicast_mac(ip6::all_nodes().b);
    EXPECT_TRUE(r.ip.accepts_mac(all.b));
    EXPECT_TRUE(r.ip.accepts_mac(ip6::multicast_mac(ip6::solicited_node(kOurIp.b).b).b));
    EXPECT_TRUE(r.ip.accepts_mac(ip6::multicast_mac(ip6::solicited_node(ip6::link_local(kOurMac).b).b).b));
    EXPECT_FALSE(r.ip.accepts_mac(ip6::multicast_mac(ip6::solicited_node(kPeerIp.b).b).b));
    EXPECT_FALSE(r.ip.accepts_mac(kPeerMac.b));
    const MacAddr m = ip6::multicast_mac(ip6::solicited_node(kOurIp.b).b);
    EXPECT_EQ(m.b[0], 0x33);
    EXPECT_EQ(m.b[1], 0x33);
    EXPECT_EQ(m.b[2], 0xff);
}

TEST(Ip6, EchoAnswered)
{
    Ip6Rig r;
    r.up();
    r.rx(ns(kPeerIp, kOurIp, kOurIp)); // the peer is known (STALE)
    r.io.sent.clear();
    r.rx(echo(kPeerIp, kOurIp, 0xbeef0007, {1, 2, 3, 4, 5}));
    EXPECT_EQ(r.stats.icmp6_echo_in, 1u);
    ASSERT_EQ(r.io.sent.size(), 1u);
    Sent s{r.io.sent[0]};
    EXPECT_EQ(s.type(), wire::kIcmp6EchoReply);
    EXPECT_EQ(s.data(), 0xbeef0007u);
    EXPECT_TRUE(ip6::eq(s.src(), kOurIp));
    EXPECT_TRUE(ip6::eq(s.dst(), kPeerIp));
    EXPECT_EQ(s.l4_len(), 13u);
    EXPECT_EQ(s.l4()[12], 5);
    EXPECT_TRUE(s.csum_good());
    EXPECT_EQ(r.stats.icmp6_out, 1u);
    // The link-local address answers too.
    const Ip6Addr ll = ip6::link_local(kOurMac), peer_ll = ip6::link_local(kPeerMac);
    r.rx(na(peer_ll, ll, peer_ll, wire::kNaOverride)); // unsolicited, nobody asked: ignored
    r.rx(echo(peer_ll, ll));
    ASSERT_EQ(r.io.sent.size(), 2u);
    EXPECT_EQ(Sent{r.io.sent[1]}.type(), wire::kNdNeighborSolicit) << "resolving the link-local peer";
    r.rx(na(peer_ll, ll, peer_ll, wire::kNaSolicited | wire::kNaOverride));
    ASSERT_EQ(r.io.sent.size(), 3u);
    EXPECT_EQ(Sent{r.io.sent[2]}.type(), wire::kIcmp6EchoReply);
    EXPECT_TRUE(ip6::eq(Sent{r.io.sent[2]}.src(), ll));
    EXPECT_EQ(r.io.outstanding, 0);
}

TEST(Ip6, MalformedDroppedAndCounted)
{
    Ip6Rig r;
    r.up();
    std::vector<uint8_t> good = echo(kPeerIp, kOurIp);
    r.rx(std::vector<uint8_t>(good.begin(), good.begin() + 39)); // short header
    std::vector<uint8_t> p = good;
    p[5] += 1; // payload length one past the frame
    r.rx(p);
    p = good;
    p[4] = p[5] = 0; // payload length 0 (jumbogram)
    r.rx(p);
    p = good;
    p[0] = 0x45; // version 4
    r.rx(p);
    p = good;
    p[8] = 0xff; // multicast source
    r.rx(p);
    EXPECT_EQ(r.stats.ip6_drop_header, 5u);
    p = good;
    p[wire::kIp6Len + 9] ^= 1; // payload byte: the ICMPv6 checksum fails
    r.rx(p);
    EXPECT_EQ(r.stats.icmp6_drop, 1u);
    r.rx(echo(kPeerIp, addr(77))); // not ours
    EXPECT_EQ(r.stats.ip6_drop_not_ours, 1u);
    EXPECT_TRUE(r.io.sent.empty());
    EXPECT_EQ(r.stats.icmp6_echo_in, 0u);
    EXPECT_EQ(r.io.outstanding, 0);
}

// Extension header helpers: an options header (hop-by-hop or destination)
// with one option (type, data) padded to 8 bytes, and a routing header.
std::vector<uint8_t> opts_header(uint8_t next, uint8_t opt_type, std::vector<uint8_t> opt_data)
{
    std::vector<uint8_t> h = {next, 0, opt_type, uint8_t(opt_data.size())};
    h.insert(h.end(), opt_data.begin(), opt_data.end());
    const size_t pad = (8 - h.size() % 8) % 8;
    if (pad == 1) h.push_back(0);
    else if (pad >= 2) {
        h.push_back(1);
        h.push_back(uint8_t(pad - 2));
        h.insert(h.end(), pad - 2, 0);
    }
    h[1] = uint8_t(h.size() / 8 - 1);
    return h;
}

std::vector<uint8_t> routing_header(uint8_t next, uint8_t type, uint8_t segs_left)
{
    std::vector<uint8_t> h = {next, 2, type, segs_left, 0, 0, 0, 0};
    h.insert(h.end(), kPeerIp.b, kPeerIp.b + 16); // one address (type 0 layout)
    return h;
}

// An echo request behind the given extension headers (first: the first header's type).
std::vector<uint8_t> echo_behind(uint8_t first, const std::vector<uint8_t> &ext)
{
    std::vector<uint8_t> payload = ext;
    const std::vector<uint8_t> m = icmp6(kPeerIp, kOurIp, wire::kIcmp6EchoRequest, 0, 0x12340001, {'x'});
    payload.insert(payload.end(), m.begin(), m.end());
    return packet6(kPeerIp, kOurIp, first, payload);
}

// Multicast listening is the upper layer's (Ipv6Upper): a group's MAC and
// packets are taken once it says the group is joined (an upper protocol
// the upper layer then refuses gets no ICMPv6 error: a group); an MLD
// query goes up with whether a hop-by-hop Router Alert (value 0) came with
// it, not one in destination options nor one of another value; a bad
// checksum is counted as a dropped query; other listeners' reports counted.
TEST(Ip6, MulticastGroupsAndMldQueriesAskTheUpperLayer)
{
    Ip6Rig r;
    r.up();
    Ip6Addr g;
    g.b[0] = 0xff, g.b[1] = 0x0e, g.b[15] = 5;
    const MacAddr gmac = ip6::multicast_mac(g.b);
    std::vector<uint8_t> udp = {0x9c, 0x40, 0x1f, 0x90, 0, 9, 0, 0, 'x'};
    EXPECT_FALSE(r.ip.accepts_mac(gmac.b));
    r.rx(packet6(kPeerIp, g, wire::kProtoUdp, udp), gmac);
    EXPECT_EQ(r.stats.ip6_drop_not_ours, 1u);
    EXPECT_TRUE(r.upper.inputs.empty());
    r.upper.joined = true;
    r.upper.group = g;
    EXPECT_TRUE(r.ip.accepts_mac(gmac.b));
    r.rx(packet6(kPeerIp, g, wire::kProtoUdp, udp), gmac);
    ASSERT_EQ(r.upper.inputs.size(), 1u);
    EXPECT_EQ(r.upper.inputs[0], wire::kProtoUdp);
    EXPECT_EQ(r.stats.ip6_drop_proto, 1u); // refused above: no ICMPv6 error to a group
    EXPECT_TRUE(r.io.sent.empty());

    const Ip6Addr all = ip6::all_nodes(), none{};
    std::vector<uint8_t> body(none.b, none.b + 16);
    body.insert(body.end(), {2, 125, 0, 0});
    const std::vector<uint8_t> q = icmp6(kPeerIp, all, wire::kMldQuery, 0, 1000u << 16, body);
    auto behind = [&](uint8_t first, std::vector<uint8_t> ext) {
        ext.insert(ext.end(), q.begin(), q.end());
        return packet6(kPeerIp, all, first, ext, 1);
    };
    const MacAddr amac = ip6::multicast_mac(all.b);
    r.rx(behind(wire::kNextHopByHop, opts_header(wire::kProtoIcmp6, 5, {0, 0})), amac);
    r.rx(packet6(kPeerIp, all, wire::kProtoIcmp6, q, 1), amac);
    r.rx(behind(wire::kNextDestOpts, opts_header(wire::kProtoIcmp6, 5, {0, 0})), amac);
    r.rx(behind(wire::kNextHopByHop, opts_header(wire::kProtoIcmp6, 5, {0, 1})), amac);
    ASSERT_EQ(r.upper.queries.size(), 4u);
    EXPECT_EQ(r.upper.queries[0], std::make_pair(28u, true));
    EXPECT_EQ(r.upper.queries[1], std::make_pair(28u, false));
    EXPECT_EQ(r.upper.queries[2], std::make_pair(28u, false));
    EXPECT_EQ(r.upper.queries[3], std::make_pair(28u, false));
    std::vector<uint8_t> bad = q;
    bad[2] ^= 0x40;
    r.rx(packet6(kPeerIp, all, wire::kProtoIcmp6, bad, 1), amac);
    EXPECT_EQ(r.upper.queries.size(), 4u);
    EXPECT_EQ(r.stats.mld_drop, 1u);
    EXPECT_EQ(r.stats.icmp6_drop, 1u);
    r.rx(packet6(kPeerIp, all, wire::kProtoIcmp6, icmp6(kPeerIp, all, wire::kMldV2Report, 0, 0, {}), 1), amac);
    EXPECT_EQ(r.stats.mld_report_in, 1u);
    EXPECT_TRUE(r.io.sent.empty());
}

class Ip6Ext : public ::testing::Test {
  protected:
    Ip6Ext()
    {
        r.up();
        r.rx(ns(kPeerIp, kOurIp, kOurIp));
        r.io.sent.clear();
    }
    Ip6Rig r;
};

TEST_F(Ip6Ext, HopByHopWithSkippableOptionsIsSkipped)
{
    r.rx(echo_behind(wire::kNextHopByHop, opts_header(wire::kProtoIcmp6, 5, {0, 0}))); // router alert: action 00
    r.rx(echo_behind(wire::kNextHopByHop, opts_header(wire::kProtoIcmp6, 0x1e, {1, 2, 3}))); // unknown, action 00
    r.rx(echo_behind(wire::kNextDestOpts, opts_header(wire::kProtoIcmp6, 1, {0, 0, 0, 0})));  // PadN only
    ASSERT_EQ(r.io.sent.size(), 3u);
    for (auto &f : r.io.sent) EXPECT_EQ(Sent{f}.type(), wire::kIcmp6EchoReply);
    EXPECT_EQ(r.stats.ip6_drop_ext, 0u);
}

TEST_F(Ip6Ext, UnknownOptionsActedOnByTheirHighBits)
{
    r.rx(echo_behind(wire::kNextHopByHop, opts_header(wire::kProtoIcmp6, 0x5e, {0}))); // 01: discard silently
    EXPECT_TRUE(r.io.sent.empty());
    r.rx(echo_behind(wire::kNextHopByHop, opts_header(wire::kProtoIcmp6, 0x9e, {0}))); // 10: parameter problem
    ASSERT_EQ(r.io.sent.size(), 1u);
    Sent s{r.io.sent[0]};
    EXPECT_EQ(s.type(), wire::kIcmp6ParamProblem);
    EXPECT_EQ(s.code(), wire::kParamOption);
    EXPECT_EQ(s.data(), 42u) << "points at the option";
    EXPECT_TRUE(s.csum_good());
    EXPECT_EQ(r.stats.ip6_drop_ext, 2u);
}

TEST_F(Ip6Ext, HopByHopNotFirstIsRefused)
{
    std::vector<uint8_t> ext = opts_header(wire::kNextHopByHop, 1, {0, 0, 0, 0});
    const std::vector<uint8_t> hbh = opts_header(wire::kProtoIcmp6, 1, {0, 0, 0, 0});
    ext.insert(ext.end(), hbh.begin(), hbh.end());
    r.rx(echo_behind(wire::kNextDestOpts, ext));
    ASSERT_EQ(r.io.sent.size(), 1u);
    Sent s{r.io.sent[0]};
    EXPECT_EQ(s.type(), wire::kIcmp6ParamProblem);
    EXPECT_EQ(s.code(), wire::kParamNextHeader);
    EXPECT_EQ(s.data(), 40u) << "the destination options header's next-header field";
    EXPECT_EQ(r.stats.ip6_drop_ext, 1u);
}

TEST_F(Ip6Ext, RoutingType0WithSegmentsLeftIsRefused)
{
    r.rx(echo_behind(wire::kNextRouting, routing_header(wire::kProtoIcmp6, 0, 1)));
    ASSERT_EQ(r.io.sent.size(), 1u);
    Sent s{r.io.sent[0]};
    EXPECT_EQ(s.type(), wire::kIcmp6ParamProblem);
    EXPECT_EQ(s.code(), wire::kParamHeader);
    EXPECT_EQ(s.data(), 42u) << "points at the routing type";
    EXPECT_TRUE(ip6::eq(s.dst(), kPeerIp));
    EXPECT_EQ(r.stats.ip6_drop_routing, 1u);
}

TEST_F(Ip6Ext, RoutingWithNoSegmentsLeftIsSkipped)
{
    r.rx(echo_behind(wire::kNextRouting, routing_header(wire::kProtoIcmp6, 0, 0)));
    ASSERT_EQ(r.io.sent.size(), 1u);
    EXPECT_EQ(Sent{r.io.sent[0]}.type(), wire::kIcmp6EchoReply);
}

TEST_F(Ip6Ext, FragmentsAreDroppedAndCounted)
{
    const std::vector<uint8_t> frag = {wire::kProtoIcmp6, 0, 0, 1, 0, 0, 0, 42}; // offset 0, more fragments
    r.rx(echo_behind(wire::kNextFragment, frag));
    EXPECT_TRUE(r.io.sent.empty());
    EXPECT_EQ(r.stats.ip6_drop_fragment, 1u);
    EXPECT_EQ(r.io.outstanding, 0);
}

TEST_F(Ip6Ext, TruncatedExtensionHeaderIsDropped)
{
    std::vector<uint8_t> h = opts_header(wire::kProtoIcmp6, 1, {0, 0, 0, 0});
    h[1] = 5; // claims 48 bytes
    r.rx(packet6(kPeerIp, kOurIp, wire::kNextHopByHop, h));
    EXPECT_EQ(r.stats.ip6_drop_ext, 1u);
    EXPECT_TRUE(r.io.sent.empty());
}

TEST_F(Ip6Ext, UnknownNextHeaderAndUnclaimedTransport)
{
    r.rx(packet6(kPeerIp, kOurIp, 253, {1, 2, 3, 4, 5, 6, 7, 8}));
    ASSERT_EQ(r.io.sent.size(), 1u);
    EXPECT_EQ(Sent{r.io.sent[0]}.type(), wire::kIcmp6ParamProblem);
    EXPECT_EQ(Sent{r.io.sent[0]}.code(), wire::kParamNextHeader);
    EXPECT_EQ(Sent{r.io.sent[0]}.data(), 6u);
    r.rx(packet6(kPeerIp, kOurIp, wire::kProtoUdp, {0x30, 0x39, 0, 53, 0, 8, 0, 0}));
    ASSERT_EQ(r.io.sent.size(), 2u);
    EXPECT_EQ(Sent{r.io.sent[1]}.type(), wire::kIcmp6Unreach);
    EXPECT_EQ(Sent{r.io.sent[1]}.code(), wire::kUnreachPort);
    EXPECT_EQ(r.upper.inputs, (std::vector<uint8_t>{253, wire::kProtoUdp})) << "offered up first";
    EXPECT_EQ(r.stats.ip6_drop_proto, 2u);
    // No next header: nothing to answer.
    r.rx(packet6(kPeerIp, kOurIp, wire::kNextNone, {0, 0, 0, 0}));
    EXPECT_EQ(r.io.sent.size(), 2u);
}

TEST_F(Ip6Ext, ErrorsAreRateLimited)
{
    for (int i = 0; i < 60; i++) r.rx(packet6(kPeerIp, kOurIp, wire::kProtoUdp, {0x30, 0x39, 0, 53, 0, 8, 0, 0}));
    EXPECT_EQ(r.io.sent.size(), size_t(Icmp6RateLimit::kBurst));
    EXPECT_EQ(r.stats.icmp6_rate_limited, 60u - Icmp6RateLimit::kBurst);
    r.io.sent.clear();
    r.now += 5 * Icmp6RateLimit::kNsPerToken;
    for (int i = 0; i < 10; i++) r.rx(packet6(kPeerIp, kOurIp, wire::kProtoUdp, {0x30, 0x39, 0, 53, 0, 8, 0, 0}));
    EXPECT_EQ(r.io.sent.size(), 5u) << "tokens come back with time";
}

// A packet too big quoting a TCP segment we sent to dst.
std::vector<uint8_t> ptb(const Ip6Addr &quoted_src, const Ip6Addr &dst, uint32_t mtu)
{
    std::vector<uint8_t> tcp = {0x1f, 0x90, 0xc3, 0x50, 0x01, 0x02, 0x03, 0x04, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff};
    const std::vector<uint8_t> quoted = packet6(quoted_src, dst, wire::kProtoTcp, tcp);
    const Ip6Addr router = addr(254);
    return packet6(router, kOurIp, wire::kProtoIcmp6, icmp6(router, kOurIp, wire::kIcmp6PacketTooBig, 0, mtu, quoted));
}

TEST_F(Ip6Ext, PacketTooBigLowersThePathMtuHandedUp)
{
    EXPECT_EQ(r.ip.path_mtu(kOffLink, r.now), 1500u);
    r.rx(ptb(kOurIp, kOffLink, 1400));
    ASSERT_EQ(r.upper.errors.size(), 1u);
    const Icmp6Error &e = r.upper.errors[0];
    EXPECT_EQ(e.type, wire::kIcmp6PacketTooBig);
    EXPECT_EQ(e.mtu, 1400u);
    EXPECT_EQ(e.proto, wire::kProtoTcp);
    EXPECT_EQ(e.local_port, 8080);
    EXPECT_EQ(e.remote_port, 50000);
    EXPECT_EQ(e.seq, 0x01020304u);
    EXPECT_TRUE(ip6::eq(e.remote, kOffLink));
    EXPECT_TRUE(ip6::eq(e.local, kOurIp));
    EXPECT_EQ(r.ip.path_mtu(kOffLink, r.now), 1400u);
    EXPECT_EQ(r.ip.path_mtu(kPeerIp, r.now), 1500u) << "per destination";
    r.rx(ptb(kOurIp, kOffLink, 1450)); // never raised by a report
    EXPECT_EQ(r.upper.errors.back().mtu, 1400u);
    r.rx(ptb(kOurIp, kOffLink, 600)); // never below the IPv6 minimum
    EXPECT_EQ(r.upper.errors.back().mtu, 1280u);
    EXPECT_EQ(r.ip.path_mtu(kOffLink, r.now), 1280u);
    r.rx(ptb(kPeerIp, kOffLink, 1300)); // quoting somebody else's packet: not handed up
    EXPECT_EQ(r.upper.errors.size(), 3u);
    EXPECT_EQ(r.stats.icmp6_ptb_in, 4u);
    EXPECT_TRUE(r.io.sent.empty()) << "errors are never answered";
    // The learnt value ages out (RFC 8201 5.3).
    r.now += PathMtu6::kAgeNs;
    EXPECT_EQ(r.ip.path_mtu(kOffLink, r.now), 1500u);
}

TEST_F(Ip6Ext, TimeExceededSentAndReceived)
{
    const std::vector<uint8_t> orig = packet6(kPeerIp, kOurIp, wire::kProtoUdp, {0, 1, 0, 2, 0, 8, 0, 0});
    r.ip.send_error(orig.data(), unsigned(orig.size()), wire::kIcmp6TimeExceeded, 1, 0, r.now);
    r.link.flush();
    ASSERT_EQ(r.io.sent.size(), 1u);
    Sent s{r.io.sent[0]};
    EXPECT_EQ(s.type(), wire::kIcmp6TimeExceeded);
    EXPECT_EQ(s.code(), 1);
    EXPECT_EQ(s.l4_len(), 8u + orig.size()) << "the whole original quoted";
    EXPECT_TRUE(s.csum_good());
    const std::vector<uint8_t> quoted = packet6(kOurIp, kOffLink, wire::kProtoUdp, {0, 1, 0, 2, 0, 8, 0, 0});
    r.rx(packet6(addr(254), kOurIp, wire::kProtoIcmp6, icmp6(addr(254), kOurIp, wire::kIcmp6TimeExceeded, 0, 0, quoted)));
    ASSERT_EQ(r.upper.errors.size(), 1u);
    EXPECT_EQ(r.upper.errors[0].type, wire::kIcmp6TimeExceeded);
    EXPECT_EQ(r.upper.errors[0].proto, wire::kProtoUdp);
    EXPECT_EQ(r.stats.icmp6_time_exceeded_in, 1u);
}

TEST_F(Ip6Ext, NoErrorAboutMulticastOrErrors)
{
    // An unknown protocol to all-nodes: no error to a multicast destination.
    r.rx(packet6(kPeerIp, ip6::all_nodes(), 253, {0, 0, 0, 0}), ip6::multicast_mac(ip6::all_nodes().b));
    const std::vector<uint8_t> err = icmp6(kPeerIp, kOurIp, wire::kIcmp6Unreach, 0, 0, {});
    r.ip.send_error(packet6(kPeerIp, kOurIp, wire::kProtoIcmp6, err).data(), 48, wire::kIcmp6ParamProblem, 0, 0, r.now);
    r.link.flush();
    EXPECT_TRUE(r.io.sent.empty());
}

TEST_F(Ip6Ext, OutputIsOnLinkOnly)
{
    PacketRef f;
    ASSERT_TRUE(r.link.alloc(&f));
    const std::vector<uint8_t> p = echo(kOurIp, kOffLink);
    std::memcpy(f.data + wire::kEthLen, p.data(), p.size());
    f.len = uint16_t(wire::kEthLen + p.size());
    EXPECT_FALSE(r.ip.send(f, r.now));
    EXPECT_EQ(r.stats.ip6_drop_no_route, 1u);
    EXPECT_EQ(r.io.outstanding, 0);
}

// Sharing the port: everything the stack does not itself need goes on.
TEST(Ip6Shared, EverythingIsPassedOn)
{
    Ip6Rig r(true);
    r.rx(echo(kPeerIp, kOurIp));                                                     // the kernel answers
    r.rx(packet6(kPeerIp, kOurIp, wire::kProtoTcp, {0, 1, 0, 2, 0, 0, 0, 0}));      // TCP over IPv6
    r.rx(echo_behind(wire::kNextFragment, {wire::kProtoIcmp6, 0, 0, 1, 0, 0, 0, 1})); // a fragment
    r.rx(echo_behind(wire::kNextRouting, routing_header(wire::kProtoIcmp6, 0, 1)));   // routing type 0
    r.rx(echo(kPeerIp, addr(77)));                                                    // another address
    std::vector<uint8_t> bad = echo(kPeerIp, kOurIp);
    bad[0] = 0x45;
    r.rx(bad);                    // malformed: the kernel decides
    r.rx(ptb(kOurIp, kOffLink, 1400)); // an error: handed up and passed on
    EXPECT_TRUE(r.io.sent.empty()) << "nothing answered here";
    EXPECT_EQ(r.io.passed.size(), 7u);
    for (Unclaimed why : r.io.reasons) EXPECT_EQ(why, Unclaimed::kIpv6);
    EXPECT_EQ(r.upper.errors.size(), 1u);
    EXPECT_EQ(r.io.outstanding, 0);
}

} // namespace
