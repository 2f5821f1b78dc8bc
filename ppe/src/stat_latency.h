// ppe/src/stat_latency.h: `eta-stat --latency`: the latency breakdown of
// sampled requests (stats.h "Latency") as a table, JSON and Prometheus
// histograms. Kept apart from eta_stat.cc so the unit test formats a fixture.
#pragma once

#include "stats.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ppe::stats {

// What eta-stat copied of each engine's Latency block (eta_hist_copy: the
// engine keeps recording meanwhile).
struct LatencySnapshot {
    std::vector<Latency> engines;
};

// Copies every engine's block out of a mapped region.
void read_latency(const View &v, uint32_t n_engines, LatencySnapshot *out);

// The short name of a stage ("stack", "event", "program_woken", ...) and
// what it measures.
const char *latency_stage_name(uint32_t stage);
const char *latency_stage_help(uint32_t stage);

// All engines merged (histograms added bucket by bucket, counters summed).
Latency merge_latency(const LatencySnapshot &s);

std::string latency_text(const LatencySnapshot &s);
// {"sample_every", "resolution", "total": {counters, "stages": {name: {count,
// sum_us, p50_us, p90_us, p99_us, p999_us, max_us}}}, "engines": [...]}
nlohmann::ordered_json latency_json(const LatencySnapshot &s);
// eta_latency_stage_seconds histograms (label engine, stage; le at powers
// of two nanoseconds) and eta_latency_traces_total{engine, outcome}.
std::string latency_prometheus(const LatencySnapshot &s);

// The slow-request log (stats.h SlowLog): every engine's entries of its
// done and open intervals, slowest first.
struct SlowEntry {
    uint32_t engine;
    bool open; // the interval under way (else the last complete one)
    SlowRequest r;
};
std::vector<SlowEntry> slow_requests(const LatencySnapshot &s);
// `eta-stat --latency --slow`: one line per request, its stages in path order.
std::string slow_text(const LatencySnapshot &s);
// {"per_engine", "interval_s", "requests": [{engine, interval, request_us,
// woken, stamped, stages_us: {stage: us}}]} (also latency_json()'s "slow").
nlohmann::ordered_json slow_json(const LatencySnapshot &s);

} // namespace ppe::stats
