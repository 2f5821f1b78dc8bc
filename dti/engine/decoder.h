// decoder.h: the command decoder, the engine's hostile-input boundary.
//
// A command comes from a queue the application writes (and may scribble on
// while the engine reads). The engine copies it out once (read_cmd, word by
// word) and hands the copy here: decode_command() checks everything that can
// be checked without the engine's state (opcode, tag, the handle's slot index
// and generation bits, ports, shutdown direction, option ids, lengths, pool
// offset + length against the pool, digest flags) and gives back either a
// typed command or a reason. It is a pure function: no engine, no region, no
// attached application, so it is unit-tested and fuzzed on its own
// (tests/unit/dti/decoder_test.cc, tests/fuzz/dti/fuzz_decoder.cc).
//
// What needs state stays with execute(): whether the issuing process holds
// the handle (slot generation, holds), socket states (connected, listening,
// busy), free ring space and readable bytes, and a digest range's start and
// length against the stream position (digest.cc answers -ERANGE/-EINVAL in
// its own order). A rejected command is answered only after the handle was
// checked against the holder, so the answer an application sees is the same
// as before the decoder existed: the handle first, then the arguments.
#pragma once

#include <dti/dti.h>
#include <dti/engine.h>

#include "dti_abi.h"

#include <algorithm>
#include <cstdint>

