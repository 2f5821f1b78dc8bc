#include "netem.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <strings.h>
#include <vector>

namespace eta::wire
{

bool NetemConfig::is_transparent() const
{
    return delay_ns == 0 && jitter_ns == 0 && loss.probability == 0 && duplicate.probability == 0 &&
           corrupt.probability == 0 && rate_bits_per_s == 0;
}

namespace
{

struct Unit {
    std::string_view name;
    double scale;
};

// Splits "12.5ms" into 12.5 and "ms"; false when there is no leading number.
bool split_number(std::string_view word, double &value, std::string_view &suffix)
{
    const char *end = word.data() + word.size();
    auto [p, ec] = std::from_chars(word.data(), end, value);
    if (ec != std::errc{} || !std::isfinite(value)) return false;
    suffix = std::string_view(p, static_cast<std::size_t>(end - p));
    return true;
}

bool scaled(std::string_view word, std::span<const Unit> units, double bare_scale, double &out)
{
    double value;
    std::string_view suffix;
    if (!split_number(word, value, suffix) || value < 0) return false;
    if (suffix.empty()) {
        out = value * bare_scale;
        return true;
    }
    for (const Unit &u : units) {
        if (u.name.size() == suffix.size() &&
            strncasecmp(u.name.data(), suffix.data(), suffix.size()) == 0) {
            out = value * u.scale;
            return true;
        }
    }
    return false;
}

// tc(8) TIMES: a bare number is microseconds.
bool parse_time_ns(std::string_view word, std::int64_t &ns)
{
    static constexpr std::array<Unit, 12> units{{{"s", 1e9},
                                                 {"sec", 1e9},
                                                 {"secs", 1e9},
                                                 {"ms", 1e6},
                                                 {"msec", 1e6},
                                                 {"msecs", 1e6},
                                                 {"us", 1e3},
                                                 {"usec", 1e3},
                                                 {"usecs", 1e3},
                                                 {"ns", 1},
                                                 {"nsec", 1},
                                                 {"nsecs", 1}}};
    double v;
    if (!scaled(word, units, 1e3, v) || v > static_cast<double>(max_delay_ns)) return false;
    ns = static_cast<std::int64_t>(std::llround(v));
    return true;
}

// tc(8) RATES: a bare number is bits per second.
bool parse_rate_bits(std::string_view word, std::uint64_t &bits)
{
    static constexpr std::array<Unit, 18> units{{{"bit", 1},
                                                 {"kbit", 1e3},
                                                 {"mbit", 1e6},
                                                 {"gbit", 1e9},
                                                 {"tbit", 1e12},
                                                 {"kibit", 1024.0},
                                                 {"mibit", 1048576.0},
                                                 {"gibit", 1073741824.0},
                                                 {"tibit", 1099511627776.0},
                                                 {"bps", 8},
                                                 {"kbps", 8e3},
                                                 {"mbps", 8e6},
                                                 {"gbps", 8e9},
                                                 {"tbps", 8e12},
                                                 {"kibps", 8 * 1024.0},
                                                 {"mibps", 8 * 1048576.0},
                                                 {"gibps", 8 * 1073741824.0},
                                                 {"tibps", 8 * 1099511627776.0}}};
    double v;
    if (!scaled(word, units, 1, v) || v < 1 || v > 1e15) return false;
    bits = static_cast<std::uint64_t>(std::llround(v));
    return true;
}

// "1%", "0.25%" or a bare "1" (also percent, as tc reads it).
bool parse_percent(std::string_view word, double &fraction)
{
    double v;
    std::string_view suffix;
    if (!split_number(word, v, suffix) || (suffix != "" && suffix != "%")) return false;
    if (v < 0 || v > 100) return false;
    fraction = v / 100;
    return true;
}

template <typename Int> bool parse_int(std::string_view word, Int &out)
{
    const char *end = word.data() + word.size();
    auto [p, ec] = std::from_chars(word.data(), end, out);
    return ec == std::errc{} && p == end;
}

bool looks_numeric(std::string_view word)
{
    return !word.empty() && ((word[0] >= '0' && word[0] <= '9') || word[0] == '.');
}

class Parser
{
  public:
    Parser(std::span<const std::string_view> args, NetemConfig &out, std::string &error)
        : args_(args), out_(out), error_(error)
    {
    }

