#!/usr/bin/python3
"""ringkv-server with 1, 2, 4 ... workers, beside Redis 7 with one thread and with io-threads,
like for like, in one run: the multi-worker table. Meant for a machine with cores to spare (the
16-core device machine); on the 2-core VM only WORKERS=1 fits beside its client.

Each server runs on its own CPUs (taskset: ringkv's --threads=W on CPUs 0 .. W-1; Redis on CPU 0,
or CPUs 0 .. N-1 with --io-threads=N), and the client on CLIENT_CPUS, so the two never share a
core. Every shape is the same for both systems: connections, calls in flight, batch.

  unary GET   256 connections x 1 call   loadgen --mode=unary       redis-benchmark -c 256 -P 1
  unary PUT   256 connections x 1 call   loadgen --ratio=0:1        redis-benchmark -c 256 -P 1 -t set
  batch GET   256 connections x 16 keys  loadgen --mode=multi       redis-benchmark -c 256 -P 16

32-byte values, 1,000,000 keys, pre-loaded. Each cell gives ops/s (keys per second for batches),
the server's CPU per operation (user + system from /proc over the run) and the client's. The
client is ringkv-loadgen --threads=C or redis-benchmark --threads C, C = the client CPUs.

Usage: bench/scaling_bench.py [RUNS=1] [SECONDS=5] [WORKERS=1,2,4,8] [REDIS_IO_THREADS=1,4]
       [CLIENT_CPUS=8-15]   (repository root, after scripts/setup.sh). Prints markdown;
raw results in bench-results/scaling/.
"""
import json
import os
import subprocess
import sys

from benchlib import cell, machine, run_client, start_redis, start_ringkv, stop

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
WORKERS = [int(w) for w in (sys.argv[3] if len(sys.argv) > 3 else "1,2,4,8").split(",")]
REDIS_IO = [int(w) for w in (sys.argv[4] if len(sys.argv) > 4 else "1,4").split(",") if w != "0"]
CLIENT_CPUS = sys.argv[5] if len(sys.argv) > 5 else "8-15"
KEYS = 1_000_000
CONNECTIONS = 256
OUT = "bench-results/scaling"
LOADGEN = "build/bench/ringkv-loadgen"


def cpu_count(spec):
    """CPUs in a taskset list such as 8-15 or 1,3."""
    n = 0
    for part in spec.split(","):
        a, _, b = part.partition("-")
        n += int(b or a) - int(a) + 1
    return n


CLIENT_THREADS = cpu_count(CLIENT_CPUS)
# (label, keys per call, loadgen flags, redis-benchmark flags)
SHAPES = [
    ("unary GET", 1, ["--mode=unary", "--ratio=1:0", f"--concurrency={CONNECTIONS}"],
     ["-t", "get", "-P", "1"]),
    ("unary PUT", 1, ["--mode=unary", "--ratio=0:1", f"--concurrency={CONNECTIONS}"],
     ["-t", "set", "-P", "1"]),
    ("batch GET (16 keys)", 16,
     ["--mode=multi", "--ratio=1:0", "--batch=16", f"--concurrency={CONNECTIONS}"],
     ["-t", "get", "-P", "16"]),
]


def record(name, result):
    with open(os.path.join(OUT, name + ".jsonl"), "a") as f:
        f.write(json.dumps(result) + "\n")


