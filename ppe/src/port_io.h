// ppe/src/port_io.h: the engine loop's seam to a NIC queue. An engine talks
// to each of its (port, queue) pairs only through this: one rx burst per
// port per loop iteration (receive), and MARS's own PacketIo calls (alloc,
// transmit, release). eta-ppe's one is MbufIo (dpdk.h: rte_eth_rx_burst /
// rte_eth_tx_burst on mbufs); unit tests give the engine one that is wired
// to a second MARS stack, so the real loop runs without a NIC or root.
//
// Cost: MARS already reaches the port through PacketIo's virtual calls;
// the seam adds one indirect call per port per loop iteration (receive),
// not one per frame.
#pragma once

#include <mars/packet.h>

#include <cstdint>

namespace ppe {

class PortIo : public mars::PacketIo {
  public:
    // Receives up to n frames (n <= 256) straight into PacketRefs.
    virtual uint16_t receive(mars::PacketRef *out, uint16_t n) = 0;

    // Counted by the implementation; the engine publishes them.
    uint64_t rx_packets = 0, tx_packets = 0, tx_dropped = 0;
};

} // namespace ppe
