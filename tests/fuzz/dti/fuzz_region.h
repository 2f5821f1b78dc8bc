// Feeds arbitrary bytes, as application-written region contents, to the
// engine-side decoder. Shared by the libFuzzer target and the corpus replayer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dti::fuzz {
// Runs one input. A crash, hang or sanitizer report is a bug; so is a broken
// invariant, which is reported on stderr and aborts (libFuzzer and the
// replayer both see a crash). The region lies between inaccessible guard
// pages, so a touch outside it crashes even without AddressSanitizer.
void run_one(const uint8_t *data, size_t size);
} // namespace dti::fuzz
