// flow_table6.cc: the IPv6 flow table (flow_table6.h).
#include "base/flow_table6.h"

#include "base/flow_table.h"

#include <algorithm>

namespace mars {

uint32_t flow_hash6(const FlowKey6 &key)
{
    uint8_t b[36];
    std::memcpy(b, key.local.b, 16);
    std::memcpy(b + 16, key.remote.b, 16);
    b[32] = uint8_t(key.local_port);
    b[33] = uint8_t(key.local_port >> 8);
    b[34] = uint8_t(key.remote_port);
    b[35] = uint8_t(key.remote_port >> 8);
    return crc32c(0, b, sizeof b);
}

bool FlowTable6::init(uint32_t capacity)
{
    if (capacity == 0 || capacity > (1u << 31) || size_ != 0) return false;
    uint32_t n = 1;
    while (n < capacity) n <<= 1;
    buckets_ = std::make_unique<FlowNode6 *[]>(n); // zeroed
    mask_ = n - 1;
    cache_ = nullptr;
    cache_hits = cache_misses = 0;
    return true;
}

void FlowTable6::clear()
{
    if (buckets_) std::fill(buckets_.get(), buckets_.get() + mask_ + 1, nullptr);
    size_ = 0;
    cache_ = nullptr;
    cache_hits = cache_misses = 0;
}

FlowNode6 *FlowTable6::lookup(const FlowKey6 &key)
{
    if (cache_ && cache_->key == key) {
        cache_hits++;
        return cache_;
    }
    cache_misses++;
    if (!buckets_) return nullptr;
    const uint32_t h = flow_hash6(key);
    for (FlowNode6 *n = buckets_[h & mask_]; n; n = n->next)
        if (n->hash == h && n->key == key) return cache_ = n;
    return nullptr;
}

void FlowTable6::insert(FlowNode6 *node)
{
    node->hash = flow_hash6(node->key);
    FlowNode6 *&head = buckets_[node->hash & mask_];
    node->next = head;
    head = node;
    node->linked = true;
    size_++;
}

void FlowTable6::remove(FlowNode6 *node)
{
    if (!node->linked) return;
    for (FlowNode6 **pp = &buckets_[node->hash & mask_]; *pp; pp = &(*pp)->next) {
        if (*pp == node) {
            *pp = node->next;
            break;
        }
    }
    node->next = nullptr;
    node->linked = false;
    if (cache_ == node) cache_ = nullptr;
    size_--;
}

} // namespace mars
