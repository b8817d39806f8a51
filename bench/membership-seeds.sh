#!/usr/bin/env bash
# Membership changes under faults, over many seeds: `trireme chaos` with a join, a drain and a
# replacement on 5 nodes and 8 shards, one split, 30 s of faults per seed, as an operator's
# run of new seeds would be. Needs root (network namespaces), iproute2, iptables and Go.
#
#   sudo bench/membership-seeds.sh FIRST COUNT     e.g. 9105 50
#
# Prints one line per seed (passed or failed, with the run's own reason) and a closing count;
# each seed's files are kept under chaos-results/membership-<FIRST>/ for the failed ones.
# About two to three minutes per seed on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
first=${1:?first seed}
count=${2:?number of seeds}
scripts/install-test-deps.sh
cargo build --release --quiet --locked -p trireme
out="$PWD/chaos-results/membership-$first"
mkdir -p "$out"
passed=0
failed=()
for seed in $(seq "$first" $((first + count - 1))); do
  started=$(date +%s)
  if target/release/trireme chaos --seed "$seed" --nodes 5 --shards 8 --membership --splits 1 \
    --duration 30s --out "$out/run-$seed" >"$out/seed-$seed.log" 2>&1; then
    passed=$((passed + 1))
    printf 'seed %s passed (%ss)\n' "$seed" $(($(date +%s) - started))
    rm -rf "$out/run-$seed"
  else
    failed+=("$seed")
    printf 'seed %s FAILED (%ss): %s\n' "$seed" $(($(date +%s) - started)) \
      "$(grep -E 'FAIL|failed|not healthy|finished: no' "$out/seed-$seed.log" | head -3 | tr '\n' ' ')"
  fi
done
printf '%d passed, %d failed%s\n' "$passed" "${#failed[@]}" \
  "${failed:+ (seeds ${failed[*]})}"
[ "${#failed[@]}" -eq 0 ]
