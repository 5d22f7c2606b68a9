#!/usr/bin/env bash
# Installs, from Debian's packages, everything the tests, demos and benchmarks
# start as real processes: lock services (redis-server, etcd, ZooKeeper,
# PostgreSQL), nginx and wrk for the benchmarks, and prlimit/curl used by
# tests. Idempotent: does nothing when every tool is already there.
# Usage: scripts/install-deps.sh   (as root, or with sudo available)
set -euo pipefail

# command -> Debian package
declare -A wanted=(
  [redis-server]=redis-server
  [etcd]=etcd-server
  [etcdctl]=etcd-client
  [/usr/share/zookeeper/bin/zkServer.sh]=zookeeper
  [java]=default-jre-headless
  [/usr/lib/postgresql/15/bin/initdb]=postgresql
  [nginx]=nginx
  [wrk]=wrk
  [prlimit]=util-linux
  [curl]=curl
)

missing=()
for tool in "${!wanted[@]}"; do
  if [[ "$tool" == /* ]]; then
    [ -e "$tool" ] || missing+=("${wanted[$tool]}")
  else
    command -v "$tool" >/dev/null 2>&1 || missing+=("${wanted[$tool]}")
  fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# Services are started by hand by the demos (no init system); keep the
# packages from trying to start them at install time.
printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
$sudo chmod +x /usr/sbin/policy-rc.d
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
$sudo rm -f /usr/sbin/policy-rc.d
