#!/usr/bin/python3
"""Charts of `ringkv-bench queue --json` results, in the report's form (seed 000): total time
against round (1 producer) or against producer count, one line per backend/form, median of the
runs. Runs under Debian's /usr/bin/python3 with python3-matplotlib (scripts/setup.sh installs it).

Usage: bench/queue_chart.py RESULTS.json OUT.png [--title TITLE]
"""
import argparse
import json
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("out")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    with open(args.results) as f:
        runs = json.load(f)["runs"]
    by_rounds = len({r["producers"] for r in runs}) == 1
    x_key = "round" if by_rounds else "producers"
    series = {}
    for r in runs:
        series.setdefault(f'{r["backend"]}/{r["form"]}', {}).setdefault(r[x_key], []).append(
            r["seconds"])
    fig, ax = plt.subplots(figsize=(9, 5.5))
    # One colour per backend, solid for callable tasks and dashed for visitor tasks.
    backends = list(dict.fromkeys(name.split("/")[0] for name in series))
    colours = plt.get_cmap("tab10")
    for name, points in series.items():
        xs = sorted(points)
        ax.plot(xs, [statistics.median(points[x]) for x in xs], marker="o",
                color=colours(backends.index(name.split("/")[0]) % 10),
                linestyle="--" if name.endswith("/visitor") else "-", label=name)
    ax.set_xlabel("round (1 producer)" if by_rounds else "producer threads")
    ax.set_ylabel("total seconds (median)")
    ax.set_yscale("log")
    ax.set_title(args.title or ("time per round" if by_rounds else "time against producers"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
