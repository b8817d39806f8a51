#!/usr/bin/env bash
# The web console's figures (docs/benchmarks.md, "Web console"): on a fresh local 3-node
# cluster, the overview's page load in headless chromium; the shards view of 1,000 shards on
# 50 nodes, its JSON synthesized by bench/console.py on loopback ports (a real cluster of
# that size does not fit two cores); and each node's CPU over SECONDS with no page open, with
# the overview open and with the live figures open. Installs chromium and chromedriver
# (scripts/install-test-deps.sh); stops what it started by PID.
#
#   bench/console.sh [LOADS] [SECONDS]      # default 10 loads, 60 s per CPU window
#   BINARY=target/debug/trireme bench/console.sh   # another build (default: release, built here)
set -euo pipefail
cd "$(dirname "$0")/.."
loads=${1:-10}
seconds=${2:-60}
scripts/install-test-deps.sh
binary=${BINARY:-target/release/trireme}
if [ -z "${BINARY:-}" ]; then cargo build --release --locked -p trireme; fi
# shellcheck source=bench/three-nodes-lib.sh
. bench/three-nodes-lib.sh

start_three "$binary" "$work/data"
echo "== $(date -u +%FT%TZ), $binary, $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p')"
python3 bench/console.py --node "$(http_of 1)" --node "$(http_of 2)" --node "$(http_of 3)" \
  --pid "${servers[0]}" --pid "${servers[1]}" --pid "${servers[2]}" \
  --loads "$loads" --seconds "$seconds"
stop_three
