#!/usr/bin/env bash
# Consul blocking queries at scale, on a local 3-node cluster:
# 1. the fan-out: WATCHERS watchers (default 1000) spread over the 3 nodes hold blocking
#    queries on one key; 20 writes, each timed from its start to every watcher's wake-up;
# 2. what idle watchers cost other traffic: Consul's GET and PUT tests (64 clients, on node 1)
#    run alone and beside IDLE blocking queries (default 10,000) held on node 1, alternately,
#    ROUNDS times (default 2), SECONDS each (default 15).
#   bench/consul-watch.sh [WATCHERS] [IDLE] [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
WATCHERS="${1:-1000}"
IDLE="${2:-10000}"
ROUNDS="${3:-2}"
SECS="${4:-15}"
OUT="results/consul-watch-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
# shellcheck source=bench/local-cluster-lib.sh
. bench/local-cluster-lib.sh
start_local_cluster 3 3 "$OUT"
NODE1="http://127.0.0.1:$BASE"
ulimit -n "$(ulimit -Hn)"

echo "== fan-out: $WATCHERS watchers on 3 nodes, 20 writes"
"$TRIREME" bench watch "${TARGETS[@]}" --watchers "$WATCHERS" --writes 20 --json \
  >"$OUT/fanout.json"

run() { # NAME PRESET
  "$TRIREME" bench --preset "$2" --driver consul --target "$NODE1" --duration "${SECS}s" \
    --warmup 3s --quiet --out "$OUT/$1" >/dev/null
  echo "$1: $(figure "$OUT/$1/result.json" "round(r['total']['ops_per_sec'])") ops/s," \
    "p99 $(figure "$OUT/$1/result.json" "r['total']['p99_us']") us"
}

for round in $(seq 1 "$ROUNDS"); do
  for preset in consul-get-default consul-put; do
    run "$preset-alone-$round" "$preset"
    "$TRIREME" bench watch --target "$NODE1" --watchers "$IDLE" --key bench/idle \
      --hold 3600s 2>"$OUT/hold.log" &
    HOLD=$!
    until grep -q "holding them" "$OUT/hold.log" 2>/dev/null; do
      kill -0 "$HOLD" || { cat "$OUT/hold.log"; exit 1; }
      sleep 0.2
    done
    run "$preset-idle-$round" "$preset"
    kill "$HOLD"; wait "$HOLD" 2>/dev/null || true
  done
done
echo "results in $OUT"
