// Clock: where shards read the time that TTL deadlines are compared with: wall-clock
// milliseconds since the Unix epoch, absolute, so that a deadline means the same after a
// restart. A plain function pointer, so that a test can give an engine a clock of its own.
//
//   Clock clock = SystemClockMs;
//   int64_t deadline = clock() + 1000;  // One second from now.
#ifndef RINGKV_SHARD_CLOCK_H_
#define RINGKV_SHARD_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace ringkv {

using Clock = int64_t (*)();

inline int64_t SystemClockMs() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1000 + now.tv_nsec / 1'000'000;
}

// The same clock in microseconds: what replication's delays are measured with.
inline int64_t SystemClockUs() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return int64_t{now.tv_sec} * 1'000'000 + now.tv_nsec / 1'000;
}

}  // namespace ringkv

#endif  // RINGKV_SHARD_CLOCK_H_
