#!/usr/bin/env bash
# Where the SET gap to Redis is, measured without a profiler: alternating runs of redis-benchmark
# SET (1 KiB values, 50 clients, one key) against redis-server with appendfsync always and
# against one or more trireme binaries, each server fresh for each run. Per run it prints
# requests/s and, from /proc and Trireme's /metrics, the server's CPU per SET, context
# switches per SET and SETs per fdatasync, and redis-benchmark's own CPU per SET; then the median
# of each, and each binary's median ratio to the Redis run of the same round (single runs on this
# shared machine swing by ±30%). "cores busy" is rate × (server + client CPU per SET): well under
# the machine's 2 cores means the loop is bound by its round trip (sync, wake-ups), not by CPU.
# A last table splits each Trireme entry's time into the write path's steps, from /metrics:
# writers per entry, gathering them, and from proposing to the result (commit), which covers
# the append, the wait for group commit, the fdatasync and the apply (each also shown, as a
# mean per call: with one key, one call per entry). With one key every entry goes through one
# shard, one after another, so an entry's cycle is writers / rate, and "between" = cycle -
# gather - commit is the time from an entry's result to its successor's first writer (the
# replies going out, the client's turn, the reads), unless writers queued during the commit:
# then the next gather starts at once and the client's turn falls into "gather".
#
#   bench/set-cost.sh [ROUNDS] [TRIREME_BINARY...]
#       ROUNDS defaults to 5; binaries default to a fresh release build of this checkout.
#       REQUESTS=100000 per run. Compare two builds: copy one binary aside, rebuild, pass both.
#
# Uses loopback ports 17910-17912; everything it starts is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
shift || true
REQUESTS=${REQUESTS:-100000}
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  scripts/install-test-deps.sh
  cargo build --release --quiet -p trireme
  bins=(target/release/trireme)
