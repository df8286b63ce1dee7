#!/usr/bin/env bash
# The main job: set up (packages, build), then the bench table at the machine's core count.
# Extra arguments go to ringkv-bench, e.g. scripts/run.sh --threads=2 --ops=1000000
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
exec build/bench/ringkv-bench --all "$@"
