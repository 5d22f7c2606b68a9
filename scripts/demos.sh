#!/usr/bin/env bash
# Runs every demo with short settings and fails if one does not show what it
# claims (each exits non-zero then). Needs the lock servers from
# scripts/install-deps.sh. Usage: scripts/demos.sh [DEMO...]
set -uo pipefail
cd "$(dirname "$0")/.."

demos=("$@")
if [ "${#demos[@]}" -eq 0 ]; then
  demos=(gc_pause delayed_write late_write seal lost_update redis_lock redlock etcd_lock zookeeper_lock postgres_lock torture)
fi

cargo build --quiet --locked --examples
# Where cargo put them (CARGO_TARGET_DIR or .cargo/config may move target/).
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
passed=0
failed=0
failures=()
for demo in "${demos[@]}"; do
  args=()
  # ~30 s in all for the torture run, with and without fencegate.
  [ "$demo" = torture ] && args=(--duration 30)
  echo "== demo: $demo ${args[*]}"
  started=$SECONDS
  if timeout 300 "$target_dir/debug/examples/$demo" "${args[@]}"; then
    passed=$((passed + 1))
    echo "== demo $demo: showed what it claims ($((SECONDS - started)) s)"
  else
    failed=$((failed + 1))
    failures+=("$demo")
    echo "== demo $demo: FAILED ($((SECONDS - started)) s)"
  fi
done
[ "$failed" -eq 0 ] || echo "failed demos: ${failures[*]}"
echo "demos: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
