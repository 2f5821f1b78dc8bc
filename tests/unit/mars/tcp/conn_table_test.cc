// Tests of the connection table (tcp/conn_table.h): blocks are made in index
// order as first used, freed ones come back last-in first-out with their
// generation, the capacity is a hard limit, reset() starts over, and
// reserving a large table touches none of its memory (the engine's start).
#include "tcp/conn_table.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <unistd.h>

namespace mars {
namespace tcp {
namespace {

TEST(ConnTable, MakesBlocksInIndexOrderAsFirstUsed)
{
    ConnTable t;
    ASSERT_TRUE(t.init(8));
    EXPECT_EQ(t.made(), 0u);
    EXPECT_EQ(t.capacity(), 8u);
    for (uint32_t i = 0; i < 3; i++) {
        Conn *c = t.alloc(0);
        ASSERT_NE(c, nullptr);
        EXPECT_EQ(c->index, i);
        EXPECT_EQ(c->gen, 1u);
        EXPECT_EQ(c, &t[i]);
    }
    EXPECT_EQ(t.made(), 3u);
    EXPECT_EQ(t.end() - t.begin(), 3);
}

TEST(ConnTable, ReusesFreedBlocksLastInFirstOutKeepingGenAndChosenFlags)
{
    ConnTable t;
    ASSERT_TRUE(t.init(8));
    for (int i = 0; i < 4; i++) ASSERT_NE(t.alloc(0), nullptr);
    t[1].gen = 7;
    t[1].flags = 0x5;
    t[1].used = true;
    t[2].gen = 9;
    t.release(1);
    t.release(2);
    Conn *c = t.alloc(0x4);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->index, 2u); // the last freed
    EXPECT_EQ(c->gen, 9u);
    c = t.alloc(0x4);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->index, 1u);
    EXPECT_EQ(c->gen, 7u);
    EXPECT_EQ(c->flags, 0x4u); // only the kept bits
    EXPECT_FALSE(c->used);     // the rest is a new block
    EXPECT_EQ(t.made(), 4u);   // nothing new made while freed ones were there
    EXPECT_EQ(t.alloc(0)->index, 4u);
}

TEST(ConnTable, CapacityIsAHardLimit)
{
    ConnTable t;
    ASSERT_TRUE(t.init(2));
    ASSERT_NE(t.alloc(0), nullptr);
    ASSERT_NE(t.alloc(0), nullptr);
    EXPECT_EQ(t.alloc(0), nullptr);
    t.release(0);
    EXPECT_EQ(t.alloc(0)->index, 0u);
    EXPECT_EQ(t.alloc(0), nullptr);
}

TEST(ConnTable, ResetStartsOverAndInitOnlyOnce)
{
    ConnTable t;
    ASSERT_TRUE(t.init(4));
    EXPECT_FALSE(t.init(4));
    for (int i = 0; i < 3; i++) ASSERT_NE(t.alloc(0), nullptr);
    t[0].gen = 5;
    t.release(0);
    t.reset();
    EXPECT_EQ(t.made(), 0u);
    EXPECT_EQ(t.free_listed(), 0u);
    Conn *c = t.alloc(0);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->index, 0u);
    EXPECT_EQ(c->gen, 1u);
    ConnTable none;
    EXPECT_FALSE(none.init(0));
}

// Resident memory of this process, in bytes (/proc/self/statm's second field).
static long resident_bytes()
{
    long pages = 0, rss = 0;
    FILE *f = std::fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (std::fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = -1;
    std::fclose(f);
    return rss < 0 ? -1 : rss * sysconf(_SC_PAGESIZE);
}

// The engine's start: a table for a million connections (hundreds of MiB of
// blocks) is reserved, not touched; only the blocks used become resident.
TEST(ConnTable, ReservingTouchesNoBlock)
{
    const uint32_t kCapacity = 1u << 20;
    const long before = resident_bytes();
    ASSERT_GT(before, 0);
    ConnTable t;
    ASSERT_TRUE(t.init(kCapacity)) << "no memory for " << kCapacity << " blocks";
    for (int i = 0; i < 16; i++) ASSERT_NE(t.alloc(0), nullptr);
    const long grown = resident_bytes() - before;
    const long table = long(kCapacity) * long(sizeof(Conn));
    // The free list's reservation is untouched too; allow a few MiB of slack
    // for the allocator and the test itself, far below the table's size.
    EXPECT_LT(grown, 16l << 20) << "reserving " << table << " bytes made " << grown << " resident";
}

} // namespace
} // namespace tcp
} // namespace mars
