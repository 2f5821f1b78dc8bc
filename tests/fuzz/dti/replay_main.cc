// Replays a corpus through the region fuzz target's code (replay_corpus.h).
#include "fuzz_region.h"
#include "replay_corpus.h"

int main(int argc, char **argv)
{
    return dti::fuzz::replay_corpus("dti_fuzz_replay", argc, argv,
                                    [](const uint8_t *data, size_t size) { dti::fuzz::run_one(data, size); });
}
