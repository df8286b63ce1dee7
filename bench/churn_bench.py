#!/usr/bin/python3
"""Overwrites that change a value's size, ringkv against Redis in the same run (issue 21): the
write churn that makes ringkv's arena compact and Redis's allocator fragment.

Each server is fresh (ringkv --threads=1, Redis 7 with nothing persisted), takes KEYS keys with
SMALL-byte values, then PHASES phases of about 1 s of writes each: MultiPut / SET -P 16, 50
connections x 1 call, batches of 16, keys uniform over the same KEYS (a new sequence each
phase: the loadgen's --seed), the value size
alternating between BIG and SMALL bytes from one phase to the next, so that a good part of
every phase's writes change their key's size. The same run with every phase at SMALL bytes
(each write an overwrite in place) is the baseline row. ringkv keeps records over 128 bytes
in its arena (shard/internal/arena.h) and smaller ones in jemalloc: SMALL=32 BIG=200 moves
records between the two, SMALL=200 BIG=1000 churns the arena alone.

Each row gives writes per second over the phases, the server's CPU per write (user + system from
/proc over the phases), its resident size at the end, and for ringkv the bytes its arenas moved
to compact (`compacted_bytes`) per byte written, and the dead bytes left at the end.

BASELINE, if given, is another ringkv-server binary, run the same way in each round (say, a build
of the commit before a change).

Usage: bench/churn_bench.py [RUNS=3] [PHASES=20] [BIG=200] [KEYS=1000000] [SMALL=32] [BASELINE]
(repository root, after scripts/setup.sh). Prints markdown; raw results in bench-results/churn/.
"""
import json
import os
import subprocess
import sys

from benchlib import cell, cpu_seconds, machine, rss_bytes, run_client, start_redis, start_ringkv, \
    stop

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
PHASES = int(sys.argv[2]) if len(sys.argv) > 2 else 20
BIG = int(sys.argv[3]) if len(sys.argv) > 3 else 200
KEYS = int(sys.argv[4]) if len(sys.argv) > 4 else 1_000_000
SMALL = int(sys.argv[5]) if len(sys.argv) > 5 else 32
BASELINE = sys.argv[6] if len(sys.argv) > 6 else None
OUT = "bench-results/churn"
LOADGEN = "build/bench/ringkv-loadgen"
CLI = "build/client/ringkv"


def sizes(churn):
    return [BIG if churn and i % 2 == 0 else SMALL for i in range(PHASES)]


def arena(addr):
    out = subprocess.run([CLI, f"--addr={addr}", "--json", "stats"], capture_output=True,
                         text=True, check=True, timeout=10).stdout
    shards = json.loads(out)["shards"]
    return {k: sum(int(s.get(k, 0)) for s in shards)
            for k in ("compacted_bytes", "arena_dead_bytes", "arena_bytes", "memory_bytes")}


def run_ringkv(churn, binary="build/server/ringkv-server"):
    proc, addr = start_ringkv(os.path.join(OUT, "ringkv.log"), ["--threads=1"], binary)
    try:
        subprocess.run([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", f"--value-size={SMALL}",
                        "--ops=1", "--progress=false"], capture_output=True, check=True)
        before = arena(addr)
        cpu0 = cpu_seconds(proc.pid)
        writes = seconds = written = 0
        for phase, size in enumerate(sizes(churn)):
            json_path = os.path.join(OUT, "tmp.json")
            run_client([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", f"--value-size={size}",
                        "--duration=1", "--progress=false", "--preload=false", "--ratio=0:1",
                        "--mode=multi", "--batch=16", "--connections=50", "--concurrency=50",
                        f"--seed={phase + 1}", f"--json={json_path}"], proc.pid, 60)
            r = json.load(open(json_path))
            writes += r["ops"]
            seconds += r["ops"] / r["ops_per_s"]
            written += r["ops"] * (16 + size)
        cpu = cpu_seconds(proc.pid) - cpu0
        after = arena(addr)
        return {"writes_per_s": writes / seconds, "server_us": cpu * 1e6 / writes,
                "rss": rss_bytes(proc.pid),
                "moved_per_written": (after["compacted_bytes"] - before["compacted_bytes"]) /
                written, "dead": after["arena_dead_bytes"], "arena": after["arena_bytes"]}
    finally:
        stop(proc)


def run_redis(churn):
    proc, port = start_redis(os.path.abspath(os.path.join(OUT, "redis.log")))
    try:
        base = ["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(KEYS), "-c", "50",
                "-P", "16", "--csv"]
        subprocess.run(base[:-1] + ["-d", str(SMALL), "-n", str(KEYS), "-q"],
                       capture_output=True, check=True)
        out, _ = run_client(base + ["-d", str(SMALL), "-n", "200000"], proc.pid, 60)
        n = int(float(out.strip().splitlines()[-1].split('","')[1]))  # About 1 s of SETs.
        cpu0 = cpu_seconds(proc.pid)
        writes = seconds = 0
        for size in sizes(churn):
            out, _ = run_client(base + ["-d", str(size), "-n", str(n)], proc.pid, 60)
            rps = float(out.strip().splitlines()[-1].split('","')[1])
            writes += n
            seconds += n / rps
        cpu = cpu_seconds(proc.pid) - cpu0
        return {"writes_per_s": writes / seconds, "server_us": cpu * 1e6 / writes,
                "rss": rss_bytes(proc.pid)}
    finally:
        stop(proc)


def main():
    os.makedirs(OUT, exist_ok=True)
    rows = {}
    systems = [("ringkv, sizes alternating", run_ringkv, True),
               ("Redis, sizes alternating", run_redis, True),
               (f"ringkv, {SMALL} bytes throughout", run_ringkv, False),
               (f"Redis, {SMALL} bytes throughout", run_redis, False)]
    if BASELINE:
        systems.insert(1, ("ringkv baseline, sizes alternating",
                           lambda churn: run_ringkv(churn, BASELINE), True))
    for _ in range(RUNS):
        for name, fn, churn in systems:
            r = fn(churn)
            rows.setdefault(name, []).append(r)
            print(f"{name}: {r}", file=sys.stderr)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"{machine()}; {KEYS:,} keys, {PHASES} phases of about 1 s, values {BIG} and {SMALL} "
          f"bytes alternating; median (min .. max) of {RUNS} runs\n")
    print("| server | writes/s | server µs/write | RSS at the end, MB | arena bytes moved per "
          "byte written | dead arena bytes at the end, MB |")
    print("|---|---|---|---|---|---|")
    for name, rs in rows.items():
        ringkv = "moved_per_written" in rs[0]
        print(f"| {name} | {cell([r['writes_per_s'] for r in rs])} "
              f"| {cell([r['server_us'] for r in rs], '{:.2f}')} "
              f"| {cell([r['rss'] / 1e6 for r in rs])} "
              f"| {cell([r['moved_per_written'] for r in rs], '{:.2f}') if ringkv else '-'} "
              f"| {cell([r['dead'] / 1e6 for r in rs], '{:.1f}') if ringkv else '-'} |")


if __name__ == "__main__":
    main()
