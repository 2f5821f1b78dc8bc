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
    kZeroLength,     // SEND, RECV_RELEASE or RECV_INTO of no bytes
    kBadPoolRange,   // RECV_INTO/SEND_FROM: offset + length not inside the pool
    kBadDigestFlags, // DIGEST with flags other than TX, CHECK, CHAIN
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
    bool signaled = false;  // answered with a completion (all but SEND and RECV_RELEASE)
    uint32_t tag = 0;       // < cmdq_entries when signaled
    uint32_t handle = 0;    // as written: completions name it
    uint32_t slot = 0;      // the handle's slot index, < max_sockets (not NOP, SOCKET)
    uint32_t gen = 0;       // the handle's generation bits, != 0 (not NOP, SOCKET)
    Endpoint address;       // BIND: local; CONNECT: remote (port 1..65535)
    uint32_t count = 0;     // LISTEN: backlog (<= 65535); ACCEPT: most connections (1..DTI_ACCEPT_MAX)
    uint32_t flags = 0;     // ACCEPT: DTI_ACCEPT_*; SEND, SEND_FROM: DTI_SEND_MORE;
                            // DIGEST: DTI_DIGEST_*; WATCH: the DTI_POLL* events asked for
    bool shut_rd = false;   // SHUTDOWN: at least one of the two
    bool shut_wr = false;
    uint32_t option = 0;    // SETSOCKOPT, GETSOCKOPT: DTI_SO_*
    bool ring_option = false; // DTI_SO_RCVBUF/SNDBUF: fixed per region, answered by the engine
    Option transport_option = Option::kNoDelay; // the others: the transport's option
    int64_t value = 0;      // SETSOCKOPT: the value; DIGEST: the expected digest (low 32 bits)
    uint32_t length = 0;    // SEND, RECV_RELEASE, RECV_INTO, SEND_FROM: bytes (> 0 but SEND_FROM);
                            // DIGEST: the range's length (digest.cc checks it with the position)
    uint64_t offset = 0;    // RECV_INTO, SEND_FROM: region offset inside the pool; DIGEST: start position
};

struct Decoded {
    Reject reject = Reject::kNone;
    Command cmd; // op, signaled, tag and handle are filled in also when refused
    bool ok() const { return reject == Reject::kNone; }
};

// The transport option for a DTI_SO_* id (RCVBUF/SNDBUF excluded); false
// for an id it does not know.
bool transport_option_of(uint32_t opt, Option *out);

// Checks one command copied out of a queue against `bounds`.
Decoded decode_command(const dti_cmd &raw, const CommandBounds &bounds);

} // namespace dti::engine
