// The dmadev copy engine (ppe/src/dma_copy.h) on a real DPDK dmadev: the
// dma_skeleton vdev (a software device whose copies a thread makes), EAL
// without hugepages, no root. The engine contract (ordered completions with
// their markers, byte-exact copies into memory DPDK does not know, a full
// ring refused with its reason), a missing device named with what DPDK
// found, and MARS on the simulated wire receiving through the device.
#include "dma_copy.h"

#include "sim_wire.h"
#include "transfer_app.h"

#include <rte_eal.h>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kSec = 1'000'000'000;

std::unique_ptr<ppe::DmaCopyEngine> g_dma;

class EalEnv : public ::testing::Environment {
  public:
    void SetUp() override
    {
        prefix_ = "dma-copy-test-" + std::to_string(getpid());
        std::vector<std::string> args = {"dma_copy_test", "--no-huge", "--no-shconf", "--no-pci", "--no-telemetry",
                                         "-m", "64", "--log-level=*:error", "--file-prefix", prefix_, "-l", "0",
                                         "--vdev", "dma_skeleton"};
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        ASSERT_GE(rte_eal_init(int(argv.size()), argv.data()), 0) << "EAL could not start with dma_skeleton";
        std::string err;
        g_dma = ppe::DmaCopyEngine::open("dma_skeleton", 64, &err);
        ASSERT_NE(g_dma, nullptr) << err;
    }
    void TearDown() override
    {
        g_dma.reset();
        rte_eal_cleanup();
        std::error_code ec;
        std::filesystem::remove_all("/var/run/dpdk/" + prefix_, ec);
    }

  private:
    std::string prefix_;
};

// Polls until n completions came back or 10 s passed (the device is a thread
// that may be descheduled on a busy machine).
std::vector<mars::CopyCompletion> drain(mars::CopyEngine &e, size_t n)
{
    std::vector<mars::CopyCompletion> got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    mars::CopyCompletion c[16];
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
        const uint16_t k = e.poll(c, 16);
        got.insert(got.end(), c, c + k);
    }
    return got;
}

// Memory the way an application's DTI region is made: a shared memfd
// mapping, unknown to DPDK.
struct Region {
    size_t size;
    uint8_t *p;
    explicit Region(size_t n) : size(n)
    {
        const int fd = memfd_create("dma-copy-test", MFD_CLOEXEC);
        EXPECT_GE(fd, 0);
        EXPECT_EQ(ftruncate(fd, off_t(n)), 0);
        p = static_cast<uint8_t *>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        close(fd);
        EXPECT_NE(p, MAP_FAILED);
    }
    ~Region() { munmap(p, size); }
};

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
    using namespace mars::sim;
    SimNetConfig cfg = default_simnet_config();
    for (LinkParams *l : {&cfg.a_to_b, &cfg.b_to_a}) {
        l->delay_ns = 50'000;
        l->rate_bps = 1'000'000'000;
        l->queue_frames = 0;
        l->loss = 0.005;
        l->reorder = 0.01;
    }
    cfg.b.stack.copy_engine = g_dma.get();
    cfg.b.stack.copy_threshold = 256;
    cfg.b.stack.copy_drain_polls = 1u << 26; // as eta-ppe: the device is a thread on a busy machine
    cfg.b.stack.strands = 8;
    cfg.b.stack.prefetch = true;
    SimNet net(cfg);
    TransferApp::Options o;
    o.conns = 4;
    o.bytes_a_to_b = o.bytes_b_to_a = 2 << 20;
    TransferApp app(net, o);
    ASSERT_TRUE(app.start()) << app.failure();
    ASSERT_TRUE(net.run_until([&] { return app.done(); }, 600 * kSec)) << net.stall_report() << app.progress();
    ASSERT_EQ(app.failure(), "") << app.progress();
    for (auto &c : app.conns())
        for (auto &end : c.end) EXPECT_EQ(end.received, end.expect);
    const mars::StackStats &st = net.stack(1).stats();
    EXPECT_GT(st.copies_offloaded, 1000u);
    EXPECT_GE(st.copy_bytes_offloaded, 256u * st.copies_offloaded);
    EXPECT_EQ(st.copy_fallback_error, 0u);
    EXPECT_EQ(st.copy_fallback_device_gone, 0u);
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
    using namespace mars::sim;
    SimNetConfig cfg = default_simnet_config();
    for (LinkParams *l : {&cfg.a_to_b, &cfg.b_to_a}) {
        l->delay_ns = 50'000;
        l->rate_bps = 1'000'000'000;
        l->queue_frames = 0;
        l->loss = 0.005;
        l->reorder = 0.01;
    }
    cfg.b.stack.copy_engine = g_dma.get();
    cfg.b.stack.copy_threshold = 256;
    cfg.b.stack.copy_drain_polls = 1;
    SimNet net(cfg);
    TransferApp::Options o;
    o.conns = 4;
    o.bytes_a_to_b = o.bytes_b_to_a = 2 << 20;
    TransferApp app(net, o);
    ASSERT_TRUE(app.start()) << app.failure();
    ASSERT_TRUE(net.run_until([&] { return app.done(); }, 600 * kSec)) << net.stall_report() << app.progress();
    ASSERT_EQ(app.failure(), "") << app.progress();
    for (auto &c : app.conns())
        for (auto &end : c.end) EXPECT_EQ(end.received, end.expect);
    const mars::StackStats &st = net.stack(1).stats();
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
    ::testing::AddGlobalTestEnvironment(new EalEnv);
    return RUN_ALL_TESTS();
}
