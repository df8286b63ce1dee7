#!/usr/bin/env python3
"""Two ringkv-server binaries, like for like: does a change leave the service's speed alone?

Usage: [SERVER_FLAGS=...] [CURRENT_FLAGS=...] [BASE_FLAGS=...] [BASE_LOADGEN=...]
       bench/ab_server.py BASE_SERVER
       [ROUNDS] [SECONDS] [SHAPE...]
(after scripts/setup.sh)

A SHAPE argument keeps only the shapes whose name contains it ("stream", "grpc").

Runs build/server/ringkv-server ("current") and BASE_SERVER ("base", e.g. built from main
before the change) in interleaved rounds, one worker each, with the same ringkv-loadgen
(build/bench/) in the same request shapes, and prints per shape and binary the median
(min .. max) of ops/s and of the server's CPU per call (user+system from /proc over the run,
divided by the calls), the loadgen's own CPU per call, and current/base. BASE_LOADGEN: the base
side's ringkv-loadgen instead (a change to the client: BASE_LOADGEN=/tmp/old-loadgen
bench/ab_server.py build/server/ringkv-server runs one server with two clients).
"""
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

# SERVER_FLAGS="--spin-us=0": flags for both servers in every shape (with spin, a server that
# waits for its client counts the spin in its CPU per call). CURRENT_FLAGS and BASE_FLAGS: for
# one of them only (the same binary twice: CURRENT_FLAGS=--h2=ringkv bench/ab_server.py
# build/server/ringkv-server 3 5 "h2 " compares two ways of running it; the grpc shape refuses
# --h2, hence the filter).
EXTRA_FLAGS = os.environ.get("SERVER_FLAGS", "").split()
LOADGENS = {"current": "build/bench/ringkv-loadgen",
            "base": os.environ.get("BASE_LOADGEN", "build/bench/ringkv-loadgen")}
SIDE_FLAGS = {"current": os.environ.get("CURRENT_FLAGS", "").split(),
              "base": os.environ.get("BASE_FLAGS", "").split()}
LARGE = ["--keys=1000", "--value-size=81920"]  # After --keys=100000: the last one counts.
SHAPES = {  # name: ringkv-server flags, ringkv-loadgen flags
    "h2 unary GET, 50 connections x 1": ([], ["--connections=50", "--concurrency=50"]),
    "h2 unary GET, 1 connection x 50": ([], ["--connections=1", "--concurrency=50"]),
    "h2 unary PUT, 4 connections x 50": ([], ["--connections=4", "--concurrency=200",
                                              "--ratio=0:1"]),
    "h2 stream GET, 1 x 16-op messages": ([], ["--mode=stream", "--batch=16",
                                               "--concurrency=64"]),
    "h2 MultiGet of 16, 50 connections x 1": ([], ["--mode=multi", "--batch=16",
                                                   "--connections=50", "--concurrency=50"]),
    "h2 MultiPut of 16, 50 connections x 1": ([], ["--mode=multi", "--batch=16",
                                                   "--connections=50", "--concurrency=50",
                                                   "--ratio=0:1"]),
    # compare_redis.py's 1M keys: their records and slots are beyond the caches, as there.
    "h2 unary GET of 1M keys, 50 connections x 1": ([], ["--keys=1000000", "--connections=50",
                                                         "--concurrency=50"]),
    "h2 MultiGet of 16 of 1M keys, 50 connections x 1": ([], ["--keys=1000000", "--mode=multi",
                                                              "--batch=16", "--connections=50",
                                                              "--concurrency=50"]),
    "grpc unary GET, 4 connections x 50": (["--transport=grpc"],
                                           ["--connections=4", "--concurrency=200"]),
    "grpc MultiGet of 16, 4 connections x 50": (["--transport=grpc"],
                                                ["--mode=multi", "--batch=16", "--connections=4",
                                                 "--concurrency=200"]),
    "grpc stream GET, 1 x 16-op messages": (["--transport=grpc"],
                                            ["--mode=stream", "--batch=16", "--concurrency=64"]),
    # 80 MB of values, beyond the caches, as the throughput matrix's 80 KB column.
    "h2 unary GET of 80 KB, 10 connections x 1": ([], LARGE + ["--connections=10",
                                                               "--concurrency=10"]),
    "uring unary GET of 80 KB, 10 connections x 1": (["--io=uring"],
                                                     LARGE + ["--connections=10",
                                                              "--concurrency=10"]),
    "h2 unary PUT of 80 KB, 10 connections x 1": ([], LARGE + ["--connections=10",
                                                               "--concurrency=10",
                                                               "--ratio=0:1"]),
    "h2 unary PUT of 80 KB, 100 connections x 1": ([], LARGE + ["--connections=100",
                                                                "--concurrency=100",
                                                                "--ratio=0:1"]),
    "uring unary PUT of 80 KB, 10 connections x 1": (["--io=uring"],
                                                     LARGE + ["--connections=10",
                                                              "--concurrency=10",
                                                              "--ratio=0:1"]),
    "h2 MultiGet of 16 of 80 KB, 10 connections x 1": ([], LARGE + ["--mode=multi", "--batch=16",
                                                                    "--connections=10",
                                                                    "--concurrency=10"]),
}


