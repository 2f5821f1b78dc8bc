// tests/unit/mars/sim/frame.h: TEST FIXTURE. Builds raw Ethernet/ARP/IPv4/
// TCP/ICMP frames (for injecting crafted segments into a stack) and parses the
// frames a stack emits (so tests can check what it said). Independent of the
// stack's own code: it implements RFC 791/793/826/792/7323/2018 wire formats
// from scratch so it can catch mistakes in the stack rather than share them.
#pragma once

#include <mars/stack.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mars::sim {

// TCP header flag bits (RFC 9293 section 3.1).
enum TcpFlag : uint8_t {
    kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10, kUrg = 0x20, kEce = 0x40, kCwr = 0x80,
};

constexpr uint16_t kEtherIpv4 = 0x0800;
constexpr uint16_t kEtherArp = 0x0806;
constexpr size_t kEthLen = 14;

inline uint32_t ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
    return (uint32_t(a) << 24) | (uint32_t(b) << 16) | (uint32_t(c) << 8) | d;
}
inline MacAddr mac(uint8_t last)
{
    return MacAddr{{0x02, 0x00, 0x00, 0x00, 0x00, last}};
}
bool operator==(const MacAddr &a, const MacAddr &b);

// The ones' complement sum (RFC 1071) of len bytes, folded but not inverted,
// added to `sum`.
uint32_t csum_add(uint32_t sum, const uint8_t *p, size_t len);
uint16_t csum_fold(uint32_t sum);
// Recomputes the IPv4 header checksum of the frame in place (Ethernet at p[0]).
void fix_ip_checksum(uint8_t *frame, size_t len);
// Recomputes the TCP (proto 6), ICMP (proto 1) or UDP (proto 17, over its
// length field when that fits) checksum in place, using the IP total length
// to bound the segment. No-op on frames too short to hold one.
void fix_l4_checksum(uint8_t *frame, size_t len);

struct TcpOptions {
    std::optional<uint16_t> mss;
    std::optional<uint8_t> wscale;
    bool sack_permitted = false;
    std::optional<std::pair<uint32_t, uint32_t>> ts; // TSval, TSecr
    std::vector<std::pair<uint32_t, uint32_t>> sack;  // left, right edges
    std::vector<uint8_t> raw;                          // appended verbatim (odd cases)
};

struct TcpSpec {
    MacAddr src_mac, dst_mac;
    uint32_t src_ip = 0, dst_ip = 0; // host byte order
    uint16_t sport = 0, dport = 0;
    uint32_t seq = 0, ack = 0;
    uint8_t flags = 0;
    uint16_t window = 65535;
    TcpOptions opts;
    std::vector<uint8_t> payload;
    uint8_t ttl = 64;
    uint16_t ip_id = 0;
    bool df = true;
    uint8_t tos = 0;
};

// Writes the frame into buf (room bytes). Returns its length (0 when it does
// not fit). Checksums are correct; callers corrupt them afterwards if they want.
size_t build_tcp(const TcpSpec &s, uint8_t *buf, size_t room);
std::vector<uint8_t> build_tcp(const TcpSpec &s);

struct ArpSpec {
    MacAddr eth_src, eth_dst; // dst ff:ff:.. for a request
    uint16_t op = 1;          // 1 request, 2 reply
    MacAddr sha, tha;
    uint32_t spa = 0, tpa = 0;
};
std::vector<uint8_t> build_arp(const ArpSpec &s);

struct IcmpSpec {
    MacAddr src_mac, dst_mac;
    uint32_t src_ip = 0, dst_ip = 0;
    uint8_t type = 8, code = 0;
    uint32_t rest = 0;            // bytes 4..7 of the ICMP header (id/seq, or next-hop MTU)
    std::vector<uint8_t> payload; // echo data, or the quoted IP header + 8 bytes
};
std::vector<uint8_t> build_icmp(const IcmpSpec &s);

// What a frame says, as far as these tests care.
struct Parsed {
    size_t len = 0;
    MacAddr eth_dst, eth_src;
    uint16_t ethertype = 0;
    // ARP
    bool is_arp = false;
    uint16_t arp_op = 0;
    MacAddr arp_sha, arp_tha;
    uint32_t arp_spa = 0, arp_tpa = 0;
    // IPv4
    bool is_ip = false;
    bool ip_csum_ok = false;
    uint8_t ihl = 0, ttl = 0, proto = 0, tos = 0;
    uint16_t ip_total = 0, ip_frag = 0; // frag: flags + offset field
    uint32_t src_ip = 0, dst_ip = 0;
    // TCP
    bool is_tcp = false;
    bool tcp_csum_ok = false;
    uint16_t sport = 0, dport = 0;
    uint32_t seq = 0, ack = 0;
    uint8_t flags = 0;
    uint16_t window = 0;
    TcpOptions opts;
    bool opts_ok = true; // option list well formed
    std::vector<uint8_t> payload;
    // ICMP
    bool is_icmp = false;
    uint8_t icmp_type = 0, icmp_code = 0;

    bool has(uint8_t f) const { return (flags & f) == f; }
    // Sequence space the segment occupies (SYN and FIN count one each).
    uint32_t seg_len() const { return uint32_t(payload.size()) + ((flags & kSyn) ? 1 : 0) + ((flags & kFin) ? 1 : 0); }
    std::string describe() const;
};

// Parses a frame; never reads outside [p, p+len). Returns false for frames
// it cannot make sense of (the fields parsed so far are still filled in).
bool parse_frame(const uint8_t *p, size_t len, Parsed *out);

std::string flags_str(uint8_t flags);

} // namespace mars::sim
