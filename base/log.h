// Log: a program's one-line messages on stderr, "PROGRAM: LEVEL: message", filtered by
// --log-level. PROGRAM is the name the process was started as (ringkv-server, a test binary),
// so a room that logs (persist/, net/, server/) names no program of its own. Any thread.
//
//   SetLogLevel(LogLevel::kInfo);
//   Log(LogLevel::kInfo, "listening on %s", address);  // "ringkv-server: info: listening on ..."
#ifndef RINGKV_BASE_LOG_H_
#define RINGKV_BASE_LOG_H_

#include <errno.h>  // program_invocation_short_name (glibc).

#include <atomic>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace ringkv {

enum class LogLevel : int { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

// Set once at start-up, read by any thread: relaxed, nothing else is published with it.
inline std::atomic<int> g_log_level{static_cast<int>(LogLevel::kInfo)};

inline void SetLogLevel(LogLevel level) {
  g_log_level.store(static_cast<int>(level), std::memory_order_relaxed);
}
inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_log_level.load(std::memory_order_relaxed);
}

template <typename... Args>
void Log(LogLevel level, const absl::FormatSpec<Args...>& format, const Args&... args) {
  if (!LogEnabled(level)) return;
  static constexpr const char* kNames[] = {"error", "warning", "info", "debug"};
  absl::FPrintF(stderr, "%s: %s: %s\n", program_invocation_short_name,
                kNames[static_cast<int>(level)], absl::StrFormat(format, args...));
}

}  // namespace ringkv

#endif  // RINGKV_BASE_LOG_H_
