// tests/unit/mars/sim/tcp_fixture.h: TEST FIXTURE for packetdrill-style
// tests of the TCP state machine (tests/unit/mars/tcp/tcp_*_test.cc and
// sim/conformance_test.cc): a RawPeer (one stack, the peer played with
// crafted frames) and helpers to open connections and look at them.
#pragma once

#include "malformed.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace mars::sim {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kSec = 1'000'000'000;
using Conn = RawPeer::Conn;

inline std::vector<uint8_t> bytes(size_t n, uint8_t seed = 1)
{
    std::vector<uint8_t> v(n);
    pattern_fill(seed, 0, v.data(), n);
    return v;
}

class Tcp : public ::testing::Test {
  protected:
    void SetUp() override { make(RawPeer::Options{}); }
    void make(const RawPeer::Options &o) { peer = std::make_unique<RawPeer>(o); }
    RawPeer &p() { return *peer; }
    Stack &st() { return peer->stack(); }

    TcpState state(SockId s)
    {
        SockInfo in{};
        EXPECT_EQ(st().info(s, &in), 0);
        return in.state;
    }
    // The state of c's connection as the stack's table has it (also after the
    // application closed it and its id is gone); kClosed when not there.
    TcpState conn_state(const Conn &c)
    {
        struct Find {
            const Conn *c;
            TcpState st = TcpState::kClosed;
        } find{&c};
        st().for_each_socket(
            [](SockId, const SockInfo &in, uint64_t, void *arg) {
                auto *f = static_cast<Find *>(arg);
                if (in.remote.port == f->c->peer_port && in.local.port == f->c->stack_port) f->st = in.state;
            },
            &find);
        return find.st;
    }
    SockInfo info(SockId s)
    {
        SockInfo in{};
        EXPECT_EQ(st().info(s, &in), 0);
        return in;
    }
    // A passive connection with every option.
    SockId passive(Conn *c, uint16_t peer_port = 40000, TcpOptions opts = RawPeer::full_syn_options(0))
    {
        if (listener == kNoSock) listener = p().listen(80);
        std::string why;
        SockId s = p().open_passive(listener, 80, peer_port, c, opts, &why);
        EXPECT_NE(s, kNoSock) << why;
        return s;
    }
    SockId active(Conn *c, uint16_t peer_port = 9000, TcpOptions opts = RawPeer::full_syn_options(0))
    {
        std::string why;
        SockId s = p().open_active(peer_port, c, opts, &why);
        EXPECT_NE(s, kNoSock) << why;
        return s;
    }
    std::vector<uint8_t> read_all(SockId s)
    {
        std::vector<uint8_t> v(1 << 20);
        int64_t n = st().recv(s, v.data(), v.size());
        v.resize(n > 0 ? size_t(n) : 0);
        return v;
    }
    // Payload bytes in segments, concatenated.
    static size_t payload_of(const std::vector<Parsed> &segs)
    {
        size_t n = 0;
        for (auto &s : segs) n += s.payload.size();
        return n;
    }

    std::unique_ptr<RawPeer> peer;
    SockId listener = kNoSock;
};

} // namespace mars::sim
