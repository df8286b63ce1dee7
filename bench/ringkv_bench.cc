// ringkv-bench: reproduces the lock-vs-ring tables of the report (seed 002).
//
// Workloads (one family, one driver):
//   --method=M   one method: the report's PUT phase then GET phase, per-thread and total Mops,
//                peak RSS; --rdtsc adds the per-thread RDTSCP cycle breakdown.
//   --all        every method, each in a fresh child process (so peak RSS is its own), one table.
//   queue        the queue benchmark (seeds 000 and 003, bench/queue_bench.h): producers post
//                tasks to one consumer loop through each candidate cross-thread path.
//   growth       each PUT of a new key into one shard that starts empty, timed on its own: what
//                the table's growth costs the request that meets it (bench/growth_command.h).
// Exit status: 0 when every GET found the value last written, 1 when one did not (or a child
// run failed), 2 on a usage error.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/command_line.h"
#include "bench/growth_command.h"
#include "bench/kv_bench.h"
#include "bench/queue_command.h"

ABSL_FLAG(uint32_t, threads, std::max(1u, std::thread::hardware_concurrency()),
          "worker threads (and shards); default: the machine's cores");
ABSL_FLAG(std::string, method, "spsc-rte",
          "lock | mpsc-rte | spsc-rte | mpsc-moody | spsc-moody | mutex | none");
ABSL_FLAG(uint64_t, ops, 25'000'000,
          "PUTs (then GETs) per thread; keys file.mdtest.<a>.<b>, "
          "a and b uniform in [1, ops]");
ABSL_FLAG(uint32_t, burst, 32, "requests per poll and per ring dequeue (1 .. 256)");
ABSL_FLAG(uint32_t, ring_size, 65536, "pointers per ring");
ABSL_FLAG(bool, all, false, "run every method, each in its own process, and print one table");
ABSL_FLAG(bool, rdtsc, false, "per-thread RDTSCP cycle breakdown (hash, map, ring)");
ABSL_FLAG(bool, pin, true, "pin worker thread i to CPU i mod cores");
ABSL_FLAG(bool, progress, true, "progress lines on stderr during long phases");
ABSL_FLAG(bool, reserve_records, true,
          "pre-fault each shard's records for the keys it reserves, as the report's maps paid "
          "for their memory before the timer; false: records come from malloc as keys arrive, "
          "as a server's do");
ABSL_FLAG(std::string, json, "", "also write the results as JSON to this file");