    bool run()
    {
        out_ = NetemConfig{};
        bool distribution_given = false;
        while (pos_ < args_.size()) {
            std::string_view key = args_[pos_++];
            bool ok = true;
            if (key == "delay" || key == "latency") {
                ok = delay();
            } else if (key == "distribution") {
                ok = distribution();
                distribution_given = true;
            } else if (key == "loss" || key == "drop") {
                ok = loss();
            } else if (key == "duplicate") {
                ok = chance(key, out_.duplicate);
            } else if (key == "corrupt") {
                ok = chance(key, out_.corrupt);
            } else if (key == "reorder") {
                ok = chance(key, out_.reorder);
            } else if (key == "gap") {
                ok = count(key, out_.gap, 1, UINT32_MAX);
            } else if (key == "rate") {
                ok = rate();
            } else if (key == "limit") {
                ok = count(key, out_.limit, 1, max_limit);
            } else if (key == "seed") {
                ok = seed();
            } else if (key == "slot" || key == "ecn") {
                return fail(
                    "'" + std::string(key) +
                    "' is not implemented by eta-wire (only the kernel's sch_netem has it)");
            } else {
                return fail("unknown netem argument '" + std::string(key) +
                            "' (allowed: delay, distribution, loss, duplicate, corrupt, reorder, "
                            "gap, rate, limit, seed)");
            }
            if (!ok) return false;
        }
        // The same consistency rules as tc's netem parser.
        if (out_.reorder.probability > 0 && out_.gap == 0) out_.gap = 1;
        if (out_.gap > 0 && out_.delay_ns == 0)
            return fail("reordering is not possible without some delay (e.g. 'delay 10ms reorder "
                        "25%'): reordered packets skip the delay the others wait");
        if (distribution_given && (out_.delay_ns == 0 || out_.jitter_ns == 0))
            return fail("distribution given but no delay and jitter (e.g. 'delay 10ms 2ms "
                        "distribution normal')");
        return true;
    }

  private:
    bool fail(std::string message)
    {
        error_ = std::move(message);
        return false;
    }

    bool has_numeric_next() const { return pos_ < args_.size() && looks_numeric(args_[pos_]); }

    bool need_value(std::string_view key, const char *what)
    {
        if (pos_ < args_.size()) return true;
        return fail("'" + std::string(key) + "' needs " + what);
    }

    bool delay()
    {
        if (!need_value("delay", "a time such as 5ms")) return false;
        if (!parse_time_ns(args_[pos_], out_.delay_ns))
            return fail("bad delay '" + std::string(args_[pos_]) +
                        "': give a time such as 5ms, 200us or 1s (at most 60s)");
        ++pos_;
        if (has_numeric_next()) {
            if (!parse_time_ns(args_[pos_], out_.jitter_ns))
                return fail("bad jitter '" + std::string(args_[pos_]) +
                            "': give a time such as 1ms");
            ++pos_;
            if (has_numeric_next()) {
                if (!parse_percent(args_[pos_], out_.delay_correlation))
                    return fail("bad delay correlation '" + std::string(args_[pos_]) +
                                "': give a percentage such as 25%");
                ++pos_;
            }
        }
        return true;
    }

    bool distribution()
    {
        if (!need_value("distribution", "uniform or normal")) return false;
        std::string_view name = args_[pos_++];
        if (name == "uniform") {
            out_.distribution = JitterShape::uniform;
        } else if (name == "normal") {
            out_.distribution = JitterShape::normal;
        } else if (name == "pareto" || name == "paretonormal") {
            return fail("distribution '" + std::string(name) +
                        "' is not implemented by eta-wire (uniform and normal are)");
        } else {
            return fail("unknown distribution '" + std::string(name) +
                        "' (allowed: uniform, normal)");
        }
        return true;
    }

    bool loss()
    {
        if (!need_value("loss", "a percentage such as 1%")) return false;
        std::string_view model = args_[pos_];
        if (model == "state" || model == "gemodel")
            return fail("'loss " + std::string(model) +
                        "' is not implemented by eta-wire (random loss is: 'loss 1%')");
        if (model == "random") ++pos_;
        return chance("loss", out_.loss);
    }

    bool chance(std::string_view key, Chance &c)
    {
        if (!need_value(key, "a percentage such as 1%")) return false;
        if (!parse_percent(args_[pos_], c.probability))
            return fail("bad " + std::string(key) + " '" + std::string(args_[pos_]) +
                        "': give a percentage from 0% to 100%, such as 1% or 0.5%");
        ++pos_;
        if (has_numeric_next()) {
            if (!parse_percent(args_[pos_], c.correlation))
                return fail("bad " + std::string(key) + " correlation '" +
                            std::string(args_[pos_]) + "': give a percentage such as 25%");
            ++pos_;
        }
        return true;
    }

    bool count(std::string_view key, std::uint32_t &out, std::uint32_t lo, std::uint32_t hi)
    {
        if (!need_value(key, "a count")) return false;
        std::uint32_t v = 0;
        if (!parse_int(args_[pos_], v) || v < lo || v > hi)
            return fail("bad " + std::string(key) + " '" + std::string(args_[pos_]) +
                        "': give a whole number from " + std::to_string(lo) + " to " +
                        std::to_string(hi));
        out = v;
        ++pos_;
        return true;
    }

