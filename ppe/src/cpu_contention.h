// ppe/src/cpu_contention.h: does an engine share its CPU with other work?
//
// An engine that busy-polls after each piece of work (idle = "adaptive")
// wins latency on a CPU of its own and loses it on a shared one: the
// scheduler gives a hog the rest of the CPU in whole time slices (ms), and
// every frame that arrives while the engine is switched out waits for the
// next slice. An engine that naps instead is woken by its port's first frame
// and, having slept, is run ahead of the hog (the fair scheduler's credit to
// sleepers). So an adaptive engine spins while its CPU is its own and naps at
// once while it is not.
//
// The signal is the scheduler's own account: `run_delay`, the time this
// thread spent runnable but not running (second field of
// /proc/thread-self/schedstat). It is sampled at housekeeping (every 10 ms),
// never on the packet path: one pread per sample. A window in which the
// thread waited for at least `threshold_permille` of the window's length
// marks the CPU contended for `hold_ns` from then; each further contended
// window extends it. While contended the engine naps and is rarely kept
// waiting, so the signal fades; after `hold_ns` without it the engine spins
// again and, if the hog is still there, the next window says so (about one
// 10 ms window of spinning per hold).
#pragma once

#include <cstdint>
#include <string>

namespace ppe {

class CpuContention {
  public:
    struct Params {
        uint32_t threshold_permille = 50;    // 5%: 0.5 ms of waiting in a 10 ms window
        uint64_t hold_ns = 1'000'000'000ull; // how long one contended window counts
    };

    CpuContention() = default;
    explicit CpuContention(Params p) : params_(p) {}
    ~CpuContention();
    CpuContention(const CpuContention &) = delete;
    CpuContention &operator=(const CpuContention &) = delete;

    // From the thread to watch (it opens /proc/thread-self). False where the
    // kernel has no schedstat for threads: then contended() stays false and
    // the engine keeps its configured policy.
    bool open_for_this_thread();
    bool available() const { return fd_ >= 0; }

    // Housekeeping: read run_delay and update the verdict. Returns contended().
    bool sample(uint64_t now_ns);

    // The verdict from one sample, without /proc (what sample() does with
    // what it reads; unit tests drive it directly).
    bool update(uint64_t now_ns, uint64_t run_delay_ns);

    bool contended(uint64_t now_ns) const { return now_ns < until_ns_; }
    uint64_t contended_windows() const { return windows_; }

  private:
    Params params_{};
    int fd_ = -1;
    bool primed_ = false;
    uint64_t last_now_ns_ = 0, last_delay_ns_ = 0;
    uint64_t until_ns_ = 0;
    uint64_t windows_ = 0;
};

// The other half of sharing a CPU well: how soon a napping engine runs once
// a frame or a doorbell wakes it. Linux's fair scheduler (EEVDF, 6.6+) lets a
// woken thread preempt the one running when its deadline is earlier, and a
// thread's deadline is one slice after it became eligible; since 6.12 a
// thread may ask for a shorter slice (sched_setattr, sched_runtime of a
// SCHED_OTHER thread, 0.1–100 ms; no privilege needed). An engine that asks
// for 100 us is run within about that of its wake-up even beside a CPU hog,
// where the default slice (~3 ms) leaves it waiting for the hog's slice to
// end. It gets no more CPU time than before: a short slice changes when the
// thread runs, not how much. Applies to the calling thread. Returns false
// with *why when the kernel refused or ignored it (an older kernel: the
// engine then keeps the default slice).
bool request_slice(uint32_t slice_us, std::string *why);

} // namespace ppe
