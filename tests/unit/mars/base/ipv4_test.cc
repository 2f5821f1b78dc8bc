// Tests of mars/src/ipv4 (Ipv4Layer) on its own, with no stack: what it hands
// up (TCP segments, ICMP errors quoting our TCP segments) is recorded by a
// fake of its upper interface (Ipv4Upper, a test fixture), what it sends by
// a recording PacketIo (recording_io.h). Covered: every header check and its
// counter, TCP handed up with its header and total lengths, ICMP protocol
// unreachable for other protocols, echo answered, ICMP errors quoting our
// segments handed up (and others not), output framing for a next hop
// (resolved, or held for ARP), and every buffer coming back.
#include "checksum.h"
#include "ipv4.h"
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
constexpr uint32_t kOurIp = 0xC6120001;  // 198.18.0.1
constexpr uint32_t kPeerIp = 0xC6120002; // 198.18.0.2
const MacAddr kOurMac{{0x02, 0, 0, 0, 0, 1}};
const MacAddr kPeerMac{{0x02, 0, 0, 0, 0, 2}};

// Test fixture: records what the IPv4 layer hands up.
class RecordingUpper final : public Ipv4Upper {
  public:
    struct Segment {
        unsigned ihl, total;
        uint16_t sport;
    };
    void tcp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) override
    {
        const auto *th = reinterpret_cast<const wire::Tcp *>(reinterpret_cast<const uint8_t *>(ip) + ihl);
        segments.push_back(Segment{ihl, total, be16(th->sport)});
        io->release(&f, 1);
    }
    void tcp_icmp_error(const IcmpTcpError &e) override { errors.push_back(e); }

    RecordingIo *io = nullptr;
    std::vector<Segment> segments;
    std::vector<IcmpTcpError> errors;
};

StackConfig config()
{
    StackConfig c;
    c.ip = kOurIp;
    c.mac = kOurMac;
    c.prefix = 24;
    return c;
}

class Ipv4Test : public ::testing::Test {
  protected:
    Ipv4Test() : link(io, stats), arp(config(), link, stats), router(config()), ip(config(), link, arp, router, stats, upper)
    {
        upper.io = &io;
    }

    // A received IPv4 frame from the peer: header (checksummed unless told
    // otherwise) and payload.
    PacketRef frame(uint8_t proto, const std::vector<uint8_t> &payload, uint32_t src = kPeerIp, uint32_t dst = kOurIp)
    {
        rx.push_back(std::vector<uint8_t>(wire::kEthLen + wire::kIpLen + payload.size()));
        uint8_t *d = rx.back().data();
        auto *eth = reinterpret_cast<wire::Eth *>(d);
        std::memcpy(eth->dst, kOurMac.b, 6);
        std::memcpy(eth->src, kPeerMac.b, 6);
        eth->type = be16(wire::kEtherIpv4);
        auto *h = reinterpret_cast<wire::Ipv4 *>(d + wire::kEthLen);
        *h = wire::Ipv4{0x45, 0, be16(uint16_t(wire::kIpLen + payload.size())), 0, 0, 64, proto, 0, be32(src), be32(dst)};
        h->csum = csum_finish(csum_add(0, h, wire::kIpLen));
        std::memcpy(h + 1, payload.data(), payload.size());
        io.outstanding++; // a received frame the layer must give back
        return PacketRef{d, d, uint16_t(rx.back().size()), 0, 0};
    }
    static wire::Ipv4 *ip_of(PacketRef &f) { return reinterpret_cast<wire::Ipv4 *>(f.data + wire::kEthLen); }
    static void refresh_csum(PacketRef &f)
    {
        ip_of(f)->csum = 0;
        ip_of(f)->csum = csum_finish(csum_add(0, ip_of(f), wire::kIpLen));
    }
    static std::vector<uint8_t> tcp_header(uint16_t sport)
    {
        std::vector<uint8_t> v(wire::kTcpLen);
        auto *th = reinterpret_cast<wire::Tcp *>(v.data());
        th->sport = be16(sport);
        th->dport = be16(80);
        th->doff = 5 << 4;
        return v;
    }
    // The peer's MAC known (through its request for us), nothing sent left.
    void resolve_peer()
    {
        ASSERT_EQ(arp.lookup(kPeerIp, kSec), nullptr);
        rx.push_back(std::vector<uint8_t>(wire::kEthLen + sizeof(wire::Arp)));
        uint8_t *d = rx.back().data();
        auto *a = reinterpret_cast<wire::Arp *>(d + wire::kEthLen);
        *a = wire::Arp{be16(1), be16(wire::kEtherIpv4), 6, 4, be16(wire::kArpReply), {}, be32(kPeerIp), {}, be32(kOurIp)};
        std::memcpy(a->sha, kPeerMac.b, 6);
        io.outstanding++;
        PacketRef f{d, d, uint16_t(rx.back().size()), 0, 0};
        arp.input(f, kSec);
        link.flush();
        io.sent.clear();
    }
    const wire::Ipv4 &sent_ip(size_t i) const
    {
        return *reinterpret_cast<const wire::Ipv4 *>(io.sent[i].data() + wire::kEthLen);
    }

