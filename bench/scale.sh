#!/usr/bin/env bash
# The Dynomite report's scale test on loopback: a cluster grows while it serves, and each
# stage measures the 80/20 GET/SET load (RESP, 1 KB values, uniform keys) and how evenly the
# nodes carry it.
#
#   bench/scale.sh [STAGES] [STAGE_SECONDS]     (default: "3 6 12" and 10 s per stage)
#
# It starts `trireme cluster up --nodes FIRST --shards 48` in a temporary directory on a free
# port range (48 shards, so that 12 nodes can each lead 4), pre-loads KEYS keys, then per
# stage adds nodes with `trireme cluster add` up to the stage's count, waits (bounded) until
# /v1/cluster/status shows no move in progress and every active node within one replica of
# the others and each node leads the shards that prefer it, and runs the load for
# STAGE_SECONDS against every node's RESP port. Per stage it records the total ops/s,
# p50/p99, failed operations, and per node: the share of writes it served as leader (the
# delta of trireme_raft_writers_proposed_total: reads go to the same leaders, so this is the
# node's share of the work), the share of commands that entered through it
# (trireme_resp_commands_total; even by construction, the bench spreads its connections over
# the targets), leaders held, replicas, and keys and bytes (trireme_shard_keys/_bytes when
# /metrics has them).
#
# While the cluster grows between stages a steady background load (BACKGROUND_RATE ops/s of
# the same mix) keeps running, so joins and moves happen under load; a watcher samples the
# whole test once a second (commands served per second, joins, moves and splits), and
# timeline.svg draws it with the measured stages shaded and the cluster events marked.
#
# Tables and a summary go to stdout and results/scale-<UTC time>/summary.txt, the same
# figures to scale.json there, each stage's bench run to stage-<N>/. The cluster is stopped
# by SIGTERM to the `cluster up` process started here, and its directory removed, on any
# exit.
#
# Environment: KEYS (20000), CONCURRENT (48 connections: divisible by 3, 6, 12, 24 and 48),
# WARMUP (2s), SHARDS (48), SETTLE_TIMEOUT (180 s for the replicas, per stage),
# LEADER_TIMEOUT (60 s more for the leaders), BACKGROUND_RATE (1000 ops/s while growing),
# BASE_PORT (default: a free range).
set -euo pipefail

cd "$(dirname "$0")/.."
STAGES="${1:-3 6 12}"
STAGE_SECONDS="${2:-10}"
KEYS="${KEYS:-20000}"
CONCURRENT="${CONCURRENT:-48}"
WARMUP="${WARMUP:-2s}"
SHARDS="${SHARDS:-48}"
SETTLE_TIMEOUT="${SETTLE_TIMEOUT:-180}"
LEADER_TIMEOUT="${LEADER_TIMEOUT:-60}"
BACKGROUND_RATE="${BACKGROUND_RATE:-1000}"

read -r -a stages <<<"$STAGES"
prev=0
for n in "${stages[@]}"; do
  if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -le "$prev" ]; then
    echo "stages must be increasing node counts, e.g. \"3 6 12\"; got \"$STAGES\"" >&2
    exit 64
  fi
  prev="$n"
done
first="${stages[0]}"
last="${stages[-1]}"

cargo build --release --locked -p trireme >&2
TRIREME="${CARGO_TARGET_DIR:-$PWD/target}/release/trireme"
REPORT=(python3 "$PWD/bench/scale_report.py")

# A base port with all the ports of LAST nodes (10 each) free on 127.0.0.1.
# shellcheck source=bench/local-cluster-lib.sh
. bench/local-cluster-lib.sh
BASE="${BASE_PORT:-$(free_base_port "$last")}"

