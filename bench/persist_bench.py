#!/usr/bin/python3
"""Persistence's costs (issue 12), ringkv against Redis configured to match, in the same run:

  put      unary PUT, 50 connections x 1 call, 32-byte values over 1M keys, SECONDS each:
           ringkv in memory / --data-dir --fsync=everysec / --fsync=always, against Redis with
           appendonly no / appendonly yes + appendfsync everysec / appendfsync always; ops/s,
           p99, and the server's CPU per operation (user + system from /proc over the run);
  restore  the same KEYS keys ("key:%012d", 32-byte values) in both: ringkv-loadgen writes
           them to ringkv with MultiPut, which stops (a snapshot at exit); redis-cli --pipe
           SETs them in Redis, then SAVE; then each starts again on its files, and the time
           each says the load took is compared (ringkv: "N keys restored in S s"; Redis: "DB
           loaded from disk: S seconds"), with the files' size;
  snapshot the same KEYS keys loaded in both; then unary PUT (50 connections x 1 call, over the
           loaded keys) for SECONDS with no snapshot, and again while a snapshot runs
           (ringkv: the Snapshot RPC, `ringkv snapshot`; Redis: BGSAVE), started with the
           load; p99 and ops/s of each, how long the snapshot took, and the memory: the
           server's proportional set size (Pss from /proc/PID/smaps_rollup, which counts a
           page shared by Redis and its fork child once) before and at its peak during the
           snapshot, sampled every 50 ms, Redis's child included.

Data files go to a fresh directory under bench-results/persist/ (the same disk for both), and
are removed after each run. Every server is stopped at the end. Prints markdown; raw results in
bench-results/persist/results.jsonl.

With MODES=a,b (environment; of memory, everysec, always) part put runs those modes only; with
OLD_SERVER=PATH (a ringkv-server built from an earlier commit) it runs each mode on that one
too, in the same rounds, as the row "ringkv-old".

Usage: [MODES=memory,everysec,always] [OLD_SERVER=PATH]
       bench/persist_bench.py [RUNS=3] [SECONDS=20] [PARTS=put,restore] [KEYS=2000000]
       (PARTS: any of put, restore, snapshot)
(repository root, after scripts/setup.sh)
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from benchlib import cell, machine, run_client, start_redis, start_ringkv, stop

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 20
PARTS = sys.argv[3].split(",") if len(sys.argv) > 3 else ["put", "restore"]
KEYS = int(sys.argv[4]) if len(sys.argv) > 4 else 2_000_000
OUT = os.path.abspath("bench-results/persist")
LOADGEN = "build/bench/ringkv-loadgen"
PUT_KEYS = 1_000_000
SERVER = "build/server/ringkv-server"
OLD_SERVER = os.environ.get("OLD_SERVER", "")
MODES = os.environ.get("MODES", "memory,everysec,always").split(",")


def record(name, result):
    with open(os.path.join(OUT, "results.jsonl"), "a") as f:
        f.write(json.dumps({"name": name, **result}) + "\n")


def fresh_dir(name):
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


# ---- put --------------------------------------------------------------------------------------

RINGKV_MODES = {"memory": [], "everysec": ["--fsync=everysec"], "always": ["--fsync=always"]}
REDIS_MODES = {"memory": ["--appendonly", "no"],
               "everysec": ["--appendonly", "yes", "--appendfsync", "everysec"],
               "always": ["--appendonly", "yes", "--appendfsync", "always"]}


def ringkv_put(mode, binary=SERVER):
    data = fresh_dir("ringkv-data")
    flags = RINGKV_MODES[mode] + ([f"--data-dir={data}"] if mode != "memory" else [])
    proc, addr = start_ringkv(os.path.join(OUT, "ringkv.log"), flags, binary)
    try:
        json_path = os.path.join(OUT, "tmp.json")
        _, cpu = run_client([LOADGEN, f"--addr={addr}", f"--keys={PUT_KEYS}", "--value-size=32",
                             "--ratio=0:1", "--connections=50", "--concurrency=50",
                             f"--duration={SECONDS}", "--progress=false", "--preload=false",
                             f"--json={json_path}"], proc.pid, SECONDS * 10 + 60)
        r = json.load(open(json_path))
    finally:
        stop(proc)
    shutil.rmtree(data, ignore_errors=True)
    return {"ops_per_s": r["ops_per_s"], "p99_ms": r["p99_ms"], "ops": r["ops"],
            **cpu.per_op(r["ops"])}


def redis_put(mode):
    data = fresh_dir("redis-data")
    proc, port = start_redis(os.path.join(OUT, "redis.log"), ["--dir", data] + REDIS_MODES[mode])
    try:
        base = ["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(PUT_KEYS), "-d", "32",
                "-c", "50", "-P", "1", "--csv"]
        out, _ = run_client(base + ["-n", "20000"], proc.pid, 120)  # Sizes the real run.
        rps = float(out.strip().splitlines()[-1].split('","')[1])
        n = max(20000, int(rps * SECONDS))
        out, cpu = run_client(base + ["-n", str(n)], proc.pid, SECONDS * 10 + 60)
        row = out.strip().splitlines()[-1].strip('"').split('","')
    finally:
        stop(proc)
    shutil.rmtree(data, ignore_errors=True)
    return {"ops_per_s": float(row[1]), "p99_ms": float(row[6]), "ops": n, **cpu.per_op(n)}


def put():
    rows = {}
    systems = [("ringkv", ringkv_put), ("redis", redis_put)]
    if OLD_SERVER:
        systems.append(("ringkv-old", lambda mode: ringkv_put(mode, OLD_SERVER)))
    for _ in range(RUNS):  # Interleaved, so drift hits every variant alike.
        for mode in MODES:
            for system, run in systems:
                r = run(mode)
                record(f"put-{system}-{mode}", r)
                rows.setdefault((system, mode), []).append(r)
    print(f"\n### Unary PUT, 50 connections x 1 call, 32-byte values ({SECONDS} s runs, "
          f"median (min .. max) of {RUNS})\n")
    print("| persistence | ringkv ops/s | Redis ops/s | ringkv / Redis | server CPU us/op, "
          "ringkv / Redis | client CPU us/op, loadgen / redis-benchmark | p99 ms, ringkv / Redis |")
    print("|---|---|---|---|---|---|---|")
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    for mode in MODES:
        k, r = rows[("ringkv", mode)], rows[("redis", mode)]
        print(f"| {mode} | {cell([x['ops_per_s'] for x in k])} | "
              f"{cell([x['ops_per_s'] for x in r])} | "
              f"{med(k, 'ops_per_s') / med(r, 'ops_per_s'):.2f} | "
              f"{med(k, 'server_us_per_op'):.2f} / {med(r, 'server_us_per_op'):.2f} | "
              f"{med(k, 'client_us_per_op'):.2f} / {med(r, 'client_us_per_op'):.2f} | "
              f"{med(k, 'p99_ms'):.3f} / {med(r, 'p99_ms'):.3f} |")
    if OLD_SERVER:
        print(f"\nThe same modes on OLD_SERVER ({OLD_SERVER}):\n")
        print("| persistence | ringkv-old ops/s | this / old | server CPU us/op, old | "
              "p99 ms, old |")
        print("|---|---|---|---|---|")
        for mode in MODES:
            k, o = rows[("ringkv", mode)], rows[("ringkv-old", mode)]
            print(f"| {mode} | {cell([x['ops_per_s'] for x in o])} | "
                  f"{med(k, 'ops_per_s') / med(o, 'ops_per_s'):.2f} | "
                  f"{med(o, 'server_us_per_op'):.2f} | {med(o, 'p99_ms'):.3f} |")
    if "memory" in MODES:
        base = med(rows[("ringkv", "memory")], "ops_per_s")
        for mode in ("everysec", "always"):
            if mode in MODES:
                print(f"\nringkv --fsync={mode} / in memory, ops/s: "
                      f"{med(rows[('ringkv', mode)], 'ops_per_s') / base:.2f}")


# ---- restore ------------------------------------------------------------------------------------

def ringkv_restore():
    data = fresh_dir("ringkv-data")
    log = os.path.join(OUT, "ringkv-restore.log")
    proc, addr = start_ringkv(log, [f"--data-dir={data}"])
    try:
        ringkv_load(addr)
    finally:
        t0 = time.monotonic()
        stop(proc)
        stop_s = time.monotonic() - t0
    size = dir_bytes(data)
    proc, addr = start_ringkv(log, [f"--data-dir={data}"])
    stop(proc)
    m = re.search(r"(\d+) keys restored in ([\d.]+) s", open(log).read())
    shutil.rmtree(data, ignore_errors=True)
    assert int(m[1]) == KEYS, f"ringkv restored {m[1]} keys of {KEYS}"
    return {"load_s": float(m[2]), "bytes": size, "stop_s": stop_s}


def redis_fill(cli):
    """SETs the keys and values ringkv-loadgen writes ("key:%012d", 32 bytes of 'v')."""
    pipe = subprocess.Popen(cli + ["--pipe"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    value = b"v" * 32
    for start in range(0, KEYS, 100_000):
        pipe.stdin.write(b"".join(
            b"*3\r\n$3\r\nSET\r\n$16\r\nkey:%012d\r\n$32\r\n%s\r\n" % (i, value)
            for i in range(start, min(KEYS, start + 100_000))))
    pipe.stdin.close()
    assert pipe.wait(timeout=600) == 0, "redis-cli --pipe failed"
    keys = subprocess.run(cli + ["DBSIZE"], check=True, capture_output=True, text=True)
    assert int(keys.stdout) == KEYS, f"Redis holds {keys.stdout} keys, not {KEYS}"


def redis_restore():
    data = fresh_dir("redis-data")
    log = os.path.join(OUT, "redis-restore.log")
    proc, port = start_redis(log, ["--dir", data])
    try:
        cli = ["redis-cli", "-p", str(port)]
        redis_fill(cli)
        t0 = time.monotonic()
        subprocess.run(cli + ["SAVE"], check=True, capture_output=True, timeout=600)
        save_s = time.monotonic() - t0
    finally:
        stop(proc)
    size = dir_bytes(data)
    open(log, "w").close()
    proc, port = start_redis(log, ["--dir", data])
    m = None
    try:
        for _ in range(6000):  # PING answers (LOADING) before the load is done.
            m = re.search(r"DB loaded from disk: ([\d.]+) seconds", open(log).read())
            if m:
                break
            time.sleep(0.1)
    finally:
        stop(proc)
    shutil.rmtree(data, ignore_errors=True)
    return {"load_s": float(m[1]), "bytes": size, "save_s": save_s}


def restore():
    rows = {"ringkv": [], "redis": []}
    for _ in range(RUNS):
        for system, run in (("ringkv", ringkv_restore), ("redis", redis_restore)):
            r = run()
            record(f"restore-{system}", r)
            rows[system].append(r)
    print(f"\n### Restore of {KEYS:,} keys with 32-byte values (median (min .. max) of {RUNS})\n")
    print("| | load s | files MiB |")
    print("|---|---|---|")
    for system in rows:
        print(f"| {system} | {cell([r['load_s'] for r in rows[system]], '{:.2f}')} | "
              f"{cell([r['bytes'] / 2**20 for r in rows[system]], '{:.0f}')} |")
    ratio = statistics.median(r["load_s"] for r in rows["redis"]) / \
        statistics.median(r["load_s"] for r in rows["ringkv"])
    print(f"\nRedis load time / ringkv restore time (medians): {ratio:.2f}")


# ---- snapshot -----------------------------------------------------------------------------------

def pss_bytes(pids):
    total = 0
    for pid in pids:
        try:
            for line in open(f"/proc/{pid}/smaps_rollup"):
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass  # Gone (Redis's child, once done).
    return total


def children(pid):
    try:
        return [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


class PeakMemory:
    """Samples the Pss of a process and its children every 50 ms on a thread of its own."""

    def __init__(self, pid):
        import threading
        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, pss_bytes([self.pid] + children(self.pid)))
            self.stop.wait(0.05)

    def end(self):
        self.stop.set()
        self.thread.join()
        return self.peak


def ringkv_load(addr):
    subprocess.run([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                    "--ops=1", "--concurrency=1", "--progress=false"],
                   capture_output=True, check=True, timeout=900)


def ringkv_puts(proc, addr, seconds):
    json_path = os.path.join(OUT, "tmp.json")
    _, cpu = run_client([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                         "--ratio=0:1", "--connections=50", "--concurrency=50",
                         f"--duration={seconds}", "--progress=false", "--preload=false",
                         f"--json={json_path}"], proc.pid, seconds * 10 + 60)
    r = json.load(open(json_path))
    return {"ops_per_s": r["ops_per_s"], "p99_ms": r["p99_ms"]}


def ringkv_snapshot():
    data = fresh_dir("ringkv-data")
    proc, addr = start_ringkv(os.path.join(OUT, "ringkv-snapshot.log"),
                              [f"--data-dir={data}", "--fsync=everysec"])
    try:
        ringkv_load(addr)
        cli = ["build/client/ringkv", f"--addr={addr}", "--json", "snapshot"]
        subprocess.run(cli, check=True, capture_output=True)  # The logs restart: even start.
        quiet = ringkv_puts(proc, addr, SECONDS)
        before = pss_bytes([proc.pid])
        peak = PeakMemory(proc.pid)
        snap = subprocess.Popen(cli, stdout=subprocess.PIPE, text=True)
        during = ringkv_puts(proc, addr, SECONDS)
        out, _ = snap.communicate(timeout=900)
        peak_bytes = peak.end()
        snapshot_s = json.loads(out)["seconds"]
    finally:
        stop(proc)
    shutil.rmtree(data, ignore_errors=True)
    return {"quiet": quiet, "during": during, "snapshot_s": snapshot_s, "pss_before": before,
            "pss_peak": peak_bytes}


def redis_puts(proc, port, seconds, rps_guess):
    n = max(20000, int(rps_guess * seconds))
    out, _ = run_client(["redis-benchmark", "-p", str(port), "-t", "set", "-r", str(KEYS),
                         "-d", "32", "-c", "50", "-P", "1", "--csv", "-n", str(n)],
                        proc.pid, seconds * 10 + 60)
    row = out.strip().splitlines()[-1].strip('"').split('","')
    return {"ops_per_s": float(row[1]), "p99_ms": float(row[6])}


def redis_snapshot():
    data = fresh_dir("redis-data")
    proc, port = start_redis(os.path.join(OUT, "redis-snapshot.log"), ["--dir", data])
    cli = ["redis-cli", "-p", str(port)]
    try:
        redis_fill(cli)
        sizing = redis_puts(proc, port, 1, 20000)
        quiet = redis_puts(proc, port, SECONDS, sizing["ops_per_s"])
        before = pss_bytes([proc.pid])
        peak = PeakMemory(proc.pid)
        t0 = time.monotonic()
        subprocess.run(cli + ["BGSAVE"], check=True, capture_output=True)
        during = redis_puts(proc, port, SECONDS, quiet["ops_per_s"])
        while "rdb_bgsave_in_progress:1" in subprocess.run(
                cli + ["INFO", "persistence"], capture_output=True, text=True).stdout:
            time.sleep(0.05)
        snapshot_s = time.monotonic() - t0
        peak_bytes = peak.end()
    finally:
        stop(proc)
    shutil.rmtree(data, ignore_errors=True)
    return {"quiet": quiet, "during": during, "snapshot_s": snapshot_s, "pss_before": before,
            "pss_peak": peak_bytes}


def snapshot():
    rows = {"ringkv": [], "redis": []}
    for _ in range(RUNS):
        for system, run in (("ringkv", ringkv_snapshot), ("redis", redis_snapshot)):
            r = run()
            record(f"snapshot-{system}", r)
            rows[system].append(r)
    print(f"\n### Unary PUT while a snapshot of {KEYS:,} keys runs (50 connections x 1 call, "
          f"32-byte values, {SECONDS} s each; median (min .. max) of {RUNS})\n")
    print("| | p99 ms, no snapshot | p99 ms, during | p99 during / without | ops/s, no snapshot "
          "| ops/s, during | snapshot s | memory MiB before | memory growth at peak |")
    print("|---|---|---|---|---|---|---|---|---|")
    for system, rs in rows.items():
        ratio = [r["during"]["p99_ms"] / r["quiet"]["p99_ms"] for r in rs]
        growth = [100 * (r["pss_peak"] / r["pss_before"] - 1) for r in rs]
        print(f"| {system} | {cell([r['quiet']['p99_ms'] for r in rs], '{:.2f}')} | "
              f"{cell([r['during']['p99_ms'] for r in rs], '{:.2f}')} | "
              f"{cell(ratio, '{:.2f}')} | {cell([r['quiet']['ops_per_s'] for r in rs])} | "
              f"{cell([r['during']['ops_per_s'] for r in rs])} | "
              f"{cell([r['snapshot_s'] for r in rs], '{:.1f}')} | "
              f"{cell([r['pss_before'] / 2**20 for r in rs])} | "
              f"{cell(growth, '{:+.1f}%')} |")


def main():
    os.makedirs(OUT, exist_ok=True)
    print(f"{machine()}; {time.strftime('%Y-%m-%d')}")
    if "put" in PARTS:
        put()
    if "restore" in PARTS:
        restore()
    if "snapshot" in PARTS:
        snapshot()


if __name__ == "__main__":
    main()
