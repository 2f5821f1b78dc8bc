// The decoder's fuzz input (fuzz_decoder.h): verdicts against a model.
#include "fuzz_decoder.h"

#include "decoder.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dti::fuzz {
namespace {

using engine::CommandBounds;
using engine::Decoded;
using engine::Reject;

[[noreturn]] void fail(const char *what, const dti_cmd &c, const Decoded &d)
{
    std::fprintf(stderr, "dti decoder fuzz: %s (op %u sock 0x%x arg0 0x%x arg1 0x%x offset 0x%llx tag %u: %s)\n",
                 what, unsigned(c.op), c.sock, c.arg0, c.arg1, static_cast<unsigned long long>(c.offset), c.tag,
                 engine::reject_text(d.reject));
    std::abort();
}

// A sum that overflows is seen as such: a range ending past 2^64 is outside
// the pool (which, being memory, ends below 2^64: decode_one sees to it).
bool in_pool(const CommandBounds &b, uint64_t offset, uint32_t length)
{
    uint64_t range_end = 0;
    const bool range_wraps = __builtin_add_overflow(offset, uint64_t{length}, &range_end);
    return offset >= b.pool_offset && !range_wraps && range_end <= b.pool_offset + b.pool_size;
}

// The rules of decoder.h, spelled out without the decoder's code.
Reject model(const dti_cmd &c, const CommandBounds &b)
{
    const bool signaled = c.op != DTI_OP_SEND && c.op != DTI_OP_RECV_RELEASE && c.op != DTI_OP_RECV_CANCEL &&
                          c.op != DTI_OP_TX_GROW;
    if (signaled && c.tag >= b.cmdq_entries)
        return Reject::kBadTag;
    if (c.op == DTI_OP_NOP || c.op == DTI_OP_SOCKET)
        return Reject::kNone;
    if ((c.sock & DTI_SLOT_MASK) >= b.max_sockets || (c.sock >> DTI_SLOT_BITS) == 0)
        return Reject::kBadSocket;
    switch (c.op) {
    case DTI_OP_BIND: return c.arg1 <= 65535 ? Reject::kNone : Reject::kBadPort;
    case DTI_OP_CONNECT: return c.arg1 >= 1 && c.arg1 <= 65535 ? Reject::kNone : Reject::kBadPort;
    case DTI_OP_LISTEN:
    case DTI_OP_CLOSE:
    case DTI_OP_ABORT:
    case DTI_OP_WATCH: return Reject::kNone;
    case DTI_OP_ACCEPT: return c.arg0 ? Reject::kNone : Reject::kNoAcceptCount;
    case DTI_OP_SHUTDOWN: return c.arg0 <= DTI_SHUT_RDWR ? Reject::kNone : Reject::kBadShutdown;
    case DTI_OP_SETSOCKOPT:
    case DTI_OP_GETSOCKOPT:
        return c.arg0 >= DTI_SO_NODELAY && c.arg0 <= DTI_SO_MCAST_LOOP6 ? Reject::kNone : Reject::kUnknownOption;
    case DTI_OP_RECV_INTO:
        if (!in_pool(b, c.offset, c.arg0))
            return Reject::kBadPoolRange;
        return c.arg0 ? Reject::kNone : Reject::kZeroLength;
    case DTI_OP_RECV_POST: {
        uint64_t end = 0;
        if (c.arg0 == 0)
            return Reject::kZeroLength;
        return c.offset != 0 && !__builtin_add_overflow(c.offset, uint64_t{c.arg0}, &end) ? Reject::kNone
                                                                                          : Reject::kBadAddress;
    }
    case DTI_OP_RECV_CANCEL: return Reject::kNone;
    case DTI_OP_SEND_FROM: return in_pool(b, c.offset, c.arg0) ? Reject::kNone : Reject::kBadPoolRange;
    case DTI_OP_SEND:
    case DTI_OP_RECV_RELEASE: return c.arg0 ? Reject::kNone : Reject::kZeroLength;
    case DTI_OP_DIGEST:
        return c.arg0 & ~uint32_t(DTI_DIGEST_TX | DTI_DIGEST_CHECK | DTI_DIGEST_CHAIN) ? Reject::kBadDigestFlags
                                                                                      : Reject::kNone;
    case DTI_OP_SEND_DGRAMS: return Reject::kNone; // the records are checked by the engine (udp.cc)
    case DTI_OP_DGRAM_CONNECT:
        return c.arg1 <= 65535 && (c.arg1 != 0 || c.arg0 == 0) ? Reject::kNone : Reject::kBadPort;
    case DTI_OP_MCAST: return c.value == 0 || c.value == 1 ? Reject::kNone : Reject::kBadMcast;
    case DTI_OP_MCAST6: {
        // join (0) or leave (1), of a group: ff00::/8, the first byte of the
        // value word in memory.
        uint8_t first;
        std::memcpy(&first, &c.value, 1);
        return (c.arg0 == 0 || c.arg0 == 1) && first == 0xff ? Reject::kNone : Reject::kBadMcast;
    }
    case DTI_OP_TX_GROW: return Reject::kNone; // the size is checked by the engine against the slot (cmd_tx_grow)
    case DTI_OP_BIND6:
    case DTI_OP_CONNECT6: {
        // The port first; then the flags (BIND6: V6ONLY only; CONNECT6:
        // none) and the address, in the value and offset words: a connect's
        // never multicast (ff00::/8, the first byte in memory) nor all
        // zeros (::); a bind's may be a group (a datagram socket's).
        const bool to = c.op == DTI_OP_CONNECT6;
        if (c.arg1 > 65535 || (to && c.arg1 == 0))
            return Reject::kBadPort;
        uint8_t ip[16];
        std::memcpy(ip, &c.value, 8);
        std::memcpy(ip + 8, &c.offset, 8);
        const bool unspecified = std::all_of(ip, ip + 16, [](uint8_t b) { return b == 0; });
        const bool flags_ok = to ? c.arg0 == 0 : (c.arg0 | DTI_BIND6_V6ONLY) == DTI_BIND6_V6ONLY;
        return flags_ok && !(to && (unspecified || ip[0] == 0xff)) ? Reject::kNone : Reject::kBadAddress6;
    }
    default: return Reject::kUnknownOp;
    }
}

// What an accepted command promises execute().
void check_accepted(const dti_cmd &c, const CommandBounds &b, const Decoded &d)
{
    const engine::Command &k = d.cmd;
    if (k.op != c.op || k.tag != c.tag || k.handle != c.sock)
        fail("identity fields changed", c, d);
    if (k.signaled && k.tag >= b.cmdq_entries)
        fail("answerable tag out of range", c, d);
    if (k.op == DTI_OP_NOP || k.op == DTI_OP_SOCKET)
        return;
    if (k.slot >= b.max_sockets || k.gen == 0 || (k.gen << DTI_SLOT_BITS | k.slot) != c.sock)
        fail("slot or generation wrong", c, d);
    if ((k.op == DTI_OP_RECV_INTO || k.op == DTI_OP_SEND_FROM) && !in_pool(b, k.offset, k.length))
        fail("pool range outside the pool", c, d);
    if ((k.op == DTI_OP_RECV_INTO || k.op == DTI_OP_SEND || k.op == DTI_OP_RECV_RELEASE) && k.length == 0)
        fail("zero length accepted", c, d);
    if (k.op == DTI_OP_RECV_POST && (k.length == 0 || k.offset == 0 || k.least == 0 || k.least > k.length))
        fail("posted receive without a length, an address or a sane least", c, d);
    if (k.op == DTI_OP_ACCEPT && (k.count == 0 || k.count > DTI_ACCEPT_MAX))
        fail("accept count out of range", c, d);
    if (k.op == DTI_OP_LISTEN && k.count > 65535)
        fail("backlog out of range", c, d);
    if ((k.op == DTI_OP_CONNECT || k.op == DTI_OP_CONNECT6) && k.address.port == 0)
        fail("connect to port 0", c, d);
    if (k.op == DTI_OP_BIND6 || k.op == DTI_OP_CONNECT6) {
        const engine::Endpoint6 e = engine::endpoint6_of(k);
        uint8_t ip[16];
        std::memcpy(ip, &c.value, 8);
        std::memcpy(ip + 8, &c.offset, 8);
        if (std::memcmp(e.ip, ip, 16) != 0 || e.port != c.arg1 || (k.op == DTI_OP_CONNECT6 && e.ip[0] == 0xff))
            fail("IPv6 endpoint changed, or a connect to a group accepted", c, d);
        if (k.flags & ~uint32_t(DTI_BIND6_V6ONLY))
            fail("IPv6 flags the engine does not know accepted", c, d);
    }
    if (k.op == DTI_OP_MCAST6) {
        uint8_t g[16], s[16], rg[16], rs[16];
        engine::mcast6_of(k, g, s);
        dti_cmd_addr6_get(&c, rg);
        dti_cmd_source6_get(&c, rs);
        if (std::memcmp(g, rg, 16) != 0 || std::memcmp(s, rs, 16) != 0 || g[0] != 0xff || k.flags > 1)
            fail("MCAST6 group or source changed, a group that is none, or neither join nor leave", c, d);
    }
    if (k.op == DTI_OP_SHUTDOWN && !k.shut_rd && !k.shut_wr)
        fail("shutdown of nothing", c, d);
    if (k.op == DTI_OP_TX_GROW && (k.signaled || k.length != c.arg0))
        fail("TX_GROW answered by completion, or its size changed", c, d);
}

} // namespace

