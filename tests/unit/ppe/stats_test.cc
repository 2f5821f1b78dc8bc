// The stats region's seqlock: a reader never sees a torn snapshot while an
// engine keeps publishing, and the layout places every block inside the
// region without overlap.
#include "stats.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace {

using ppe::stats::EngineCounters;
using ppe::stats::Published;

TEST(PpeStats, ReaderNeverSeesATornSnapshot)
{
    auto block = std::make_unique<Published<EngineCounters>>();
    block->seq.store(0);
    std::atomic<bool> done{false};
    std::atomic<uint64_t> reads_seen{0}, written{0};
    std::thread writer([&] {
        EngineCounters c{};
        // At least 200,000 writes, and on until the reader has taken 100
        // snapshots (bounded): on a loaded machine the writer could otherwise
        // finish before the reader's first whole read.
        uint64_t i = 1;
        for (; i <= 200'000 || (reads_seen.load(std::memory_order_relaxed) < 100 && i <= 50'000'000); i++) {
            // Every field carries the same value: a mix means a torn read.
            c.loops = c.busy_polls = c.idle_polls = c.sleeps = c.rx_packets = c.tx_packets = c.wakeups = i;
            block->write(c);
        }
        written.store(i - 1);
        done.store(true);
    });
    uint64_t reads = 0, last = 0;
    while (!done.load()) {
        EngineCounters got{};
        if (!block->read(&got)) continue;
        reads_seen.store(++reads, std::memory_order_relaxed);
        ASSERT_EQ(got.loops, got.busy_polls);
        ASSERT_EQ(got.loops, got.idle_polls);
        ASSERT_EQ(got.loops, got.sleeps);
        ASSERT_EQ(got.loops, got.rx_packets);
        ASSERT_EQ(got.loops, got.tx_packets);
        ASSERT_EQ(got.loops, got.wakeups);
        ASSERT_GE(got.loops, last); // snapshots never go back in time
        last = got.loops;
    }
    writer.join();
    EngineCounters final{};
    ASSERT_TRUE(block->read(&final));
    EXPECT_EQ(final.loops, written.load());
    EXPECT_GE(final.loops, 200'000u);
    EXPECT_GT(reads, 0u);
}

TEST(PpeStats, APatientReaderOutwaitsAWriterStoppedMidCopy)
{
    // A writer descheduled between its two stores of `seq` (a busy machine)
    // leaves it odd for as long as it is off its CPU: a spinning read gives
    // up (its bound is a count, not a time), read_patiently waits it out.
    auto block = std::make_unique<Published<EngineCounters>>();
    block->seq.store(0);
    EngineCounters c{};
    c.loops = 7;
    block->write(c);
    block->seq.fetch_add(1); // the writer stops mid-copy
    EngineCounters got{};
    EXPECT_FALSE(block->read(&got));
    std::atomic<int> tries{0};
    std::atomic<bool> gave_up{false};
    std::thread resume([&] { // the writer runs again once the reader has waited a while
        while (tries.load() < 3 && !gave_up.load()) std::this_thread::yield();
        block->seq.fetch_add(1);
    });
    const bool read = ppe::stats::read_patiently([&] {
        tries++;
        return block->read(&got);
    });
    gave_up.store(true);
    resume.join();
    ASSERT_TRUE(read);
    EXPECT_EQ(got.loops, 7u);
}

TEST(PpeStats, LayoutBlocksDoNotOverlap)
{
    const auto l = ppe::stats::Layout::compute(2, 3, 64, 1000);
    EXPECT_GE(l.engines_off, sizeof(ppe::stats::Header));
    EXPECT_GE(l.stacks_off, l.engines_off + 2 * sizeof(Published<EngineCounters>));
    EXPECT_GE(l.ports_off, l.stacks_off + 6 * sizeof(Published<ppe::stats::StackCounters>));
    EXPECT_GE(l.apps_off, l.ports_off + 3 * sizeof(Published<ppe::stats::PortInfo>));
    EXPECT_GE(l.conns_off, l.apps_off + 64 * sizeof(Published<ppe::stats::AppCounters>));
    EXPECT_GE(l.conn_stride, 64 + sizeof(ppe::stats::ConnTableHeader) + 1000 * sizeof(ppe::stats::ConnEntry));
    EXPECT_EQ(l.latency_off, ppe::stats::Layout::align(l.conns_off + 2 * l.conn_stride));
    EXPECT_EQ(l.size, ppe::stats::Layout::align(l.latency_off + 2 * sizeof(ppe::stats::Latency)));
    EXPECT_EQ(l.engines_off % 4096, 0u);

    // The typed view finds each block where the layout put it.
    std::vector<uint8_t> region(l.size);
    ppe::stats::View v{region.data()};
    auto *h = v.header();
    h->n_ports = 3;
    h->engines_off = l.engines_off;
    h->stacks_off = l.stacks_off;
    h->ports_off = l.ports_off;
    h->apps_off = l.apps_off;
    h->conns_off = l.conns_off;
    h->conn_stride = l.conn_stride;
    EXPECT_EQ(reinterpret_cast<uint8_t *>(v.stack(1, 2)),
              region.data() + l.stacks_off + 5 * sizeof(Published<ppe::stats::StackCounters>));
    EXPECT_EQ(reinterpret_cast<uint8_t *>(v.conns(1)) + 1000 * sizeof(ppe::stats::ConnEntry),
              region.data() + l.conns_off + l.conn_stride + 64 + sizeof(ppe::stats::ConnTableHeader) +
                  1000 * sizeof(ppe::stats::ConnEntry));
    EXPECT_LE(reinterpret_cast<uint8_t *>(v.conns(1)) + 1000 * sizeof(ppe::stats::ConnEntry), region.data() + l.size);
}

} // namespace
