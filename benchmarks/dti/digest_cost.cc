// digest_cost: what the engine's payload digest (dti/engine/digest.h, ISA-L
// crc32_iscsi) costs per byte where it runs: right after the bytes were
// copied into the receive ring (in cache, as in the engine's pass), and, for
// comparison, over bytes that come from memory (a program digesting after a
// copy it made long before, or a digest over DMA-written bytes).
// tools/eta bench digest prints both as seconds per GiB beside the
// application's CPU. Run: build/benchmarks/dti/digest_cost
#include "digest.h"

#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

namespace {

namespace dg = dti::engine::digest;

constexpr uint32_t kRing = 256 * 1024;
constexpr uint32_t kSegment = 1448; // an Ethernet MSS

// MARS's copy of one segment into the ring, then the digest of those bytes.
void BM_CopyThenDigest(benchmark::State &st)
{
    std::vector<uint8_t> ring(kRing), frame(kSegment, 0x5a);
    const dg::Ring r{ring.data(), kRing - 1, 0};
    uint32_t pos = 0, raw = dg::kInit;
    for (auto _ : st) {
        const uint32_t off = pos & (kRing - 1), first = std::min(kSegment, kRing - off);
        std::memcpy(ring.data() + off, frame.data(), first);
        std::memcpy(ring.data(), frame.data() + first, kSegment - first);
        raw = dg::crc_ring(raw, r, pos, kSegment);
        pos += kSegment;
    }
    benchmark::DoNotOptimize(raw);
    st.SetBytesProcessed(int64_t(st.iterations()) * kSegment);
}
BENCHMARK(BM_CopyThenDigest);

// The copy alone: the difference is the digest's cost on hot bytes.
void BM_CopyOnly(benchmark::State &st)
{
    std::vector<uint8_t> ring(kRing), frame(kSegment, 0x5a);
    uint32_t pos = 0;
    for (auto _ : st) {
        const uint32_t off = pos & (kRing - 1), first = std::min(kSegment, kRing - off);
        std::memcpy(ring.data() + off, frame.data(), first);
        std::memcpy(ring.data(), frame.data() + first, kSegment - first);
        benchmark::ClobberMemory();
        pos += kSegment;
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * kSegment);
}
BENCHMARK(BM_CopyOnly);

// The digest over bytes from memory: 64 KiB pieces of a 512 MiB buffer.
void BM_DigestFromMemory(benchmark::State &st)
{
    constexpr size_t kBuf = 512u << 20, kPiece = 64 * 1024;
    std::vector<uint8_t> buf(kBuf, 0x33);
    size_t at = 0;
    uint32_t raw = dg::kInit;
    for (auto _ : st) {
        const dg::Ring r{buf.data() + at, kPiece - 1, 0};
        raw = dg::crc_ring(raw, r, 0, kPiece);
        at = (at + kPiece) % kBuf;
    }
    benchmark::DoNotOptimize(raw);
    st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(kPiece));
}
BENCHMARK(BM_DigestFromMemory);

} // namespace

BENCHMARK_MAIN();
