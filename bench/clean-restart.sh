#!/usr/bin/env bash
# What clients of the other nodes see while one node of a 3-node cluster is restarted
# cleanly (SIGTERM, start again, serving) three times: one `curl` PUT at a time through n1
# and n3 in turn, each timed. A node that stops while leading shards leaves their writes
# waiting for an election unless it hands its leaderships over first.
#
#   bench/clean-restart.sh BINARY [BINARY...]      each on a fresh cluster, one after the other
#
# Prints the PUTs made, the non-200 answers, the five slowest and how many took over 0.5 s.
# Ports 17800-17808; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
work=$(mktemp -d)
declare -A pids
probe=""
cleanup() {
  for p in "${pids[@]}" $probe; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

initial="n1=127.0.0.1:17802,n2=127.0.0.1:17805,n3=127.0.0.1:17808"
http_of() { echo "http://127.0.0.1:$((17800 + 3 * ($1 - 1)))"; }
start() { # node-index binary dir
  local base=$((17800 + 3 * ($1 - 1)))
  "$2" server --node-id "n$1" --data-dir "$3/n$1" --http "127.0.0.1:$base" \
    --resp "127.0.0.1:$((base + 1))" --peer "127.0.0.1:$((base + 2))" \
    --initial-cluster "$initial" --log warn >>"$3/n$1.log" 2>&1 &
  pids[$1]=$!
}
serving() { until curl -sf "$(http_of "$1")/v1/health" >/dev/null 2>&1; do sleep 0.1; done; }

run=0
for binary in "$@"; do
  run=$((run + 1))
  dir="$work/run$run"
  mkdir -p "$dir"
  for i in 1 2 3; do start "$i" "$binary" "$dir"; done
  for i in 1 2 3; do serving "$i"; done
  # Leaders settle on their preferred replicas (the balancer runs every 2 s).
  sleep 5
  (
    k=0
    while :; do
      k=$((k + 1))
      for i in 1 3; do
        curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -X PUT --data v \
          "$(http_of "$i")/v1/kv/probe$k"
      done
    done
  ) >"$dir/times.txt" &
  probe=$!
  sleep 2
  for _ in 1 2 3; do
    kill -TERM "${pids[2]}"
    wait "${pids[2]}" || true
    start 2 "$binary" "$dir"
    serving 2
    sleep 4
  done
  kill "$probe"
  wait "$probe" 2>/dev/null || true
  probe=""
  times="$dir/times.txt"
  echo "$binary: $(wc -l <"$times") PUTs through n1 and n3 while n2 restarted 3 times;" \
    "non-200: $(grep -vc '^200' "$times" || true);" \
    "slowest (s): $(awk '{print $2}' "$times" | sort -rn | head -5 | tr '\n' ' ');" \
    "over 0.5 s: $(awk '$2 > 0.5' "$times" | wc -l)"
  for i in 1 2 3; do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
done
