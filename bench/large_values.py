#!/usr/bin/python3
"""Large values (80 KB), ringkv-server against Redis, like for like, in one run (issue 25).

Both servers run at once (one ringkv worker, Redis's one thread), each holding the same 1,000
keys of 81,920 bytes (80 MB, beyond the caches). Every run goes through the shapes, and within a
shape measures Redis and ringkv back to back (alternating which goes first), with the same
request shape: C connections with one call in flight each (redis-benchmark -c C -P 1,
ringkv-loadgen --connections=C --concurrency=C), for GET and for SET/PUT. Each cell is the median
(min .. max) of the runs: ops/s, the server's CPU per operation (user + system from /proc over the
run, divided by operations) and the client's own (its rusage).

Usage: [LOADGEN=...] bench/large_values.py [RUNS=3] [SECONDS=4] [SERVER_FLAG...]   (repository
root, after scripts/setup.sh). Prints markdown; raw results under bench-results/large/.
LOADGEN: another ringkv-loadgen binary (one built before a change to the client).
"""
import json
import os
import sys

from benchlib import cell, machine, run_client, start_redis, start_ringkv, stop

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
FLAGS = sys.argv[3:]
OUT = "bench-results/large"
LOADGEN = os.environ.get("LOADGEN", "build/bench/ringkv-loadgen")
KEYS = 1000
SIZE = 81920
SHAPES = [(op, c) for op in ("GET", "SET/PUT") for c in (1, 10, 100)]


def redis_run(port, pid, op, conns, n):
    cmd = ["redis-benchmark", "-p", str(port), "-r", str(KEYS), "-d", str(SIZE), "--csv",
           "-t", "get" if op == "GET" else "set", "-c", str(conns), "-P", "1", "-n", str(n)]
    out, cpu = run_client(cmd, pid, SECONDS * 20 + 60)
    ops_per_s = float(out.strip().splitlines()[-1].strip('"').split('","')[1])
    return {"ops_per_s": ops_per_s, **cpu.per_op(n)}


def ringkv_run(addr, pid, op, conns):
    path = os.path.join(OUT, "tmp.json")
    cmd = [LOADGEN, f"--addr={addr}", f"--keys={KEYS}", f"--value-size={SIZE}",
           f"--duration={SECONDS}", "--progress=false", "--preload=false", f"--json={path}",
           "--ratio=1:0" if op == "GET" else "--ratio=0:1", f"--connections={conns}",
           f"--concurrency={conns}"]
    _, cpu = run_client(cmd, pid, SECONDS * 20 + 60)
    result = json.load(open(path))
    return {"ops_per_s": result["ops_per_s"], **cpu.per_op(result["ops"])}


def main():
    os.makedirs(OUT, exist_ok=True)
    redis, port = start_redis(os.path.abspath(os.path.join(OUT, "redis.log")))
    ringkv, addr = start_ringkv(os.path.join(OUT, "ringkv.log"), ["--threads=1", *FLAGS])
    results = {}
    try:
        run_client(["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(KEYS * 4), "-r",
                    str(KEYS), "-d", str(SIZE), "-c", "10", "-q"], redis.pid, 120)
        run_client([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", f"--value-size={SIZE}",
                    "--ops=1", "--concurrency=1", "--progress=false"], ringkv.pid, 120)
        sized = {}  # Redis requests per run: about SECONDS at the rate a short run gave.
        for r in range(RUNS):
            for op, conns in SHAPES:
                if (op, conns) not in sized:
                    probe = redis_run(port, redis.pid, op, conns, 2000)
                    sized[(op, conns)] = max(2000, int(probe["ops_per_s"] * SECONDS))
                order = ("redis", "ringkv") if r % 2 == 0 else ("ringkv", "redis")
                for system in order:
                    if system == "redis":
                        row = redis_run(port, redis.pid, op, conns, sized[(op, conns)])
                    else:
                        row = ringkv_run(addr, ringkv.pid, op, conns)
                    results.setdefault((op, conns, system), []).append(row)
                    print(f"run {r + 1} {op:7} {conns:3} conns {system:6} "
                          f"{row['ops_per_s']:9,.0f} ops/s  server "
                          f"{row['server_us_per_op']:6.2f} us/op", file=sys.stderr, flush=True)
    finally:
        stop(ringkv)
        stop(redis)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump({f"{k[0]} {k[1]} {k[2]}": v for k, v in results.items()}, f, indent=1)
    print(f"{machine()}; {RUNS} runs of about {SECONDS} s per cell; 1,000 keys of {SIZE:,} bytes;"
          f" ringkv flags: {' '.join(['--threads=1', *FLAGS])}\n")
    print("| op | connections x 1 | system | ops/s | server us/op | client us/op "
          "| ringkv/Redis ops/s |")
    print("|---|---|---|---|---|---|---|")
    for op, conns in SHAPES:
        medians = {}
        for system in ("redis", "ringkv"):
            rows = results[(op, conns, system)]
            ops = [row["ops_per_s"] for row in rows]
            medians[system] = sorted(ops)[len(ops) // 2]
            ratio = f"{medians['ringkv'] / medians['redis']:.2f}x" if system == "ringkv" else ""
            print(f"| {op} | {conns} | {system} | {cell(ops)} | "
                  f"{cell([row['server_us_per_op'] for row in rows], '{:.1f}')} | "
                  f"{cell([row['client_us_per_op'] for row in rows], '{:.1f}')} | {ratio} |")


if __name__ == "__main__":
    main()
