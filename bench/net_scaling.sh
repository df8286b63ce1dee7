#!/usr/bin/env bash
# Two network checks of ringkv-server (seed 004 and an independent client):
#   1. does event handling hold up as connections grow? 100, 1,000 and 10,000 open connections,
#      of which 100 carry calls (unary GET, 100 in flight), throughput and p99 for each. The
#      idle ones are held by a second ringkv-loadgen (--hold), so that the measuring client is
#      the same in every row (one gRPC client with 10,000 channels costs more per call itself);
#   2. ghz (github.com/bojand/ghz v0.121.0, installed by scripts/setup.sh under .tools/bin):
#      unary Get at 50 concurrent calls, beside ringkv-loadgen's figure for the same call.
# The server listens on a free loopback port, every run is bounded in time, and the script stops
# the server it started. Usage: bench/net_scaling.sh [RUNS=3] [SECONDS=5] (repository root).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
seconds=${2:-5}
out=bench-results/net-scaling
mkdir -p "$out"
rm -f "$out"/*.txt
# 10,000 client connections, and as many accepted by the server: raise the soft file limit.
ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 10100 ]; then
  echo "net_scaling: the open-file limit is $(ulimit -n); 10,000 connections need 10,100" >&2
  exit 2
fi

build/server/ringkv-server --listen=127.0.0.1:0 2>"$out/ringkv.log" &
pid=$!
holder=
trap 'kill $pid ${holder:-} 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "listening on" "$out/ringkv.log" && break; sleep 0.1; done
addr=127.0.0.1:$(grep -o "listening on 127.0.0.1:[0-9]*" "$out/ringkv.log" | grep -o "[0-9]*$")
load() { build/bench/ringkv-loadgen --addr="$addr" --keys=100000 --value-size=32 \
           --duration="$seconds" --progress=false "$@"; }
load --ops=1 --concurrency=1 >/dev/null  # Pre-load the keys once.

for run in $(seq "$runs"); do
  for conns in 100 1000 10000; do
    if [ "$conns" -gt 100 ]; then
      build/bench/ringkv-loadgen --addr="$addr" --hold --connections=$((conns - 100)) \
        --duration=$((seconds + 120)) >"$out/holder.log" 2>&1 &
      holder=$!
      for _ in $(seq 600); do grep -q "holding" "$out/holder.log" && break; sleep 0.1; done
      grep -q "holding" "$out/holder.log" || { echo "net_scaling: the holder did not connect" >&2; exit 1; }
    fi
    load --preload=false --connections=100 --concurrency=100 --json="$out/tmp.json" >/dev/null
    cat "$out/tmp.json" >>"$out/conns-$conns.txt"
    if [ -n "$holder" ]; then kill "$holder"; wait "$holder" 2>/dev/null || true; holder=; fi
  done
  load --preload=false --concurrency=50 --json="$out/tmp.json" >/dev/null
  cat "$out/tmp.json" >>"$out/loadgen-c50.txt"
  # ghz: the same call through reflection, key "key:000000000001" in base64.
  .tools/bin/ghz --insecure --call ringkv.v1.KV.Get -d '{"key":"a2V5OjAwMDAwMDAwMDAwMQ=="}' \
    -c 50 -z "${seconds}s" --connections=1 -O json "$addr" >"$out/tmp-ghz.json" 2>/dev/null || true
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); p={x["percentage"]: x["latency"] for x in d.get("latencyDistribution") or []}; print(json.dumps({"rps": d["rps"], "p99_ms": p.get(99, 0)/1e6, "errors": sum(v for k, v in (d.get("statusCodeDistribution") or {}).items() if k != "OK")}))' \
    "$out/tmp-ghz.json" >>"$out/ghz-c50.txt"
done
kill -TERM $pid; wait $pid || { echo "ringkv-server did not exit 0" >&2; exit 1; }

python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
def rows(name): return [json.loads(l) for l in open(os.path.join(out, name))]
def cell(v, fmt="{:,.0f}"):
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))} .. {fmt.format(max(v))})"
print("| open connections (100 active, unary GET, 100 in flight; the rest idle, held by a second process) | ops/s | p99 ms | ratio to 100 |")
print("|---|---|---|---|")
base = statistics.median(r["ops_per_s"] for r in rows("conns-100.txt"))
for c in (100, 1000, 10000):
    rs = rows(f"conns-{c}.txt")
    print(f"| {c:,} | {cell([r['ops_per_s'] for r in rs])} | {cell([r['p99_ms'] for r in rs], '{:.2f}')} | "
          f"{statistics.median(r['ops_per_s'] for r in rs) / base:.2f} |")
print()
print("| unary Get, 50 concurrent calls, 1 connection | ops/s | p99 ms |")
print("|---|---|---|")
for label, name, key in (("ringkv-loadgen", "loadgen-c50.txt", "ops_per_s"), ("ghz v0.121.0", "ghz-c50.txt", "rps")):
    rs = rows(name)
    print(f"| {label} | {cell([r[key] for r in rs])} | {cell([r['p99_ms'] for r in rs], '{:.2f}')} |")
PY
