// ppe/src/config_section.h: reading one TOML table of eta-ppe's config with
// one clear message per error (file:line: key: what is wrong and what to do).
// Internal to config.cc: Section is what each [section] parser reads through.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ppe::config_section {

struct ConfigError {
    std::string message;
};

// Walks one TOML table: typed getters that check the range, and a final
// check that every key in the table was one we know.
class Section {
  public:
    Section(const std::string &file, const toml::table &table, std::string prefix)
        : file_(file), table_(table), prefix_(std::move(prefix))
    {}

    [[noreturn]] void fail(const std::string &key, const std::string &what) const
    {
        const toml::node *n = table_.get(key);
        fail_at(n ? n->source() : table_.source(), full(key), what);
    }

    [[noreturn]] void fail_at(const toml::source_region &where, const std::string &key,
                              const std::string &what) const
    {
        std::ostringstream os;
        os << file_;
        if (where.begin.line != 0) os << ':' << where.begin.line;
        os << ": " << key << ": " << what;
        throw ConfigError{os.str()};
    }

    std::string full(const std::string &key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

    const toml::node *node(const std::string &key)
    {
        known_.insert(key);
        return table_.get(key);
    }

    bool has(const std::string &key)
    {
        known_.insert(key);
        return table_.contains(key);
    }

    int64_t integer(const std::string &key, int64_t dflt, int64_t lo, int64_t hi)
    {
        const toml::node *n = node(key);
        if (!n) return dflt;
        auto v = n->value<int64_t>();
        if (!n->is_integer() || !v)
            fail(key, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                          ", got " + type_name(*n));
        if (*v < lo || *v > hi)
            fail(key, std::to_string(*v) + " is out of range; allowed " + std::to_string(lo) + " to " +
                          std::to_string(hi));
        return *v;
    }

    bool boolean(const std::string &key, bool dflt)
    {
        const toml::node *n = node(key);
        if (!n) return dflt;
        if (!n->is_boolean()) fail(key, "expected true or false, got " + type_name(*n));
        return *n->value<bool>();
    }

    std::string string(const std::string &key, const std::string &dflt, bool required = false)
    {
        const toml::node *n = node(key);
        if (!n) {
            if (required) fail(key, "is required");
            return dflt;
        }
        if (!n->is_string()) fail(key, "expected a string, got " + type_name(*n));
        return *n->value<std::string>();
    }

    // One of a fixed set of words.
    template <typename E>
    E choice(const std::string &key, E dflt, const std::vector<std::pair<const char *, E>> &allowed)
    {
        const toml::node *n = node(key);
        std::string list;
        for (auto &[name, _] : allowed) list += (list.empty() ? "\"" : ", \"") + std::string(name) + "\"";
        if (!n) return dflt;
        if (!n->is_string()) fail(key, "expected one of " + list + ", got " + type_name(*n));
        std::string s = *n->value<std::string>();
        for (auto &[name, e] : allowed)
            if (s == name) return e;
        fail(key, "\"" + s + "\" is not allowed; allowed: " + list);
    }

    // A byte count: an integer, or a string with a K/M/G suffix ("256M").
    uint64_t size(const std::string &key, uint64_t dflt, uint64_t lo, uint64_t hi)
    {
        const toml::node *n = node(key);
        if (!n) return dflt;
        const std::string range = "allowed " + human(lo) + " to " + human(hi) +
                                  " (an integer in bytes, or a string such as \"256K\", \"4M\", \"1G\")";
        uint64_t v = 0;
        if (n->is_integer()) {
            int64_t i = *n->value<int64_t>();
            if (i < 0) fail(key, "negative size; " + range);
            v = uint64_t(i);
        } else if (n->is_string()) {
            std::string s = *n->value<std::string>();
            if (!parse_size(s, &v)) fail(key, "\"" + s + "\" is not a size; " + range);
        } else {
            fail(key, "expected a size, got " + type_name(*n) + "; " + range);
        }
        if (v < lo || v > hi) fail(key, human(v) + " is out of range; " + range);
        return v;
    }

    // Array of strings.
    std::vector<std::pair<std::string, toml::source_region>> strings(const std::string &key, bool *present)
    {
        std::vector<std::pair<std::string, toml::source_region>> out;
        const toml::node *n = node(key);
        *present = n != nullptr;
        if (!n) return out;
        const toml::array *arr = n->as_array();
        if (!arr) fail(key, "expected an array of strings, got " + type_name(*n));
        for (const toml::node &e : *arr) {
            if (!e.is_string()) fail_at(e.source(), full(key), "expected strings in the array, got " + type_name(e));
            out.emplace_back(*e.value<std::string>(), e.source());
        }
        return out;
    }

    // Fails on the first key nobody asked for.
    void reject_unknown(const std::string &allowed_list) const
    {
        for (auto &&[k, v] : table_) {
            std::string key(k.str());
            if (!known_.count(key))
                fail_at(v.source(), full(key), "unknown key; allowed here: " + allowed_list);
        }
    }

    static std::string type_name(const toml::node &n)
    {
        switch (n.type()) {
        case toml::node_type::string: return "a string";
        case toml::node_type::integer: return "an integer";
        case toml::node_type::floating_point: return "a number with a fraction";
        case toml::node_type::boolean: return "a boolean";
        case toml::node_type::array: return "an array";
        case toml::node_type::table: return "a table";
        default: return "a date or time";
        }
    }

    static std::string human(uint64_t v)
    {
        if (v >= (1ull << 30) && v % (1ull << 30) == 0) return std::to_string(v >> 30) + "G";
        if (v >= (1ull << 20) && v % (1ull << 20) == 0) return std::to_string(v >> 20) + "M";
        if (v >= (1ull << 10) && v % (1ull << 10) == 0) return std::to_string(v >> 10) + "K";
        return std::to_string(v);
    }

    static bool parse_size(const std::string &s, uint64_t *out)
    {
        if (s.empty()) return false;
        size_t i = 0;
        uint64_t v = 0;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
            if (v > (UINT64_MAX - 9) / 10) return false;
            v = v * 10 + uint64_t(s[i++] - '0');
        }
        if (i == 0) return false;
        std::string unit = s.substr(i);
        int shift = 0;
        if (unit.empty() || unit == "B") shift = 0;
        else if (unit == "K" || unit == "KiB" || unit == "k") shift = 10;
        else if (unit == "M" || unit == "MiB") shift = 20;
        else if (unit == "G" || unit == "GiB") shift = 30;
        else return false;
        if (shift && v > (UINT64_MAX >> shift)) return false;
        *out = v << shift;
        return true;
    }

    const toml::table &table() const { return table_; }

    uint32_t line(const std::string &key) const
    {
        const toml::node *n = table_.get(key);
        return uint32_t((n ? n->source() : table_.source()).begin.line);
    }

  private:
    const std::string &file_;
    const toml::table &table_;
    std::string prefix_;
    std::set<std::string> known_;
};

// A sub-table of the document, or an empty one when absent.
inline const toml::table &subtable(Section &root, const std::string &key, const toml::table &empty)
{
    const toml::node *n = root.node(key);
    if (!n) return empty;
    const toml::table *t = n->as_table();
    if (!t) root.fail(key, "expected a table [" + key + "], got " + Section::type_name(*n));
    return *t;
}

} // namespace ppe::config_section