void decode_one(const uint8_t *data, size_t size)
{
    uint8_t head[16] = {};
    if (size > 0) // an empty input has no bytes to read (data may be null)
        std::memcpy(head, data, size < sizeof head ? size : sizeof head);
    CommandBounds b;
    b.cmdq_entries = 1u << (head[0] % 16);
    b.max_sockets = (uint32_t(head[1]) | uint32_t(head[2]) << 8 | uint32_t(head[3]) << 16) % (DTI_SLOT_MASK + 1) + 1;
    std::memcpy(&b.pool_offset, head + 4, 8);
    uint32_t pool = 0;
    std::memcpy(&pool, head + 12, 4);
    // A pool is memory: it ends at 2^64 - 1 at most (decoder.h).
    b.pool_size = std::min<uint64_t>(pool, ~uint64_t{0} - b.pool_offset);
    for (size_t at = sizeof head; at < size; at += sizeof(dti_cmd)) {
        dti_cmd c{};
        std::memcpy(&c, data + at, size - at < sizeof c ? size - at : sizeof c);
        Decoded d = engine::decode_command(c, b);
        if (d.reject != model(c, b))
            fail("verdict differs from the model", c, d);
        if (d.ok())
            check_accepted(c, b, d);
        else if (d.reject != Reject::kBadTag && engine::reject_result(d.reject) >= 0)
            fail("refusal without an error result", c, d);
    }
}

} // namespace dti::fuzz
