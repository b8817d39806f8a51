#!/usr/bin/env bash
# What reads cost in two builds of Trireme, side by side in one run: two one-node servers
# (release binaries given as BEFORE and AFTER), each loaded with the same keys, then the same
# read loads against each in turn, twice (A B A B), so drift of a noisy machine shows.
#
#   BEFORE=/tmp/trireme-old AFTER=target/release/trireme bench/read-cost.sh [REQUESTS]
#
# Loads, with redis-benchmark (1 KiB values, 50 clients, -P 16): GET of random keys over
# 100,000; MGET of 10 random keys of one slot (one hash tag: one shard, one read); and
# `SCAN 0 COUNT 10`, a listing page of 10 rows. Prints requests/s and server CPU per request.
# Ports 17700-17712; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-200000}
. bench/two-builds-lib.sh
before=$(start_one_node before "$BEFORE" 17700)
pids+=("$before")
after=$(start_one_node after "$AFTER" 17710)
pids+=("$after")
for port in 17701 17711; do
  for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  # The keys the reads find: 100,000 random-key SETs and the tagged MGET keys.
  redis-benchmark -p "$port" -t set -d 1024 -c 50 -P 16 -n 200000 -r 100000 -q >/dev/null
  redis-benchmark -p "$port" -c 50 -P 16 -n 200000 -r 100000 -q \
    SET '{m}key:__rand_int__' "$(head -c 1024 /dev/zero | tr '\0' x)" >/dev/null
done

ticks=$(getconf CLK_TCK)
measure() { # pid requests command... -> "rate cpu_us_per_request"
  local pid=$1 n=$2 c0 c1 rate
  shift 2
  c0=$(cpu_ticks "$pid")
  rate=$("$@")
  c1=$(cpu_ticks "$pid")
  awk -v r="$rate" -v c=$((c1 - c0)) -v t="$ticks" -v n="$n" \
    'BEGIN { printf "%.0f %.1f\n", r, c / t * 1e6 / n }'
}
get_load() { # port
  redis-benchmark -p "$1" -t get -d 1024 -c 50 -P 16 -n "$REQUESTS" -r 100000 --csv 2>/dev/null |
    awk -F'"' 'NR==2 {print $4}'
}
mget_load() { # port
  local keys=()
  for _ in $(seq 10); do keys+=('{m}key:__rand_int__'); done
  redis-benchmark -p "$1" -c 50 -P 16 -n "$REQUESTS" -r 100000 --csv MGET "${keys[@]}" 2>/dev/null |
    awk -F'"' 'NR==2 {print $4}'
}
scan_load() { # port: a page of 10 keys from the start of the first shard (a listing)
  redis-benchmark -p "$1" -c 50 -P 16 -n "$REQUESTS" --csv SCAN 0 COUNT 10 2>/dev/null |
    awk -F'"' 'NR==2 {print $4}'
}

printf '%-6s %-7s %12s %14s\n' load build 'requests/s' 'server cpu us'
for round in 1 2; do
  for load in get mget scan; do
    for build in before after; do
      if [ $build = before ]; then pid=$before port=17701; else pid=$after port=17711; fi
      read -r rate cpu < <(measure "$pid" "$REQUESTS" "${load}_load" "$port")
      printf '%-6s %-7s %12s %14s   (round %s)\n' "$load" "$build" "$rate" "$cpu" "$round"
    done
  done
done
