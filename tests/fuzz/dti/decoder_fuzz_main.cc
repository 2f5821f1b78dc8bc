// libFuzzer entry: arbitrary commands against the command decoder alone.
#include "fuzz_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dti::fuzz::decode_one(data, size);
    return 0;
}
