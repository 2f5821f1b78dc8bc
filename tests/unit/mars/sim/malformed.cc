// tests/unit/mars/sim/malformed.cc: TEST FIXTURE. See malformed.h.
#include "malformed.h"

namespace mars::sim {

namespace {

constexpr size_t kIp = kEthLen;       // IP header offset
constexpr size_t kTcp = kEthLen + 20; // TCP header offset (IHL 5)

void set16(std::vector<uint8_t> &f, size_t at, uint16_t v)
{
    f[at] = uint8_t(v >> 8);
    f[at + 1] = uint8_t(v);
}

// Re-seals both checksums after an edit, so the frame is wrong only in the
// way the case intends.
std::vector<uint8_t> resealed(std::vector<uint8_t> f)
{
    fix_ip_checksum(f.data(), f.size());
    fix_l4_checksum(f.data(), f.size());
    return f;
}

// A copy of s carrying raw option bytes instead of its own options (kept to a
// multiple of four by the builder's padding).
std::vector<uint8_t> with_raw_options(TcpSpec s, std::vector<uint8_t> raw)
{
    s.opts = TcpOptions{};
    s.opts.raw = std::move(raw);
    return build_tcp(s);
}

// The TCP data offset field rewritten to doff words, checksums resealed.
std::vector<uint8_t> with_doff(std::vector<uint8_t> f, uint8_t doff)
{
    f[kTcp + 12] = uint8_t((doff << 4) | (f[kTcp + 12] & 0xf));
    return resealed(std::move(f));
}

std::vector<uint8_t> with_flags(TcpSpec s, uint8_t flags)
{
    s.flags = flags;
    return build_tcp(s);
}

// A UDP datagram (RFC 768) in place of the segment of `good`: its IPv4
// header with protocol 17, then the UDP header with length field `ulen`
// (-1: the real length), `payload`, and a checksum over the pseudo header
// (the real length; flipped when bad_csum). ip_payload: the IPv4 payload's
// length when it should differ from 8 + payload (a cut header).
std::vector<uint8_t> udp_in_place_of(const std::vector<uint8_t> &good, int ulen, const std::vector<uint8_t> &payload,
                                     bool bad_csum, size_t ip_payload = SIZE_MAX)
{
    std::vector<uint8_t> f(good.begin(), good.begin() + long(kTcp));
    const size_t real = 8 + payload.size();
    f.resize(kTcp + real, 0);
    f[kIp + 9] = 17;
    set16(f, kTcp, 40000);
    set16(f, kTcp + 2, 53);
    set16(f, kTcp + 4, ulen < 0 ? uint16_t(real) : uint16_t(ulen));
    std::copy(payload.begin(), payload.end(), f.begin() + long(kTcp + 8));
    uint32_t sum = 0;
    sum = csum_add(sum, &f[kIp + 12], 8); // addresses
    const uint8_t proto_len[4] = {0, 17, uint8_t(real >> 8), uint8_t(real)};
    sum = csum_add(sum, proto_len, 4);
    sum = csum_add(sum, &f[kTcp], real);
    uint16_t c = uint16_t(~csum_fold(sum));
    if (c == 0) c = 0xffff;
    if (bad_csum) c ^= 0x0420;
    set16(f, kTcp + 6, c);
    if (ip_payload != SIZE_MAX) f.resize(kTcp + ip_payload);
    set16(f, kIp + 2, uint16_t(f.size() - kIp));
    fix_ip_checksum(f.data(), f.size());
    return f;
}

} // namespace

uint64_t total_drops(const StackStats &s)
{
    return s.drop_eth + s.drop_not_ours + s.drop_arp + s.drop_ip_header + s.drop_ip_csum + s.drop_ip_ttl +
           s.drop_ip_fragment + s.drop_ip_proto + s.drop_icmp + s.drop_tcp_header + s.drop_tcp_csum +
           s.drop_tcp_no_socket + s.drop_tcp_bad_state + s.drop_tcp_paws + s.drop_tcp_out_of_window +
           s.drop_tcp_ooo_full + s.drop_tx_no_buffer + s.drop_arp_queue_full +
           s.drop_arp_unresolved + s.ip6_drop_header + s.ip6_drop_not_ours + s.ip6_drop_ext + s.ip6_drop_routing +
           s.ip6_drop_fragment + s.ip6_drop_proto + s.icmp6_drop + s.nd_drop_invalid + s.nd_drop_queue_full +
           s.nd_drop_unresolved + s.udp_header_errors + s.udp_csum_errors;
}

std::vector<MalformedCase> malformed_cases(const TcpSpec &data, const TcpSpec &syn)
{
    using S = StackStats;
    std::vector<MalformedCase> v;
    const std::vector<uint8_t> good = build_tcp(data);
    auto add = [&](std::string name, std::vector<uint8_t> f, uint64_t S::*c) { v.push_back({std::move(name), std::move(f), c}); };
    auto cut = [&](size_t n) { return std::vector<uint8_t>(good.begin(), good.begin() + long(std::min(n, good.size()))); };

    // ---- Ethernet
    add("eth_empty", {}, &S::drop_eth);
    add("eth_1_byte", cut(1), &S::drop_eth);
    add("eth_13_bytes", cut(13), &S::drop_eth);
    {
        auto f = good;
        set16(f, 12, 0x88b5); // IEEE local experimental: nobody's
        add("eth_unknown_ethertype", f, &S::drop_eth);
    }
    {
        auto f = good;
        set16(f, 12, 0x86dd); // an IPv4 packet labelled IPv6: version 4
        add("ip6_version_4", f, &S::ip6_drop_header);
    }
    {
        auto f = good;
        f[5] ^= 0x40; // unicast to someone else
        add("eth_other_unicast_mac", f, &S::drop_not_ours);
    }
    // ---- IPv4 header
    add("ip_header_absent", cut(kEthLen), &S::drop_ip_header);
    add("ip_header_19_bytes", cut(kEthLen + 19), &S::drop_ip_header);
    {
        auto f = good;
        f[kIp] = 0x65; // version 6 in an IPv4 ethertype
        add("ip_version_6", resealed(f), &S::drop_ip_header);
    }
    for (uint8_t ihl : {0, 1, 4}) {
        auto f = good;
        f[kIp] = uint8_t(0x40 | ihl);
        add("ip_ihl_" + std::to_string(ihl), resealed(f), &S::drop_ip_header);
    }
    {
        auto f = good;
        f[kIp] = 0x4f; // 60 bytes of header: more than total length covers here
        set16(f, kIp + 2, 40);
        add("ip_ihl_past_total_length", resealed(std::vector<uint8_t>(f.begin(), f.begin() + kEthLen + 40)),
            &S::drop_ip_header);
    }
    {
        auto f = good;
        set16(f, kIp + 2, uint16_t(f.size() - kEthLen + 1));
        add("ip_total_length_past_frame", resealed(f), &S::drop_ip_header);
    }
    {
        auto f = good;
        set16(f, kIp + 2, uint16_t(f.size() - kEthLen + 1000));
        add("ip_total_length_far_past_frame", resealed(f), &S::drop_ip_header);
    }
    {
        auto f = good;
        set16(f, kIp + 2, 19);
        add("ip_total_length_below_header", resealed(f), &S::drop_ip_header);
    }
    {
        auto f = good;
        set16(f, kIp + 2, 0);
        add("ip_total_length_zero", resealed(f), &S::drop_ip_header);
    }
    {
        auto f = good;
        f[kIp + 10] ^= 0x5a;
        add("ip_bad_checksum", f, &S::drop_ip_csum);
    }
    {
        auto f = good;
        set16(f, kIp + 6, 0x2000); // more fragments
        add("ip_fragment_first", resealed(f), &S::drop_ip_fragment);
    }
    {
        auto f = good;
        set16(f, kIp + 6, 185); // a later fragment (offset 1480)
        add("ip_fragment_later", resealed(f), &S::drop_ip_fragment);
    }
    {
        auto f = good;
        f[kIp + 9] = 253; // RFC 3692 experimental protocol
        add("ip_unknown_protocol", resealed(f), &S::drop_ip_proto);
    }
    {
        auto f = good;
        f[kIp + 19] ^= 0x60; // another host's address, same subnet
        add("ip_not_our_address", resealed(f), &S::drop_not_ours);
    }
    // ---- TCP header
    {
        auto f = good;
        set16(f, kIp + 2, 20 + 19); // IP says 19 bytes of TCP; the rest is padding
        add("tcp_header_19_bytes", resealed(f), &S::drop_tcp_header);
    }
    {
        auto f = cut(kTcp + 10);
        set16(f, kIp + 2, 30);
        add("tcp_header_cut_by_frame", resealed(f), &S::drop_tcp_header);
    }
    for (uint8_t doff : {0, 4}) add("tcp_data_offset_" + std::to_string(doff), with_doff(good, doff), &S::drop_tcp_header);
    {
        // 60 bytes of header claimed on a segment 20 + payload bytes long.
        TcpSpec s = data;
        s.opts = TcpOptions{};
        s.payload.resize(20);
        add("tcp_data_offset_past_end", with_doff(build_tcp(s), 15), &S::drop_tcp_header);
        s.payload.clear();
        add("tcp_data_offset_past_end_no_payload", with_doff(build_tcp(s), 6), &S::drop_tcp_header);
        // The timestamp layout (32 bytes) claimed by a bare 20-byte header at
        // the very end of the frame: the options must not be read.
        add("tcp_data_offset_8_past_end_of_frame", with_doff(build_tcp(s), 8), &S::drop_tcp_header);
    }
    {
        auto f = good;
        f[kTcp + 16] ^= 0xa5;
        add("tcp_bad_checksum", f, &S::drop_tcp_csum);
    }
    {
        auto f = good;
        f.back() ^= 0x01; // one payload bit
        add("tcp_payload_bit_flip", f, &S::drop_tcp_csum);
    }
    add("tcp_option_length_0", with_raw_options(data, {2, 0, 5, 0xb4}), &S::drop_tcp_header);
    add("tcp_option_length_1", with_raw_options(data, {8, 1, 1, 1}), &S::drop_tcp_header);
    add("tcp_option_past_end", with_raw_options(data, {1, 1, 8, 10, 0, 0, 0, 1}), &S::drop_tcp_header);
    add("tcp_option_kind_without_length", with_raw_options(data, {1, 1, 1, 3}), &S::drop_tcp_header);
    add("syn_option_length_0", with_raw_options(syn, {2, 0, 5, 0xb4}), &S::drop_tcp_header);
    add("syn_option_past_end", with_raw_options(syn, {2, 4, 5, 0xb4, 3, 9, 7, 0}), &S::drop_tcp_header);
    // ---- UDP header (mars/src/udp): dropped before the port is looked at
    // (a good datagram to this port, which no socket holds, would be answered)
    {
        const std::vector<uint8_t> pl = {'d', 'n', 's', '?', 1, 2, 3};
        add("udp_header_cut", udp_in_place_of(good, -1, pl, false, 7), &S::udp_header_errors);
        add("udp_length_below_header", udp_in_place_of(good, 7, pl, false), &S::udp_header_errors);
        add("udp_length_zero", udp_in_place_of(good, 0, pl, false), &S::udp_header_errors);
        add("udp_length_past_ip_payload", udp_in_place_of(good, int(8 + pl.size() + 1), pl, false),
            &S::udp_header_errors);
        add("udp_bad_checksum", udp_in_place_of(good, -1, pl, true), &S::udp_csum_errors);
    }
    // ---- Flag combinations that no correct TCP sends
    add("flags_syn_fin", with_flags(data, kSyn | kFin | kAck), nullptr);
    add("flags_syn_rst", with_flags(data, kSyn | kRst | kAck), nullptr);
    add("flags_none", with_flags(data, 0), nullptr);
    add("flags_fin_without_ack", with_flags(data, kFin), nullptr);
    add("flags_xmas", with_flags(data, 0xff), nullptr);
    add("listener_syn_fin", with_flags(syn, kSyn | kFin), nullptr);
    add("listener_syn_rst", with_flags(syn, kSyn | kRst), nullptr);
    add("listener_no_flags", with_flags(syn, 0), nullptr);
    add("listener_xmas", with_flags(syn, 0xff), nullptr);
    return v;
}

} // namespace mars::sim
