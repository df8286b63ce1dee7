#include "bench/growth_command.h"

#include <chrono>
#include <cstdio>
#include <string_view>

#include "bench/latency_histogram.h"
#include "shard/request.h"
#include "shard/router.h"
#include "shard/shard.h"

namespace ringkv::bench {

int RunGrowthCommand(uint64_t ops, const std::string& json_path) {
  Shard shard;
  const std::string value(32, 'v');
  // [0]: PUTs that met the table not growing, [1]: growing.
  LatencyHistogram latency[2];
  uint64_t over_1ms[2] = {0, 0};
  char key[32];
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < ops; ++i) {
    const int n = std::snprintf(key, sizeof key, "key:%012llu", static_cast<unsigned long long>(i));
    Request r;
    r.op = Op::kPut;
    r.key = std::string_view(key, static_cast<size_t>(n));
    r.value = value;
    r.hash = Router::Hash(r.key);
    const bool growing = shard.growing();
    const auto t0 = std::chrono::steady_clock::now();
    shard.Execute(r, /*now_ms=*/0);
    const auto ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    if (r.result != Result::kOk) {
      std::fprintf(stderr, "ringkv-bench growth: PUT %llu failed\n",
                   static_cast<unsigned long long>(i));
      return 1;
    }
    const int part = growing || shard.growing() ? 1 : 0;
    latency[part].Record(ns);
    over_1ms[part] += ns > 1'000'000;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const char* names[2] = {"not growing", "growing"};
  std::printf("%llu PUTs of new keys into one shard in %.2f s (%.2f Mops)\n",
              static_cast<unsigned long long>(ops), seconds,
              static_cast<double>(ops) / seconds / 1e6);
  for (int part = 0; part < 2; ++part) {
    const LatencyHistogram& h = latency[part];
    std::printf("  %-11s %10llu PUTs: p99 %.2f us, p99.99 %.2f us, max %.1f us, over 1 ms: %llu\n",
                names[part], static_cast<unsigned long long>(h.count()), h.Percentile(99) / 1e3,
                h.Percentile(99.99) / 1e3, static_cast<double>(h.max()) / 1e3,
                static_cast<unsigned long long>(over_1ms[part]));
  }
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr) {
      std::perror(json_path.c_str());
      return 2;
    }
    std::fprintf(f, "{\"ops\": %llu, \"seconds\": %.3f", static_cast<unsigned long long>(ops),
                 seconds);
    for (int part = 0; part < 2; ++part) {
      const LatencyHistogram& h = latency[part];
      std::fprintf(f,
                   ", \"%s\": {\"count\": %llu, \"p99_us\": %.3f, \"p9999_us\": %.3f, "
                   "\"max_us\": %.3f, \"over_1ms\": %llu}",
                   part == 0 ? "not_growing" : "growing",
                   static_cast<unsigned long long>(h.count()), h.Percentile(99) / 1e3,
                   h.Percentile(99.99) / 1e3, static_cast<double>(h.max()) / 1e3,
                   static_cast<unsigned long long>(over_1ms[part]));
    }
    std::fprintf(f, "}\n");
    std::fclose(f);
  }
  return 0;
}

}  // namespace ringkv::bench
