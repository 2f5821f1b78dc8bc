// ppe/src/vnet_port.h: the "vnet:<ifname>" port — a kernel interface (a
// veth, a container's interface) with a server NIC's offloads, at the
// engine's own seam (PortIo, port_io.h), not as a DPDK PMD.
//
// One AF_PACKET socket per engine queue, bound to the interface with
// PACKET_VNET_HDR (several queues: a PACKET_FANOUT hash group). Every frame
// carries a virtio_net_hdr, which is how the kernel hands a NIC's offloads
// across the socket:
//   receive: frames arrive as large as the peer's kernel made them (GSO
//     super-frames, up to 64 KiB: an LRO frame to MARS), straight into mbufs
//     of a pool of 64 KiB buffers (recvmmsg, one system call per burst); the
//     header's flags say what the checksum is: DATA_VALID (verified) and
//     NEEDS_CSUM (a frame the peer's kernel made, whose checksum is partial:
//     valid by the kernel's definition) become mars::kRxL4CsumGood, no flag
//     leaves the check to MARS. The IPv4 header checksum is always MARS's
//     (20 bytes).
//   transmit: sendmmsg of whole frames (with tx_zerocopy, kOffloadTxExternal:
//     a frame's payload read in place from the application's send ring, its
//     header mbuf and the payload two pieces of one message, which the
//     kernel copies into its skb: one copy fewer per byte than building the
//     frame first); a kTxTcpSeg frame goes with gso_type
//     TCPV4 (TCPV6 for an IPv6 frame) and gso_size (the kernel, or the
//     peer's receive path, cuts it), a checksum request with NEEDS_CSUM
//     csum_start/csum_offset (34 for IPv4 without options, 54 for IPv6).
//     The IPv4 header checksum (kTxIpCsum) is filled here (the kernel does
//     not); IPv6 has none.
// Why not a DPDK vdev PMD: Debian's DPDK 22.11 installs no driver SDK
// headers (ethdev_driver.h), so a PMD of our own cannot be built cleanly
// against it; the seam gives the engine the same offloads (ppe/README.md).
#pragma once

#include "config.h"
#include "port_io.h"

