#!/usr/bin/env bash
# The web console's figures (docs/benchmarks.md, "Web console"), on a release build: on a
# fresh local 3-node cluster of SHARDS shards, the overview's page load in headless chromium;
# the shards view of 1,000 shards on 50 nodes, its JSON synthesized by bench/console.py on
# loopback ports (a real cluster of that size does not fit two cores); and the console's own
# CPU: a second cluster like the first but with `[ui] enabled = false` runs beside it, and
# each window measures both at once (no page open, the overview open, the live figures
# open), so what else the machine does falls on both. Installs chromium and chromedriver
# (scripts/install-test-deps.sh); stops what it started by PID.
#
#   bench/console.sh [LOADS] [SECONDS] [ROUNDS]   # default 10 loads, 60 s windows, 2 rounds
#   SHARDS=16 bench/console.sh                    # shards per cluster (default 64)
#   BINARY=target/debug/trireme bench/console.sh  # another build (default: release, built here)
set -euo pipefail
cd "$(dirname "$0")/.."
loads=${1:-10}
seconds=${2:-60}
rounds=${3:-2}
shards=${SHARDS:-64}
scripts/install-test-deps.sh
binary=${BINARY:-target/release/trireme}
if [ -z "${BINARY:-}" ]; then cargo build --release --locked -p trireme; fi

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Starts three nodes of the cluster NAME on ports BASE + 3(i-1) (HTTP), +1 (RESP), +2 (peer)
# with CONFIG; their PIDs are left in `started` (and added to `pids`).
start_cluster() { # NAME BASE CONFIG
  started=()
  local name=$1 base=$2 config=$3 initial="" i
  for i in 1 2 3; do
    initial+="${initial:+,}n$i=127.0.0.1:$((base + 3 * (i - 1) + 2))"
  done
  for i in 1 2 3; do
    local port=$((base + 3 * (i - 1)))
    "$binary" server --node-id "n$i" --data-dir "$work/$name/n$i" --http "127.0.0.1:$port" \
      --resp "127.0.0.1:$((port + 1))" --peer "127.0.0.1:$((port + 2))" \
      --initial-cluster "$initial" --config "$config" --log warn >>"$work/$name.log" 2>&1 &
    pids+=($!)
    started+=($!)
  done
}
wait_healthy() { # BASE
  local i
  for i in 1 2 3; do
    until curl -sf "http://127.0.0.1:$(($1 + 3 * (i - 1)))/v1/health" >/dev/null 2>&1; do
      sleep 0.2
    done
  done
}

printf 'shards = %s\n' "$shards" >"$work/on.toml"
printf 'shards = %s\n[ui]\nenabled = false\n' "$shards" >"$work/off.toml"
start_cluster on 17900 "$work/on.toml"
on=("${started[@]}")
start_cluster off 17930 "$work/off.toml"
off=("${started[@]}")
wait_healthy 17900
wait_healthy 17930
echo "== $(date -u +%FT%TZ), $binary, $shards shards, $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"
python3 bench/console.py --node http://127.0.0.1:17900 --node http://127.0.0.1:17903 \
  --node http://127.0.0.1:17906 \
  --pid "${on[0]}" --pid "${on[1]}" --pid "${on[2]}" \
  --control-pid "${off[0]}" --control-pid "${off[1]}" --control-pid "${off[2]}" \
  --loads "$loads" --seconds "$seconds" --rounds "$rounds"
