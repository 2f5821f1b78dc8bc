// ppe/src/stat_latency.cc: eta-stat's latency breakdown (stat_latency.h).
#include "stat_latency.h"

#include <algorithm>
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
    {"program_wake", "event published -> the program's sleep ended (its own stamp; only when it slept)"},
    {"program_read", "event published (or the wakeup) -> the program read the request (its own stamp)"},
    {"program_reply", "request read -> the reply's SEND submitted (the program's own stamps)"},
    {"program_taken", "reply SEND submitted -> the engine's poll that took it began"},
};

double us(uint64_t ns) { return double(ns) / 1000.0; }

void copy_words(void *dst, const void *src, size_t bytes)
{
    const uint64_t *s = static_cast<const uint64_t *>(src);
    uint64_t *d = static_cast<uint64_t *>(dst);
    for (size_t i = 0; i < bytes / 8; i++) d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

// One slow-log entry the engine may be writing (stats.h SlowLog): a few
// tries for a copy with the same even seq before and after; else empty.
void copy_slow(SlowRequest *dst, const SlowRequest *src)
{
    for (int tries = 0; tries < 8; tries++) {
        const uint64_t s1 = __atomic_load_n(&src->seq, __ATOMIC_ACQUIRE);
        copy_words(dst, src, sizeof *dst);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (!(s1 & 1) && __atomic_load_n(&src->seq, __ATOMIC_RELAXED) == s1) return;
    }
    *dst = SlowRequest{};
}

void copy_block(Latency *dst, const Latency *src)
{
    copy_words(&dst->c, &src->c, sizeof(LatencyCounters));
    dst->slow.interval_ns = __atomic_load_n(&src->slow.interval_ns, __ATOMIC_RELAXED);
    dst->slow.open_start_ns = __atomic_load_n(&src->slow.open_start_ns, __ATOMIC_RELAXED);
    dst->slow.done_start_ns = __atomic_load_n(&src->slow.done_start_ns, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < kSlowRequests; i++) {
        copy_slow(&dst->slow.open[i], &src->slow.open[i]);
        copy_slow(&dst->slow.done[i], &src->slow.done[i]);
    }
    for (uint32_t i = 0; i < kLatencyStages; i++) eta_hist_copy(&dst->stages[i], &src->stages[i]);
}

// The stages a slow-log entry shows, in the order of a request's path.
constexpr uint32_t kSlowOrder[] = {kStageStack,      kStageEvent,    kStageProgramWoken, kStageProgramSpin,
                                   kStageProgWake,   kStageProgRead, kStageProgReply,    kStageProgTaken,
                                   kStageTransmit,   kStagePort,     kStageRequest};

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
    return json{{"traces", l.c.traces},
                {"completed", l.c.completed},
                {"woken", l.c.woken},
                {"no_event", l.c.no_event},
                {"no_reply", l.c.no_reply},
                {"program_stamped", l.c.prog_stamped},
                {"program_missing", l.c.prog_missing},
                {"program_bad", l.c.prog_bad},
                {"stages", stages}};
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
        m.c.prog_stamped += l.c.prog_stamped;
        m.c.prog_missing += l.c.prog_missing;
        m.c.prog_bad += l.c.prog_bad;
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
        std::snprintf(b, sizeof b,
                      "program's own stamps (libdti): usable in %" PRIu64 ", missing in %" PRIu64
                      " (none, or an older libdti), refused in %" PRIu64 " (impossible times)\n",
                      m.c.prog_stamped, m.c.prog_missing, m.c.prog_bad);
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
                {"engines", engines},
                {"slow", slow_json(s)}};
}

