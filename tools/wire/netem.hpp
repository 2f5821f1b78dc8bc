// netem.hpp: the impairment settings of eta-wire, parsed from the argument
// syntax of tc-netem(8) so that `eta-lab netem` takes the same words whether
// the kernel's sch_netem or eta-wire applies them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace eta::wire
{

// A random event with netem's optional correlation to the previous draw.
struct Chance {
    double probability = 0; // 0..1
    double correlation = 0; // 0..1
};

enum class JitterShape { uniform, normal };

struct NetemConfig {
    std::int64_t delay_ns = 0;
    std::int64_t jitter_ns = 0;
    double delay_correlation = 0;
    JitterShape distribution = JitterShape::uniform;
    Chance loss;
    Chance duplicate;
    Chance corrupt;
    Chance reorder;
    std::uint32_t gap = 0; // reorder: every gap-th packet may skip the delay (0: reorder off)
    std::uint64_t rate_bits_per_s = 0; // 0: no rate limit
    std::int32_t packet_overhead = 0;
    std::uint32_t cell_size = 0;
    std::int32_t cell_overhead = 0;
    std::uint32_t limit = 1000; // packets queued at most, as netem's default
    bool has_seed = false;
    std::uint64_t seed = 0;

    // True when frames would pass unchanged and at once.
    bool is_transparent() const;
};

// Largest accepted values; they keep the preallocated queue and every time
// computation far from overflow.
inline constexpr std::uint32_t max_limit = 100000;
inline constexpr std::int64_t max_delay_ns = 60'000'000'000; // one minute

// Parses tc-netem arguments ("delay 5ms 1ms loss 1% rate 100mbit ..."). On
// failure returns false and says why in `error`; `out` is then unspecified.
bool parse_netem(std::span<const std::string_view> args, NetemConfig &out, std::string &error);

// Splits a line into whitespace-separated words and parses them.
bool parse_netem_line(std::string_view line, NetemConfig &out, std::string &error);

// One line describing the settings in tc-netem words, for logs and status.
std::string describe(const NetemConfig &config);

} // namespace eta::wire
