// Feeds arbitrary bytes to the command decoder (dti/engine/decoder.h) alone:
// no engine, no region, no attached application, so one input costs
// microseconds. Shared by the libFuzzer target and the corpus replayer.
//
// Input: 16 bytes of bounds, then 64-byte commands (a last partial one is
// padded with zeros):
//   byte 0        log2 of the command queue's entries (mod 16: 1 .. 32768)
//   bytes 1..3    max_sockets - 1 (little endian, mod 2^20: 1 .. 1,048,576)
//   bytes 4..11   the pool's offset in the region (any 64-bit value)
//   bytes 12..15  the pool's size (cut so that the pool ends below 2^64)
#pragma once

#include <cstddef>
#include <cstdint>

namespace dti::fuzz {
// Decodes every command of the input and checks each verdict against a
// plain model of the rules written with checked sums (no wrap unseen).
// A disagreement is reported on stderr and aborts (libFuzzer and the
// replayer both see a crash).
void decode_one(const uint8_t *data, size_t size);
} // namespace dti::fuzz
