#include "bench/queue_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/queue_bench.h"

ABSL_FLAG(std::string, producers, "1",
          "queue: producer counts, comma-separated (the report: 1 with --rounds=10, and "
          "2,4,6,8,12,16,20)");
ABSL_FLAG(uint64_t, tasks, 1'000'000, "queue: tasks each producer posts");
ABSL_FLAG(uint32_t, rounds, 1, "queue: rounds per producer count (fresh queue each round)");
ABSL_FLAG(std::string, backends, "mutex,boost,moody,mpsc-rts,spsc-rte,spsc-rte-batch",
          "queue: backends, comma-separated");
ABSL_FLAG(std::string, forms, "callable,visitor", "queue: task forms, comma-separated");
ABSL_FLAG(uint32_t, runs, 3, "queue: runs of each cell; the table shows median (min .. max)");

namespace ringkv::bench {
namespace {

struct Cell {
  std::vector<double> seconds;
};

std::string Summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return absl::StrFormat("%.3f (%.3f .. %.3f)", v[v.size() / 2], v.front(), v.back());
}

}  // namespace

int RunQueueCommand(const std::string& json_path) {
  std::vector<uint32_t> producer_counts;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_producers), ',')) {
    uint32_t n;
    if (!absl::SimpleAtoi(part, &n) || n == 0 || n > 256) {
      std::fprintf(stderr, "ringkv-bench: --producers must list counts 1 .. 256, got '%s'\n",
                   std::string(part).c_str());
      return 2;
    }
    producer_counts.push_back(n);
  }
  const std::vector<std::string> backends = absl::StrSplit(absl::GetFlag(FLAGS_backends), ',');
  const std::vector<std::string> forms = absl::StrSplit(absl::GetFlag(FLAGS_forms), ',');
  const uint32_t rounds = std::max(1u, absl::GetFlag(FLAGS_rounds));
  const uint32_t runs = std::max(1u, absl::GetFlag(FLAGS_runs));
  const uint64_t tasks = absl::GetFlag(FLAGS_tasks);

  // Columns: one per (producers, round).
  std::vector<std::string> columns;
  for (uint32_t p : producer_counts) {
    for (uint32_t r = 1; r <= rounds; ++r) {
      columns.push_back(rounds > 1 ? absl::StrCat(p, "p r", r) : absl::StrCat(p, "p"));
    }
  }
  std::map<std::string, std::vector<Cell>> table;  // "backend/form" -> cells by column.
  std::vector<std::string> row_order;
  std::string json =
      "{\"benchmark\":\"queue\",\"tasks_per_producer\":" + std::to_string(tasks) + ",\"runs\":[";
  bool first = true;
  // Runs are the outer loop, so a slow minute on a shared machine spreads over every row.
  for (uint32_t run = 0; run < runs; ++run) {
    for (const std::string& backend : backends) {
      for (const std::string& form : forms) {
        const std::string row = backend + "/" + form;
        if (!table.count(row)) row_order.push_back(row);
        auto& cells = table[row];
        cells.resize(columns.size());
        size_t column = 0;
        for (uint32_t p : producer_counts) {
          for (uint32_t r = 1; r <= rounds; ++r, ++column) {
            auto result =
                RunQueueBench({.backend = backend, .form = form, .producers = p, .tasks = tasks});
            if (!result.ok()) {
              std::fprintf(stderr, "ringkv-bench: %s\n",
                           std::string(result.status().message()).c_str());
              return result.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
            }
            cells[column].seconds.push_back(result->seconds);
            absl::StrAppend(&json, first ? "" : ",", "{\"backend\":\"", backend, "\",\"form\":\"",
                            form, "\",\"producers\":", p, ",\"round\":", r, ",\"run\":", run + 1,
                            ",\"seconds\":", result->seconds, ",\"sleeps\":", result->sleeps, "}");
            first = false;
            std::fprintf(stderr, "run %u/%u %-16s %3u producers round %u: %.3f s\n", run + 1, runs,
                         row.c_str(), p, r, result->seconds);
          }
        }
      }
    }
  }
  json += "]}\n";

  std::printf("queue: %llu tasks per producer, total seconds, median (min .. max) of %u runs\n\n",
              static_cast<unsigned long long>(tasks), runs);
  std::printf("| backend/form | %s |\n|---|", absl::StrJoin(columns, " | ").c_str());
  for (size_t i = 0; i < columns.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const std::string& row : row_order) {
    std::printf("| %s |", row.c_str());
    for (const Cell& cell : table[row]) std::printf(" %s |", Summary(cell.seconds).c_str());
    std::printf("\n");
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << json;
    if (!out) {
      std::fprintf(stderr, "ringkv-bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace ringkv::bench
