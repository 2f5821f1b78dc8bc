// The copy-engine contract (mars/copy.h) and the stack's use of it: the CPU
// engine's ordered completions and full ring; with an engine that completes
// later, received bytes become visible (and the frame goes back) only after
// the completion, in order; every failure (full ring, vanished device,
// completion with an error, a stalled device) falls back to the core with a
// counted reason and byte-exact data.
#include "copy_engines.h"
#include "frame.h"
#include "raw_peer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace mars::sim {
namespace {

TEST(CpuCopyEngine, CompletesInSubmissionOrder)
{
    CpuCopyEngine e;
    uint8_t src[3][8] = {{1}, {2}, {3}}, dst[3][8] = {};
    CopyFallback why;
    for (int i = 0; i < 3; i++) ASSERT_TRUE(e.submit(dst[i], src[i], 8, 100 + uint64_t(i), &why));
    EXPECT_EQ(e.outstanding(), 3u);
    e.doorbell();
    CopyCompletion c[4];
    ASSERT_EQ(e.poll(c, 2), 2u) << "batches of at most max";
    EXPECT_EQ(c[0].marker, 100u);
    EXPECT_EQ(c[1].marker, 101u);
    ASSERT_EQ(e.poll(c, 4), 1u);
    EXPECT_EQ(c[0].marker, 102u);
    EXPECT_TRUE(c[0].ok);
    EXPECT_EQ(e.poll(c, 4), 0u);
    for (int i = 0; i < 3; i++) EXPECT_EQ(dst[i][0], src[i][0]);
}

TEST(CpuCopyEngine, FullRingRefusesWithItsReason)
{
    CpuCopyEngine e;
    uint8_t b[4] = {};
    CopyFallback why = CopyFallback::kError;
    uint32_t taken = 0;
    while (e.submit(b, b, 4, taken, &why)) taken++;
    EXPECT_EQ(taken, 256u);
    EXPECT_EQ(why, CopyFallback::kRingFull);
    EXPECT_STREQ(to_string(why), "ring_full");
}

// A stack with a deferred engine and an established connection.
struct Fixture {
    DeferredCopyEngine engine;
    std::unique_ptr<RawPeer> peer;
    RawPeer::Conn c;

