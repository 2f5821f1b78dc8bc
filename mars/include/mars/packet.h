// mars/packet.h: how MARS sees packet buffers, and how it gets and sends them.
//
// MARS never allocates or frees frame memory itself and never knows what kind
// of buffer it holds. The engine (ppe/) maps DPDK's rte_mbuf onto PacketRef
// with no copy and no wrapper allocation: `handle` is the rte_mbuf pointer,
// `data` is rte_pktmbuf_mtod(), `len` is the frame length. Unit tests map a
// plain in-memory buffer onto the same struct. PacketRefs travel in arrays
// (bursts) that the caller owns, usually on its stack.
#pragma once

#include <cstdint>

namespace mars {

struct PacketRef {
    void *handle;   // the owner's buffer object (rte_mbuf *), opaque to MARS
    uint8_t *data;  // first byte of the Ethernet header
    uint16_t len;   // bytes of frame at data
    uint16_t room;  // bytes writable at data (tx buffers; 0 for received frames)
    uint32_t flags; // PacketFlags (with kTxTcpSeg, bits 16-31: the segment size)
};

enum PacketFlags : uint32_t {
    // Receive: the NIC verified these checksums (skip the software check).
    kRxIpCsumGood = 1u << 0,
    kRxL4CsumGood = 1u << 1,
    // Transmit: ask the NIC to fill these checksums (only set when the port
    // reported the offload in PacketIo::offloads()).
    kTxIpCsum = 1u << 8,
    kTxTcpCsum = 1u << 9,
    // Transmit: a TCP segmentation offload frame (only when the port reported
    // kOffloadTxTcpSeg): one header and up to PacketIo::tso_max_frame() bytes,
    // which the port sends as segments of tx_seg_size() payload bytes each
    // (mars/checksum_offload.h says what the header fields hold).
    kTxTcpSeg = 1u << 10,
    // Transmit: the frame's payload is not in its buffer but attached by
    // reference (PacketIo::attach_external, kOffloadTxExternal); `len`
    // counts the headers in the buffer only.
    kTxExternal = 1u << 11,
};

// A kTxTcpSeg frame's segment size (TCP payload bytes per segment: the MSS)
// rides in the top 16 bits of PacketRef::flags, so PacketRef stays 24 bytes:
// it is copied per frame on the receive path, where 8 more bytes cost about
// one instruction per segment.
constexpr uint32_t kTxSegSizeShift = 16;
constexpr uint32_t tx_seg_flags(uint16_t seg_size) { return uint32_t(seg_size) << kTxSegSizeShift; }
constexpr uint16_t tx_seg_size(const PacketRef &f) { return uint16_t(f.flags >> kTxSegSizeShift); }

// Offloads a port provides, as reported by PacketIo::offloads().
enum Offloads : uint32_t {
    kOffloadRxCsum = 1u << 0,
    kOffloadTxIpCsum = 1u << 1,
    kOffloadTxTcpCsum = 1u << 2,
    kOffloadTxTcpSeg = 1u << 3, // TSO: see tso_max_frame() / alloc_tso()
    kOffloadTxExternal = 1u << 4, // payload by reference: see attach_external()
};

// Why a received frame is not the stack's (PacketIo::unclaimed, with
// StackConfig::pass_unclaimed): what the owner forwards to another stack
// (in eta: the kernel, through the port's kernel interface) and counts by.
enum class Unclaimed : uint8_t {
    kTcpOtherPort, // TCP for a port with no connection or listener of this stack (a kernel program's)
    kUdp,          // IPv4 UDP no socket of this stack takes (a kernel program's port or group)
    kIcmp,         // ICMP: echo requests (not answered here), and a copy of every other ICMP message
    kArp,          // a copy of every well-formed ARP frame (the stack has learned from it / answered it)
    kIpv6,         // EtherType IPv6 (the stack has no IPv6)
    kOther,        // any other EtherType, IPv4 protocol, IPv4 not to our address, fragments
};
constexpr unsigned kUnclaimedReasons = 6;

// The engine's side of packet I/O. One per stack instance; never shared
// between engine cores. All calls are non-blocking, burst-oriented, and make
// no syscalls beyond what the underlying driver needs.
class PacketIo {
  public:
    virtual ~PacketIo() = default;
    // Fills up to n tx buffers (data/room set, len 0). Returns how many it got;
    // fewer than n means the pool is short and the caller backs off.
    virtual uint16_t alloc(PacketRef *out, uint16_t n) = 0;
    // Hands n finished frames to the wire. Ownership passes to the callee for
    // every frame, sent or not: frames the NIC did not take are freed and
    // counted by the callee. Returns how many were taken.
    virtual uint16_t transmit(PacketRef *frames, uint16_t n) = 0;
    // Returns buffers to their pool (received frames once consumed, and
    // allocated buffers that were not used).
    virtual void release(PacketRef *frames, uint16_t n) = 0;
    virtual uint32_t offloads() const { return 0; }
    // With StackConfig::pass_unclaimed: a received frame that is not the
    // stack's, handed over instead of answered (RST, ICMP unreachable) or
    // dropped. Ownership passes to the callee (forward it, or release it).
    // Called during input(), on the engine's thread; frames of one burst
    // come in arrival order. The default releases the frame.
    virtual void unclaimed(PacketRef &frame, Unclaimed why)
    {
        (void)why;
        release(&frame, 1);
    }
    // TCP segmentation offload (with kOffloadTxTcpSeg): the largest frame,
    // headers included, the port takes with kTxTcpSeg (at most 65535), and
    // buffers with at least that much room (alloc() gives MTU-sized ones).
    // A port without TSO keeps these defaults.
    virtual uint32_t tso_max_frame() const { return 0; }
    virtual uint16_t alloc_tso(PacketRef *out, uint16_t n)
    {
        (void)out;
        (void)n;
        return 0;
    }
    // Transmit without copying the payload (with kOffloadTxExternal): the
    // frame (headers in its buffer, `len` bytes) goes out followed by the
    // `len` bytes at `payload`, which the port reads in place, as late as
    // the device does (a NIC by DMA after transmit() returned). Until then
    // that memory must not change: the port decrements *refs by one once no
    // device reads it any more (the frame sent or dropped, whenever that
    // is, on the engine's own thread), and the caller counts *refs up by one
    // for each frame this returns true for. False: nothing attached (no
    // buffer for it); the caller copies instead. Sets kTxExternal.
    virtual bool attach_external(PacketRef &frame, const uint8_t *payload, uint16_t len, uint32_t *refs)
    {
        (void)frame;
        (void)payload;
        (void)len;
        (void)refs;
        return false;
    }
};

} // namespace mars
