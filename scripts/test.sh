#!/usr/bin/env bash
# The whole test suite, as CI runs it: `scripts/test.sh`.
# Installs what the tests need (scripts/install-deps.sh), then the cheap
# checks first (formatting, then the lints, which also type-check every
# target), one build of the test profile, every test (unit, property, doc,
# black-box), every demo against real lock servers (scripts/demos.sh), the
# library alone without the gateway's dependencies (and with shared fences
# alone), and each fuzz target for a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -x scripts/install-deps.sh ]; then
  scripts/install-deps.sh
fi

cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked
scripts/demos.sh
cargo build --locked --lib --no-default-features
cargo build --locked --lib --no-default-features --features etcd
# The fuzz targets, briefly (nightly; docs/RELIABILITY.md): each replays its
# committed corpus and explores for 12 s. scripts/fuzz.sh runs them long.
# (The benchmarks are type-checked by clippy --all-targets above;
# scripts/bench.sh builds and runs them.)
FUZZ_SECONDS=12 scripts/fuzz.sh
