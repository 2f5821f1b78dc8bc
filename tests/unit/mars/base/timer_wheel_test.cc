// Tests of mars/src/timer_wheel: firing times, rotations, huge time jumps,
// arming and cancelling from inside fire(), and a brute-force model under
// random operations (what fires, the armed count, next_due_ns()).
#include "timer_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace {

using namespace mars;

struct Recorder {
    std::vector<Timer *> fired;
    void operator()(Timer *t) { fired.push_back(t); }
};

TEST(TimerWheel, InitRejectsBadGeometry) {
    TimerWheel w;
    EXPECT_FALSE(w.init(0, 1000, 0));
    EXPECT_FALSE(w.init(3, 1000, 0));
    EXPECT_FALSE(w.init(1000, 1000, 0));
    EXPECT_FALSE(w.init(64, 0, 0));
    EXPECT_TRUE(w.init(1, 1000, 0));
    EXPECT_TRUE(w.init(64, 1000, 0));
    EXPECT_EQ(w.armed_count(), 0u);
    EXPECT_EQ(w.next_due_ns(), UINT64_MAX);
}

TEST(TimerWheel, FiresAtDueNeverEarly) {
    for (uint64_t tick : {1000u, 1024u}) { // division and shift paths
        TimerWheel w;
        ASSERT_TRUE(w.init(64, tick, 5000));
        Timer t;
        w.arm(&t, 12345);
        EXPECT_TRUE(TimerWheel::armed(&t));
        EXPECT_EQ(w.armed_count(), 1u);
        EXPECT_EQ(w.next_due_ns(), 12345u);
        Recorder r;
        w.advance(12000, r);
        w.advance(12344, r);
        EXPECT_TRUE(r.fired.empty());
        w.advance(12345, r);
        ASSERT_EQ(r.fired.size(), 1u);
        EXPECT_EQ(r.fired[0], &t);
        EXPECT_FALSE(TimerWheel::armed(&t));
        EXPECT_EQ(w.armed_count(), 0u);
        w.advance(100000, r);
        EXPECT_EQ(r.fired.size(), 1u);
    }
}

// clear() forgets every timer (Stack::reset's way: the owners are reset
// with it), wherever it sits, including slots whose timers were cancelled or
// swept back for a later rotation; the wheel then works as a new one.
TEST(TimerWheel, ClearForgetsEveryTimerAndTheWheelWorksAfter) {
    for (uint32_t slots : {1u, 8u, 64u, 256u}) {
        TimerWheel w;
        ASSERT_TRUE(w.init(slots, 100, 0));
        std::vector<Timer> timers(300);
        for (size_t i = 0; i < timers.size(); ++i)
            w.arm(&timers[i], 100 * (i * 7 % 251) + 50 * slots * (i % 3));
        TimerWheel::cancel(&timers[5]);
        Recorder r;
        w.advance(2000, r); // sweeps some slots; later rotations go back
        ASSERT_GT(w.armed_count(), 0u);
        w.clear(3000);
        EXPECT_EQ(w.armed_count(), 0u);
        EXPECT_EQ(w.next_due_ns(), UINT64_MAX);
        r.fired.clear();
        w.advance(1000000, r);
        EXPECT_TRUE(r.fired.empty()) << slots << " slots: a cleared timer fired";
        // A new timer in any slot fires once, on time.
        for (uint64_t due : {3050u, 3000u + 100u * slots + 70u}) {
            Timer t;
            w.arm(&t, due + 1000000);
            EXPECT_LE(w.next_due_ns(), due + 1000000); // may be early (a bounded scan), never late
            w.advance(due + 999999, r);
            EXPECT_TRUE(r.fired.empty());
            w.advance(due + 1000000, r);
            ASSERT_EQ(r.fired.size(), 1u);
            r.fired.clear();
        }
    }
}

