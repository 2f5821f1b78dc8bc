// tests/fuzz/mars/frame6.cc: see frame6.h.
#include "frame6.h"

#include <cstring>

namespace mars::fuzz {

std::vector<uint8_t> ip6_frame(const MacAddr &src_mac, const uint8_t *dst_mac, const uint8_t *src, const uint8_t *dst,
                               uint8_t next, uint8_t hop, std::vector<uint8_t> payload, size_t l4_at)
{
    if (l4_at != SIZE_MAX && payload.size() >= l4_at + 4) {
        // RFC 8200 8.1 pseudo-header, then the message, as big-endian words.
        const uint32_t len = uint32_t(payload.size() - l4_at);
        std::vector<uint8_t> all(src, src + 16);
        all.insert(all.end(), dst, dst + 16);
        const uint8_t proto = next == 6 || next == 17 ? next : 58;
        const size_t cs = l4_at + (proto == 6 ? 16 : proto == 17 ? 6 : 2); // the checksum field
        const uint8_t tail[8] = {uint8_t(len >> 24), uint8_t(len >> 16), uint8_t(len >> 8), uint8_t(len), 0, 0, 0, proto};
        all.insert(all.end(), tail, tail + 8);
        payload[cs] = payload[cs + 1] = 0;
        all.insert(all.end(), payload.begin() + long(l4_at), payload.end());
        if (all.size() & 1) all.push_back(0);
        uint32_t sum = 0;
        for (size_t i = 0; i < all.size(); i += 2) sum += uint32_t(all[i] << 8 | all[i + 1]);
        while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
        payload[cs] = uint8_t(~sum >> 8);
        payload[cs + 1] = uint8_t(~sum);
    }
    std::vector<uint8_t> f(14 + 40);
    std::memcpy(f.data(), dst_mac, 6);
    std::memcpy(f.data() + 6, src_mac.b, 6);
    f[12] = 0x86;
    f[13] = 0xdd;
    f[14] = 0x60;
    f[18] = uint8_t(payload.size() >> 8);
    f[19] = uint8_t(payload.size());
    f[20] = next;
    f[21] = hop;
    std::memcpy(f.data() + 22, src, 16);
    std::memcpy(f.data() + 38, dst, 16);
    f.insert(f.end(), payload.begin(), payload.end());
    return f;
}

std::vector<uint8_t> tcp6_frame(const sim::TcpSpec &s, const Ip6Addr &src, const Ip6Addr &dst)
{
    const std::vector<uint8_t> v4 = sim::build_tcp(s); // IHL 5: TCP at 34
    const std::vector<uint8_t> seg(v4.begin() + sim::kEthLen + 20, v4.end());
    return ip6_frame(s.src_mac, s.dst_mac.b, src.b, dst.b, 6, 64, seg, 0);
}

bool parse_tcp6(const uint8_t *f, size_t len, sim::Parsed *out)
{
    if (len < kIp6Tcp + 20 || f[12] != 0x86 || f[13] != 0xdd || f[20] != 6) return false;
    const size_t plen = size_t(f[18]) << 8 | f[19];
    if (plen < 20 || kIp6Tcp + plen > len) return false;
    // The same segment behind an IPv4 header, checksums made right, parsed.
    std::vector<uint8_t> v4(sim::kEthLen + 20 + plen, 0);
    std::memcpy(v4.data(), f, 12);
    v4[12] = 0x08;
    v4[14] = 0x45;
    v4[16] = uint8_t((20 + plen) >> 8);
    v4[17] = uint8_t(20 + plen);
    v4[22] = 64;
    v4[23] = 6;
    std::memcpy(v4.data() + 34, f + kIp6Tcp, plen);
    sim::fix_ip_checksum(v4.data(), v4.size());
    sim::fix_l4_checksum(v4.data(), v4.size());
    return sim::parse_frame(v4.data(), v4.size(), out) && out->is_tcp;
}

std::vector<uint8_t> nd_advert(const MacAddr &peer_mac, const Ip6Addr &target, const MacAddr &dst_mac, const uint8_t *dst)
{
    std::vector<uint8_t> na = {136, 0, 0, 0, 0x60, 0, 0, 0}; // solicited | override
    na.insert(na.end(), target.b, target.b + 16);
    na.insert(na.end(), {2, 1}); // target link-layer address, 8 bytes
    na.insert(na.end(), peer_mac.b, peer_mac.b + 6);
    return ip6_frame(peer_mac, dst_mac.b, target.b, dst, 58, 255, na, 0);
}

} // namespace mars::fuzz
