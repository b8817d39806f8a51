# Shared by the scripts that run two builds of Trireme side by side (read-cost.sh,
# write-cost.sh); sourced, not run. Expects BEFORE and AFTER (paths to trireme binaries) and
# gives: $work (a temporary directory), pids (stopped by PID on exit), start_one_node and
# cpu_ticks.
: "${BEFORE:?BEFORE=path to the first trireme binary}"
: "${AFTER:?AFTER=path to the second trireme binary}"
scripts/install-test-deps.sh
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

start_one_node() { # name binary http-port -> pid; RESP on http-port + 1, peer on + 2
  "$2" server --node-id n1 --data-dir "$work/$1" --http "127.0.0.1:$3" \
    --resp "127.0.0.1:$(($3 + 1))" --peer "127.0.0.1:$(($3 + 2))" --log warn >"$work/$1.log" 2>&1 &
  echo $!
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
