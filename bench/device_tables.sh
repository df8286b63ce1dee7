#!/usr/bin/env bash
# The multi-worker tables, run on a machine with cores to spare (the 16-core device machine),
# from a bundle made by scripts/device_bundle.sh; nothing is installed there.
#   1. the engine: ringkv-bench --all at 16 threads (the report's 16-thread table; 5M ops per
#      thread rather than 25M, so that the lock method's run fits), spsc-rte at 16 threads with
#      the report's 25M, and spsc-rte at 1, 2, 4 and 8 threads;
#   2. the server: bench/scaling_bench.py, ringkv with 1, 2, 4, 8 workers beside Redis;
#   3. the table's growth (issue 21) with a core each for the server, the inserter and the GET
#      client: bench/growth_bench.py, one run.
# Usage: bench/device_tables.sh [BUNDLE=devbundle] [RESULTS=$OUT or bench-results/device]
# PARTS="engine scaling growth" picks parts (default all); GROWTH_RUNS (default 1), and
# growth_bench.py's GROWTH_REDIS and GROWTH_GET_S pass through; WORKERS and
# REDIS_IO (0: none) override the scaling part's worker counts.
# QUICK=1 shrinks every part to seconds, to rehearse the script on a small machine first.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$(realpath "${1:-devbundle}")
out=${2:-${OUT:-bench-results/device}}
mkdir -p "$out" "$bundle/path" build/server build/bench
# Wrappers run each binary under the bundle's loader and libraries; `exec` keeps the pid, so
# /proc gives the server's own CPU.
wrap() {
  printf '#!/bin/sh\nexec %s/lib/ld-linux-x86-64.so.2 --library-path %s/lib %s/bin/%s "$@"\n' \
    "$bundle" "$bundle" "$bundle" "$2" >"$1"
  chmod +x "$1"
}
wrap build/server/ringkv-server ringkv-server
wrap build/bench/ringkv-loadgen ringkv-loadgen
wrap build/bench/ringkv-bench ringkv-bench
for b in redis-server redis-benchmark redis-cli taskset chrt; do wrap "$bundle/path/$b" "$b"; done
# A baseline server (scripts/device_bundle.sh's third argument) runs as growth's third row.
baseline=
if [ -e "$bundle/bin/ringkv-server-base" ]; then
  wrap build/server/ringkv-server-base ringkv-server-base
  baseline=build/server/ringkv-server-base
fi
export PATH=$bundle/path:$PATH
{ grep -m1 "model name" /proc/cpuinfo; nproc; free -g | head -2; uname -r; } | tee "$out/machine.txt"
ulimit -n 65536 || true

if [ "${QUICK:-0}" = 1 ]; then
  big=2 ops=200000 report_ops=200000 workers=1 client=1 keys=200000 secs=1 threads="1 2" redis_io=1 growth_cpus=0,1,1
else
  big=16 ops=5000000 report_ops=25000000 workers=1,2,4,8 client=8-15 keys=10000000 secs=5 \
    threads="1 2 4 8" redis_io=1,4 growth_cpus=0,2,1
fi
step() { echo "== $1 ($(date +%T))"; }
parts=${PARTS:-engine scaling growth}
if [[ $parts == *engine* ]]; then
step "engine: every method, $big threads, $ops ops each"
# One process per method (ringkv-bench --all re-runs /proc/self/exe, which is the loader here).
for m in lock mpsc-rte spsc-rte mpsc-moody spsc-moody mutex none; do
  build/bench/ringkv-bench --threads=$big --method=$m --ops=$ops --progress=false \
    >"$out/engine-$m-$big.txt" 2>&1 || echo "engine $m FAILED"
  echo "$m: $(grep -E '^\[(PUT|GET)\] total' "$out/engine-$m-$big.txt" | tr -s ' ' | tr '\n' ' ')"
done
step "engine: spsc-rte, $big threads, $report_ops ops each (the report's shape)"
build/bench/ringkv-bench --threads=$big --method=spsc-rte --ops=$report_ops --progress=false \
  >"$out/engine-spsc-16-25m.txt" 2>&1 || echo "engine 25M FAILED"
tail -5 "$out/engine-spsc-16-25m.txt"
for t in $threads; do
  step "engine: spsc-rte, $t threads, $ops ops each"
  build/bench/ringkv-bench --threads=$t --method=spsc-rte --ops=$ops --progress=false \
    >"$out/engine-spsc-$t.txt" 2>&1 || echo "engine $t FAILED"
  grep -E "PUT|GET" "$out/engine-spsc-$t.txt" | head -4
done
fi
if [[ $parts == *scaling* ]]; then
step "server: scaling"
python3 bench/scaling_bench.py 1 $secs ${WORKERS:-$workers} ${REDIS_IO:-$redis_io} $client >"$out/scaling.md" 2>"$out/scaling.err" \
  || { echo "scaling FAILED"; tail -20 "$out/scaling.err"; }
cat "$out/scaling.md"
fi
if [[ $parts == *growth* ]]; then
step "growth: $keys inserts, a GET client on its own core"
GROWTH_CPUS=$growth_cpus GROWTH_PAUSE_S=3 GROWTH_FIFO=0 \
  python3 bench/growth_bench.py "${GROWTH_RUNS:-1}" $keys $baseline \
  >"$out/growth.md" 2>"$out/growth.err" || { echo "growth FAILED"; tail -20 "$out/growth.err"; }
cat "$out/growth.md"
fi
step done
# The raw results (JSON lines per cell) in one file, for the folder of files that comes back.
tar czf "$out/raw.tgz" bench-results 2>/dev/null || true
