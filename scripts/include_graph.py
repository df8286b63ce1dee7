#!/usr/bin/env python3
"""Checks the include graph of ringkv's own code; exits 1 and says why if it breaks a rule.

A unit is a header and its .cc (server/shard_loop.h + server/shard_loop.cc). Rules:
  1. No cycle between units, but for ring/ring and its backends (ring/internal/), a factory.
  2. Arrows between rooms (top-level folders) run down only: each room may include the rooms
     listed in ALLOWED, and itself. Tests (*_test.cc) and test support (*/testing/*) may also
     include the client, to talk to a real server.
Prints the rooms' arrows with --map.
"""
import os
import re
import subprocess
import sys
from collections import defaultdict

# What each room may include besides itself: the map of docs/architecture.md.
ALLOWED = {
    "base": set(),
    "proto": set(),
    "ring": {"base"},
    "net": {"base"},
    "shard": {"ring", "base"},
    "persist": {"shard", "ring", "base"},
    "cluster": {"base"},
    "client": {"cluster", "net", "proto", "base"},
    "server": {"cluster", "persist", "shard", "ring", "net", "proto", "base"},
    "bench": {"client", "shard", "ring", "net", "proto", "base"},
}
ALLOWED_CYCLE = "ring/"  # ring/ring.cc makes every backend, and the backends implement Ring.
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def unit_of(path):
    return os.path.splitext(path)[0]


def is_test(path):
    return path.endswith("_test.cc") or "/testing/" in path


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    files = subprocess.run(["git", "-C", root, "ls-files", "*.h", "*.cc"], check=True,
                           capture_output=True, text=True).stdout.split()
    known = set(files)
    edges = defaultdict(set)
    problems = []
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        room = path.split("/")[0]
        for target in INCLUDE.findall(text):
            if target not in known:
                continue  # Generated (ringkv/v1/kv.pb.h, base/version.h) or a system header.
            if unit_of(target) != unit_of(path):
                edges[unit_of(path)].add(unit_of(target))
            to = target.split("/")[0]
            allowed = ALLOWED.get(room, set()) | {room}
            if is_test(path):
                allowed = allowed | {"client"}
            if to not in allowed:
                problems.append(f"{path} includes {target}: {room}/ may not include {to}/")
    # Cycles: strongly connected components of more than one unit (Tarjan's algorithm).
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            sccs.append(scc)

    sys.setrecursionlimit(10000)
    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    for scc in sccs:
        if len(scc) > 1 and not all(u.startswith(ALLOWED_CYCLE) for u in scc):
            problems.append("include cycle between units: " + " -> ".join(sorted(scc)))
    if "--map" in sys.argv:
        rooms = defaultdict(set)
        for u, ws in edges.items():
            for w in ws:
                if u.split("/")[0] != w.split("/")[0] and not is_test(u + ".cc"):
                    rooms[u.split("/")[0]].add(w.split("/")[0])
        for room in sorted(rooms):
            print(f"{room} -> {', '.join(sorted(rooms[room]))}")
    for p in problems:
        print(p)
    print(f"include graph: {len(edges)} units, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
