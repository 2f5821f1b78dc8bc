// Every class of malformed frame is dropped and counted, changes nothing, and
// never crashes or reads outside the frame. Each frame is fed in a heap block
// of exactly its own size, so under AddressSanitizer
// (tools/eta test --suite unit --sanitize asan) any read past its end fails.
#include "malformed.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

namespace mars::sim {
namespace {

using Conn = RawPeer::Conn;

struct Fixture {
    RawPeer peer;
    SockId listener = kNoSock, sock = kNoSock;
    Conn conn;
    std::string why;
    Fixture()
    {
        listener = peer.listen(80);
        sock = peer.open_passive(listener, 80, 40000, &conn, RawPeer::full_syn_options(0), &why);
        peer.take();
    }
    TcpSpec data_segment() const { return peer.seg(conn, kAck | kPsh, std::vector<uint8_t>(100, 0x5a)); }
    TcpSpec syn_segment() const
    {
        Conn c;
        c.peer_port = 40999;
        c.stack_port = 80;
        c.peer_nxt = 424242;
        TcpSpec s = peer.seg(c, kSyn);
        s.opts = RawPeer::full_syn_options(99);
        return s;
    }
};

std::vector<MalformedCase> all_cases()
{
    Fixture f;
    return malformed_cases(f.data_segment(), f.syn_segment());
}

class Malformed : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(Malformed, DroppedCountedAndHarmless)
{
    const MalformedCase &mc = GetParam();
    Fixture f;
    ASSERT_NE(f.sock, kNoSock) << f.why;
    const StackStats before = f.peer.stack().stats();
    f.peer.inject(mc.frame);
    const StackStats &after = f.peer.stack().stats();
    EXPECT_EQ(total_drops(after), total_drops(before) + 1) << "exactly one drop counted";
    if (mc.counter) {
        EXPECT_EQ(after.*mc.counter, before.*mc.counter + 1) << "counted in the wrong place";
    }
    EXPECT_EQ(after.rx_frames, before.rx_frames + 1);
    SockInfo in{};
    ASSERT_EQ(f.peer.stack().info(f.sock, &in), 0);
    EXPECT_EQ(in.state, TcpState::kEstablished);
    EXPECT_EQ(in.rx_readable, 0u) << "payload of a malformed frame was delivered";
    EXPECT_EQ(f.peer.stack().accept(f.listener, 1), -EAGAIN);
    for (auto &o : f.peer.take()) {
        EXPECT_FALSE(o.is_tcp && o.has(kRst)) << "answered a malformed frame with " << o.describe();
        EXPECT_FALSE(o.is_tcp && o.has(kSyn)) << "answered a malformed frame with " << o.describe();
    }
    EXPECT_EQ(f.peer.stack().stats().conns_open, 2u);
    // The connection still works, and the frame went back to its pool.
    f.peer.send(f.conn, kAck | kPsh, std::vector<uint8_t>(10, 1));
    ASSERT_EQ(f.peer.stack().info(f.sock, &in), 0);
    EXPECT_EQ(in.rx_readable, 10u);
    EXPECT_EQ(f.peer.pool().in_use(), 0u);
    EXPECT_EQ(f.peer.pool().bad_releases(), 0u);
}

INSTANTIATE_TEST_SUITE_P(EveryClass, Malformed, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<MalformedCase> &i) { return i.param.name; });

// Every prefix of a valid frame (all truncations) and every single-bit flip
// of it: never a crash, never delivered unless intact, every frame returned.
TEST(MalformedSweep, EveryTruncationAndBitFlip)
{
    Fixture f;
    ASSERT_NE(f.sock, kNoSock) << f.why;
    const std::vector<uint8_t> good = build_tcp(f.data_segment());
    for (size_t n = 0; n < good.size(); n++) {
        f.peer.inject(std::vector<uint8_t>(good.begin(), good.begin() + long(n)));
    }
    SockInfo in{};
    ASSERT_EQ(f.peer.stack().info(f.sock, &in), 0);
    EXPECT_EQ(in.rx_readable, 0u) << "a truncated segment delivered data";
    for (size_t bit = 0; bit < good.size() * 8; bit++) {
        auto g = good;
        g[bit / 8] ^= uint8_t(1u << (bit % 8));
        f.peer.inject(g);
    }
    ASSERT_EQ(f.peer.stack().info(f.sock, &in), 0);
    // Flips in the Ethernet source address are not errors the stack can see
    // (no FCS here); such a frame is the valid segment and delivers once.
    EXPECT_LE(in.rx_readable, 100u);
    if (in.rx_readable) {
        std::vector<uint8_t> got(in.rx_readable);
        f.peer.stack().recv(f.sock, got.data(), got.size());
        EXPECT_EQ(got, std::vector<uint8_t>(100, 0x5a));
    }
    EXPECT_EQ(f.peer.pool().in_use(), f.peer.stack().stats().ooo_frames_used);
    EXPECT_EQ(f.peer.pool().bad_releases(), 0u);
}

} // namespace
} // namespace mars::sim
