// impair.hpp: the impairment engine of eta-wire, free of I/O so that unit
// tests drive it with their own clock and seeds. It decides each frame's fate
// the way sch_netem does (duplicate, loss, corruption, delay with jitter,
// reordering, rate by serialization time) and keeps the frames in a
// preallocated, time-ordered queue. Nothing here allocates, locks or makes a
// system call on the per-frame path.
#pragma once

#include "netem.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace eta::wire
{

// xoshiro256** seeded through splitmix64: fast, and the same seed gives the
// same decisions on every machine.
class Rng
{
  public:
    explicit Rng(std::uint64_t seed) { reseed(seed); }
    void reseed(std::uint64_t seed);
    std::uint64_t next();
    // Uniform in [0, 1) with 53 random bits.
    double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    // Uniform in [0, n) for n > 0, without modulo bias worth noticing (n < 2^32).
    std::uint32_t below(std::uint32_t n)
    {
        return static_cast<std::uint32_t>(((next() >> 32) * n) >> 32);
    }

  private:
    std::uint64_t s_[4];
};

// netem's correlated random numbers: each draw leans on the previous one by
// the correlation, next = (1 - c) * fresh + c * last.
class Correlated
{
  public:
    double draw(Rng &rng, double correlation);
    void reset() { last_ = 0; }

  private:
    double last_ = 0;
};

// What happens to one copy of a frame.
struct Fate {
    std::uint64_t due_ns = 0; // when it leaves the wire
    bool corrupt = false;     // flip one bit before it leaves
    bool reordered = false;   // skipped the delay the others wait
};

// The decision for one arriving frame: zero (lost), one or two (duplicated) copies.
struct Verdict {
    Fate copies[2];
    std::uint32_t count = 0;
};

struct WireCounters {
    std::uint64_t frames_in = 0;
    std::uint64_t lost = 0;
    std::uint64_t duplicated = 0;
    std::uint64_t corrupted = 0;
    std::uint64_t reordered = 0;
};

class Impairer
{
  public:
    Impairer(const NetemConfig &config, std::uint64_t seed);

    // Applies new settings; the random stream restarts only when the new
    // settings carry a seed (as a reconfigured netem keeps its queue).
    void reconfigure(const NetemConfig &config);

    const NetemConfig &config() const { return config_; }

    // Decides the fate of a frame of `frame_len` bytes arriving at `now_ns`.
    Verdict admit(std::uint64_t now_ns, std::uint32_t frame_len);

    // Flips one random bit past the Ethernet header (so the frame still
    // reaches its receiver, whose IP/TCP/UDP checksums then see the damage).
    // Frames with no byte past the header are left alone.
    void corrupt(std::span<std::uint8_t> frame);

    // Time the link needs to serialize a frame of `frame_len` bytes at the
    // configured rate, with netem's packet and cell overheads.
    std::uint64_t serialization_ns(std::uint32_t frame_len) const;

    const WireCounters &counters() const { return counters_; }

  private:
    bool happens(const Chance &c, Correlated &state);
    std::int64_t jittered_delay();
    Fate schedule(std::uint64_t now_ns, std::uint32_t frame_len);

    NetemConfig config_;
    Rng rng_;
    Correlated loss_state_, dup_state_, corrupt_state_, reorder_state_, delay_state_;
    std::uint32_t since_reorder_ =
        0; // frames delayed since the last reordered one (netem's counter)
    std::uint64_t link_free_ns_ = 0; // when the rate-limited link finishes its last frame
    WireCounters counters_;
};

// Fixed-size frame buffers, handed out from a free stack. Growing is for the
// control path (a larger limit); taking and returning never allocate.
class FramePool
{
  public:
    FramePool(std::size_t slot_bytes, std::size_t slots);
    void grow(std::size_t slots);
    bool empty() const { return free_.empty(); }
    std::uint32_t take()
    {
        std::uint32_t s = free_.back();
        free_.pop_back();
        return s;
    }
    void give(std::uint32_t slot) { free_.push_back(slot); }
    std::uint8_t *data(std::uint32_t slot) { return storage_.get() + slot * slot_bytes_; }
    std::size_t slot_bytes() const { return slot_bytes_; }
    std::size_t capacity() const { return capacity_; }

  private:
    std::size_t slot_bytes_;
    std::size_t capacity_ = 0;
    std::unique_ptr<std::uint8_t[]> storage_;
    std::vector<std::uint32_t> free_;
};

// Frames waiting for their departure time: a binary min-heap on (due, arrival
// order), so frames due at the same time leave in the order they came.
class DelayQueue
{
  public:
    struct Entry {
        std::uint64_t due_ns;
        std::uint64_t order;
        std::uint32_t slot;
        std::uint32_t len;
    };

    explicit DelayQueue(std::size_t capacity) { heap_.reserve(capacity); }
    void reserve(std::size_t capacity) { heap_.reserve(capacity); }
    std::size_t size() const { return heap_.size(); }
    bool empty() const { return heap_.empty(); }
    const Entry &top() const { return heap_.front(); }
    // The caller keeps size() below the capacity it reserved.
    void push(std::uint64_t due_ns, std::uint32_t slot, std::uint32_t len);
    Entry pop();

  private:
    static bool before(const Entry &a, const Entry &b)
    {
        return a.due_ns < b.due_ns || (a.due_ns == b.due_ns && a.order < b.order);
    }
    std::vector<Entry> heap_;
    std::uint64_t next_order_ = 0;
};

} // namespace eta::wire
