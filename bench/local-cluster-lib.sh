# Shared by bench/move.sh and bench/split.sh, and bench/scale.sh for its ports (sourced, not run): a local cluster on a free
# port range in a temporary directory, stopped with the script, and reading figures out of a
# `trireme bench` result.json.
#
# After `start_local_cluster NODES SHARDS RESULTS_DIR`: TRIREME (the release binary), WORK (a
# temporary directory, removed at exit), BASE (node i's HTTP port is BASE+10(i-1)) and
# TARGETS (`--target http://...` for every node) are set; at exit the cluster is stopped and
# the nodes' logs are copied to RESULTS_DIR.

# A base port with `nodes` nodes' ports (10 each) free on 127.0.0.1, below the ephemeral range.
free_base_port() { # NODES
  python3 - "$1" <<'EOF'
import random, socket, sys
span = 10 * int(sys.argv[1])
for _ in range(200):
    base = random.randrange(21000, 30000, 50)
    try:
        for port in range(base, base + span):
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
    except OSError:
        continue
    print(base)
    break
else:
    sys.exit("no free port range found")
EOF
}

start_local_cluster() { # NODES SHARDS RESULTS_DIR
  local nodes="$1" shards="$2"
  CLUSTER_RESULTS="$3"
  cargo build --release --locked -p trireme >&2
  TRIREME="${CARGO_TARGET_DIR:-$PWD/target}/release/trireme"
  WORK="$(mktemp -d)"
  BASE="$(free_base_port "$nodes")"
  "$TRIREME" cluster up --nodes "$nodes" --shards "$shards" --dir "$WORK/cluster" \
    --base-port "$BASE" >"$WORK/up.log" 2>&1 &
  UP=$!
  trap 'kill -TERM $UP 2>/dev/null || true; wait $UP 2>/dev/null || true; cp "$WORK"/cluster/*.log "$CLUSTER_RESULTS"/ 2>/dev/null || true; rm -rf "$WORK"' EXIT
  local state=""
  for _ in $(seq 1 300); do
    state="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"])' \
      "$WORK/cluster/cluster.json" 2>/dev/null || true)"
    [ "$state" = running ] && break
    sleep 0.2
  done
  [ "$state" = running ] || { cat "$WORK/up.log"; echo "the cluster did not start" >&2; exit 1; }
  TARGETS=()
  for ((i = 0; i < nodes; i++)); do TARGETS+=(--target "http://127.0.0.1:$((BASE + 10 * i))"); done
}

figure() { # RESULT.JSON EXPRESSION (over `r`, the run's result)
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['result']; print($2)" "$1"
}
