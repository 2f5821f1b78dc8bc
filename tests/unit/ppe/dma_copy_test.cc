// The dmadev copy engine (ppe/src/dma_copy.h) on a real DPDK dmadev: the
// dma_skeleton vdev (a software device whose copies a thread makes), EAL
// without hugepages, no root. The engine contract (ordered completions with
// their markers, byte-exact copies into memory DPDK does not know, a full
// ring refused with its reason), a missing device named with what DPDK
// found, and MARS on the simulated wire receiving through the device.
#include "dma_fixture.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace ppe::dma_test;

TEST(DmaCopyEngine, CopiesIntoAMemfdRegionAndCompletesInOrder)
{
    ppe::DmaCopyEngine &e = *g_dma;
    EXPECT_STREQ(e.name(), "dmadev:dma_skeleton");
    Region dst(1 << 20);
    std::vector<uint8_t> src(1 << 20);
    for (size_t i = 0; i < src.size(); i++) src[i] = uint8_t(i * 7 + i / 251);
    // 40 copies of different lengths (1 byte to 9000) at different offsets.
    size_t off = 0;
    std::vector<std::pair<size_t, uint32_t>> copies;
    for (uint32_t k = 0; k < 40; k++) {
        const uint32_t len = k == 0 ? 1 : 1 + (k * 2311) % 9000;
        mars::CopyFallback why;
        ASSERT_TRUE(e.submit(dst.p + off, src.data() + off, len, 1000 + k, &why)) << "copy " << k;
        copies.emplace_back(off, len);
        off += len + 13;
    }
    EXPECT_EQ(e.outstanding(), 40u);
    e.doorbell();
    std::vector<mars::CopyCompletion> got = drain(e, 40);
    ASSERT_EQ(got.size(), 40u) << "the device did not complete every copy within 10 s";
    for (uint32_t k = 0; k < 40; k++) {
        EXPECT_EQ(got[k].marker, 1000u + k) << "completions come back in submission order";
        EXPECT_TRUE(got[k].ok);
        EXPECT_EQ(std::memcmp(dst.p + copies[k].first, src.data() + copies[k].first, copies[k].second), 0)
            << "copy " << k << " is not byte-exact";
    }
    EXPECT_EQ(e.outstanding(), 0u);
    mars::CopyCompletion c[4];
    EXPECT_EQ(e.poll(c, 4), 0u);
}

