// secret.cc: SipHash-2-4 (Aumasson & Bernstein) and what the stack keys with
// it: RFC 6528 initial sequence numbers and RFC 4987 SYN cookies.
//
// Cookie layout (32 bits): [31:27] time counter mod 32 (64 s units),
// [26:24] MSS index, [23:0] SipHash of (flow, peer ISN, full counter, MSS
// index). Hashing the full counter means a cookie never comes back to life
// when the 5-bit field wraps; hashing the MSS index makes its bits as hard
// to forge as the hash's.
#include "base/secret.h"

#include <cstring>

namespace mars {
namespace {

inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
    uint64_t v0, v1, v2, v3;
    void round() {
        v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
        v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
        v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
        v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
    }
    void absorb(uint64_t m) {
        v3 ^= m;
        round();
        round();
        v0 ^= m;
    }
};

inline uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = (v << 8) | p[i];
    return v;
}

// Little-endian serialization of the values we hash.
struct Message {
    unsigned char bytes[32];
    size_t len = 0;
    void put(uint64_t v, int n) {
        for (int i = 0; i < n; ++i)
            bytes[len++] = static_cast<unsigned char>(v >> (8 * i));
    }
    void put_flow(const FlowKey &f) {
        put(f.local_ip, 4);
        put(f.local_port, 2);
        put(f.remote_ip, 4);
        put(f.remote_port, 2);
    }
};

constexpr uint64_t kIsnTickNs = 4000;               // RFC 6528: M ticks every 4 us
constexpr uint64_t kCookiePeriodNs = 64'000'000'000; // 64 s
constexpr uint32_t kCookieHashMask = 0xffffff;

uint32_t cookie_hash(const uint64_t key[2], const FlowKey &flow, uint32_t peer_isn,
                     uint64_t counter, int mss_index) {
    Message m;
    m.put('C', 1); // domain tag: never equal to an ISN input
    m.put_flow(flow);
    m.put(peer_isn, 4);
    m.put(counter, 8);
    m.put(static_cast<uint64_t>(mss_index), 1);
    return static_cast<uint32_t>(siphash24(key, m.bytes, m.len)) & kCookieHashMask;
}

uint32_t cookie_pack(uint64_t counter, int mss_index, uint32_t hash) {
    return static_cast<uint32_t>(counter & 31) << 27 | static_cast<uint32_t>(mss_index) << 24 | hash;
}

} // namespace

uint64_t siphash24(const uint64_t key[2], const void *data, size_t len) {
    const auto *p = static_cast<const unsigned char *>(data);
    SipState s{key[0] ^ 0x736f6d6570736575ull, key[1] ^ 0x646f72616e646f6dull,
               key[0] ^ 0x6c7967656e657261ull, key[1] ^ 0x7465646279746573ull};
    const size_t full = len & ~size_t{7};
    for (size_t i = 0; i < full; i += 8)
        s.absorb(load_le64(p + i));
    uint64_t last = uint64_t{len & 0xff} << 56;
    for (size_t i = 0; i < (len & 7); ++i)
        last |= uint64_t{p[full + i]} << (8 * i);
    s.absorb(last);
    s.v2 ^= 0xff;
    for (int i = 0; i < 4; ++i)
        s.round();
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

uint32_t isn_generate(const uint64_t key[2], const FlowKey &flow, uint64_t now_ns) {
    Message m;
    m.put('I', 1);
    m.put_flow(flow);
    const uint32_t f = static_cast<uint32_t>(siphash24(key, m.bytes, m.len));
    return static_cast<uint32_t>(now_ns / kIsnTickNs) + f;
}

int cookie_mss_index(uint16_t mss) {
    for (int i = 7; i > 0; --i)
        if (kCookieMss[i] <= mss)
            return i;
    return 0;
}

uint32_t syncookie_encode(const uint64_t key[2], const FlowKey &flow, uint32_t peer_isn,
                          int mss_index, uint64_t now_ns) {
    mss_index = mss_index < 0 ? 0 : mss_index > 7 ? 7 : mss_index;
    const uint64_t counter = now_ns / kCookiePeriodNs;
    return cookie_pack(counter, mss_index, cookie_hash(key, flow, peer_isn, counter, mss_index));
}

int syncookie_decode(const uint64_t key[2], const FlowKey &flow, uint32_t peer_isn,
                     uint32_t cookie, uint64_t now_ns) {
    const uint64_t now_counter = now_ns / kCookiePeriodNs;
    const int mss_index = static_cast<int>((cookie >> 24) & 7);
    const uint32_t hash = cookie & kCookieHashMask;
    // The current counter and the previous one: a cookie lives 64 to 128 s.
    for (uint64_t age = 0; age <= 1 && age <= now_counter; ++age) {
        const uint64_t counter = now_counter - age;
        if ((counter & 31) == cookie >> 27 &&
            cookie_hash(key, flow, peer_isn, counter, mss_index) == hash)
            return mss_index;
    }
    return -1;
}

} // namespace mars
