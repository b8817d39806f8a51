#!/usr/bin/env bash
# Trireme against etcd, in one run on this machine: a 3-node Trireme cluster against a 3-member
# etcd cluster (Debian's etcd-server), with the Consul report's four tests: 64 clients, the
# 36-byte value, one key (`trireme bench --preset consul-*`).
#
#   Trireme (Consul KV API)      etcd (v3 JSON gateway)
#   PUT                          put
#   GET default (leader lease)   range, serializable, on the leader
#   GET stale (a follower)       range, serializable, on a follower
#   GET consistent (ReadIndex)   range, linearizable (etcd's default)
#
# Then the same four tests with wrk (64 connections; hey tops out near 21k requests/s here and
# takes most of a core) against Trireme's Consul KV API and etcd's v2 keys API (PUT; GET on the
# leader; GET on a follower; GET ?quorum=true), the API etcd's published figures used.
#
# Both sides get the request on the node that leads the key (stale: on a follower), as a
# slot-aware client would send it. Usage: bench/cluster-vs-etcd.sh [DURATION] (default 20s).
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION="${1:-20s}"
WARMUP="${WARMUP:-3s}"
BASE="${BASE_PORT:-17900}"
SHARDS="${SHARDS:-16}"

bash scripts/install-test-deps.sh
if ! command -v wrk >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk >/dev/null
fi
cargo build --release --locked -p trireme >&2
TRIREME="$PWD/target/release/trireme"
ETCD="$(command -v etcd)"

work="$(mktemp -d -t trireme-vs-etcd.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# --- Trireme: node i on HTTP BASE+10(i-1), RESP +1, peer +2 ---------------------------------
initial=""
for i in 1 2 3; do
  initial+="n$i=127.0.0.1:$((BASE + 10 * (i - 1) + 2)),"
done
initial="${initial%,}"
for i in 1 2 3; do
  p=$((BASE + 10 * (i - 1)))
  "$TRIREME" server --node-id "n$i" --data-dir "$work/n$i" --http "127.0.0.1:$p" \
    --resp "127.0.0.1:$((p + 1))" --peer "127.0.0.1:$((p + 2))" \
    --initial-cluster "$initial" --shards "$SHARDS" >"$work/n$i.log" 2>&1 &
  pids+=($!)
done

# --- etcd: member i on client BASE+100+10(i-1), peer +1 -------------------------------------
cluster=""
for i in 1 2 3; do
  cluster+="e$i=http://127.0.0.1:$((BASE + 100 + 10 * (i - 1) + 1)),"
done
cluster="${cluster%,}"
for i in 1 2 3; do
  c=$((BASE + 100 + 10 * (i - 1)))
  "$ETCD" --name "e$i" --data-dir "$work/e$i" \
    --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c" \
    --listen-peer-urls "http://127.0.0.1:$((c + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((c + 1))" \
    --initial-cluster "$cluster" --initial-cluster-state new \
    --initial-cluster-token trireme-bench --enable-v2=true >"$work/e$i.log" 2>&1 &
  pids+=($!)
done

