#!/usr/bin/python3
"""ringkv-server against Redis on this machine, like for like, in one run (issue 10).

Each row is one request shape, run against both servers with the same connections, calls in
flight and batch:

  50 connections x 1 call      redis-benchmark -c 50 -P 1    ringkv-loadgen --connections=50 --concurrency=50
  1 connection x 50 in flight  redis-benchmark -c 1 -P 50    ringkv-loadgen --connections=1 --concurrency=50
  1 connection x 1             redis-benchmark -c 1 -P 1     ringkv-loadgen --connections=1 --concurrency=1
  batches of 16, 50 conns      redis-benchmark -c 50 -P 16   ringkv-loadgen --mode=multi|stream --batch=16

GET unless the row says SET/PUT; 32-byte values; 1,000,000 keys, pre-loaded. Besides ops/s and
latency, every row gives each server's CPU per operation (user + system time from /proc over the
run, divided by operations: the figure no client can distort) and each client's own CPU per
operation (its rusage). h2load (nghttp2's HTTP/2 load generator, a fixed gRPC Get body) runs the
first two shapes against ringkv as an independent client, and ringkv --transport=grpc (grpc++)
runs the unary shapes as the reference of the same run.

A second table splits each side's CPU per operation into user and system time. Each server runs
alone on a free loopback port; every run is bounded in time; the servers are stopped at the
end. Raw results: bench-results/net/. Prints markdown on stdout; draws
docs/net-latency.png.

Usage: bench/compare_redis.py [RUNS=3] [SECONDS=5]   (repository root, after scripts/setup.sh)
"""
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import time

from benchlib import cell, cpu_seconds, run_client, start_redis, start_ringkv, stop

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
KEYS = 1_000_000
OUT = "bench-results/net"
LOADGEN = "build/bench/ringkv-loadgen"

# (row label, command, redis-benchmark args, loadgen args or None)
SHAPES = [
    ("GET", "50 connections x 1 call", ["-t", "get", "-c", "50", "-P", "1"],
     ["--mode=unary", "--ratio=1:0", "--connections=50", "--concurrency=50"]),
    ("SET/PUT", "50 connections x 1 call", ["-t", "set", "-c", "50", "-P", "1"],
     ["--mode=unary", "--ratio=0:1", "--connections=50", "--concurrency=50"]),
    ("GET", "1 connection x 50 in flight", ["-t", "get", "-c", "1", "-P", "50"],
     ["--mode=unary", "--ratio=1:0", "--connections=1", "--concurrency=50"]),
    ("GET", "1 connection x 1 call", ["-t", "get", "-c", "1", "-P", "1"],
     ["--mode=unary", "--ratio=1:0", "--connections=1", "--concurrency=1"]),
    ("GET", "50 connections, batches of 16 (MultiGet)", ["-t", "get", "-c", "50", "-P", "16"],
     ["--mode=multi", "--ratio=1:0", "--connections=50", "--concurrency=50", "--batch=16"]),
    ("SET/PUT", "50 connections, batches of 16 (MultiPut)", ["-t", "set", "-c", "50", "-P", "16"],
     ["--mode=multi", "--ratio=0:1", "--connections=50", "--concurrency=50", "--batch=16"]),
    ("GET", "50 connections, batches of 16 (Stream)", ["-t", "get", "-c", "50", "-P", "16"],
     ["--mode=stream", "--ratio=1:0", "--connections=50", "--concurrency=50", "--batch=16"]),
    ("SET/PUT", "50 connections, batches of 16 (Stream)", ["-t", "set", "-c", "50", "-P", "16"],
     ["--mode=stream", "--ratio=0:1", "--connections=50", "--concurrency=50", "--batch=16"]),
]
H2LOAD_SHAPES = {  # Row index -> h2load's connections and streams per connection.
    0: (50, 1),
    2: (1, 50),
}
GRPC_ROWS = (0, 2, 3)  # The unary GET shapes, on --transport=grpc.


def record(name, result):
    with open(os.path.join(OUT, name + ".jsonl"), "a") as f:
        f.write(json.dumps(result) + "\n")