    RecordingIo io;
    StackStats stats{};
    Link link;
    ArpResolver arp;
    Router router;
    RecordingUpper upper;
    Ipv4Layer ip;
    std::vector<std::vector<uint8_t>> rx;
};

TEST_F(Ipv4Test, TcpIsHandedUpWithItsLengths)
{
    PacketRef f = frame(wire::kProtoTcp, tcp_header(1234));
    ip.input(f, kSec);
    ASSERT_EQ(upper.segments.size(), 1u);
    EXPECT_EQ(upper.segments[0].ihl, wire::kIpLen);
    EXPECT_EQ(upper.segments[0].total, wire::kIpLen + wire::kTcpLen);
    EXPECT_EQ(upper.segments[0].sport, 1234);
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(Ipv4Test, EveryHeaderCheckDropsAndCounts)
{
    PacketRef v6 = frame(wire::kProtoTcp, tcp_header(1));
    ip_of(v6)->ver_ihl = 0x65;
    refresh_csum(v6);
    ip.input(v6, kSec);
    PacketRef long_total = frame(wire::kProtoTcp, tcp_header(1));
    ip_of(long_total)->total_len = be16(200);
    refresh_csum(long_total);
    ip.input(long_total, kSec);
    PacketRef short_frame = frame(wire::kProtoTcp, tcp_header(1));
    short_frame.len = wire::kEthLen + 10;
    ip.input(short_frame, kSec);
    EXPECT_EQ(stats.drop_ip_header, 3u);

    PacketRef bad_sum = frame(wire::kProtoTcp, tcp_header(1));
    ip_of(bad_sum)->csum ^= 1;
    ip.input(bad_sum, kSec);
    EXPECT_EQ(stats.drop_ip_csum, 1u);
    PacketRef nic_says_good = frame(wire::kProtoTcp, tcp_header(7));
    ip_of(nic_says_good)->csum ^= 1;
    nic_says_good.flags = kRxIpCsumGood;
    ip.input(nic_says_good, kSec);
    EXPECT_EQ(upper.segments.size(), 1u) << "the NIC's verdict is taken";

    PacketRef other = frame(wire::kProtoTcp, tcp_header(1), kPeerIp, kPeerIp + 5);
    ip.input(other, kSec);
    EXPECT_EQ(stats.drop_not_ours, 1u);
    PacketRef fragment = frame(wire::kProtoTcp, tcp_header(1));
    ip_of(fragment)->frag = be16(wire::kIpMf);
    refresh_csum(fragment);
    ip.input(fragment, kSec);
    PacketRef later_fragment = frame(wire::kProtoTcp, tcp_header(1));
    ip_of(later_fragment)->frag = be16(8);
    refresh_csum(later_fragment);
    ip.input(later_fragment, kSec);
    EXPECT_EQ(stats.drop_ip_fragment, 2u);
    PacketRef ttl0 = frame(wire::kProtoTcp, tcp_header(1));
    ip_of(ttl0)->ttl = 0;
    refresh_csum(ttl0);
    ip.input(ttl0, kSec);
    EXPECT_EQ(stats.drop_ip_ttl, 1u);
    EXPECT_EQ(upper.segments.size(), 1u);
    EXPECT_TRUE(io.sent.empty());
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(Ipv4Test, OtherProtocolsGetProtocolUnreachable)
{
    resolve_peer();
    std::vector<uint8_t> udp(20, 0xab);
    PacketRef f = frame(17, udp);
    ip.input(f, kSec);
    link.flush();
    EXPECT_EQ(stats.drop_ip_proto, 1u);
    ASSERT_EQ(io.sent.size(), 1u);
    EXPECT_EQ(std::memcmp(io.sent[0].data(), kPeerMac.b, 6), 0);
    const wire::Ipv4 &h = sent_ip(0);
    EXPECT_EQ(h.proto, wire::kProtoIcmp);
    EXPECT_EQ(be32(h.dst), kPeerIp);
    EXPECT_TRUE(csum_ok(csum_add(0, &h, wire::kIpLen)));
    const auto *ic = reinterpret_cast<const wire::Icmp *>(&h + 1);
    EXPECT_EQ(ic->type, wire::kIcmpUnreach);
    EXPECT_EQ(ic->code, 2);
    // The quote: the original header and its first 8 bytes (RFC 792).
    EXPECT_EQ(be16(h.total_len), wire::kIpLen + sizeof(wire::Icmp) + wire::kIpLen + 8);
    EXPECT_TRUE(csum_ok(csum_add(0, ic, sizeof(wire::Icmp) + wire::kIpLen + 8)));
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(Ipv4Test, EchoIsAnswered)
{
    resolve_peer();
    std::vector<uint8_t> echo(sizeof(wire::Icmp) + 16);
    auto *ic = reinterpret_cast<wire::Icmp *>(echo.data());
    *ic = wire::Icmp{wire::kIcmpEcho, 0, 0, be16(7), be16(9)};
    for (size_t i = sizeof(wire::Icmp); i < echo.size(); i++) echo[i] = uint8_t(i);
    ic->csum = csum_finish(csum_add(0, echo.data(), echo.size()));
    PacketRef f = frame(wire::kProtoIcmp, echo);
    ip.input(f, kSec);
    link.flush();
    EXPECT_EQ(stats.icmp_echo_in, 1u);
    ASSERT_EQ(io.sent.size(), 1u);
    const wire::Ipv4 &h = sent_ip(0);
    EXPECT_EQ(be32(h.src), kOurIp);
    EXPECT_EQ(be32(h.dst), kPeerIp);
    const auto *r = reinterpret_cast<const uint8_t *>(&h + 1);
    EXPECT_EQ(r[0], wire::kIcmpEchoReply);
    EXPECT_EQ(std::memcmp(r + 4, echo.data() + 4, echo.size() - 4), 0) << "id, sequence and data echoed";
    EXPECT_TRUE(csum_ok(csum_add(0, r, echo.size())));
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(Ipv4Test, IcmpErrorsQuotingOurTcpAreHandedUp)
{
    // Destination unreachable, fragmentation needed, quoting a TCP segment we
    // sent (from us to the peer), and one quoting someone else's.
    auto error_about = [&](uint32_t quoted_src) {
        std::vector<uint8_t> m(sizeof(wire::Icmp) + wire::kIpLen + 8);
        auto *ic = reinterpret_cast<wire::Icmp *>(m.data());
        *ic = wire::Icmp{wire::kIcmpUnreach, wire::kIcmpCodeFragNeeded, 0, 0, be16(1280)};
        auto *q = reinterpret_cast<wire::Ipv4 *>(ic + 1);
        *q = wire::Ipv4{0x45, 0, be16(100), 0, 0, 64, wire::kProtoTcp, 0, be32(quoted_src), be32(kPeerIp)};
        auto *th = reinterpret_cast<wire::Tcp *>(q + 1);
        th->sport = be16(40000);
        th->dport = be16(80);
        th->seq = be32(123456);
        ic->csum = csum_finish(csum_add(0, m.data(), m.size()));
        return frame(wire::kProtoIcmp, m);
    };
    PacketRef ours = error_about(kOurIp);
    ip.input(ours, kSec);
    ASSERT_EQ(upper.errors.size(), 1u);
    const IcmpTcpError &e = upper.errors[0];
    EXPECT_EQ(e.remote_ip, kPeerIp);
    EXPECT_EQ(e.local_port, 40000);
    EXPECT_EQ(e.remote_port, 80);
    EXPECT_EQ(e.seq, 123456u);
    EXPECT_EQ(e.code, wire::kIcmpCodeFragNeeded);
    EXPECT_EQ(e.next_hop_mtu, 1280);
    PacketRef theirs = error_about(kPeerIp);
    ip.input(theirs, kSec);
    EXPECT_EQ(upper.errors.size(), 1u) << "not about a segment of ours";
    EXPECT_EQ(stats.icmp_unreach_in, 2u);
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(Ipv4Test, BadIcmpChecksumIsDropped)
{
    std::vector<uint8_t> echo(sizeof(wire::Icmp));
    echo[0] = wire::kIcmpEcho;
    PacketRef f = frame(wire::kProtoIcmp, echo);
    ip.input(f, kSec);
    EXPECT_EQ(stats.drop_icmp, 1u);
    EXPECT_EQ(stats.icmp_echo_in, 0u);
    EXPECT_EQ(io.outstanding, 0);
}

TEST_F(Ipv4Test, OutputWaitsForArpThenLeavesFramed)
{
    PacketRef out;
    ASSERT_TRUE(link.alloc(&out));
    std::memset(out.data, 0, 60);
    out.len = 60;
    ip.send(out, kPeerIp, kSec);
    link.flush();
    ASSERT_EQ(io.sent.size(), 1u) << "an ARP request, the frame held";
    EXPECT_EQ(be16(reinterpret_cast<const wire::Eth *>(io.sent[0].data())->type), wire::kEtherArp);
    EXPECT_EQ(arp.frames_waiting(), 1u);
    resolve_peer(); // the reply releases the held frame
    ASSERT_EQ(arp.frames_waiting(), 0u);
    PacketRef second;
    ASSERT_TRUE(link.alloc(&second));
    std::memset(second.data, 0, 60);
    second.len = 60;
    ip.send(second, kPeerIp, kSec);
    link.flush();
    ASSERT_EQ(io.sent.size(), 1u);
    const auto *eth = reinterpret_cast<const wire::Eth *>(io.sent[0].data());
    EXPECT_EQ(std::memcmp(eth->dst, kPeerMac.b, 6), 0);
    EXPECT_EQ(std::memcmp(eth->src, kOurMac.b, 6), 0);
    EXPECT_EQ(be16(eth->type), wire::kEtherIpv4);
    EXPECT_EQ(io.outstanding, 0);
}

} // namespace