#include <mars/packet.h>

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ppe {

// The header PACKET_VNET_HDR puts before every frame: struct
// virtio_net_hdr of the virtio specification (5.1.6), in the host's byte
// order (a packet socket's is little-endian). <linux/virtio_net.h> is C only.
struct virtio_net_hdr {
    uint8_t flags;
    uint8_t gso_type;
    uint16_t hdr_len;     // Ethernet + IP + TCP header bytes (GSO)
    uint16_t gso_size;    // payload bytes per segment (GSO)
    uint16_t csum_start;  // NEEDS_CSUM: where the checksum's sum begins
    uint16_t csum_offset; // ... and where it goes, from csum_start
};
static_assert(sizeof(virtio_net_hdr) == 10);
constexpr uint8_t VIRTIO_NET_HDR_F_NEEDS_CSUM = 1;
constexpr uint8_t VIRTIO_NET_HDR_F_DATA_VALID = 2;
constexpr uint8_t VIRTIO_NET_HDR_GSO_NONE = 0;
constexpr uint8_t VIRTIO_NET_HDR_GSO_TCPV4 = 1;
constexpr uint8_t VIRTIO_NET_HDR_GSO_TCPV6 = 4;
constexpr uint8_t VIRTIO_NET_HDR_GSO_ECN = 0x80;

// One queue's counters: written by its engine only, read (sums, torn reads
// of single 64-bit words are whole on x86-64) by the control thread.
struct alignas(64) VnetCounters {
    uint64_t rx_frames = 0, rx_bytes = 0;
    uint64_t rx_lro_frames = 0, rx_lro_segments = 0; // GSO super-frames and the MSS segments they stand for
    uint64_t rx_csum_valid = 0, rx_csum_partial = 0, rx_csum_unknown = 0;
    uint64_t rx_dropped = 0;   // truncated (larger than a buffer) or a malformed header
    uint64_t rx_nombuf = 0;    // no buffer: a frame waited in the socket (or was copied to a small one)
    uint64_t tx_frames = 0, tx_bytes = 0;
    uint64_t tx_tso_frames = 0, tx_tso_segments = 0;
    uint64_t tx_errors = 0;    // frames the kernel did not take
};

struct VnetPortState {
    std::string iface;
    int if_index = 0;
    std::vector<int> fds;                  // one AF_PACKET socket per queue
    std::vector<rte_mempool *> rx_pools;   // 64 KiB buffers, one pool per queue
    VnetCounters *counters = nullptr;      // one per queue (aligned array)
    uint32_t mtu = 0;                      // the interface's
    mutable uint64_t socket_drops_ = 0;    // socket_drops()'s sum of what the kernel reset
    bool open(const PortConfig &pc, const std::vector<int> &numa_of_queue, uint32_t rx_buffers,
              uint8_t mac_out[6], std::string *error);
    void close();
    VnetCounters sum() const;
    // Frames the kernel dropped at the queues' sockets because their receive
    // buffers were full (the engine fell behind the peer): PACKET_STATISTICS'
    // tp_drops, which the kernel resets at each read, summed over the reads
    // here. The control thread's alone (the only reader, or counts would
    // split between readers).
    uint64_t socket_drops() const;
    // The interface's link, from sysfs: carrier, and speed in Mbit/s (0: unknown).
    void link(bool *up, uint64_t *speed_mbps) const;
    uint16_t queues() const { return uint16_t(fds.size()); }
};

// The largest frame a receive buffer holds (an mbuf's data room is 16 bits).
constexpr uint32_t kVnetRxRoom = UINT16_MAX - RTE_PKTMBUF_HEADROOM;

class VnetIo final : public PortIo {
  public:
    VnetIo(int fd, rte_mempool *rx_pool, rte_mempool *tx_pool, rte_mempool *tso_pool, uint16_t port_id,
           uint32_t offloads, VnetCounters *counters);
    ~VnetIo() override;
    uint16_t receive(mars::PacketRef *out, uint16_t n) override;
    uint16_t alloc(mars::PacketRef *out, uint16_t n) override;
    uint16_t transmit(mars::PacketRef *frames, uint16_t n) override;
    void release(mars::PacketRef *frames, uint16_t n) override;
    uint32_t offloads() const override { return offloads_; }
    uint32_t tso_max_frame() const override { return tso_pool_ ? UINT16_MAX - RTE_PKTMBUF_HEADROOM : 0; }
    uint16_t alloc_tso(mars::PacketRef *out, uint16_t n) override;
    bool attach_external(mars::PacketRef &frame, const uint8_t *payload, uint16_t len, uint32_t *refs) override;

  private:
    static constexpr uint16_t kBurst = 64;
    uint16_t receive_bounce(mars::PacketRef *out);
    int fd_;
    rte_mempool *rx_pool_, *tx_pool_, *tso_pool_;
    uint16_t port_id_;
    uint32_t offloads_;
    VnetCounters *c_;
    // Receive slots: mbufs kept between calls, refilled as frames leave.
    rte_mbuf *slot_[kBurst] = {};
    virtio_net_hdr rx_hdr_[kBurst];
    iovec rx_iov_[kBurst][2];
    mmsghdr rx_msg_[kBurst];
    uint8_t *bounce_ = nullptr; // a 64 KiB buffer for when the pool is dry
    virtio_net_hdr tx_hdr_[kBurst];
    iovec tx_iov_[kBurst][3]; // the header, the frame, its payload by reference
    mmsghdr tx_msg_[kBurst];
};

// Fills the virtio_net_hdr a frame MARS made is sent with, and the fields
// the offloads leave to the port (IPv4 header checksum; for TSO the TCP
// length in the pseudo-header sum, which the kernel's GSO wants). Returns
// the TSO segment count (1 without TSO). ext_len: the payload bytes attached
// by reference after f's own (kTxExternal), part of the frame on the wire.
// Exposed for the unit tests.
uint32_t vnet_tx_prepare(const mars::PacketRef &f, virtio_net_hdr *h, uint32_t ext_len = 0);
// What a received frame's virtio_net_hdr says, as PacketRef flags; *lro_segs:
// the segments a GSO frame stands for (0: not one). Exposed for the unit tests.
uint32_t vnet_rx_flags(const virtio_net_hdr &h, const uint8_t *frame, uint32_t len, uint32_t *lro_segs);

} // namespace ppe
