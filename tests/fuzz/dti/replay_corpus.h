// Replays every file of a corpus directory through one fuzz target's code
// (built with any compiler, run as a unit test so default builds cover it);
// shared by the DTI fuzz targets' replay drivers.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace dti::fuzz {

// main() of a replay driver: `prog CORPUS_DIR`, each file to one(data, size).
template <class One> int replay_corpus(const char *prog, int argc, char **argv, One one)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s CORPUS_DIR\n", prog);
        return 2;
    }
    size_t n = 0;
    std::error_code ec;
    for (auto &entry : std::filesystem::directory_iterator(argv[1], ec)) {
        if (!entry.is_regular_file())
            continue;
        std::ifstream in(entry.path(), std::ios::binary);
        std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        one(bytes.data(), bytes.size());
        n++;
    }
    if (ec || n == 0) {
        std::fprintf(stderr, "%s: no corpus in %s\n", prog, argv[1]);
        return 1;
    }
    std::printf("replayed %zu inputs\n", n);
    return 0;
}

} // namespace dti::fuzz
