// ppe/src/log.h: eta-ppe's log lines on stderr (the journal under systemd).
// Not for the packet path: engines count, they do not log per packet.
#pragma once

#include "config.h"

#include <atomic>
#include <cstdio>

namespace ppe {

inline std::atomic<LogLevel> g_log_level{LogLevel::kInfo};

template <typename... Args>
void log(LogLevel level, const char *fmt, Args... args)
{
    if (level > g_log_level.load(std::memory_order_relaxed)) return;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    std::fprintf(stderr, "eta-ppe: %s: ", names[int(level)]);
    if constexpr (sizeof...(Args) == 0) std::fputs(fmt, stderr);
    else std::fprintf(stderr, fmt, args...);
    std::fputc('\n', stderr);
}

} // namespace ppe
