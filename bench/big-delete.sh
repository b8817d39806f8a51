#!/usr/bin/env bash
# What deleting one big hash costs: a 3-node cluster is given one hash of FIELDS fields
# (default 1,000,000), then DEL removes it while a writer keeps setting small keys. Reports
# the DEL's latency as the client sees it, the slowest write of the writer during the DEL,
# each server's peak RSS before and after, and (on builds that purge in the background) how
# long until every node purged the rows, and (on builds that count them) the slowest batch
# each node applied from the DEL on. Run on each build given, one after the other, each on
# a fresh cluster.
#
#   bench/big-delete.sh BINARY [BINARY...]      e.g. /tmp/trireme-before target/release/trireme
#
# NODE_CONFIG=FILE gives the nodes a config file (e.g. one setting [storage] purge_rows_per_sec).
#
# Ports 17900-17908; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
scripts/install-test-deps.sh >/dev/null
FIELDS=${FIELDS:-1000000}
. bench/three-nodes-lib.sh
peak_rss_mb() { awk '/VmHWM/ {printf "%d", $2 / 1024}' "/proc/$1/status"; }
# Node I's histogram of apply batch times as "bound count" lines, cumulative (nothing on
# builds without it).
batch_buckets() { # I
  curl -sf "$(http_of "$1")/metrics" |
    awk -F'[" ]' '/^trireme_storage_apply_batch_seconds_bucket/ {print $2, $NF}'
}
# From two such files: how many batches applied between them, and the bound under which
# the slowest of them took ("<= 0.01 s").
slowest_batch() { # BEFORE AFTER
  paste -d' ' "$1" "$2" | awk '
    { le[NR] = $1; grew[NR] = $4 - $2 }
    END {
      if (NR == 0) { print "n/a"; exit }
      for (i = 1; i <= NR; i++) if (grew[i] == grew[NR]) { print grew[NR] " batches, slowest <= " le[i] " s"; exit }
    }'
}

write_hash_fill "$work/fill.resp" "$FIELDS"

run() { # binary
  local binary=$1 dir="$work/run$n"
  start_three "$binary" "$dir"
  redis-cli -p "$(resp_of 1)" --pipe <"$work/fill.resp" >/dev/null
  local len
  len=$(redis-cli -p "$(resp_of 1)" HLEN '{h}big')
  local before=() after=()
  for p in "${servers[@]}"; do before+=("$(peak_rss_mb "$p")"); done
  # A writer of small keys on the same shard ({h}), one at a time: its slowest write is what
  # the DEL made others wait.
  python3 - "$(resp_of 2)" "$dir.writer" <<'EOF' &
import socket, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", port))
worst, n, end = 0.0, 0, time.time() + 20
while time.time() < end:
    t = time.perf_counter()
    s.sendall(b"*3\r\n$3\r\nSET\r\n$8\r\n{h}small\r\n$1\r\nx\r\n")
    reply = b""
    while not reply.endswith(b"\r\n"):
        more = s.recv(64)
        if not more:
            sys.exit("the writer's connection closed after %r" % reply)
        reply += more
    if reply != b"+OK\r\n":
        sys.exit("the writer's SET answered %r" % reply)
    worst = max(worst, time.perf_counter() - t)
    n += 1
open(out, "w").write("%d %.1f\n" % (n, worst * 1000))
EOF
  writer=$!
  helpers+=("$writer")
  for i in 1 2 3; do batch_buckets "$i" >"$dir.batches-start-$i"; done
  sleep 2
  local t0 t1 deleted quiet=()
  for i in 1 2 3; do
    batch_buckets "$i" >"$dir.batches-before-$i"
    quiet+=("n$i $(slowest_batch "$dir.batches-start-$i" "$dir.batches-before-$i");")
  done
  t0=$(now_ms)
  deleted=$(redis-cli -p "$(resp_of 3)" DEL '{h}big')
  t1=$(now_ms)
  local purged="n/a"
  # grep reads every line: with pipefail, grep -q quitting early can fail curl's write.
  if curl -sf "$(http_of 1)/metrics" | grep '^trireme_collection_purged_rows_total' >/dev/null; then
    # Every node purges every row (the hash's fields), at most 10 minutes.
    until [ "$(metric_sum trireme_collection_purged_rows_total)" -ge $((3 * FIELDS)) ]; do
      [ $(($(now_ms) - t0)) -lt 600000 ] || { purged="not within 10 minutes"; break; }
      sleep 0.05
    done
    [ "$purged" != "n/a" ] || purged="$(($(now_ms) - t0)) ms"
  fi
  wait "$writer"
  helpers=()
  local batches=()
  for i in 1 2 3; do
    batch_buckets "$i" >"$dir.batches-after-$i"
    batches+=("n$i $(slowest_batch "$dir.batches-before-$i" "$dir.batches-after-$i");")
  done
  for p in "${servers[@]}"; do after+=("$(peak_rss_mb "$p")"); done
  local writes worst
  read -r writes worst <"$dir.writer"
  echo "$binary: HLEN $len, DEL answered $deleted after $((t1 - t0)) ms; writer: $writes SETs in 20 s, slowest ${worst} ms; peak RSS MB before/after DEL: ${before[*]} / ${after[*]}; rows purged on every node after $purged; apply batches in the writer's 2 s before the DEL: ${quiet[*]} from the DEL to the writer's end: ${batches[*]}"
  stop_three
}

run_each "$@"
