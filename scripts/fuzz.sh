#!/usr/bin/env bash
# Coverage-guided fuzzing of fencegate (fuzz/, libFuzzer through cargo fuzz,
# nightly toolchain): each target runs RUNS executions (default 10 million)
# from its corpus in fuzz/corpus/TARGET, which it grows. A crash stops the
# run and leaves its input in fuzz/artifacts/TARGET/.
#
#   scripts/fuzz.sh [TARGET...]        FUZZ_RUNS=10000000 by default
#
# Installs cargo-fuzz from crates.io if it is missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

runs=${FUZZ_RUNS:-10000000}
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(token key admission)

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target"
  echo "== fuzz $target: $runs runs"
  cargo +nightly fuzz run -O "$target" "corpus/$target" -- \
    -runs="$runs" -print_final_stats=1 2>&1 | grep -E 'INITED|DONE|stat::|SUMMARY|panicked|Done'
done
