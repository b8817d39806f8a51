#!/usr/bin/env bash
# A replica move under load: how long moving one replica of a shard that holds KEYS records
# of 1000 bytes takes (200,000 by default: ~200 MB), and what the move does to a YCSB-B load
# (95% reads) running at half of its unloaded maximum.
#
# A local 4-node cluster with one shard holds it on n1, n2 and n3; `cluster remove n1` drains
# n1, so the replica moves to n4 (learner, snapshot, log, voter change, n1's copy deleted).
# Three runs of the same load, each SECONDS long: at the maximum rate (to find it), at half of
# it (the baseline p99), and at half of it again with the move started 5 s in.
#   bench/move.sh [KEYS] [SECONDS]      (default 200000 keys, 40 s)
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS="${1:-200000}"
SECS="${2:-40}"
OUT="results/move-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
# shellcheck source=bench/local-cluster-lib.sh
. bench/local-cluster-lib.sh
start_local_cluster 4 1 "$OUT"

scenario() { # scenario NAME MODE-LINE LOAD-KEYS
  cat >"$WORK/$1.toml" <<EOF
name = "$1"
$2
duration = "${SECS}s"
warmup = "3s"
concurrent = 16
driver = "trireme"
consistency = "default"
seed = 42

[key_generator]
kind = "zipfian"
keys = $KEYS
theta = 0.99
scrambled = true

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 95
update = 5
EOF
  if [ "$3" != 0 ]; then printf '\n[load]\nkeys = %s\n' "$3" >>"$WORK/$1.toml"; fi
}

echo "== loading $KEYS records of 1000 bytes, then YCSB-B at the maximum rate"
scenario max 'mode = "max"' "$KEYS"
"$TRIREME" bench "$WORK/max.toml" "${TARGETS[@]}" --quiet --out "$OUT/max" >"$OUT/max.txt"
MAX="$(figure "$OUT/max/result.json" "int(r['total']['ops_per_sec'])")"
RATE=$((MAX / 2))
echo "   maximum $MAX ops/s; the next two runs hold $RATE ops/s"

echo "== baseline: YCSB-B at $RATE ops/s, no move"
scenario base "rate = $RATE" 0
"$TRIREME" bench "$WORK/base.toml" "${TARGETS[@]}" --quiet --out "$OUT/base" >"$OUT/base.txt"

echo "== the same load; n1's replica moves to n4 from 5 s in"
scenario moving "rate = $RATE" 0
"$TRIREME" bench "$WORK/moving.toml" "${TARGETS[@]}" --quiet --out "$OUT/moving" \
  >"$OUT/moving.txt" &
LOAD=$!
sleep 8 # the 3 s warm-up, then 5 s of measured load before the move
STATUS="http://127.0.0.1:$((BASE + 10))/v1/cluster/status"
START="$(date +%s.%N)"
"$TRIREME" cluster remove n1 --target "http://127.0.0.1:$((BASE + 10))"
DONE=""
for _ in $(seq 1 1200); do
  if curl -sf "$STATUS" | python3 -c '
import json, sys
s = json.load(sys.stdin)
n1 = [n for n in s["nodes"] if n["name"] == "n1"]
sys.exit(0 if not s["moves"] and n1 and n1[0]["state"] == "removed" else 1)'; then
    DONE="$(date +%s.%N)"; break
  fi
  sleep 0.1
done
wait "$LOAD"
curl -sf "http://127.0.0.1:$((BASE + 30))/metrics" | grep -E '^trireme_snapshot_bytes|^trireme_(moves|elastic)' \
  >"$OUT/n4-metrics.txt" || true

{
  echo "records: $KEYS x 1000 bytes in one shard; YCSB-B (95% get, 5% update), 16 workers"
  echo "unloaded maximum: $MAX ops/s; load held at $RATE ops/s"
  if [ -n "$DONE" ]; then
    python3 -c "import sys; print(f'move of n1 -> n4 (drain until n1 removed): {float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$START" "$DONE"
  else
    echo "move of n1 -> n4: not finished within 120 s"
  fi
  for run in base moving; do
    echo "$run: ops/s $(figure "$OUT/$run/result.json" "round(r['total']['ops_per_sec'])")," \
      "get p50 $(figure "$OUT/$run/result.json" "r['per_op']['get']['p50_us']") us," \
      "p99 $(figure "$OUT/$run/result.json" "r['per_op']['get']['p99_us']") us," \
      "update p99 $(figure "$OUT/$run/result.json" "r['per_op']['update']['p99_us']") us," \
      "errors $(figure "$OUT/$run/result.json" "sum(r['errors'].values())")"
  done
  echo "get p99 during the move / without: $(python3 -c "
import json,sys
b=json.load(open(sys.argv[1]))['result']['per_op']['get']['p99_us']
m=json.load(open(sys.argv[2]))['result']['per_op']['get']['p99_us']
print(f'{m / b:.2f}x')" "$OUT/base/result.json" "$OUT/moving/result.json")"
} | tee "$OUT/summary.txt"
echo "(results in $OUT)"
