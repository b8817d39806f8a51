#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60), starting from the corpus kept in
# fuzz/corpus/. Needs the nightly toolchain; installs cargo-fuzz if it is missing.
#   scripts/fuzz.sh [SECONDS]        (CI: 30; a longer soak: scripts/fuzz.sh 3600)
# FUZZ_FLAGS go to `cargo fuzz run`. By default the targets are optimized and run under
# AddressSanitizer, which is what a soak wants; CI passes `--dev -s none`, which builds in a
# third of the time and still replays the corpus and explores for its half minute per target.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: SKIPPED, no nightly toolchain on this machine (cargo-fuzz needs it)" >&2
  exit 0
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
cd fuzz
for target in resp_decode stored_values peer_frames http_query search_query acl_rules; do
  mkdir -p "target/corpus/$target"
  # shellcheck disable=SC2086 # FUZZ_FLAGS is a list of flags
  cargo +nightly fuzz run ${FUZZ_FLAGS:-} "$target" "target/corpus/$target" "corpus/$target" -- \
    -max_total_time="$SECONDS_EACH" -max_len=4096 -print_final_stats=1 2>&1 | tail -n 12
done
# CI keeps the corpus it grew but not the sanitizer builds: they are gigabytes of disk the
# workspace's own build needs next.
if [ "${FUZZ_DROP_BUILDS:-0}" = 1 ]; then
  find target -mindepth 1 -maxdepth 1 ! -name corpus -exec rm -rf {} +
fi
