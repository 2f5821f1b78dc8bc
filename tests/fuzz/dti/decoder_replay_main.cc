// Replays every file of a corpus directory through the decoder fuzz target's code
// (built with any compiler, run as a unit test so default builds cover it).
#include "fuzz_decoder.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: dti_decoder_fuzz_replay CORPUS_DIR\n");
        return 2;
    }
    size_t n = 0;
    std::error_code ec;
    for (auto &entry : std::filesystem::directory_iterator(argv[1], ec)) {
        if (!entry.is_regular_file())
            continue;
        std::ifstream in(entry.path(), std::ios::binary);
        std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        dti::fuzz::decode_one(bytes.data(), bytes.size());
        n++;
    }
    if (ec || n == 0) {
        std::fprintf(stderr, "dti_decoder_fuzz_replay: no corpus in %s\n", argv[1]);
        return 1;
    }
    std::printf("replayed %zu inputs\n", n);
    return 0;
}
