// link.h: the frames one stack sends, as the Ethernet link sees them:
// buffers from the frames' owner (PacketIo), a transmit burst that leaves in
// one transmit() call, and frames handed back. Every layer that sends (ARP,
// IPv4/ICMP, TCP) queues through one Link, so what a burst makes due leaves
// together at the end of input() or poll().
#pragma once

#include <mars/packet.h>
#include <mars/stack.h>

#include <cstdint>

namespace mars {

class Link {
  public:
    static constexpr uint16_t kTxBurst = 64;

    Link(PacketIo &io, StackStats &stats) : io_(io), stats_(stats) {}
    Link(const Link &) = delete;
    Link &operator=(const Link &) = delete;
    ~Link() { discard(); }

    // Frames still queued go back to the owner unsent (the stack going away).
    void discard()
    {
        if (n_) io_.release(burst_, n_);
        n_ = 0;
    }

    // A frame to fill (len 0, no flags); false (counted) when the owner has none.
    bool alloc(PacketRef *out)
    {
        if (io_.alloc(out, 1) != 1) {
            stats_.drop_tx_no_buffer++;
            return false;
        }
        out->flags = 0;
        out->len = 0;
        return true;
    }
    // Up to n frames to fill, in one call to the owner (a run of segments);
    // when the owner gives fewer, the rest one by one as alloc() would get
    // them (DPDK's bulk allocation is all or nothing). Returns how many;
    // fewer than n is counted once, as alloc() failing would be.
    uint16_t alloc_run(PacketRef *out, uint16_t n)
    {
        uint16_t got = io_.alloc(out, n);
        while (got < n && io_.alloc(out + got, 1) == 1) got++;
        if (got < n) stats_.drop_tx_no_buffer++;
        for (uint16_t i = 0; i < got; i++) {
            out[i].flags = 0;
            out[i].len = 0;
        }
        return got;
    }
    // One buffer for a TCP segmentation offload frame (PacketIo::alloc_tso);
    // false, not counted, when the owner has none (the caller segments).
    bool alloc_tso(PacketRef *out)
    {
        if (io_.alloc_tso(out, 1) != 1) return false;
        out->flags = 0;
        out->len = 0;
        return true;
    }
    // Queues a finished frame for the next transmit burst (a full burst
    // leaves at once).
    void queue(PacketRef &frame) { queue(frame, 1, frame.len); }
    // The same for a frame the port turns into `frames` frames of
    // `wire_bytes` in all (TSO): the counters count what goes on the wire.
    void queue(PacketRef &frame, uint32_t frames, uint32_t wire_bytes)
    {
        if (n_ == kTxBurst) flush();
        stats_.tx_frames += frames;
        stats_.tx_bytes += wire_bytes;
        burst_[n_++] = frame;
    }
    // A run's frames, each one frame on the wire, `wire_bytes` in all: the
    // counters once, the references copied in order (a full burst leaves at
    // once, as queue() does).
    void queue_run(const PacketRef *frames, uint32_t n, uint64_t wire_bytes)
    {
        stats_.tx_frames += n;
        stats_.tx_bytes += wire_bytes;
        for (uint32_t i = 0; i < n; i++) {
            if (n_ == kTxBurst) flush();
            burst_[n_++] = frames[i];
        }
    }
    void flush()
    {
        if (!n_) return;
        io_.transmit(burst_, n_);
        n_ = 0;
    }
    // A frame goes back to its owner (dropped, or consumed).
    void release(PacketRef &frame) { io_.release(&frame, 1); }
    // A received frame no socket claims: handed to the owner when the stack
    // shares its address (StackConfig::pass_unclaimed; true: taken), else
    // false and the caller answers or drops it as a lone stack does.
    bool pass_up(PacketRef &frame, Unclaimed why)
    {
        if (!pass_unclaimed) return false;
        io_.unclaimed(frame, why);
        return true;
    }
    bool pass_unclaimed = false;
    bool pending() const { return n_ != 0; }

  private:
    PacketIo &io_;
    StackStats &stats_;
    PacketRef burst_[kTxBurst];
    uint16_t n_ = 0;
};

} // namespace mars
