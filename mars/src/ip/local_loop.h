// local_loop.h: frames a stack sends to one of its own addresses (issue 29:
// local connections inside the engine). A connection between two sockets of
// one stack (an eta client connecting to the PPE's own address where an eta
// listener waits) never touches a port: the router gives the destination
// itself as next hop, ARP never resolves it (so the connection's segments
// take the slow path where ARP is asked, ArpResolver::lookup/hold), and
// ArpResolver::hold hands such frames here instead of waiting. IPv6 is the
// same loop: neighbour discovery never resolves our own IPv6 addresses
// (NeighborDiscovery::lookup/hold), and hold hands their frames here through
// ArpResolver::loop. The stack takes them back in at its next poll() as
// received frames (Ethernet destination ours, checksums known good, as
// Linux's loopback marks them), with sharing off (a local SYN no socket of the
// stack claims gets RST, never the kernel).
//
// Frames are MTU-sized single segments: the transmit-run path (TSO frames,
// payload by reference) needs a resolved neighbour, which our own address
// never is (and IPv6 connections send segment by segment anyway), so no frame
// here carries a header the receive path does not parse.
// Bounded (kCapacity frames, reserved at creation, both families together):
// beyond that a frame is dropped and counted (drop_local_full), and TCP sends
// it again.
#pragma once

#include "ip/link.h"

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>
#include <vector>

namespace mars {

class LocalLoop {
  public:
    static constexpr uint32_t kCapacity = 4096;
    static_assert((kCapacity & (kCapacity - 1)) == 0);

    explicit LocalLoop(StackStats &stats) : stats_(stats), q_(kCapacity) {}
    LocalLoop(const LocalLoop &) = delete;
    LocalLoop &operator=(const LocalLoop &) = delete;

    // Takes an IPv4 or IPv6 frame (Ethernet source and type written) for
    // one of our own addresses, our MAC `mac`; dropped (released, counted)
    // when full.
    void push(PacketRef &frame, const MacAddr &mac, Link &link);
    bool empty() const { return head_ == tail_; }
    // Up to max frames, oldest first, as received frames.
    uint16_t take(PacketRef *out, uint16_t max);
    // Frames still queued go back to their owner (the stack going away or starting over).
    void discard(Link &link);

  private:
    StackStats &stats_;
    std::vector<PacketRef> q_; // a ring of kCapacity (a power of two), sized at creation
    uint32_t head_ = 0, tail_ = 0; // free-running
};

} // namespace mars
