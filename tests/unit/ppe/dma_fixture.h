// tests/unit/ppe/dma_fixture.h: TEST FIXTURE shared by the dmadev copy
// engine's tests (dma_copy_test.cc, dma_fault_test.cc): EAL with DPDK's
// dma_skeleton vdev and the engine on it, memory the way a DTI region is
// made, draining completions, and MARS on a lossy simulated wire receiving
// through the device.
#pragma once

#include "dma_copy.h"

#include "sim_wire.h"
#include "transfer_app.h"

#include <rte_eal.h>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <memory>
#include <string>
#include <vector>

namespace ppe::dma_test {

constexpr uint64_t kSec = 1'000'000'000;

// The engine on dma_skeleton, for the whole test program (the vdev has one
// instance per process).
inline std::unique_ptr<ppe::DmaCopyEngine> g_dma;

// Starts EAL (no hugepages, no PCI, its own file prefix) with dma_skeleton
// and opens g_dma on it with `ring` descriptors.
class DmaSkeletonEnv : public ::testing::Environment {
  public:
    // name: the program's name, and with the pid its EAL file prefix;
    // extra_args go to EAL after the common ones (more log levels).
    DmaSkeletonEnv(std::string name, uint32_t ring, std::vector<std::string> extra_args = {})
        : name_(std::move(name)), ring_(ring), extra_args_(std::move(extra_args))
    {
    }
    void SetUp() override
    {
        prefix_ = name_ + "-" + std::to_string(getpid());
        std::vector<std::string> args = {name_, "--no-huge", "--no-shconf", "--no-pci", "--no-telemetry",
                                         "-m", "64", "--log-level=*:error"};
        args.insert(args.end(), extra_args_.begin(), extra_args_.end());
        args.insert(args.end(), {"--file-prefix", prefix_, "-l", "0", "--vdev", "dma_skeleton"});
        std::vector<char *> argv;
        for (auto &a : args) argv.push_back(a.data());
        ASSERT_GE(rte_eal_init(int(argv.size()), argv.data()), 0) << "EAL could not start with dma_skeleton";
        std::string err;
        g_dma = ppe::DmaCopyEngine::open("dma_skeleton", ring_, &err);
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
    std::string name_, prefix_;
    uint32_t ring_;
    std::vector<std::string> extra_args_;
};

// Polls e until n completions came back or `limit` passed (the device is a
// thread that may be descheduled on a busy machine).
inline std::vector<mars::CopyCompletion> drain(mars::CopyEngine &e, size_t n,
                                               std::chrono::milliseconds limit = std::chrono::seconds(10))
{
    std::vector<mars::CopyCompletion> got;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    mars::CopyCompletion c[16];
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
        const uint16_t k = e.poll(c, 16);
        got.insert(got.end(), c, c + k);
    }
    return got;
}

// TEST FIXTURE: the device as a stack should see it when the verdict must
// not depend on scheduling. dma_skeleton's "device" is a thread; on a busy
// machine it can be descheduled for longer than any count of empty polls
// (the stack's stall detector counts polls, not time), and a test that does
// not inject a stall then sees one ("stalled 2, device gone 1350"). Patient
// forwards everything to the engine, but a second empty poll in a row (the
// stack waiting for copies: nothing submitted or rung since the last) while
// copies are in flight on a device that will complete them waits for the
// first completion (an event), bounded far above any honest delay; a single
// empty poll still answers at once, so copies stay in flight across the
// stack's other work as they would on hardware. A device
// told to stall (`stalls`: the test injected stall@N, and it has hit) is
// passed through untouched, so the stack's detector still meets a real stall.
class Patient final : public mars::CopyEngine {
  public:
    explicit Patient(ppe::DmaCopyEngine *e, bool stalls = false) : e_(e), stalls_(stalls) {}
    const char *name() const override { return e_->name(); }
    bool submit(void *dst, const void *src, uint32_t len, uint64_t marker, mars::CopyFallback *why) override
    {
        empty_ = 0;
        return e_->submit(dst, src, len, marker, why);
    }
    void doorbell() override
    {
        empty_ = 0;
        e_->doorbell();
    }
    uint16_t poll(mars::CopyCompletion *out, uint16_t max) override
    {
        uint16_t k = e_->poll(out, max);
        if (k) empty_ = 0;
        if (k || max == 0 || gave_up_ || !waits() || empty_++ == 0) return k;
        const auto deadline = std::chrono::steady_clock::now() + kPatience;
        while (!(k = e_->poll(out, max)) && waits()) {
            if (std::chrono::steady_clock::now() >= deadline) {
                gave_up_ = true; // from here on it passes through: the detector decides
                break;
            }
            std::this_thread::yield(); // the device's thread may share this core
        }
        if (k) empty_ = 0;
        return k;
    }
    uint32_t outstanding() const override { return e_->outstanding(); }
    void abandon() override { e_->abandon(); }

