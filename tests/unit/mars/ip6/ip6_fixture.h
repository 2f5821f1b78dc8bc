// ip6_fixture.h: TEST FIXTURE for the IPv6 layer tests (ipv6_test, nd_test):
// an Ipv6Layer with its NeighborDiscovery and Link over a recording PacketIo
// (../base/recording_io.h: every frame sent and every frame handed on as
// unclaimed is kept; buffers are counted so a test can check that each came back), a recording
// Ipv6Upper, and builders for the frames a peer sends. Time is virtual.
#pragma once

#include "checksum.h"
#include "ipv6.h"
#include "ipv6_wire.h"
#include "nd.h"
#include "../base/recording_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <vector>

namespace mars::test {

using wire::be16;
using wire::be32;

constexpr uint64_t kSec = 1'000'000'000ull;
const MacAddr kOurMac{{0x02, 0, 0, 0, 0, 1}};
const MacAddr kPeerMac{{0x02, 0, 0, 0, 0, 2}};
// 2001:2::1/64 (ours) and 2001:2::2 (the peer's), RFC 5180's benchmarking prefix.
inline Ip6Addr addr(uint8_t last, uint8_t sub = 0)
{
    Ip6Addr a;
    a.b[0] = 0x20;
    a.b[1] = 0x01;
    a.b[3] = 0x02;
    a.b[7] = sub;
    a.b[15] = last;
    return a;
}
const Ip6Addr kOurIp = addr(1);
const Ip6Addr kPeerIp = addr(2);
const Ip6Addr kOffLink = addr(9, 7); // 2001:2:0:7::9, not on our /64

class Ip6Upper final : public Ipv6Upper {
  public:
    bool ip6_input(PacketRef &, const Ip6Rx &rx) override
    {
        inputs.push_back(rx.proto);
        return false; // as the stack today: nobody over IPv6 yet
    }
    void ip6_error(const Icmp6Error &e) override { errors.push_back(e); }
    // Multicast: one group may be "joined"; MLD queries recorded (length,
    // Router Alert seen).
    bool ip6_group_joined(const uint8_t *g) const override { return joined && std::memcmp(g, group.b, 16) == 0; }
    bool ip6_group_mac(const uint8_t *m) const override
    {
        return joined && m[0] == 0x33 && m[1] == 0x33 && std::memcmp(m + 2, group.b + 12, 4) == 0;
    }
    void ip6_mld_query(const wire::Ipv6 *, const uint8_t *, unsigned len, bool ra) override
    {
        queries.emplace_back(len, ra);
    }
    std::vector<uint8_t> inputs;
    std::vector<Icmp6Error> errors;
    bool joined = false;
    Ip6Addr group;
    std::vector<std::pair<unsigned, bool>> queries;
};

inline StackConfig config(bool shared, bool follower = false)
{
    StackConfig c;
    c.ip = 0xC6120001;
    c.mac = kOurMac;
    c.addr6[0] = Ip6Prefix{kOurIp, 64};
    c.n_addr6 = 1;
    c.pass_unclaimed = shared;
    c.nd_follower = follower;
    return c;
}

// One layer under test. Received frames are built here and handed in with
// rx(); what went out is in io.sent (flushed), what was handed on in io.passed.
class Ip6Rig {
  public:
    explicit Ip6Rig(bool shared = false, bool follower = false)
        : cfg(config(shared, follower)), link(io, stats), nd(cfg, link, stats), ip(cfg, link, nd, stats, upper)
    {
        link.pass_unclaimed = shared;
    }
    ~Ip6Rig() { link.flush(); }

    // DAD run to completion: every address PREFERRED; the frames it sent forgotten.
    void up()
    {
        nd.start(now);
        link.flush();
        advance(kSec);
        io.sent.clear();
    }
    void advance(uint64_t ns)
    {
        now += ns;
        nd.poll(now);
        link.flush();
    }
    // A received frame: Ethernet (to dst_mac) around an IPv6 packet.
    void rx(const std::vector<uint8_t> &packet, const MacAddr &dst_mac = kOurMac, const MacAddr &src_mac = kPeerMac)
    {
        frames.emplace_back(wire::kEthLen + packet.size());
        uint8_t *d = frames.back().data();
        auto *eth = reinterpret_cast<wire::Eth *>(d);
        std::memcpy(eth->dst, dst_mac.b, 6);
        std::memcpy(eth->src, src_mac.b, 6);
        eth->type = be16(wire::kEtherIpv6);
        std::memcpy(d + wire::kEthLen, packet.data(), packet.size());
        PacketRef f{d, d, uint16_t(frames.back().size()), uint16_t(frames.back().size()), 0};
        io.outstanding++;
        ip.input(f, now);
        link.flush();
    }