TEST(TimerWheel, TimersSeveralRotationsOutWaitTheirTurn) {
    TimerWheel w;
    ASSERT_TRUE(w.init(16, 100, 0));
    Timer near, far;
    w.arm(&near, 550);
    w.arm(&far, 550 + 5 * 16 * 100); // same slot, five rotations later
    Recorder r;
    uint64_t now = 0;
    for (; now <= 550 + 5 * 16 * 100 + 200; now += 50) {
        size_t before = r.fired.size();
        w.advance(now, r);
        for (size_t i = before; i < r.fired.size(); ++i)
            EXPECT_LE(r.fired[i]->due_ns, now);
        if (now < 550) {
            EXPECT_TRUE(r.fired.empty());
        } else if (now < 550 + 5 * 16 * 100) {
            EXPECT_EQ(r.fired, std::vector<Timer *>{&near});
        }
    }
    EXPECT_EQ((r.fired), (std::vector<Timer *>{&near, &far}));
    EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheel, HugeJumpSweepsEachSlotOnce) {
    TimerWheel w;
    ASSERT_TRUE(w.init(1024, 1, 0)); // 1 ns ticks: a tick-by-tick loop would never end
    std::vector<Timer> timers(3000);
    for (size_t i = 0; i < timers.size(); ++i)
        w.arm(&timers[i], i * 7919);
    Timer later;
    w.arm(&later, 4'000'000'000'000'000'000ull);
    Recorder r;
    w.advance(1'000'000'000'000'000'000ull, r);
    EXPECT_EQ(r.fired.size(), timers.size());
    EXPECT_EQ(w.armed_count(), 1u);
    EXPECT_TRUE(TimerWheel::armed(&later));
    EXPECT_LE(w.next_due_ns(), later.due_ns);
    EXPECT_GE(w.next_due_ns(), 1'000'000'000'000'000'000ull); // nothing else pending
    w.advance(UINT64_MAX, r);
    EXPECT_EQ(r.fired.size(), timers.size() + 1);
    EXPECT_EQ(w.next_due_ns(), UINT64_MAX);
}

