// tests/fuzz/mars/replay_main.cc: runs the fuzz entry over every file of the
// given corpus directories (or files), without libFuzzer, so the default
// (gcc) build replays the checked-in corpus as a unit test. Fails when it
// finds nothing to replay; a crash or broken invariant aborts.
#include "fuzz_input.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

int main(int argc, char **argv)
{
    namespace fs = std::filesystem;
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    size_t replayed = 0;
    for (int a = 1; a < argc; a++) {
        std::vector<fs::path> files;
        std::error_code ec;
        if (fs::is_directory(argv[a], ec)) {
            for (auto &e : fs::directory_iterator(argv[a])) {
                if (e.is_regular_file()) files.push_back(e.path());
            }
        } else {
            files.emplace_back(argv[a]);
        }
        std::sort(files.begin(), files.end());
        for (auto &f : files) {
            std::ifstream in(f, std::ios::binary);
            if (!in) {
                std::fprintf(stderr, "cannot read %s\n", f.c_str());
                return 2;
            }
            std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            mars::fuzz::run_one(data.data(), data.size());
            replayed++;
        }
    }
    std::printf("replayed %zu inputs\n", replayed);
    return replayed ? 0 : 1;
}