stamp="$(date -u +%Y%m%d-%H%M%S)"
results="$PWD/results/scale-$stamp"
mkdir -p "$results"
work="$(mktemp -d -t trireme-scale.XXXXXX)"
dir="$work/cluster"
up_pid=""
watch_pid=""
background_pid=""
cleanup() {
  local status=$?
  for pid in "$background_pid" "$watch_pid"; do
    if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -TERM "$up_pid" 2>/dev/null || true
    # `cluster up` stops every node, added ones too; a second SIGTERM kills them.
    for _ in $(seq 1 60); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.5; done
    kill -TERM "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] && [ -d "$dir" ]; then
    echo "failed; the last lines of the nodes' logs:" >&2
    tail -n 15 "$work/up.log" "$dir"/*.log >&2 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "cluster: $first nodes, $SHARDS shards, ports from $BASE, in $dir" >&2
"$TRIREME" cluster up --dir "$dir" --nodes "$first" --shards "$SHARDS" --base-port "$BASE" \
  >"$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 1 240); do
  state="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"])' \
    "$dir/cluster.json" 2>/dev/null || true)"
  [ "$state" = running ] && break
  if ! kill -0 "$up_pid" 2>/dev/null; then echo "cluster up exited" >&2; exit 1; fi
  sleep 0.5
done
if [ "$state" != running ]; then echo "the cluster did not come up in 120 s" >&2; exit 1; fi

resp_targets() {
  python3 -c '
import json, sys
for n in json.load(open(sys.argv[1]))["nodes"]:
    print("--target", "redis://" + n["resp"])' "$dir/cluster.json"
}

# The load, as a scenario file: the dynomite-80-20 preset with the key space scaled to KEYS,
# and a load phase only for the pre-load.
scenario() { # NAME DURATION WARMUP LOAD_KEYS [MODE-LINE]
  local mode_line='mode = "max"'
  if [ -n "${5:-}" ]; then mode_line="$5"; fi
  cat <<EOF
name = "$1"
$mode_line
duration = "$2"
warmup = "$3"
concurrent = $CONCURRENT
driver = "resp"
seed = 42

[key_generator]
kind = "uniform"
keys = $KEYS

[value_generator]
kind = "fixed"
size = 1024

[operations]
get = 80
put = 20
${4:+
[load]
keys = $4}
EOF
}

echo "pre-loading $KEYS keys of 1 KB" >&2
scenario scale-preload 1s 0s "$KEYS" >"$work/preload.toml"
# shellcheck disable=SC2046
"$TRIREME" bench "$work/preload.toml" $(resp_targets) --quiet --out "$results/preload" \
  >"$results/preload.txt" 2>&1 || { cat "$results/preload.txt" >&2; exit 1; }

scenario dynomite-80-20-scale "${STAGE_SECONDS}s" "$WARMUP" "" >"$work/stage.toml"
scenario dynomite-80-20-background 3600s 0s "" "rate = $BACKGROUND_RATE" >"$work/background.toml"
"${REPORT[@]}" watch "$dir" "$results/timeline.jsonl" &
watch_pid=$!
for n in "${stages[@]}"; do
  have="$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["nodes"]))' \
    "$dir/cluster.json")"
  if [ "$have" -lt "$n" ]; then
    # shellcheck disable=SC2046
    "$TRIREME" bench "$work/background.toml" $(resp_targets) --quiet --out "$work/background-$n" \
      >"$work/background-$n.txt" 2>&1 &
    background_pid=$!
  fi
  while [ "$have" -lt "$n" ]; do
    "$TRIREME" cluster add --dir "$dir" >>"$work/add.log" 2>&1 || {
      cat "$work/add.log" >&2
      exit 1
    }
    have=$((have + 1))
  done
  echo "== stage $n nodes: waiting for the replicas and leaders to settle" >&2
  "${REPORT[@]}" settle "$dir" "$n" "$SETTLE_TIMEOUT" "$LEADER_TIMEOUT" \
    >"$work/settle-$n.json" || echo "   did not settle in time: $(cat "$work/settle-$n.json")" >&2
  if [ -n "$background_pid" ]; then
    kill -TERM "$background_pid" 2>/dev/null || true
    wait "$background_pid" 2>/dev/null || true
    background_pid=""
  fi
  "${REPORT[@]}" snapshot "$dir" "$work/before-$n.json"
  echo "   running the 80/20 load for ${STAGE_SECONDS}s on $n nodes" >&2
  stage_start="$(date +%s.%N)"
  # shellcheck disable=SC2046
  "$TRIREME" bench "$work/stage.toml" $(resp_targets) --quiet --out "$results/stage-$n" \
    >"$results/stage-$n.txt" 2>&1 || { cat "$results/stage-$n.txt" >&2; exit 1; }
  printf '{"nodes": %s, "start": %s, "end": %s}\n' "$n" "$stage_start" "$(date +%s.%N)" \
    >>"$results/marks.jsonl"
  "${REPORT[@]}" snapshot "$dir" "$work/after-$n.json"
  "${REPORT[@]}" stage "$n" "$work/before-$n.json" "$work/after-$n.json" \
    "$results/stage-$n" "$work/settle-$n.json" "$results/stage-$n.json" >&2
done

kill -TERM "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true
watch_pid=""
"${REPORT[@]}" timeline "$results/timeline.jsonl" "$results/marks.jsonl" "$results/timeline.svg"
echo >&2
"${REPORT[@]}" report "$results" "bench/scale.sh \"$STAGES\" $STAGE_SECONDS (KEYS=$KEYS CONCURRENT=$CONCURRENT)"
echo "results in $results" >&2
