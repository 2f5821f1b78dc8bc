// tests/unit/mars/sim/malformed.h: TEST FIXTURE. Generators for every class
// of malformed frame, each built from a valid segment so that exactly one
// rule is broken. Used by the malformed-frame tests and to seed the fuzz
// corpus.
#pragma once

#include "frame.h"

#include <string>
#include <vector>

namespace mars::sim {

struct MalformedCase {
    std::string name;
    std::vector<uint8_t> frame;
    // The counter that must count the drop; nullptr where several are
    // defensible (bad flag combinations): then any drop counter will do.
    uint64_t StackStats::*counter;
};

// `data` is a valid in-order data segment on an established connection,
// `syn` a valid SYN to a listener. Every returned frame breaks one rule.
std::vector<MalformedCase> malformed_cases(const TcpSpec &data, const TcpSpec &syn);

// Sum of every drop counter (drop_*, and IPv6's ip6_drop_*, icmp6_drop, nd_drop_*).
uint64_t total_drops(const StackStats &s);

} // namespace mars::sim
