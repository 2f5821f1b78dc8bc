// timer_wheel.h: a hashed timing wheel (Varghese & Lauck, scheme 6).
//
// Timers are intrusive (embedded in the objects that own them): arming and
// cancelling are O(1) and never allocate. The wheel has a power-of-two number
// of slots, each `tick_ns` wide; a timer lands in slot (due / tick) & mask
// and may wait several rotations. Timers never fire early; they fire at most
// one tick late (plus however late advance() is called).
//
// A bit per slot says the slot may hold timers, so that advance() and
// next_due_ns() step over empty stretches a word (64 slots) at a time: an
// engine (or a fuzz input) that advances a second of idle time looks at
// 1,000 slot heads otherwise. The bit is set when a timer is linked into the
// slot and cleared when a sweep or next_due_ns() finds the slot empty; a
// cancel leaves it set (a stale bit costs one look, never a missed timer). So a slot that holds
// timers is always marked, and clear() empties only the marked ones.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

namespace mars {

class TimerWheel;

struct Timer {
    Timer *next = nullptr;
    Timer **pprev = nullptr; // nullptr when not armed
    uint64_t due_ns = 0;
    void *owner = nullptr;   // set by the owner once; the wheel never reads it
    uint32_t kind = 0;       // likewise: lets one callback tell timers apart
    // Set by arm(): the wheel holding this timer, so that the static cancel()
    // can keep that wheel's count. Owners leave it alone.
    TimerWheel *wheel = nullptr;
};

class TimerWheel {
  public:
    // slots must be a power of two. Allocates the slot array (setup only).
    bool init(uint32_t slots, uint64_t tick_ns, uint64_t now_ns);
    // Back to the state init() left, on the same slot array: every timer is
    // forgotten (not unlinked: their owners are reset with it), the clock
    // is now_ns. For Stack::reset().
    void clear(uint64_t now_ns);

    // Arms (or re-arms) t to fire at due_ns. A due time in the past fires at
    // the next advance().
    void arm(Timer *t, uint64_t due_ns);
    // Disarms t; a no-op when t is not armed.
    static void cancel(Timer *t);
    static bool armed(const Timer *t) { return t->pprev != nullptr; }

    // Fires every timer with due_ns <= now_ns, in no particular order within a
    // tick: unlinks it, then calls fire(Timer *). fire may arm or cancel any
    // timer, including the one it got. Returns at once, changing nothing, while
    // now_ns is in the tick of the last sweep and before floor_ns_ (no timer
    // can be due): an engine polls the wheel hundreds of times per tick.
    template <class F> void advance(uint64_t now_ns, F &&fire);

    // A time no later than the earliest armed timer's due time, UINT64_MAX
    // when none is armed. Cheap (bounded scan); may be early, never late.
    uint64_t next_due_ns() const;

    uint32_t armed_count() const { return count_; }

    // How many slots next_due_ns() looks at, at most, past the current tick.
    static constexpr uint32_t kScanSlots = 256;

  private:
    uint32_t count_ = 0;
    // One bit per slot (see the top): set whenever a timer is linked there.
    // next_due_ns() (const) clears the stale bits it meets: a cache, like
    // next_due_cache_, that never hides a timer.
    std::unique_ptr<uint64_t[]> occupied_;
    // Slot heads. A timer's effective tick is max(due tick, current tick when
    // armed); it sits in slot (effective tick & mask_). Every armed timer has
    // effective tick >= tick_ (advance() keeps this true).
    std::unique_ptr<Timer *[]> slots_;
    uint64_t mask_ = 0;
    uint64_t tick_ns_ = 1;
    int tick_shift_ = -1; // log2(tick_ns_) when it is a power of two
    uint64_t tick_ = 0;   // the tick of the last sweep: every earlier one was swept
    // next_due_ns() result, kept while valid: a lower bound on every armed
    // timer's due time that arm() lowers and advance()/cancel() invalidate.
    mutable uint64_t next_due_cache_ = UINT64_MAX;
    mutable bool next_due_valid_ = false;
    // A lower bound on every armed timer's due time (UINT64_MAX: none armed):
    // arm() lowers it, cancel() leaves it (still a bound), advance() sets it
    // to next_due_ns() after each sweep.
    uint64_t floor_ns_ = UINT64_MAX;
    // The first time of tick_ + 1. Within tick_, with nothing due, a sweep
    // would fire nothing and move nothing: advance() skips it.
    uint64_t next_tick_ns_ = 0;
    void set_next_tick() {
        if (__builtin_mul_overflow(tick_ + 1, tick_ns_, &next_tick_ns_))
            next_tick_ns_ = UINT64_MAX;
    }

