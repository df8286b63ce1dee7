#!/usr/bin/python3
"""The data model's costs (issue 11), each against its own baseline in the same run:

  churn     every PUT gives its key a 1 s TTL, writes at full speed (MultiPut, 50 connections x
            1 call, batches of 16, 32-byte values, keys uniform over 100M): the data memory and
            the resident size over the run, and ops/s beside the same run without TTLs;
  lru       --max-memory=128MiB --eviction=allkeys-lru against no limit: GET:PUT 1:1 over 4M
            keys (about 4 times what fits), the same shape, after a 10 s warm-up;
  hit rate  a cache of Zipfian reads (s = 0.99 over 1M keys, 32-byte values): each GET that
            misses is followed by a PUT of its key, as a cache fills. ringkv (allkeys-lru) and
            Redis (maxmemory-policy allkeys-lru) with the same 32 MiB limit, driven through the
            same key trace by the same Python client (MultiGet/MultiPut against MGET/MSET,
            batches of 100); 1M operations warm the cache, the next 2M are counted.

Every timed row gives the server's CPU per operation (user + system from /proc over the run,
divided by operations) and the load generator's own. Each server is fresh for each run, alone
on a free loopback port, and stopped at the end. Prints markdown on stdout; raw results in
bench-results/data-model/.

Usage: bench/data_model_bench.py [RUNS=3] [SECONDS=60] [PARTS=churn,lru,hitrate]
(repository root, after scripts/setup.sh; the hit-rate part re-runs itself under .tools/venv
for grpcio)
"""
import bisect
import itertools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchlib import (cell, machine, rss_bytes, run_client, run_under_venv, start_redis,
                      start_ringkv, stop)

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 60
PARTS = sys.argv[3].split(",") if len(sys.argv) > 3 else ["churn", "lru", "hitrate"]
OUT = "bench-results/data-model"
LOADGEN = "build/bench/ringkv-loadgen"
CLI = "build/client/ringkv"
MIB = 1 << 20


def data_memory(addr):
    """The shards' data memory and key count, from Stats."""
    out = subprocess.run([CLI, f"--addr={addr}", "--json", "stats"], capture_output=True,
                         text=True, check=True, timeout=10).stdout
    shards = json.loads(out)["shards"]
    return (sum(int(s.get("memory_bytes", 0)) for s in shards),
            sum(int(s.get("keys", 0)) for s in shards),
            sum(int(s.get("evicted", 0)) for s in shards))


def loadgen_run(addr, proc, args, seconds, sample=None):
    """One loadgen run against a running server: its JSON results with CPU per op added."""
    json_path = os.path.join(OUT, "tmp.json")
    _, cpu = run_client([LOADGEN, f"--addr={addr}", "--progress=false", "--preload=false",
                         f"--duration={seconds}", f"--json={json_path}", *args],
                        proc.pid, seconds * 3 + 60, during=sample)
    r = json.load(open(json_path))
    r.update(cpu.per_op(max(1, r["ops"])))
    return r


# ---- churn ----------------------------------------------------------------------------------

CHURN_SHAPE = ["--mode=multi", "--batch=16", "--connections=50", "--concurrency=50",
               "--ratio=0:1", "--value-size=32", "--keys=100000000"]


def churn_run(ttl_ms):
    proc, addr = start_ringkv(os.path.join(OUT, "churn.log"))
    samples = []  # (seconds, data bytes, keys, RSS bytes)
    t0 = time.monotonic()

    def sample():
        data, keys, _ = data_memory(addr)
        samples.append((time.monotonic() - t0, data, keys, rss_bytes(proc.pid)))

    try:
        r = loadgen_run(addr, proc, CHURN_SHAPE + [f"--ttl-ms={ttl_ms}"], SECONDS, sample)
        sample()
    finally:
        stop(proc)
    assert proc.returncode == 0, f"ringkv-server exited {proc.returncode}"

    def at(fraction):  # The sample nearest a point of the run.
        return min(samples, key=lambda s: abs(s[0] - fraction * SECONDS))
    r.update({"ttl_ms": ttl_ms, "samples": samples,
              "data_10s": at(10 / SECONDS)[1], "data_end": samples[-1][1],
              "data_max": max(s[1] for s in samples),
              "rss_10s": at(10 / SECONDS)[3], "rss_end": samples[-1][3],
              "rss_max": max(s[3] for s in samples), "keys_end": samples[-1][2]})
    return r


def interleaved(name, variants, run_one):
    """RUNS runs of each variant, alternating, so drift hits all alike: {variant: [result]}."""
    rows = {v: [] for v in variants}
    for _ in range(RUNS):
        for v in variants:
            rows[v].append(run_one(v))
            record(name, rows[v][-1])
    return rows