    // The device did not complete a copy within kPatience: a real stall
    // where none was injected. Tests that inject none expect false.
    bool gave_up() const { return gave_up_; }
    static constexpr std::chrono::seconds kPatience{60};

  private:
    // Copies in flight that the device will complete.
    bool waits() const
    {
        return e_->outstanding() > 0 && !e_->abandoned() && !e_->lost() && !(stalls_ && e_->fault_hits() > 0);
    }
    ppe::DmaCopyEngine *e_;
    bool stalls_;
    bool gave_up_ = false;
    uint32_t empty_ = 0; // empty polls in a row, nothing submitted or rung between
};

// Memory the way an application's DTI region is made: a shared memfd
// mapping, unknown to DPDK.
struct Region {
    size_t size;
    uint8_t *p;
    explicit Region(size_t n) : size(n)
    {
        const int fd = memfd_create("dma-test-region", MFD_CLOEXEC);
        EXPECT_GE(fd, 0);
        EXPECT_EQ(ftruncate(fd, off_t(n)), 0);
        p = static_cast<uint8_t *>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        close(fd);
        EXPECT_NE(p, MAP_FAILED);
    }
    ~Region() { munmap(p, size); }
};

// The simulated wire both ways: 1 Gb/s, 50 us, 0.5% loss and 1% reordering
// (so the slow path drains copies in flight too); host b receives through
// `engine` from 256 bytes on, waiting at most `drain_polls` empty polls.
inline mars::sim::SimNetConfig lossy_wire_receiving_through(mars::CopyEngine *engine, uint32_t drain_polls)
{
    mars::sim::SimNetConfig cfg = mars::sim::default_simnet_config();
    for (mars::sim::LinkParams *l : {&cfg.a_to_b, &cfg.b_to_a}) {
        l->delay_ns = 50'000;
        l->rate_bps = 1'000'000'000;
        l->queue_frames = 0;
        l->loss = 0.005;
        l->reorder = 0.01;
    }
    cfg.b.stack.copy_engine = engine;
    cfg.b.stack.copy_threshold = 256;
    cfg.b.stack.copy_drain_polls = drain_polls;
    return cfg;
}

// 4 connections moving 2 MiB each way on a SimNet built from cfg.
struct DeviceTransfer {
    mars::sim::SimNet net;
    mars::sim::TransferApp app;

    explicit DeviceTransfer(const mars::sim::SimNetConfig &cfg) : net(cfg), app(net, options()) {}

    // Runs it to its end: every byte of every stream delivered, once and in
    // order (TransferApp checks each byte). Fatal failures return early:
    // wrap in ASSERT_NO_FATAL_FAILURE where the test must stop there.
    void run_byte_exact()
    {
        ASSERT_TRUE(app.start()) << app.failure();
        ASSERT_TRUE(net.run_until([&] { return app.done(); }, 600 * kSec)) << net.stall_report() << app.progress();
        ASSERT_EQ(app.failure(), "") << app.progress(); // a byte out of place, lost or twice
        for (auto &c : app.conns())
            for (auto &end : c.end) EXPECT_EQ(end.received, end.expect);
    }

  private:
    static mars::sim::TransferApp::Options options()
    {
        mars::sim::TransferApp::Options o;
        o.conns = 4;
        o.bytes_a_to_b = o.bytes_b_to_a = 2 << 20;
        return o;
    }
};

} // namespace ppe::dma_test
