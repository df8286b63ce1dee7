#!/usr/bin/env bash
# ringkv-server against Redis on this machine, same workload, each server alone on the CPU in
# turn: GET and PUT/SET of 32-byte values over a 1,000,000-key space, 1 and 50 clients,
# unbatched (Redis -P 1, ringkv unary) and batches of 16 (Redis -P 16, ringkv multi and stream).
# redis-benchmark measures Redis; ringkv-loadgen measures ringkv. Every server listens on a free
# loopback port, every run is bounded in time, and the script stops the servers it started.
#
# Usage: bench/compare_redis.sh [RUNS=3] [SECONDS=5]     (from the repository root, after
# scripts/setup.sh; needs Debian's redis-server and redis-tools). Prints a markdown table of
# medians (min .. max) and the ratio ringkv/Redis per row, then the daemon's CPU use over 5 idle
# seconds after the runs; draws docs/net-latency.png; raw results go to bench-results/net/.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
seconds=${2:-5}
out=bench-results/net
mkdir -p "$out"
rm -f "$out"/*.txt
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# --- Redis: persistence off, loopback only.
port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --logfile "$out/redis.log" &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p "$port" -t set -n 1000000 -r 1000000 -d 32 -P 64 -c 50 -q >/dev/null  # Pre-load.
for run in $(seq "$runs"); do
  for spec in "get 50 1" "set 50 1" "get 50 16" "set 50 16" "get 1 1"; do
    read -r test clients pipeline <<<"$spec"
    n=$(( clients == 1 ? 60000 : (pipeline == 1 ? 400000 : 4000000) ))
    # --csv: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    timeout 120 redis-benchmark -p "$port" -t "$test" -n "$n" -r 1000000 -d 32 -c "$clients" \
      -P "$pipeline" --csv | tail -1 >>"$out/redis-$test-c$clients-P$pipeline.txt"
  done
done
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true

# --- ringkv: defaults (one worker per two cores), loopback.
build/server/ringkv-server --listen=127.0.0.1:0 2>"$out/ringkv.log" &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$out/ringkv.log" && break; sleep 0.1; done
addr=127.0.0.1:$(grep -o "listening on 127.0.0.1:[0-9]*" "$out/ringkv.log" | grep -o "[0-9]*$")
load() { build/bench/ringkv-loadgen --addr="$addr" --keys=1000000 --value-size=32 \
           --duration="$seconds" --progress=false "$@"; }
load --preload=true --ops=1 --concurrency=1 >/dev/null  # Pre-load the 1,000,000 keys once.
for run in $(seq "$runs"); do
  for spec in "unary 1:0 50 1" "unary 0:1 50 1" "multi 1:0 50 16" "multi 0:1 50 16" \
              "stream 1:0 50 16" "stream 0:1 50 16" "unary 1:0 1 1"; do
    read -r mode ratio conc batch <<<"$spec"
    name="ringkv-$mode-$ratio-c$conc-b$batch"
    load --preload=false --mode="$mode" --ratio="$ratio" --concurrency="$conc" --batch="$batch" \
      --json="$out/tmp.json" >/dev/null
    cat "$out/tmp.json" >>"$out/${name//:/_}.txt"
  done
done
# Idle CPU after the runs: the daemon's user+system ticks over 5 quiet seconds.
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/${pids[-1]}/stat"; }
t0=$(ticks)
sleep 5
idle_pct=$(awk -v a="$t0" -v b="$(ticks)" -v hz="$(getconf CLK_TCK)" \
  'BEGIN { printf "%.2f", (b - a) / hz / 5 * 100 }')
kill -TERM "${pids[-1]}"; wait "${pids[-1]}" || { echo "ringkv-server did not exit 0" >&2; exit 1; }
pids=()

/usr/bin/python3 - "$out" "$idle_pct" <<'PY'
import json, statistics, sys, os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = sys.argv[1]
def redis(name):
    rows = [l.strip().strip('"').split('","') for l in open(os.path.join(out, name))]
    return [float(r[1]) for r in rows], [float(r[6]) for r in rows], [float(r[4]) for r in rows]
def ringkv(name):
    rows = [json.loads(l) for l in open(os.path.join(out, name))]
    return [r["ops_per_s"] for r in rows], [r["p99_ms"] for r in rows], [r["p50_ms"] for r in rows]
def cell(v, fmt="{:,.0f}"):
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))} .. {fmt.format(max(v))})"
print("| workload | Redis ops/s | ringkv ops/s | ringkv/Redis | Redis p99 ms | ringkv p99 ms (per call) |")
print("|---|---|---|---|---|---|")
chart = []
for label, short, r, k in [
    ("GET, 50 clients, unbatched (Redis -P 1, ringkv unary)", "GET c50\nunary | -P 1", "redis-get-c50-P1.txt", "ringkv-unary-1_0-c50-b1.txt"),
    ("SET/PUT, 50 clients, unbatched", "PUT c50\nunary | -P 1", "redis-set-c50-P1.txt", "ringkv-unary-0_1-c50-b1.txt"),
    ("GET, 50 clients, batches of 16 (Redis -P 16, ringkv multi)", "GET c50 b16\nmulti | -P 16", "redis-get-c50-P16.txt", "ringkv-multi-1_0-c50-b16.txt"),
    ("SET/PUT, 50 clients, batches of 16 (multi)", "PUT c50 b16\nmulti | -P 16", "redis-set-c50-P16.txt", "ringkv-multi-0_1-c50-b16.txt"),
    ("GET, 50 clients, batches of 16 (Redis -P 16, ringkv stream)", "GET c50 b16\nstream | -P 16", "redis-get-c50-P16.txt", "ringkv-stream-1_0-c50-b16.txt"),
    ("SET/PUT, 50 clients, batches of 16 (stream)", "PUT c50 b16\nstream | -P 16", "redis-set-c50-P16.txt", "ringkv-stream-0_1-c50-b16.txt"),
    ("GET, 1 client, unbatched", "GET c1\nunary | -P 1", "redis-get-c1-P1.txt", "ringkv-unary-1_0-c1-b1.txt"),
]:
    rr, rp, r50 = redis(r)
    kr, kp, k50 = ringkv(k)
    ratio = statistics.median(kr) / statistics.median(rr)
    print(f"| {label} | {cell(rr)} | {cell(kr)} | {ratio:.2f} | {cell(rp, '{:.3f}')} | {cell(kp, '{:.3f}')} |")
    chart.append((short, [statistics.median(v) for v in (r50, rp, k50, kp)]))
print()
print(f"ringkv-server's CPU over 5 idle seconds after the runs: {sys.argv[2]}% of a core.")

# Latency percentiles, medians of the runs: Redis p50/p99 beside ringkv p50/p99 per workload.
fig, ax = plt.subplots(figsize=(12, 4.5))
width = 0.2
names = ["Redis p50", "Redis p99", "ringkv p50", "ringkv p99"]
for j, name in enumerate(names):
    ax.bar([i + (j - 1.5) * width for i in range(len(chart))], [c[1][j] for c in chart],
           width, label=name, color=["#9ecae1", "#3182bd", "#fdae6b", "#e6550d"][j])
ax.set_xticks(range(len(chart)))
ax.set_xticklabels([c[0] for c in chart], fontsize=8)
ax.set_xlabel("workload: ringkv mode | redis-benchmark pipeline")
ax.set_yscale("log")
ax.set_ylabel("latency per call / pipelined request, ms (log)")
ax.set_title("Latency percentiles, 32-byte values (median of the runs)")
ax.grid(True, axis="y", alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig("docs/net-latency.png", dpi=100)
PY
