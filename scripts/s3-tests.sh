#!/usr/bin/env bash
# Ceph's s3-tests (third_party/s3-tests, test_s3.py) against moto verifying
# signatures, three ways, each against a fresh moto (docs/CUSTODY.md, "Ceph
# s3-tests"): `direct` (s3-tests talks to moto), `custody` (through the
# gateway under credential custody: every s3-tests user an identity with
# `admin` on `/`, `--conditional-writes on`, a signed token on every S3
# request) and `unfenced` (through `--store s3 --allow-unfenced-writes`,
# no custody). A manual check, not part of scripts/test.sh: 27 minutes for the
# three with S3TESTS_PARALLEL=1 on two cores shared with other work.
#
# Environment:
#   FENCEGATE_BIN    the gateway binary (default: `cargo build --release`'s)
#   FENCEGATE_VENV   moto's venv (default target/venv, scripts/install-deps.sh)
#   S3TESTS_VENV     s3-tests' own venv, made here from PyPI on first use
#                    (default $CARGO_TARGET_DIR/s3tests-venv or target/...)
#   S3TESTS_MODES    which runs, in order (default "direct custody unfenced");
#                    a mode run before into the same S3TESTS_OUT is
#                    summarised with them
#   S3TESTS_PARALLEL 1: the runs at once, each with its own moto and gateway
#   S3TESTS_FILTER   a pytest -k expression (default: every test)
#   S3TESTS_MARKERS  a pytest -m expression (default: every test)
#   S3TESTS_TOKEN    `per-test` (default), `increasing`, `fixed:N` or `off`
#                    (scripts/s3-tests/fencing_token.py says what each is)
#   S3TESTS_TIMEOUT  seconds a test may take (default 90)
#   S3TESTS_OUT      where the results go (default $target/s3-tests/DATE)
#
# Results: $S3TESTS_OUT/summary.txt (the counts per mode, and every test
# that passes directly but not through the gateway, with the first answer
# that run got and the direct one did not), passed-MODE.txt,
# failed-MODE.txt, differences-MODE.txt, and per mode the pytest log, its
# JUnit XML, errors-MODE.jsonl (every answer >= 400 boto3 got, with its
# test), the gateway's argv, stderr and access log.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$root/$target ;; esac

moto_venv=${FENCEGATE_VENV:-$root/target/venv}
if ! "$moto_venv/bin/python" -c 'import boto3, moto.server' 2>/dev/null; then
  echo "s3-tests.sh: no moto in $moto_venv: run scripts/install-deps.sh (or set FENCEGATE_VENV)" >&2
  exit 1
fi

# s3-tests' requirements, from PyPI, with boto3 pinned to the version the
# project's tests use (scripts/install-deps.sh), plus pytest-timeout.
venv=${S3TESTS_VENV:-$target/s3tests-venv}
if ! "$venv/bin/python" -c 'import boto3, munch, isodate, pytz, pytest_timeout' 2>/dev/null; then
  echo "s3-tests.sh: making s3-tests' Python environment $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
    -r third_party/s3-tests/requirements.txt 'boto3==1.44.5' 'pytest-timeout==2.4.0'
fi

if [ -z "${FENCEGATE_BIN:-}" ]; then
  cargo build --release --locked --bin fencegate
  FENCEGATE_BIN=$target/release/fencegate
fi

out=${S3TESTS_OUT:-$target/s3-tests/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
"$venv/bin/pip" freeze --disable-pip-version-check >"$out/s3tests-venv.txt"
echo "s3-tests.sh: results in $out" >&2

FENCEGATE_BIN=$FENCEGATE_BIN S3TESTS_OUT=$out S3TESTS_PYTHON=$venv/bin/python \
  "$moto_venv/bin/python" scripts/s3-tests/run.py
