#!/usr/bin/env bash
# The shared-fences torture run, long (docs/SHARED.md, "Torture"): 3-member
# etcd, 3 gateways, the full nemesis, then the same clients over independent
# fences. TORTURE_HANDOVERS (default 5000) and TORTURE_SECONDS (a cap,
# default 900) size it; FENCEGATE_SEED replays its random choices.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
TORTURE_HANDOVERS="${TORTURE_HANDOVERS:-5000}" TORTURE_SECONDS="${TORTURE_SECONDS:-900}" \
  cargo test --test shared_torture -- --nocapture
