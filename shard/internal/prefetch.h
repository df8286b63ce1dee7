// PrefetchLine(p): starts the fetch of the cache line that holds p, as __builtin_prefetch does,
// but in a form the compiler must keep.
//
// Why not __builtin_prefetch alone: to GCC's whole-function analysis (pure-const) it is no
// side effect. A function whose only effect is a prefetch after some loads
// (Table::PrefetchRecord: a loop over a few slots) is found pure, and a call to a pure function
// whose result nobody uses is deleted, prefetch and all. GCC 12 did that to every call of
// PrefetchRecord: a burst's records were never prefetched, and each GET waited for its record's
// DRAM miss (18% of a MultiGet's server samples). The empty asm statement is a side effect the
// compiler keeps; it emits no instruction. prefetch_kept_test (shard/prefetch_kept_test.sh)
// reads each build's machine code and fails if the records' prefetch is gone again.
#ifndef RINGKV_SHARD_INTERNAL_PREFETCH_H_
#define RINGKV_SHARD_INTERNAL_PREFETCH_H_

namespace ringkv::internal {

inline void PrefetchLine(const void* p) {
  __builtin_prefetch(p);
  asm volatile("" : : "r"(p));
}

}  // namespace ringkv::internal

#endif  // RINGKV_SHARD_INTERNAL_PREFETCH_H_
