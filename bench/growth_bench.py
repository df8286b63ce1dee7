#!/usr/bin/python3
"""The table's growth as a client sees it (issue 21): the worst latency of a GET client, one
connection and one call in flight, while another client inserts KEYS new keys (16-byte keys
"key:%012d", 32-byte values) into an empty server, ringkv against Redis in the same run.

  ringkv  --threads=1; the inserter is ringkv-loadgen's pre-load (MultiPut, 1,000 keys a call,
          one call at a time); the GET client ringkv-loadgen --connections=1 --concurrency=1
          over keys 0..999 (the inserter's first keys), on the h2 client;
  Redis   the same inserts as MSET of 1,000 keys a command, one at a time (a Python client);
          the GET client redis-benchmark -c 1 -P 1 -t get -r 1000 (the same key names).

The server runs on CPU 0 and both clients on CPU 1 (taskset), for both systems, so that the
inserter and the server do not take turns on one core (GROWTH_CPUS=SERVER,GET,INSERT moves them;
a machine with cores to spare gives each its own); GROWTH_PAUSE_S sets the pause between servers; the GET client runs under SCHED_FIFO
(chrt -f 10), so that its answer is read as soon as it comes, not after the inserter's time
slice on the shared core (without it, both systems' worst was 4-5 ms of the client waiting). The GET client starts first and runs
on past the inserts, so its worst latency covers all of them. Each row also gives the
inserter's wall time and the server's resident size and CPU over the inserts. Each server
starts 10 s after the last one stopped, so that the kernel's freeing of its memory is done.

Usage: bench/growth_bench.py [RUNS=3] [KEYS=10000000] [BASELINE]
(repository root, after scripts/setup.sh). BASELINE: another ringkv-server binary (say, a
build of the commit before a change) run the same way, as a third row. Prints markdown; raw results in
bench-results/growth/.
"""
import json
import os
import socket
import subprocess
import sys
import time

from benchlib import cell, cpu_seconds, machine, rss_bytes, start_redis, start_ringkv, stop

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
KEYS = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000_000
BASELINE = sys.argv[3] if len(sys.argv) > 3 else None
OUT = "bench-results/growth"
LOADGEN = "build/bench/ringkv-loadgen"
VALUE = b"v" * 32
BATCH = 1000
# CPUs for the server, the GET client and the inserter: GROWTH_CPUS=SERVER,GET,INSERT. The
# default shares CPU 1 between the clients, as a 2-core machine must.
SERVER_CPU, CLIENT_CPU, INSERT_CPU = os.environ.get("GROWTH_CPUS", "0,1,1").split(",")
PAUSE_S = float(os.environ.get("GROWTH_PAUSE_S", "10"))
# GROWTH_FIFO=0 runs the GET client without SCHED_FIFO, for a machine that refuses it (the
# device machine) and gives the GET client a core of its own instead.
FIFO = ["chrt", "-f", "10"] if os.environ.get("GROWTH_FIFO", "1") == "1" else []
# GROWTH_GET_S: the GET client's least run in seconds (it must outlast the inserts);
# GROWTH_REDIS=0 leaves Redis out (a run that compares two ringkv binaries).
MIN_GET_S = int(os.environ.get("GROWTH_GET_S", "30"))
WITH_REDIS = os.environ.get("GROWTH_REDIS", "1") == "1"


def pin(cpu, pid):
    subprocess.run(["taskset", "-a", "-p", "-c", cpu, str(pid)], check=True,
                   stdout=subprocess.DEVNULL)


def insert_redis(port):
    """MSETs keys 0 .. KEYS - 1, BATCH at a time; returns the seconds it took."""
    sock = socket.create_connection(("127.0.0.1", port))
    reader = sock.makefile("rb")
    head = b"*%d\r\n$4\r\nMSET\r\n" % (2 * BATCH + 1)
    start = time.monotonic()
    for first in range(0, KEYS, BATCH):
        n = min(BATCH, KEYS - first)
        parts = [head if n == BATCH else b"*%d\r\n$4\r\nMSET\r\n" % (2 * n + 1)]
        for k in range(first, first + n):
            parts.append(b"$16\r\nkey:%012d\r\n$32\r\n%s\r\n" % (k, VALUE))
        sock.sendall(b"".join(parts))
        line = reader.readline()
        if line != b"+OK\r\n":
            raise RuntimeError(f"MSET answered {line!r}")
    seconds = time.monotonic() - start
    sock.close()
    return seconds


def get_rate_redis(port):
    """GETs per second of the 1x1 client on an idle server, to size its run."""
    out = subprocess.run(["taskset", "-c", CLIENT_CPU, "redis-benchmark", "-p", str(port),
                          "-c", "1", "-P", "1", "-t", "get", "-r", "1000", "-n", "50000",
                          "--csv"], capture_output=True, text=True, check=True).stdout
    return float(out.splitlines()[1].split(",")[1].strip('"'))


