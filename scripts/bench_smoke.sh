#!/usr/bin/env bash
# Smoke run of ringkv-bench (called by `meson test` with the binary's path): every method at 1 and
# 3 threads on a small workload, the rdtsc breakdown, JSON output, the growth command and the
# usage errors.
set -euo pipefail
bench=$1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for threads in 1 3; do
  "$bench" --all --threads=$threads --ops=20000 --progress=false --json="$out/all.json" \
    >"$out/all.txt" || fail "--all --threads=$threads exited $?: $(cat "$out/all.txt")"
  for m in lock mpsc-rte spsc-rte mpsc-moody spsc-moody mutex none; do
    grep -Eq "^\| $m \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$" "$out/all.txt" \
      || fail "no table row for $m at $threads threads"
  done
  [ "$(grep -o '"method"' "$out/all.json" | wc -l)" -eq 7 ] || fail "all.json lacks runs"
done

"$bench" --method=spsc-rte --threads=2 --ops=50000 --rdtsc --json="$out/one.json" >"$out/one.txt"
grep -q '^\[PUT\] total [0-9.]* Mops, in [0-9.]* s$' "$out/one.txt" || fail "no PUT line"
grep -q '^      per-thread [0-9.]* Mops$' "$out/one.txt" || fail "no per-thread line"
grep -q '^\[GET\] total' "$out/one.txt" || fail "no GET line"
grep -q '^#1 hashmap read cycle' "$out/one.txt" || fail "no rdtsc breakdown"
grep -q '^TSC ' "$out/one.txt" || fail "no TSC frequency"
grep -q '"errors": 0' "$out/one.json" || fail "json: $(cat "$out/one.json")"

# The growth command: 100K new keys grow the shard 13 times, so both parts have PUTs. How long
# they took is the benchmark's to show (BENCHMARKS.md), not a test's.
"$bench" growth --ops=100000 --json="$out/growth.json" >"$out/growth.txt"
grep -Eq '^  growing +[0-9]+ PUTs: p99 ' "$out/growth.txt" || fail "no growing line"
grep -Eq '^  not growing +[0-9]+ PUTs: p99 ' "$out/growth.txt" || fail "no not-growing line"
grep -q '"growing": {"count": [1-9]' "$out/growth.json" || fail "growth.json: $(cat "$out/growth.json")"

set +e
"$bench" --method=bogus --ops=10 2>"$out/err.txt"; rc=$?
set -e
[ $rc -eq 2 ] || fail "--method=bogus exited $rc, expected 2"
grep -q "expected one of lock" "$out/err.txt" || fail "bad method message: $(cat "$out/err.txt")"
set +e
"$bench" --threads=0 --ops=10 2>"$out/err.txt"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "1 .. 1024" "$out/err.txt" || fail "--threads=0: rc $rc"
set +e
"$bench" --no-such-flag 2>"$out/err.txt"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "unknown flag --no_such_flag" "$out/err.txt" || fail "bad flag: rc $rc"

# The queue benchmark: every backend and form, 1 and 3 producers, a small count. Each run
# checks that every task ran exactly once (count and checksum) or exits 1.
"$bench" queue --producers=1,3 --tasks=20000 --rounds=2 --runs=1 --json="$out/queue.json" \
  >"$out/queue.txt" 2>/dev/null || fail "queue exited $?: $(cat "$out/queue.txt")"
for b in mutex boost moody mpsc-rts spsc-rte spsc-rte-batch; do
  for f in callable visitor; do
    grep -Eq "^\| $b/$f \|( [0-9.]+ \([0-9.]+ \.\. [0-9.]+\) \|){4}$" "$out/queue.txt" \
      || fail "no queue row for $b/$f: $(cat "$out/queue.txt")"
  done
done
[ "$(grep -o '"seconds"' "$out/queue.json" | wc -l)" -eq 48 ] || fail "queue.json lacks runs"
set +e
"$bench" queue --backends=bogus --tasks=10 2>"$out/err.txt"; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "unknown queue backend 'bogus'" "$out/err.txt" || fail "queue backend: rc $rc"
echo "bench smoke: ok"