std::string latency_prometheus(const LatencySnapshot &s)
{
    std::string out;
    char b[256];
    out += "# HELP eta_latency_stage_seconds time of a sampled request in one stage of its path through the engine "
           "(stage: stack, event, program_woken, program_spin, transmit, port, engine, request; the program's own "
           "stamps: program_wake, program_read, program_reply, program_taken)\n"
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
    out += "# HELP eta_latency_program_stamps_total complete traces by the program's own stamps (usable: "
           "program_* recorded; missing: none or not this request's; bad: impossible times, refused)\n"
           "# TYPE eta_latency_program_stamps_total counter\n";
    for (size_t e = 0; e < s.engines.size(); e++) {
        const LatencyCounters &c = s.engines[e].c;
        const std::pair<const char *, uint64_t> kinds[] = {
            {"usable", c.prog_stamped}, {"missing", c.prog_missing}, {"bad", c.prog_bad}};
        for (const auto &[name, v] : kinds) {
            std::snprintf(b, sizeof b, "eta_latency_program_stamps_total{engine=\"%zu\",stamps=\"%s\"} %" PRIu64 "\n",
                          e, name, v);
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

std::vector<SlowEntry> slow_requests(const LatencySnapshot &s)
{
    std::vector<SlowEntry> v;
    for (size_t e = 0; e < s.engines.size(); e++) {
        const SlowLog &l = s.engines[e].slow;
        for (uint32_t i = 0; i < kSlowRequests; i++) {
            if (l.done[i].at_ns) v.push_back({uint32_t(e), false, l.done[i]});
            if (l.open[i].at_ns) v.push_back({uint32_t(e), true, l.open[i]});
        }
    }
    std::sort(v.begin(), v.end(), [](const SlowEntry &a, const SlowEntry &b) {
        return a.r.stage_ns[kStageRequest] > b.r.stage_ns[kStageRequest];
    });
    return v;
}

nlohmann::ordered_json slow_json(const LatencySnapshot &s)
{
    using json = nlohmann::ordered_json;
    json list = json::array();
    for (const SlowEntry &e : slow_requests(s)) {
        json st = json::object();
        for (uint32_t k : kSlowOrder) {
            if (k == kStageProgramWoken && !(e.r.flags & kSlowWoken)) continue;
            if (k == kStageProgramSpin && (e.r.flags & kSlowWoken)) continue;
            if (k >= kStageProgWake && k <= kStageProgTaken &&
                (!(e.r.flags & kSlowStamped) || (k == kStageProgWake && !e.r.stage_ns[k])))
                continue;
            st[kStages[k].name] = us(e.r.stage_ns[k]);
        }
        list.push_back(json{{"engine", e.engine},
                            {"interval", e.open ? "open" : "done"},
                            {"request_us", us(e.r.stage_ns[kStageRequest])},
                            {"woken", bool(e.r.flags & kSlowWoken)},
                            {"stamped", bool(e.r.flags & kSlowStamped)},
                            {"stages_us", st}});
    }
    return json{{"per_engine", kSlowRequests}, {"interval_s", double(kSlowIntervalNs) / 1e9}, {"requests", list}};
}

std::string slow_text(const LatencySnapshot &s)
{
    const std::vector<SlowEntry> v = slow_requests(s);
    std::string out;
    char b[256];
    std::snprintf(b, sizeof b,
                  "slowest sampled requests (up to %u per engine and interval of %.0f s; interval done: the last "
                  "complete one, open: the one under way), in us\n",
                  kSlowRequests, double(kSlowIntervalNs) / 1e9);
    out += b;
    if (v.empty()) return out + "none yet (no complete sampled request)\n";
    std::snprintf(b, sizeof b, "%-3s %-5s %9s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "eng", "intvl", "request",
                  "stack", "event", "program", "p.wake", "p.read", "p.reply", "p.taken", "transmit", "port");
    out += b;
    for (const SlowEntry &e : v) {
        const uint64_t *t = e.r.stage_ns;
        const bool stamped = e.r.flags & kSlowStamped;
        auto prog = [&](uint32_t k) {
            if (!stamped || (k == kStageProgWake && !(e.r.flags & kSlowWoken))) return std::string("-");
            char x[32];
            std::snprintf(x, sizeof x, "%.2f", us(t[k]));
            return std::string(x);
        };
        std::snprintf(b, sizeof b, "%-3u %-5s %9.2f %8.2f %8.2f %7.2f%c %8s %8s %8s %8s %8.2f %8.2f\n", e.engine,
                      e.open ? "open" : "done", us(t[kStageRequest]), us(t[kStageStack]), us(t[kStageEvent]),
                      us(t[kStageProgramWoken] + t[kStageProgramSpin]), (e.r.flags & kSlowWoken) ? 'w' : ' ',
                      prog(kStageProgWake).c_str(), prog(kStageProgRead).c_str(), prog(kStageProgReply).c_str(),
                      prog(kStageProgTaken).c_str(), us(t[kStageTransmit]), us(t[kStagePort]));
        out += b;
    }
    out += "program: event -> command (w: the program slept and was woken); p.*: its split by the program's own "
           "stamps (-: none)\n";
    return out;
}

} // namespace ppe::stats
