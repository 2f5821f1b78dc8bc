// ipv4.h: the IPv4 and ICMP layer of one stack. Input validates the IPv4
// header against the frame (version, lengths, checksum unless the NIC
// verified it, our address, no fragments: DF is always set and fragments are
// counted and dropped, TTL) and hands TCP segments up, and UDP and IGMP (to
// our address or to a multicast group) to the UDP component
// (Ipv4DatagramUpper, udp/udp.h); ICMP echo is answered
// here, ICMP errors quoting a TCP segment of ours are handed up (the RFC 5927
// checks need the connection), and those quoting a UDP datagram of ours to
// the UDP component (a connected socket's pending error). Output finishes an IPv4 frame's Ethernet
// header for its next hop and queues it on the link, or holds it for ARP.
#pragma once

#include "ip/arp.h"
#include "ip/link.h"
#include "ip/route.h"
#include "base/wire.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>

namespace mars {

// An ICMP destination-unreachable quoting a TCP segment we sent.
struct IcmpTcpError {
    uint32_t remote_ip;                // the quoted segment's destination
    uint16_t local_port, remote_port;  // its source and destination ports
    uint32_t seq;                      // its sequence number
    uint8_t code;                      // ICMP code (kIcmpCodeFragNeeded, port, protocol, ...)
    uint16_t next_hop_mtu;             // with kIcmpCodeFragNeeded; 0 from old routers
};

// An ICMP error (destination unreachable, parameter problem) quoting a UDP
// datagram we sent: for the UDP component (udp/udp_error.cc).
struct IcmpUdpError {
    uint32_t local_ip, remote_ip;     // the quoted datagram's source (ours) and destination
    uint16_t local_port, remote_port; // its source and destination ports
    uint8_t type, code;               // ICMP type and code
};

// What the IPv4 layer hands up to: the stack's TCP.
class Ipv4Upper {
  public:
    // A TCP segment for us; total: the IPv4 total length, ihl its header's.
    // Takes the frame.
    virtual void tcp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) = 0;
    virtual void tcp_icmp_error(const IcmpTcpError &e) = 0;

  protected:
    ~Ipv4Upper() = default;
};

// What the IPv4 layer hands datagrams to: the stack's UDP component
// (udp/udp.h), which owns its sockets and multicast memberships. UDP and
// IGMP for our address or for a multicast group (the component decides
// whether anyone joined it); not set: they are handled as other protocols.
class Ipv4DatagramUpper {
  public:
    // Takes the frame; total: the IPv4 total length, ihl its header's.
    virtual void udp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) = 0;
    virtual void igmp_input(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total) = 0;
    virtual void udp_icmp_error(const IcmpUdpError &e) = 0;

  protected:
    ~Ipv4DatagramUpper() = default;
};

class Ipv4Layer {
  public:
    Ipv4Layer(const StackConfig &config, Link &link, ArpResolver &arp, const Router &router, StackStats &stats,
              Ipv4Upper &upper);
    Ipv4Layer(const Ipv4Layer &) = delete;
    Ipv4Layer &operator=(const Ipv4Layer &) = delete;

    // An IPv4 frame (EtherType checked, Ethernet header included); takes it.
    void input(PacketRef &f, uint64_t now_ns);
    // Finishes the Ethernet header of an IPv4 frame for next_hop and queues it
    // for transmission (or for ARP). Takes ownership of the frame.
    void send(PacketRef &frame, uint32_t next_hop, uint64_t now_ns);
    // Destination unreachable (code) to the sender of ip_packet (len bytes),
    // quoting its header and 8 bytes.
    void send_icmp_unreach(const uint8_t *ip_packet, unsigned len, uint8_t code, uint64_t now_ns);
    // Where UDP and IGMP go (the stack sets it once).
    void set_datagram_upper(Ipv4DatagramUpper *u) { datagram_ = u; }

  private:
    void input_icmp(PacketRef &f, const wire::Ipv4 *ip, unsigned ihl, unsigned total, uint64_t now_ns);

    const uint32_t ip_;
    const MacAddr mac_;
    Link &link_;
    ArpResolver &arp_;
    const Router &router_;
    StackStats &stats_;
    Ipv4Upper &upper_;
    Ipv4DatagramUpper *datagram_ = nullptr;
};

} // namespace mars
