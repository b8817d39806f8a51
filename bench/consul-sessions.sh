#!/usr/bin/env bash
# Consul transactions and locks on a local 3-node cluster:
# 1. 4-operation transactions against single PUTs: `trireme bench` (driver trireme, 64 workers,
#    10,000 keys, 36-byte values as Consul's benchmark) with only `txn` (PUT /v1/txn of four
#    sets on keys sharing a hash tag), then only `put`, alternately, ROUNDS times (default 2),
#    SECONDS each (default 15);
# 2. lock handoffs: two processes of Consul's Go client (api.Lock, each round a new session,
#    as `consul lock` does) take turns on one key through two nodes, HANDOFFS rounds each
#    (default 100), holding it for no time; handoffs per second over the whole run.
#   bench/consul-sessions.sh [ROUNDS] [SECONDS] [HANDOFFS]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-2}"
SECS="${2:-15}"
HANDOFFS="${3:-100}"
OUT="results/consul-sessions-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
# shellcheck source=bench/local-cluster-lib.sh
. bench/local-cluster-lib.sh
start_local_cluster 3 3 "$OUT"

scenario() { # NAME OPERATION
  cat >"$WORK/$1.toml" <<TOML
name = "$1"
mode = "max"
duration = "${SECS}s"
warmup = "3s"
concurrent = 64
driver = "trireme"
seed = 42

[key_generator]
kind = "uniform"
keys = 10000

[value_generator]
kind = "fixed"
size = 36

[operations]
$2 = 1
TOML
}
scenario txn txn
scenario put put

for round in $(seq 1 "$ROUNDS"); do
  for test in txn put; do
    "$TRIREME" bench "$WORK/$test.toml" "${TARGETS[@]}" --quiet --out "$OUT/$test-$round" >/dev/null
    echo "$test round $round: $(figure "$OUT/$test-$round/result.json" "round(r['total']['ops_per_sec'])") ops/s," \
      "p50 $(figure "$OUT/$test-$round/result.json" "r['total']['p50_us']") us," \
      "p99 $(figure "$OUT/$test-$round/result.json" "r['total']['p99_us']") us"
  done
done

echo "== lock handoffs: 2 processes x $HANDOFFS rounds"
CLIENT="$WORK/lock-client"
(cd crates/trireme/tests/clients/consul && go build -o "$CLIENT" ./lock)
started=$(date +%s.%N)
"$CLIENT" contend "127.0.0.1:$BASE" bench/lock A "$HANDOFFS" 0 >"$OUT/lock-a.jsonl" &
A=$!
"$CLIENT" contend "127.0.0.1:$((BASE + 10))" bench/lock B "$HANDOFFS" 0 >"$OUT/lock-b.jsonl" &
B=$!
wait "$A" "$B"
ended=$(date +%s.%N)
python3 - "$started" "$ended" "$HANDOFFS" <<'PY'
import sys
started, ended, rounds = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
print(f"{2 * rounds} acquisitions in {ended - started:.2f} s: {2 * rounds / (ended - started):.1f} per second")
PY
echo "results in $OUT"
