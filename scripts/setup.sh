#!/usr/bin/env bash
# Installs the Debian packages ringkv builds with, then configures and builds it.
# Idempotent: packages already present are skipped and `apt-get update` runs at most once.
# Usage: scripts/setup.sh [BUILD_DIR] [extra meson options...]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential meson ninja-build pkg-config
  libdpdk-dev libjemalloc-dev libwyhash-dev libabsl-dev libgtest-dev libgmock-dev
  libconcurrentqueue-dev libreaderwriterqueue-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build_dir=${1:-build}
shift || true
if [ ! -f "$build_dir/build.ninja" ]; then
  meson setup "$build_dir" "$@"
fi
ninja -C "$build_dir" -j"${RINGKV_JOBS:-2}"