def run(binary, loadgen, server_flags, client_flags, seconds, workdir):
    """One loadgen run against a fresh server: (ops/s, server us per call, loadgen us per
    call)."""
    log = os.path.join(workdir, "server.log")
    proc, addr = benchlib.start_ringkv(log, ["--threads=1", *EXTRA_FLAGS, *server_flags],
                                       binary=binary)
    try:
        # The keys are loaded first, in a run of their own: the server's CPU for them is not
        # counted against the calls timed.
        cmd = [loadgen, f"--addr={addr}", "--keys=100000", "--progress=false", *client_flags]
        benchlib.run_client(cmd + ["--ops=1"], proc.pid, timeout=120)
        out, cpu = benchlib.run_client(cmd + [f"--duration={seconds}", "--preload=false"],
                                       proc.pid, timeout=seconds + 60)
    finally:
        benchlib.stop(proc)
    # Without the preload a GET miss is no error, but a server that lost keys (a memory limit
    # in SERVER_FLAGS) would then answer faster than it should: every key loaded must be found.
    hits = re.search(r"GET hits (\d+) of (\d+)", out)
    if hits and hits[1] != hits[2]:
        raise RuntimeError(f"{binary}: {hits[0]}: keys loaded were not found")
    ops = float(re.search(r"ops/s (\d+)", out)[1])
    client = float(re.search(r"client CPU ([\d.]+) us/op", out)[1])
    return ops, cpu.per_op(ops * seconds)["server_us_per_op"], client


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    base = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5
    wanted = sys.argv[4:]
    shapes = {name: shape for name, shape in SHAPES.items()
              if not wanted or any(w in name for w in wanted)}
    binaries = {"base": base, "current": "build/server/ringkv-server"}
    results = {(s, b): ([], [], []) for s in shapes for b in binaries}
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(rounds):
            for shape, (server_flags, client_flags) in shapes.items():
                order = list(binaries) if r % 2 == 0 else list(reversed(binaries))
                for name in order:
                    ops, us, client = run(binaries[name], LOADGENS[name],
                                          server_flags + SIDE_FLAGS[name], client_flags, seconds,
                                          workdir)
                    for i, v in enumerate((ops, us, client)):
                        results[(shape, name)][i].append(v)
                    print(f"round {r + 1} {shape:38} {name:8} ops/s {ops:9,.0f}  "
                          f"server {us:5.2f} us/call  loadgen {client:5.2f}", flush=True)
    print(f"\n{benchlib.machine()}; {rounds} rounds of {seconds:g} s, binaries alternating\n")
    print("| shape | binary | ops/s | server µs/call | loadgen µs/call | current/base ops/s |")
    print("|---|---|---|---|---|---|")
    for shape in shapes:
        for name in binaries:
            ops, us, client = results[(shape, name)]
            ratio = ""
            if name == "current":
                # Of the medians the cells show.
                base_ops = results[(shape, "base")][0]
                ratio = f"{statistics.median(ops) / statistics.median(base_ops):.2f}"
            print(f"| {shape} | {name} | {benchlib.cell(ops)} | "
                  f"{benchlib.cell(us, '{:.2f}')} | {benchlib.cell(client, '{:.2f}')} | {ratio} |")


if __name__ == "__main__":
    main()