fi
work=$(mktemp -d)
server=
cleanup() { if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi; rm -rf "$work"; }
trap cleanup EXIT

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
switches() { awk '/ctxt_switches/ {n += $2} END {print n}' /proc/"$1"/task/*/status 2>/dev/null; }
metrics() { curl -s 127.0.0.1:17910/metrics >"$1"; } # trireme only
# delta NAME: how far counter NAME moved between $work/m0 and $work/m1. A time that an older
# build (before a6c65a6) reports as `_micros_total` is read from that name, in seconds.
delta() {
  awk -v n="$1" -v old="${1/_seconds_total/_micros_total}" \
    '$1 == n {v[FILENAME] = $2} old != n && $1 == old {v[FILENAME] = $2 / 1e6}
     END {printf "%.6f\n", v[ARGV[2]] - v[ARGV[1]]}' "$work/m0" "$work/m1"
}
# phases: per-entry means of the write path's steps over the run (see the header)
phases() {
  local entries; entries=$(delta trireme_raft_entries_proposed_total)
  awk -v e="$entries" -v w="$(delta trireme_raft_writers_proposed_total)" \
    -v g="$(delta trireme_raft_gather_seconds_total)" -v c="$(delta trireme_raft_commit_seconds_total)" \
    -v cn="$(delta trireme_raft_entries_completed_total)" \
    -v a="$(delta trireme_storage_log_append_seconds_total)" -v an="$(delta trireme_storage_log_appends_total)" \
    -v q="$(delta trireme_storage_sync_wait_seconds_total)" -v qn="$(delta trireme_storage_sync_requests_total)" \
    -v y="$(delta trireme_storage_sync_seconds_total)" -v yn="$(delta trireme_storage_syncs_total)" \
    -v p="$(delta trireme_storage_apply_seconds_total)" -v pn="$(delta trireme_storage_applies_total)" \
    'function per(x, n) { return n > 0 ? sprintf("%.0f", x * 1e6 / n) : "-" }
     BEGIN { printf "%s %s %s %s %s %s %s\n", (e > 0 ? sprintf("%.1f", w / e) : "-"), per(g, e),
       per(c, cn), per(a, an), per(q, qn), per(y, yn), per(p, pn) }'
}

# one NAME: starts the server, warms up, measures one run; prints
# "rate cpu_us switches sets_per_sync client_cpu_us", then the phases (all "-" for redis)
one() {
  rm -rf "$work/data"
  mkdir -p "$work/data"
  if [ "$1" = redis ]; then
    redis-server --port 17911 --dir "$work/data" --appendonly yes --appendfsync always \
      --save '' >"$work/server.log" 2>&1 &
  else
    "$1" server --node-id n1 --data-dir "$work/data/t" --http 127.0.0.1:17910 \
      --resp 127.0.0.1:17911 --peer 127.0.0.1:17912 --log warn >"$work/server.log" 2>&1 &
  fi
  server=$!
  for _ in $(seq 100); do redis-cli -p 17911 ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-benchmark -p 17911 -t set -d 1024 -c 50 -n 5000 -q >/dev/null 2>&1
  local c0 s0 y=0 c1 s1 rate client means='- - - - - - -'
  c0=$(cpu_ticks $server); s0=$(switches $server)
  if [ "$1" != redis ]; then metrics "$work/m0"; fi
  # bash's `time` reports the benchmark's own user + system CPU seconds.
  { TIMEFORMAT='%3U %3S'; time redis-benchmark -p 17911 -t set -d 1024 -c 50 -n "$REQUESTS" \
    --csv >"$work/csv" 2>/dev/null; } 2>"$work/time"
  rate=$(awk -F'"' 'NR==2 {print $4}' "$work/csv")
  client=$(awk -v n="$REQUESTS" '{printf "%.1f", ($1 + $2) * 1e6 / n}' "$work/time")
  c1=$(cpu_ticks $server); s1=$(switches $server)
  if [ "$1" != redis ]; then
    metrics "$work/m1"
    y=$(delta trireme_storage_syncs_total)
    means=$(phases)
  fi
  kill "$server"; wait "$server" 2>/dev/null || true; server=
  local ticks; ticks=$(getconf CLK_TCK)
  awk -v r="$rate" -v c=$((c1 - c0)) -v t="$ticks" -v s=$((s1 - s0)) -v y="$y" -v n="$REQUESTS" \
    -v cl="$client" -v means="$means" \
    'BEGIN { printf "%.0f %.1f %.2f %s %s %s\n", r, c / t * 1e6 / n, s / n, (y > 0 ? sprintf("%.1f", n / y) : "-"), cl, means }'
}

median() { sort -n | awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : "-")}'; }
m() { tr ' ' '\n' | grep -v '^$' | grep -v '^-$' | median; } # median of a space-separated list

declare -A rates cpus sws sps clients busy ratios
declare -A per_entry # name,step -> values of that step over the rounds
steps=(writers gather commit append sync-wait fdatasync apply)
names=(redis "${bins[@]}")
printf '%-6s %-28s %9s %12s %14s %14s %14s %11s\n' round server 'SET/s' 'cpu us/SET' 'switches/SET' \
  'SETs/fdatasync' 'client us/SET' 'cores busy'
for round in $(seq "$ROUNDS"); do
  redis_rate=
  for name in "${names[@]}"; do
    one "$name" >"$work/run" # not in a subshell: the EXIT trap must see $server
    read -r -a fields <"$work/run"
    rate=${fields[0]} cpu=${fields[1]} sw=${fields[2]} sp=${fields[3]} cl=${fields[4]}
    for i in "${!steps[@]}"; do per_entry[$name,${steps[$i]}]+="${fields[$((i + 5))]} "; done
    per_entry[$name,between]+="$(awk -v r="$rate" -v w="${fields[5]}" -v g="${fields[6]}" \
      -v c="${fields[7]}" 'BEGIN { if (w == "-" || r == 0) print "-"; else printf "%.0f", w / r * 1e6 - g - c }') "
    cores=$(awk -v r="$rate" -v a="$cpu" -v b="$cl" 'BEGIN {printf "%.2f", r * (a + b) / 1e6}')
    printf '%-6s %-28s %9s %12s %14s %14s %14s %11s\n' "$round" "$name" "$rate" "$cpu" "$sw" "$sp" \
      "$cl" "$cores"
    rates[$name]+="$rate "; cpus[$name]+="$cpu "; sws[$name]+="$sw "; sps[$name]+="$sp "
    clients[$name]+="$cl "; busy[$name]+="$cores "
    if [ "$name" = redis ]; then redis_rate=$rate; else
      ratios[$name]+="$(awk -v a="$rate" -v b="$redis_rate" 'BEGIN {printf "%.3f", a / b}') "
    fi
  done
done
echo
printf '%-28s %9s %12s %14s %14s %14s %11s %16s\n' 'median of each' 'SET/s' 'cpu us/SET' \
  'switches/SET' 'SETs/fdatasync' 'client us/SET' 'cores busy' 'ratio to redis'
for name in "${names[@]}"; do
  ratio=-
  if [ "$name" != redis ]; then ratio=$(echo "${ratios[$name]}" | m); fi
  printf '%-28s %9s %12s %14s %14s %14s %11s %16s\n' "$name" "$(echo "${rates[$name]}" | m)" \
    "$(echo "${cpus[$name]}" | m)" "$(echo "${sws[$name]}" | m)" "$(echo "${sps[$name]}" | m)" \
    "$(echo "${clients[$name]}" | m)" "$(echo "${busy[$name]}" | m)" "$ratio"
done
echo
echo 'per Trireme log entry (medians; microseconds except writers; commit = propose to result)'
printf '%-28s' ''; printf ' %10s' "${steps[@]}" between; echo
for name in "${bins[@]}"; do
  printf '%-28s' "$name"
  for step in "${steps[@]}" between; do printf ' %10s' "$(echo "${per_entry[$name,$step]}" | m)"; done
  echo
done
