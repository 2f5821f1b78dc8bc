// checksum.cc: RFC 1071 sum over 8-byte native loads.
//
// Eight bytes are added at a time into a 64-bit accumulator with end-around
// carry (adc chains on x86-64); a 64-bit ones-complement sum folds to the same
// 16-bit sum as adding the 16-bit words one by one, because 2^16 = 1 (mod
// 2^16 - 1). Loads go through memcpy so any alignment works; only the offset
// within the checksummed stream matters, and csum_add assumes it is even.
#include "base/checksum.h"

#include <cstring>

namespace mars {
namespace {

inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline uint64_t add_carry(uint64_t acc, uint64_t v) {
    uint64_t r;
    bool carry = __builtin_add_overflow(acc, v, &r);
    return r + carry; // cannot overflow again: r <= 2^64 - 2 after a carry
}

// Adds four 64-bit words with a single carry chain.
inline uint64_t add4(uint64_t acc, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
#if defined(__x86_64__)
    asm("addq %[a], %[acc]\n\t"
        "adcq %[b], %[acc]\n\t"
        "adcq %[c], %[acc]\n\t"
        "adcq %[d], %[acc]\n\t"
        "adcq $0, %[acc]"
        : [acc] "+r"(acc)
        : [a] "r"(a), [b] "r"(b), [c] "r"(c), [d] "r"(d)
        : "cc");
    return acc;
#else
    return add_carry(add_carry(add_carry(add_carry(acc, a), b), c), d);
#endif
}

// The last 0..7 bytes as one zero-padded word (memory order).
inline uint64_t load_tail(const unsigned char *p, size_t n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    return v;
}

inline uint32_t fold64(uint64_t acc) {
    uint32_t lo = static_cast<uint32_t>(acc), hi = static_cast<uint32_t>(acc >> 32);
    uint32_t sum = lo + hi;
    sum += sum < hi; // end-around carry
    return csum_fold(sum);
}

} // namespace

uint32_t csum_add(uint32_t sum, const void *data, size_t len) {
    const auto *p = static_cast<const unsigned char *>(data);
    uint64_t acc = sum;
    for (; len >= 32; p += 32, len -= 32)
        acc = add4(acc, load64(p), load64(p + 8), load64(p + 16), load64(p + 24));
    for (; len >= 8; p += 8, len -= 8)
        acc = add_carry(acc, load64(p));
    if (len)
        acc = add_carry(acc, load_tail(p, len));
    return fold64(acc);
}

uint32_t csum_copy(void *dst, const void *src, size_t len, uint32_t sum) {
    const auto *s = static_cast<const unsigned char *>(src);
    auto *d = static_cast<unsigned char *>(dst);
    uint64_t acc = sum;
    for (; len >= 32; s += 32, d += 32, len -= 32) {
        uint64_t a = load64(s), b = load64(s + 8), c = load64(s + 16), e = load64(s + 24);
        std::memcpy(d, &a, 8);
        std::memcpy(d + 8, &b, 8);
        std::memcpy(d + 16, &c, 8);
        std::memcpy(d + 24, &e, 8);
        acc = add4(acc, a, b, c, e);
    }
    for (; len >= 8; s += 8, d += 8, len -= 8) {
        uint64_t a = load64(s);
        std::memcpy(d, &a, 8);
        acc = add_carry(acc, a);
    }
    if (len) {
        std::memcpy(d, s, len);
        acc = add_carry(acc, load_tail(s, len));
    }
    return fold64(acc);
}

} // namespace mars