    RecordingIo io{2048, 100000}; // frames of up to 2 KiB: an ICMPv6 error quotes up to 1,280 bytes
    StackStats stats{};
    StackConfig cfg;
    Link link;
    NeighborDiscovery nd;
    Ip6Upper upper;
    Ipv6Layer ip;
    uint64_t now = 0;
    std::deque<std::vector<uint8_t>> frames;
};

// ---- packet builders (what a peer sends) ---------------------------------

inline std::vector<uint8_t> packet6(const Ip6Addr &src, const Ip6Addr &dst, uint8_t next,
                                    const std::vector<uint8_t> &payload, uint8_t hop = 64)
{
    std::vector<uint8_t> p(wire::kIp6Len + payload.size());
    auto *ip = reinterpret_cast<wire::Ipv6 *>(p.data());
    ip->vtf = be32(6u << 28);
    ip->payload_len = be16(uint16_t(payload.size()));
    ip->next = next;
    ip->hop_limit = hop;
    std::memcpy(ip->src, src.b, 16);
    std::memcpy(ip->dst, dst.b, 16);
    std::memcpy(p.data() + wire::kIp6Len, payload.data(), payload.size());
    return p;
}

// An ICMPv6 message from src to dst, checksummed.
inline std::vector<uint8_t> icmp6(const Ip6Addr &src, const Ip6Addr &dst, uint8_t type, uint8_t code, uint32_t data,
                                  const std::vector<uint8_t> &body)
{
    std::vector<uint8_t> m(8 + body.size());
    m[0] = type;
    m[1] = code;
    const uint32_t d = be32(data);
    std::memcpy(m.data() + 4, &d, 4);
    std::memcpy(m.data() + 8, body.data(), body.size());
    const uint16_t c = csum_finish(pseudo_sum6(src.b, dst.b, wire::kProtoIcmp6, uint32_t(m.size())) + csum_add(0, m.data(), m.size()));
    std::memcpy(m.data() + 2, &c, 2);
    return m;
}

// NS or NA body (after the 8-byte ICMPv6 header: target, options).
inline std::vector<uint8_t> nd_body(const Ip6Addr &target, uint8_t opt_type = 0, const MacAddr &lla = kPeerMac)
{
    std::vector<uint8_t> b(target.b, target.b + 16);
    if (opt_type) {
        b.push_back(opt_type);
        b.push_back(1);
        b.insert(b.end(), lla.b, lla.b + 6);
    }
    return b;
}

inline std::vector<uint8_t> ns(const Ip6Addr &src, const Ip6Addr &dst, const Ip6Addr &target, bool slla = true,
                               uint8_t hop = 255)
{
    return packet6(src, dst, wire::kProtoIcmp6,
                   icmp6(src, dst, wire::kNdNeighborSolicit, 0, 0, nd_body(target, slla ? wire::kNdOptSourceLla : 0)),
                   hop);
}

inline std::vector<uint8_t> na(const Ip6Addr &src, const Ip6Addr &dst, const Ip6Addr &target, uint32_t flags,
                               const MacAddr &lla = kPeerMac, bool tlla = true)
{
    return packet6(src, dst, wire::kProtoIcmp6,
                   icmp6(src, dst, wire::kNdNeighborAdvert, 0, flags, nd_body(target, tlla ? wire::kNdOptTargetLla : 0, lla)),
                   255);
}

inline std::vector<uint8_t> echo(const Ip6Addr &src, const Ip6Addr &dst, uint32_t id_seq = 0x12340001,
                                 const std::vector<uint8_t> &data = {'p', 'i', 'n', 'g'})
{
    return packet6(src, dst, wire::kProtoIcmp6, icmp6(src, dst, wire::kIcmp6EchoRequest, 0, id_seq, data));
}

// ---- reading what was sent ---------------------------------------------------

struct Sent {
    const std::vector<uint8_t> &f;
    const wire::Eth *eth() const { return reinterpret_cast<const wire::Eth *>(f.data()); }
    const wire::Ipv6 *ip() const { return reinterpret_cast<const wire::Ipv6 *>(f.data() + wire::kEthLen); }
    const uint8_t *l4() const { return f.data() + wire::kEthLen + wire::kIp6Len; }
    unsigned l4_len() const { return be16(ip()->payload_len); }
    uint8_t type() const { return l4()[0]; }
    uint8_t code() const { return l4()[1]; }
    uint32_t data() const
    {
        uint32_t v;
        std::memcpy(&v, l4() + 4, 4);
        return be32(v);
    }
    bool is_icmp6() const { return f.size() >= wire::kEthLen + wire::kIp6Len + 8 && ip()->next == wire::kProtoIcmp6; }
    bool csum_good() const
    {
        return csum_ok(pseudo_sum6(ip()->src, ip()->dst, wire::kProtoIcmp6, l4_len()) + csum_add(0, l4(), l4_len()));
    }
    Ip6Addr src() const { return ip6::from(ip()->src); }
    Ip6Addr dst() const { return ip6::from(ip()->dst); }
    Ip6Addr target() const { return ip6::from(l4() + 8); }
    // The link-layer address option's MAC (nullptr: none).
    const uint8_t *lla() const
    {
        if (l4_len() < 32) return nullptr;
        return l4() + 26;
    }
};

} // namespace mars::test
