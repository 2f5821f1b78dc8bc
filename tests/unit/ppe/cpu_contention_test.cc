// ppe/src/cpu_contention.h: the verdict from run-delay samples (update(), fed
// by hand), and the /proc reading on a thread that is made to wait for its CPU.
#include "cpu_contention.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <cstdint>
#include <thread>

namespace {

constexpr uint64_t kMs = 1'000'000;

TEST(CpuContention, FirstSampleOnlyPrimes)
{
    ppe::CpuContention c;
    EXPECT_FALSE(c.update(10 * kMs, 500 * kMs)); // a large total, but no window yet
    EXPECT_EQ(c.contended_windows(), 0u);
}

TEST(CpuContention, AWindowWithWaitingMarksTheCpuSharedForTheHold)
{
    ppe::CpuContention c({/*threshold_permille=*/50, /*hold_ns=*/1000 * kMs});
    c.update(0, 0);
    EXPECT_FALSE(c.update(10 * kMs, kMs / 10)); // 1% waited: its own CPU
    EXPECT_TRUE(c.update(20 * kMs, kMs / 10 + 5 * kMs)); // 50% waited: shared
    EXPECT_EQ(c.contended_windows(), 1u);
    // Napping, it no longer waits; the verdict holds for hold_ns from the window.
    EXPECT_TRUE(c.update(30 * kMs, 5 * kMs + kMs / 10));
    EXPECT_TRUE(c.contended(20 * kMs + 999 * kMs));
    EXPECT_FALSE(c.contended(20 * kMs + 1000 * kMs));
    EXPECT_FALSE(c.update(1100 * kMs, 5 * kMs + kMs / 10));
}

TEST(CpuContention, EachContendedWindowExtendsTheHold)
{
    ppe::CpuContention c({50, 100 * kMs});
    c.update(0, 0);
    EXPECT_TRUE(c.update(10 * kMs, 5 * kMs));
    EXPECT_TRUE(c.update(90 * kMs, 10 * kMs));  // 5 ms in 80 ms: 6.25%
    EXPECT_TRUE(c.contended(189 * kMs));
    EXPECT_FALSE(c.contended(190 * kMs));
    EXPECT_EQ(c.contended_windows(), 2u);
}

TEST(CpuContention, ThresholdIsInclusiveAndClockOrCounterGoingBackIsIgnored)
{
    ppe::CpuContention c({50, 100 * kMs});
    c.update(100 * kMs, 10 * kMs);
    EXPECT_FALSE(c.update(110 * kMs, 10 * kMs + kMs / 2 - 1)); // just under 5%
    EXPECT_TRUE(c.update(120 * kMs, 11 * kMs - 1));            // exactly 5%
    ppe::CpuContention d({50, 100 * kMs});
    d.update(100 * kMs, 50 * kMs);
    EXPECT_FALSE(d.update(90 * kMs, 90 * kMs)); // time went back: no window
    EXPECT_FALSE(d.update(100 * kMs, 10 * kMs)); // counter went back (a new thread's): re-primed
    EXPECT_FALSE(d.update(110 * kMs, 10 * kMs));
    EXPECT_EQ(d.contended_windows(), 0u);
}

uint64_t mono_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// The real reading: this thread and a busy sibling pinned to one CPU must
// share it, so this thread's run delay grows by about half of each window.
// The verdict does not depend on how busy the machine is: more load only
// makes this thread wait longer.
TEST(CpuContention, ReadsThisThreadsRunDelay)
{
    ppe::CpuContention c({50, 1000 * kMs});
    if (!c.open_for_this_thread()) GTEST_SKIP() << "no /proc/thread-self/schedstat on this kernel";
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
    std::atomic<bool> stop{false};
    std::thread hog([&] {
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        while (!stop.load(std::memory_order_relaxed)) {}
    });
    EXPECT_FALSE(c.sample(mono_ns())); // primes
    // Spin through windows of 20 ms of this thread's wall time until one is
    // judged contended; bounded far above any honest delay (with the hog on
    // this CPU the first window already is).
    bool seen = false;
    for (int i = 0; i < 200 && !seen; i++) {
        const uint64_t until = mono_ns() + 20 * kMs;
        while (mono_ns() < until) {}
        seen = c.sample(mono_ns());
    }
    stop = true;
    hog.join();
    EXPECT_TRUE(seen);
    EXPECT_GE(c.contended_windows(), 1u);
}

} // namespace

namespace {

bool kernel_takes_custom_slices() // Linux 6.12 or later
{
    utsname u;
    if (uname(&u) != 0) return false;
    int major = 0, minor = 0;
    if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
    return major > 6 || (major == 6 && minor >= 12);
}

// request_slice() on a thread of its own: the kernel reports the slice back
// (Linux 6.12+), or the call says why not (older kernels); policy and nice stay.
TEST(RequestSlice, SetsTheCallingThreadsSliceOnly)
{
    std::thread t([] {
        const int nice_before = getpriority(PRIO_PROCESS, 0);
        std::string why;
        if (!ppe::request_slice(100, &why)) {
            EXPECT_FALSE(why.empty());
            EXPECT_FALSE(kernel_takes_custom_slices()) << "Linux 6.12+ refused a 100 us slice: " << why;
            return;
        }
        FILE *f = std::fopen("/proc/thread-self/sched", "r");
        ASSERT_NE(f, nullptr);
        char line[256];
        long long slice = -1;
        while (std::fgets(line, sizeof line, f))
            if (std::strncmp(line, "se.slice", 8) == 0) slice = std::atoll(std::strchr(line, ':') + 1);
        std::fclose(f);
        if (slice >= 0) {
            EXPECT_EQ(slice, 100'000);
        }
        EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
        EXPECT_EQ(getpriority(PRIO_PROCESS, 0), nice_before);
    });
    t.join();
}

} // namespace