def redis_part():
    proc, port = start_redis(os.path.abspath(os.path.join(OUT, "redis.log")))
    try:
        subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(KEYS), "-r",
                        str(KEYS), "-d", "32", "-P", "64", "-c", "50", "-q"],
                       capture_output=True, check=True)
        for i, (_, _, args, _) in enumerate(SHAPES):
            base = ["redis-benchmark", "-p", str(port), "-r", str(KEYS), "-d", "32", "--csv"]
            # A short run sizes the real ones to about SECONDS each.
            out, *_ = run_client(base + args + ["-n", "20000"], proc.pid, 120)
            rps = float(out.strip().splitlines()[-1].split('","')[1])
            n = max(20000, int(rps * SECONDS))
            for _ in range(RUNS):
                out, cpu = run_client(base + args + ["-n", str(n)], proc.pid, SECONDS * 10 + 60)
                row = out.strip().splitlines()[-1].strip('"').split('","')
                record(f"redis-{i}", {"ops_per_s": float(row[1]), "p50_ms": float(row[4]),
                                      "p99_ms": float(row[6]), "ops": n, **cpu.per_op(n)})
    finally:
        stop(proc)


def ringkv_part(transport, rows, h2load):
    proc, addr = start_ringkv(os.path.join(OUT, f"ringkv-{transport}.log"),
                              [f"--transport={transport}"])
    try:
        subprocess.run([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                        "--ops=1", "--concurrency=1", "--progress=false"],
                       capture_output=True, check=True)
        for _ in range(RUNS):
            for i in rows:
                json_path = os.path.join(OUT, "tmp.json")
                _, cpu = run_client(
                    [LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                     f"--duration={SECONDS}", "--progress=false", "--preload=false",
                     f"--json={json_path}"] + SHAPES[i][3], proc.pid, SECONDS * 10 + 60)
                r = json.load(open(json_path))
                record(f"ringkv-{transport}-{i}", {
                    "ops_per_s": r["ops_per_s"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
                    "ops": r["ops"], **cpu.per_op(r["ops"])})
            if not h2load:
                continue
            body = os.path.join(OUT, "get.bin")
            key = b"key:000000000001"
            with open(body, "wb") as f:
                f.write(struct.pack(">BI", 0, len(key) + 2) + bytes([0x0a, len(key)]) + key)
            for i, (conns, streams) in H2LOAD_SHAPES.items():
                out, cpu = run_client(
                    ["h2load", "-c", str(conns), "-m", str(streams), "-D", str(SECONDS),
                     "-d", body, "-H", "content-type: application/grpc", "-H", "te: trailers",
                     f"http://{addr}/ringkv.v1.KV/Get"], proc.pid, SECONDS * 10 + 60)
                done = int(re.search(r"requests: \d+ total, \d+ started, (\d+) done", out)[1])
                mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out)[1]
                mean_ms = float(mean[:-2]) / 1000 if mean.endswith("us") else float(mean[:-2])
                if "0 failed, 0 errored" not in out:
                    raise RuntimeError("h2load saw failures:\n" + out)
                record(f"h2load-{i}", {"ops_per_s": done / SECONDS, "mean_ms": mean_ms,
                                       "ops": done, **cpu.per_op(done)})
        # The idle daemon after the runs: its CPU over 5 quiet seconds.
        time.sleep(1)
        before = cpu_seconds(proc.pid)
        time.sleep(5)
        idle = (cpu_seconds(proc.pid) - before) / 5 * 100
    finally:
        stop(proc)
    if proc.returncode != 0:
        raise RuntimeError(f"ringkv-server exited {proc.returncode}")
    return idle


def load(name):
    path = os.path.join(OUT, name + ".jsonl")
    return [json.loads(line) for line in open(path)] if os.path.exists(path) else []


