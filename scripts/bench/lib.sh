# Helpers shared by scripts/bench.sh and scripts/bench/profile.sh (sourced
# after `cd` to the repository root). Set `log_prefix` first.
#
# Processes the scripts start go in `pids`; they are stopped on exit, then
# `cleanup_extra` runs (a script may redefine it).

pids=()
cleanup_extra() { :; }
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  cleanup_extra
}
trap cleanup EXIT

log() { printf '%s: %s\n' "${log_prefix:-bench}" "$*" >&2; }

wait_http() { # wait_http URL: until it answers 2xx, at most 30 s
  for _ in $(seq 300); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  log "nothing answers at $1"
  exit 1
}

field() { sed -n "s/.*[ ^]$1=\([0-9.]*\).*/\1/p" <<<" $2"; } # field NAME LINE
calc() { awk "BEGIN { printf \"$1\", $2 }"; }                # calc FORMAT EXPR
cpu_ticks() { # cpu_ticks PID: user + system clock ticks so far (all threads)
  awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

# Where cargo puts its output (CARGO_TARGET_DIR or .cargo/config may move it).
cargo_target_dir() {
  cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p'
}
