// Tests of mars/src/flow_table: CRC32C (known vector, hardware == software),
// and the table against std::unordered_map under many random keys, the
// last-flow cache's counting and its invalidation on remove.
#include "flow_table.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace {

using namespace mars;

struct KeyHash {
    size_t operator()(const FlowKey &k) const {
        return (uint64_t{k.local_ip} << 32 | k.remote_ip) * 0x9e3779b97f4a7c15ull ^
               (uint64_t{k.local_port} << 16 | k.remote_port);
    }
};

FlowKey random_key(std::mt19937_64 &rng) {
    FlowKey k;
    k.local_ip = static_cast<uint32_t>(rng());
    k.remote_ip = static_cast<uint32_t>(rng());
    k.local_port = static_cast<uint16_t>(rng());
    k.remote_port = static_cast<uint16_t>(rng());
    return k;
}

TEST(Crc32c, KnownVector) {
    const char *msg = "123456789";
    EXPECT_EQ(crc32c_sw(0, msg, 9), 0xE3069283u);
    EXPECT_EQ(crc32c(0, msg, 9), 0xE3069283u);
    if (crc32c_hw_available()) {
        EXPECT_EQ(crc32c_hw(0, msg, 9), 0xE3069283u);
    }
    EXPECT_EQ(crc32c_sw(0, msg, 0), 0u);
    // RFC 3720 B.4: 32 bytes of zeros, and of 0xff.
    std::vector<unsigned char> zeros(32, 0), ones(32, 0xff);
    EXPECT_EQ(crc32c(0, zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(crc32c(0, ones.data(), 32), 0x62A8AB43u);
}

TEST(Crc32c, ChainsAcrossSplits) {
    std::mt19937_64 rng(1);
    std::vector<unsigned char> buf(300);
    for (auto &b : buf)
        b = static_cast<unsigned char>(rng());
    const uint32_t whole = crc32c_sw(0, buf.data(), buf.size());
    for (size_t cut = 0; cut <= buf.size(); ++cut) {
        ASSERT_EQ(crc32c_sw(crc32c_sw(0, buf.data(), cut), buf.data() + cut, buf.size() - cut), whole);
        ASSERT_EQ(crc32c(crc32c(0, buf.data(), cut), buf.data() + cut, buf.size() - cut), whole);
    }
}

TEST(Crc32c, HardwareMatchesSoftwareEveryLengthAndAlignment) {
    if (!crc32c_hw_available())
        GTEST_SKIP() << "no SSE4.2 on this CPU";
    std::mt19937_64 rng(2);
    std::vector<unsigned char> buf(520);
    for (auto &b : buf)
        b = static_cast<unsigned char>(rng());
    for (size_t align = 0; align < 8; ++align)
        for (size_t len = 0; len <= 512; ++len)
            ASSERT_EQ(crc32c_hw(0x1234, buf.data() + align, len), crc32c_sw(0x1234, buf.data() + align, len));
}

TEST(FlowHash, IsCrc32cOfTheLittleEndianKeyBytes) {
    FlowKey k{0x04030201, 0x08070605, 0x0a09, 0x0c0b};
    const unsigned char bytes[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    EXPECT_EQ(flow_hash_sw(k), crc32c_sw(0, bytes, 12));
    EXPECT_EQ(flow_hash(k), crc32c_sw(0, bytes, 12));
}

TEST(FlowHash, HardwareMatchesSoftware) {
    std::mt19937_64 rng(3);
    for (int i = 0; i < 100000; ++i) {
        FlowKey k = random_key(rng);
        uint32_t sw = flow_hash_sw(k);
        ASSERT_EQ(flow_hash(k), sw);
        if (crc32c_hw_available()) {
            ASSERT_EQ(flow_hash_hw(k), sw);
        }
    }
}

TEST(FlowTable, InitRoundsBucketsUp) {
    FlowTable t;
    EXPECT_TRUE(t.init(0));
    EXPECT_EQ(t.bucket_count(), 1u);
    EXPECT_TRUE(t.init(1000));
    EXPECT_EQ(t.bucket_count(), 1024u);
    EXPECT_TRUE(t.init(1024));
    EXPECT_EQ(t.bucket_count(), 1024u);
    EXPECT_FALSE(t.init(0x80000001u));
    EXPECT_EQ(t.size(), 0u);
    FlowKey k{1, 2, 3, 4};
    EXPECT_EQ(t.lookup(k), nullptr);
}

TEST(FlowTable, ManyRandomKeysMatchModel) {
    constexpr size_t kKeys = 100000;
    std::mt19937_64 rng(4);
    FlowTable table;
    ASSERT_TRUE(table.init(kKeys / 2)); // chains of ~2 on average
    std::vector<FlowNode> nodes(kKeys);
    std::unordered_map<FlowKey, FlowNode *, KeyHash> model;
    for (auto &n : nodes) {
        do
            n.key = random_key(rng);
        while (model.count(n.key));
        table.insert(&n);
        EXPECT_TRUE(n.linked);
        model[n.key] = &n;
    }
    ASSERT_EQ(table.size(), kKeys);
    for (auto &n : nodes) {
        ASSERT_EQ(table.lookup(n.key), &n);
        ASSERT_EQ(table.lookup(n.key, flow_hash(n.key)), &n);
    }
    // Remove a random half, interleaved with lookups of present and absent keys.
    for (size_t i = 0; i < kKeys; ++i) {
        FlowNode &n = nodes[rng() % kKeys];
        if (n.linked && (rng() & 1)) {
            table.remove(&n);
            EXPECT_FALSE(n.linked);
            model.erase(n.key);
        }
        FlowKey probe = (rng() & 1) ? nodes[rng() % kKeys].key : random_key(rng);
        auto it = model.find(probe);
        ASSERT_EQ(table.lookup(probe), it == model.end() ? nullptr : it->second);
    }
    ASSERT_EQ(table.size(), model.size());
    for (auto &n : nodes)
        ASSERT_EQ(table.lookup(n.key), n.linked ? &n : nullptr);
    // Re-insert the removed ones.
    for (auto &n : nodes)
        if (!n.linked)
            table.insert(&n);
    ASSERT_EQ(table.size(), kKeys);
    for (auto &n : nodes)
        ASSERT_EQ(table.lookup(n.key), &n);
}

TEST(FlowTable, SingleBucketChains) {
    FlowTable table;
    ASSERT_TRUE(table.init(1));
    std::vector<FlowNode> nodes(500);
    for (size_t i = 0; i < nodes.size(); ++i) {
        nodes[i].key = FlowKey{0x0a000001, 0x0a000002, 80, static_cast<uint16_t>(1000 + i)};
        table.insert(&nodes[i]);
    }
    for (size_t i = 0; i < nodes.size(); i += 2)
        table.remove(&nodes[i]); // from the middle, the head and the tail of the chain
    for (size_t i = 0; i < nodes.size(); ++i)
        ASSERT_EQ(table.lookup(nodes[i].key), i % 2 ? &nodes[i] : nullptr);
    EXPECT_EQ(table.size(), 250u);
}

TEST(FlowTable, KeysDifferingInOneField) {
    FlowTable table;
    ASSERT_TRUE(table.init(64));
    const FlowKey base{0xc0a80001, 0xc0a80002, 12345, 80};
    std::vector<FlowKey> keys = {base};
    auto vary = [&](auto mutate) {
        FlowKey k = base;
        mutate(k);
        keys.push_back(k);
    };
    vary([](FlowKey &k) { k.local_ip ^= 1; });
    vary([](FlowKey &k) { k.remote_ip ^= 1; });
    vary([](FlowKey &k) { k.local_port ^= 1; });
    vary([](FlowKey &k) { k.remote_port ^= 1; });
    vary([](FlowKey &k) { k.local_ip ^= 0x80000000; });
    vary([](FlowKey &k) { k.remote_port ^= 0x8000; });
    vary([](FlowKey &k) { std::swap(k.local_ip, k.remote_ip); }); // reversed direction
    vary([](FlowKey &k) { std::swap(k.local_port, k.remote_port); });
    vary([](FlowKey &k) {
        std::swap(k.local_ip, k.remote_ip);
        std::swap(k.local_port, k.remote_port);
    });
    std::vector<FlowNode> nodes(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
        nodes[i].key = keys[i];
        table.insert(&nodes[i]);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
        for (size_t j = 0; j < keys.size(); ++j)
            if (i != j) {
                EXPECT_NE(flow_hash(keys[i]), flow_hash(keys[j])) << i << " vs " << j;
            }
        EXPECT_EQ(table.lookup(keys[i]), &nodes[i]);
        EXPECT_EQ(table.lookup(keys[i]), &nodes[i]); // cached now
    }
    // The cache must compare the whole key, not only the last field changed.
    for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(table.lookup(keys[i]), &nodes[i]);
        ASSERT_EQ(table.lookup(keys[(i + 1) % keys.size()]), &nodes[(i + 1) % keys.size()]);
    }
}

TEST(FlowTable, CacheCountsHitsAndMisses) {
    FlowTable table;
    ASSERT_TRUE(table.init(16));
    FlowNode a, b;
    a.key = {1, 2, 3, 4};
    b.key = {1, 2, 3, 5};
    table.insert(&a);
    table.insert(&b);
    EXPECT_EQ(table.cached(), nullptr); // insert does not fill the cache
    EXPECT_EQ(table.lookup(a.key), &a);
    EXPECT_EQ(table.cache_hits, 0u);
    EXPECT_EQ(table.cache_misses, 1u);
    EXPECT_EQ(table.cached(), &a);
    EXPECT_EQ(table.lookup(a.key), &a);
    EXPECT_EQ(table.lookup(a.key, a.hash), &a);
    EXPECT_EQ(table.cache_hits, 2u);
    EXPECT_EQ(table.cache_misses, 1u);
    // A failed lookup is a miss and leaves the cache alone.
    EXPECT_EQ(table.lookup(FlowKey{9, 9, 9, 9}), nullptr);
    EXPECT_EQ(table.cache_misses, 2u);
    EXPECT_EQ(table.cached(), &a);
    EXPECT_EQ(table.lookup(b.key), &b);
    EXPECT_EQ(table.cached(), &b);
    EXPECT_EQ(table.cache_misses, 3u);
    EXPECT_EQ(table.lookup(b.key), &b);
    EXPECT_EQ(table.cache_hits, 3u);
}

TEST(FlowTable, RemovingTheCachedNodeDropsIt) {
    FlowTable table;
    ASSERT_TRUE(table.init(16));
    FlowNode a, b;
    a.key = {1, 2, 3, 4};
    b.key = {5, 6, 7, 8};
    table.insert(&a);
    table.insert(&b);
    ASSERT_EQ(table.lookup(a.key), &a);
    table.remove(&a);
    EXPECT_EQ(table.cached(), nullptr);
    EXPECT_EQ(table.lookup(a.key), nullptr);
    EXPECT_EQ(table.size(), 1u);
    // Removing a node that is not cached keeps the cache.
    ASSERT_EQ(table.lookup(b.key), &b);
    FlowNode c;
    c.key = {9, 9, 9, 9};
    table.insert(&c);
    table.remove(&c);
    EXPECT_EQ(table.cached(), &b);
    // Reusing the removed node's memory under a new key does not resurrect it.
    a.key = {42, 42, 42, 42};
    table.insert(&a);
    EXPECT_EQ(table.lookup(FlowKey{1, 2, 3, 4}), nullptr);
    EXPECT_EQ(table.lookup(a.key), &a);
    table.remove(&a);
    table.remove(&a); // not linked: no-op
    EXPECT_EQ(table.size(), 1u);
}

} // namespace
