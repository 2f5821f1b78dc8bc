// tcp_options.h: parsing and writing TCP options (RFC 9293 3.2, RFC 7323,
// RFC 2018). Parsing is strict about lengths (a malformed option list drops
// the segment) and lenient about unknown kinds (skipped).
#pragma once

#include "tcp/sack.h"
#include "base/wire.h"

#include <cstdint>

namespace mars {

struct TcpOptions {
    bool has_mss = false, has_wscale = false, sack_permitted = false, has_ts = false;
    uint16_t mss = 0;
    uint8_t wscale = 0;
    uint32_t tsval = 0, tsecr = 0;
    int n_sack = 0;
    SeqRange sack[4];
};

constexpr uint8_t kOptEnd = 0, kOptNop = 1, kOptMss = 2, kOptWscale = 3, kOptSackOk = 4, kOptSack = 5,
                  kOptTs = 8;

// The layout every modern stack uses for timestamps on non-SYN segments:
// NOP NOP TS(10). Recognising it with one compare keeps the fast path short.
constexpr uint32_t kTsPrefixBe = 0x0101080a; // as a big-endian word

// Parses len bytes of options. Returns false when the list is malformed
// (length byte 0 or 1, or an option running past the end).
inline bool parse_tcp_options(const uint8_t *p, unsigned len, bool syn, TcpOptions *o)
{
    unsigned i = 0;
    while (i < len) {
        const uint8_t kind = p[i];
        if (kind == kOptEnd) break;
        if (kind == kOptNop) {
            i++;
            continue;
        }
        if (i + 1 >= len) return false;
        const uint8_t olen = p[i + 1];
        if (olen < 2 || i + olen > len) return false;
        const uint8_t *v = p + i + 2;
        switch (kind) {
        case kOptMss:
            if (olen == 4 && syn) {
                o->has_mss = true;
                o->mss = uint16_t(v[0] << 8 | v[1]);
            }
            break;
        case kOptWscale:
            if (olen == 3 && syn) {
                o->has_wscale = true;
                o->wscale = v[0] > 14 ? 14 : v[0]; // RFC 7323 2.3: larger values are treated as 14
            }
            break;
        case kOptSackOk:
            if (olen == 2 && syn) o->sack_permitted = true;
            break;
        case kOptTs:
            if (olen == 10) {
                o->has_ts = true;
                o->tsval = uint32_t(v[0]) << 24 | uint32_t(v[1]) << 16 | uint32_t(v[2]) << 8 | v[3];
                o->tsecr = uint32_t(v[4]) << 24 | uint32_t(v[5]) << 16 | uint32_t(v[6]) << 8 | v[7];
            }
            break;
        case kOptSack:
            if (!syn && (olen - 2) % 8 == 0) {
                const int n = (olen - 2) / 8;
                for (int k = 0; k < n && o->n_sack < 4; k++) {
                    const uint8_t *b = v + 8 * k;
                    o->sack[o->n_sack].start = uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | b[3];
                    o->sack[o->n_sack].end = uint32_t(b[4]) << 24 | uint32_t(b[5]) << 16 | uint32_t(b[6]) << 8 | b[7];
                    o->n_sack++;
                }
            }
            break;
        default:
            break;
        }
        i += olen;
    }
    return true;
}

inline uint8_t *put_be32(uint8_t *p, uint32_t v)
{
    v = wire::be32(v);
    std::memcpy(p, &v, 4);
    return p + 4;
}

// NOP NOP TS tsval tsecr: 12 bytes.
inline uint8_t *write_ts_option(uint8_t *p, uint32_t tsval, uint32_t tsecr)
{
    p = put_be32(p, kTsPrefixBe);
    p = put_be32(p, tsval);
    return put_be32(p, tsecr);
}

// NOP NOP SACK with n blocks: 4 + 8n bytes.
inline uint8_t *write_sack_option(uint8_t *p, const SeqRange *b, int n)
{
    *p++ = kOptNop;
    *p++ = kOptNop;
    *p++ = kOptSack;
    *p++ = uint8_t(2 + 8 * n);
    for (int i = 0; i < n; i++) {
        p = put_be32(p, b[i].start);
        p = put_be32(p, b[i].end);
    }
    return p;
}

} // namespace mars
