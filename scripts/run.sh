#!/usr/bin/env bash
# The main job: set up (packages, tools, build), then run the daemon in the foreground on
# 127.0.0.1:50051, keeping its data in data/ under the checkout (restored at the next start).
# Extra arguments go to ringkv-server, e.g. scripts/run.sh --threads=4
# (the lock-vs-ring bench table: build/bench/ringkv-bench --all).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
exec build/server/ringkv-server --data-dir=data "$@"
