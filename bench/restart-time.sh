#!/usr/bin/env bash
# How long a one-node server holding GIB gibibytes of values takes to serve again, after a
# clean stop and after kill -9 in the middle of a write load. After kill -9 the rows come back
# as of their last flush and each shard re-applies its Raft log from there; the design bounds
# that replay by the memtables (about 128 MiB of rows per node).
#
#   bench/restart-time.sh [GIB] [BINARY]      default 1 GiB, target/release/trireme
#
# Loads GIB GiB of 1 KiB values under distinct keys with redis-benchmark (-P 16, 50 clients),
# then: stop with SIGTERM, start, time until `GET` answers; write for a few seconds, kill -9
# mid-load, start, time until `GET` answers and until the last acknowledged key of a probe
# client reads back. Prints the data directory's size. Automatic splits are off, so that the
# shards stay as they were loaded (redis-benchmark is no cluster client). Ports 17760-17762;
# everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
GIB=${1:-1}
BINARY=${2:-target/release/trireme}
scripts/install-test-deps.sh
work=$(mktemp -d)
pid=""
probe=""
cleanup() {
  for p in $pid $probe; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

printf '[cluster]\nsplit_bytes = 0\n' >"$work/trireme.toml"
start() {
  "$BINARY" server --config "$work/trireme.toml" --node-id n1 --data-dir "$work/data" --http 127.0.0.1:17760 \
    --resp 127.0.0.1:17761 --peer 127.0.0.1:17762 --log warn >>"$work/server.log" 2>&1 &
  pid=$!
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Milliseconds from `started` until a GET of the first key written reads it back.
until_serving() {
  local started=$1
  until [ "$(redis-cli -p 17761 GET probe:0 2>/dev/null)" = "0" ]; do sleep 0.05; done
  echo "$(($(now_ms) - started))"
}

start
for _ in $(seq 200); do redis-cli -p 17761 ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p 17761 SET probe:0 0 >/dev/null
requests=$((GIB * 1024 * 1024))
echo "loading $GIB GiB: $requests values of 1 KiB"
t0=$(now_ms)
redis-benchmark -p 17761 -t set -d 1024 -c 50 -P 16 -n "$requests" -r "$requests" -q >/dev/null
echo "loaded in $((($(now_ms) - t0) / 1000)) s; data directory: $(du -sh "$work/data" | cut -f1)"

kill -TERM "$pid"
wait "$pid" || true
t0=$(now_ms)
start
echo "clean stop, start: serving after $(until_serving "$t0") ms"

# A probe client writes increasing values to one key while the load runs; the last one it
# saw acknowledged must read back after the kill.
(
  i=0
  while :; do
    i=$((i + 1))
    redis-cli -p 17761 SET probe:last "$i" >/dev/null 2>&1 && echo "$i" >"$work/acked"
  done
) &
probe=$!
redis-benchmark -p 17761 -t set -d 1024 -c 50 -P 16 -n 2000000 -r "$requests" -q >/dev/null 2>&1 &
load=$!
sleep 8
kill -9 "$pid"
kill "$probe" "$load" 2>/dev/null || true
wait "$pid" "$probe" "$load" 2>/dev/null || true
probe=""
acked=$(cat "$work/acked")
t0=$(now_ms)
start
echo "kill -9 mid-load, start: serving after $(until_serving "$t0") ms"
last=$(redis-cli -p 17761 GET probe:last)
echo "last acknowledged probe write: $acked; reads back: $last"
[ "$last" -ge "$acked" ] || { echo "FAIL: an acknowledged write is missing" >&2; exit 1; }
echo "data directory: $(du -sh "$work/data" | cut -f1) (tables $(du -sh "$work/data/tables" | cut -f1), log $(du -sh "$work/data/raft-log" | cut -f1))"
