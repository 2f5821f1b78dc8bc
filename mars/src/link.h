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
    // Queues a finished frame for the next transmit burst (a full burst
    // leaves at once).
    void queue(PacketRef &frame)
    {
        if (n_ == kTxBurst) flush();
        stats_.tx_frames++;
        stats_.tx_bytes += frame.len;
        burst_[n_++] = frame;
    }
    void flush()
    {
        if (!n_) return;
        io_.transmit(burst_, n_);
        n_ = 0;
    }
    // A frame goes back to its owner (dropped, or consumed).
    void release(PacketRef &frame) { io_.release(&frame, 1); }
    bool pending() const { return n_ != 0; }

  private:
    PacketIo &io_;
    StackStats &stats_;
    PacketRef burst_[kTxBurst];
    uint16_t n_ = 0;
};

} // namespace mars
