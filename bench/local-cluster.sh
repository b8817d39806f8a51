#!/usr/bin/env bash
# The main job: build Trireme, then rerun the Consul report's tests and YCSB-A with
# `trireme bench` against an embedded local cluster (3 real `trireme server` processes on
# loopback, started and stopped by `trireme bench` itself, since no --target is given).
#   bench/local-cluster.sh [DURATION]        (default 15s per test)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-15s}"
cargo build --release --locked -p trireme >&2
TRIREME="$PWD/target/release/trireme"
for preset in consul-put consul-get-default consul-get-stale consul-get-consistent; do
  echo "== $preset (driver trireme: each request goes to its shard's leader)"
  "$TRIREME" bench --preset "$preset" --driver trireme --duration "$DURATION" --warmup 3s
done
echo "== ycsb-a (50% reads, 50% updates, zipfian over 20k keys)"
"$TRIREME" bench --preset ycsb-a --driver trireme --keys 20000 --duration "$DURATION" --warmup 3s
