#!/usr/bin/env bash
# A rolling upgrade of a 3-node cluster under the Consul report's PUT load: the cluster starts
# on BEFORE, then each node in turn is stopped (SIGTERM) and started again on AFTER with the
# same flags and data directory, waiting until it is linked again before the next. The load
# runs the whole time; the same load is measured on BEFORE first, as the baseline.
#
#   BEFORE=/path/to/old/trireme AFTER=target/release/trireme bench/rolling-upgrade.sh [SECONDS]
#
# SECONDS (default 20) is the length of the baseline run and of the pause between two node
# upgrades. Prints each run's summary (ops/s, p99, errors), the time each node took to be
# linked again, and the cluster version before and after. The bench's clients do not retry:
# a request to the node being restarted fails (connection refused) until it is back, and is
# counted as an error. Ports 17800-17808; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BEFORE:?BEFORE=path to the trireme binary the cluster starts on}"
: "${AFTER:?AFTER=path to the trireme binary it is upgraded to}"
PAUSE=${1:-20}
BENCH=$AFTER
work=$(mktemp -d)
declare -A pids
load=""
cleanup() {
  for p in "${pids[@]}" $load; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

initial="n1=127.0.0.1:17802,n2=127.0.0.1:17805,n3=127.0.0.1:17808"
start() { # node-index binary
  local i=$1 base=$((17800 + 3 * ($1 - 1)))
  "$2" server --node-id "n$i" --data-dir "$work/n$i" --http "127.0.0.1:$base" \
    --resp "127.0.0.1:$((base + 1))" --peer "127.0.0.1:$((base + 2))" \
    --initial-cluster "$initial" --log warn >>"$work/n$i.log" 2>&1 &
  pids[$i]=$!
}
http_of() { echo "http://127.0.0.1:$((17800 + 3 * ($1 - 1)))"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# The protocol node `name` announced, as node `via` sees it ("" while not linked).
protocol_seen() { # via name
  curl -sf "$(http_of "$1")/v1/cluster/status" 2>/dev/null |
    python3 -c "import json,sys; s=json.load(sys.stdin); print(next((str(n['version']['protocol']) for n in s['nodes'] if n['name']=='$2' and n.get('linked') and n.get('version')), ''))" 2>/dev/null || true
}
cluster_version() {
  curl -sf "$(http_of "$1")/v1/cluster/status" | python3 -c "import json,sys; print(json.load(sys.stdin).get('cluster_version', 'not reported'))"
}

for i in 1 2 3; do start "$i" "$BEFORE"; done
for i in 1 2 3; do
  until curl -sf "$(http_of "$i")/v1/health" >/dev/null 2>&1; do sleep 0.2; done
done
echo "cluster up on $("$BEFORE" --version 2>/dev/null || echo BEFORE); cluster version: $(cluster_version 1)"
targets=(--target "$(http_of 1)" --target "$(http_of 2)" --target "$(http_of 3)")

"$BENCH" bench --preset consul-put "${targets[@]}" --duration "${PAUSE}s" --quiet \
  --out "$work/before" >"$work/before.txt"
echo "== baseline on BEFORE"
cat "$work/before.txt"

total=$((PAUSE * 4 + 30))
"$BENCH" bench --preset consul-put "${targets[@]}" --duration "${total}s" --quiet \
  --out "$work/during" >"$work/during.txt" 2>&1 &
load=$!
sleep "$PAUSE"
for i in 1 2 3; do
  via=$((i % 3 + 1))
  t0=$(now_ms)
  kill -TERM "${pids[$i]}"
  wait "${pids[$i]}" || true
  start "$i" "$AFTER"
  until [ -n "$(protocol_seen "$via" "n$i")" ] && curl -sf "$(http_of "$i")/v1/health" >/dev/null 2>&1; do
    sleep 0.1
  done
  echo "n$i upgraded: linked again with protocol $(protocol_seen "$via" "n$i") after $(($(now_ms) - t0)) ms"
  sleep "$PAUSE"
done
echo "cluster version after the last node: $(cluster_version 1)"
wait "$load" || true
load=""
echo "== during the upgrade (${total} s, covering all three restarts)"
cat "$work/during.txt"
