#!/usr/bin/python3
"""Replication (issue 22) as clients see it, ringkv against Redis in the same run.

Part 1, PUT with and without a replica. 50 connections x 1 call, 32-byte values over 100,000
keys of 16 bytes, SECONDS each: ringkv-loadgen --mode=unary --ratio=0:1 against ringkv,
redis-benchmark -t set -c 50 -P 1 against Redis. Each system alone, then with one replica
following it (ringkv --replica-of, Redis --replicaof: both asynchronous), then with the
replica and each write waiting for it (ringkv --min-replicas=1 on the primary; Redis: each
connection sends SET then WAIT 1 0 and waits for both, bench/redis_wait.cc, since
redis-benchmark cannot), and BASELINE (another
ringkv-server binary, say the commit before replication) alone, with a replica of the same
binary, and with that replica and --min-replicas=1. Every server runs one worker
(--threads=1; Redis is single-threaded), all on the same 2 cores as the client, so a replica
takes CPU from its primary here: the CPU per operation of primary, replica and client is given
beside the rate. For ringkv's replica, the delay of the messages it applied during the run (from
its stats: the time from the commit of a message's first record on the primary to its apply),
as the bounds of the histogram buckets that hold the median and the 99th percentile.

Part 2, full sync of SYNC_KEYS keys (16-byte keys, 32-byte values): the primary is loaded
(ringkv-loadgen's MultiPut pre-load; Redis DEBUG POPULATE with 32-byte values), then a replica
starts, and the time until it holds everything is taken (ringkv: every flow "stable" with no
lag; Redis: master_link_status up, no sync in progress, and the key count). Redis syncs
diskless (repl-diskless-sync yes, delay 0; the replica loads from the socket,
repl-diskless-load on-empty-db; each Redis in a directory of its own). The primary's resident size is sampled every 20 ms
meanwhile: its growth, and for Redis the fork child's peak too. With BASELINE, that binary's
full sync too (primary and replica).

Part 3 (PARTS=resync, ringkv only), the issue's "partial resync after a 5-second
disconnect": a replica follows a primary (--repl-backlog=128MiB) under ringkv-loadgen's PUTs at
50 connections; after 2 s the replica is stopped (SIGSTOP) and its connections to the primary
cut (ss -K, by the replica's own ports), for 5 s; then it runs again. The time from SIGCONT
until it has applied what the primary had made by then, and whether that was a partial
resync (no new full sync).

The replica with a data directory (ringkv --data-dir, --fsync=everysec; Redis appendonly
yes, appendfsync everysec on the replica) is a row of part 1 too. ROWS=name;name runs only
those rows of part 1 (names separated by semicolons: ROWS='ringkv;ringkv + replica, min 1').

Usage: [PARTS=put,sync,resync] [ROWS=...] bench/repl_bench.py [RUNS=3] [SECONDS=5] [SYNC_KEYS=1000000] [BASELINE]
(repository root, after scripts/setup.sh). Prints markdown; raw results in bench-results/repl/.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchlib import cell, machine, rss_bytes, run_client, start_redis, start_ringkv, stop

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SYNC_KEYS = int(sys.argv[3]) if len(sys.argv) > 3 else 1_000_000
BASELINE = sys.argv[4] if len(sys.argv) > 4 else None
OUT = "bench-results/repl"
LOADGEN = "build/bench/ringkv-loadgen"
REDIS_WAIT = "build/bench/redis-wait"
CLI = "build/client/ringkv"
KEYS = 100_000
PARTS = os.environ.get("PARTS", "put,sync").split(",")


def log(name):
    return os.path.abspath(os.path.join(OUT, name + ".log"))


def redis(name, flags=()):
    """A Redis of its own directory (a replica writes no dump.rdb where the next one starts):
    the replica loads the primary's stream from the socket (repl-diskless-load on-empty-db)."""
    work = tempfile.mkdtemp(prefix="ringkv-repl-bench-")
    proc, port = start_redis(log(name), ["--dir", work, "--repl-diskless-load", "on-empty-db",
                                         *flags])
    proc.work = work
    return proc, port