namespace dti::engine {

// What the decoder checks against: a region's geometry, fixed at attach.
struct CommandBounds {
    uint32_t cmdq_entries = 0; // tags are indices into the command queue
    uint32_t max_sockets = 0;  // slot indices are below this
    uint64_t pool_offset = 0;  // the buffer pool: region bytes [pool_offset, pool_offset + pool_size)
    uint64_t pool_size = 0;    // (memory: pool_offset + pool_size does not pass 2^64 - 1)
};

// Why a command was refused. The order of the checks is the order below.
enum class Reject : uint8_t {
    kNone = 0,
    kBadTag,         // a command that is answered, with a tag that is no queue index: unanswerable
    kBadSocket,      // the handle's slot index is out of range or its generation is 0
    kUnknownOp,      // no such opcode
    kBadPort,        // BIND above 65535; CONNECT 0 or above 65535
    kBadShutdown,    // SHUTDOWN how is none of RD, WR, RDWR
    kUnknownOption,  // SETSOCKOPT/GETSOCKOPT of an option id the engine does not know
    kNoAcceptCount,  // ACCEPT of 0 connections
    kZeroLength,     // SEND, RECV_RELEASE, RECV_INTO or RECV_POST of no bytes
    kBadPoolRange,   // RECV_INTO/SEND_FROM: offset + length not inside the pool
    kBadDigestFlags, // DIGEST with flags other than TX, CHECK, CHAIN
    kBadAddress,     // RECV_POST: address 0, or address + length past 2^64 (the process's
                     // memory is checked by the kernel when the engine writes: -EFAULT then)
    kBadMcast,       // MCAST, MCAST6: neither join (0) nor leave (1); MCAST6: a group not in ff00::/8
    kBadAddress6,    // BIND6: flags other than V6ONLY;
                     // CONNECT6: flags (none defined), the unspecified address (::) or a multicast one
};

// Short text for logs and test messages ("ok" for kNone).
const char *reject_text(Reject r);

// The completion result a refused command gets: a negative errno or
// -DTI_E_*; 0 for kBadTag, which is never answered. SEND and RECV_RELEASE are
// never answered either (they are not signaled), whatever the reason.
int32_t reject_result(Reject r);

// A command that passed every state-free check. Which fields mean something
// depends on op (the comments name the ops).
struct Command {
    uint16_t op = 0;        // DTI_OP_*: a known opcode
    bool signaled = false;  // answered with a completion (all but SEND, RECV_RELEASE, RECV_CANCEL, TX_GROW)
    uint32_t tag = 0;       // < cmdq_entries when signaled
    uint32_t handle = 0;    // as written: completions name it
    uint32_t slot = 0;      // the handle's slot index, < max_sockets (not NOP, SOCKET)
    uint32_t gen = 0;       // the handle's generation bits, != 0 (not NOP, SOCKET)
    Endpoint address;       // BIND: local; CONNECT: remote (port 1..65535); BIND6, CONNECT6: the port only
    uint32_t count = 0;     // SOCKET: the kind (DTI_SOCK_*); LISTEN: backlog (<= 65535); ACCEPT: most connections (1..DTI_ACCEPT_MAX)
    uint32_t flags = 0;     // ACCEPT: DTI_ACCEPT_*; SEND: DTI_SEND_MORE/TAIL/END; SEND_FROM: DTI_SEND_MORE;
                            // DIGEST: DTI_DIGEST_*; WATCH: the DTI_POLL* events asked for;
                            // BIND6: DTI_BIND6_V6ONLY or 0
    bool shut_rd = false;   // SHUTDOWN: at least one of the two
    bool shut_wr = false;
    uint32_t option = 0;    // SETSOCKOPT, GETSOCKOPT: DTI_SO_*
    bool ring_option = false; // DTI_SO_RCVBUF/SNDBUF: the rings' sizes, answered by the engine
    Option transport_option = Option::kNoDelay; // the others: the transport's option
    int64_t value = 0;      // SETSOCKOPT: the value; DIGEST: the expected digest (low 32 bits);
                            // BIND6, CONNECT6: the address's first 8 bytes (endpoint6_of)
    uint32_t length = 0;    // SEND, RECV_RELEASE, RECV_INTO, RECV_POST, SEND_FROM: bytes (> 0 but SEND_FROM);
                            // TX_GROW: the send ring's new size (any value: the engine checks it)
                            // DIGEST: the range's length (digest.cc checks it with the position)
    uint64_t offset = 0;    // RECV_INTO, SEND_FROM: region offset inside the pool; DIGEST: start position;
                            // RECV_POST: the address in the issuing process (not 0, no wrap);
                            // BIND6, CONNECT6: the address's last 8 bytes (endpoint6_of)
    uint32_t least = 0;     // RECV_POST: complete once this many bytes landed (1..length)
};

// The IPv6 endpoint of a decoded BIND6/CONNECT6 (the address rides in the
// value and offset words: no field of its own, so the Command every other
// command builds stays the size it was).
inline Endpoint6 endpoint6_of(const Command &c)
{
    Endpoint6 e;
    __builtin_memcpy(e.ip, &c.value, 8);
    __builtin_memcpy(e.ip + 8, &c.offset, 8);
    e.port = c.address.port;
    return e;
}

// The group and source of a decoded MCAST6: the group in the value and
// offset words as endpoint6_of's address; the source (:: any) in the count,
// length, least and option words (decoding::check_arguments), which MCAST6
// has no other use for.
inline void mcast6_of(const Command &c, uint8_t group[16], uint8_t source[16])
{
    __builtin_memcpy(group, &c.value, 8);
    __builtin_memcpy(group + 8, &c.offset, 8);
    __builtin_memcpy(source, &c.count, 4);
    __builtin_memcpy(source + 4, &c.length, 4);
    __builtin_memcpy(source + 8, &c.least, 4);
    __builtin_memcpy(source + 12, &c.option, 4);
}

struct Decoded {
    Reject reject = Reject::kNone;
    Command cmd; // op, signaled, tag and handle are filled in also when refused
    bool ok() const { return reject == Reject::kNone; }
};

// The transport option for a DTI_SO_* id (RCVBUF/SNDBUF excluded); false
// for an id it does not know.
inline bool transport_option_of(uint32_t opt, Option *out)
{
    switch (opt) {
    case DTI_SO_NODELAY: *out = Option::kNoDelay; return true;
    case DTI_SO_CORK: *out = Option::kCork; return true;
    case DTI_SO_KEEPALIVE: *out = Option::kKeepAlive; return true;
    case DTI_SO_KEEPIDLE: *out = Option::kKeepIdleSec; return true;
    case DTI_SO_KEEPINTVL: *out = Option::kKeepIntvlSec; return true;
    case DTI_SO_KEEPCNT: *out = Option::kKeepCnt; return true;
    case DTI_SO_MAXSEG: *out = Option::kMaxSeg; return true;
    case DTI_SO_USER_TIMEOUT: *out = Option::kUserTimeoutMs; return true;
    case DTI_SO_LINGER: *out = Option::kLingerSec; return true;
    case DTI_SO_REUSEADDR: *out = Option::kReuseAddr; return true;
    case DTI_SO_REUSEPORT: *out = Option::kReusePort; return true;
    case DTI_SO_TOS: *out = Option::kTos; return true;
    case DTI_SO_RCVLOWAT: *out = Option::kRcvLowat; return true;
    case DTI_SO_NOTSENT_LOWAT: *out = Option::kNotsentLowat; return true;
    case DTI_SO_TCLASS: *out = Option::kTclass; return true;
    case DTI_SO_MCAST_ALL: *out = Option::kMulticastAll; return true;
    case DTI_SO_TTL: *out = Option::kTtl; return true;
    case DTI_SO_HOPLIMIT: *out = Option::kHopLimit; return true;
    case DTI_SO_MCAST_TTL: *out = Option::kMulticastTtl; return true;
    case DTI_SO_MCAST_HOPS: *out = Option::kMulticastHops; return true;
    case DTI_SO_MCAST_LOOP: *out = Option::kMulticastLoop; return true;
    case DTI_SO_MCAST_LOOP6: *out = Option::kMulticastLoop6; return true;
    default: return false;
    }
}

// Checks one command copied out of a queue against `bounds` (defined below:
// inline, it runs for every command).
inline Decoded decode_command(const dti_cmd &raw, const CommandBounds &bounds);

namespace decoding {

// [offset, offset + length) inside the pool, written so that no sum can wrap.
inline bool in_pool(const CommandBounds &b, uint64_t offset, uint32_t length)
{
    return offset >= b.pool_offset && offset - b.pool_offset <= b.pool_size &&
           length <= b.pool_size - (offset - b.pool_offset);
}

// The checks of the arguments of a command that names a socket.
inline Reject check_arguments(const dti_cmd &raw, const CommandBounds &b, Command *c)
{
    switch (raw.op) {
    case DTI_OP_BIND:
        if (raw.arg1 > 0xffff)
            return Reject::kBadPort;
        c->address = Endpoint{raw.arg0, uint16_t(raw.arg1)};
        return Reject::kNone;
    case DTI_OP_CONNECT:
        if (raw.arg1 > 0xffff || raw.arg1 == 0)
            return Reject::kBadPort;
        c->address = Endpoint{raw.arg0, uint16_t(raw.arg1)};
        return Reject::kNone;
    case DTI_OP_BIND6:
    case DTI_OP_CONNECT6: {
        const bool connect = raw.op == DTI_OP_CONNECT6;
        if (raw.arg1 > 0xffff || (connect && raw.arg1 == 0))
            return Reject::kBadPort;
        c->address = Endpoint{0, uint16_t(raw.arg1)};
        c->flags = raw.arg0;
        c->value = raw.value;
        c->offset = raw.offset;
        uint8_t ip[16];
        dti_cmd_addr6_get(&raw, ip);
        uint8_t any = 0;
        for (uint8_t b : ip)
            any |= b;
        // A group is a datagram socket's bind (it receives that group only:
        // MARS refuses it for a stream socket); nobody connects to one.
        if (raw.arg0 & ~(connect ? 0u : DTI_BIND6_V6ONLY) || (connect && (ip[0] == 0xff || any == 0)))
            return Reject::kBadAddress6;
        return Reject::kNone;
    }
    case DTI_OP_LISTEN:
        c->count = std::min<uint32_t>(raw.arg0, 65535);
        return Reject::kNone;
    case DTI_OP_ACCEPT:
        c->count = std::min<uint32_t>(raw.arg0, DTI_ACCEPT_MAX);
        c->flags = raw.arg1;
        return c->count == 0 ? Reject::kNoAcceptCount : Reject::kNone;
    case DTI_OP_SHUTDOWN:
        c->shut_rd = raw.arg0 == DTI_SHUT_RD || raw.arg0 == DTI_SHUT_RDWR;
        c->shut_wr = raw.arg0 == DTI_SHUT_WR || raw.arg0 == DTI_SHUT_RDWR;
        return c->shut_rd || c->shut_wr ? Reject::kNone : Reject::kBadShutdown;
    case DTI_OP_CLOSE:
    case DTI_OP_ABORT:
        return Reject::kNone;
    case DTI_OP_SETSOCKOPT:
    case DTI_OP_GETSOCKOPT:
        c->option = raw.arg0;
        c->value = raw.value;
        // Ring sizes are fixed per region: the engine answers those itself.
        c->ring_option = raw.arg0 == DTI_SO_RCVBUF || raw.arg0 == DTI_SO_SNDBUF;
        if (!c->ring_option && !transport_option_of(raw.arg0, &c->transport_option))
            return Reject::kUnknownOption;
        return Reject::kNone;
    case DTI_OP_WATCH:
        c->flags = raw.arg0 & (DTI_POLLIN | DTI_POLLOUT | DTI_POLLERR | DTI_POLLHUP | DTI_POLLRDHUP);
        return Reject::kNone;
    case DTI_OP_RECV_INTO:
        c->length = raw.arg0;
        c->offset = raw.offset;
        if (!in_pool(b, raw.offset, raw.arg0))
            return Reject::kBadPoolRange;
        return raw.arg0 == 0 ? Reject::kZeroLength : Reject::kNone;
    case DTI_OP_RECV_POST:
        c->length = raw.arg0;
        c->offset = raw.offset;
        c->least = std::clamp<uint32_t>(raw.arg1, 1, std::max<uint32_t>(raw.arg0, 1));
        if (raw.arg0 == 0)
            return Reject::kZeroLength;
        return raw.offset == 0 || raw.offset > ~uint64_t{0} - raw.arg0 ? Reject::kBadAddress : Reject::kNone;
    case DTI_OP_RECV_CANCEL:
        return Reject::kNone;
    case DTI_OP_SEND_FROM:
        c->length = raw.arg0; // 0 is a send of nothing: completes with 0
        c->offset = raw.offset;
        c->flags = raw.arg1 & DTI_SEND_MORE;
        return in_pool(b, raw.offset, raw.arg0) ? Reject::kNone : Reject::kBadPoolRange;
    case DTI_OP_SEND:
    case DTI_OP_RECV_RELEASE:
        c->length = raw.arg0;
        c->flags = raw.op == DTI_OP_SEND ? raw.arg1 & (DTI_SEND_MORE | DTI_SEND_TAIL | DTI_SEND_END) : 0;
        c->offset = raw.op == DTI_OP_SEND ? uint32_t(raw.offset) : 0; // DTI_SEND_END: the stream position
        return raw.arg0 == 0 ? Reject::kZeroLength : Reject::kNone;
    case DTI_OP_SEND_DGRAMS:
        c->offset = uint32_t(raw.offset); // the send ring position the records end at
        return Reject::kNone;
    case DTI_OP_TX_GROW:
        c->length = raw.arg0; // the ring's new size: checked against the slot's ring by the engine (cmd_tx_grow)
        return Reject::kNone;
    case DTI_OP_DGRAM_CONNECT:
        // 0.0.0.0:0 dissolves the association (AF_UNSPEC); else a port is needed.
        if (raw.arg1 > 0xffff || (raw.arg1 == 0 && raw.arg0 != 0))
            return Reject::kBadPort;
        c->address = Endpoint{raw.arg0, uint16_t(raw.arg1)};
        return Reject::kNone;
    case DTI_OP_MCAST:
        if (raw.value != 0 && raw.value != 1)
            return Reject::kBadMcast;
        c->address = Endpoint{raw.arg0, 0}; // the group
        c->length = raw.arg1;               // the source (0: any)
        c->flags = uint32_t(raw.value);     // 1: leave
        return Reject::kNone;
    case DTI_OP_MCAST6: {
        uint8_t group[16], source[16];
        dti_cmd_addr6_get(&raw, group);
        dti_cmd_source6_get(&raw, source);
        c->flags = raw.arg0; // 1: leave
        c->value = raw.value;
        c->offset = raw.offset;
        __builtin_memcpy(&c->count, source, 4);
        __builtin_memcpy(&c->length, source + 4, 4);
        __builtin_memcpy(&c->least, source + 8, 4);
        __builtin_memcpy(&c->option, source + 12, 4);
        return (raw.arg0 == 0 || raw.arg0 == 1) && group[0] == 0xff ? Reject::kNone : Reject::kBadMcast;
    }
    case DTI_OP_DIGEST:
        if (raw.arg0 & ~uint32_t(DTI_DIGEST_TX | DTI_DIGEST_CHECK | DTI_DIGEST_CHAIN))
            return Reject::kBadDigestFlags;
        c->flags = raw.arg0;
        c->length = raw.arg1;
        c->offset = uint32_t(raw.offset);
        c->value = uint32_t(raw.value);
        return Reject::kNone;
    default:
        return Reject::kUnknownOp;
    }
}

} // namespace decoding

inline Decoded decode_command(const dti_cmd &raw, const CommandBounds &bounds)
{
    Decoded d;
    Command &c = d.cmd;
    c.op = raw.op;
    c.tag = raw.tag;
    c.handle = raw.sock;
    // SEND and RECV_RELEASE are the data path's unsignaled commands, and
    // RECV_CANCEL, whose answer is the post's own completion, and TX_GROW,
    // answered in the socket table (tx_grow_ack): no completion, so their
    // tag means nothing.
    c.signaled = raw.op != DTI_OP_SEND && raw.op != DTI_OP_RECV_RELEASE && raw.op != DTI_OP_RECV_CANCEL &&
                 raw.op != DTI_OP_TX_GROW;
    if (c.signaled && raw.tag >= bounds.cmdq_entries) {
        d.reject = Reject::kBadTag; // no valid tag to answer with: the app's own bookkeeping is corrupt
        return d;
    }
    if (raw.op == DTI_OP_SOCKET)
        c.count = raw.arg0; // the kind (DTI_SOCK_*): execute() answers one it does not know
    if (raw.op == DTI_OP_NOP || raw.op == DTI_OP_SOCKET)
        return d; // they name no socket
    c.slot = raw.sock & DTI_SLOT_MASK;
    c.gen = raw.sock >> DTI_SLOT_BITS;
    if (c.slot >= bounds.max_sockets || c.gen == 0) {
        d.reject = Reject::kBadSocket;
        return d;
    }
    d.reject = decoding::check_arguments(raw, bounds, &c);
    return d;
}

} // namespace dti::engine
