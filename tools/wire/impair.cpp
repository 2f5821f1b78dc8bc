#include "impair.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace eta::wire
{

namespace
{

std::uint64_t splitmix64(std::uint64_t &x)
{
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

// The standard normal quantile, by the rational approximations P. J. Acklam
// published (relative error below 1.2e-9), which is far finer than a timer.
double normal_quantile(double p)
{
    static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                   -2.759285104469687e+02, 1.383577518672690e+02,
                                   -3.066479806614716e+01, 2.506628277459239e+00};
    static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                   -1.556989798598866e+02, 6.680131188771972e+01,
                                   -1.328068155288572e+01};
    static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                   -2.400758277161838e+00, -2.549732539343734e+00,
                                   4.374664141464968e+00,  2.938163982698783e+00};
    static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                   2.445134137142996e+00, 3.754408661907416e+00};
    constexpr double low = 0.02425;
    if (p < low) {
        double q = std::sqrt(-2 * std::log(p));
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    }
    if (p > 1 - low) return -normal_quantile(1 - p);
    double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

} // namespace

void Rng::reseed(std::uint64_t seed)
{
    for (auto &s : s_)
        s = splitmix64(seed);
}

std::uint64_t Rng::next()
{
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

double Correlated::draw(Rng &rng, double correlation)
{
    double fresh = rng.unit();
    if (correlation <= 0) return fresh;
    last_ = (1 - correlation) * fresh + correlation * last_;
    return last_;
}

Impairer::Impairer(const NetemConfig &config, std::uint64_t seed)
    : config_(config), rng_(config.has_seed ? config.seed : seed)
{
}

void Impairer::reconfigure(const NetemConfig &config)
{
    config_ = config;
    if (config.has_seed) rng_.reseed(config.seed);
    for (Correlated *c :
         {&loss_state_, &dup_state_, &corrupt_state_, &reorder_state_, &delay_state_})
        c->reset();
    since_reorder_ = 0;
}

bool Impairer::happens(const Chance &c, Correlated &state)
{
    // No random draw for settings that are off, so turning one impairment on
    // does not change the decisions another makes for the same seed.
    if (c.probability <= 0) return false;
    return state.draw(rng_, c.correlation) < c.probability;
}

std::int64_t Impairer::jittered_delay()
{
    std::int64_t delay = config_.delay_ns;
    if (config_.jitter_ns > 0) {
        double u = delay_state_.draw(rng_, config_.delay_correlation);
        double offset;
        if (config_.distribution == JitterShape::normal) {
            u = std::clamp(u, 1e-12, 1 - 1e-12);
            offset = normal_quantile(u) * static_cast<double>(config_.jitter_ns);
        } else {
            offset = (2 * u - 1) * static_cast<double>(config_.jitter_ns);
        }
        delay += static_cast<std::int64_t>(std::llround(offset));
    }
    return std::max<std::int64_t>(delay, 0);
}

std::uint64_t Impairer::serialization_ns(std::uint32_t frame_len) const
{
    if (config_.rate_bits_per_s == 0) return 0;
    std::int64_t len = static_cast<std::int64_t>(frame_len) + config_.packet_overhead;
    if (config_.cell_size > 0) {
        std::int64_t cells =
            (std::max<std::int64_t>(len, 0) + config_.cell_size - 1) / config_.cell_size;
        len = cells * (static_cast<std::int64_t>(config_.cell_size) + config_.cell_overhead);
    }
    if (len <= 0) return 0;
    // 128 bits: with large cell overheads len * 8e9 can pass 2^64.
    __extension__ using u128 = unsigned __int128;
    u128 ns = static_cast<u128>(len) * 8 * 1'000'000'000ULL / config_.rate_bits_per_s;
    return static_cast<std::uint64_t>(ns);
}

Fate Impairer::schedule(std::uint64_t now_ns, std::uint32_t frame_len)
{
    Fate fate;
    fate.corrupt = happens(config_.corrupt, corrupt_state_);
    if (fate.corrupt) ++counters_.corrupted;
    // As netem: with a gap of N, N-1 frames wait the delay, then the next one
    // skips it with the reorder probability, overtaking those still waiting.
    bool skip_delay = config_.gap > 0 && since_reorder_ + 1 >= config_.gap &&
                      happens(config_.reorder, reorder_state_);
    if (skip_delay) {
        since_reorder_ = 0;
        ++counters_.reordered;
        fate.due_ns = now_ns;
        fate.reordered = true;
        return fate;
    }
    ++since_reorder_;
    std::uint64_t due = now_ns + static_cast<std::uint64_t>(jittered_delay());
    if (config_.rate_bits_per_s > 0) {
        // The link serializes one frame after another: a frame starts when it
        // is due and the link is free, and leaves when it is fully sent.
        due = std::max(due, link_free_ns_) + serialization_ns(frame_len);
        link_free_ns_ = due;
    }
    fate.due_ns = due;
    return fate;
}

Verdict Impairer::admit(std::uint64_t now_ns, std::uint32_t frame_len)
{
    ++counters_.frames_in;
    Verdict v;
    bool duplicated = happens(config_.duplicate, dup_state_);
    bool lost = happens(config_.loss, loss_state_);
    if (lost) ++counters_.lost;
    if (duplicated) ++counters_.duplicated;
    if (duplicated == lost) {
        // Neither happened, or the loss took one of the two copies: one leaves.
        v.copies[v.count++] = schedule(now_ns, frame_len);
        return v;
    }
    if (lost) return v;
    v.copies[v.count++] = schedule(now_ns, frame_len);
    // The duplicate crosses the wire once more on its own, without being
    // duplicated again (netem re-enqueues it the same way).
    if (happens(config_.loss, loss_state_)) {
        ++counters_.lost;
        return v;
    }
    v.copies[v.count++] = schedule(now_ns, frame_len);
    return v;
}

void Impairer::corrupt(std::span<std::uint8_t> frame)
{
    constexpr std::size_t ethernet_header = 14;
    if (frame.size() <= ethernet_header) return;
    auto bytes = static_cast<std::uint32_t>(frame.size() - ethernet_header);
    std::uint32_t bit = rng_.below(bytes * 8);
    frame[ethernet_header + bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
}

FramePool::FramePool(std::size_t slot_bytes, std::size_t slots) : slot_bytes_(slot_bytes)
{
    grow(slots);
}

void FramePool::grow(std::size_t slots)
{
    if (slots <= capacity_) return;
    // Left uninitialized on purpose: pages of a large pool are touched only
    // when frames use them. Queued frames keep their slot numbers.
    auto bigger = std::make_unique_for_overwrite<std::uint8_t[]>(slots * slot_bytes_);
    if (storage_) std::memcpy(bigger.get(), storage_.get(), capacity_ * slot_bytes_);
    storage_ = std::move(bigger);
    free_.reserve(slots);
    // Hand out low slot numbers first so few pages are touched when idle.
    for (std::size_t s = slots; s-- > capacity_;)
        free_.push_back(static_cast<std::uint32_t>(s));
    capacity_ = slots;
}

void DelayQueue::push(std::uint64_t due_ns, std::uint32_t slot, std::uint32_t len)
{
    heap_.push_back(Entry{due_ns, next_order_++, slot, len});
    std::push_heap(heap_.begin(), heap_.end(),
                   [](const Entry &a, const Entry &b) { return before(b, a); });
}

DelayQueue::Entry DelayQueue::pop()
{
    std::pop_heap(heap_.begin(), heap_.end(),
                  [](const Entry &a, const Entry &b) { return before(b, a); });
    Entry e = heap_.back();
    heap_.pop_back();
    return e;
}

} // namespace eta::wire
