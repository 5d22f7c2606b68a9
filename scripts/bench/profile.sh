#!/usr/bin/env bash
# Where a proxied request's CPU goes, fencegate next to nginx (docs/BENCHMARKS.md,
# "Where fencegate's CPU goes"):
#
#   scripts/bench/profile.sh [w1|w1c|w2|w3]
#
# PROFILE_PARTS picks among the parts below (default "callgrind perf strace").
# PROFILE_NGINX=0 leaves nginx out (scripts/bench/routes.sh compares
# fencegate with itself).
# PROFILE_STATE is fencegate's --state (default memory; disk keeps its
# fences under the run's temporary directory).
# PROFILE_GATEWAY_ARGS adds options to fencegate's command line (split on
# spaces), e.g. "--token-issuer redis://127.0.0.1:6390/grants" with a Redis
# started by hand, to compare the cost of an option in instructions.
#
# 1. callgrind (valgrind): user-space instructions per request of
#    fencegate --state memory and of nginx proxy_pass (one worker,
#    master_process off), each under the same wrk load, counters zeroed after
#    a warm-up; then the functions with the most instructions of their own,
#    and the atomic read-modify-writes per request (scripts/bench/atomics.py:
#    each costs about twenty cycles, which an instruction count hides).
#    Instruction counts do not depend on how busy the machine is.
# 2. perf (linux-perf), if installed: the split between kernel and user
#    space of each proxy at full speed, which callgrind cannot see.
# 3. strace, if installed: system calls per request of each proxy, by
#    call (strace -c attached after the warm-up; strace slows the proxy, not
#    what it asks of the kernel per request).
#
# Needs valgrind (apt-get install valgrind) and optionally linux-perf, plus
# what scripts/bench.sh needs. Placement as in scripts/bench.sh: the proxy
# on CPU 0, wrk and the backend on CPU 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
log_prefix=profile
# shellcheck source=lib.sh
source scripts/bench/lib.sh

workload=${1:-w1}
seconds=${PROFILE_SECONDS:-8}
port=${PROFILE_PORT:-18720}
top=${PROFILE_TOP:-20}
parts=" ${PROFILE_PARTS:-callgrind perf strace} "
# shellcheck disable=SC2206
gateway_args=(${PROFILE_GATEWAY_ARGS:-})
profile_state=${PROFILE_STATE:-memory}
backend_port=$port
proxy_port=$((port + 1))
gateway_port=$((port + 2))
admin_port=$((port + 3))

for tool in valgrind callgrind_control nginx wrk curl taskset; do
  command -v "$tool" >/dev/null || {
    echo "profile: missing $tool (valgrind: apt-get install valgrind)" >&2
    exit 1
  }
done
cargo build --release --locked --bin fencegate
target_dir=$(cargo_target_dir)
work=$root/target/profile
rm -rf "$work"
mkdir -p "$work"


# shellcheck source=nginx.sh
source scripts/bench/nginx.sh
write_nginx_confs "$work" "$backend_port" "$proxy_port" "master_process off;"

taskset -c 1 nginx -p "$work" -c "$work/backend.conf" >>"$work/backend.error.log" 2>&1 &
pids+=($!)

wait_http "http://127.0.0.1:$backend_port/"

load() { # load PORT SECONDS TOKEN_BASE: prints the RESULT line
  taskset -c 1 wrk -t1 -c64 -d"${2}s" --timeout 30s -s scripts/bench/workload.lua \
    "http://127.0.0.1:$1" -- "$workload" 1 "$3" | grep '^RESULT'
}

# Self cost per function from a callgrind dump (callgrind_annotate's own
# self view is confused by dumps taken after `callgrind_control -z`).
self_costs() { # self_costs FILE REQUESTS
  awk -v n="$2" -v top="$top" '
    function name(rest,   id, nm) {
      if (!match(rest, /^\([0-9]+\)/)) return rest
      id = substr(rest, 2, RLENGTH - 2); nm = substr(rest, RLENGTH + 2)
      if (nm != "") names[id] = nm
      return names[id]
    }
    /^fn=/ { cur = name(substr($0, 4)); next }
    /^cfn=/ { name(substr($0, 5)); next }
    /^calls=/ { after = 1; next }
    /^[0-9+*-]/ { if (after) after = 0; else { self[cur] += $NF; total += $NF } next }
    END {
      printf "instructions per request: %.0f (%d requests)\n", total / n, n
      for (f in self) printf "%10.0f %5.1f%%  %s\n", self[f] / n, 100 * self[f] / total, substr(f, 1, 140) | "sort -rn | head -" top
    }' "$1"
}

