#!/usr/bin/env bash
# A shard split under load: how long `trireme cluster split` takes on a shard that holds
# KEYS/4 records of 1000 bytes, and what it does to a YCSB-A load (50% reads, 50% updates)
# running at half of its unloaded maximum.
#
# A local 3-node cluster with 4 shards holds KEYS records (200,000 by default: ~200 MB, so
# ~50 MB a shard). Three runs of the same load, each SECONDS long: at the maximum rate (to
# find it), at half of it (the baseline), and at half of it again with shard 0 split 5 s in.
# The split's time is from the command until the new shard has a leader every node agrees
# on; the run's errors and its worst latencies show the pause the keys handed over saw.
#   bench/split.sh [KEYS] [SECONDS]      (default 200000 keys, 30 s)
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS="${1:-200000}"
SECS="${2:-30}"
OUT="results/split-$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
# shellcheck source=bench/local-cluster-lib.sh
. bench/local-cluster-lib.sh
start_local_cluster 3 4 "$OUT"

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
kind = "uniform"
keys = $KEYS

[value_generator]
kind = "fixed"
size = 1000

[operations]
get = 50
update = 50
EOF
  if [ "$3" != 0 ]; then printf '\n[load]\nkeys = %s\n' "$3" >>"$WORK/$1.toml"; fi
}

echo "== loading $KEYS records of 1000 bytes, then YCSB-A at the maximum rate"
scenario max 'mode = "max"' "$KEYS"
"$TRIREME" bench "$WORK/max.toml" "${TARGETS[@]}" --quiet --out "$OUT/max" >"$OUT/max.txt"
MAX="$(figure "$OUT/max/result.json" "int(r['total']['ops_per_sec'])")"
RATE=$((MAX / 2))
echo "   maximum $MAX ops/s; the next two runs hold $RATE ops/s"

echo "== baseline: YCSB-A at $RATE ops/s, no split"
scenario base "rate = $RATE" 0
"$TRIREME" bench "$WORK/base.toml" "${TARGETS[@]}" --quiet --out "$OUT/base" >"$OUT/base.txt"

echo "== the same load; shard 0 splits 5 s in"
scenario splitting "rate = $RATE" 0
"$TRIREME" bench "$WORK/splitting.toml" "${TARGETS[@]}" --quiet --out "$OUT/splitting" \
  >"$OUT/splitting.txt" &
LOAD=$!
sleep 8 # the 3 s warm-up, then 5 s of measured load before the split
SHARDS="http://127.0.0.1:$((BASE + 10))/v1/cluster/shards"
START="$(date +%s.%N)"
"$TRIREME" cluster split 0 --target "http://127.0.0.1:$((BASE + 10))" | tee "$OUT/split.txt"
DONE=""
for _ in $(seq 1 600); do
  led=0
  for i in 0 1 2; do
    curl -sf "http://127.0.0.1:$((BASE + 10 * i))/v1/cluster/shards" | python3 -c '
import json, sys
s = json.load(sys.stdin)["shards"]
sys.exit(0 if len(s) == 5 and s[4]["leader"] else 1)' && led=$((led + 1))
  done
  if [ "$led" = 3 ]; then DONE="$(date +%s.%N)"; break; fi
  sleep 0.05
done
wait "$LOAD"
curl -sf "$SHARDS" >"$OUT/shards-after.json" || true

{
  echo "records: $KEYS x 1000 bytes in 4 shards on 3 nodes; YCSB-A (50% get, 50% update), 16 workers"
  echo "unloaded maximum: $MAX ops/s; load held at $RATE ops/s"
  if [ -n "$DONE" ]; then
    python3 -c "import sys; print(f'split of shard 0 (command until the new shard is led on every node): {float(sys.argv[2]) - float(sys.argv[1]):.2f} s')" "$START" "$DONE"
  else
    echo "split of shard 0: the new shard had no agreed leader within 30 s"
  fi
  for run in base splitting; do
    echo "$run: ops/s $(figure "$OUT/$run/result.json" "round(r['total']['ops_per_sec'])")," \
      "get p99 $(figure "$OUT/$run/result.json" "r['per_op']['get']['p99_us']") us," \
      "max $(figure "$OUT/$run/result.json" "r['per_op']['get']['max_us']") us;" \
      "update p99 $(figure "$OUT/$run/result.json" "r['per_op']['update']['p99_us']") us," \
      "max $(figure "$OUT/$run/result.json" "r['per_op']['update']['max_us']") us;" \
      "errors $(figure "$OUT/$run/result.json" "sum(r['errors'].values())")"
  done
} | tee "$OUT/summary.txt"
echo "(results in $OUT)"
