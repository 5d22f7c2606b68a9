#!/usr/bin/env bash
# The flood tests (tests/binary/floods.rs) at full size (docs/RELIABILITY.md,
# "Floods"): 10,000 idle or half-open connections, 1,000 slow uploads at
# once, 1,000,000 distinct keys, a burst of 100,000 stale requests. Each
# prints what it measured. Override any size with its FLOOD_* variable.
set -euo pipefail
cd "$(dirname "$0")/.."
FLOOD_IDLE="${FLOOD_IDLE:-10000}" FLOOD_UPLOADS="${FLOOD_UPLOADS:-1000}" \
FLOOD_KEYS="${FLOOD_KEYS:-1000000}" FLOOD_STALE="${FLOOD_STALE:-100000}" \
  cargo test --release --test floods -- --nocapture --test-threads 1
