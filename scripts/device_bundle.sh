#!/usr/bin/env bash
# Packs what bench/device_tables.sh runs into a folder that travels to a machine that has none of
# ringkv's Debian packages (the device machine): the binaries of a build made for any x86-64-v3
# CPU, Redis's, taskset and chrt, every shared library they load, and this machine's dynamic
# loader, which runs them there whatever that machine's own C library is.
#   scripts/device_bundle.sh [BUILD_DIR=build-dev] [OUT=devbundle] [BASELINE_SERVER]
# BASELINE_SERVER, another ringkv-server binary made the same way, travels as
# bin/ringkv-server-base (bench/device_tables.sh runs it as the growth table's third row).
# Make the build first:
#   meson setup build-dev -Dcpp_args=-march=x86-64-v3
#   ninja -C build-dev server/ringkv-server bench/ringkv-bench bench/ringkv-loadgen
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-dev}
out=${2:-devbundle}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
bins=("$build/server/ringkv-server" "$build/bench/ringkv-bench" "$build/bench/ringkv-loadgen"
      "$(command -v redis-server)" "$(command -v redis-benchmark)" "$(command -v redis-cli)"
      "$(command -v taskset)" "$(command -v chrt)")
for b in "${bins[@]}"; do
  cp -L "$b" "$out/bin/"
  ldd "$b" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do cp -Ln "$lib" "$out/lib/"; done
done
if [ -n "${3:-}" ]; then
  cp -L "$3" "$out/bin/ringkv-server-base"
  ldd "$3" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do cp -Ln "$lib" "$out/lib/"; done
fi
cp -L /lib64/ld-linux-x86-64.so.2 "$out/lib/"
du -sh "$out"
