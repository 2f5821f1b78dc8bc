// sd_notify for eta-ppe under systemd (Type=notify, WatchdogSec=), without
// libsystemd: one datagram per message to $NOTIFY_SOCKET, a path or, with a
// leading '@', an abstract socket (systemd's sd_notify(3) protocol).
#pragma once

#include <cstdint>
#include <string>

namespace ppe {

class Notifier {
  public:
    Notifier() = default;
    ~Notifier();
    Notifier(const Notifier &) = delete;
    Notifier &operator=(const Notifier &) = delete;

    // Reads $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID and unsets them
    // (so that nothing eta-ppe starts talks to systemd in its name). Without
    // $NOTIFY_SOCKET every call below does nothing and succeeds. False with
    // *error when the variable names no usable socket.
    bool open_from_environment(std::string *error);

    bool enabled() const { return fd_ >= 0; }
    // The watchdog's period asked for by systemd (0: none), microseconds.
    uint64_t watchdog_usec() const { return watchdog_usec_; }

    // "READY=1\nSTATUS=<status>", "STATUS=<status>", "WATCHDOG=1",
    // "RELOADING=1", "STOPPING=1". False with *error when the send failed.
    bool ready(const std::string &status, std::string *error);
    bool status(const std::string &status, std::string *error);
    bool watchdog(std::string *error);
    bool stopping(std::string *error);
    // Any message (lines "KEY=value").
    bool send(const std::string &message, std::string *error);

  private:
    int fd_ = -1;
    uint64_t watchdog_usec_ = 0;
    std::string path_;
};

// Decides when the engines' heartbeat may pet the watchdog: every engine's
// loop counter must have moved since the last ping, and pings are at least a
// quarter of the period apart (systemd's recommendation: half or less).
class WatchdogGate {
  public:
    void start(uint64_t period_usec, uint64_t now_ns, uint32_t engines);
    // `loops[i]`: engine i's published loop count now. True: send WATCHDOG=1.
    bool due(const uint64_t *loops, uint32_t n, uint64_t now_ns);

  private:
    uint64_t period_ns_ = 0, last_ns_ = 0;
    uint64_t seen_[64] = {};
    uint32_t n_ = 0;
};

} // namespace ppe
