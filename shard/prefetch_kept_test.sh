#!/usr/bin/env bash
# Fails if the compiler deleted the records' prefetch (shard/internal/prefetch.h says how GCC
# 12 once did, and what it cost: every GET of a key beyond the caches waited for its record).
# Reads the machine code that this build made, with objdump, for two functions:
#   - ProbeRecordPrefetches (shard/internal/prefetch_probe.cc), a loop that only calls
#     Table::PrefetchRecord, which GCC 12 compiled to a bare ret;
#   - Worker::ExecuteJournaled, whose only prefetches are its records' (the worker's path with
#     a log).
# Each must hold a prefetch instruction, or call a PrefetchRecord or PrefetchLine that holds
# one (a build that does not inline them).
# Usage: shard/prefetch_kept_test.sh PROBE_LIBRARY SHARD_LIBRARY
set -euo pipefail
probe=$1
shard=$2

# code LIBRARY FUNCTION: FUNCTION's instructions and relocations, demangled; "missing" if the
# library has no such function.
code() {
  objdump -dr --no-show-raw-insn -C "$1" |
    awk -v name="$2" 'index($0, "<" name ">:") {f = 1; seen = 1; next}
                      f && /^$/ {f = 0}
                      f {print}
                      END {if (!seen) print "missing"}'
}

# holds LIBRARY FUNCTION DEPTH: true if FUNCTION holds a prefetch instruction, or calls (to
# DEPTH calls deep) a function named *Prefetch* that does: PrefetchRecord or PrefetchLine left
# out of line. From ExecuteJournaled a build that inlines nothing goes four calls deep:
# Worker::PrefetchRecord, Shard::PrefetchRecord, Table::PrefetchRecord, PrefetchLine. x86-64
# only (its relocations and prefetch instructions), as ringkv's builds are.
holds() {
  local body callee
  body=$(code "$1" "$2")
  [ "$body" != missing ] || return 1
  grep -q prefetch <<<"$body" && return 0
  [ "$3" -gt 0 ] || return 1
  while IFS= read -r callee; do
    holds "$1" "$callee" $(($3 - 1)) && return 0
  done < <(grep -oE 'R_X86_64_(PLT32|PC32)[[:space:]].*Prefetch[^-+]*' <<<"$body" |
             sed -E 's/^R_X86_64_(PLT32|PC32)[[:space:]]*//' | sort -u)
  return 1
}

failed=0
check() {  # check LIBRARY FUNCTION
  if [ "$(code "$1" "$2")" = missing ]; then
    echo "FAIL: no function $2 in $1 (renamed? update shard/prefetch_kept_test.sh)"
    failed=1
  elif holds "$1" "$2" 6; then
    echo "ok: $2 prefetches"
  else
    echo "FAIL: $2 holds no prefetch instruction, nor calls a Prefetch function that does:" \
         "the compiler deleted the records' prefetch"
    failed=1
  fi
}
check "$probe" "ringkv::internal::ProbeRecordPrefetches(ringkv::internal::Table const&, unsigned long const*, unsigned long)"
check "$shard" "ringkv::Worker::ExecuteJournaled(ringkv::Request**, unsigned long, long)"
exit "$failed"