    explicit Fixture(uint32_t capacity = 64, uint32_t delay = 1, uint32_t threshold = 1) : engine(capacity, delay)
    {
        RawPeer::Options o;
        o.stack.copy_engine = &engine;
        o.stack.copy_threshold = threshold;
        peer = std::make_unique<RawPeer>(o);
        SockId l = peer->listen(80);
        std::string why;
        if (peer->open_passive(l, 80, 40000, &c, RawPeer::full_syn_options(0), &why) == kNoSock)
            throw std::runtime_error(why);
        peer->take();
        peer->take_events();
    }
    Stack &st() { return peer->stack(); }
    std::vector<uint8_t> seg(uint32_t k, size_t n)
    {
        std::vector<uint8_t> p(n);
        for (size_t i = 0; i < n; i++) p[i] = uint8_t(k * 13 + i);
        std::vector<uint8_t> f = build_tcp(peer->seg(c, kAck | kPsh, p));
        c.peer_nxt += uint32_t(n);
        want.insert(want.end(), p.begin(), p.end());
        return f;
    }
    std::vector<uint8_t> readable()
    {
        std::vector<uint8_t> got(1 << 18);
        int64_t n = st().recv(c.sock, got.data(), got.size());
        got.resize(n > 0 ? size_t(n) : 0);
        return got;
    }
    std::vector<uint8_t> want;
};

constexpr uint32_t kNicChecked = kRxIpCsumGood | kRxL4CsumGood;

TEST(StackCopyEngine, BytesVisibleOnlyAfterTheCompletion)
{
    Fixture f(64, 3);
    const size_t frames_before = f.peer->pool().in_use();
    f.peer->input_burst({f.seg(0, 500), f.seg(1, 700)}, kNicChecked);
    EXPECT_EQ(f.st().stats().copies_offloaded, 2u);
    EXPECT_EQ(f.engine.doorbells, 1u) << "one doorbell per burst";
    SockInfo in{};
    f.st().info(f.c.sock, &in);
    EXPECT_EQ(in.rx_readable, 0u) << "readable before the copy completed";
    EXPECT_FALSE(f.peer->events_of(f.c.sock) & kEvReadable);
    EXPECT_EQ(f.peer->pool().in_use(), frames_before + 2) << "frames released before their copies completed";
    for (int i = 0; i < 3; i++) f.st().poll(f.peer->now);
    f.st().info(f.c.sock, &in);
    EXPECT_EQ(in.rx_readable, 1200u);
    EXPECT_EQ(f.peer->pool().in_use(), frames_before);
    EXPECT_EQ(f.readable(), f.want);
}

TEST(StackCopyEngine, SmallPayloadWaitsBehindEarlierCopiesOfItsConnection)
{
    Fixture f(64, 2, 256);
    f.peer->input_burst({f.seg(0, 1000), f.seg(1, 10), f.seg(2, 1000)}, kNicChecked);
    EXPECT_EQ(f.st().stats().copies_offloaded, 2u) << "the 10-byte payload is under the threshold";
    EXPECT_EQ(f.st().stats().copy_fallback_below_threshold, 1u);
    SockInfo in{};
    f.st().info(f.c.sock, &in);
    EXPECT_EQ(in.rx_readable, 0u) << "the small payload overtook the copy before it";
    for (int i = 0; i < 2; i++) f.st().poll(f.peer->now);
    EXPECT_EQ(f.readable(), f.want);
}

TEST(StackCopyEngine, PayloadWrappingTheRingEndIsCopiedByTheCoreAndCounted)
{
    Fixture f;
    std::vector<uint8_t> got;
    // 1000-byte segments over a 256 KiB ring: some straddle its end.
    for (uint32_t k = 0; k < 300; k++) {
        f.peer->input_burst({f.seg(k, 1000)}, kNicChecked);
        f.st().poll(f.peer->now);
        std::vector<uint8_t> r = f.readable();
        got.insert(got.end(), r.begin(), r.end());
    }
    const StackStats &s = f.st().stats();
    EXPECT_EQ(s.copy_fallback_ring_wrap, 1u) << "300,000 bytes cross the 262,144-byte ring's end once";
    EXPECT_EQ(s.copies_offloaded + s.copy_fallback_ring_wrap, 300u);
    EXPECT_EQ(got, f.want);
}

TEST(StackCopyEngine, FullRingFallsBackToTheCoreInOrder)
{
    Fixture f(1, 1);
    f.peer->input_burst({f.seg(0, 300), f.seg(1, 300), f.seg(2, 300)}, kNicChecked);
    const StackStats &s = f.st().stats();
    EXPECT_EQ(s.copies_offloaded, 1u);
    EXPECT_EQ(s.copy_fallback_ring_full, 2u);
    f.st().poll(f.peer->now);
    EXPECT_EQ(f.readable(), f.want);
}

TEST(StackCopyEngine, VanishedDeviceFallsBackToTheCore)
{
    Fixture f;
    f.engine.gone = true;
    f.peer->input_burst({f.seg(0, 300), f.seg(1, 400)}, kNicChecked);
    EXPECT_EQ(f.st().stats().copy_fallback_device_gone, 2u);
    EXPECT_EQ(f.st().stats().copies_offloaded, 0u);
    EXPECT_EQ(f.readable(), f.want) << "core copies of a device-less engine are visible at once";
}

TEST(StackCopyEngine, CopiesInFlightWhenTheDeviceVanishesAreRedoneByTheCore)
{
    Fixture f(64, 3);
    const size_t frames_before = f.peer->pool().in_use();
    f.peer->input_burst({f.seg(0, 300), f.seg(1, 400), f.seg(2, 500)}, kNicChecked);
    EXPECT_EQ(f.st().stats().copies_offloaded, 3u);
    f.engine.vanish(); // garbage where the copies were going, no completion
    f.st().poll(f.peer->now);
    const StackStats &s = f.st().stats();
    EXPECT_EQ(s.copy_fallback_device_gone, 3u) << "copies in flight are counted as the device's loss";
    EXPECT_EQ(s.copy_fallback_error, 0u);
    EXPECT_EQ(f.peer->pool().in_use(), frames_before) << "each frame released once its bytes were redone";
    EXPECT_EQ(f.peer->pool().bad_releases(), 0u);
    f.peer->input_burst({f.seg(3, 600)}, kNicChecked);
    EXPECT_EQ(s.copy_fallback_device_gone, 4u) << "later payloads are the core's";
    EXPECT_EQ(f.readable(), f.want);
}

TEST(StackCopyEngine, CompletionWithErrorIsRedoneByTheCore)
{
    Fixture f;
    f.engine.fail_every = 2; // the engine writes garbage and says so
    std::vector<std::vector<uint8_t>> burst;
    for (uint32_t k = 0; k < 6; k++) burst.push_back(f.seg(k, 200 + k));
    f.peer->input_burst(burst, kNicChecked);
    f.st().poll(f.peer->now);
    EXPECT_EQ(f.st().stats().copy_fallback_error, 3u);
    EXPECT_EQ(f.readable(), f.want);
}

TEST(StackCopyEngine, StalledDeviceIsTakenOverWhenTheStackMustDrain)
{
    Fixture f;
    f.engine.stalled = true;
    f.peer->input_burst({f.seg(0, 300), f.seg(1, 300)}, kNicChecked);
    for (int i = 0; i < 5; i++) f.st().poll(f.peer->now);
    SockInfo in{};
    f.st().info(f.c.sock, &in);
    EXPECT_EQ(in.rx_readable, 0u) << "nothing completed yet";
    // An out-of-order segment takes the full path, which must see every
    // byte in the ring first: the core takes over the stalled copies.
    RawPeer::Conn ahead = f.c;
    ahead.peer_nxt += 1000;
    f.peer->input_burst({build_tcp(f.peer->seg(ahead, kAck, std::vector<uint8_t>(10, 1)))}, kNicChecked);
    EXPECT_EQ(f.st().stats().copy_fallback_stalled, 2u);
    EXPECT_EQ(f.engine.abandoned, 1u) << "the engine must be stopped before the core reuses its frames and ring";
    EXPECT_EQ(f.engine.outstanding(), 0u);
    EXPECT_EQ(f.readable(), f.want);
    // Nothing comes after all; later payloads are the core's.
    f.engine.stalled = false;
    f.st().poll(f.peer->now);
    EXPECT_EQ(f.readable(), std::vector<uint8_t>{});
    f.peer->input_burst({f.seg(2, 300)}, kNicChecked);
    EXPECT_EQ(f.engine.submitted, 2u) << "nothing more went to the abandoned engine";
    EXPECT_EQ(f.readable(), std::vector<uint8_t>(f.want.end() - 300, f.want.end()));
}

TEST(StackCopyEngine, SwitchingEnginesLandsCopiesInFlight)
{
    Fixture f(64, 1000);
    f.peer->input_burst({f.seg(0, 300)}, kNicChecked);
    EXPECT_EQ(f.engine.outstanding(), 1u);
    CpuCopyEngine cpu;
    f.st().set_copy_engine(&cpu, 1);
    EXPECT_EQ(f.engine.outstanding(), 0u) << "the old engine's copy landed before the switch";
    SockInfo in{};
    f.st().info(f.c.sock, &in);
    EXPECT_EQ(in.rx_readable, 300u);
    f.peer->input_burst({f.seg(1, 300)}, kNicChecked);
    f.st().set_copy_engine(nullptr, 0);
    f.peer->input_burst({f.seg(2, 300)}, kNicChecked);
    EXPECT_EQ(f.readable(), f.want);
}

TEST(StackCopyEngine, CloseAndDestroyWaitForCopies)
{
    Fixture f(64, 1000);
    f.peer->input_burst({f.seg(0, 300)}, kNicChecked);
    EXPECT_EQ(f.engine.outstanding(), 1u);
    f.peer->destroy_stack();
    EXPECT_EQ(f.peer->pool().in_use(), 0u) << "frames held by copies in flight were not given back";
}

} // namespace
} // namespace mars::sim