wait_for() { # URL [METHOD BODY]
  for _ in $(seq 1 240); do
    if curl -sf -o /dev/null -X "${2:-GET}" ${3:+-d "$3"} "$1"; then return 0; fi
    sleep 0.25
  done
  echo "timed out waiting for $1" >&2
  tail -n 20 "$work"/*.log >&2
  exit 1
}
for i in 1 2 3; do
  wait_for "http://127.0.0.1:$((BASE + 10 * (i - 1)))/v1/health"
  wait_for "http://127.0.0.1:$((BASE + 100 + 10 * (i - 1)))/v3/maintenance/status" POST '{}'
done
# Leaders move to their preferred replicas within a few seconds of start-up; let them settle.
sleep 6

key="key:000000000000" # the one key of the consul presets
slot="$(redis-cli -p $((BASE + 1)) cluster keyslot "$key")"
read -r t_leader t_follower < <(curl -s "http://127.0.0.1:$BASE/v1/cluster/shards" | python3 -c "
import json, sys
slot = int(sys.argv[1])
for s in json.load(sys.stdin)['shards']:
    if s['slots'][0] <= slot <= s['slots'][1]:
        leader = s['leader']['http']
        follower = next(r['http'] for r in s['replicas'] if r['http'] != leader)
        print(leader, follower)
" "$slot")
read -r e_leader e_follower _ < <(for i in 1 2 3; do
  c=$((BASE + 100 + 10 * (i - 1)))
  curl -s -X POST "http://127.0.0.1:$c/v3/maintenance/status" -d '{}' | python3 -c "
import json, sys
s = json.load(sys.stdin)
print(sys.argv[1], 'leader' if s['leader'] == s['header']['member_id'] else 'follower')
" "127.0.0.1:$c"
done | sort -k2 -r | awk '{printf "%s ", $1} END {print ""}')
echo "trireme: key $key slot $slot, leader $t_leader, follower $t_follower" >&2
echo "etcd:    leader $e_leader, follower $e_follower" >&2

# Waits (at most 30 s) until the six servers together use less than a tenth of a core, so
# background work left by one test (etcd's and Trireme's compactions after a write test) does
# not slow down the next one, whichever system that is.
settle() {
  local hz; hz="$(getconf CLK_TCK)"
  cpu() { for pid in "${pids[@]}"; do awk '{s += $14 + $15} END {print s + 0}' "/proc/$pid/stat" 2>/dev/null || echo 0; done | awk '{s += $1} END {print s}'; }
  for _ in $(seq 1 30); do
    local before after; before="$(cpu)"; sleep 1; after="$(cpu)"
    if [ $((after - before)) -lt $((hz / 10)) ]; then return 0; fi
  done
}

run() { # LABEL PRESET DRIVER TARGET [CONSISTENCY]
  settle
  local out
  out="$("$TRIREME" bench --preset "$2" --driver "$3" --target "http://$4" \
    --duration "$DURATION" --warmup "$WARMUP" ${5:+--consistency "$5"} --json 2>/dev/null)"
  python3 -c "
import json, sys
t = json.loads(sys.argv[2])['total']
print(f\"{sys.argv[1]:<28} {t['ops_per_sec']:>10.0f} {t['mean_us']/1000:>8.2f} {t['p50_us']/1000:>8.2f} {t['p99_us']/1000:>8.2f} {t['errors']:>7}\")
" "$1" "$out"
}

printf '%-28s %10s %8s %8s %8s %7s\n' test ops/s mean_ms p50_ms p99_ms errors
run "trireme PUT" consul-put consul "$t_leader"
run "etcd PUT" consul-put etcd "$e_leader"
run "trireme GET default" consul-get-default consul "$t_leader"
run "etcd GET serializable" consul-get-default etcd "$e_leader" stale
run "trireme GET stale" consul-get-stale consul "$t_follower"
run "etcd GET serializable@fol" consul-get-stale etcd "$e_follower" stale
run "trireme GET consistent" consul-get-consistent consul "$t_leader"
run "etcd GET linearizable" consul-get-consistent etcd "$e_leader" consistent

wrk_row() { # LABEL URL [BODY]  (a body makes it a PUT)
  settle
  local script="$work/wrk-$RANDOM.lua"
  : >"$script"
  if [ -n "${3:-}" ]; then
    printf 'wrk.method = "PUT"\nwrk.body = "%s"\nwrk.headers["Content-Type"] = "application/x-www-form-urlencoded"\n' "$3" >"$script"
  fi
  wrk -t2 -c64 -d"$DURATION" --latency -s "$script" "$2" 2>&1 | python3 bench/wrk_summary.py "$1"
}

value="$(head -c 36 /dev/zero | tr '\0' 'x')"
echo
printf '%-28s %10s %8s %8s %8s %7s\n' "wrk (${DURATION}, 64 conns)" ops/s mean_ms p50_ms p99_ms errors
wrk_row "trireme PUT" "http://$t_leader/v1/kv/$key" "$value"
wrk_row "etcd v2 PUT" "http://$e_leader/v2/keys/$key" "value=$value"
wrk_row "trireme GET default" "http://$t_leader/v1/kv/$key"
wrk_row "etcd v2 GET (leader)" "http://$e_leader/v2/keys/$key"
wrk_row "trireme GET stale" "http://$t_follower/v1/kv/$key?stale"
wrk_row "etcd v2 GET (follower)" "http://$e_follower/v2/keys/$key"
wrk_row "trireme GET consistent" "http://$t_leader/v1/kv/$key?consistent"
wrk_row "etcd v2 GET ?quorum=true" "http://$e_leader/v2/keys/$key?quorum=true"