    bool signed_bytes(const char *what, std::int32_t &out)
    {
        if (!parse_int(args_[pos_], out) || out < -65535 || out > 65535)
            return fail(std::string("bad rate ") + what + " '" + std::string(args_[pos_]) +
                        "': give bytes from -65535 to 65535");
        ++pos_;
        return true;
    }

    bool rate()
    {
        if (!need_value("rate", "a rate such as 100mbit")) return false;
        if (!parse_rate_bits(args_[pos_], out_.rate_bits_per_s))
            return fail("bad rate '" + std::string(args_[pos_]) +
                        "': give a rate such as 100mbit, 1gbit or 10mbps (bare numbers are bit/s)");
        ++pos_;
        if (!has_numeric_next() && !(pos_ < args_.size() && args_[pos_].starts_with('-')))
            return true;
        if (!signed_bytes("packet overhead", out_.packet_overhead)) return false;
        if (!has_numeric_next()) return true;
        std::uint32_t cell = 0;
        if (!parse_int(args_[pos_], cell) || cell > 65535)
            return fail("bad rate cell size '" + std::string(args_[pos_]) +
                        "': give bytes from 0 to 65535");
        out_.cell_size = cell;
        ++pos_;
        if (!has_numeric_next() && !(pos_ < args_.size() && args_[pos_].starts_with('-')))
            return true;
        return signed_bytes("cell overhead", out_.cell_overhead);
    }

    bool seed()
    {
        if (!need_value("seed", "a number")) return false;
        if (!parse_int(args_[pos_], out_.seed))
            return fail("bad seed '" + std::string(args_[pos_]) +
                        "': give a whole number from 0 to 18446744073709551615");
        out_.has_seed = true;
        ++pos_;
        return true;
    }

    std::span<const std::string_view> args_;
    std::size_t pos_ = 0;
    NetemConfig &out_;
    std::string &error_;
};

std::string fmt_time(std::int64_t ns)
{
    char buf[48];
    if (ns % 1'000'000 == 0)
        std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ns / 1'000'000));
    else if (ns % 1000 == 0)
        std::snprintf(buf, sizeof buf, "%lldus", static_cast<long long>(ns / 1000));
    else
        std::snprintf(buf, sizeof buf, "%lldns", static_cast<long long>(ns));
    return buf;
}

std::string fmt_percent(double fraction)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g%%", fraction * 100);
    return buf;
}

void add_chance(std::string &s, const char *name, const Chance &c)
{
    if (c.probability == 0) return;
    s += ' ';
    s += name;
    s += ' ' + fmt_percent(c.probability);
    if (c.correlation > 0) s += ' ' + fmt_percent(c.correlation);
}

} // namespace

bool parse_netem(std::span<const std::string_view> args, NetemConfig &out, std::string &error)
{
    return Parser(args, out, error).run();
}

bool parse_netem_line(std::string_view line, NetemConfig &out, std::string &error)
{
    std::vector<std::string_view> words;
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i])))
            ++i;
        std::size_t start = i;
        while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i])))
            ++i;
        if (i > start) words.push_back(line.substr(start, i - start));
    }
    return parse_netem(words, out, error);
}

std::string describe(const NetemConfig &c)
{
    std::string s = "limit " + std::to_string(c.limit);
    if (c.delay_ns > 0 || c.jitter_ns > 0) {
        s += " delay " + fmt_time(c.delay_ns);
        if (c.jitter_ns > 0) {
            s += ' ' + fmt_time(c.jitter_ns);
            if (c.delay_correlation > 0) s += ' ' + fmt_percent(c.delay_correlation);
            if (c.distribution == JitterShape::normal) s += " distribution normal";
        }
    }
    add_chance(s, "loss", c.loss);
    add_chance(s, "duplicate", c.duplicate);
    add_chance(s, "corrupt", c.corrupt);
    add_chance(s, "reorder", c.reorder);
    if (c.gap > 1) s += " gap " + std::to_string(c.gap);
    if (c.rate_bits_per_s > 0) {
        s += " rate " + std::to_string(c.rate_bits_per_s) + "bit";
        if (c.packet_overhead != 0 || c.cell_size != 0)
            s += ' ' + std::to_string(c.packet_overhead);
        if (c.cell_size != 0) {
            s += ' ' + std::to_string(c.cell_size);
            if (c.cell_overhead != 0) s += ' ' + std::to_string(c.cell_overhead);
        }
    }
    if (c.has_seed) s += " seed " + std::to_string(c.seed);
    return s;
}

} // namespace eta::wire
