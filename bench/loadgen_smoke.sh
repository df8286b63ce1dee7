#!/usr/bin/env bash
# Smoke run of ringkv-loadgen (called by `meson test` with the server's and the generator's
# paths, then server flags such as --transport=grpc): a real ringkv-server on a free loopback
# port: GETs on the empty store (each miss counted as an operation), then each mode for a few
# thousand operations, every call must succeed; then the usage and unreachable-server errors.
set -euo pipefail
server=$1
loadgen=$2
shift 2
out=$(mktemp -d)
fail() { echo "FAIL: $*" >&2; exit 1; }
"$server" --listen=127.0.0.1:0 --threads=2 "$@" 2>"$out/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$out"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$out/server.log" && break; sleep 0.1; done
port=$(grep -o "listening on 127.0.0.1:[0-9]*" "$out/server.log" | grep -o "[0-9]*$") \
  || fail "no port: $(cat "$out/server.log")"
# An empty store, GETs only: every GET misses, and each miss is an answered call, counted in
# ops/s and latency (ops = gets, no hits, no errors).
for client in h2 grpc; do
  for mode in unary multi stream; do
    run="miss-$client-$mode"
    # Bounded: a generator that counted no misses would never reach --ops.
    timeout 60 "$loadgen" --addr=127.0.0.1:$port --client=$client --mode=$mode --ops=2000 --keys=1000000 \
      --ratio=1:0 --preload=false --concurrency=4 --progress=false --json="$out/$run.json" \
      >"$out/$run.txt" || fail "$run exited $?: $(cat "$out/$run.txt")"
    python3 - "$out/$run.json" <<'PY' || fail "$run: $(cat "$out/$run.txt")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ops"] >= 2000 and r["ops"] == r["gets"], r
assert r["get_hits"] == 0 and r["errors"] == 0 and r["ops_per_s"] > 0, r
PY
  done
done
for client in h2 grpc; do
  for mode in unary multi stream; do
    run="$client-$mode"
    "$loadgen" --addr=127.0.0.1:$port --client=$client --mode=$mode --ops=3000 --keys=1000 \
      --ratio=1:1 --concurrency=8 --connections=2 --progress=false --json="$out/$run.json" \
      >"$out/$run.txt" || fail "$run exited $?: $(cat "$out/$run.txt")"
    grep -Eq "^ops/s [0-9]+, MB/s [0-9.]+, latency per call p50 [0-9.]+ ms.*client CPU [0-9.]+ us/op, errors 0$" \
      "$out/$run.txt" || fail "$run report: $(cat "$out/$run.txt")"
    grep -q '"errors":0' "$out/$run.json" || fail "$run json: $(cat "$out/$run.json")"
  done
done
# The headers: writes that ask for a replica, of a server that has none, are refused unrun
# (UNAVAILABLE, code 14), so every PUT fails; linearizable reads of a server outside a group
# are served.
for client in h2 grpc; do
  run="headers-$client"
  rc=0
  "$loadgen" --addr=127.0.0.1:$port --client=$client --ops=20 --keys=10 --ratio=0:1 \
    --preload=false --concurrency=1 --progress=false --min_replicas=1 \
    --consistency=linearizable >"$out/$run.txt" || rc=$?
  [ $rc -eq 1 ] && grep -Eq "errors ([0-9]+) \(code 14: \1\)$" "$out/$run.txt" \
    || fail "$run: rc $rc $(cat "$out/$run.txt")"
  "$loadgen" --addr=127.0.0.1:$port --client=$client --ops=20 --keys=10 --ratio=1:0 \
    --concurrency=1 --progress=false --consistency=linearizable >"$out/$run.txt" \
    || fail "$run reads: $(cat "$out/$run.txt")"
done
set +e
"$loadgen" --consistency=strong 2>/dev/null; rc=$?
[ $rc -eq 2 ] || fail "--consistency=strong exited $rc, expected 2"
"$loadgen" --mode=bogus 2>/dev/null; rc=$?
[ $rc -eq 2 ] || fail "--mode=bogus exited $rc, expected 2"
"$loadgen" --client=bogus 2>/dev/null; rc=$?
[ $rc -eq 2 ] || fail "--client=bogus exited $rc, expected 2"
"$loadgen" --addr=127.0.0.1:1 --ops=10 --progress=false 2>"$out/err.txt" >/dev/null; rc=$?
set -e
[ $rc -eq 3 ] && grep -q "cannot reach ringkv-server at 127.0.0.1:1" "$out/err.txt" \
  || fail "unreachable: rc $rc $(cat "$out/err.txt")"
kill -TERM $pid
wait $pid || fail "server exited $? after SIGTERM"
echo "loadgen smoke: ok"
