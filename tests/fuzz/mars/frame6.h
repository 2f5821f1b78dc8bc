// tests/fuzz/mars/frame6.h: IPv6 frames for the mars fuzz fixture (its
// setup, its peer's neighbour advertisements, its seeds). sim::frame.h
// builds and parses IPv4 only; TCP over IPv6 is built here from its IPv4
// form (the TCP segment sim::build_tcp writes, options included, moved
// behind a 40-byte IPv6 header) and read back the same way.
#pragma once

#include "frame.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mars::fuzz {

constexpr size_t kIp6Tcp = sim::kEthLen + 40; // where TCP starts in a frame without extension headers

// A frame from src_mac to dst_mac carrying an IPv6 packet (src, dst, next
// header, hop limit, payload). With l4_at, the payload holds from there an
// ICMPv6 message (or, next 6, a TCP segment; 17, a UDP datagram) whose
// checksum over the IPv6 pseudo-header (RFC 8200 8.1) is filled in.
std::vector<uint8_t> ip6_frame(const MacAddr &src_mac, const uint8_t *dst_mac, const uint8_t *src, const uint8_t *dst,
                               uint8_t next, uint8_t hop, std::vector<uint8_t> payload, size_t l4_at = SIZE_MAX);

// s (its MACs, ports, numbers, flags, window, options, payload; its IPv4
// addresses ignored) as a TCP segment over IPv6 from src to dst, hop limit
// 64, the checksum right.
std::vector<uint8_t> tcp6_frame(const sim::TcpSpec &s, const Ip6Addr &src, const Ip6Addr &dst);

// A TCP/IPv6 frame (TCP right after the IPv6 header) read as sim::parse_frame
// reads an IPv4 one (its IP fields are not the frame's). False when it is
// not one.
bool parse_tcp6(const uint8_t *f, size_t len, sim::Parsed *out);

// The peer's neighbour advertisement of target (solicited, override, its
// MAC as the target link-layer address) to dst at dst_mac (RFC 4861 4.4).
std::vector<uint8_t> nd_advert(const MacAddr &peer_mac, const Ip6Addr &target, const MacAddr &dst_mac, const uint8_t *dst);

} // namespace mars::fuzz
