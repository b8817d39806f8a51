#!/usr/bin/env bash
# Trireme against Redis: redis-benchmark with 1 KiB values and 50 clients against a one-node
# Trireme and against redis-server with appendfsync always (both durable), in one run.
#
#   bench/redis-benchmark.sh [REQUESTS]      (default 200000)
#   KEYSPACE=100000 bench/redis-benchmark.sh  random keys over that many (default: one key,
#                                             the plain redis-benchmark command)
#   PIPELINE=16 bench/redis-benchmark.sh      requests in flight per client (-P; default 1)
#   TESTS=set,get,hset bench/redis-benchmark.sh  which redis-benchmark tests (default set,get)
#
# Prints, per test, each server's requests/s and CPU per request (server process, user +
# system), and the Trireme / Redis ratio. Uses release builds and loopback ports
# 17700-17801; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-200000}
PIPELINE=${PIPELINE:-1}
TESTS=${TESTS:-set,get}
scripts/install-test-deps.sh
cargo build --release --quiet -p trireme
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

target/release/trireme server --node-id n1 --data-dir "$work/trireme" --http 127.0.0.1:17700 \
  --resp 127.0.0.1:17701 --peer 127.0.0.1:17702 --log warn >"$work/trireme.log" 2>&1 &
trireme=$!
pids+=("$trireme")
mkdir -p "$work/redis"
redis-server --port 17801 --dir "$work/redis" --appendonly yes --appendfsync always --save '' \
  >"$work/redis.log" 2>&1 &
redis=$!
pids+=("$redis")
for port in 17701 17801; do
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
done

keyspace=()
if [ -n "${KEYSPACE:-}" ]; then keyspace=(-r "$KEYSPACE"); fi
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
run() { # port pid test -> "requests/s cpu_us_per_request"
  local c0 c1 rate
  c0=$(cpu_ticks "$2")
  rate=$(redis-benchmark -p "$1" -t "$3" -d 1024 -c 50 -P "$PIPELINE" -n "$REQUESTS" \
    "${keyspace[@]}" --csv 2>/dev/null | awk -F'"' 'NR==2 {print $4}')
  c1=$(cpu_ticks "$2")
  awk -v r="$rate" -v c=$((c1 - c0)) -v t="$ticks" -v n="$REQUESTS" \
    'BEGIN { printf "%.0f %.1f\n", r, c / t * 1e6 / n }'
}
printf '1 KiB values, 50 clients, pipeline %s, keyspace %s, %s requests per test\n' \
  "$PIPELINE" "${KEYSPACE:-1}" "$REQUESTS"
printf '%-8s %14s %14s %14s %14s %8s\n' test 'trireme req/s' 'redis req/s' \
  'trireme cpu us' 'redis cpu us' ratio
for t in ${TESTS//,/ }; do
  read -r tr tc < <(run 17701 "$trireme" "$t")
  read -r rr rc < <(run 17801 "$redis" "$t")
  awk -v t="$t" -v tr="$tr" -v rr="$rr" -v tc="$tc" -v rc="$rc" \
    'BEGIN { printf "%-8s %14s %14s %14s %14s %7.2fx\n", t, tr, rr, tc, rc, (rr > 0 ? tr / rr : 0) }'
done
