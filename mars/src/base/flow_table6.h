// flow_table6.h: connection lookup by IPv6 4-tuple (issue 31), a table of its
// own beside FlowTable rather than a wider FlowTable key.
//
// Why a second table: FlowTable's key is 12 bytes and its node (40 bytes)
// opens tcp::Hot, the first cache line every IPv4 segment reads; the express
// path compares the cached node's key and hashes 12 bytes. A key wide enough
// for IPv6 (36 bytes) would move Hot's fields across lines and lengthen the
// compare and the hash of every IPv4 segment. IPv6 segments pay their own
// 36-byte CRC32C and compare here instead; IPv4 pays nothing.
//
// The same shape as FlowTable: intrusive chains, CRC32C, no allocation after
// init(), a one-entry last-flow cache in front.
#pragma once

#include <mars/stack.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

namespace mars {

struct FlowKey6 {
    Ip6Addr local, remote;                  // network order, as on the wire
    uint16_t local_port = 0, remote_port = 0; // host order
    bool operator==(const FlowKey6 &o) const
    {
        return local_port == o.local_port && remote_port == o.remote_port &&
               std::memcmp(local.b, o.local.b, 16) == 0 && std::memcmp(remote.b, o.remote.b, 16) == 0;
    }
};

// CRC32C of local, remote (16 bytes each, as stored), then local_port and
// remote_port (each little-endian): 36 bytes.
uint32_t flow_hash6(const FlowKey6 &key);

struct FlowNode6 {
    FlowNode6 *next = nullptr;
    FlowKey6 key;
    uint32_t hash = 0;
    bool linked = false;
    void *owner = nullptr; // what holds the node (a tcp::Conn): the table never reads it
};

class FlowTable6 {
  public:
    // buckets = the next power of two >= capacity. Allocates (setup only).
    // False for capacity 0 or > 2^31, or while nodes are linked.
    bool init(uint32_t capacity);
    // Empty again on the same buckets, counters zeroed (Stack::reset()).
    void clear();

    // The node with this key, or nullptr (the last-flow cache first; a chain
    // hit becomes the cached entry).
    FlowNode6 *lookup(const FlowKey6 &key);
    // Links a node whose key is set (computes its hash); the key must not
    // be present already.
    void insert(FlowNode6 *node);
    // Unlinks a linked node (and drops it from the cache).
    void remove(FlowNode6 *node);

    uint32_t size() const { return size_; }
    uint32_t bucket_count() const { return mask_ + 1; }
    uint64_t cache_hits = 0, cache_misses = 0;
    const FlowNode6 *cached() const { return cache_; }

    // The receive pipeline's split lookup (rx/strands.h), as FlowTable's:
    // the bucket a hash falls in (to prefetch, then read its head; nullptr
    // before init()), a chain walk from that head that leaves the cache and
    // its counters alone, and making a node found that way the cached entry.
    FlowNode6 *const *bucket(uint32_t hash) const { return buckets_ ? &buckets_[hash & mask_] : nullptr; }
    static FlowNode6 *find_from(FlowNode6 *head, const FlowKey6 &key, uint32_t hash)
    {
        for (FlowNode6 *n = head; n; n = n->next)
            if (n->hash == hash && n->key == key) return n;
        return nullptr;
    }
    void remember(FlowNode6 *node) { cache_ = node; }

  private:
    std::unique_ptr<FlowNode6 *[]> buckets_;
    uint32_t mask_ = 0;
    uint32_t size_ = 0;
    FlowNode6 *cache_ = nullptr;
};

} // namespace mars
