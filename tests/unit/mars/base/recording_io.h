// recording_io.h: TEST FIXTURE for the layer tests (arp_test, ipv4_test, the
// IPv6 layer's ip6_fixture.h): a PacketIo that hands out buffers of `room`
// bytes from the heap (at most `allocatable`), records every frame
// transmitted and every frame handed on as unclaimed (with its reason; then
// released, as PacketIo's default does), and counts buffers, so a test can
// check that every buffer came back (outstanding == 0).
#pragma once

#include <mars/packet.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace mars::test {

class RecordingIo final : public PacketIo {
  public:
    explicit RecordingIo(uint16_t room_ = 256, int allocatable_ = 1000) : room(room_), allocatable(allocatable_) {}
    uint16_t alloc(PacketRef *out, uint16_t n) override
    {
        uint16_t got = 0;
        for (; got < n && allocatable > 0; got++, allocatable--) {
            buffers.push_back(std::make_unique<uint8_t[]>(room));
            out[got] = PacketRef{buffers.back().get(), buffers.back().get(), 0, room, 0};
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
    void unclaimed(PacketRef &f, Unclaimed why) override
    {
        passed.emplace_back(f.data, f.data + f.len);
        reasons.push_back(why);
        release(&f, 1);
    }

    const uint16_t room;
    int allocatable;
    int outstanding = 0; // buffers handed out and not yet transmitted or released
    int released = 0;
    std::vector<std::unique_ptr<uint8_t[]>> buffers;
    std::vector<std::vector<uint8_t>> sent, passed;
    std::vector<Unclaimed> reasons;
};

} // namespace mars::test
