// flow_table.cc: CRC32C (SSE4.2 instruction or a byte table, picked once at
// startup) and the insert/remove side of the intrusive flow table; lookups
// are inline in flow_table.h.
#include "base/flow_table.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <new>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define MARS_CRC32C_X86 1
#endif

namespace mars {
namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78;

constexpr std::array<uint32_t, 256> make_crc_table() {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int bit = 0; bit < 8; ++bit)
            c = (c & 1) ? (c >> 1) ^ kCastagnoliReflected : c >> 1;
        table[i] = c;
    }
    return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

// Raw (not inverted) CRC register updates.
inline uint32_t crc_sw_byte(uint32_t crc, uint8_t b) { return (crc >> 8) ^ kCrcTable[(crc ^ b) & 0xff]; }

uint32_t crc_sw_raw(uint32_t crc, const unsigned char *p, size_t len) {
    for (size_t i = 0; i < len; ++i)
        crc = crc_sw_byte(crc, p[i]);
    return crc;
}

// The key as the 12 bytes the hash is defined over (little-endian fields).
inline void key_bytes(const FlowKey &key, unsigned char out[12]) {
    const uint32_t words[3] = {key.local_ip, key.remote_ip,
                               key.local_port | (uint32_t{key.remote_port} << 16)};
    for (int w = 0; w < 3; ++w)
        for (int b = 0; b < 4; ++b)
            out[w * 4 + b] = static_cast<unsigned char>(words[w] >> (8 * b));
}

#ifdef MARS_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc_hw_raw(uint32_t crc, const unsigned char *p,
                                                      size_t len) {
#if defined(__x86_64__)
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        crc = static_cast<uint32_t>(_mm_crc32_u64(crc, v));
    }
#endif
    for (; len >= 4; p += 4, len -= 4) {
        uint32_t v;
        std::memcpy(&v, p, 4);
        crc = _mm_crc32_u32(crc, v);
    }
    for (; len; ++p, --len)
        crc = _mm_crc32_u8(crc, *p);
    return crc;
}

__attribute__((target("sse4.2"))) uint32_t flow_hash_hw_impl(const FlowKey &key) {
    uint32_t crc = ~0u;
    crc = _mm_crc32_u32(crc, key.local_ip);
    crc = _mm_crc32_u32(crc, key.remote_ip);
    crc = _mm_crc32_u32(crc, key.local_port | (uint32_t{key.remote_port} << 16));
    return ~crc;
}

bool detect_sse42() {
    __builtin_cpu_init(); // we may run before libgcc's own constructor
    return __builtin_cpu_supports("sse4.2");
}
#else
bool detect_sse42() { return false; }
#endif

// Chosen once, at static initialization. Code that hashes before this runs
// sees false and takes the software path, which gives the same values.
const bool g_have_sse42 = detect_sse42();

} // namespace

bool crc32c_hw_available() { return g_have_sse42; }

uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len) {
    return ~crc_sw_raw(~crc, static_cast<const unsigned char *>(data), len);
}

uint32_t crc32c_hw(uint32_t crc, const void *data, size_t len) {
#ifdef MARS_CRC32C_X86
    return ~crc_hw_raw(~crc, static_cast<const unsigned char *>(data), len);
#else
    return crc32c_sw(crc, data, len);
#endif
}

uint32_t crc32c(uint32_t crc, const void *data, size_t len) {
    return g_have_sse42 ? crc32c_hw(crc, data, len) : crc32c_sw(crc, data, len);
}

uint32_t flow_hash_sw(const FlowKey &key) {
    unsigned char bytes[12];
    key_bytes(key, bytes);
    return ~crc_sw_raw(~0u, bytes, sizeof bytes);
}

uint32_t flow_hash_hw(const FlowKey &key) {
#ifdef MARS_CRC32C_X86
    return flow_hash_hw_impl(key);
#else
    return flow_hash_sw(key);
#endif
}

uint32_t flow_hash(const FlowKey &key) {
#ifdef MARS_CRC32C_X86
    if (g_have_sse42)
        return flow_hash_hw_impl(key);
#endif
    return flow_hash_sw(key);
}

bool FlowTable::init(uint32_t capacity) {
    if (capacity > (1u << 31) || size_ != 0)
        return false;
    uint32_t buckets = 1;
    while (buckets < capacity)
        buckets <<= 1;
    buckets_.reset(new (std::nothrow) FlowNode *[buckets]());
    if (!buckets_)
        return false;
    mask_ = buckets - 1;
    cache_ = nullptr;
    return true;
}

void FlowTable::clear() {
    std::fill(buckets_.get(), buckets_.get() + mask_ + 1, nullptr);
    size_ = 0;
    cache_ = nullptr;
    cache_hits = cache_misses = 0;
}

void FlowTable::insert(FlowNode *node) {
    node->hash = flow_hash(node->key);
    FlowNode *&head = buckets_[node->hash & mask_];
    node->next = head;
    head = node;
    node->linked = true;
    ++size_;
}

void FlowTable::remove(FlowNode *node) {
    if (!node->linked)
        return;
    for (FlowNode **pp = &buckets_[node->hash & mask_]; *pp; pp = &(*pp)->next) {
        if (*pp == node) {
            *pp = node->next;
            break;
        }
    }
    if (cache_ == node)
        cache_ = nullptr;
    node->next = nullptr;
    node->linked = false;
    --size_;
}

} // namespace mars