TEST(DmaCopyEngine, FullRingIsRefusedWithItsReasonAndFreesAgain)
{
    ppe::DmaCopyEngine &e = *g_dma;
    std::vector<uint8_t> src(64, 5), dst(64);
    mars::CopyFallback why = mars::CopyFallback::kError;
    uint32_t taken = 0;
    // Nothing is rung, so nothing completes: the ring fills.
    while (taken < 10'000 && e.submit(dst.data(), src.data(), 64, taken, &why)) taken++;
    EXPECT_EQ(why, mars::CopyFallback::kRingFull);
    EXPECT_GE(taken, 32u);
    EXPECT_LE(taken, e.ring_size()) << "never more in flight than the ring holds";
    e.doorbell();
    std::vector<mars::CopyCompletion> got = drain(e, taken);
    ASSERT_EQ(got.size(), taken);
    EXPECT_EQ(got.back().marker, taken - 1);
    EXPECT_TRUE(e.submit(dst.data(), src.data(), 64, 7, &why)) << "room again once completions were taken";
    e.doorbell();
    ASSERT_EQ(drain(e, 1).size(), 1u);
}

TEST(DmaCopyEngine, MissingDeviceNamesWhatDpdkFound)
{
    std::string err;
    EXPECT_EQ(ppe::DmaCopyEngine::open("wq9.9", 64, &err), nullptr);
    EXPECT_NE(err.find("no DMA device \"wq9.9\""), std::string::npos) << err;
    EXPECT_NE(err.find("DPDK found: dma_skeleton (mem2mem+sva+copy)"), std::string::npos) << err;
    EXPECT_NE(err.find("engine = \"cpu\""), std::string::npos) << err;
}

// MARS end to end on the simulated wire: host b receives through the
// device (a's stack has no engine: dma_skeleton has one instance), with
// loss and reordering so the slow path drains copies in flight too.
TEST(DmaCopyEngine, StackReceivesThroughTheDeviceByteExact)
{
    // copy_drain_polls as eta-ppe's; the device is a thread that a busy
    // machine can deschedule for longer than any count of polls: Patient
    // waits for its completions instead (no stall is injected here).
    Patient device(g_dma.get());
    mars::sim::SimNetConfig cfg = lossy_wire_receiving_through(&device, 1u << 26);
    cfg.b.stack.strands = 8;
    cfg.b.stack.prefetch = true;
    DeviceTransfer t(cfg);
    ASSERT_NO_FATAL_FAILURE(t.run_byte_exact());
    const mars::StackStats &st = t.net.stack(1).stats();
    EXPECT_GT(st.copies_offloaded, 1000u);
    EXPECT_GE(st.copy_bytes_offloaded, 256u * st.copies_offloaded);
    EXPECT_EQ(st.copy_fallback_error, 0u);
    EXPECT_EQ(st.copy_fallback_device_gone, 0u);
    EXPECT_EQ(st.copy_fallback_stalled, 0u) << "a wait for the device gave up though it never stalled";
    EXPECT_FALSE(device.gave_up()) << "the device completed nothing for " << Patient::kPatience.count() << " s";
    std::printf("through dma_skeleton: %llu copies, %llu bytes; core: ring full %llu, stalled %llu, "
                "below threshold %llu, ring wrap %llu\n",
                (unsigned long long)st.copies_offloaded, (unsigned long long)st.copy_bytes_offloaded,
                (unsigned long long)st.copy_fallback_ring_full, (unsigned long long)st.copy_fallback_stalled,
                (unsigned long long)st.copy_fallback_below_threshold, (unsigned long long)st.copy_fallback_ring_wrap);
}

// Last (it stops the shared device): a stack that will not wait for the
// device (copy_drain_polls = 1: the first wait that finds no completion gives
// up) abandons it mid-transfer. The core redoes the copies in flight, the
// device is stopped so none of them lands later, every later payload is the
// core's, and every byte still arrives exactly once, in order.
TEST(DmaCopyEngineZ, StackAbandonsAStalledDeviceAndStaysByteExact)
{
    DeviceTransfer t(lossy_wire_receiving_through(g_dma.get(), 1));
    ASSERT_NO_FATAL_FAILURE(t.run_byte_exact());
    const mars::StackStats &st = t.net.stack(1).stats();
    EXPECT_GT(st.copy_fallback_stalled, 0u) << "no wait gave up: the test did not exercise the stall";
    EXPECT_TRUE(g_dma->abandoned());
    EXPECT_GT(st.copy_fallback_device_gone, 0u) << "payloads after the stall went to the core, counted";
    EXPECT_EQ(g_dma->outstanding(), 0u);
    mars::CopyCompletion c[4];
    EXPECT_EQ(g_dma->poll(c, 4), 0u);
    std::vector<uint8_t> src(64, 1), dst(64);
    mars::CopyFallback why;
    EXPECT_FALSE(g_dma->submit(dst.data(), src.data(), 64, 1, &why));
    EXPECT_EQ(why, mars::CopyFallback::kDeviceGone);
    std::printf("stalled device: %llu copies before, %llu redone by the core, %llu refused after\n",
                (unsigned long long)st.copies_offloaded, (unsigned long long)st.copy_fallback_stalled,
                (unsigned long long)st.copy_fallback_device_gone);
}

} // namespace

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    ::testing::AddGlobalTestEnvironment(new ppe::dma_test::DmaSkeletonEnv("dma-copy-test", 64));
    return RUN_ALL_TESTS();
}
