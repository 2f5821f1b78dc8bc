// Replays a corpus through the decoder fuzz target's code (replay_corpus.h).
#include "fuzz_decoder.h"
#include "replay_corpus.h"

int main(int argc, char **argv)
{
    return dti::fuzz::replay_corpus("dti_decoder_fuzz_replay", argc, argv,
                                    [](const uint8_t *data, size_t size) { dti::fuzz::decode_one(data, size); });
}
