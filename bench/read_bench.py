#!/usr/bin/env python3
"""What a linearizable read costs (`ringkv-consistency: linearizable`), beside a plain one, on
the primary of a group on etcd with one replica, in the same run.

Usage: bench/read_bench.py [RUNS] [SECONDS]   (defaults 3 and 5; from the repository root, after
scripts/setup.sh)

A group of two servers (--threads=1, --etcd, --group) and a real etcd on loopback. The primary
holds 100,000 keys of 32 bytes. ringkv-loadgen runs 50 connections x 1 call for SECONDS in each
of four shapes, in every run, the two consistencies alternating which goes first:
  - GET only, serializable and linearizable: a linearizable GET with no write waiting costs the
    fence check (a clock read) and nothing else;
  - 9 GETs to 1 PUT, the PUTs waiting for the replica (`--min_replicas=1`): a linearizable GET
    waits behind the writes its shard ran before it until they are acknowledged.
Reported: the median (min .. max) over the runs of ops/s, latency p50 and p99, the primary's
CPU per operation (user+system from /proc over the run), and the replica's.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "server", "testing"))
from benchlib import cell, cpu_seconds, machine, run_client, start_ringkv, stop  # noqa: E402
from etcd_process import Etcd  # noqa: E402

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
LOADGEN = "build/bench/ringkv-loadgen"
OUT = "bench-results/read"
KEYS = 100_000
SHAPES = [("GET", "1:0", ()), ("9 GET : 1 PUT, min replicas 1", "9:1", ("--min_replicas=1",))]


def wait_until(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout} s: {what}")
        time.sleep(0.1)


def caught_up(addr):
    """Whether the primary at `addr` streams to its replica on every worker, with no lag."""
    out = subprocess.run(["build/client/ringkv", f"--addr={addr}", "--json", "stats"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return False
    replicas = json.loads(out.stdout).get("replication", {}).get("replicas", [])
    return bool(replicas) and all(r.get("state") == "streaming" and
                                  int(r.get("lagRecords", 0)) == 0 for r in replicas)


def one(addr, primary, replica, ratio, extra, consistency):
    path = os.path.join(OUT, "loadgen.json")
    replica0 = cpu_seconds(replica.pid)
    _, cpu = run_client([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                         f"--duration={SECONDS}", "--progress=false", "--preload=false",
                         f"--json={path}", "--mode=unary", f"--ratio={ratio}",
                         "--connections=50", "--concurrency=50",
                         f"--consistency={consistency}", *extra], primary.pid, SECONDS * 10 + 60)
    r = json.load(open(path))
    if r["errors"]:
        raise RuntimeError(f"{r['errors']} calls failed: {r}")
    return {"ops_per_s": r["ops_per_s"], "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
            "replica_us_per_op": (cpu_seconds(replica.pid) - replica0) * 1e6 / r["ops"],
            **cpu.per_op(r["ops"])}


def main():
    os.makedirs(OUT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="ringkv-read-bench-")
    etcd = Etcd(work)
    etcd.start()
    results = {(shape, c): [] for shape, _, _ in SHAPES for c in ("serializable", "linearizable")}
    group = ["--threads=1", f"--etcd={etcd.endpoint}", "--group=reads"]
    primary, addr = start_ringkv(os.path.join(work, "primary.log"), group)
    replica = None
    try:
        wait_until(lambda: etcd.leader("reads"), 10, "nobody elected")
        replica, _ = start_ringkv(os.path.join(work, "replica.log"), group)
        wait_until(lambda: caught_up(addr), 30, "the replica never followed")
        subprocess.run([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                        "--ops=1", "--concurrency=1", "--progress=false"],
                       capture_output=True, check=True)
        for run in range(RUNS):
            for shape, ratio, extra in SHAPES:
                order = ("serializable", "linearizable")
                for consistency in order if run % 2 == 0 else order[::-1]:
                    wait_until(lambda: caught_up(addr), 30, "the replica fell behind")
                    results[(shape, consistency)].append(
                        one(addr, primary, replica, ratio, extra, consistency))
    finally:
        if replica is not None:
            stop(replica)
        stop(primary)
        etcd.kill()
    print(f"{machine()}; {RUNS} runs of {SECONDS} s, 50 connections x 1 call, 32-byte values\n")
    print("| shape | reads | ops/s | p50 ms | p99 ms | primary us/op | replica us/op "
          "| client us/op |")
    print("|---|---|---|---|---|---|---|---|")
    for (shape, consistency), rs in results.items():
        def col(key, fmt="{:.2f}"):
            return cell([r[key] for r in rs], fmt)
        print(f"| {shape} | {consistency} | {col('ops_per_s', '{:,.0f}')} | "
              f"{col('p50_ms', '{:.3f}')} | {col('p99_ms', '{:.3f}')} | "
              f"{col('server_us_per_op')} | {col('replica_us_per_op')} | "
              f"{col('client_us_per_op')} |")


if __name__ == "__main__":
    main()
