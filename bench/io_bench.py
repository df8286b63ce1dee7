#!/usr/bin/python3
"""ringkv-server with --io=epoll against --io=uring (issue 25), like for like, in one run.

Each round starts one server per I/O mode in turn (alternating which goes first), stores the
keys once, and runs every shape against it with ringkv-loadgen: the same connections, calls in flight, batch and values
for both. Each cell gives ops/s and the server's CPU per operation (user + system from /proc over
the client's run, divided by its operations) with the client's own beside it.

Shapes (32-byte values over 1,000,000 pre-loaded keys unless said):
  GET and PUT at 50 connections x 1 call, GET at 1 connection x 50 in flight, MultiGet batches
  of 16 at 50 connections, and GET of 80 KB values (1,000 keys) at 10 connections x 1.

Usage: bench/io_bench.py [ROUNDS=3] [SECONDS=5] [THREADS=1]  (repository root, after
scripts/setup.sh). Prints markdown; raw results under bench-results/io/.
"""
import json
import os
import subprocess
import sys
import time

from benchlib import cell, machine, run_client, start_ringkv, stop

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
THREADS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
OUT = "bench-results/io"
LOADGEN = "build/bench/ringkv-loadgen"
MODES = ["epoll", "uring"]
SMALL = ["--keys=1000000", "--value-size=32"]
LARGE = ["--keys=1000", "--value-size=81920"]
SHAPES = [
    ("GET, 50 connections x 1", SMALL + ["--ratio=1:0", "--connections=50", "--concurrency=50"]),
    ("PUT, 50 connections x 1", SMALL + ["--ratio=0:1", "--connections=50", "--concurrency=50"]),
    ("GET, 1 connection x 50 in flight",
     SMALL + ["--ratio=1:0", "--connections=1", "--concurrency=50"]),
    ("MultiGet of 16, 50 connections",
     SMALL + ["--mode=multi", "--batch=16", "--ratio=1:0", "--connections=50",
              "--concurrency=50"]),
    ("GET of 80 KB, 10 connections x 1",
     LARGE + ["--ratio=1:0", "--connections=10", "--concurrency=10"]),
]


def preload(addr, keys):
    """Stores the shape's keys once (a loadgen run of one operation), so that no timed run
    counts the server's CPU for its own pre-load."""
    subprocess.run([LOADGEN, f"--addr={addr}", *keys, "--ops=1", "--concurrency=1",
                    "--progress=false"], check=True, capture_output=True)


def run_shape(addr, pid, flags, path):
    cmd = [LOADGEN, f"--addr={addr}", f"--duration={SECONDS}", "--progress=false",
           "--preload=false", f"--json={path}", *flags]
    _, cpu = run_client(cmd, pid, timeout=SECONDS * 10 + 120)
    result = json.load(open(path))
    ops = result["ops"]
    per_op = cpu.per_op(ops)
    return {"ops_per_s": result["ops_per_s"], "server_us": per_op["server_us_per_op"],
            "client_us": per_op["client_us_per_op"], "p99_ms": result.get("p99_ms")}


def main():
    os.makedirs(OUT, exist_ok=True)
    results = {(shape, mode): [] for shape, _ in SHAPES for mode in MODES}
    for r in range(ROUNDS):
        for mode in (MODES if r % 2 == 0 else list(reversed(MODES))):
            proc, addr = start_ringkv(os.path.join(OUT, f"ringkv-{mode}.log"),
                                      [f"--io={mode}", f"--threads={THREADS}"])
            try:
                loaded = None
                for shape, flags in SHAPES:  # The 80 KB values last: they replace 1,000 keys.
                    keys = LARGE if flags[:2] == LARGE else SMALL
                    if keys is not loaded:
                        preload(addr, keys)
                        loaded = keys
                    path = os.path.join(OUT, f"{mode}-{len(results[(shape, mode)])}.json")
                    results[(shape, mode)].append(run_shape(addr, proc.pid, flags, path))
            finally:
                stop(proc)
            time.sleep(1)
    json.dump({f"{s} / {m}": v for (s, m), v in results.items()},
              open(os.path.join(OUT, "results.json"), "w"), indent=1)
    print(f"{machine()}; {time.strftime('%Y-%m-%d')}; {ROUNDS} rounds of {SECONDS} s, "
          f"--threads={THREADS}; median (min .. max)\n")
    print("| shape | io | ops/s | server us/op | client us/op | p99 ms |")
    print("|---|---|---|---|---|---|")
    for shape, _ in SHAPES:
        for mode in MODES:
            runs = results[(shape, mode)]
            print(f"| {shape} | {mode} | {cell([x['ops_per_s'] for x in runs])} | "
                  f"{cell([x['server_us'] for x in runs], '{:.2f}')} | "
                  f"{cell([x['client_us'] for x in runs], '{:.2f}')} | "
                  f"{cell([x['p99_ms'] for x in runs if x['p99_ms'] is not None], '{:.2f}')} |")


if __name__ == "__main__":
    main()
