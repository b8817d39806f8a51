#!/usr/bin/env bash
# What 100 clients blocked in BLPOP on one list cost when 100 elements arrive: the writes the
# cluster proposes (summed from every node's `trireme_raft_writers_proposed_total`), the time
# from the first push to the last waiter's answer, and the servers' CPU. Run on each build
# given, one after the other, each on a fresh 3-node cluster.
#
#   bench/blocking-pops.sh BINARY [BINARY...]      e.g. /tmp/trireme-before target/release/trireme
#
# The waiters are redis-cli processes, half on n1 and half on n2; the pushes go through n3,
# one RPUSH at a time. Ports 17900-17908; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
scripts/install-test-deps.sh >/dev/null
WAITERS=100
. bench/three-nodes-lib.sh
waiters=()

run() { # binary label
  local binary=$1 dir="$work/run$n"
  waiters=()
  start_three "$binary" "$dir"
  for n in $(seq "$WAITERS"); do
    redis-cli -p "$(resp_of $((n % 2 + 1)))" BLPOP '{q}jobs' 60 >"$dir.got.$n" 2>&1 &
    waiters+=($!)
    helpers+=($!)
  done
  # Every waiter is blocked: each counts once in a node's blocking queries.
  until [ "$(metric_sum trireme_blocking_queries_waiting)" -ge "$WAITERS" ]; do sleep 0.05; done
  local writes0 cpu0=0 t0
  writes0=$(metric_sum trireme_raft_writers_proposed_total)
  for p in "${servers[@]}"; do cpu0=$((cpu0 + $(cpu_ticks "$p"))); done
  t0=$(now_ms)
  for n in $(seq "$WAITERS"); do redis-cli -p "$(resp_of 3)" RPUSH '{q}jobs' "$n" >/dev/null; done
  for p in "${waiters[@]}"; do wait "$p"; done
  local elapsed=$(($(now_ms) - t0)) cpu1=0 writes
  for p in "${servers[@]}"; do cpu1=$((cpu1 + $(cpu_ticks "$p"))); done
  writes=$(($(metric_sum trireme_raft_writers_proposed_total) - writes0))
  local served
  served=$(cat "$dir".got.* | grep -vc '{q}jobs' || true)
  echo "$2: $WAITERS waiters, $WAITERS pushes: $writes writes proposed, last answer after $elapsed ms, servers' CPU $(((cpu1 - cpu0) * 10)) ms, $served elements handed out"
  stop_three
  waiters=()
  helpers=()
}

n=0
for binary in "$@"; do
  n=$((n + 1))
  run "$binary" "$binary"
done
