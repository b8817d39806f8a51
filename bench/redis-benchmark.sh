#!/usr/bin/env bash
# Trireme against Redis: redis-benchmark SET/GET with 1 KiB values and 50 clients against a
# one-node Trireme and against redis-server with appendfsync always (both durable), in one run.
#
#   bench/redis-benchmark.sh [REQUESTS]      (default 200000)
#   KEYSPACE=100000 bench/redis-benchmark.sh  (random keys over that many; default: the
#                                              plain redis-benchmark command, one key)
#
# Prints each server's requests/s and the Trireme / Redis ratios. Uses release builds and
# loopback ports 17700-17802; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-200000}
scripts/install-test-deps.sh
cargo build --release --quiet -p trireme
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

target/release/trireme server --node-id n1 --data-dir "$work/trireme" --http 127.0.0.1:17700 \
  --resp 127.0.0.1:17701 --peer 127.0.0.1:17702 --log warn >"$work/trireme.log" 2>&1 &
pids+=($!)
mkdir -p "$work/redis-always" "$work/redis-default"
redis-server --port 17801 --dir "$work/redis-always" --appendonly yes --appendfsync always --save '' \
  >"$work/redis-always.log" 2>&1 &
pids+=($!)
redis-server --port 17802 --dir "$work/redis-default" --save '' >"$work/redis-default.log" 2>&1 &
pids+=($!)
for port in 17701 17801 17802; do
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
done

keyspace=()
if [ -n "${KEYSPACE:-}" ]; then keyspace=(-r "$KEYSPACE"); fi
run() { # port test -> requests/s
  redis-benchmark -p "$1" -t "$2" -d 1024 -c 50 -n "$REQUESTS" "${keyspace[@]}" --csv 2>/dev/null \
    | awk -F'"' 'NR==2 {print $4}'
}
t_set=$(run 17701 set); r_set=$(run 17801 set)
t_get=$(run 17701 get); r_get=$(run 17802 get)
printf '%-34s %12s\n' "test (1 KiB values, 50 clients, keyspace ${KEYSPACE:-1})" "requests/s"
printf '%-34s %12s\n' "trireme SET (fsync per commit)" "$t_set"
printf '%-34s %12s\n' "redis SET (appendfsync always)" "$r_set"
printf '%-34s %12s\n' "trireme GET" "$t_get"
printf '%-34s %12s\n' "redis GET (default config)" "$r_get"
awk -v a="$t_set" -v b="$r_set" -v c="$t_get" -v d="$r_get" \
  'BEGIN { printf "SET ratio trireme/redis: %.2fx (target >= 1.0)\nGET ratio trireme/redis: %.2fx (target >= 0.8)\n", a/b, c/d }'
