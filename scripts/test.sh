#!/usr/bin/env bash
# The whole test suite: set up (packages, release build), run every test, then rebuild and run
# them under ASan+UBSan and under TSan. Ends with "N passed, N failed" over all three runs.
# RINGKV_SANITIZERS=0 skips the sanitizer builds (a quick local run).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build || { echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
run_suite() {  # run_suite BUILD_DIR LABEL [meson test options...]
  local log dir=$1 label=$2
  shift 2
  log=$(mktemp)
  echo "== tests: $label"
  meson test -C "$dir" --print-errorlogs --num-processes 1 "$@" 2>&1 | tee "$log"
  local ok fail
  ok=$(awk '/^Ok:/ {print $2}' "$log")
  fail=$(awk '/^(Fail|Timeout|Unexpected Pass):/ {s += $2} END {print s + 0}' "$log")
  if [ -z "$ok" ]; then fail=$((fail + 1)); ok=0; fi  # meson itself failed.
  passed=$((passed + ok))
  failed=$((failed + fail))
  rm -f "$log"
}

run_suite build release

if [ "${RINGKV_SANITIZERS:-1}" != 0 ]; then
  # b_lundef=false: the sanitizer runtimes resolve symbols at load time.
  if scripts/setup.sh build-asan -Dbuildtype=debugoptimized \
       -Db_sanitize=address,undefined -Db_lundef=false; then
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
      run_suite build-asan "ASan+UBSan"
  else
    failed=$((failed + 1))
  fi
  if scripts/setup.sh build-tsan -Dbuildtype=debugoptimized \
       -Db_sanitize=thread -Db_lundef=false; then
    # Left out under TSan, run in the other two builds: moodycamel's queues (TSan does not model
    # their standalone fences) and DPDK's multi-producer ring (a producer waits for the ones
    # before it with a relaxed load, so TSan sees no happens-before between two producers' slot
    # writes: formally racy inside DPDK's header, ordered by x86 in practice); and the bench smoke
    # run, which runs every method.
    GTEST_FILTER='-*moody*:*mpsc_rte*' TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      run_suite build-tsan "TSan (without moodycamel)" --no-suite bench
  else
    failed=$((failed + 1))
  fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
