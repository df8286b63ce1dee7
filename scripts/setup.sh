#!/usr/bin/env bash
# Installs the Debian packages ringkv builds with, the test tools (grpcurl and ghz from the Go
# module proxy, grpcio and h2 from PyPI, all pinned, under .tools/), then configures and builds.
# Idempotent: what is already present is skipped and `apt-get update` runs at most once.
# Usage: scripts/setup.sh [BUILD_DIR] [extra meson options...]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential meson ninja-build pkg-config
  libdpdk-dev libjemalloc-dev libwyhash-dev libabsl-dev libgtest-dev libgmock-dev
  libconcurrentqueue-dev libreaderwriterqueue-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libnghttp2-dev liburing-dev
  libssl-dev openssl prometheus-cpp-dev prometheus
  python3 python3-venv ca-certificates
  libboost-dev python3-matplotlib redis-server redis-tools nghttp2-client etcd-server etcd-client
  iproute2
  clang-format clang-tidy
)
# Go builds grpcurl; a machine without a Go toolchain gets Debian's.
export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || packages+=(golang-go)

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

# Tools, pinned: grpcurl (reflection client), ghz (a gRPC load generator), h2spec (HTTP/2
# conformance, for server/h2_conformance_test.py), Python's
# grpcio/grpcio-tools for the interop tests and h2 (an HTTP/2 implementation) for the hostile-
# input tests.
tools=$PWD/.tools
if [ ! -x "$tools/bin/grpcurl" ]; then
  echo "setup: installing grpcurl v1.9.4 into .tools/bin" >&2
  GOBIN="$tools/bin" GOFLAGS=-mod=mod go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4
fi
if [ ! -x "$tools/bin/ghz" ]; then
  echo "setup: installing ghz v0.121.0 into .tools/bin" >&2
  GOBIN="$tools/bin" GOFLAGS=-mod=mod go install github.com/bojand/ghz/cmd/ghz@v0.121.0
fi
if [ ! -x "$tools/bin/h2spec" ]; then
  echo "setup: installing h2spec v2.2.1 into .tools/bin" >&2
  GOBIN="$tools/bin" GOFLAGS=-mod=mod \
    go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible
fi
if ! "$tools/venv/bin/python3" -c 'import grpc, grpc_tools, h2' 2>/dev/null; then
  echo "setup: installing grpcio, grpcio-tools and h2 into .tools/venv" >&2
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install -q --disable-pip-version-check grpcio==1.66.1 grpcio-tools==1.66.1 \
    h2==4.1.0
fi

build_dir=${1:-build}
shift || true
if [ ! -f "$build_dir/build.ninja" ]; then
  meson setup "$build_dir" "$@"
fi
ninja -C "$build_dir" -j"${RINGKV_JOBS:-2}"
