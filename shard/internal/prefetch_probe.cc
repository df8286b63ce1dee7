// The code GCC 12 once compiled to a bare `ret`: a loop that only prefetches records
// (Table::PrefetchRecord), in a function of its own. prefetch_kept_test.sh reads this
// function's machine code and fails unless the prefetches are in it (shard/internal/prefetch.h
// says why they can vanish). Nothing calls it.
#include <cstddef>
#include <cstdint>

#include "shard/internal/table.h"

namespace ringkv::internal {

[[gnu::noinline]] void ProbeRecordPrefetches(const Table& table, const uint64_t* hashes, size_t n) {
  for (size_t i = 0; i < n; ++i) table.PrefetchRecord(hashes[i]);
}

}  // namespace ringkv::internal
