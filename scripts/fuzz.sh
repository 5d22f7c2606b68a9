#!/usr/bin/env bash
# Coverage-guided fuzzing of fencegate (fuzz/, libFuzzer through cargo fuzz,
# nightly toolchain; docs/RELIABILITY.md): each target runs from its corpus
# in fuzz/corpus/TARGET, which it grows. A crash stops the run (non-zero
# exit) and leaves its input in fuzz/artifacts/TARGET/.
#
#   scripts/fuzz.sh [TARGET...]              FUZZ_RUNS executions each (10 million)
#   FUZZ_SECONDS=5 scripts/fuzz.sh           the short form CI runs: 5 s each,
#                                            every target in one build without
#                                            AddressSanitizer (FUZZ_SANITIZE=1:
#                                            with it, as the long runs)
#   FUZZ_FORK=2 scripts/fuzz.sh signatures   the runs shared by two worker
#                                            processes (libFuzzer's -fork)
#
# Installs cargo-fuzz from crates.io if it is missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(token key admin admission layer http1_requests http1_responses signatures config_file s3_xml copy_source)
if [ -n "${FUZZ_SECONDS:-}" ]; then
  limit=(-max_total_time="$FUZZ_SECONDS")
  what="${FUZZ_SECONDS}s"
else
  limit=(-runs="${FUZZ_RUNS:-10000000}")
  what="${FUZZ_RUNS:-10000000} runs"
fi

rustup toolchain list | grep -q '^nightly' ||
  { echo "fuzz: needs the nightly toolchain (rustup toolchain install nightly)" >&2; exit 1; }
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target"
  echo "== fuzz $target: $what"
  # The corpus grows only in long runs: CI replays and explores, then
  # leaves the committed corpus as it was.
  corpus="corpus/$target"
  if [ -n "${FUZZ_SECONDS:-}" ]; then
    corpus=$(mktemp -d)
    cp -r "corpus/$target/." "$corpus/"
  fi
  log=$(mktemp)
  status=0
  # An admission schedule of 100 steps (3 bytes each) reaches every state
  # a longer one does, at a fraction of the cost per run.
  max_len=4096
  sanitizer=address
  if [ "$target" = admission ]; then
    max_len=300
    # The admission target is safe Rust over safe Rust (the crate denies
    # unsafe code): AddressSanitizer finds nothing there and costs 4x the
    # executions (2,000/s against 7,300/s here).
    sanitizer=none
  fi
  if [ "$target" = copy_source ]; then
    # A pure parser in safe Rust (the crate denies unsafe code), and its
    # oracles: as for admission, the sanitizer would find nothing and cost
    # most of the executions.
    sanitizer=none
  fi
  features=()
  if [ "$target" = config_file ]; then
    # check-config's loader needs the gateway's dependency tree, built for
    # this target only (fuzz/Cargo.toml's feature gateway). Safe Rust over
    # clap, toml and the gateway's own checks: as for admission, the
    # sanitizer would find nothing and cost executions.
    features=(--features gateway)
    sanitizer=none
  fi
  if [ -n "${FUZZ_SECONDS:-}" ] && [ -z "${FUZZ_SANITIZE:-}" ]; then
    # The short form (CI): every target in one build, the one config_file
    # needs. Three flavours (AddressSanitizer, none, none with the
    # gateway's tree) were three release builds, five of the suite's eight
    # minutes of fuzzing on a clean clone. The crate denies unsafe code,
    # so the sanitizer watches only dependencies here; the long runs keep
    # it (and FUZZ_SANITIZE=1 keeps it in a short one).
    features=(--features gateway)
    sanitizer=none
  fi
  fork=()
  [ -z "${FUZZ_FORK:-}" ] || fork=(-fork="$FUZZ_FORK")
  # The run's temporary files (config_file writes its configuration and a
  # secret file there) in a folder of its own, removed after.
  scratch=$(mktemp -d)
  TMPDIR="$scratch" cargo +nightly fuzz run -O -s "$sanitizer" "${features[@]}" "$target" "$corpus" -- \
    "${limit[@]}" "${fork[@]}" -max_len="$max_len" -print_final_stats=1 >"$log" 2>&1 || status=$?
  rm -rf "$scratch"
  grep -E 'INITED|DONE|stat::number_of_executed_units|SUMMARY|panicked|ERROR|fuzzed for|exiting' "$log" || true
  # Fork mode reports its total in its last status line ("#N: cov: ...").
  [ -z "${FUZZ_FORK:-}" ] || grep -E '^#[0-9]+: ' "$log" | tail -1 || true
  [ "$status" -eq 0 ] || tail -40 "$log"
  rm -f "$log"
  if [ -n "${FUZZ_SECONDS:-}" ]; then rm -rf "$corpus"; fi
  [ "$status" -eq 0 ] || { echo "== fuzz $target: FAILED (exit $status)"; exit 1; }
done
