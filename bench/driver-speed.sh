#!/usr/bin/env bash
# The load generator's check, in one run: is `trireme bench` ever what limits a run?
#
#   1. redis-server (default config), GET, 1 KiB values, 50 connections:
#      redis-benchmark -t get  vs  trireme bench --driver resp   (target: >= 0.8x)
#   2. one Trireme node's Consul KV HTTP API, GET ?raw of a 1 KiB value, 50 connections:
#      hey  vs  trireme bench --driver consul                     (target: >= 1.5x)
#
# Both tools hit one key, as redis-benchmark's and hey's default tests do. Usage:
#   bench/driver-speed.sh [SECONDS]   (default 10 per tool and test)
# Uses release builds and loopback ports 17750-17753; stops what it started by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN="${1:-10}"
scripts/install-test-deps.sh
if ! command -v hey >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq hey >/dev/null
fi
cargo build --release --locked --quiet -p trireme
TRIREME="$PWD/target/release/trireme"
work="$(mktemp -d -t trireme-driver-speed.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

redis-server --port 17750 --dir "$work" --save '' >"$work/redis.log" 2>&1 &
pids+=($!)
"$TRIREME" server --node-id n1 --data-dir "$work/trireme" --http 127.0.0.1:17751 \
  --resp 127.0.0.1:17752 --peer 127.0.0.1:17753 --log warn >"$work/trireme.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p 17750 ping >/dev/null 2>&1 && break; sleep 0.1; done
for _ in $(seq 100); do curl -sf 127.0.0.1:17751/v1/status/leader >/dev/null 2>&1 && break; sleep 0.1; done

value="$(head -c 1024 /dev/zero | tr '\0' 'v')"
# The one key both tools read: redis-benchmark's literal key, and the bench's key 0.
redis-cli -p 17750 set 'key:__rand_int__' "$value" >/dev/null
cat >"$work/get.toml" <<TOML
name = "driver-speed-get"
mode = "max"
duration = "${SECONDS_PER_RUN}s"
warmup = "1s"
concurrent = 50
seed = 1
driver = "resp"
consistency = "default"

[key_generator]
kind = "sequential"
keys = 1

[value_generator]
kind = "fixed"
size = 1024

[operations]
get = 1

[load]
keys = 1
TOML

bench_ops() { # driver target -> ops/s of the get operation
  "$TRIREME" bench "$work/get.toml" --driver "$1" --target "$2" --quiet --no-results --json 2>>"$work/bench.log" \
    | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["per_op"]["get"]["ops_per_sec"]))'
}

# 1. RESP against redis-server.
requests=$((SECONDS_PER_RUN * 60000))
rb=$(redis-benchmark -p 17750 -t get -d 1024 -c 50 -n "$requests" --csv 2>/dev/null | awk -F'"' 'NR==2 {print $4}')
tb_resp=$(bench_ops resp redis://127.0.0.1:17750)

# 2. HTTP against one Trireme node.
curl -sf -X PUT --data-binary "$value" 127.0.0.1:17751/v1/kv/key:000000000000 >/dev/null
hey_rps=$(hey -z "${SECONDS_PER_RUN}s" -c 50 "http://127.0.0.1:17751/v1/kv/key:000000000000?raw" \
  | awk '/Requests\/sec/ {print $2}')
tb_http=$(bench_ops consul http://127.0.0.1:17751)

printf '%-58s %12s\n' "GET, 1 KiB value, 50 connections, one key" "ops/s"
printf '%-58s %12s\n' "redis-benchmark -> redis-server" "$rb"
printf '%-58s %12s\n' "trireme bench --driver resp -> redis-server" "$tb_resp"
printf '%-58s %12s\n' "hey -> trireme /v1/kv ?raw" "$hey_rps"
printf '%-58s %12s\n' "trireme bench --driver consul -> trireme /v1/kv ?raw" "$tb_http"
awk -v a="$tb_resp" -v b="$rb" -v c="$tb_http" -v d="$hey_rps" 'BEGIN {
  printf "resp driver / redis-benchmark: %.2fx (target >= 0.8)\n", a / b
  printf "http driver / hey:             %.2fx (target >= 1.5)\n", c / d
}'
