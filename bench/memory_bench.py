#!/usr/bin/python3
"""What a key costs in memory (issue 21): the resident size of a server holding N keys of 16
bytes ("key:%012d") with V-byte values, ringkv against Redis 7 in the same run.

  ringkv  --threads=1; the keys go in through ringkv-loadgen's pre-load (MultiPut, 1,000 keys a
          call);
  Redis   the same keys and values as MSET of 1,000 keys a command (a Python client), no
          persistence.

Each server starts empty and alone; its resident size (VmRSS) is read when it starts and again
after the inserts, once the key count is checked (ringkv stats, DBSIZE). A row gives the
resident size after, and bytes per key: (after - empty) / N, with the payload (16 + V) beside
it. Each server starts 10 s after the last one stopped, so that the kernel has freed the last
one's memory. MEMORY_SETTLE_S=S (default 0) waits S seconds more before reading the size after
the inserts, for both: jemalloc hands freed pages back over 10 s (its dirty decay), so with
large values the buffers of the last calls can still be resident when the size first stops
changing. BASELINE, if given, is another ringkv-server binary run the same way (say, a
build of the commit before a change).

Usage: bench/memory_bench.py [RUNS=3] [SHAPES=1M:10,1M:100,1M:1000,5M:32] [BASELINE]
(repository root, after scripts/setup.sh; a shape is KEYS:VALUE_BYTES, KEYS with an optional
K or M). Prints markdown; raw results in bench-results/memory/.
"""
import json
import os
import socket
import subprocess
import sys
import time

from benchlib import cell, machine, rss_bytes, start_redis, start_ringkv, stop

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SHAPES = sys.argv[2] if len(sys.argv) > 2 else "1M:10,1M:100,1M:1000,5M:32"
BASELINE = sys.argv[3] if len(sys.argv) > 3 else None
OUT = "bench-results/memory"
LOADGEN = "build/bench/ringkv-loadgen"
CLI = "build/client/ringkv"
BATCH = 1000


def parse_shape(text):
    keys, value = text.split(":")
    scale = {"K": 1_000, "M": 1_000_000}.get(keys[-1].upper(), 1)
    return int(keys.rstrip("KkMm")) * scale, int(value)


SETTLE_S = float(os.environ.get("MEMORY_SETTLE_S", "0"))


def settle(pid, wait=0.0):
    """The resident size once it stops changing (a server may still be freeing buffers)."""
    time.sleep(wait)
    last = rss_bytes(pid)
    for _ in range(20):
        time.sleep(0.5)
        now = rss_bytes(pid)
        if abs(now - last) < (1 << 20):
            return now
        last = now
    return last


def run_redis(keys, value_size):
    os.makedirs(OUT, exist_ok=True)
    proc, port = start_redis(os.path.join(OUT, "redis.log"))
    try:
        empty = settle(proc.pid)
        sock = socket.create_connection(("127.0.0.1", port))
        reader = sock.makefile("rb")
        value = b"v" * value_size
        for first in range(0, keys, BATCH):
            n = min(BATCH, keys - first)
            parts = [b"*%d\r\n$4\r\nMSET\r\n" % (2 * n + 1)]
            for k in range(first, first + n):
                parts.append(b"$16\r\nkey:%012d\r\n$%d\r\n%s\r\n" % (k, value_size, value))
            sock.sendall(b"".join(parts))
            line = reader.readline()
            if line != b"+OK\r\n":
                raise RuntimeError(f"MSET answered {line!r}")
        sock.sendall(b"*1\r\n$6\r\nDBSIZE\r\n")
        count = int(reader.readline()[1:])
        sock.close()
        if count != keys:
            raise RuntimeError(f"Redis holds {count} keys, not {keys}")
        return {"empty": empty, "after": settle(proc.pid, SETTLE_S)}
    finally:
        stop(proc)


def run_ringkv(keys, value_size, binary="build/server/ringkv-server"):
    os.makedirs(OUT, exist_ok=True)
    proc, addr = start_ringkv(os.path.join(OUT, "ringkv.log"), ["--threads=1"], binary)
    try:
        empty = settle(proc.pid)
        subprocess.run([LOADGEN, f"--addr={addr}", "--progress=false", f"--keys={keys}",
                        f"--value_size={value_size}", "--ops=1"], check=True,
                       stdout=subprocess.DEVNULL)
        out = subprocess.run([CLI, f"--addr={addr}", "--json", "stats"], capture_output=True,
                             text=True, check=True, timeout=30).stdout
        count = sum(int(s.get("keys", 0)) for s in json.loads(out)["shards"])
        if count != keys:
            raise RuntimeError(f"ringkv holds {count} keys, not {keys}")
        return {"empty": empty, "after": settle(proc.pid, SETTLE_S)}
    finally:
        stop(proc)


def main():
    shapes = [parse_shape(s) for s in SHAPES.split(",")]
    systems = [("ringkv", run_ringkv), ("redis", run_redis)]
    if BASELINE:
        systems.append(("ringkv baseline", lambda k, v: run_ringkv(k, v, BASELINE)))
    rows = {}
    for run in range(RUNS):
        for keys, value_size in shapes:
            for name, fn in systems:
                time.sleep(10)  # The kernel frees the last server's memory in its own time.
                r = fn(keys, value_size)
                rows.setdefault(f"{keys}:{value_size}", {}).setdefault(name, []).append(r)
                print(f"run {run + 1} {keys:,} x {value_size} {name}: {r}", file=sys.stderr)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"{machine()}; keys of 16 bytes; median (min .. max) of {RUNS} runs\n")
    print("| keys | value bytes | server | RSS after, MB | bytes per key (payload) "
          "| / Redis |")
    print("| --- | --- | --- | --- | --- | --- |")
    for keys, value_size in shapes:
        by_system = rows[f"{keys}:{value_size}"]
        redis_after = sorted(r["after"] for r in by_system["redis"])
        redis_median = redis_after[len(redis_after) // 2]
        for name, _ in systems:
            rs = by_system[name]
            per_key = [(r["after"] - r["empty"]) / keys for r in rs]
            ratio = [r["after"] / redis_median for r in rs]
            print(f"| {keys:,} | {value_size} | {name} | {cell([r['after'] / 1e6 for r in rs])} "
                  f"| {cell(per_key)} ({16 + value_size}) | {cell(ratio, '{:.2f}')} |")


if __name__ == "__main__":
    main()
