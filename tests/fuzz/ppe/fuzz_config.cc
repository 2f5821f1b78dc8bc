// libFuzzer entry: arbitrary bytes as an eta-ppe config file. parse_config
// must return (true, or false with one message line naming the file) and
// never crash, hang or read out of bounds.
#include "config.h"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string text(reinterpret_cast<const char *>(data), size);
    ppe::Config c;
    std::string err;
    if (!ppe::parse_config("fuzz.toml", text, &c, &err)) {
        if (err.rfind("fuzz.toml", 0) != 0) std::abort();     // every message names the file
        if (err.find('\n') != std::string::npos) std::abort(); // in one line
    } else if (c.ports.empty()) {
        std::abort(); // an accepted config always has a port
    }
    return 0;
}
