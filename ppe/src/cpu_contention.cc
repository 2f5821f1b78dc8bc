// ppe/src/cpu_contention.cc: see cpu_contention.h.
#include "cpu_contention.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ppe {

CpuContention::~CpuContention()
{
    if (fd_ >= 0) ::close(fd_);
}

bool CpuContention::open_for_this_thread()
{
    if (fd_ >= 0) ::close(fd_);
    fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    primed_ = false;
    return fd_ >= 0;
}

bool CpuContention::sample(uint64_t now_ns)
{
    if (fd_ < 0) return false;
    // "<cpu time ns> <run delay ns> <timeslices>\n"
    char buf[96];
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    if (n <= 0) return contended(now_ns);
    const char *p = buf, *end = buf + n;
    while (p < end && *p >= '0' && *p <= '9') p++; // cpu time
    if (p == end || *p != ' ') return contended(now_ns);
    p++;
    uint64_t delay = 0;
    const char *digits = p;
    while (p < end && *p >= '0' && *p <= '9') delay = delay * 10 + uint64_t(*p++ - '0');
    if (p == digits) return contended(now_ns);
    return update(now_ns, delay);
}

bool CpuContention::update(uint64_t now_ns, uint64_t run_delay_ns)
{
    if (primed_ && now_ns > last_now_ns_ && run_delay_ns >= last_delay_ns_) {
        const uint64_t window = now_ns - last_now_ns_;
        const uint64_t waited = run_delay_ns - last_delay_ns_;
        if (waited * 1000 >= window * params_.threshold_permille) {
            until_ns_ = now_ns + params_.hold_ns;
            windows_++;
        }
    }
    primed_ = true;
    last_now_ns_ = now_ns;
    last_delay_ns_ = run_delay_ns;
    return contended(now_ns);
}

namespace {

// struct sched_attr (include/uapi/linux/sched/types.h); glibc 2.36 has no
// wrapper for sched_setattr/sched_getattr.
struct SchedAttr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
    uint32_t sched_util_min, sched_util_max;
};

} // namespace

bool request_slice(uint32_t slice_us, std::string *why)
{
    SchedAttr a{};
    if (syscall(SYS_sched_getattr, 0, &a, unsigned(sizeof a), 0u) != 0) {
        *why = std::string("sched_getattr: ") + std::strerror(errno);
        return false;
    }
    if (a.sched_policy != SCHED_OTHER && a.sched_policy != SCHED_BATCH) {
        *why = "the thread is not under the fair scheduler (policy " + std::to_string(a.sched_policy) + ")";
        return false;
    }
    // Keep the policy and nice value as they are; only the slice changes.
    a.size = sizeof a;
    a.sched_flags = 0;
    a.sched_runtime = uint64_t(slice_us) * 1000;
    if (syscall(SYS_sched_setattr, 0, &a, 0u) != 0) {
        *why = std::string("sched_setattr: ") + std::strerror(errno);
        return false;
    }
    SchedAttr b{};
    if (syscall(SYS_sched_getattr, 0, &b, unsigned(sizeof b), 0u) != 0 || b.sched_runtime != a.sched_runtime) {
        *why = "the kernel keeps its own slice for ordinary threads (custom slices need Linux 6.12 or later)";
        return false;
    }
    return true;
}

} // namespace ppe
