#!/usr/bin/env bash
# The throughput matrix of seed 001: MB/s of GET-sized transfers for value sizes 4096, 8192,
# 81920 and 409600 bytes at 1, 10, 100 and 1000 concurrent clients, Redis (redis-benchmark SET,
# then GET) and ringkv (ringkv-loadgen, unary GET, one connection per client, as Redis), each
# server alone on the CPU in turn, on free loopback ports; the servers are stopped afterwards.
# Writes bench-results/matrix/*, a markdown table of medians (min .. max) on stdout, and
# docs/net-throughput.png (medians).
# Usage: bench/throughput_matrix.sh [RUNS=3] [SECONDS=3] (repository root, after
# scripts/setup.sh). Each run measures every cell once.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
seconds=${2:-3}
out=bench-results/matrix
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.csv "$out"/*.txt
ulimit -n "$(ulimit -Hn)"
sizes="4096 8192 81920 409600"
clients="1 10 100 1000"
keys=1000  # 1,000 keys: 400 MB of values at the largest size.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true' EXIT

port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --maxclients 4096 \
  --logfile "$out/redis.log" &
pid=$!
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
for size in $sizes; do
  redis-benchmark -p "$port" -t set -n $((keys * 4)) -r $keys -d "$size" -c 10 -q >/dev/null
  for run in $(seq "$runs"); do
    for c in $clients; do
      # As many requests as fit in about $seconds at the rate this size allows, at least 1000.
      n=$(( 400000000 * seconds / (size + 200) ))
      [ $n -lt 1000 ] && n=1000
      timeout 120 redis-benchmark -p "$port" -t get -n "$n" -r $keys -d "$size" -c "$c" --csv \
        | tail -1 | sed "s/^/$size,$c,/" >>"$out/redis.csv"
    done
  done
done
kill $pid; wait $pid 2>/dev/null || true

build/server/ringkv-server --listen=127.0.0.1:0 2>"$out/ringkv.log" &
pid=$!
for _ in $(seq 100); do grep -q "listening on" "$out/ringkv.log" && break; sleep 0.1; done
addr=127.0.0.1:$(grep -o "listening on 127.0.0.1:[0-9]*" "$out/ringkv.log" | grep -o "[0-9]*$")
for size in $sizes; do
  build/bench/ringkv-loadgen --addr="$addr" --keys=$keys --value-size="$size" --ops=1 \
    --concurrency=1 --progress=false >/dev/null
  for run in $(seq "$runs"); do
    for c in $clients; do
      build/bench/ringkv-loadgen --addr="$addr" --keys=$keys --value-size="$size" \
        --preload=false --concurrency="$c" --connections="$c" --duration="$seconds" \
        --progress=false --json="$out/tmp.json" >/dev/null
      cat "$out/tmp.json" >>"$out/ringkv-$size-$c.txt"
    done
  done
done
kill -TERM $pid; wait $pid || { echo "ringkv-server did not exit 0" >&2; exit 1; }
pid=

/usr/bin/python3 - "$out" <<'PY'
import json, os, statistics, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = sys.argv[1]
runs_redis = {}
for line in open(os.path.join(out, "redis.csv")):
    size, c, rest = line.split(",", 2)
    rps = float(rest.split('","')[1])
    runs_redis.setdefault((int(size), int(c)), []).append(rps * int(size) / 1e6)
runs_ringkv = {}
for size in (4096, 8192, 81920, 409600):
    for c in (1, 10, 100, 1000):
        rows = [json.loads(l) for l in open(os.path.join(out, f"ringkv-{size}-{c}.txt"))]
        runs_ringkv[(size, c)] = [r["mb_per_s"] for r in rows]
def cell(v):
    return f"{statistics.median(v):,.0f} ({min(v):,.0f} .. {max(v):,.0f})"
redis = {k: statistics.median(v) for k, v in runs_redis.items()}
ringkv = {k: statistics.median(v) for k, v in runs_ringkv.items()}
print("| value bytes | clients | Redis MB/s | ringkv MB/s | ringkv/Redis |")
print("|---|---|---|---|---|")
for key in sorted(redis):
    size, c = key
    print(f"| {size:,} | {c:,} | {cell(runs_redis[key])} | {cell(runs_ringkv[key])} | "
          f"{ringkv[key] / redis[key]:.2f} |")
fig, axes = plt.subplots(1, 4, figsize=(14, 4), sharey=False)
for ax, size in zip(axes, (4096, 8192, 81920, 409600)):
    xs = [1, 10, 100, 1000]
    ax.plot(xs, [redis[(size, c)] for c in xs], marker="o", label="Redis (redis-benchmark)")
    ax.plot(xs, [ringkv[(size, c)] for c in xs], marker="s", label="ringkv (ringkv-loadgen)")
    ax.set_xscale("log")
    ax.set_title(f"{size:,}-byte values (median of runs)")
    ax.set_xlabel("concurrent clients")
    ax.grid(True, alpha=0.3)
axes[0].set_ylabel("GET MB/s")
axes[0].legend(fontsize=8)
fig.tight_layout()
fig.savefig("docs/net-throughput.png", dpi=100)
PY