def med(rows, key):
    return statistics.median(r[key] for r in rows)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".jsonl"):
            os.remove(os.path.join(OUT, f))
    redis_part()
    idle = ringkv_part("h2", range(len(SHAPES)), h2load=True)
    ringkv_part("grpc", GRPC_ROWS, h2load=False)

    print("| request | shape | Redis ops/s | ringkv ops/s | ringkv/Redis | server CPU us/op, "
          "Redis / ringkv | client CPU us/op, redis-benchmark / loadgen | p50 ms, Redis / "
          "ringkv | p99 ms, Redis / ringkv |")
    print("|---|---|---|---|---|---|---|---|---|")
    chart = []
    for i, (command, shape, _, _) in enumerate(SHAPES):
        r, k = load(f"redis-{i}"), load(f"ringkv-h2-{i}")
        ratio = med(k, "ops_per_s") / med(r, "ops_per_s")
        print(f"| {command} | {shape} | {cell([x['ops_per_s'] for x in r])} | "
              f"{cell([x['ops_per_s'] for x in k])} | {ratio:.2f} | "
              f"{med(r, 'server_us_per_op'):.2f} / {med(k, 'server_us_per_op'):.2f} | "
              f"{med(r, 'client_us_per_op'):.2f} / {med(k, 'client_us_per_op'):.2f} | "
              f"{med(r, 'p50_ms'):.3f} / {med(k, 'p50_ms'):.3f} | "
              f"{med(r, 'p99_ms'):.3f} / {med(k, 'p99_ms'):.3f} |")
        chart.append((f"{command} {shape}", [med(r, "p50_ms"), med(r, "p99_ms"),
                                             med(k, "p50_ms"), med(k, "p99_ms")]))
    print()
    print("Independent client and reference transport, same run (GET):")
    print()
    print("| client, server | shape | ops/s | server CPU us/op | client CPU us/op | latency ms |")
    print("|---|---|---|---|---|---|")
    for i, (conns, streams) in H2LOAD_SHAPES.items():
        h = load(f"h2load-{i}")
        print(f"| h2load -c {conns} -m {streams}, ringkv h2 | {SHAPES[i][1]} | "
              f"{cell([x['ops_per_s'] for x in h])} | {med(h, 'server_us_per_op'):.2f} | "
              f"{med(h, 'client_us_per_op'):.2f} | mean {med(h, 'mean_ms'):.3f} |")
    for i in GRPC_ROWS:
        g = load(f"ringkv-grpc-{i}")
        print(f"| ringkv-loadgen, ringkv --transport=grpc | {SHAPES[i][1]} | "
              f"{cell([x['ops_per_s'] for x in g])} | {med(g, 'server_us_per_op'):.2f} | "
              f"{med(g, 'client_us_per_op'):.2f} | p99 {med(g, 'p99_ms'):.3f} |")
    print()
    print("Where the CPU goes, us per operation, user + system (medians): on two shared cores "
          "the server and the client divide the machine, so a ratio of throughputs follows "
          "the ratio of server + client CPU per operation.")
    print()
    print("| request | shape | Redis server | redis-benchmark | ringkv server | loadgen | "
          "both, Redis / ringkv |")
    print("|---|---|---|---|---|---|---|")
    for i, (command, shape, _, _) in enumerate(SHAPES):
        r, k = load(f"redis-{i}"), load(f"ringkv-h2-{i}")

        def split(rows, side):
            total, system = med(rows, f"{side}_us_per_op"), med(rows, f"{side}_sys_us_per_op")
            return f"{total - system:.2f} + {system:.2f}"
        both_r = med(r, "server_us_per_op") + med(r, "client_us_per_op")
        both_k = med(k, "server_us_per_op") + med(k, "client_us_per_op")
        print(f"| {command} | {shape} | {split(r, 'server')} | {split(r, 'client')} | "
              f"{split(k, 'server')} | {split(k, 'client')} | {both_r:.2f} / {both_k:.2f} |")
    print()
    print(f"ringkv-server's CPU over 5 idle seconds after the runs: {idle:.2f}% of a core.")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(13, 4.8))
    width = 0.2
    names = ["Redis p50", "Redis p99", "ringkv p50", "ringkv p99"]
    colors = ["#9ecae1", "#3182bd", "#fdae6b", "#e6550d"]
    for j, name in enumerate(names):
        ax.bar([x + (j - 1.5) * width for x in range(len(chart))], [c[1][j] for c in chart],
               width, label=name, color=colors[j])
    ax.set_xticks(range(len(chart)))
    ax.set_xticklabels([c[0].replace(" connection", "\nconnection").replace(", ", ",\n")
                        for c in chart], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("latency per call / pipelined request, ms (log)")
    ax.set_title("Latency percentiles, 32-byte values, same request shape (median of the runs)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig("docs/net-latency.png", dpi=100)


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main()
