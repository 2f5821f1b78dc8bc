// ppe/src/stat_latency.cc: eta-stat's latency breakdown (stat_latency.h).
#include "stat_latency.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace ppe::stats {

namespace {

struct StageDesc {
    const char *name, *help;
};
constexpr StageDesc kStages[kLatencyStages] = {
    {"stack", "frame received by the engine -> through MARS (rx burst to Stack::input's return)"},
    {"event", "through MARS -> the readable event published to the program"},
    {"program_woken", "event published -> the reply command taken, the program slept and was woken"},
    {"program_spin", "event published -> the reply command taken, the program was polling"},
    {"transmit", "reply command taken -> the pass that handed the reply to the port began"},
    {"port", "that pass: MARS output and the port's tx burst (af_packet: its send system call)"},
    {"engine", "stack + event + transmit of one request: the engine's share before the port"},
    {"request", "request frame received -> reply handed to the port (stack+event+program+transmit)"},
};

double us(uint64_t ns) { return double(ns) / 1000.0; }

void copy_block(Latency *dst, const Latency *src)
{
    const uint64_t *s = reinterpret_cast<const uint64_t *>(&src->c);
    uint64_t *d = reinterpret_cast<uint64_t *>(&dst->c);
    for (size_t i = 0; i < sizeof(LatencyCounters) / 8; i++) d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < kLatencyStages; i++) eta_hist_copy(&dst->stages[i], &src->stages[i]);
}

nlohmann::ordered_json block_json(const Latency &l)
{
    using json = nlohmann::ordered_json;
    json stages = json::object();
    for (uint32_t i = 0; i < kLatencyStages; i++) {
        const eta_hist &h = l.stages[i];
        stages[kStages[i].name] = json{{"count", eta_hist_count(&h)},
                                       {"sum_us", us(h.sum)},
                                       {"p50_us", us(eta_hist_quantile(&h, 0.50))},
                                       {"p90_us", us(eta_hist_quantile(&h, 0.90))},
                                       {"p99_us", us(eta_hist_quantile(&h, 0.99))},
                                       {"p999_us", us(eta_hist_quantile(&h, 0.999))},
                                       {"max_us", us(h.max)}};
    }
    return json{{"traces", l.c.traces},       {"completed", l.c.completed}, {"woken", l.c.woken},
                {"no_event", l.c.no_event},   {"no_reply", l.c.no_reply},   {"stages", stages}};
}

std::string labels(size_t e, uint32_t stage)
{
    return "engine=\"" + std::to_string(e) + "\",stage=\"" + kStages[stage].name + "\"";
}

} // namespace

void read_latency(const View &v, uint32_t n_engines, LatencySnapshot *out)
{
    out->engines.assign(n_engines, Latency{});
    for (uint32_t e = 0; e < n_engines; e++) copy_block(&out->engines[e], v.latency(e));
}

const char *latency_stage_name(uint32_t stage) { return stage < kLatencyStages ? kStages[stage].name : "?"; }
const char *latency_stage_help(uint32_t stage) { return stage < kLatencyStages ? kStages[stage].help : "?"; }

Latency merge_latency(const LatencySnapshot &s)
{
    Latency m{};
    for (const Latency &l : s.engines) {
        if (l.c.sample_every > m.c.sample_every) m.c.sample_every = l.c.sample_every;
        m.c.traces += l.c.traces;
        m.c.no_event += l.c.no_event;
        m.c.no_reply += l.c.no_reply;
        m.c.completed += l.c.completed;
        m.c.woken += l.c.woken;
        for (uint32_t i = 0; i < kLatencyStages; i++) eta_hist_merge(&m.stages[i], &l.stages[i]);
    }
    return m;
}

std::string latency_text(const LatencySnapshot &s)
{
    const Latency m = merge_latency(s);
    std::string out;
    char b[512];
    if (!m.c.sample_every) {
        out += "latency sampling is off ([engine] latency_sample = 0)\n";
    } else {
        std::snprintf(b, sizeof b,
                      "latency of sampled requests (one in %" PRIu64 " frames received; %zu engines): traces %" PRIu64
                      ", complete %" PRIu64 " (program woken in %" PRIu64 "), no readable event %" PRIu64
                      ", no reply within 1 s %" PRIu64 "\n",
                      m.c.sample_every, s.engines.size(), m.c.traces, m.c.completed, m.c.woken, m.c.no_event,
                      m.c.no_reply);
        out += b;
    }
    out += "times in us, each a bucket's upper end (buckets at most 1/16 of their value wide); max exact\n";
    std::snprintf(b, sizeof b, "%-14s %10s %10s %10s %10s %10s %10s  %s\n", "stage", "count", "p50", "p90", "p99",
                  "p99.9", "max", "from -> to");
    out += b;
    for (uint32_t i = 0; i < kLatencyStages; i++) {
        const eta_hist &h = m.stages[i];
        std::snprintf(b, sizeof b, "%-14s %10" PRIu64 " %10.2f %10.2f %10.2f %10.2f %10.2f  %s\n", kStages[i].name,
                      eta_hist_count(&h), us(eta_hist_quantile(&h, 0.5)), us(eta_hist_quantile(&h, 0.9)),
                      us(eta_hist_quantile(&h, 0.99)), us(eta_hist_quantile(&h, 0.999)), us(h.max), kStages[i].help);
        out += b;
    }
    return out;
}

