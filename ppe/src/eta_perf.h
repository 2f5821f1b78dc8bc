// ppe/src/eta_perf.h: what eta-perf's files share (internal to the tool):
// the wire protocol between client and server, the options, and the few
// helpers every mode uses. eta_perf.cc: the transports, the client, the
// kernel server and main(); eta_perf_dti_server.cc: the dti server.
#pragma once

#include <dti/dti.h>
#include "stream_pattern.h"

#include <cstdint>
#include <string>

namespace eta_perf {

constexpr uint32_t kHelloMagic = 0x46524550; // "PERF"
enum Mode : uint8_t { kSink = 0, kSource = 1, kEcho = 2 };

struct Hello {
    uint32_t magic;
    uint8_t mode; // what the server does
    uint8_t pad[3];
    uint32_t size;
    uint32_t duration_ms;
    uint64_t bytes; // kSource: how much to send (0: until duration_ms)
    uint64_t seed;
};
static_assert(sizeof(Hello) == 32);

// The last 16 bytes of a stream, and the receiver's answer to it. `crc`
// means something only with kTrailerHasCrc: a client run without --verify
// does not digest what it received, and says so instead of sending 0.
struct Trailer {
    uint64_t bytes;
    uint32_t crc;
    uint32_t flags;
};
constexpr uint32_t kTrailerHasCrc = 1;
// Digests run ISA-L's crc32_iscsi from CRC32C's standard initial value, so
// a running state is the complement of the standard CRC32C of the bytes so
// far: the value the engine's digest (DTI_OP_DIGEST) reports, complemented.
// States travel and print as they are.
constexpr uint32_t kCrcSeed = 0xffffffffu;

// The data every sender writes: stream_pattern.h (a function of the stream
// offset that has no power-of-two period, so stale receive-ring bytes show).
using Pattern = ppe::StreamPattern;

struct Options {
    std::string transport = "dti", mode = "stream", direction = "send", connect, socket;
    uint16_t port = 5201;
    uint32_t size = 64 * 1024;
    double duration = 5;
    uint64_t bytes = 0;
    uint32_t sndbuf = 0; // --sndbuf: the send buffer set before connect (0: none)
    bool verify = false, json = false, once = false;
    std::string digest = "app"; // --verify: who computes the CRC32C (app: this program, engine: eta-ppe)
};

extern dti_t *g_dti;
// --spin-us / --spin-fixed: how this program's DTI contexts wait (libdti's
// adaptive policy by default).
extern int64_t g_spin_us;
extern bool g_spin_fixed;

// What a sender prints about the receiver's report.
const char *peer_verdict(const Trailer &peer, uint64_t sent, uint32_t crc);
uint64_t now_ns();
double cpu_seconds();
[[noreturn]] void die(const std::string &msg);
// This thread's DTI context (attaches on first use; applies --spin-*).
dti_ctx_t *dti_context();

// The dti server: one event loop over every connection (eta_perf_dti_server.cc).
int run_dti_server(const Options &o);

} // namespace eta_perf
