// tests/fuzz/mars/replay_main.cc: runs the fuzz entry over every file of the
// given corpus directories (or files), without libFuzzer, so the default
// (gcc) build replays the checked-in corpus as a unit test. Fails when it
// finds nothing to replay; a crash or broken invariant aborts.
//
// It also checks that the reused world is reset to the same state for every
// input (fuzz_input.h): each input runs once after all those before it (the
// way libFuzzer runs them), then once more in a freshly built world, and
// both runs must give the same digest.
//
// With MARS_FUZZ_PRINT_DIGESTS=1 it prints each input's digest (run in
// order) as "DIGEST FILE", to compare two builds of the fixture: a fixture
// that plays the peer the same way gives the same digests.
#include "fuzz_input.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
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
    std::vector<fs::path> files;
    for (int a = 1; a < argc; a++) {
        std::vector<fs::path> here;
        std::error_code ec;
        if (fs::is_directory(argv[a], ec)) {
            for (auto &e : fs::directory_iterator(argv[a])) {
                if (e.is_regular_file()) here.push_back(e.path());
            }
        } else {
            here.emplace_back(argv[a]);
        }
        std::sort(here.begin(), here.end());
        files.insert(files.end(), here.begin(), here.end());
    }
    std::vector<std::vector<uint8_t>> inputs;
    for (auto &f : files) {
        std::ifstream in(f, std::ios::binary);
        if (!in) {
            std::fprintf(stderr, "cannot read %s\n", f.c_str());
            return 2;
        }
        inputs.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    // In order, each after all the others before it.
    std::vector<uint64_t> digests;
    for (auto &data : inputs) digests.push_back(mars::fuzz::run_one_digest(data.data(), data.size()));
    if (const char *e = std::getenv("MARS_FUZZ_PRINT_DIGESTS"); e && *e == '1') {
        for (size_t i = 0; i < inputs.size(); i++) std::printf("%016" PRIx64 " %s\n", digests[i], files[i].filename().c_str());
    }
    // Each first, in a world built for it alone.
    size_t differing = 0;
    for (size_t i = 0; i < inputs.size(); i++) {
        mars::fuzz::discard_worlds();
        const uint64_t fresh = mars::fuzz::run_one_digest(inputs[i].data(), inputs[i].size());
        if (fresh != digests[i]) {
            std::fprintf(stderr, "not deterministic: %s gives %016" PRIx64 " run first, %016" PRIx64 " after the inputs before it\n",
                         files[i].c_str(), fresh, digests[i]);
            differing++;
        }
    }
    mars::fuzz::discard_worlds();
    std::printf("replayed %zu inputs twice (after others, then first): %zu not deterministic\n", inputs.size(), differing);
    if (differing) return 1;
    return inputs.empty() ? 1 : 0;
}