callgrind_run() { # callgrind_run NAME PORT HEALTH_URL COMMAND...
  local name=$1 port=$2 health=$3
  shift 3
  taskset -c 0 valgrind --tool=callgrind --dump-instr=yes --callgrind-out-file="$work/callgrind.$name" "$@" \
    >"$work/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  wait_http "$health"
  load "$port" 2 1 >/dev/null
  callgrind_control -z "$pid" >/dev/null
  local line
  line=$(load "$port" "$seconds" 1000000000)
  callgrind_control -d "$pid" >/dev/null
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  echo "== $name, $workload under callgrind: $line"
  self_costs "$work/callgrind.$name.1" "$(field requests "$line")"
  if command -v objdump >/dev/null && command -v python3 >/dev/null; then
    python3 scripts/bench/atomics.py "$work/callgrind.$name.1" "$(field requests "$line")" 8
  fi
  echo
}

[[ $parts != *" callgrind "* ]] || callgrind_run fencegate "$gateway_port" "http://127.0.0.1:$admin_port/healthz" \
  "$target_dir/release/fencegate" "${gateway_args[@]}" --upstream "http://127.0.0.1:$backend_port" --state "$profile_state" --data-dir "$work/state" \
  --listen "127.0.0.1:$gateway_port" --admin-listen "127.0.0.1:$admin_port"
[[ $parts != *" callgrind "* || ${PROFILE_NGINX:-1} == 0 ]] || callgrind_run nginx "$proxy_port" "http://127.0.0.1:$proxy_port/" \
  nginx -p "$work" -c "$work/proxy.conf"

if [[ $parts != *" perf "* ]]; then
  :
elif command -v perf >/dev/null; then
  perf_run() { # perf_run NAME PORT HEALTH_URL COMMAND...
    local name=$1 port=$2 health=$3
    shift 3
    taskset -c 0 "$@" >"$work/$name.perf.log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    wait_http "$health"
    load "$port" 2 2000000000 >/dev/null
    load "$port" $((seconds + 2)) 3000000000 >"$work/$name.perf.load" &
    local wrk_pid=$!
    sleep 1
    perf record -F 2000 -p "$pid" -o "$work/perf.$name.data" -- sleep "$seconds" >/dev/null 2>&1
    wait "$wrk_pid" || true
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    echo "== $name, $workload at full speed: $(cat "$work/$name.perf.load")"
    perf report -i "$work/perf.$name.data" --sort dso --stdio 2>/dev/null | grep '%' | head -5
    echo
  }
  perf_run fencegate "$gateway_port" "http://127.0.0.1:$admin_port/healthz" \
    "$target_dir/release/fencegate" "${gateway_args[@]}" --upstream "http://127.0.0.1:$backend_port" --state "$profile_state" --data-dir "$work/state" \
    --listen "127.0.0.1:$gateway_port" --admin-listen "127.0.0.1:$admin_port"
  perf_run nginx "$proxy_port" "http://127.0.0.1:$proxy_port/" \
    nginx -p "$work" -c "$work/proxy.conf"
else
  echo "(perf not installed: apt-get install linux-perf for the kernel/user split)"
fi

if [[ $parts != *" strace "* ]]; then
  :
elif command -v strace >/dev/null; then
  strace_run() { # strace_run NAME PORT HEALTH_URL COMMAND...
    local name=$1 port=$2 health=$3
    shift 3
    taskset -c 0 "$@" >"$work/$name.strace.log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    wait_http "$health"
    load "$port" 2 4000000000 >/dev/null
    strace -c -f -p "$pid" -o "$work/strace.$name" 2>/dev/null &
    local strace_pid=$!
    sleep 1
    local line
    line=$(load "$port" "$seconds" 5000000000)
    kill -INT "$strace_pid"
    wait "$strace_pid" 2>/dev/null || true
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    local requests
    requests=$(field requests "$line")
    echo "== $name, $workload under strace: $line"
    awk -v n="$requests" '
      $NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" {
        calls[$NF] = $4; total += $4
      }
      END {
        printf "system calls per request: %.2f\n", total / n
        for (c in calls) printf "%8.2f  %s\n", calls[c] / n, c | "sort -rn | head -8"
      }' "$work/strace.$name"
    echo
  }
  strace_run fencegate "$gateway_port" "http://127.0.0.1:$admin_port/healthz" \
    "$target_dir/release/fencegate" "${gateway_args[@]}" --upstream "http://127.0.0.1:$backend_port" --state "$profile_state" --data-dir "$work/state" \
    --listen "127.0.0.1:$gateway_port" --admin-listen "127.0.0.1:$admin_port"
  strace_run nginx "$proxy_port" "http://127.0.0.1:$proxy_port/" \
    nginx -p "$work" -c "$work/proxy.conf"
else
  echo "(strace not installed: apt-get install strace for system calls per request)"
fi
