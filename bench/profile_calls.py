#!/usr/bin/python3
"""Where a call's server CPU goes (issue 25's "profile before and after"), per shape:

  - the server's CPU per call: user + system from /proc over WINDOW seconds in the middle of a
    SECONDS-second loadgen run, divided by the operations its shards ran meanwhile (`ringkv
    stats`), with nothing attached to it;
  - syscalls per call: `perf stat` of the syscalls' tracepoints (SYSCALLS one by one, and
    raw_syscalls:sys_enter for all) on the server over the same window in another run, per
    operation run meanwhile;
  - its top functions by self time: `perf record -F 999` on the server for the same window in a
    third run, `perf report --sort dso,symbol`, and the same samples by object (the kernel, the
    server's own code, nghttp2, the allocator, ...).

Shapes: GET at 50 connections x 1 call, and GET at 1 connection x 50 in flight (ringkv-loadgen,
unary, 32-byte values over KEYS keys, as bench/compare_redis.py). One server (the defaults: one
worker, h2 transport) serves both.

Usage: bench/profile_calls.py [SECONDS=8] [WINDOW=5] [TOP=15] [SERVER=build/server/ringkv-server]
(repository root, after scripts/setup.sh; perf with the syscalls tracepoints, as root).
SERVER_FLAGS="--io=uring" (the environment) adds flags to the server's. NGHTTP2_LIB=DIR runs the
server on the libnghttp2 in DIR (bench/nghttp2_debug_lib.sh builds one whose static functions
have names; Debian's is stripped).
"""
import json
import os
import re
import subprocess
import sys
import time

from benchlib import machine, start_ringkv, stop

SECONDS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
WINDOW = int(sys.argv[2]) if len(sys.argv) > 2 else 5
TOP = int(sys.argv[3]) if len(sys.argv) > 3 else 15
SERVER = sys.argv[4] if len(sys.argv) > 4 else "build/server/ringkv-server"
SERVER_FLAGS = os.environ.get("SERVER_FLAGS", "").split()
NGHTTP2_LIB = os.environ.get("NGHTTP2_LIB")
LOADGEN = "build/bench/ringkv-loadgen"
CLI = "build/client/ringkv"
OUT = os.path.abspath("bench-results/profile")
KEYS = 1_000_000
# Counted one by one (a tracepoint per syscall; `all` counts every one, so that one missing from
# this list shows as the difference).
SYSCALLS = ["recvfrom", "sendto", "read", "write", "readv", "writev", "recvmsg", "sendmsg",
            "epoll_wait", "epoll_pwait", "epoll_ctl", "futex", "clock_gettime", "io_uring_enter",
            "accept4", "pwrite64", "fdatasync", "sched_yield", "nanosleep", "madvise"]
SHAPES = {"GET, 50 connections x 1": ["--connections=50", "--concurrency=50"],
          "GET, 1 connection x 50 in flight": ["--connections=1", "--concurrency=50"]}


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def under_load(addr, flags, measure):
    """Runs the loadgen for SECONDS; measure() runs after a settling second. (its result, ops/s)"""
    json_path = os.path.join(OUT, "tmp.json")
    load = subprocess.Popen([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                             "--mode=unary", "--ratio=1:0", f"--duration={SECONDS}",
                             "--progress=false", "--preload=false", f"--json={json_path}",
                             *flags], stdout=subprocess.DEVNULL)
    time.sleep(1)
    result = measure()
    assert load.wait(timeout=SECONDS * 10 + 60) == 0, "the loadgen failed"
    return result, json.load(open(json_path))["ops_per_s"]


def served(addr):
    """The operations the server's shards have run (`ringkv stats`)."""
    out = subprocess.run([CLI, f"--addr={addr}", "--json", "stats"], check=True,
                         capture_output=True, text=True).stdout
    return sum(int(shard["ops"]) for shard in json.loads(out)["shards"])


def cpu_per_call(addr, pid):
    """The server's CPU seconds per call over WINDOW seconds, with nothing attached to it."""
    calls, cpu = served(addr), cpu_seconds(pid)
    time.sleep(WINDOW)
    return (cpu_seconds(pid) - cpu) / (served(addr) - calls)


def syscalls(addr, pid):
    """Syscalls per call by name (and `all`), over WINDOW seconds under perf stat."""
    path = os.path.join(OUT, "stat.csv")
    events = ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{name}" for name in SYSCALLS]
    before = served(addr)
    subprocess.run(["perf", "stat", "-x,", "-o", path, "-e", ",".join(events),
                    "-p", str(pid), "--", "sleep", str(WINDOW)], check=True)
    calls = served(addr) - before
    counts = {}
    for line in open(path):
        parts = line.strip().split(",")
        if len(parts) > 2 and parts[0].isdigit() and int(parts[0]) > 0:
            name = parts[2].replace("raw_syscalls:sys_enter", "all").replace(
                "syscalls:sys_enter_", "")
            counts[name] = int(parts[0]) / calls
    return counts


def top_functions(pid):
    data = os.path.join(OUT, "perf.data")
    subprocess.run(["perf", "record", "-q", "-F", "999", "-o", data, "-p", str(pid), "--",
                    "sleep", str(WINDOW)], check=True, capture_output=True)
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                             "--sort", "dso,symbol", "--percent-limit", "0.5"],
                            check=True, capture_output=True, text=True).stdout
    rows = []
    for line in report.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*)", line)
        if m:
            rows.append((float(m[1]), m[2], re.sub(r"(\s+-)+\s*$", "", m[3]).strip()))
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                             "--sort", "dso", "--percent-limit", "0.5"],
                            check=True, capture_output=True, text=True).stdout
    objects = [(float(m[1]), m[2]) for m in
               re.finditer(r"^\s+([\d.]+)%\s+(\S+)\s*$", report, re.MULTILINE)]
    return rows[:TOP], objects


def main():
    os.makedirs(OUT, exist_ok=True)
    print(f"{machine()}; {time.strftime('%Y-%m-%d')}; server {SERVER} {' '.join(SERVER_FLAGS)}")
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(NGHTTP2_LIB)) if NGHTTP2_LIB else None
    proc, addr = start_ringkv(os.path.join(OUT, "ringkv.log"), SERVER_FLAGS, SERVER, env)
    try:
        subprocess.run([LOADGEN, f"--addr={addr}", f"--keys={KEYS}", "--value-size=32",
                        "--ops=1", "--concurrency=1", "--progress=false"],
                       capture_output=True, check=True)
        for shape, flags in SHAPES.items():
            cpu, rate = under_load(addr, flags, lambda: cpu_per_call(addr, proc.pid))
            counts, _ = under_load(addr, flags, lambda: syscalls(addr, proc.pid))
            print(f"\n#### {shape}: {rate:,.0f} calls/s, server CPU {cpu * 1e6:.2f} us per call "
                  f"(nothing attached), {counts.get('all', 0):.2f} syscalls per call\n")
            print("| syscall | per call |")
            print("|---|---|")
            for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
                if name != "all" and n >= 0.001:
                    print(f"| {name} | {n:.3f} |")
            (rows, objects), rate = under_load(addr, flags, lambda: top_functions(proc.pid))
            print(f"\nTop functions by the server's self time ({rate:,.0f} calls/s while "
                  "sampled at 999 Hz):\n")
            print("| % of samples | object | function |")
            print("|---|---|---|")
            for pct, dso, sym in rows:
                print(f"| {pct:.1f} | {dso} | `{sym}` |")
            print("\nThe same samples by object:\n")
            print("| % of samples | object |")
            print("|---|---|")
            for pct, dso in objects:
                print(f"| {pct:.1f} | {dso} |")
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
