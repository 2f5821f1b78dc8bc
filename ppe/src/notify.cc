// sd_notify over a datagram socket (notify.h). Outside the packet path: the
// control thread calls it at start, on reload, on its timer and at stop.
#include "notify.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace ppe {

Notifier::~Notifier()
{
    if (fd_ >= 0) ::close(fd_);
}

bool Notifier::open_from_environment(std::string *error)
{
    const char *sock = std::getenv("NOTIFY_SOCKET");
    const char *wd = std::getenv("WATCHDOG_USEC");
    const char *wd_pid = std::getenv("WATCHDOG_PID");
    std::string path = sock ? sock : "";
    std::string usec = wd ? wd : "", pid = wd_pid ? wd_pid : "";
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    if (path.empty()) return true;
    if (!usec.empty()) {
        char *end = nullptr;
        errno = 0;
        const unsigned long long v = std::strtoull(usec.c_str(), &end, 10);
        // WATCHDOG_PID names the process meant; another (a wrapper's child) ignores it.
        const bool ours = pid.empty() || pid == std::to_string(getpid());
        if (errno == 0 && end && *end == 0 && v > 0 && ours) watchdog_usec_ = v;
    }
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if ((path[0] != '/' && path[0] != '@') || path.size() >= sizeof sa.sun_path) {
        *error = "NOTIFY_SOCKET=\"" + path + "\" is neither an absolute path nor an abstract socket (@name) that fits " +
                 std::to_string(sizeof sa.sun_path - 1) + " bytes";
        return false;
    }
    std::memcpy(sa.sun_path, path.data(), path.size());
    if (path[0] == '@') sa.sun_path[0] = 0; // abstract namespace
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr *>(&sa),
                             socklen_t(offsetof(sockaddr_un, sun_path) + path.size())) != 0) {
        *error = "NOTIFY_SOCKET=\"" + path + "\": " + std::strerror(errno);
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        watchdog_usec_ = 0;
        return false;
    }
    path_ = path;
    return true;
}

bool Notifier::send(const std::string &message, std::string *error)
{
    if (fd_ < 0) return true;
    ssize_t r;
    do r = ::send(fd_, message.data(), message.size(), MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r != ssize_t(message.size())) {
        *error = "sd_notify to " + path_ + ": " + (r < 0 ? std::strerror(errno) : "short send");
        return false;
    }
    return true;
}

// A status is one line: newlines would start keys of their own.
static std::string one_line(const std::string &s)
{
    std::string out = s;
    for (char &c : out)
        if (c == '\n' || c == '\r') c = ' ';
    return out;
}

bool Notifier::ready(const std::string &status, std::string *error)
{
    return send("READY=1\nSTATUS=" + one_line(status) + "\n", error);
}

bool Notifier::status(const std::string &status, std::string *error)
{
    return send("STATUS=" + one_line(status) + "\n", error);
}

bool Notifier::watchdog(std::string *error) { return send("WATCHDOG=1\n", error); }

bool Notifier::stopping(std::string *error) { return send("STOPPING=1\n", error); }

void WatchdogGate::start(uint64_t period_usec, uint64_t now_ns, uint32_t engines)
{
    period_ns_ = period_usec * 1000;
    last_ns_ = now_ns;
    n_ = engines < 64 ? engines : 64;
    for (auto &s : seen_) s = 0;
}

bool WatchdogGate::due(const uint64_t *loops, uint32_t n, uint64_t now_ns)
{
    if (period_ns_ == 0 || now_ns - last_ns_ < period_ns_ / 4) return false;
    if (n > n_) n = n_;
    for (uint32_t i = 0; i < n; i++)
        if (loops[i] == seen_[i]) return false; // engine i has not turned since the last ping: no pet
    for (uint32_t i = 0; i < n; i++) seen_[i] = loops[i];
    last_ns_ = now_ns;
    return true;
}

} // namespace ppe
