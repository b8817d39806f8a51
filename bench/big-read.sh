#!/usr/bin/env bash
# What reading one big hash whole costs: a 3-node cluster is given one hash of FIELDS fields
# (default 1,000,000), then HGETALL reads it, once through the node that leads its shard and
# once through a node that forwards it there. Reports, for each read, the time to the first
# byte and to the last, the reply's size, and how far each node's resident memory rose above
# where it stood before the read (sampled every 10 ms). Run on each build given, one after
# the other, each on a fresh cluster; `[limits] max_collection_read` is raised past FIELDS.
#
#   bench/big-read.sh BINARY [BINARY...]      e.g. target/release/trireme
#
# Ports 17900-17908; everything it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
scripts/install-test-deps.sh >/dev/null
FIELDS=${FIELDS:-1000000}
. bench/three-nodes-lib.sh

write_hash_fill "$work/fill.resp" "$FIELDS"

# The node (1-3) that leads the shard of slot SLOT.
leader_of_slot() { # SLOT
  curl -sf "$(http_of 1)/v1/cluster/shards" | python3 -c '
import json, sys
slot = int(sys.argv[1])
doc = json.load(sys.stdin)
for s in doc["shards"]:
    if s["slots"][0] <= slot <= s["slots"][1]:
        print(s["leader"]["name"][1:])
' "$1"
}

# One HGETALL of {h}big on PORT while every server's RSS is sampled: prints
# "first-byte-ms last-byte-ms bytes rss-rise-MB-per-node".
read_once() { # PORT
  python3 - "$1" "$FIELDS" "${servers[@]}" <<'EOF'
import socket, sys, threading, time
port, fields, pids = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
def rss_kb(pid):
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
base = [rss_kb(p) for p in pids]
peak = list(base)
done = threading.Event()
def sample():
    while not done.is_set():
        for i, p in enumerate(pids):
            peak[i] = max(peak[i], rss_kb(p))
        time.sleep(0.01)
sampler = threading.Thread(target=sample)
sampler.start()
s = socket.create_connection(("127.0.0.1", port))
want = 1 + 4 * fields  # the array header, then a length line and a payload line per string
t0 = time.perf_counter()
s.sendall(b"*2\r\n$7\r\nHGETALL\r\n$6\r\n{h}big\r\n")
first, lines, size, tail = None, 0, 0, b""
while lines < want:
    chunk = s.recv(1 << 20)
    if not chunk:
        sys.exit("the connection closed after %d bytes" % size)
    if first is None:
        first = time.perf_counter()
        if chunk.startswith(b"-"):
            sys.exit("HGETALL answered %r" % chunk[:200])
    size += len(chunk)
    lines += chunk.count(b"\n")  # a CRLF may be cut between two chunks
last = time.perf_counter()
done.set()
sampler.join()
rise = " ".join("%d" % ((p - b) / 1024) for p, b in zip(peak, base))
print("%.0f %.0f %d %s" % ((first - t0) * 1000, (last - t0) * 1000, size, rise))
EOF
}

# Each read on freshly started nodes, so that memory one read freed does not hide what the
# next one takes.
run() { # binary
  local binary=$1 dir="$work/run$n"
  mkdir -p "$dir"
  printf '[limits]\nmax_collection_read = %d\n' $((FIELDS + 1)) >"$dir/config.toml"
  NODE_CONFIG="$dir/config.toml"
  start_three "$binary" "$dir"
  redis-cli -p "$(resp_of 1)" --pipe <"$work/fill.resp" >/dev/null
  local len slot
  len=$(redis-cli -p "$(resp_of 1)" HLEN '{h}big')
  slot=$(redis-cli -p "$(resp_of 1)" CLUSTER KEYSLOT '{h}big')
  echo "$binary: HLEN $len"
  for what in "on its leader" "forwarded"; do
    stop_three
    start_three "$binary" "$dir"
    # A read waits for the shard to have a leader, and the first one loads the hash.
    redis-cli -p "$(resp_of 1)" HLEN '{h}big' >/dev/null
    local leader at first last size r1 r2 r3
    leader=$(leader_of_slot "$slot")
    at=$leader
    [ "$what" = "on its leader" ] || at=$((leader % 3 + 1))
    read -r first last size r1 r2 r3 <<<"$(read_once "$(resp_of "$at")")"
    echo "  $what (asked of n$at, leader n$leader): first byte ${first} ms, last ${last} ms, $((size / 1048576)) MiB; RSS rise MB n1 n2 n3: $r1 $r2 $r3"
  done
  stop_three
}

run_each "$@"