nlohmann::ordered_json latency_json(const LatencySnapshot &s)
{
    using json = nlohmann::ordered_json;
    const Latency m = merge_latency(s);
    json engines = json::array();
    for (size_t e = 0; e < s.engines.size(); e++) {
        json j = block_json(s.engines[e]);
        j["engine"] = e;
        engines.push_back(j);
    }
    json stage_help = json::object();
    for (uint32_t i = 0; i < kLatencyStages; i++) stage_help[kStages[i].name] = kStages[i].help;
    return json{{"sample_every", m.c.sample_every},
                {"resolution", 1.0 / ETA_HIST_SUB}, // a percentile is its bucket's upper end: at most this share above
                {"stage_help", stage_help},
                {"total", block_json(m)},
                {"engines", engines}};
}

std::string latency_prometheus(const LatencySnapshot &s)
{
    std::string out;
    char b[256];
    out += "# HELP eta_latency_stage_seconds time of a sampled request in one stage of its path through the engine "
           "(stage: stack, event, program_woken, program_spin, transmit, port, engine, request)\n"
           "# TYPE eta_latency_stage_seconds histogram\n";
    // le: powers of two nanoseconds, 128 ns .. 2^35 ns; a bucket counts the
    // values below its le (values equal to it differ by a nanosecond).
    for (size_t e = 0; e < s.engines.size(); e++) {
        for (uint32_t i = 0; i < kLatencyStages; i++) {
            const eta_hist &h = s.engines[e].stages[i];
            const std::string l = labels(e, i);
            for (uint32_t k = 7; k <= ETA_HIST_TOP_EXP; k++) {
                std::snprintf(b, sizeof b, "eta_latency_stage_seconds_bucket{%s,le=\"%.9g\"} %" PRIu64 "\n", l.c_str(),
                              double(uint64_t(1) << k) / 1e9, eta_hist_count_upto(&h, (uint64_t(1) << k) - 1));
                out += b;
            }
            const uint64_t n = eta_hist_count(&h);
            std::snprintf(b, sizeof b, "eta_latency_stage_seconds_bucket{%s,le=\"+Inf\"} %" PRIu64 "\n", l.c_str(), n);
            out += b;
            std::snprintf(b, sizeof b, "eta_latency_stage_seconds_sum{%s} %.9g\n", l.c_str(), double(h.sum) / 1e9);
            out += b;
            std::snprintf(b, sizeof b, "eta_latency_stage_seconds_count{%s} %" PRIu64 "\n", l.c_str(), n);
            out += b;
        }
    }
    out += "# HELP eta_latency_traces_total sampled requests by how their trace ended (started: all; complete: every "
           "stage; no_event: the frame made no readable event; no_reply: no reply within 1 s)\n"
           "# TYPE eta_latency_traces_total counter\n";
    for (size_t e = 0; e < s.engines.size(); e++) {
        const LatencyCounters &c = s.engines[e].c;
        const std::pair<const char *, uint64_t> outcomes[] = {
            {"started", c.traces}, {"complete", c.completed}, {"no_event", c.no_event}, {"no_reply", c.no_reply}};
        for (const auto &[name, v] : outcomes) {
            std::snprintf(b, sizeof b, "eta_latency_traces_total{engine=\"%zu\",outcome=\"%s\"} %" PRIu64 "\n", e,
                          name, v);
            out += b;
        }
    }
    out += "# HELP eta_latency_sample_every one in this many received frames is traced (0: off)\n"
           "# TYPE eta_latency_sample_every gauge\n";
    std::snprintf(b, sizeof b, "eta_latency_sample_every %" PRIu64 "\n", merge_latency(s).c.sample_every);
    out += b;
    return out;
}

} // namespace ppe::stats
