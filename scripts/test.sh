#!/usr/bin/env bash
# The whole test suite, as CI runs it: `scripts/test.sh`.
# Installs what the tests need (scripts/install-deps.sh), then the cheap
# checks first (formatting, then the lints, which also type-check every
# target), one build of the test profile, every test (unit, property, doc,
# black-box), the Python client kit's tests, every demo against real lock
# servers (scripts/demos.sh), the library alone type-checked without the
# gateway's dependencies (and with shared fences alone, ...), and each fuzz
# target for a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

# A full disk fails far from its cause (pip's OSError, a linker's), so say
# it first: a clean run needs about 6 GiB (a clean clone's whole tree was
# 5.3 GB with incremental state, which CI now skips), less what the target
# dir holds already.
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target"
need_kib=$((6 * 1024 * 1024 - $(du -sk "$target" | cut -f1)))
free_kib=$(df -Pk "$target" | awk 'NR == 2 { print $4 }')
if [ "$free_kib" -lt "$need_kib" ]; then
  echo "test.sh: $((free_kib / 1024)) MiB free on the disk of $target, and the" \
    "suite needs about $((need_kib / 1024)) MiB more: free some space" >&2
  exit 1
fi

# A clean clone builds once: incremental state would be 1.7 GB of disk and
# work that nothing reuses.
if [ -n "${CI:-}" ]; then
  export CARGO_INCREMENTAL=0
fi

if [ -x scripts/install-deps.sh ]; then
  scripts/install-deps.sh
fi

# Run as root (CI is), the network-fault tests must run, not skip
# (tests/support/netns.rs).
if [ "$(id -u)" = 0 ]; then
  export FENCEGATE_NETNS_REQUIRED=1
fi

cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked
# The Python client kit (clients/python) against real lock services, moto,
# Azurite and the gateway that cargo test just built.
scripts/test-python-clients.sh
# The shared-fence tests again, over etcd as production runs it: TLS only
# with client certificates, RBAC, 2 s auth tokens (tests/services/gateway_shared.rs).
FENCEGATE_TEST_ETCD_SECURED=1 cargo test --locked --test gateway_shared
scripts/demos.sh
cargo check --locked --lib --no-default-features
cargo check --locked --lib --no-default-features --features etcd
cargo check --locked --lib --no-default-features --features client
cargo check --locked --lib --no-default-features --features issuer-etcd,issuer-redis,issuer-postgres,issuer-zookeeper
# The fuzz targets, briefly (nightly; docs/RELIABILITY.md): each replays its
# committed corpus and explores for 5 s. scripts/fuzz.sh runs them long.
# (The benchmarks are type-checked by clippy --all-targets above;
# scripts/bench.sh builds and runs them.)
FUZZ_SECONDS=5 scripts/fuzz.sh
