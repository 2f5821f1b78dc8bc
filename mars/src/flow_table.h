// flow_table.h: connection lookup by 4-tuple.
//
// An intrusive chained hash table keyed by (local ip, local port, remote ip,
// remote port) with a CRC32C hash, and a one-entry last-flow cache in front
// (Clark, Jacobson et al. measured ~90% hits: segments arrive in trains).
// The table never allocates after init(); nodes live inside connections.
#pragma once

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
uint32_t flow_hash(const FlowKey &key);

struct FlowNode {
    FlowNode *next = nullptr;
    FlowKey key;
    uint32_t hash = 0;
    bool linked = false;
};

class FlowTable {
  public:
    // buckets = the next power of two >= capacity. Allocates (setup only).
    bool init(uint32_t capacity);

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

  private:
    // (fields chosen by the implementation)
};

} // namespace mars
