// timer_wheel.cc: setup and next_due_ns() of the hashed timing wheel; arm,
// cancel and advance are inline in timer_wheel.h (advance is a template).
#include "base/timer_wheel.h"

#include <algorithm>
#include <new>

namespace mars {

bool TimerWheel::init(uint32_t slots, uint64_t tick_ns, uint64_t now_ns) {
    if (slots == 0 || (slots & (slots - 1)) != 0 || tick_ns == 0 || count_ != 0)
        return false;
    slots_.reset(new (std::nothrow) Timer *[slots]());
    occupied_.reset(new (std::nothrow) uint64_t[(slots + 63) / 64]());
    if (!slots_ || !occupied_)
        return false;
    mask_ = slots - 1;
    tick_ns_ = tick_ns;
    tick_shift_ = (tick_ns & (tick_ns - 1)) == 0 ? __builtin_ctzll(tick_ns) : -1;
    tick_ = tick_of(now_ns);
    next_due_valid_ = false;
    floor_ns_ = UINT64_MAX;
    set_next_tick();
    return true;
}

void TimerWheel::clear(uint64_t now_ns) {
    // Only marked slots can hold timers (a link always marks): clear those,
    // not the whole array (a reset per fuzz input cleared 32 KiB).
    for (uint64_t w = 0; w < (mask_ + 64) / 64; ++w) {
        for (uint64_t bits = occupied_[w]; bits; bits &= bits - 1)
            slots_[w * 64 + __builtin_ctzll(bits)] = nullptr;
        occupied_[w] = 0;
    }
    count_ = 0;
    tick_ = tick_of(now_ns);
    next_due_cache_ = UINT64_MAX;
    next_due_valid_ = false;
    floor_ns_ = UINT64_MAX;
    set_next_tick();
}

// Scans ticks from the current one on. A timer in the slot of tick t whose due
// tick is <= t has effective tick exactly t (effective ticks are >= tick_ and
// congruent to the slot within one rotation), and timers of later effective
// ticks are due later; so the first tick with such a timer holds the exact
// minimum. Past the scanned window every timer is due at or after its start.
uint64_t TimerWheel::next_due_ns() const {
    if (count_ == 0)
        return UINT64_MAX;
    if (next_due_valid_)
        return next_due_cache_;
    const uint64_t window = std::min<uint64_t>(mask_ + 1, kScanSlots);
    uint64_t result = UINT64_MAX;
    for (uint64_t i = unmarked_run(tick_, window); i < window && result == UINT64_MAX;
         i += 1 + unmarked_run(tick_ + i + 1, window - i - 1)) {
        const uint64_t tick = tick_ + i;
        const Timer *t = slots_[tick & mask_];
        if (!t) {
            // A stale mark (its timers were cancelled or re-armed elsewhere:
            // a connection's retransmission timer moves on every ACK). Clear
            // it, so the next scan steps over the slot by the word: the
            // invariant "a slot holding timers is marked" stays true.
            const uint64_t slot = tick & mask_;
            occupied_[slot >> 6] &= ~(uint64_t(1) << (slot & 63));
            continue;
        }
        for (; t; t = t->next)
            if (tick_of(t->due_ns) <= tick)
                result = std::min(result, t->due_ns);
    }
    if (result == UINT64_MAX) {
        uint64_t bound;
        if (__builtin_mul_overflow(tick_ + window, tick_ns_, &bound))
            bound = UINT64_MAX;
        result = bound;
    }
    next_due_cache_ = result;
    next_due_valid_ = true;
    return result;
}

} // namespace mars