def churn():
    rows = interleaved("churn", (1000, 0), churn_run)
    print(f"\n### Churn: every key with a 1 s TTL, writes at full speed ({SECONDS} s runs, "
          f"median (min .. max) of {RUNS})\n")
    print("| run | ops/s | server CPU us/op | loadgen CPU us/op | keys at the end | data MiB at "
          "10 s / at the end / max | RSS MiB at 10 s / at the end / max |")
    print("|---|---|---|---|---|---|---|")
    for ttl_ms, label in ((1000, "TTL 1 s"), (0, "no TTL")):
        rs = rows[ttl_ms]
        mib = lambda key: cell([r[key] / MIB for r in rs], "{:,.1f}")  # noqa: E731
        print(f"| {label} | {cell([r['ops_per_s'] for r in rs])} | "
              f"{cell([r['server_us_per_op'] for r in rs], '{:.2f}')} | "
              f"{cell([r['client_us_per_op'] for r in rs], '{:.2f}')} | "
              f"{cell([r['keys_end'] for r in rs])} | {mib('data_10s')} / {mib('data_end')} / "
              f"{mib('data_max')} | {mib('rss_10s')} / {mib('rss_end')} / {mib('rss_max')} |")
    ratio = statistics.median(r["ops_per_s"] for r in rows[1000]) / \
        statistics.median(r["ops_per_s"] for r in rows[0])
    print(f"\nWith TTLs / without, ops/s (medians): {ratio:.2f}")


# ---- lru --------------------------------------------------------------------------------------

LRU_LIMIT = "128MiB"
LRU_SHAPE = ["--mode=multi", "--batch=16", "--connections=50", "--concurrency=50",
             "--ratio=1:1", "--value-size=32", "--keys=4000000"]


def lru_run(limited):
    flags = [f"--max-memory={LRU_LIMIT}", "--eviction=allkeys-lru"] if limited else []
    proc, addr = start_ringkv(os.path.join(OUT, "lru.log"), flags)
    try:
        loadgen_run(addr, proc, LRU_SHAPE, 10)  # Warm-up: fill to the limit.
        _, _, evicted0 = data_memory(addr)
        r = loadgen_run(addr, proc, LRU_SHAPE, min(SECONDS, 20))
        data, keys, evicted = data_memory(addr)
        r.update({"limited": limited, "data": data, "keys": keys, "evicted": evicted - evicted0,
                  "rss": rss_bytes(proc.pid), "hit_rate": r["get_hits"] / max(1, r["gets"])})
    finally:
        stop(proc)
    assert proc.returncode == 0, f"ringkv-server exited {proc.returncode}"
    return r


