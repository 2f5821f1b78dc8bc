// event_net.h: TEST FIXTURE for the IPv6 tests between two stacks on the
// simulated wire (conn6, listen6, route6): a SimNet that records every
// socket event with the host it came from, runs two virtual seconds first
// (duplicate address detection: the addresses become preferred), and lets
// a test wait, in virtual time, until a socket has shown some event bits.
#pragma once

#include "sim_wire.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace mars::sim {

struct EventNet {
    static constexpr uint64_t kSecond = 1'000'000'000ull;

    explicit EventNet(const SimNetConfig &c) : net(c)
    {
        net.on_event = [this](int h, const SockEvent &e) { ev.push_back({h, e}); };
        net.run_for(2 * kSecond);
    }
    // Every event bit socket s of host h has shown so far.
    uint32_t bits(int h, SockId s) const
    {
        uint32_t b = 0;
        for (auto &[host, e] : ev)
            if (host == h && e.sock == s) b |= e.bits;
        return b;
    }
    // Runs the wire until s shows one of `want` (true) or budget_ns of
    // virtual time passed (false).
    bool wait(int h, SockId s, uint32_t want, uint64_t budget_ns = 30 * kSecond)
    {
        return net.run_until([&] { return (bits(h, s) & want) != 0; }, budget_ns);
    }
    SimNet net;
    std::vector<std::pair<int, SockEvent>> ev;
};

} // namespace mars::sim
