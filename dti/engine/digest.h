// digest.h: CRC32C payload digests the engine computes over a connection's
// in-order byte stream (DTI_OP_DIGEST), one receive and one send direction
// per socket.
//
// Positions are the free-running 32-bit byte counters both sides already
// share for a direction (receive: bytes produced/consumed; send: bytes
// committed/released). A range request names [start, start + len) in that
// counter. Bytes already in the ring when the request comes are digested at
// once; the rest as the engine makes them available (the receive side: when
// they become in-order and readable, in the same engine pass that placed them
// in the ring, so they are still in the engine core's cache; the send side:
// when the application commits them). Out-of-order arrival and
// retransmissions never reach this code: the transport advances the readable
// end only over in-order bytes, once each.
//
// The state is fixed-size (no allocation, no system call on the data path):
// kMaxRanges requests per direction and a chain word for running digests.
// The digest is the standard CRC32C (iSCSI, NVMe/TCP): initial value ~0,
// final complement; computed with ISA-L's crc32_iscsi.
#pragma once

#include <cstdint>

namespace dti::engine::digest {

constexpr uint32_t kMaxRanges = 8;    // pending requests per direction
constexpr uint32_t kMaxLen = 1u << 31; // longest range: positions compare within half the counter

// A byte ring as the engine sees it: the byte at position p lives at
// base[(origin + p) & mask].
struct Ring {
    const uint8_t *base;
    uint32_t mask;
    uint32_t origin;
};

// ISA-L's raw CRC32C state over n bytes from position `from` (n <= ring
// size), continuing `raw` (start with kInit; the digest is ~raw).
uint32_t crc_ring(uint32_t raw, const Ring &r, uint32_t from, uint32_t n);
// The standard CRC32C of a flat buffer (tests, examples' engine side).
uint32_t crc32c(const void *p, uint64_t n);
constexpr uint32_t kInit = 0xffffffffu;

enum Flags : uint32_t {
    kCheck = 1u << 0, // compare with `expected`; mismatch: -EBADMSG
    kChain = 1u << 1, // continue the direction's running digest (see Direction)
};

struct Request {
    uint16_t ctx;
    uint32_t tag;
    uint32_t start, len;
    uint32_t flags;
    uint32_t expected;
};

struct Range {
    uint16_t ctx;
    uint32_t tag;
    uint32_t next, end; // next position to digest; one past the last
    uint32_t raw;
    uint32_t expected;
    uint32_t flags;
    bool wait_init; // chained behind a pending chained range: raw comes from it
};

// What a finished range tells its issuer.
struct Done {
    uint16_t ctx;
    uint32_t tag;
    int32_t res;     // 0, -EBADMSG (check failed) or the error that ended it
    uint32_t crc;    // the digest (valid when res is 0 or -EBADMSG)
};

// One direction of one socket. Chained ranges (kChain) must follow one
// another without gaps; each reports the CRC32C of everything from the first
// chained range's start through its own end: a running digest of the stream
// the application reads (or writes) in pieces of its choosing.
class Direction {
  public:
    // A new request. `floor` is the oldest position still in the ring (the
    // engine's consumed / released count), `avail` one past the newest the
    // engine has made available. Returns 1 when it finished at once (*done
    // filled), 0 when it waits for data, or a negative errno: -ERANGE (its
    // start is no longer in the ring), -EINVAL (empty, too long, or a chained
    // range that does not continue the chain), -EBUSY (kMaxRanges waiting).
    int add(const Request &q, const Ring &r, uint32_t floor, uint32_t avail, Done *done, uint64_t *digested);
    // The available end moved to `avail`: digests the new bytes for every
    // waiting range, in request order. Writes finished ranges to out (room for
    // kMaxRanges) and returns how many; adds the bytes digested to *digested.
    uint32_t advance(const Ring &r, uint32_t avail, Done *out, uint64_t *digested);
    // Ends every waiting range whose end lies beyond `avail` (the stream
    // ended there) with `res`; returns how many (written to out).
    uint32_t end_beyond(uint32_t avail, int32_t res, Done *out);
    // Ends every waiting range (close, abort) or only those of contexts in
    // ctx_mask (bit = context index); returns how many.
    uint32_t cancel(uint64_t ctx_mask, int32_t res, Done *out);
    uint32_t pending() const { return n_; }

  private:
    void finish(uint32_t i, Done *out);
    void remove(uint32_t i);
    Range ranges_[kMaxRanges];
    uint32_t n_ = 0;
    bool chain_on_ = false;
    uint32_t chain_end_ = 0; // where the next chained range must start
    uint32_t chain_raw_ = kInit; // running state through the last finished chained range
};

// A socket's two directions.
struct SocketDigests {
    Direction rx, tx;
};

} // namespace dti::engine::digest
