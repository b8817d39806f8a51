# Shared by the scripts that compare builds on a fresh 3-node cluster each (sourced, not
# run): bench/blocking-pops.sh, bench/big-delete.sh and bench/big-read.sh. Node i listens on
# 127.0.0.1 ports 17900+3(i-1) (HTTP), +1 (RESP) and +2 (peer). `servers` holds the PIDs of
# the nodes started, `helpers` any other process the script starts; both are stopped by PID
# at exit, and `work` (a temporary directory) is removed.

work=$(mktemp -d)
servers=()
helpers=()
cleanup() {
  for p in "${servers[@]}" "${helpers[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

initial="n1=127.0.0.1:17902,n2=127.0.0.1:17905,n3=127.0.0.1:17908"
http_of() { echo "http://127.0.0.1:$((17900 + 3 * ($1 - 1)))"; }
resp_of() { echo "$((17901 + 3 * ($1 - 1)))"; }

# The sum of one metric over the three nodes (a missing one counts as 0).
metric_sum() { # NAME
  local total=0 v
  for i in 1 2 3; do
    v=$(curl -sf "$(http_of "$i")/metrics" | awk -v m="$1" '$1 == m {print $2}')
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Starts three nodes of BINARY with their data under DIR (logs in DIR.log) and waits until
# each answers its health check. NODE_CONFIG, when set, names a config file they all read.
start_three() { # BINARY DIR
  servers=()
  for i in 1 2 3; do
    local base=$((17900 + 3 * (i - 1)))
    "$1" server --node-id "n$i" --data-dir "$2/n$i" --http "127.0.0.1:$base" \
      --resp "127.0.0.1:$((base + 1))" --peer "127.0.0.1:$((base + 2))" \
      --initial-cluster "$initial" ${NODE_CONFIG:+--config "$NODE_CONFIG"} --log warn \
      >>"$2.log" 2>&1 &
    servers+=($!)
  done
  for i in 1 2 3; do
    until curl -sf "$(http_of "$i")/v1/health" >/dev/null 2>&1; do sleep 0.2; done
  done
}

# Stops the nodes cleanly, one after the other.
stop_three() {
  for p in "${servers[@]}"; do kill -TERM "$p"; wait "$p" || true; done
  servers=()
}

# Writes to FILE, as raw RESP for `redis-cli --pipe`, HSET commands of 1,000 fields each that
# fill the hash {h}big with FIELDS fields.
write_hash_fill() { # FILE FIELDS
  python3 - "$2" >"$1" <<'EOF'
import sys
fields = int(sys.argv[1])
out = sys.stdout.buffer
def command(*args):
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
for start in range(0, fields, 1000):
    args = [b"HSET", b"{h}big"]
    for i in range(start, min(start + 1000, fields)):
        args += [b"field:%08d" % i, b"value-%d" % i]
    command(*args)
EOF
}

# Calls the script's `run BINARY` for each binary given, one after the other, with `n` set
# to its place (1, 2, ...): each run's files go under its own directory.
run_each() { # BINARY...
  n=0
  for binary in "$@"; do
    n=$((n + 1))
    run "$binary"
  done
}
