#!/usr/bin/env bash
# The test command (README, CI): installs the test dependencies (idempotent), checks
# formatting and lints, fuzzes the parsers briefly (FUZZ_SECONDS=60 per target, 0 to skip),
# and runs every test in the workspace against real processes on loopback. Prints cargo's
# test summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
mkdir -p target
# A short fuzz of the parsers (FUZZ_SECONDS each; 0 skips it). The soak: scripts/fuzz.sh 3600.
if [ "${FUZZ_SECONDS:-60}" != "0" ]; then
  scripts/fuzz.sh "${FUZZ_SECONDS:-60}"
fi
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee target/test-output.txt
status=${PIPESTATUS[0]}
set -e
# One closing line over every test binary, for readers and CI.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1); if ($i ~ /^ignored/) s += $(i-1) } }
     END { printf "%d passed, %d failed, %d skipped\n", p, f, s }' target/test-output.txt
exit "$status"
