// ppe/src/cpu_contention.cc: see cpu_contention.h.
#include "cpu_contention.h"

#include <fcntl.h>
#include <unistd.h>

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

} // namespace ppe
