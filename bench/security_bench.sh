#!/usr/bin/env bash
# What auth, TLS and metrics cost per call: unary GETs over the h2 transport with one worker,
# in configurations run in interleaved rounds: plain (plaintext), tokens (--auth-token-file),
# tls, tls+tokens, metrics (--metrics-listen, scraped once a second during the run). Prints
# ops/s, the server's CPU per call (user+system from /proc over the run, divided by the calls;
# a scrape's CPU included) and the load generator's own CPU per call.
# Usage: bench/security_bench.sh [ROUNDS] [SECONDS] [CONFIG...]   (after scripts/setup.sh)
#   default configurations: plain tokens tls tls+tokens
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
seconds=${2:-5}
shift 2 || true
configs=("$@")
((${#configs[@]})) || configs=(plain tokens tls tls+tokens)
build=$PWD/build
dir=$(mktemp -d)
pid=
scraper=
trap '[ -n "$scraper" ] && kill $scraper 2>/dev/null; [ -n "$pid" ] && kill $pid 2>/dev/null;
      rm -rf "$dir"' EXIT
cd "$dir"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 1 -subj /CN=bench-ca 2>/dev/null
openssl req "${ec[@]}" -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null
echo "subjectAltName=IP:127.0.0.1" > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
  -days 1 -extfile server.ext 2>/dev/null
printf 'bench-write-token-0123456789 write\n' > tokens
chmod 600 tokens
port=50992
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for round in $(seq "$rounds"); do
  for config in "${configs[@]}"; do
    server_args=() client_args=()
    if [[ $config == *tokens ]]; then
      server_args+=(--auth-token-file=tokens) client_args+=(--token-file=tokens)
    fi
    if [[ $config == tls* ]]; then
      server_args+=(--tls-cert=server.pem --tls-key=server.key) client_args+=(--tls-ca=ca.pem)
    fi
    [[ $config == metrics ]] && server_args+=(--metrics-listen=127.0.0.1:0)
    "$build/server/ringkv-server" --listen=127.0.0.1:$port --threads=1 "${server_args[@]}" \
      2>server.log &
    pid=$!
    sleep 0.5
    if [[ $config == metrics ]]; then
      url=$(grep -o 'http://[0-9.:]*/metrics' server.log)
      (while curl -sf "$url" >/dev/null; do sleep 1; done) &
      scraper=$!
    fi
    before=$(cpu $pid)
    out=$("$build/bench/ringkv-loadgen" --addr=127.0.0.1:$port "${client_args[@]}" \
      --keys=10000 --duration="$seconds" --connections=4 --concurrency=50 --progress=false \
      | grep '^ops/s')
    after=$(cpu $pid)
    if [ -n "$scraper" ]; then kill $scraper; wait $scraper 2>/dev/null || true; scraper=; fi
    ops=$(grep -o 'ops/s [0-9]*' <<<"$out" | awk '{print $2}')
    client=$(grep -o 'client CPU [0-9.]*' <<<"$out" | awk '{print $3}')
    errors=$(grep -o 'errors [0-9]*' <<<"$out")
    # The pre-load's calls are in the server's CPU too; they are few (10 MultiPuts).
    server=$(awk -v t=$((after - before)) -v hz="$ticks" -v ops="$ops" -v s="$seconds" \
      'BEGIN {printf "%.2f", t / hz * 1e6 / (ops * s)}')
    printf '%s %-11s ops/s %7s  server %5s us/call  client %5s us/call  %s\n' \
      "$round" "$config" "$ops" "$server" "$client" "$errors"
    kill $pid
    wait $pid || true
    pid=
  done
done
