#!/usr/bin/env bash
# The Python client kit (clients/python, import fencegate_client): installs
# it and its test libraries into target/venv (or $FENCEGATE_VENV, made by
# scripts/install-deps.sh), type-checks it with mypy --strict, and runs its
# tests against real servers they start themselves on 127.0.0.1: redis-server,
# etcd, ZooKeeper, PostgreSQL, moto's S3 server, Azurite and the gateway
# ($FENCEGATE_BIN, default target/debug/fencegate, which must be built).
# Usage: scripts/test-python-clients.sh [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${FENCEGATE_VENV:-$PWD/target/venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "test-python-clients: $venv is missing: run scripts/install-deps.sh" >&2
  exit 1
fi
export FENCEGATE_BIN=${FENCEGATE_BIN:-$PWD/target/debug/fencegate}
if [ ! -x "$FENCEGATE_BIN" ]; then
  echo "test-python-clients: $FENCEGATE_BIN is missing: cargo build first" >&2
  exit 1
fi

pip=("$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir)
# The test libraries, pinned (boto3, moto and azure-storage-blob come from
# scripts/install-deps.sh).
if ! "$venv/bin/python" -c 'import redis, kazoo, psycopg, pytest, mypy, requests' 2>/dev/null; then
  echo "test-python-clients: adding the test libraries to $venv" >&2
  "${pip[@]}" 'redis==8.1.0' 'kazoo==2.11.0' 'psycopg[binary]==3.3.9' 'pytest==9.2.0' \
    'mypy==2.4.1' 'types-requests==2.33.0.20261030' 'requests>=2.28'
fi
# The kit itself, rebuilt from the working tree every run (quick: pure Python).
"${pip[@]}" --force-reinstall --no-deps ./clients/python

(cd clients/python && "$venv/bin/python" -m mypy --strict src/fencegate_client)

set +e
"$venv/bin/python" -m pytest clients/python/tests -q -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test-python-clients: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
