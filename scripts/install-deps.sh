#!/usr/bin/env bash
# Installs, from Debian's packages, everything the tests, demos and benchmarks
# start as real processes: lock services (redis-server, etcd, ZooKeeper,
# PostgreSQL), nginx and wrk for the benchmarks, prlimit/curl, rclone,
# Apache httpd (WebDAV with mod_dav, tests/services/beyond_path.rs) and litmus
# (the WebDAV test suite, tests/services/webdav_litmus.rs) used by tests;
# then a Python environment with boto3 and moto's S3 server for the S3 client
# tests (target/venv, or $FENCEGATE_VENV), from PyPI, with matplotlib for the
# benchmark charts; Azurite from npm.
# Idempotent: does nothing when everything is already there.
# Usage: scripts/install-deps.sh   (as root, or with sudo available)
set -euo pipefail

# command -> Debian package
declare -A wanted=(
  [redis-server]=redis-server
  [redis-cli]=redis-tools
  [etcd]=etcd-server
  [etcdctl]=etcd-client
  [/usr/share/zookeeper/bin/zkServer.sh]=zookeeper
  [/usr/sbin/apache2]=apache2
  [java]=default-jre-headless
  [nginx]=nginx
  [wrk]=wrk
  [prlimit]=util-linux
  [curl]=curl
  [rclone]=rclone
  [litmus]=litmus
  [python3]=python3-venv
  [npm]=npm
)

missing=()
for tool in "${!wanted[@]}"; do
  if [[ "$tool" == /* ]]; then
    [ -e "$tool" ] || missing+=("${wanted[$tool]}")
  else
    command -v "$tool" >/dev/null 2>&1 || missing+=("${wanted[$tool]}")
  fi
done
# PostgreSQL's server binaries live under a versioned directory: any
# version will do (the demos and tests find the newest).
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
# Debian's python3 makes virtual environments only with python3-venv.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip' 2>/dev/null; then
  missing+=(python3-venv)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # Services are started by hand by the demos (no init system); keep the
  # packages from trying to start them at install time, and never leave
  # that policy behind, whatever happens to the install.
  trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
  printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
  $sudo chmod +x /usr/sbin/policy-rc.d
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The S3 client tests (tests/services/s3_boto3.rs, tests/services/beyond_path.rs): boto3 and
# moto's server, pinned.
venv=${FENCEGATE_VENV:-$(cd "$(dirname "$0")/.." && pwd)/target/venv}
if ! "$venv/bin/python" -c 'import boto3, moto.server' 2>/dev/null; then
  echo "install-deps: making the Python environment $venv (boto3, moto)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
    'boto3==1.44.5' 'moto[server]==5.2.5'
fi

# The GCS test (tests/services/gcs_json.rs): a GCS emulator that speaks the JSON and
# XML APIs (gcp-storage-emulator, pure Python) and Google's own client,
# pinned, in the same environment.
if ! "$venv/bin/python" -c 'import gcp_storage_emulator, google.cloud.storage' 2>/dev/null; then
  echo "install-deps: adding gcp-storage-emulator and google-cloud-storage to $venv" >&2
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
    'gcp-storage-emulator==2026.7.19' 'google-cloud-storage==3.17.1'
fi

# The Azure tests (tests/services/azure_blob.rs, tests/services/chained_writes.rs): the Azure SDK for Python in the
# same environment, and Azurite (Microsoft's Azure Storage emulator, from
# the npm registry) under target/node; both pinned.
if ! "$venv/bin/python" -c 'import azure.storage.blob' 2>/dev/null; then
  echo "install-deps: adding azure-storage-blob to $venv" >&2
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
    'azure-storage-blob==12.31.1'
fi
if ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  echo "install-deps: adding matplotlib to $venv (the benchmark charts)" >&2
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
    'matplotlib==3.10.7'
fi
node_dir=$(cd "$(dirname "$0")/.." && pwd)/target/node
if [ ! -x "$node_dir/node_modules/.bin/azurite-blob" ]; then
  echo "install-deps: installing azurite into $node_dir" >&2
  mkdir -p "$node_dir"
  npm install -q --prefix "$node_dir" --no-audit --no-fund 'azurite@3.35.0' >/dev/null
fi
