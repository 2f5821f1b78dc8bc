// flow_table.h: connection lookup by 4-tuple.
//
// An intrusive chained hash table keyed by (local ip, local port, remote ip,
// remote port) with a CRC32C hash, and a one-entry last-flow cache in front
// (Clark, Jacobson et al. measured ~90% hits: segments arrive in trains).
// The table never allocates after init(); nodes live inside connections.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace mars {

struct FlowKey {
    uint32_t local_ip = 0, remote_ip = 0;   // host order
    uint16_t local_port = 0, remote_port = 0;
    bool operator==(const FlowKey &o) const = default;
};

// CRC32C of the key (SSE4.2 crc32 instruction when the CPU has it, chosen
// once at startup; a table-driven fallback otherwise). Same value either way.
// The bytes hashed are local_ip, remote_ip, local_port, remote_port, each
// little-endian (12 bytes).
uint32_t flow_hash(const FlowKey &key);

// The two implementations behind flow_hash (exposed for tests and benches).
// flow_hash_hw may only be called when crc32c_hw_available().
uint32_t flow_hash_sw(const FlowKey &key);
uint32_t flow_hash_hw(const FlowKey &key);

// CRC32C (Castagnoli, reflected 0x82F63B78, inverted in and out) of len
// bytes, continuing from crc: crc32c(crc32c(0, a), b) == crc32c(0, a b).
// crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c(uint32_t crc, const void *data, size_t len);
uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len);
uint32_t crc32c_hw(uint32_t crc, const void *data, size_t len); // needs SSE4.2
bool crc32c_hw_available();

struct FlowNode {
    FlowNode *next = nullptr;
    FlowKey key;
    uint32_t hash = 0;
    bool linked = false;
};

class FlowTable {
  public:
    // buckets = the next power of two >= capacity. Allocates (setup only).
    // (Fails for capacity > 2^31, or when nodes are still linked.)
    bool init(uint32_t capacity);
    // Empty again, on the same buckets, counters zeroed (the nodes belong
    // to their owners, who are reset with it). For Stack::reset().
    void clear();

    // The node with this key, or nullptr. Checks the last-flow cache first;
    // a hit or miss is counted in cache_hits / cache_misses. A successful
    // chain lookup becomes the cached entry.
    FlowNode *lookup(const FlowKey &key);
    // Same, with a hash the caller already computed.
    FlowNode *lookup(const FlowKey &key, uint32_t hash);
    // Links a node whose key is set (computes node->hash). The caller makes
    // sure the key is not already present.
    void insert(FlowNode *node);
    // Unlinks a linked node (and drops it from the cache).
    void remove(FlowNode *node);

    uint32_t size() const;
    uint64_t cache_hits = 0, cache_misses = 0;

    uint32_t bucket_count() const { return mask_ + 1; }
    const FlowNode *cached() const { return cache_; }

    // The receive pipeline's split lookup (strands.h): the bucket a hash
    // falls in (to prefetch, then read its head), a chain walk from that head
    // with no effect on the cache or its counters, and making a node found
    // that way the cached entry.
    FlowNode *const *bucket(uint32_t hash) const { return &buckets_[hash & mask_]; }
    static FlowNode *find_from(FlowNode *head, const FlowKey &key, uint32_t hash) {
        for (FlowNode *n = head; n; n = n->next)
            if (n->hash == hash && n->key == key) return n;
        return nullptr;
    }
    void remember(FlowNode *node) { cache_ = node; }

  private:
    std::unique_ptr<FlowNode *[]> buckets_;
    uint32_t mask_ = 0;
    uint32_t size_ = 0;
    FlowNode *cache_ = nullptr;

    bool cache_matches(const FlowKey &key) {
        if (cache_ && cache_->key == key) {
            ++cache_hits;
            return true;
        }
        ++cache_misses;
        return false;
    }
    FlowNode *find_in_chain(const FlowKey &key, uint32_t hash) {
        for (FlowNode *n = buckets_[hash & mask_]; n; n = n->next) {
            if (n->hash == hash && n->key == key) {
                cache_ = n;
                return n;
            }
        }
        return nullptr;
    }
};

inline FlowNode *FlowTable::lookup(const FlowKey &key) {
    if (cache_matches(key))
        return cache_;
    return find_in_chain(key, flow_hash(key)); // hash only on a cache miss
}

inline FlowNode *FlowTable::lookup(const FlowKey &key, uint32_t hash) {
    if (cache_matches(key))
        return cache_;
    return find_in_chain(key, hash);
}

inline uint32_t FlowTable::size() const { return size_; }

} // namespace mars
