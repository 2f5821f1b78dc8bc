// tests/fuzz/mars/libfuzzer_main.cc: libFuzzer entry for the mars input path.
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return mars::fuzz::run_one(data, size);
}
