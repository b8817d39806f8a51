#!/usr/bin/env bash
# Consul transactions across shards against transactions in one shard and single keys, on a
# fresh 3-node cluster of 4 shards per build given: `trireme bench` (driver trireme, 64
# workers, 10,000 keys, 36-byte values, no warm-up) with only one operation at a time, in
# turn, ROUNDS times (default 2), SECONDS each (default 15):
#   txn         PUT /v1/txn of 4 sets on keys under one hash tag (one shard)
#   txn_shards  PUT /v1/txn of 4 sets on keys in the 4 quarters of the slots (4 shards)
#   put, get    single keys
# and the servers' CPU per operation (user + system time of the three processes over the run,
# from /proc). OPS overrides the operations (an older build refuses txn_shards).
#
#   bench/txn-shards.sh BINARY [BINARY...]       e.g. /tmp/trireme-before target/release/trireme
#   ROUNDS=3 SECONDS_EACH=20 OPS="put get" bench/txn-shards.sh BINARY
#
# Ports 17900-17908; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
ROUNDS="${ROUNDS:-2}"
SECS="${SECONDS_EACH:-15}"
OPS="${OPS:-txn txn_shards put get}"
. bench/three-nodes-lib.sh
NODE_CONFIG="$work/node.toml"
echo "shards = 4" >"$NODE_CONFIG"
TICK_US=$((1000000 / $(getconf CLK_TCK)))

for op in $OPS; do
  cat >"$work/$op.toml" <<TOML
name = "$op"
mode = "max"
duration = "${SECS}s"
warmup = "0s"
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
$op = 1
TOML
done

targets=()
for i in 1 2 3; do targets+=(--target "$(http_of "$i")"); done

run() {
  local binary=$1 dir="$work/run$n"
  start_three "$binary" "$dir"
  for round in $(seq 1 "$ROUNDS"); do
    for op in $OPS; do
      local cpu0=0 cpu1=0 out="$dir-$op-$round"
      for p in "${servers[@]}"; do cpu0=$((cpu0 + $(cpu_ticks "$p"))); done
      "$binary" bench "$work/$op.toml" "${targets[@]}" --quiet --out "$out" >/dev/null
      for p in "${servers[@]}"; do cpu1=$((cpu1 + $(cpu_ticks "$p"))); done
      python3 - "$out/result.json" "$(((cpu1 - cpu0) * TICK_US))" "$binary" "$op" "$round" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["result"]
t = r["total"]
cpu_us = int(sys.argv[2])
errors = sum(v for v in r.get("errors", {}).values()) if isinstance(r.get("errors"), dict) else r.get("errors", 0)
per_op = cpu_us / t["count"] if t["count"] else float("nan")
print(f"{sys.argv[3]} {sys.argv[4]} round {sys.argv[5]}: {t['ops_per_sec']:.0f} ops/s, "
      f"p50 {t['p50_us'] / 1000:.1f} ms, p99 {t['p99_us'] / 1000:.1f} ms, "
      f"servers' CPU {per_op:.0f} us/op, errors {errors}")
EOF
    done
  done
  stop_three
}

n=0
for binary in "$@"; do
  n=$((n + 1))
  run "$binary"
done
