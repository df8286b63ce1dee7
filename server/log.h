// Log: the daemon's one-line messages on stderr, filtered by --log-level. Any thread.
//
//   SetLogLevel(LogLevel::kInfo);
//   Log(LogLevel::kInfo, "listening on %s", address);
#ifndef RINGKV_SERVER_LOG_H_
#define RINGKV_SERVER_LOG_H_

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
  absl::FPrintF(stderr, "ringkv-server: %s: %s\n", kNames[static_cast<int>(level)],
                absl::StrFormat(format, args...));
}

}  // namespace ringkv

#endif  // RINGKV_SERVER_LOG_H_
