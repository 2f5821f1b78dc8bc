// Tests of mars/src/base/flow_table6 (issue 31): the IPv6 4-tuple table
// against std::map under many random keys (keys that differ in one address
// byte or one port only among them), the last-flow cache and its
// invalidation on remove, clear(), and the hash's definition (CRC32C of the
// 36 bytes flow_table6.h names).
#include "flow_table.h"
#include "flow_table6.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

namespace {

using namespace mars;

FlowKey6 key_of(std::mt19937_64 &rng)
{
    FlowKey6 k;
    for (auto &b : k.local.b) b = uint8_t(rng());
    for (auto &b : k.remote.b) b = uint8_t(rng());
    k.local_port = uint16_t(rng());
    k.remote_port = uint16_t(rng());
    return k;
}

std::vector<uint8_t> bytes_of(const FlowKey6 &k)
{
    std::vector<uint8_t> v(k.local.b, k.local.b + 16);
    v.insert(v.end(), k.remote.b, k.remote.b + 16);
    v.insert(v.end(), {uint8_t(k.local_port), uint8_t(k.local_port >> 8), uint8_t(k.remote_port),
                       uint8_t(k.remote_port >> 8)});
    return v;
}

TEST(FlowTable6, HashIsCrc32cOfTheKeyBytes)
{
    std::mt19937_64 rng(1);
    for (int i = 0; i < 100; i++) {
        const FlowKey6 k = key_of(rng);
        const auto b = bytes_of(k);
        EXPECT_EQ(flow_hash6(k), crc32c_sw(0, b.data(), b.size()));
    }
}

TEST(FlowTable6, MatchesAMapUnderRandomKeys)
{
    std::mt19937_64 rng(7);
    constexpr int kN = 5000;
    std::vector<std::unique_ptr<FlowNode6>> nodes;
    std::map<std::vector<uint8_t>, FlowNode6 *> ref;
    FlowTable6 t;
    ASSERT_TRUE(t.init(1024)); // chains of several: collisions exercised
    for (int i = 0; i < kN; i++) {
        FlowKey6 k = key_of(rng);
        if (i % 3 == 1) { // a neighbour of the previous key: one remote byte apart
            k = nodes.back()->key;
            k.remote.b[15] ^= 1;
        } else if (i % 3 == 2) { // a port apart
            k = nodes.back()->key;
            k.local_port ^= 0x8000;
        }
        if (ref.count(bytes_of(k))) continue;
        auto n = std::make_unique<FlowNode6>();
        n->key = k;
        t.insert(n.get());
        ref[bytes_of(k)] = n.get();
        nodes.push_back(std::move(n));
    }
    EXPECT_EQ(t.size(), ref.size());
    for (auto &n : nodes) EXPECT_EQ(t.lookup(n->key), n.get());
    // Remove every other one: the rest stay found, the removed are gone.
    for (size_t i = 0; i < nodes.size(); i += 2) t.remove(nodes[i].get());
    for (size_t i = 0; i < nodes.size(); i++) {
        FlowNode6 *want = i % 2 ? nodes[i].get() : nullptr;
        EXPECT_EQ(t.lookup(nodes[i]->key), want) << i;
    }
    EXPECT_EQ(t.size(), ref.size() - (ref.size() + 1) / 2);
}

TEST(FlowTable6, CacheCountsAndForgetsRemoved)
{
    std::mt19937_64 rng(3);
    FlowTable6 t;
    ASSERT_TRUE(t.init(16));
    FlowNode6 a, b;
    a.key = key_of(rng);
    b.key = key_of(rng);
    t.insert(&a);
    t.insert(&b);
    EXPECT_EQ(t.lookup(a.key), &a); // miss, then cached
    EXPECT_EQ(t.lookup(a.key), &a); // hit
    EXPECT_EQ(t.cache_hits, 1u);
    EXPECT_EQ(t.cache_misses, 1u);
    t.remove(&a);
    EXPECT_EQ(t.lookup(a.key), nullptr) << "a removed node is not served from the cache";
    EXPECT_FALSE(a.linked);
    t.clear();
    EXPECT_EQ(t.size(), 0u);
    EXPECT_EQ(t.lookup(b.key), nullptr);
    EXPECT_FALSE(t.init(0));
}

// The strands' split lookup (bucket, walk from its head, remember) finds what
// lookup() finds, chains of several nodes included, and leaves the cache and
// its counters alone until remember().
TEST(FlowTable6, SplitLookupFindsWhatLookupFinds)
{
    std::mt19937_64 rng(5);
    FlowTable6 t;
    EXPECT_EQ(t.bucket(0), nullptr) << "no buckets before init()";
    ASSERT_TRUE(t.init(4)); // 4 buckets for 64 nodes: chains of ~16
    std::vector<std::unique_ptr<FlowNode6>> nodes;
    for (int i = 0; i < 64; i++) {
        nodes.push_back(std::make_unique<FlowNode6>());
        nodes.back()->key = key_of(rng);
        t.insert(nodes.back().get());
    }
    for (const auto &n : nodes) {
        const uint32_t h = flow_hash6(n->key);
        EXPECT_EQ(FlowTable6::find_from(*t.bucket(h), n->key, h), n.get());
    }
    const FlowKey6 absent = key_of(rng);
    EXPECT_EQ(FlowTable6::find_from(*t.bucket(flow_hash6(absent)), absent, flow_hash6(absent)), nullptr);
    EXPECT_EQ(t.cache_hits + t.cache_misses, 0u);
    EXPECT_EQ(t.cached(), nullptr);
    t.remember(nodes[7].get());
    EXPECT_EQ(t.cached(), nodes[7].get());
    EXPECT_EQ(t.lookup(nodes[7]->key), nodes[7].get());
    EXPECT_EQ(t.cache_hits, 1u) << "a remembered node is the cache's";
    t.remove(nodes[7].get());
    EXPECT_EQ(t.cached(), nullptr);
    const uint32_t h7 = flow_hash6(nodes[7]->key);
    EXPECT_EQ(FlowTable6::find_from(*t.bucket(h7), nodes[7]->key, h7), nullptr) << "removed: not in its chain";
    t.clear();
    for (const auto &n : nodes) n->linked = false; // the owners' part of clear()
}

} // namespace
