// recording_io.h: TEST FIXTURE for the layer tests (arp_test, ipv4_test): a
// PacketIo that hands out buffers from the heap (at most `allocatable`),
// records every frame transmitted, and counts buffers, so a test can check
// that every buffer came back (outstanding == 0).
#pragma once

#include <mars/packet.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace mars::test {

class RecordingIo final : public PacketIo {
  public:
    uint16_t alloc(PacketRef *out, uint16_t n) override
    {
        uint16_t got = 0;
        for (; got < n && allocatable > 0; got++, allocatable--) {
            buffers.push_back(std::make_unique<uint8_t[]>(kRoom));
            out[got] = PacketRef{buffers.back().get(), buffers.back().get(), 0, kRoom, 0};
            outstanding++;
        }
        return got;
    }
    uint16_t transmit(PacketRef *frames, uint16_t n) override
    {
        for (uint16_t i = 0; i < n; i++) {
            sent.emplace_back(frames[i].data, frames[i].data + frames[i].len);
            outstanding--;
        }
        return n;
    }
    void release(PacketRef *, uint16_t n) override
    {
        released += n;
        outstanding -= n;
    }

    static constexpr uint16_t kRoom = 256;
    int allocatable = 1000;
    int outstanding = 0; // buffers handed out and not yet transmitted or released
    int released = 0;
    std::vector<std::unique_ptr<uint8_t[]>> buffers;
    std::vector<std::vector<uint8_t>> sent;
};

} // namespace mars::test