TEST(TimerWheel, ArmInThePastFiresAtNextAdvance) {
    TimerWheel w;
    ASSERT_TRUE(w.init(64, 1000, 1'000'000));
    Timer t;
    w.arm(&t, 5); // long ago
    EXPECT_EQ(w.next_due_ns(), 5u);
    Recorder r;
    w.advance(1'000'000, r);
    EXPECT_EQ(r.fired, std::vector<Timer *>{&t});
    // Also when time did not move at all since the last advance.
    w.arm(&t, 999'000);
    w.advance(1'000'000, r);
    EXPECT_EQ(r.fired.size(), 2u);
}

TEST(TimerWheel, CancelAndRearm) {
    TimerWheel w;
    ASSERT_TRUE(w.init(8, 10, 0));
    Timer a, b;
    TimerWheel::cancel(&a); // not armed: no-op
    EXPECT_EQ(w.armed_count(), 0u);
    w.arm(&a, 50);
    w.arm(&b, 50);
    w.arm(&a, 70); // re-arm moves it
    EXPECT_EQ(w.armed_count(), 2u);
    TimerWheel::cancel(&b);
    TimerWheel::cancel(&b);
    EXPECT_EQ(w.armed_count(), 1u);
    EXPECT_EQ(w.next_due_ns(), 70u);
    Recorder r;
    w.advance(60, r);
    EXPECT_TRUE(r.fired.empty());
    w.advance(70, r);
    EXPECT_EQ(r.fired, std::vector<Timer *>{&a});
}

// A retransmission timer re-armed on every ACK leaves a stale mark in each
// slot it left (a cancel leaves its slot's mark). Those marks must never hide
// a timer armed later into such a slot, nor the one that moved on.
TEST(TimerWheel, StaleMarksOfAReArmedTimerNeverHideATimer) {
    TimerWheel w;
    ASSERT_TRUE(w.init(1024, 10, 0));
    Timer rtx, later;
    for (uint64_t due = 100; due <= 2000; due += 10) // moves through 191 slots
        w.arm(&rtx, due);
    EXPECT_EQ(w.armed_count(), 1u);
    EXPECT_EQ(w.next_due_ns(), 2000u);   // past 190 stale marks
    w.arm(&later, 500);                  // into one of those slots
    EXPECT_EQ(w.next_due_ns(), 500u);
    Recorder r;
    w.advance(499, r);
    EXPECT_TRUE(r.fired.empty());
    w.advance(500, r);
    EXPECT_EQ(r.fired, std::vector<Timer *>{&later});
    EXPECT_EQ(w.next_due_ns(), 2000u);   // a scan that meets rtx's own slot
    w.advance(1999, r);
    EXPECT_EQ(r.fired.size(), 1u);
    w.advance(2000, r);                  // still marked: it fires
    EXPECT_EQ(r.fired, (std::vector<Timer *>{&later, &rtx}));
    EXPECT_EQ(w.next_due_ns(), UINT64_MAX);
}

TEST(TimerWheel, MovesBetweenWheelsKeepBothCounts) {
    TimerWheel w1, w2;
    ASSERT_TRUE(w1.init(8, 10, 0));
    ASSERT_TRUE(w2.init(8, 10, 0));
    Timer t;
    w1.arm(&t, 100);
    w2.arm(&t, 100);
    EXPECT_EQ(w1.armed_count(), 0u);
    EXPECT_EQ(w2.armed_count(), 1u);
    TimerWheel::cancel(&t);
    EXPECT_EQ(w2.armed_count(), 0u);
}

TEST(TimerWheel, FireMayCancelAndArmTimersOfTheSameSlot) {
    TimerWheel w;
    ASSERT_TRUE(w.init(4, 10, 0));
    std::vector<Timer> t(6);
    for (auto &x : t)
        w.arm(&x, 30); // all in one slot, all due together
    Timer other_slot;
    w.arm(&other_slot, 20);
    std::vector<Timer *> fired;
    Timer *first = nullptr;
    w.advance(35, [&](Timer *x) {
        fired.push_back(x);
        if (x != &other_slot && !first) {
            first = x;
            // Cancel every other due timer of the slot but t[4] and t[0],
            // re-arm t[4] in the past, and re-arm self a rotation later.
            for (auto &y : t)
                if (&y != x && &y != &t[0] && &y != &t[4])
                    TimerWheel::cancel(&y);
            w.arm(&t[4], 0);   // past: next advance, not this one
            w.arm(x, 30 + 40); // same slot, next rotation
        }
    });
    ASSERT_NE(first, nullptr);
    ASSERT_NE(first, &t[4]);
    ASSERT_NE(first, &t[0]); // t[0] was armed first: it is the chain's tail
    // other_slot, the first of the slot, then t[0] (still due, not cancelled).
    EXPECT_EQ(fired, (std::vector<Timer *>{&other_slot, first, &t[0]}));
    EXPECT_TRUE(TimerWheel::armed(first));
    EXPECT_TRUE(TimerWheel::armed(&t[4]));
    EXPECT_EQ(w.armed_count(), 2u);
    fired.clear();
    w.advance(36, [&](Timer *x) { fired.push_back(x); });
    EXPECT_EQ(fired, std::vector<Timer *>{&t[4]});
    fired.clear();
    w.advance(70, [&](Timer *x) { fired.push_back(x); });
    EXPECT_EQ(fired, std::vector<Timer *>{first});
    EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheel, FireRearmingItselfInThePastDoesNotLoop) {
    TimerWheel w;
    ASSERT_TRUE(w.init(16, 10, 0));
    Timer t;
    w.arm(&t, 5);
    int calls = 0;
    for (int i = 1; i <= 5; ++i) {
        w.advance(1000u * i, [&](Timer *x) {
            ++calls;
            w.arm(x, 0);
        });
        EXPECT_EQ(calls, i);
    }
}

TEST(TimerWheel, FireMayCancelATimerWaitingInALaterSlotOfTheSameAdvance) {
    TimerWheel w;
    ASSERT_TRUE(w.init(16, 10, 0));
    Timer a, b, c;
    w.arm(&a, 15);
    w.arm(&b, 45);
    w.arm(&c, 95); // the current tick's slot at now=99
    std::vector<Timer *> fired;
    w.advance(99, [&](Timer *x) {
        fired.push_back(x);
        TimerWheel::cancel(&b);
        TimerWheel::cancel(&c);
    });
    EXPECT_EQ(fired, std::vector<Timer *>{&a});
    EXPECT_EQ(w.armed_count(), 0u);
    EXPECT_EQ(w.next_due_ns(), UINT64_MAX);
}

// Random operations against a brute-force model, fire() included.
void run_model(uint32_t slots, uint64_t tick, uint64_t seed) {
    std::mt19937_64 rng(seed);
    TimerWheel w;
    uint64_t now = 1'000'000 + rng() % 100'000;
    ASSERT_TRUE(w.init(slots, tick, now));
    uint64_t cur_tick = now / tick;
    const uint64_t rotation = uint64_t{slots} * tick;
    std::vector<Timer> timers(200);
    std::map<Timer *, uint64_t> model;
    std::set<Timer *> armed_past_in_advance;

    auto random_due = [&]() -> uint64_t {
        switch (rng() % 6) {
        case 0: return now - std::min<uint64_t>(now, rng() % (3 * rotation)); // past
        case 1: return now + rng() % tick;
        case 2: return now + rng() % rotation;
        case 3: return now + rng() % (8 * rotation); // several rotations out
        case 4: return now; // due right now
        default: return now + rng() % (3 * tick);
        }
    };
    auto arm = [&](Timer *t, bool in_advance) {
        uint64_t due = random_due();
        w.arm(t, due);
        model[t] = due;
        if (in_advance && due <= now)
            armed_past_in_advance.insert(t);
        else
            armed_past_in_advance.erase(t);
    };
    auto cancel = [&](Timer *t) {
        TimerWheel::cancel(t);
        model.erase(t);
        armed_past_in_advance.erase(t);
    };
    auto check_next_due = [&]() {
        uint64_t truth = UINT64_MAX;
        for (auto &[t, due] : model)
            truth = std::min(truth, due);
        uint64_t got = w.next_due_ns();
        ASSERT_LE(got, truth);
        const uint64_t window = std::min<uint64_t>(slots, TimerWheel::kScanSlots);
        if (truth == UINT64_MAX || truth / tick < cur_tick + window) {
            ASSERT_EQ(got, truth); // exact within the scanned window
        }
    };

    for (int step = 0; step < 20000; ++step) {
        Timer *t = &timers[rng() % timers.size()];
        switch (rng() % 10) {
        case 0: case 1: case 2: case 3:
            arm(t, false);
            break;
        case 4:
            cancel(t);
            break;
        case 5:
            check_next_due();
            break;
        default: {
            uint64_t r = rng() % 100;
            uint64_t delta = r < 60 ? rng() % (2 * tick) : r < 95 ? rng() % rotation
                                                        : rng() % (20 * rotation);
            now += delta;
            cur_tick = std::max(cur_tick, now / tick);
            armed_past_in_advance.clear();
            w.advance(now, [&](Timer *x) {
                ASSERT_TRUE(model.count(x)) << "fired a timer that is not armed";
                ASSERT_EQ(model[x], x->due_ns);
                ASSERT_LE(x->due_ns, now) << "fired early";
                ASSERT_FALSE(armed_past_in_advance.count(x)) << "armed during this advance";
                ASSERT_FALSE(TimerWheel::armed(x));
                model.erase(x);
                // Sometimes act on timers from inside fire().
                uint64_t act = rng() % 8;
                Timer *y = &timers[rng() % timers.size()];
                if (act == 0)
                    arm(x, true);
                else if (act == 1)
                    arm(y, true);
                else if (act == 2)
                    cancel(y);
            });
            for (auto &[x, due] : model)
                if (due <= now) {
                    ASSERT_TRUE(armed_past_in_advance.count(x)) << "due timer did not fire";
                }
            break;
        }
        }
        ASSERT_EQ(w.armed_count(), model.size());
        for (auto &x : timers)
            ASSERT_EQ(TimerWheel::armed(&x), model.count(&x) == 1);
    }
}

TEST(TimerWheel, RandomOperationsMatchModelSmallWheel) { run_model(8, 1000, 11); }
TEST(TimerWheel, RandomOperationsMatchModelPow2Tick) { run_model(64, 1024, 12); }
TEST(TimerWheel, RandomOperationsMatchModelBigWheel) { run_model(1024, 100, 13); }
TEST(TimerWheel, RandomOperationsMatchModelOneSlot) { run_model(1, 500, 14); }

} // namespace
