// tests/fuzz/mars/seeds_main.cc: writes the seed corpus (fuzz_input.cc's
// seed_inputs()) into a directory. The result is checked in as corpus/:
//   build-dir/tests/fuzz/mars/mars_fuzz_seeds tests/fuzz/mars/corpus
#include "fuzz_input.h"

#include <cstdio>
#include <fstream>

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
        return 2;
    }
    int n = 0;
    for (auto &[name, data] : mars::fuzz::seed_inputs()) {
        std::string path = std::string(argv[1]) + "/" + name;
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char *>(data.data()), std::streamsize(data.size()));
        if (!out) {
            std::fprintf(stderr, "cannot write %s\n", path.c_str());
            return 1;
        }
        n++;
    }
    std::printf("wrote %d seeds\n", n);
    return 0;
}