    uint64_t tick_of(uint64_t ns) const {
        return tick_shift_ >= 0 ? ns >> tick_shift_ : ns / tick_ns_;
    }
    void mark(uint64_t slot) { occupied_[slot >> 6] |= uint64_t(1) << (slot & 63); }
    void unmark(uint64_t slot) { occupied_[slot >> 6] &= ~(uint64_t(1) << (slot & 63)); }
    // How many ticks from `tick` on (at most `limit`) hold no marked slot:
    // the distance to the next marked one, or limit.
    uint64_t unmarked_run(uint64_t tick, uint64_t limit) const;
    void link(Timer *t, Timer **head) {
        t->next = *head;
        if (t->next)
            t->next->pprev = &t->next;
        *head = t;
        t->pprev = head;
    }
    static void unlink(Timer *t) {
        *t->pprev = t->next;
        if (t->next)
            t->next->pprev = t->pprev;
        t->next = nullptr;
        t->pprev = nullptr;
    }
    static void detach(Timer **head, Timer *&list);
    template <class F> void sweep_list(Timer *&list, uint64_t home, uint64_t now_ns, F &fire);
};

inline uint64_t TimerWheel::unmarked_run(uint64_t tick, uint64_t limit) const {
    uint64_t run = 0;
    while (run < limit) {
        const uint64_t slot = (tick + run) & mask_;
        const uint64_t bits = occupied_[slot >> 6] >> (slot & 63);
        if (bits)
            return std::min<uint64_t>(run + __builtin_ctzll(bits), limit);
        // Nothing marked up to the end of this word, or to the wheel's end
        // where the slots wrap (a wheel of fewer than 64 slots).
        run += std::min<uint64_t>(64 - (slot & 63), mask_ + 1 - slot);
    }
    return limit;
}

inline void TimerWheel::arm(Timer *t, uint64_t due_ns) {
    cancel(t);
    uint64_t tick = tick_of(due_ns);
    if (tick < tick_)
        tick = tick_; // in the past: the next advance() sweeps this slot
    t->due_ns = due_ns;
    t->wheel = this;
    link(t, &slots_[tick & mask_]);
    mark(tick & mask_);
    ++count_;
    if (next_due_valid_ && due_ns < next_due_cache_)
        next_due_cache_ = due_ns;
    if (due_ns < floor_ns_)
        floor_ns_ = due_ns;
}

inline void TimerWheel::cancel(Timer *t) {
    if (!t->pprev)
        return;
    unlink(t);
    TimerWheel *w = t->wheel;
    --w->count_;
    // The cached lower bound stays a lower bound, but once the earliest timer
    // is gone it would make the caller wake up for nothing: recompute.
    if (t->due_ns <= w->next_due_cache_)
        w->next_due_valid_ = false;
}

// Takes a slot's whole list out, so that fire() may arm or cancel anything
// (timers still waiting in the detached list included) while it is walked.
// The detached list's first pprev points at `list`, which must stay put.
inline void TimerWheel::detach(Timer **head, Timer *&list) {
    list = *head;
    *head = nullptr;
    if (list)
        list->pprev = &list;
}

// Fires the due timers of a detached list and puts the others back in their
// slot. Every step takes the current first element again, so whatever fire()
// unlinked is never visited; timers that fire() arms go to the real slots.
template <class F> void TimerWheel::sweep_list(Timer *&list, uint64_t home, uint64_t now_ns, F &fire) {
    while (list) {
        Timer *t = list;
        unlink(t); // list now holds the next one
        if (t->due_ns <= now_ns) {
            --count_;
            fire(t);
        } else {
            link(t, &slots_[home]); // a later rotation, or later within the current tick
            mark(home);
        }
    }
}

template <class F> void TimerWheel::advance(uint64_t now_ns, F &&fire) {
    if (now_ns < floor_ns_ && now_ns < next_tick_ns_)
        return;
    const uint64_t first = tick_;
    const uint64_t now_tick = tick_of(now_ns);
    if (now_tick > tick_)
        tick_ = now_tick; // first, so that timers armed by fire() keep the invariant
    next_due_valid_ = false;
    // The current tick's slot is taken out before anything fires: past-due
    // timers that fire() arms land there and must wait for the next advance().
    const uint64_t current = tick_ & mask_;
    Timer *current_list;
    detach(&slots_[current], current_list);
    unmark(current);
    // Ticks first..tick_ in order, each slot at most once (now may have jumped
    // ahead by any number of rotations), stepping over unmarked slots. The
    // marks are read as the sweep goes: a timer fire() arms ahead is seen.
    const uint64_t ticks = tick_ - first;
    const uint64_t n = ticks > mask_ ? mask_ + 1 : ticks + 1;
    for (uint64_t i = unmarked_run(first, n); i < n; i += 1 + unmarked_run(first + i + 1, n - i - 1)) {
        const uint64_t slot = (first + i) & mask_;
        if (slot == current)
            continue;
        Timer *list;
        detach(&slots_[slot], list);
        unmark(slot);
        sweep_list(list, slot, now_ns, fire);
    }
    sweep_list(current_list, current, now_ns, fire);
    next_due_valid_ = false; // fire() may have armed timers mid-sweep
    floor_ns_ = next_due_ns();
    set_next_tick();
}

} // namespace mars
