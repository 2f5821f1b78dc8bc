// libFuzzer entry: arbitrary region contents against the engine-side decoder.
#include "fuzz_region.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dti::fuzz::run_one(data, size);
    return 0;
}
