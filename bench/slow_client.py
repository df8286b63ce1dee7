#!/usr/bin/env python3
"""What a lightly loaded server spends: one grpcio client making one GET at a time, GAP_US
apart, against a ringkv-server with one worker (issue 25: the spin after each call).

Usage: bench/slow_client.py [CALLS=3000] [GAP_US=300,1000] [SERVER_FLAG...]   (from the
repository root, after scripts/setup.sh). With SERVER=PATH (environment), that binary instead
of build/server/ringkv-server.

For each gap: calls/s, the server's CPU (user+system from /proc over the calls) as a share of a
core and per call, and the client's p50 latency. The client waits out each gap polling the
clock, so that its own wake-up does not stretch it.
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server",
                                "testing"))
from benchlib import cpu_seconds, machine, run_under_venv, start_ringkv, stop  # noqa: E402

run_under_venv()
import grpc  # noqa: E402
import python_stubs  # noqa: E402

python_stubs.generate("proto")
from ringkv.v1 import kv_pb2, kv_pb2_grpc  # noqa: E402

CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
GAPS_US = [int(g) for g in (sys.argv[2] if len(sys.argv) > 2 else "300,1000").split(",")]
FLAGS = ["--threads=1", *sys.argv[3:]]
SERVER = os.environ.get("SERVER", "build/server/ringkv-server")


def main():
    print(f"{machine()}; {SERVER} {' '.join(FLAGS)}; {CALLS} calls a gap")
    print()
    print("| gap between calls | calls/s | server CPU, % of a core | server CPU µs/call | "
          "client p50 µs |")
    print("|---|---|---|---|---|")
    log = os.path.join(tempfile.mkdtemp(prefix="ringkv-slow-"), "server.log")
    server, addr = start_ringkv(log, FLAGS, binary=SERVER)
    try:
        with grpc.insecure_channel(addr) as channel:
            stub = kv_pb2_grpc.KVStub(channel)
            stub.Put(kv_pb2.PutRequest(key=b"k", value=b"v" * 32))
            for gap_us in GAPS_US:
                latencies = []
                cpu0, t0 = cpu_seconds(server.pid), time.monotonic()
                for _ in range(CALLS):
                    start = time.perf_counter()
                    stub.Get(kv_pb2.GetRequest(key=b"k"))
                    latencies.append(time.perf_counter() - start)
                    until = time.perf_counter() + gap_us / 1e6
                    while time.perf_counter() < until:
                        pass
                cpu, seconds = cpu_seconds(server.pid) - cpu0, time.monotonic() - t0
                latencies.sort()
                print(f"| {gap_us} µs | {CALLS / seconds:,.0f} | {100 * cpu / seconds:.1f} | "
                      f"{1e6 * cpu / CALLS:.1f} | {1e6 * latencies[len(latencies) // 2]:.0f} |")
    finally:
        stop(server)


if __name__ == "__main__":
    main()
