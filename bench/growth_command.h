// `ringkv-bench growth`: what a shard's table growth costs the request that meets it. One shard
// with no reserve takes `--ops` PUTs of new keys ("key:%012d", 32-byte values, as
// ringkv-loadgen's) one at a time, and each PUT is timed on its own: the worst, the percentiles
// and how many took over 1 ms, with the table growing or not, so that a pause growth causes is
// told apart from the machine's noise. Prints one line per part and writes --json.
#ifndef RINGKV_BENCH_GROWTH_COMMAND_H_
#define RINGKV_BENCH_GROWTH_COMMAND_H_

#include <cstdint>
#include <string>

namespace ringkv::bench {

int RunGrowthCommand(uint64_t ops, const std::string& json_path);

}  // namespace ringkv::bench

#endif  // RINGKV_BENCH_GROWTH_COMMAND_H_