def stop_redis(proc):
    stop(proc)
    shutil.rmtree(proc.work, ignore_errors=True)


def cpu_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ringkv_stats(addr):
    out = subprocess.run([CLI, f"--addr={addr}", "--json", "stats"], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def delays(addr):
    """A replica's message delays so far: (bucket bounds in ms, counts per bucket)."""
    r = ringkv_stats(addr)["replication"]
    return r["delay_bounds_ms"], [int(c) for c in r["flows"][0]["delay_buckets"]]


def delay_percentile(bounds, before, after, q):
    """The bound (ms) of the bucket holding quantile q of the delays counted between two
    readings; inf past the last bound."""
    counts = [a - b for a, b in zip(after, before)]
    total, seen = sum(counts), 0
    for i, c in enumerate(counts):
        seen += c
        if total and seen >= q * total:
            return bounds[i] if i < len(bounds) else float("inf")
    return float("nan")


def ringkv_caught_up(primary, replica):
    p, r = ringkv_stats(primary)["replication"], ringkv_stats(replica)["replication"]
    head = {f["worker"]: int(f["lsn"]) for f in p["flows"]}
    return all(f["state"] == "stable" and int(f["applied_lsn"]) == head[f["worker"]]
               for f in r["flows"])


def redis_info(port, section="replication"):
    out = subprocess.run(["redis-cli", "-p", str(port), "info", section], capture_output=True,
                         text=True, check=True).stdout
    return dict(line.strip().split(":", 1) for line in out.splitlines() if ":" in line)


def redis_keys(port):
    return int(subprocess.run(["redis-cli", "-p", str(port), "dbsize"], capture_output=True,
                              text=True, check=True).stdout)


def wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise RuntimeError(f"not so within {timeout} s: {what}")


def put_ringkv(binary, with_replica, sync=False, data_dir=False):
    proc, addr = start_ringkv(log("ringkv"),
                              ["--threads=1"] + (["--min-replicas=1"] if sync else []), binary)
    replica = None
    work = tempfile.mkdtemp(prefix="ringkv-repl-bench-") if data_dir else None
    try:
        if with_replica:
            replica, raddr = start_ringkv(
                log("ringkv-replica"), ["--threads=1", f"--replica-of={addr}"]
                + ([f"--data-dir={work}/data"] if data_dir else []), binary)
            wait(lambda: ringkv_caught_up(addr, raddr), 60, "the replica's full sync")
        # The pre-load (a --min-replicas primary takes it once its replica follows).
        subprocess.run([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                        "--ops=1", "--concurrency=1", "--progress=false"],
                       capture_output=True, check=True)
        if with_replica:
            wait(lambda: ringkv_caught_up(addr, raddr), 60, "the replica's catching up")
        replica_cpu0 = cpu_of(replica.pid) if replica else 0
        delays0 = delays(raddr) if replica else None
        path = os.path.join(OUT, "loadgen.json")
        _, cpu = run_client([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                             f"--duration={SECONDS}", "--progress=false", "--preload=false",
                             f"--json={path}", "--mode=unary", "--ratio=0:1",
                             "--connections=50", "--concurrency=50"], proc.pid, SECONDS * 10 + 60)
        r = json.load(open(path))
        result = {"ops_per_s": r["ops_per_s"], "ops": r["ops"], **cpu.per_op(r["ops"])}
        if replica:
            result["replica_us_per_op"] = (cpu_of(replica.pid) - replica_cpu0) * 1e6 / r["ops"]
            bounds, delays1 = delays(raddr)
            result["delay_p50_ms"] = delay_percentile(bounds, delays0[1], delays1, 0.5)
            result["delay_p99_ms"] = delay_percentile(bounds, delays0[1], delays1, 0.99)
            wait(lambda: ringkv_caught_up(addr, raddr), 60, "the replica catching up")
        return result
    finally:
        if replica:
            stop(replica)
        stop(proc)
        if work:
            shutil.rmtree(work, ignore_errors=True)


def put_redis(with_replica, sync=False, aof=False):
    proc, port = redis("redis")
    replica = None
    try:
        subprocess.run(["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(KEYS), "-r",
                        str(KEYS), "-d", "32", "-P", "64", "-c", "50", "-q"],
                       capture_output=True, check=True)
        if with_replica:
            replica, rport = redis("redis-replica", ["--replicaof", "127.0.0.1", str(port)]
                                   + (["--appendonly", "yes", "--appendfsync", "everysec"]
                                      if aof else []))
            wait(lambda: redis_info(rport).get("master_link_status") == "up"
                 and redis_info(rport).get("master_sync_in_progress") == "0", 60,
                 "the Redis replica's sync")
        if sync:
            replica_cpu0 = cpu_of(replica.pid)
            out, cpu = run_client([REDIS_WAIT, str(port), "50", str(SECONDS), str(KEYS), "32",
                                   "1"], proc.pid, SECONDS * 10 + 60)
            r = json.loads(out)
            assert r["short"] == 0, f"WAIT 1 0 answered fewer than 1 replica: {r}"
            return {"ops_per_s": r["ops_per_s"], "ops": r["ops"], **cpu.per_op(r["ops"]),
                    "replica_us_per_op": (cpu_of(replica.pid) - replica_cpu0) * 1e6 / r["ops"]}
        base = ["redis-benchmark", "-p", str(port), "-r", str(KEYS), "-d", "32", "--csv",
                "-t", "set", "-c", "50", "-P", "1"]
        out, _ = run_client(base + ["-n", "20000"], proc.pid, 120)
        n = max(20000, int(float(out.strip().splitlines()[-1].split('","')[1]) * SECONDS))
        replica_cpu0 = cpu_of(replica.pid) if replica else 0
        out, cpu = run_client(base + ["-n", str(n)], proc.pid, SECONDS * 10 + 60)
        row = out.strip().splitlines()[-1].strip('"').split('","')
        result = {"ops_per_s": float(row[1]), "ops": n, **cpu.per_op(n)}
        if replica:
            result["replica_us_per_op"] = (cpu_of(replica.pid) - replica_cpu0) * 1e6 / n
        return result
    finally:
        if replica:
            stop_redis(replica)
        stop_redis(proc)


def replica_ports(pid, port):
    """The local ports of process pid's connections to 127.0.0.1:port."""
    out = subprocess.run(["ss", "-tnpH", "state", "established", f"( dport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    return [line.split()[2].rsplit(":", 1)[1] for line in out.splitlines()
            if f"pid={pid}," in line]


def resync_ringkv():
    proc, addr = start_ringkv(log("ringkv"), ["--threads=1", "--repl-backlog=128MiB"])
    replica = load = None
    try:
        replica, raddr = start_ringkv(log("ringkv-replica"),
                                      ["--threads=1", f"--replica-of={addr}"])
        wait(lambda: ringkv_caught_up(addr, raddr), 60, "the replica's full sync")
        port = addr.rsplit(":", 1)[1]
        load = subprocess.Popen([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                                 "--duration=12", "--progress=false", "--preload=false",
                                 "--mode=unary", "--ratio=0:1", "--connections=50",
                                 "--concurrency=50"], stdout=subprocess.DEVNULL)
        time.sleep(2)
        before = int(ringkv_stats(raddr)["replication"]["flows"][0]["applied_lsn"])
        os.kill(replica.pid, signal.SIGSTOP)
        for local in replica_ports(replica.pid, port):
            subprocess.run(["ss", "-K", "src", "127.0.0.1", "sport", "=", f":{local}"],
                           capture_output=True, check=True)
        time.sleep(5)
        head = int(ringkv_stats(addr)["replication"]["flows"][0]["lsn"])
        resumed = time.monotonic()
        os.kill(replica.pid, signal.SIGCONT)
        while True:
            r = ringkv_stats(raddr)["replication"]["flows"][0]
            if r["state"] == "stable" and int(r["applied_lsn"]) >= head:
                seconds = time.monotonic() - resumed
                break
            if time.monotonic() - resumed > 60:
                raise RuntimeError(f"the replica did not catch up: {r}")
            time.sleep(0.005)
        load.wait(timeout=60)
        return {"seconds": seconds, "missed_records": head - before,
                "full_syncs": int(r["full_syncs"]), "partial_syncs": int(r["partial_syncs"])}
    finally:
        if load is not None and load.poll() is None:
            load.kill()
        if replica:
            os.kill(replica.pid, signal.SIGCONT)
            stop(replica)
        stop(proc)


def children_rss(pid):
    total = 0
    for child in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                text=True).stdout.split():
        try:
            total += rss_bytes(int(child))
        except (FileNotFoundError, ProcessLookupError, TypeError):
            pass
    return total


def sample_until(done, pid, timeout):
    """Polls done() every 20 ms, sampling pid's RSS and its children's: (seconds, peak parent
    RSS, peak children RSS)."""
    start = time.monotonic()
    peak, child_peak = rss_bytes(pid), 0
    while not done():
        if time.monotonic() - start > timeout:
            raise RuntimeError("the full sync did not end")
        peak = max(peak, rss_bytes(pid))
        child_peak = max(child_peak, children_rss(pid))
        time.sleep(0.02)
    return time.monotonic() - start, peak, child_peak


def sync_ringkv(binary="build/server/ringkv-server"):
    proc, addr = start_ringkv(log("ringkv-sync"), ["--threads=1"], binary)
    replica = None
    try:
        subprocess.run([LOADGEN, f"--addr={addr}", f"--keys={SYNC_KEYS}", "--value-size=32",
                        "--ops=1", "--concurrency=1", "--progress=false"],
                       capture_output=True, check=True)
        before = rss_bytes(proc.pid)
        replica, raddr = start_ringkv(log("ringkv-sync-replica"),
                                      ["--threads=1", f"--replica-of={addr}"], binary)
        seconds, peak, _ = sample_until(lambda: ringkv_caught_up(addr, raddr), proc.pid, 600)
        keys = sum(int(s["keys"]) for s in ringkv_stats(raddr)["shards"])
        assert keys == SYNC_KEYS, f"the replica holds {keys} keys"
        return {"seconds": seconds, "rss_before": before, "rss_growth": peak - before,
                "child_peak": 0}
    finally:
        if replica:
            stop(replica)
        stop(proc)


def sync_redis():
    proc, port = redis("redis-sync", ["--repl-diskless-sync", "yes",
                                      "--repl-diskless-sync-delay", "0",
                                      "--enable-debug-command", "local"])
    replica = None
    try:
        subprocess.run(["redis-cli", "-p", str(port), "debug", "populate", str(SYNC_KEYS),
                        "key", "32"], capture_output=True, check=True)
        assert redis_keys(port) == SYNC_KEYS, "DEBUG POPULATE did not fill Redis"
        before = rss_bytes(proc.pid)
        replica, rport = redis("redis-sync-replica", ["--replicaof", "127.0.0.1", str(port)])

        def done():
            info = redis_info(rport)
            return (info.get("master_link_status") == "up"
                    and info.get("master_sync_in_progress") == "0"
                    and redis_keys(rport) == SYNC_KEYS)
        seconds, peak, child_peak = sample_until(done, proc.pid, 600)
        return {"seconds": seconds, "rss_before": before, "rss_growth": peak - before,
                "child_peak": child_peak}
    finally:
        if replica:
            stop_redis(replica)
        stop_redis(proc)


def delay_cell(rs, key):
    """Bucket bounds: "<= N" each run; "-" where there is no replica to measure."""
    values = [r[key] for r in rs if key in r]
    return " / ".join(f"<= {v:g}" for v in values) if values else "-"


def main():
    os.makedirs(OUT, exist_ok=True)
    rows = {name: [] for name in ("ringkv", "ringkv + replica", "ringkv + replica, min 1",
                                  "ringkv + replica with --data-dir", "ringkv baseline",
                                  "ringkv baseline + replica", "ringkv baseline + replica, min 1",
                                  "redis", "redis + replica", "redis + replica, WAIT 1 0",
                                  "redis + replica with AOF everysec")}
    wanted = set(os.environ["ROWS"].split(";")) if os.environ.get("ROWS") else set(rows)
    syncs = {"ringkv": [], "ringkv baseline": [], "redis": []}
    resyncs = []
    for run in range(RUNS):
        for name, fn in () if "put" not in PARTS else (("ringkv", lambda: put_ringkv("build/server/ringkv-server", False)),
                         ("ringkv + replica", lambda: put_ringkv("build/server/ringkv-server",
                                                                 True)),
                         ("ringkv + replica, min 1",
                          lambda: put_ringkv("build/server/ringkv-server", True, sync=True)),
                         ("ringkv + replica with --data-dir",
                          lambda: put_ringkv("build/server/ringkv-server", True, data_dir=True)),
                         ("ringkv baseline", (lambda: put_ringkv(BASELINE, False))
                          if BASELINE else None),
                         ("ringkv baseline + replica", (lambda: put_ringkv(BASELINE, True))
                          if BASELINE else None),
                         ("ringkv baseline + replica, min 1",
                          (lambda: put_ringkv(BASELINE, True, sync=True)) if BASELINE else None),
                         ("redis", lambda: put_redis(False)),
                         ("redis + replica", lambda: put_redis(True)),
                         ("redis + replica, WAIT 1 0", lambda: put_redis(True, sync=True)),
                         ("redis + replica with AOF everysec",
                          lambda: put_redis(True, aof=True))):
            if fn is None or name not in wanted:
                continue
            r = fn()
            rows[name].append(r)
            print(f"run {run + 1} {name}: {r}", file=sys.stderr)
        if "resync" in PARTS:
            resyncs.append(resync_ringkv())
            print(f"run {run + 1} resync: {resyncs[-1]}", file=sys.stderr)
        for name, fn in (("ringkv", sync_ringkv),
                         ("ringkv baseline", (lambda: sync_ringkv(BASELINE)) if BASELINE else None),
                         ("redis", sync_redis)) if "sync" in PARTS else ():
            if fn is None:
                continue
            r = fn()
            syncs[name].append(r)
            print(f"run {run + 1} sync {name}: {r}", file=sys.stderr)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump({"put": rows, "sync": syncs, "resync": resyncs}, f)
    print(f"{machine()}; median (min .. max) of {RUNS} runs\n")
    if "put" in PARTS:
        print("| server | PUT ops/s | primary CPU us/op | replica CPU us/op | client CPU us/op "
              "| replica delay p50, ms | p99, ms |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, rs in rows.items():
        if not rs:
            continue
        print(f"| {name} | {cell([r['ops_per_s'] for r in rs])} "
              f"| {cell([r['server_us_per_op'] for r in rs], '{:.1f}')} "
              f"| {cell([r.get('replica_us_per_op', 0) for r in rs], '{:.1f}')} "
              f"| {cell([r['client_us_per_op'] for r in rs], '{:.1f}')} "
              f"| {delay_cell(rs, 'delay_p50_ms')} | {delay_cell(rs, 'delay_p99_ms')} |")
    if "sync" in PARTS:
        print(f"\nFull sync of {SYNC_KEYS:,} keys:\n")
        print("| server | seconds | primary RSS before, MB | primary RSS growth, MB "
              "| fork child's peak RSS, MB |")
        print("| --- | --- | --- | --- | --- |")
    for name, rs in syncs.items():
        if not rs:
            continue
        print(f"| {name} | {cell([r['seconds'] for r in rs], '{:.2f}')} "
              f"| {cell([r['rss_before'] / 1e6 for r in rs])} "
              f"| {cell([r['rss_growth'] / 1e6 for r in rs], '{:.1f}')} "
              f"| {cell([r['child_peak'] / 1e6 for r in rs])} |")

    if resyncs:
        print("\nPartial resync after 5 s away (SIGSTOP, connections cut), under PUT load:\n")
        print("| catch-up seconds | records it missed | full syncs (the first included) | "
              "partial syncs |")
        print("| --- | --- | --- | --- |")
        print(f"| {cell([r['seconds'] for r in resyncs], '{:.3f}')} "
              f"| {cell([r['missed_records'] for r in resyncs])} "
              f"| {cell([r['full_syncs'] for r in resyncs])} "
              f"| {cell([r['partial_syncs'] for r in resyncs])} |")


if __name__ == "__main__":
    main()