namespace ringkv::bench {
namespace {

constexpr double kGB = 1e9;

void PrintPhase(const char* name, const PhaseResult& phase) {
  std::printf("[%s] total %.4f Mops, in %.4f s\n", name, phase.total_mops, phase.seconds);
  std::printf("      per-thread %.4f Mops\n", phase.per_thread_mops);
}

void PrintCycles(const char* map_label, const PhaseResult& phase, double ghz) {
  auto per = [](uint64_t cycles, uint64_t ops) {
    return ops == 0 ? 0.0 : static_cast<double>(cycles) / static_cast<double>(ops);
  };
  for (size_t t = 0; t < phase.cycles.size(); ++t) {
    const ThreadCycles& c = phase.cycles[t];
    std::printf("#%zu hash func cycle %llu, op_num %llu, cycle/op %.4f\n", t,
                static_cast<unsigned long long>(c.hash_cycles),
                static_cast<unsigned long long>(c.hash_ops), per(c.hash_cycles, c.hash_ops));
    std::printf("#%zu %s cycle %llu, op_num %llu, cycle/op %.4f\n", t, map_label,
                static_cast<unsigned long long>(c.map_cycles),
                static_cast<unsigned long long>(c.map_ops), per(c.map_cycles, c.map_ops));
    std::printf("#%zu ring cycle %llu, op_num %llu, cycle/op %.4f\n", t,
                static_cast<unsigned long long>(c.ring_cycles),
                static_cast<unsigned long long>(c.ring_ops), per(c.ring_cycles, c.ring_ops));
    std::printf("#%zu whole phase cycle %llu, own requests %llu, cycle/op %.4f (%.2f ns/op)\n", t,
                static_cast<unsigned long long>(c.total_cycles),
                static_cast<unsigned long long>(c.requests), per(c.total_cycles, c.requests),
                per(c.total_cycles, c.requests) / ghz);
  }
}

std::string PhaseJson(const PhaseResult& phase) {
  std::vector<std::string> threads;
  for (const ThreadCycles& c : phase.cycles) {
    threads.push_back(absl::StrFormat(
        "{\"hash_cycles\": %d, \"hash_ops\": %d, \"map_cycles\": %d, \"map_ops\": %d, "
        "\"ring_cycles\": %d, \"ring_ops\": %d, \"total_cycles\": %d, \"requests\": %d}",
        c.hash_cycles, c.hash_ops, c.map_cycles, c.map_ops, c.ring_cycles, c.ring_ops,
        c.total_cycles, c.requests));
  }
  return absl::StrFormat(
      "{\"mops\": %.6f, \"per_thread_mops\": %.6f, \"seconds\": %.6f, "
      "\"cycles\": [%s]}",
      phase.total_mops, phase.per_thread_mops, phase.seconds, absl::StrJoin(threads, ", "));
}

std::string ResultJson(const KvBenchOptions& o, const KvBenchResult& r) {
  return absl::StrFormat(
      "{\"method\": \"%s\", \"threads\": %d, \"ops_per_thread\": %d, \"burst\": %d, "
      "\"ring_size\": %d, \"put\": %s, \"get\": %s, \"peak_rss_bytes\": %d, \"tsc_ghz\": %.4f, "
      "\"errors\": %d}",
      o.method, o.threads, o.ops, o.burst, o.ring_size, PhaseJson(r.put), PhaseJson(r.get),
      r.peak_rss_bytes, r.tsc_ghz, r.errors);
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text << "\n";
  return static_cast<bool>(out);
}

// Reads the number after "key": at or after `from` in JSON this program wrote.
double JsonNumber(const std::string& json, const std::string& key, size_t from = 0) {
  const size_t at = json.find("\"" + key + "\": ", from);
  return at == std::string::npos ? -1 : std::strtod(json.c_str() + at + key.size() + 4, nullptr);
}

int RunOne(const KvBenchOptions& options, const std::string& json_path) {
  std::printf("%s test, %llu write/read op per thread, %u thread%s\n", options.method.c_str(),
              static_cast<unsigned long long>(options.ops), options.threads,
              options.threads == 1 ? "" : "s");
  std::fflush(stdout);
  auto result = RunKvBench(options);
  if (!result.ok()) {
    std::fprintf(stderr, "ringkv-bench: %s\n", std::string(result.status().message()).c_str());
    return 2;
  }
  PrintPhase("PUT", result->put);
  if (options.rdtsc) PrintCycles("hashmap write", result->put, result->tsc_ghz);
  PrintPhase("GET", result->get);
  if (options.rdtsc) PrintCycles("hashmap read", result->get, result->tsc_ghz);
  std::printf("peak RSS %.3f GB (%.3f GB per thread)\n",
              static_cast<double>(result->peak_rss_bytes) / kGB,
              static_cast<double>(result->peak_rss_bytes) / kGB / options.threads);
  if (options.rdtsc) {
    std::printf("TSC %.3f GHz: %.2f cycles = 1 ns\n", result->tsc_ghz, result->tsc_ghz);
  }
  std::fflush(stdout);
  if (!json_path.empty() && !WriteFile(json_path, ResultJson(options, *result))) {
    std::fprintf(stderr, "ringkv-bench: cannot write %s\n", json_path.c_str());
    return 2;
  }
  if (result->errors > 0) {
    std::fprintf(stderr, "ringkv-bench: %llu GETs did not find the value last written; first: %s\n",
                 static_cast<unsigned long long>(result->errors), result->first_error.c_str());
    return 1;
  }
  return 0;
}

// Runs `argv0 --method=M ...` for every method, each writing JSON to a temporary file.
int RunAll(const char* argv0, const KvBenchOptions& options, const std::string& json_path) {
  struct Row {
    std::string method;
    double put = -1, get = -1, rss = -1;
    int status = 0;
  };
  std::vector<Row> rows;
  std::vector<std::string> runs_json;
  for (const std::string& method : KvBenchMethods()) {
    char tmp[] = "/tmp/ringkv-bench-XXXXXX";
    const int fd = mkstemp(tmp);
    if (fd < 0) {
      std::perror("ringkv-bench: mkstemp");
      return 2;
    }
    close(fd);
    std::vector<std::string> args = {
        argv0,
        "--method=" + method,
        absl::StrCat("--threads=", options.threads),
        absl::StrCat("--ops=", options.ops),
        absl::StrCat("--burst=", options.burst),
        absl::StrCat("--ring_size=", options.ring_size),
        absl::StrCat("--pin=", options.pin ? "true" : "false"),
        absl::StrCat("--progress=", options.progress ? "true" : "false"),
        absl::StrCat("--rdtsc=", options.rdtsc ? "true" : "false"),
        absl::StrCat("--reserve_records=", options.reserve_records ? "true" : "false"),
        absl::StrCat("--json=", tmp)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    Row row{method};
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
      std::perror("ringkv-bench: posix_spawn");
      return 2;
    }
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    row.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128;
    std::ifstream in(tmp);
    std::stringstream text;
    text << in.rdbuf();
    std::remove(tmp);
    const std::string json = text.str();
    if (row.status == 0 && !json.empty()) {
      row.put = JsonNumber(json, "mops", json.find("\"put\""));
      row.get = JsonNumber(json, "mops", json.find("\"get\""));
      row.rss = JsonNumber(json, "peak_rss_bytes") / kGB;
      while (!runs_json.empty() && runs_json.back().empty()) runs_json.pop_back();
      runs_json.push_back(json.substr(0, json.find_last_not_of('\n') + 1));
    }
    rows.push_back(row);
    std::printf("\n");
  }
  std::printf("%u thread%s, %llu ops per thread\n", options.threads,
              options.threads == 1 ? "" : "s", static_cast<unsigned long long>(options.ops));
  std::printf("| method | PUT Mops | GET Mops | peak RSS GB |\n|---|---|---|---|\n");
  int worst = 0;
  for (const Row& row : rows) {
    if (row.status != 0) {
      std::printf("| %s | failed (exit %d) | | |\n", row.method.c_str(), row.status);
      worst = 1;
    } else {
      std::printf("| %s | %.2f | %.2f | %.2f |\n", row.method.c_str(), row.put, row.get, row.rss);
    }
  }
  if (!json_path.empty() &&
      !WriteFile(json_path, "{\"runs\": [" + absl::StrJoin(runs_json, ", ") + "]}")) {
    std::fprintf(stderr, "ringkv-bench: cannot write %s\n", json_path.c_str());
    return 2;
  }
  return worst;
}

}  // namespace
}  // namespace ringkv::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "reproduces the report's lock-vs-ring key-value benchmark.\n"
      "  ringkv-bench [--threads=N] [--method=M | --all] [--ops=N] [--rdtsc] [--json=FILE]\n"
      "  ringkv-bench queue [--producers=1,2,4] [--tasks=N] [--rounds=N] [--backends=...] "
      "[--forms=...] [--runs=3]\n"
      "  ringkv-bench growth [--ops=N]   (each PUT of a new key into one growing shard, timed)\n"
      "Exit status: 0 ok, 1 a GET did not find the value last written, 2 usage error.");
  std::vector<char*> rest = ringkv::ParseCommandLineOrExit(argc, argv);
  if (rest.size() == 2 && std::string(rest[1]) == "queue") {
    return ringkv::bench::RunQueueCommand(absl::GetFlag(FLAGS_json));
  }
  if (rest.size() == 2 && std::string(rest[1]) == "growth") {
    return ringkv::bench::RunGrowthCommand(absl::GetFlag(FLAGS_ops), absl::GetFlag(FLAGS_json));
  }
  if (rest.size() > 1) {
    std::fprintf(stderr, "ringkv-bench: unexpected argument '%s' (see --help)\n", rest[1]);
    return 2;
  }
  ringkv::bench::KvBenchOptions options;
  options.method = absl::GetFlag(FLAGS_method);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.ops = absl::GetFlag(FLAGS_ops);
  options.burst = absl::GetFlag(FLAGS_burst);
  options.ring_size = absl::GetFlag(FLAGS_ring_size);
  options.rdtsc = absl::GetFlag(FLAGS_rdtsc);
  options.pin = absl::GetFlag(FLAGS_pin);
  options.progress = absl::GetFlag(FLAGS_progress);
  options.reserve_records = absl::GetFlag(FLAGS_reserve_records);
  const std::string json = absl::GetFlag(FLAGS_json);
  if (absl::GetFlag(FLAGS_all)) return ringkv::bench::RunAll(argv[0], options, json);
  return ringkv::bench::RunOne(options, json);
}
