#!/usr/bin/env bash
# The network soak, long (docs/RELIABILITY.md, "Faults of the network"):
# three instances on shared fences, three etcd members, writes, collection
# DELETEs and reads, the network nemesis all along, for SOAK_SECONDS
# (default 3600); RSS, open descriptors, etcd leases and in-flight records
# at rest before and after. Needs root (network namespaces); FENCEGATE_SEED
# replays its random choices.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
SOAK_SECONDS="${SOAK_SECONDS:-3600}" \
  cargo test --test network_faults a_soak_under_network_faults_grows_nothing -- --nocapture
