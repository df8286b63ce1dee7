#!/usr/bin/env python3
"""Runs `ringkv-bench --all` several times per thread count and prints BENCHMARKS.md tables:
median (min .. max) of PUT and GET Mops and peak RSS per method.

Usage: scripts/bench_tables.py [--bench build/bench/ringkv-bench] [--threads 1 2] [--runs 3]
                               [--ops 25000000] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="build/bench/ringkv-bench")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ops", type=int, default=25_000_000)
    ap.add_argument("--out", default="bench-results")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for threads in args.threads:
        runs = {}
        for i in range(args.runs):
            path = os.path.join(args.out, f"all-t{threads}-run{i}.json")
            print(f"run {i + 1}/{args.runs}, {threads} thread(s)", file=sys.stderr, flush=True)
            subprocess.run([args.bench, "--all", f"--threads={threads}", f"--ops={args.ops}",
                            "--progress=false", f"--json={path}"], check=True,
                           stdout=subprocess.DEVNULL)
            with open(path) as f:
                for run in json.load(f)["runs"]:
                    runs.setdefault(run["method"], []).append(run)

        def cell(values, fmt="{:.2f}"):
            return (fmt.format(statistics.median(values)) + " (" + fmt.format(min(values)) +
                    " .. " + fmt.format(max(values)) + ")")

        print(f"\n{threads} thread(s), {args.ops:,} ops per thread, median (min .. max) of "
              f"{args.runs} runs\n")
        print("| method | PUT Mops | GET Mops | peak RSS GB |")
        print("|---|---|---|---|")
        for method, rs in runs.items():
            print(f"| {method} | {cell([r['put']['mops'] for r in rs])} | "
                  f"{cell([r['get']['mops'] for r in rs])} | "
                  f"{cell([r['peak_rss_bytes'] / 1e9 for r in rs])} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