def run_redis(seconds):
    os.makedirs(OUT, exist_ok=True)
    proc, port = start_redis(os.path.join(OUT, "redis.log"))
    try:
        pin(SERVER_CPU, proc.pid)
        n = int(get_rate_redis(port) * seconds)
        getter = subprocess.Popen([*FIFO, "taskset", "-c", CLIENT_CPU,
                                   "redis-benchmark", "-p",
                                   str(port), "-c", "1", "-P", "1", "-t", "get", "-r", "1000",
                                   "-n", str(n), "--csv"], stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        os.sched_setaffinity(0, {int(INSERT_CPU)})
        cpu0 = cpu_seconds(proc.pid)
        insert_s = insert_redis(port)
        cpu = cpu_seconds(proc.pid) - cpu0
        os.sched_setaffinity(0, set(range(os.cpu_count())))
        rss = rss_bytes(proc.pid)
        out, _ = getter.communicate(timeout=seconds * 3 + 60)
        fields = [f.strip('"') for f in out.splitlines()[1].split(",")]
        return {"max_ms": float(fields[7]), "p99_ms": float(fields[6]),
                "insert_s": insert_s, "rss": rss, "server_cpu_s": cpu}
    finally:
        stop(proc)


def run_ringkv(seconds, binary="build/server/ringkv-server"):
    os.makedirs(OUT, exist_ok=True)
    proc, addr = start_ringkv(os.path.join(OUT, "ringkv.log"), ["--threads=1"], binary)
    try:
        pin(SERVER_CPU, proc.pid)
        result = os.path.join(OUT, "get.json")
        getter = subprocess.Popen([*FIFO, "taskset", "-c", CLIENT_CPU, LOADGEN,
                                   f"--addr={addr}",
                                   "--progress=false", "--preload=false", "--keys=1000",
                                   "--ratio=1:0", "--connections=1", "--concurrency=1",
                                   f"--duration={seconds}", f"--json={result}"],
                                  stdout=subprocess.DEVNULL)
        time.sleep(1)
        cpu0 = cpu_seconds(proc.pid)
        start = time.monotonic()
        subprocess.run(["taskset", "-c", INSERT_CPU, LOADGEN, f"--addr={addr}",
                        "--progress=false", f"--keys={KEYS}", "--ops=1"], check=True,
                       stdout=subprocess.DEVNULL)
        insert_s = time.monotonic() - start
        cpu = cpu_seconds(proc.pid) - cpu0
        rss = rss_bytes(proc.pid)
        getter.wait(timeout=seconds * 3 + 60)
        with open(result) as f:
            got = json.load(f)
        return {"max_ms": got["max_ms"], "p99_ms": got["p99_ms"], "insert_s": insert_s,
                "rss": rss, "server_cpu_s": cpu}
    finally:
        stop(proc)


def main():
    # The GET client must outlast the inserts: time one ringkv insert first.
    seconds = 0
    systems = [("ringkv", run_ringkv)] + ([("redis", run_redis)] if WITH_REDIS else [])
    if BASELINE:
        systems.append(("ringkv baseline", lambda s: run_ringkv(s, BASELINE)))
    rows = {name: [] for name, _ in systems}
    for run in range(RUNS):
        budget = max(MIN_GET_S, int(seconds * 1.5) + 10)
        for name, fn in systems:
            time.sleep(PAUSE_S)  # The kernel frees the last server's gigabytes in its own time.
            r = fn(budget)
            if r["insert_s"] + 1 > budget:
                raise RuntimeError(f"{name}: the inserts outlasted the GET client")
            rows[name].append(r)
            seconds = max(seconds, r["insert_s"])
            print(f"run {run + 1} {name}: {r}", file=sys.stderr)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"{machine()}; {KEYS:,} keys of 16 + 32 bytes inserted into an empty server; "
          f"median (min-max) of {RUNS} runs\n")
    print("| server | worst GET latency, ms | GET p99, ms | inserts took, s | RSS after, MB "
          "| server CPU over the inserts, s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, rs in rows.items():
        print(f"| {name} | {cell([r['max_ms'] for r in rs], '{:.2f}')} "
              f"| {cell([r['p99_ms'] for r in rs], '{:.3f}')} "
              f"| {cell([r['insert_s'] for r in rs], '{:.1f}')} "
              f"| {cell([r['rss'] / 1e6 for r in rs])} "
              f"| {cell([r['server_cpu_s'] for r in rs], '{:.1f}')} |")


if __name__ == "__main__":
    main()