def lru():
    rows = interleaved("lru", (True, False), lru_run)
    print(f"\n### --max-memory={LRU_LIMIT} with allkeys-lru against no limit (GET:PUT 1:1, "
          f"4M keys, median (min .. max) of {RUNS})\n")
    print("| server | ops/s | server CPU us/op | loadgen CPU us/op | GET hit rate | keys | data "
          "MiB | RSS MiB | evicted per s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for limited, label in ((True, f"--max-memory={LRU_LIMIT}"), (False, "no limit")):
        rs = rows[limited]
        print(f"| {label} | {cell([r['ops_per_s'] for r in rs])} | "
              f"{cell([r['server_us_per_op'] for r in rs], '{:.2f}')} | "
              f"{cell([r['client_us_per_op'] for r in rs], '{:.2f}')} | "
              f"{cell([100 * r['hit_rate'] for r in rs], '{:.1f}%')} | "
              f"{cell([r['keys'] for r in rs])} | {cell([r['data'] / MIB for r in rs], '{:.1f}')}"
              f" | {cell([r['rss'] / MIB for r in rs], '{:.1f}')} | "
              f"{cell([r['evicted'] / r['seconds'] for r in rs])} |")
    ratio = statistics.median(r["ops_per_s"] for r in rows[True]) / \
        statistics.median(r["ops_per_s"] for r in rows[False])
    print(f"\nLimited / unlimited, ops/s (medians): {ratio:.2f}")


# ---- hit rate ---------------------------------------------------------------------------------

HIT_KEYS = 1_000_000
HIT_LIMIT = 32 * MIB
HIT_WARM, HIT_COUNTED, HIT_BATCH = 1_000_000, 2_000_000, 100
VALUE = b"v" * 32


def zipf_trace(seed):
    """HIT_WARM + HIT_COUNTED key ids, Zipfian (s = 0.99) over HIT_KEYS, the ranks shuffled."""
    rng = random.Random(seed)
    weights = itertools.accumulate(1 / (k ** 0.99) for k in range(1, HIT_KEYS + 1))
    cdf = list(weights)
    ids = list(range(HIT_KEYS))
    rng.shuffle(ids)
    total = cdf[-1]
    return [ids[bisect.bisect_left(cdf, rng.random() * total)]
            for _ in range(HIT_WARM + HIT_COUNTED)]


def key_of(i):
    return b"key:%012d" % i


class Resp:
    """Just enough RESP for MGET and MSET over one socket."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = self.sock.makefile("rb")

    def command(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.reply()

    def reply(self):
        line = self.buf.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.buf.read(n + 2)
            return data[:-2]
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")


def cache_pass(trace, get_many, put_many):
    """Runs the trace as a cache: batches of GETs, then a PUT of each key that missed. Returns
    (hits, gets) over the counted part."""
    hits = gets = 0
    for start in range(0, len(trace), HIT_BATCH):
        keys = [key_of(i) for i in trace[start:start + HIT_BATCH]]
        found = get_many(keys)
        missed = list(dict.fromkeys(k for k, f in zip(keys, found) if not f))
        if missed:
            put_many(missed)
        if start >= HIT_WARM:
            gets += len(keys)
            hits += sum(1 for f in found if f)
    return hits, gets


def hit_rate_redis(trace):
    proc, port = start_redis(os.path.abspath(os.path.join(OUT, "redis.log")),
                             ["--maxmemory", str(HIT_LIMIT), "--maxmemory-policy", "allkeys-lru"])
    try:
        r = Resp(port)
        t0 = time.monotonic()
        hits, gets = cache_pass(
            trace, lambda keys: [v is not None for v in r.command(b"MGET", *keys)],
            lambda keys: r.command(b"MSET", *itertools.chain.from_iterable((k, VALUE)
                                                                          for k in keys)))
        seconds = time.monotonic() - t0
        info = r.command(b"INFO", b"all").decode()
        stats = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        result = {"hits": hits, "gets": gets, "seconds": seconds,
                  "keys": int(r.command(b"DBSIZE")), "evicted": int(stats["evicted_keys"]),
                  "used_memory": int(stats["used_memory"]), "rss": rss_bytes(proc.pid)}
    finally:
        stop(proc)
    return result


def hit_rate_ringkv(trace, pb, stubs):
    import grpc
    proc, addr = start_ringkv(os.path.join(OUT, "hitrate.log"),
                              [f"--max-memory={HIT_LIMIT}", "--eviction=allkeys-lru"])
    try:
        with grpc.insecure_channel(addr) as channel:
            kv = stubs.KVStub(channel)

            def get_many(keys):
                return [r.code == 0 for r in kv.MultiGet(pb.MultiGetRequest(keys=keys)).results]

            def put_many(keys):
                items = [pb.KeyValue(key=k, value=VALUE) for k in keys]
                for res in kv.MultiPut(pb.MultiPutRequest(items=items)).results:
                    assert res.code == 0, res
            t0 = time.monotonic()
            hits, gets = cache_pass(trace, get_many, put_many)
            seconds = time.monotonic() - t0
        data, keys, evicted = data_memory(addr)
        result = {"hits": hits, "gets": gets, "seconds": seconds, "keys": keys,
                  "evicted": evicted, "used_memory": data, "rss": rss_bytes(proc.pid)}
    finally:
        stop(proc)
    assert proc.returncode == 0, f"ringkv-server exited {proc.returncode}"
    return result


def hit_rate():
    from grpc_tools import protoc
    gen = tempfile.mkdtemp(prefix="ringkv-pb-")
    assert protoc.main(["protoc", "-Iproto", f"--python_out={gen}", f"--grpc_python_out={gen}",
                        "proto/ringkv/v1/kv.proto"]) == 0
    sys.path.insert(0, gen)
    from ringkv.v1 import kv_pb2 as pb
    from ringkv.v1 import kv_pb2_grpc as stubs
    rows = {"Redis": [], "ringkv": []}
    for run in range(RUNS):
        trace = zipf_trace(seed=run)  # One trace per run, the same for both servers.
        rows["Redis"].append(hit_rate_redis(trace))
        record("hitrate-redis", rows["Redis"][-1])
        rows["ringkv"].append(hit_rate_ringkv(trace, pb, stubs))
        record("hitrate-ringkv", rows["ringkv"][-1])
    print(f"\n### Cache hit rate, Zipfian reads (s = 0.99, 1M keys, 32-byte values), allkeys-lru "
          f"at {HIT_LIMIT // MIB} MiB (median (min .. max) of {RUNS} traces)\n")
    print("| server | GET hit rate | keys held | memory the limit counts, MiB | RSS MiB | "
          "evicted | client ops/s (Python, not a speed test) |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in rows.items():
        print(f"| {name} | {cell([100 * r['hits'] / r['gets'] for r in rs], '{:.1f}%')} | "
              f"{cell([r['keys'] for r in rs])} | "
              f"{cell([r['used_memory'] / MIB for r in rs], '{:.1f}')} | "
              f"{cell([r['rss'] / MIB for r in rs], '{:.1f}')} | "
              f"{cell([r['evicted'] for r in rs])} | "
              f"{cell([(HIT_WARM + HIT_COUNTED) / r['seconds'] for r in rs])} |")


def record(name, result):
    with open(os.path.join(OUT, name + ".jsonl"), "a") as f:
        f.write(json.dumps(result) + "\n")


def main():
    if "hitrate" in PARTS:
        run_under_venv()
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".jsonl"):
            os.remove(os.path.join(OUT, f))
    print(f"{machine()}; ringkv-server with its defaults otherwise")
    if "churn" in PARTS:
        churn()
    if "lru" in PARTS:
        lru()
    if "hitrate" in PARTS:
        hit_rate()


if __name__ == "__main__":
    main()
