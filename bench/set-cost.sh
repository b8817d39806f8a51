#!/usr/bin/env bash
# Where issue 2's SET gap is, measured without a profiler: alternating runs of redis-benchmark
# SET (1 KiB values, 50 clients, one key) against redis-server with appendfsync always and
# against one or more trireme binaries, each server fresh for each run. Per run it prints
# requests/s and, from /proc and Trireme's /metrics, the server's CPU per SET, context
# switches per SET and SETs per fdatasync, and redis-benchmark's own CPU per SET; then the median
# of each, and each binary's median ratio to the Redis run of the same round (single runs on this
# shared machine swing by ±30%). "cores busy" is rate × (server + client CPU per SET): well under
# the machine's 2 cores means the loop is bound by its round trip (sync, wake-ups), not by CPU.
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
syncs() { # trireme only: fdatasync calls so far
  curl -s 127.0.0.1:17910/metrics | awk '/^trireme_storage_syncs_total/ {print $2}'
}

# one NAME: starts the server, warms up, measures one run; prints
# "rate cpu_us switches sets_per_sync client_cpu_us"
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
  local c0 s0 y0=0 c1 s1 y1=0 rate client
  c0=$(cpu_ticks $server); s0=$(switches $server)
  if [ "$1" != redis ]; then y0=$(syncs); fi
  # bash's `time` reports the benchmark's own user + system CPU seconds.
  { TIMEFORMAT='%3U %3S'; time redis-benchmark -p 17911 -t set -d 1024 -c 50 -n "$REQUESTS" \
    --csv >"$work/csv" 2>/dev/null; } 2>"$work/time"
  rate=$(awk -F'"' 'NR==2 {print $4}' "$work/csv")
  client=$(awk -v n="$REQUESTS" '{printf "%.1f", ($1 + $2) * 1e6 / n}' "$work/time")
  c1=$(cpu_ticks $server); s1=$(switches $server)
  if [ "$1" != redis ]; then y1=$(syncs); fi
  kill "$server"; wait "$server" 2>/dev/null || true; server=
  local ticks; ticks=$(getconf CLK_TCK)
  awk -v r="$rate" -v c=$((c1 - c0)) -v t="$ticks" -v s=$((s1 - s0)) -v y=$((y1 - y0)) -v n="$REQUESTS" \
    -v cl="$client" \
    'BEGIN { printf "%.0f %.1f %.2f %s %s\n", r, c / t * 1e6 / n, s / n, (y > 0 ? sprintf("%.1f", n / y) : "-"), cl }'
}

median() { sort -n | awk '{a[NR] = $1} END {print (NR ? a[int((NR + 1) / 2)] : "-")}'; }
m() { tr ' ' '\n' | grep -v '^$' | grep -v '^-$' | median; } # median of a space-separated list

declare -A rates cpus sws sps clients busy ratios
names=(redis "${bins[@]}")
printf '%-6s %-28s %9s %12s %14s %14s %14s %11s\n' round server 'SET/s' 'cpu us/SET' 'switches/SET' \
  'SETs/fdatasync' 'client us/SET' 'cores busy'
for round in $(seq "$ROUNDS"); do
  redis_rate=
  for name in "${names[@]}"; do
    one "$name" >"$work/run" # not in a subshell: the EXIT trap must see $server
    read -r rate cpu sw sp cl <"$work/run"
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
