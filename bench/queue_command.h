// `ringkv-bench queue`: the queue benchmark's command line (bench/queue_bench.h has the
// workload). Runs every chosen backend and task form `--runs` times for each producer count
// and round, prints a median (min .. max) table of total seconds, and writes every run to
// --json. Returns the exit status: 0, 1 if a run lost or repeated a task, 2 on a usage error.
#ifndef RINGKV_BENCH_QUEUE_COMMAND_H_
#define RINGKV_BENCH_QUEUE_COMMAND_H_

#include <string>

namespace ringkv::bench {

int RunQueueCommand(const std::string& json_path);

}  // namespace ringkv::bench

#endif  // RINGKV_BENCH_QUEUE_COMMAND_H_
