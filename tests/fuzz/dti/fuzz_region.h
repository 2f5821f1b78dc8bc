// Feeds arbitrary bytes, as application-written region contents, to the
// engine-side decoder. Shared by the libFuzzer target and the corpus replayer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dti::fuzz {
// Runs one input; never fails (a crash, hang or sanitizer report is the bug).
void run_one(const uint8_t *data, size_t size);
} // namespace dti::fuzz
