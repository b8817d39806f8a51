#!/usr/bin/env bash
# Durability under load across many kill -9 cycles: `trireme chaos` on 3 nodes with only the
# kill faults (`kill`: one node; `kill-all`: every node at once), CYCLES faults in one seed, its
# clients writing throughout. The run checks that every acknowledged write is read back, that
# the history is linearizable (single keys, transactions, locks) and that the replicas agree at
# the end. CI runs a bounded slice of the same (the chaos tests with kill faults); this is the
# long run. Needs root (network namespaces), iproute2, iptables and Go.
#
#   bench/kill-cycles.sh [CYCLES] [SEED]      default 100 cycles, seed 9400
#
# About 4 s per cycle on 2 cores. The run's files stay under chaos-results/kill-cycles-SEED/.
set -euo pipefail
cd "$(dirname "$0")/.."
cycles=${1:-100}
seed=${2:-9400}
scripts/install-test-deps.sh
cargo build --release --quiet --locked -p trireme
out="$PWD/chaos-results/kill-cycles-$seed"
rm -rf "$out"
target/release/trireme chaos --seed "$seed" --nodes 3 --shards 4 --faults kill,kill-all \
  --fault-count "$cycles" --out "$out"
