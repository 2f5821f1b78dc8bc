// ppe::Mailbox (ppe/src/engine.h): the single-producer single-consumer
// mailbox between eta-ppe's control thread and an engine's loop (accepted
// control connections go in, the loop takes them out). Bounded; a full
// mailbox refuses instead of overwriting, and nothing is lost or reordered
// between two threads. Header only: no DPDK at run time, no root.
#include "engine.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

namespace {

void *as_ptr(uintptr_t v) { return reinterpret_cast<void *>(v); }

TEST(Mailbox, RefusesWhenFullAndKeepsOrder)
{
    ppe::Mailbox<4> box;
    EXPECT_TRUE(box.empty());
    EXPECT_EQ(box.pop(), nullptr);
    for (uintptr_t i = 1; i <= 4; i++) EXPECT_TRUE(box.push(as_ptr(i))) << i;
    EXPECT_FALSE(box.push(as_ptr(5))) << "a full mailbox must refuse, not overwrite";
    EXPECT_FALSE(box.empty());
    EXPECT_EQ(box.pop(), as_ptr(1));
    EXPECT_TRUE(box.push(as_ptr(5))) << "room again after one pop";
    for (uintptr_t i = 2; i <= 5; i++) EXPECT_EQ(box.pop(), as_ptr(i));
    EXPECT_EQ(box.pop(), nullptr);
    EXPECT_TRUE(box.empty());
}

TEST(Mailbox, TwoThreadsLoseAndReorderNothing)
{
    // Small capacity, many messages: the producer keeps meeting a full box
    // and retries (as offer_connection's caller does), across index wraps.
    ppe::Mailbox<16> box;
    constexpr uintptr_t kCount = 5000; // ~300 laps of the index
    std::thread producer([&] {
        for (uintptr_t i = 1; i <= kCount; i++)
            while (!box.push(as_ptr(i))) std::this_thread::yield();
    });
    uintptr_t expected = 1;
    bool in_order = true;
    while (expected <= kCount) {
        void *p = box.pop();
        if (!p) {
            std::this_thread::yield();
            continue;
        }
        in_order &= p == as_ptr(expected);
        expected++;
    }
    producer.join();
    EXPECT_TRUE(in_order) << "messages came out of order or changed";
    EXPECT_TRUE(box.empty());
}

} // namespace