def thread_cpu(pid):
    """CPU seconds of each of a process's threads, by thread id, from /proc."""
    times = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        times[tid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return times


def pin(cpus, cmd):
    return ["taskset", "-c", cpus, *cmd]


def ringkv_part(workers):
    cpus = f"0-{workers - 1}"
    proc, addr = start_ringkv(os.path.join(OUT, f"ringkv-{workers}.log"),
                              [f"--threads={workers}"])
    try:
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(pin(CLIENT_CPUS, [LOADGEN, f"--addr={addr}", f"--keys={KEYS}",
                                         "--value-size=32", "--ops=1", "--concurrency=1",
                                         "--progress=false"]),
                       capture_output=True, check=True)
        for i, (_, _, flags, _) in enumerate(SHAPES):
            json_path = os.path.join(OUT, "tmp.json")
            threads0 = thread_cpu(proc.pid)
            _, cpu = run_client(pin(CLIENT_CPUS, [
                LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                f"--duration={SECONDS}", "--progress=false", "--preload=false",
                f"--threads={CLIENT_THREADS}", f"--connections={CONNECTIONS}",
                f"--json={json_path}", *flags]), proc.pid, SECONDS * 10 + 60)
            r = json.load(open(json_path))
            threads1 = thread_cpu(proc.pid)
            # The busiest threads' CPU over the run: a front end that took more than its share
            # of the connections shows here as one worker busier than the others.
            busy = sorted((threads1[t] - threads0.get(t, 0) for t in threads1), reverse=True)
            ops = r["ops"]  # The loadgen counts keys, one per key of a batch.
            record(f"ringkv-{workers}-{i}", {"ops_per_s": r["ops_per_s"],
                                             "p99_ms": r["p99_ms"], "ops": ops,
                                             "busiest_threads_cpu_s": busy[:workers + 2],
                                             **cpu.per_op(ops)})
    finally:
        stop(proc)
    if proc.returncode != 0:
        raise RuntimeError(f"ringkv-server exited {proc.returncode}")


def redis_part(io_threads):
    cpus = "0" if io_threads == 1 else f"0-{io_threads - 1}"
    flags = [] if io_threads == 1 else ["--io-threads", str(io_threads),
                                        "--io-threads-do-reads", "yes"]
    proc, port = start_redis(os.path.abspath(os.path.join(OUT, f"redis-{io_threads}.log")),
                             flags)
    try:
        subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(pin(CLIENT_CPUS, ["redis-benchmark", "-p", str(port), "-t", "set", "-n",
                                         str(KEYS), "-r", str(KEYS), "-d", "32", "-P", "64",
                                         "-c", "50", "-q"]), capture_output=True, check=True)
        for i, (_, _, _, args) in enumerate(SHAPES):
            base = pin(CLIENT_CPUS, ["redis-benchmark", "-p", str(port), "-r", str(KEYS), "-d",
                                     "32", "--csv", "-c", str(CONNECTIONS), "--threads",
                                     str(CLIENT_THREADS)])
            # A short run sizes the real one to about SECONDS.
            out, *_ = run_client(base + args + ["-n", "100000"], proc.pid, 120)
            rps = float(out.strip().splitlines()[-1].split('","')[1])
            n = max(100000, int(rps * SECONDS))
            out, cpu = run_client(base + args + ["-n", str(n)], proc.pid, SECONDS * 10 + 60)
            row = out.strip().splitlines()[-1].strip('"').split('","')
            # redis-benchmark counts commands; a -P 16 "batch" is 16 GETs, so keys = commands.
            record(f"redis-{io_threads}-{i}", {"ops_per_s": float(row[1]),
                                               "p99_ms": float(row[6]), "ops": n,
                                               **cpu.per_op(n)})
    finally:
        stop(proc)


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if name.endswith(".jsonl"):
            os.remove(os.path.join(OUT, name))
    for _ in range(RUNS):
        for w in WORKERS:
            ringkv_part(w)
        for t in REDIS_IO:
            redis_part(t)

    def rows(name):
        path = os.path.join(OUT, name + ".jsonl")
        return [json.loads(line) for line in open(path)] if os.path.exists(path) else []

    systems = [(f"ringkv, {w} worker{'s' if w > 1 else ''} (CPUs 0-{w - 1})", f"ringkv-{w}")
               for w in WORKERS]
    systems += [(f"Redis, {'1 thread (CPU 0)' if t == 1 else f'io-threads {t} (CPUs 0-{t - 1})'}",
                 f"redis-{t}") for t in REDIS_IO]
    print(f"{machine()}; client on CPUs {CLIENT_CPUS} ({CLIENT_THREADS} threads), "
          f"{CONNECTIONS} connections x 1 call, 32-byte values, {KEYS:,} keys; "
          f"median (min .. max) of {RUNS} run(s) of {SECONDS} s\n")
    for i, (label, keys, _, _) in enumerate(SHAPES):
        unit = "keys/s" if keys > 1 else "ops/s"
        print(f"{label}\n")
        print(f"| server | {unit} | p99 ms | server µs/{unit[:-2]} | client µs/{unit[:-2]} |")
        print("|---|---|---|---|---|")
        for label2, prefix in systems:
            rs = rows(f"{prefix}-{i}")
            print(f"| {label2} | {cell([r['ops_per_s'] for r in rs])} "
                  f"| {cell([r['p99_ms'] for r in rs], '{:.2f}')} "
                  f"| {cell([r['server_us_per_op'] for r in rs], '{:.2f}')} "
                  f"| {cell([r['client_us_per_op'] for r in rs], '{:.2f}')} |")
        print()


if __name__ == "__main__":
    main()
