#!/usr/bin/env bash
# What writes cost in two builds of Trireme and in Redis, side by side in one run: two one-node
# Trireme servers (release binaries given as BEFORE and AFTER) and redis-server with
# appendfsync always, each given the same write loads in turn, twice (A B R A B R), so drift of
# a noisy machine shows.
#
#   BEFORE=/tmp/trireme-old AFTER=target/release/trireme bench/write-cost.sh [REQUESTS]
#   TESTS=set,hset,lpush bench/write-cost.sh    which redis-benchmark tests (default set)
#
# Load: redis-benchmark, 1 KiB values, 50 clients, -P 16, random keys over 100,000. Prints per
# run requests/s, server CPU per request (user + system, from /proc/PID/stat) and bytes the
# server wrote to disk per byte of value (from /proc/PID/io; the servers keep writing after a
# run, flushing and compacting, so later runs also carry earlier runs' flushes). Ports
# 17720-17732; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-300000}
TESTS=${TESTS:-set}
. bench/two-builds-lib.sh
before=$(start_one_node before "$BEFORE" 17720)
pids+=("$before")
after=$(start_one_node after "$AFTER" 17730)
pids+=("$after")
mkdir -p "$work/redis"
redis-server --port 17725 --dir "$work/redis" --appendonly yes --appendfsync always \
  --save '' --daemonize no >"$work/redis.log" 2>&1 &
redis=$!
pids+=("$redis")
for port in 17721 17731 17725; do
  for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
done

written() { awk '/^write_bytes/ {print $2}' "/proc/$1/io"; }
hz=$(getconf CLK_TCK)
printf '%-8s %-7s %-7s %12s %12s %14s\n' round server test 'requests/s' 'CPU µs/req' 'disk B/value B'
for round in 1 2; do
  for side in "before:$before:17721" "after:$after:17731" "redis:$redis:17725"; do
    IFS=: read -r name pid port <<<"$side"
    for test in ${TESTS//,/ }; do
      t0=$(cpu_ticks "$pid")
      w0=$(written "$pid")
      out=$(redis-benchmark -p "$port" -t "$test" -d 1024 -c 50 -P 16 -n "$REQUESTS" -r 100000 -q |
        tr '\r' '\n' | grep 'requests per second' | tail -1)
      t1=$(cpu_ticks "$pid")
      w1=$(written "$pid")
      rps=$(grep -o '[0-9.]* requests per second' <<<"$out" | cut -d' ' -f1)
      awk -v r="$round" -v n="$name" -v t="$test" -v rps="$rps" -v dt=$((t1 - t0)) -v hz="$hz" \
        -v dw=$((w1 - w0)) -v req="$REQUESTS" \
        'BEGIN { printf "%-8s %-7s %-7s %12.0f %12.2f %14.2f\n", r, n, t, rps, dt * 1e6 / hz / req, dw / (req * 1024) }'
    done
  done
done
for name in before after; do
  printf '%s data directory: %s\n' "$name" "$(du -sh "$work/$name" | cut -f1)"
done
