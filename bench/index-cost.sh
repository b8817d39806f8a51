#!/usr/bin/env bash
# What the search index costs a write, and how search scales with the collection:
#   1. bench/scenarios/index-cost-documents.toml and index-cost-opaque.toml, in turn: 60
#      workers PUT ~1 KB values over 100,000 keys, as JSON documents (every field indexed)
#      and as values that are not JSON (nothing to index), each against a fresh embedded
#      3-node cluster;
#   2. the orchestrate-production-mix preset at --keys 10000 and --keys 100000, to compare
#      search latency as the collection grows tenfold.
#
#   bench/index-cost.sh [DURATION]     (default 30s)
#
# Release build; every cluster is started and stopped by `trireme bench` itself. Results
# directories land under results/.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-30s}
cargo build --release --quiet -p trireme
bin=target/release/trireme
for kind in documents opaque; do
  echo "== PUT, $kind"
  "$bin" bench "bench/scenarios/index-cost-$kind.toml" --duration "$DURATION" --quiet |
    grep -E '^(op|put) '
done
for keys in 10000 100000; do
  echo "== orchestrate-production-mix, --keys $keys"
  "$bin" bench --preset orchestrate-production-mix --keys "$keys" --duration "$DURATION" \
    --warmup 10s --quiet | grep -E '^(op|get|put|delete|list|search|total) '
done
