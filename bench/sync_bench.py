#!/usr/bin/python3
"""What one fdatasync costs on this disk, appending against writing into zeros (issue 25):

  appending  each of N 300-byte records is written at the end of a growing file, then
             fdatasync'd: the sync also commits the file's new size (on ext4, a journal commit);
  zeroed     the same into a file whose zeros were written and synced first: the sync writes
             the record's block only (what a --fsync=always log does, persist/log_writer.h).

Median, p10 and p90 of the write + fdatasync time, per variant, alternating, RUNS times. The file
goes in bench-results/ (the data directory's disk in the other benches) and is removed.

Usage: bench/sync_bench.py [RUNS=3] [N=1000]   (repository root)
"""
import os
import statistics
import sys
import time

from benchlib import machine

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
SIZE = 300
PATH = os.path.abspath("bench-results/sync_bench.tmp")


def run(zeroed):
    fd = os.open(PATH, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if zeroed:
            os.pwrite(fd, bytes(N * SIZE + (1 << 20)), 0)
            os.fsync(fd)
        record = b"r" * SIZE
        times = []
        for i in range(N):
            t0 = time.perf_counter()
            os.pwrite(fd, record, i * SIZE)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.unlink(PATH)
    times.sort()
    return statistics.median(times), times[len(times) // 10], times[len(times) * 9 // 10]


def main():
    os.makedirs(os.path.dirname(PATH), exist_ok=True)
    print(machine())
    rows = {"appending": [], "zeroed": []}
    for _ in range(RUNS):
        for name in rows:
            rows[name].append(run(name == "zeroed"))
    print(f"\n| variant | write + fdatasync, us: median of {RUNS} runs' medians (min .. max) "
          "| p10 | p90 |")
    print("|---|---|---|---|")
    for name, rs in rows.items():
        med = [r[0] * 1e6 for r in rs]
        print(f"| {name} | {statistics.median(med):.0f} ({min(med):.0f} .. {max(med):.0f}) | "
              f"{statistics.median(r[1] * 1e6 for r in rs):.0f} | "
              f"{statistics.median(r[2] * 1e6 for r in rs):.0f} |")


if __name__ == "__main__":
    main()
