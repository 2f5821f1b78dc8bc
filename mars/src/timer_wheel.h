// timer_wheel.h: a hashed timing wheel (Varghese & Lauck, scheme 6).
//
// Timers are intrusive (embedded in the objects that own them): arming and
// cancelling are O(1) and never allocate. The wheel has a power-of-two number
// of slots, each `tick_ns` wide; a timer lands in slot (due / tick) & mask
// and may wait several rotations. Timers never fire early; they fire at most
// one tick late (plus however late advance() is called).
#pragma once

#include <cstdint>
#include <memory>

namespace mars {

struct Timer {
    Timer *next = nullptr;
    Timer **pprev = nullptr; // nullptr when not armed
    uint64_t due_ns = 0;
    void *owner = nullptr;   // set by the owner once; the wheel never reads it
    uint32_t kind = 0;       // likewise: lets one callback tell timers apart
};

class TimerWheel {
  public:
    // slots must be a power of two. Allocates the slot array (setup only).
    bool init(uint32_t slots, uint64_t tick_ns, uint64_t now_ns);

    // Arms (or re-arms) t to fire at due_ns. A due time in the past fires at
    // the next advance().
    void arm(Timer *t, uint64_t due_ns);
    // Disarms t; a no-op when t is not armed.
    static void cancel(Timer *t);
    static bool armed(const Timer *t) { return t->pprev != nullptr; }

    // Fires every timer with due_ns <= now_ns, in no particular order within a
    // tick: unlinks it, then calls fire(Timer *). fire may arm or cancel any
    // timer, including the one it got.
    template <class F> void advance(uint64_t now_ns, F &&fire);

    // A time no later than the earliest armed timer's due time, UINT64_MAX
    // when none is armed. Cheap (bounded scan); may be early, never late.
    uint64_t next_due_ns() const;

    uint32_t armed_count() const { return count_; }

  private:
    uint32_t count_ = 0;
    // (other fields chosen by the implementation)
};

} // namespace mars
