#!/usr/bin/env bash
# The test command (README, CI): installs the test dependencies (idempotent), checks
# formatting and lints, fuzzes the parsers briefly (FUZZ_SECONDS=60 per target, 0 to skip),
# and runs every test in the workspace against real processes on loopback. Prints cargo's
# test summary.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's start and the seconds spent so far: where a slow run spent its time.
step() { echo "== $1 (at $(date -u +%H:%M:%S), ${SECONDS} s in)"; }
step "test dependencies"
scripts/install-test-deps.sh
step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
mkdir -p target
# A short fuzz of the parsers (FUZZ_SECONDS each; 0 skips it). The soak: scripts/fuzz.sh 3600.
if [ "${FUZZ_SECONDS:-60}" != "0" ]; then
  step "fuzzing"
  scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
fi
step "tests"
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee target/test-output.txt
status=${PIPESTATUS[0]}
set -e
# One closing line over every test binary, for readers and CI.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1); if ($i ~ /^ignored/) s += $(i-1) } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' target/test-output.txt
step "done"
exit "$status"
