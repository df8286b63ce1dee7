#include "shard/scan.h"

#include <algorithm>
#include <utility>

namespace ringkv {

uint64_t MergeScanPages(const std::vector<ShardScanPart>& parts, size_t limit, size_t max_bytes,
                        std::vector<std::string_view>* keys) {
  // Every shard has covered the positions before `covered` (all shards done: everything).
  bool all_done = true;
  uint64_t covered = 0;
  for (const ShardScanPart& part : parts) {
    if (part.done) continue;
    covered = all_done ? part.reached : std::min(covered, part.reached);
    all_done = false;
  }
  std::vector<std::pair<uint64_t, std::string_view>> candidates;
  for (const ShardScanPart& part : parts) {
    for (ScanRecordReader r(part.records); r.Next();) {
      if (all_done || r.position() < covered) candidates.emplace_back(r.position(), r.key());
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });

  size_t take = 0;
  size_t bytes = 0;
  while (take < candidates.size() && take < limit && (take == 0 || bytes < max_bytes)) {
    bytes += candidates[take++].second.size();
  }
  if (take < candidates.size()) {
    // Do not split a position between pages: back off to its start, or, if the page would be
    // empty, take all of it.
    const uint64_t cut = candidates[take].first;
    size_t start = take;
    while (start > 0 && candidates[start - 1].first == cut) --start;
    if (start > 0) {
      take = start;
    } else {
      while (take < candidates.size() && candidates[take].first == cut) ++take;
    }
  }
  for (size_t i = 0; i < take; ++i) keys->push_back(candidates[i].second);
  if (take < candidates.size()) return candidates[take - 1].first + 1;
  return all_done ? 0 : covered;
}

}  // namespace ringkv
