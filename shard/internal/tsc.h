// The time-stamp counter, read with RDTSCP (it waits for earlier instructions to finish, so a
// span measured between two reads covers the work between them). Any thread.
#ifndef RINGKV_SHARD_INTERNAL_TSC_H_
#define RINGKV_SHARD_INTERNAL_TSC_H_

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#else
#include <chrono>
#endif

namespace ringkv::internal {

inline uint64_t Rdtscp() {
#if defined(__x86_64__)
  unsigned aux;
  return __rdtscp(&aux);
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

}  // namespace ringkv::internal

#endif  // RINGKV_SHARD_INTERNAL_TSC_H_
