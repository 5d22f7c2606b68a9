#!/usr/bin/env bash
# The benchmark of docs/BENCHMARKS.md, in one command, on one machine:
#
#   scripts/bench.sh
#
# 1. proxy:     wrk against (a) the backend alone, (b) nginx proxy_pass, (c)
#               fencegate --state memory, (d) fencegate --state disk, for W1
#               (1 KiB PUTs, steady token), W2 (every PUT raises its fence)
#               and W3 (unfenced GETs); median of BENCH_REPEATS runs each.
# 2. footprint: memory per fence at 1 M fences, reopen time of 1 M durable
#               fences (examples/fence_footprint.rs).
# 3. upload:    gateway RSS growth during a 1 GiB streamed upload.
# 3b. bulk:     1 GiB PUT into the backend's WebDAV store (nginx dav_methods)
#               and the same 1 GiB GET, direct, through nginx (request and
#               response buffering off) and through fencegate --state disk;
#               MiB/s by curl, median of min(BENCH_REPEATS, 3) runs.
# 4. micro:     the criterion micro-benchmarks (benches/core.rs), short.
# 5. front:     W1 through the front door's options, each next to nginx doing
#               the same: the access log on; TLS for clients (an ssl
#               listener); TLS to the backend (proxy_pass https://, verified).
# 6. issuer:    W2 (every PUT raises its fence) through fencegate --state
#               memory with and without --token-issuer redis://, same run;
#               questions asked of the issuer per 1,000 raises; then the
#               worst case, every request a token INCRed just before
#               (examples/issuer_load.rs), with and without the issuer.
# 7. shared:    W1 and W2 through fencegate --state etcd, one instance and
#               three at once, next to --state disk on one instance, over a
#               3-member etcd cluster; etcd round trips per request and
#               claims per etcd transaction (scripts/bench/shared.sh).
# 8. chain:     W1 PUTs carrying the client's If-Match through fencegate with
#               --conditional-writes off and s3 (every PUT a chained write),
#               in front of a backend naming that version; interleaved
#               (scripts/bench/chain.sh).
# 1b. percall:  W1 and W3 with each request built by wrk's Lua at the call
#               (w1l, w3l) through (b) nginx and (c) fencegate memory: req/s,
#               p99 and CPU per request, next to the prebuilt requests of
#               part 1.
# 9. custody:   W1 through fencegate --store s3 unsigned, next to the same
#               requests signed by the client (SigV4) and re-signed by the
#               gateway under --upstream-credentials and --identities; the
#               same pair for --store azure (Shared Key, Put Blob requests);
#               req/s, latency, CPU per request and (valgrind) instructions
#               per request; interleaved (scripts/bench/custody.sh).
#
# At the end, the charts of docs/BENCHMARKS.md from this run's results
# (scripts/bench/charts.py, into target/bench/charts; matplotlib from the
# tests' Python environment).
#
# It installs what it needs (scripts/install-deps.sh: nginx and wrk from
# Debian), builds the release binary, starts every process itself on
# 127.0.0.1 ports BENCH_PORT..BENCH_PORT+6, and stops them on exit. Results:
# target/bench/report.md (and raw data next to it). Targets are reported,
# never asserted: the exit status is 0 whenever the measurements ran.
#
# CPU placement (2 cores here): the proxy under test, nginx or fencegate,
# runs alone on BENCH_PROXY_CPU; wrk and the backend nginx share
# BENCH_CLIENT_CPU. Run (a) measures what that shared core can do at most.
# Set BENCH_PIN=0 to let the scheduler place everything.
#
# Knobs (environment): BENCH_DURATION (s per run, 10), BENCH_REPEATS (5),
# BENCH_WARMUP (s, 2), BENCH_CONNECTIONS (64), BENCH_PARTS
# (proxy,percall,footprint,upload,bulk,micro,front,issuer,shared,chain,custody),
# BENCH_FENCES (1000000),
# BENCH_UPLOAD_MIB (1024), BENCH_PORT (18700, and the 45 ports above it), BENCH_QUIET_WAIT (s to wait for an idle
# machine before measuring, 60), BENCH_OUT (target/bench),
# BENCH_CUSTODY_CALLGRIND (1; 0 skips part 9's instruction counts under
# valgrind), BENCH_CUSTODY_CALLGRIND_SECONDS (s of load under callgrind, 5).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
log_prefix=bench
# shellcheck source=bench/lib.sh
source scripts/bench/lib.sh

duration=${BENCH_DURATION:-10}
repeats=${BENCH_REPEATS:-5}
warmup=${BENCH_WARMUP:-2}
connections=${BENCH_CONNECTIONS:-64}
parts=${BENCH_PARTS:-proxy,percall,footprint,upload,bulk,micro,front,issuer,shared,chain,custody}
fences=${BENCH_FENCES:-1000000}
upload_mib=${BENCH_UPLOAD_MIB:-1024}
port=${BENCH_PORT:-18700}
quiet_wait=${BENCH_QUIET_WAIT:-60}
out=${BENCH_OUT:-$root/target/bench}
pin=${BENCH_PIN:-1}
proxy_cpu=${BENCH_PROXY_CPU:-0}
client_cpu=${BENCH_CLIENT_CPU:-1}

backend_port=$port
nginx_port=$((port + 1))
mem_port=$((port + 2))
mem_admin=$((port + 3))
disk_port=$((port + 4))
disk_admin=$((port + 5))
# part 5 (front): TLS backend, nginx with TLS clients / to a TLS backend,
# fencegate with the access log / TLS clients / a TLS backend, their admins.
tls_backend_port=$((port + 6))
nginx_tls_client_port=$((port + 7))
nginx_tls_up_port=$((port + 8))
log_port=$((port + 9))
tls_client_port=$((port + 10))
tls_up_port=$((port + 11))
log_admin=$((port + 12))
tls_client_admin=$((port + 13))
tls_up_admin=$((port + 14))
# part 6 (issuer): the lock service's Redis, fencegate asking it.
redis_port=$((port + 15))
issuer_port=$((port + 16))
issuer_admin=$((port + 17))

want() { [[ ",$parts," == *",$1,"* ]]; }


# --- dependencies and build -------------------------------------------------

scripts/install-deps.sh
for tool in nginx wrk curl taskset awk; do
  command -v "$tool" >/dev/null || { log "missing $tool"; exit 1; }
done
if [ "$(nproc)" -lt 2 ] && [ "$pin" = 1 ]; then
  log "fewer than 2 CPUs: running unpinned"
  pin=0
fi
# Command prefixes that pin a process (empty when unpinned). Arrays, not a
# function, so that `$!` is the pid of the process itself.
proxy_pin=() client_pin=()
if [ "$pin" = 1 ]; then
  proxy_pin=(taskset -c "$proxy_cpu")
  client_pin=(taskset -c "$client_cpu")
fi
log "building the release binary"
cargo build --release --locked --bin fencegate --example fence_footprint --example issuer_load
# Where cargo put them (CARGO_TARGET_DIR and .cargo/config may move target/).
target_dir=$(cargo_target_dir)
bin=$target_dir/release/fencegate

mkdir -p "$out"
work=$out/work
# One run's results only: a part not run leaves no file of an older run
# for the report or the charts to mix in.
rm -rf "$work" "$out/charts"
rm -f "$out"/*.tsv "$out"/*.txt
mkdir -p "$work/dav" "$work/disk-state"
# nginx workers may run as nobody: let them write the upload target.
chmod 1777 "$work/dav"
venv=${FENCEGATE_VENV:-$root/target/venv}
results=$out/results.tsv
# CPU time per request of each proxy in the proxy part.
cpu_results=$out/cpu.tsv
report=$out/report.md

cleanup_extra() { [ -z "${work:-}" ] || rm -rf "$work/dav" "$work/upload.bin"; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in $(seq "$port" $((port + 49))); do
  port_free "$p" || { log "port $p is in use (set BENCH_PORT)"; exit 1; }
done


# --- the machine ---------------------------------------------------------------

cpu_busy_percent() { # system-wide CPU busy over 2 s, from /proc/stat
  local a b
  a=($(head -1 /proc/stat))
  sleep 2
  b=($(head -1 /proc/stat))
  awk -v a="${a[*]}" -v b="${b[*]}" 'BEGIN {
    n = split(a, x, " "); split(b, y, " ");
    for (i = 2; i <= n; i++) { d = y[i] - x[i]; total += d; if (i == 5 || i == 6) idle += d }
    printf "%.0f", total ? 100 * (total - idle) / total : 0 }'
}

wait_for_quiet() {
  local waited=0 busy
  busy=$(cpu_busy_percent)
  while [ "$busy" -gt 10 ] && [ "$waited" -lt "$quiet_wait" ]; do
    log "machine busy (${busy}% CPU), waiting for it to settle"
    sleep 8
    waited=$((waited + 10))
    busy=$(cpu_busy_percent)
  done
  echo "$busy"
}

# --- part 1: the proxy benchmark --------------------------------------------

# shellcheck source=bench/nginx.sh
source scripts/bench/nginx.sh

start_processes() {
  write_nginx_confs "$work" "$backend_port" "$nginx_port"
  "${client_pin[@]}" nginx -p "$work" -c "$work/backend.conf" >>"$work/backend.error.log" 2>&1 &
  pids+=($!)
  "${proxy_pin[@]}" nginx -p "$work" -c "$work/proxy.conf" >>"$work/proxy.error.log" 2>&1 &
  pids+=($!)
  nginx_pid=$!
  # The upstream idle timeout (4 s) is below nginx's keepalive_timeout (75 s).
  "${proxy_pin[@]}" "$bin" --upstream "http://127.0.0.1:$backend_port" --state memory \
    --listen "127.0.0.1:$mem_port" --admin-listen "127.0.0.1:$mem_admin" \
    >"$work/fencegate-memory.log" 2>&1 &
  pids+=($!)
  mem_pid=$!
  "${proxy_pin[@]}" "$bin" --upstream "http://127.0.0.1:$backend_port" --state disk \
    --data-dir "$work/disk-state" \
    --listen "127.0.0.1:$disk_port" --admin-listen "127.0.0.1:$disk_admin" \
    >"$work/fencegate-disk.log" 2>&1 &
  pids+=($!)
  disk_pid=$!
  wait_http "http://127.0.0.1:$backend_port/"
  wait_http "http://127.0.0.1:$nginx_port/"
  wait_http "http://127.0.0.1:$mem_admin/healthz"
  wait_http "http://127.0.0.1:$disk_admin/healthz"
}

target_url() {
  case $1 in
    a) echo "http://127.0.0.1:$backend_port" ;;
    b) echo "http://127.0.0.1:$nginx_port" ;;
    c) echo "http://127.0.0.1:$mem_port" ;;
    d) echo "http://127.0.0.1:$disk_port" ;;
    c-log) echo "http://127.0.0.1:$log_port" ;;
    b-tls-client) echo "https://127.0.0.1:$nginx_tls_client_port" ;;
    c-tls-client) echo "https://127.0.0.1:$tls_client_port" ;;
    b-tls-up) echo "http://127.0.0.1:$nginx_tls_up_port" ;;
    c-tls-up) echo "http://127.0.0.1:$tls_up_port" ;;
    c-issuer) echo "http://127.0.0.1:$issuer_port" ;;
    c-chain-off) echo "http://127.0.0.1:$chain_off_port" ;;
    c-chain) echo "http://127.0.0.1:$chain_on_port" ;;
    c-custody-u) echo "http://127.0.0.1:$custody_u_port" ;;
    c-custody-s) echo "http://127.0.0.1:$custody_s_port" ;;
    c-custody-au) echo "http://127.0.0.1:$custody_au_port" ;;
    c-custody-as) echo "http://127.0.0.1:$custody_as_port" ;;
  esac
}

run_seq=0
# run_wrk TARGET WORKLOAD SECONDS [ARG]: sets `line` to the script's RESULT
# line; ARG, if given, is the workload's fourth argument (w1s: its file).
# Not called in a subshell (`$(...)`), so that run_seq keeps counting.
run_wrk() {
  run_seq=$((run_seq + 1))
  # W2 tokens: every run starts above every token sent before (a run sends
  # far fewer than 10^9 requests). A run that reused tokens would be refused
  # with 409s, which the errors column shows.
  local base=$((run_seq * 1000000000))
  "${client_pin[@]}" wrk -t1 -c"$connections" -d"${3}s" --timeout 10s \
    -s scripts/bench/workload.lua "$(target_url "$1")" -- "$2" 1 "$base" "${@:4}" \
    >"$work/wrk.out" 2>&1 || true
  line=$(grep '^RESULT' "$work/wrk.out") || {
    log "wrk failed against ($1) $2: $(cat "$work/wrk.out")"
    line="RESULT requests=0 rps=0 p50_us=0 p99_us=0 errors=1"
  }
}


# proxy_ticks TARGET: the CPU clock ticks (user + system, every thread)
# the proxy of TARGET has used so far: nginx's workers (its master only
# waits), a fencegate's process; 0 for the backend alone.
proxy_ticks() {
  case $1 in
    b) local worker total=0
      for worker in $(pgrep -P "$nginx_pid"); do total=$((total + $(cpu_ticks "$worker"))); done
      echo "$total" ;;
    c) cpu_ticks "$mem_pid" ;;
    d) cpu_ticks "$disk_pid" ;;
    *) echo 0 ;;
  esac
}

store_counter() { # store_counter NAME: from the disk gateway's /metrics
  curl -fsS "http://127.0.0.1:$disk_admin/metrics" | awk -v n="fencegate_store_${1}_total" '$1 == n { print $2 }'
}

proxy_benchmark() {
  start_processes
  log "warm-up: ${warmup}s per target and workload"
  for w in w1 w2 w3; do
    for t in a b c d; do
      run_wrk "$t" "$w" "$warmup"
    done
  done
  printf 'repeat\tworkload\ttarget\trps\tp50_us\tp99_us\terrors\trequests\traises\tcommits\n' >"$results"
  printf 'repeat\tworkload\ttarget\tcpu_ticks\trequests\tcpu_us_per_request\n' >"$cpu_results"
  local hz
  hz=$(getconf CLK_TCK)
  for rep in $(seq "$repeats"); do
    for w in w1 w2 w3; do
      for t in a b c d; do
        local raises0=0 commits0=0 raises=0 commits=0 ticks0 ticks
        if [ "$t" = d ]; then raises0=$(store_counter raises); commits0=$(store_counter commits); fi
        ticks0=$(proxy_ticks "$t")
        run_wrk "$t" "$w" "$duration"
        ticks=$(($(proxy_ticks "$t") - ticks0))
        if [ "$t" != a ]; then
          printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$w" "$t" "$ticks" "$(field requests "$line")" \
            "$(calc "%.2f" "1e6 * $ticks / $hz / ($(field requests "$line") + 0.000001)")" >>"$cpu_results"
        fi
        if [ "$t" = d ]; then
          raises=$(($(store_counter raises) - raises0))
          commits=$(($(store_counter commits) - commits0))
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$w" "$t" \
          "$(field rps "$line")" "$(field p50_us "$line")" "$(field p99_us "$line")" \
          "$(field errors "$line")" "$(field requests "$line")" "$raises" "$commits" >>"$results"
        log "repeat $rep/$repeats $w ($t): $line"
      done
    done
  done
}

percall_results=$out/percall.tsv

# W1 and W3 built per call, through nginx and fencegate memory, with the
# CPU time of each proxy: columns of results.tsv, then cpu_us_per_request.
percall_benchmark() {
  [ -n "${mem_pid:-}" ] || start_processes
  local hz w t ticks0 ticks
  hz=$(getconf CLK_TCK)
  log "per call: warm-up ${warmup}s per target and workload"
  for w in w1l w3l; do for t in b c; do run_wrk "$t" "$w" "$warmup"; done; done
  printf 'repeat\tworkload\ttarget\trps\tp50_us\tp99_us\terrors\trequests\tcpu_us_per_request\n' >"$percall_results"
  for rep in $(seq "$repeats"); do
    for w in w1l w3l; do
      for t in b c; do
        ticks0=$(proxy_ticks "$t")
        run_wrk "$t" "$w" "$duration"
        ticks=$(($(proxy_ticks "$t") - ticks0))
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$w" "$t" "$(field rps "$line")" \
          "$(field p50_us "$line")" "$(field p99_us "$line")" "$(field errors "$line")" "$(field requests "$line")" \
          "$(calc "%.2f" "1e6 * $ticks / $hz / ($(field requests "$line") + 0.000001)")" >>"$percall_results"
        log "per call repeat $rep/$repeats $w ($t): $line cpu_ticks=$ticks"
      done
    done
  done
}

percall_report() {
  m() { results=$percall_results median "$@"; }
  p() { results=$results median "$@"; }
  c() { results=$cpu_results median "$@"; }
  echo "| requests | workload | nginx req/s | fencegate req/s | fencegate / nginx | nginx p99 ms | fencegate p99 ms | nginx CPU µs | fencegate CPU µs | CPU fencegate / nginx |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  local w
  for w in w1 w3; do
    if [ -s "$cpu_results" ]; then
      printf '| prebuilt (part 1) | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "${w^^}" \
        "$(calc "%.0f" "$(p 4 "$w" b)")" "$(calc "%.0f" "$(p 4 "$w" c)")" \
        "$(calc "%.2f" "$(p 4 "$w" c) / ($(p 4 "$w" b) + 0.000001)")" \
        "$(calc "%.2f" "$(p 6 "$w" b) / 1000")" "$(calc "%.2f" "$(p 6 "$w" c) / 1000")" \
        "$(calc "%.1f" "$(c 6 "$w" b)")" "$(calc "%.1f" "$(c 6 "$w" c)")" \
        "$(calc "%.2f" "$(c 6 "$w" c) / ($(c 6 "$w" b) + 0.000001)")"
    fi
    printf '| built per call | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "${w^^}" \
      "$(calc "%.0f" "$(m 4 "${w}l" b)")" "$(calc "%.0f" "$(m 4 "${w}l" c)")" \
      "$(calc "%.2f" "$(m 4 "${w}l" c) / ($(m 4 "${w}l" b) + 0.000001)")" \
      "$(calc "%.2f" "$(m 6 "${w}l" b) / 1000")" "$(calc "%.2f" "$(m 6 "${w}l" c) / 1000")" \
      "$(calc "%.1f" "$(m 9 "${w}l" b)")" "$(calc "%.1f" "$(m 9 "${w}l" c)")" \
      "$(calc "%.2f" "$(m 9 "${w}l" c) / ($(m 9 "${w}l" b) + 0.000001)")"
  done
  echo
  echo "Goal: fencegate's CPU per request at or below nginx's (ratio at most 1.0) for W1 and W3, both ways of sending."
}

median() { # median COLUMN WORKLOAD TARGET
  awk -F'\t' -v c="$1" -v w="$2" -v t="$3" 'NR > 1 && $2 == w && $3 == t { print $c }' "$results" |
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
total() { # total COLUMN WORKLOAD TARGET
  awk -F'\t' -v c="$1" -v w="$2" -v t="$3" 'NR > 1 && $2 == w && $3 == t { s += $c } END { print s + 0 }' "$results"
}

proxy_report() {
  local name_a="(a) backend alone" name_b="(b) nginx proxy_pass" \
    name_c="(c) fencegate memory" name_d="(d) fencegate disk"
  echo "| workload | target | req/s | p50 ms | p99 ms | p99 added over (a), ms | CPU µs per request (user + system) | errors |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|"
  for w in w1 w2 w3; do
    local p99a
    p99a=$(median 6 "$w" a)
    for t in a b c d; do
      local name_var=name_$t added="-" cpu="-"
      [ "$t" = a ] || added=$(calc "%.2f" "($(median 6 "$w" "$t") - $p99a) / 1000")
      [ "$t" = a ] || cpu=$(calc "%.1f" "$(results=$cpu_results median 6 "$w" "$t")")
      printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "${w^^}" "${!name_var}" \
        "$(calc "%.0f" "$(median 4 "$w" "$t")")" \
        "$(calc "%.2f" "$(median 5 "$w" "$t") / 1000")" \
        "$(calc "%.2f" "$(median 6 "$w" "$t") / 1000")" "$added" "$cpu" "$(total 7 "$w" "$t")"
    done
  done
  echo
  echo "| CPU per request, fencegate / nginx (medians) | W1 | W2 | W3 | goal |"
  echo "|---|---:|---:|---:|---|"
  for t in c d; do
    local name_var=name_$t
    printf '| %s | %s | %s | %s | at most 1.0 |\n' "${!name_var}" \
      "$(calc "%.2f" "$(results=$cpu_results median 6 w1 "$t") / ($(results=$cpu_results median 6 w1 b) + 0.000001)")" \
      "$(calc "%.2f" "$(results=$cpu_results median 6 w2 "$t") / ($(results=$cpu_results median 6 w2 b) + 0.000001)")" \
      "$(calc "%.2f" "$(results=$cpu_results median 6 w3 "$t") / ($(results=$cpu_results median 6 w3 b) + 0.000001)")"
  done
  local failed
  failed=$(awk -F'\t' 'NR > 1 { s += $7 } END { print s + 0 }' "$results")
  if [ "$failed" -gt 0 ]; then
    echo
    echo "**$failed requests failed (status >= 400 or socket errors): the runs with errors are not valid measurements.**"
  fi
  echo
  echo "| target | measured | verdict |"
  echo "|---|---|---|"
  for w in w1 w3; do
    local rb rc pb pc
    rb=$(median 4 "$w" b)
    rc=$(median 4 "$w" c)
    pb=$(median 6 "$w" b)
    pc=$(median 6 "$w" c)
    printf '| %s: (c) req/s >= (b) | (c)/(b) = %s | %s |\n' "${w^^}" "$(calc "%.2f" "$rc / $rb")" \
      "$(awk -v x="$rc" -v y="$rb" 'BEGIN { print (x >= y) ? "met" : "not met" }')"
    printf '| %s: (c) p99 <= (b) p99 | %s ms vs %s ms | %s |\n' "${w^^}" "$(calc "%.2f" "$pc / 1000")" \
      "$(calc "%.2f" "$pb / 1000")" "$(awk -v x="$pc" -v y="$pb" 'BEGIN { print (x <= y) ? "met" : "not met" }')"
  done
  local rc2 rd2 raises commits
  rc2=$(median 4 w2 c)
  rd2=$(median 4 w2 d)
  raises=$(total 9 w2 d)
  commits=$(total 10 w2 d)
  printf '| W2: (d) req/s >= 0.5 x (c) | (d)/(c) = %s | %s |\n' "$(calc "%.2f" "$rd2 / $rc2")" \
    "$(awk -v x="$rd2" -v y="$rc2" 'BEGIN { print (x >= 0.5 * y) ? "met" : "not met" }')"
  for w in w1 w3; do
    printf '| %s: (d)/(c) | %s | (no target) |\n' "${w^^}" "$(calc "%.2f" "$(median 4 "$w" d) / $(median 4 "$w" c)")"
  done
  printf '| W2 (d): admissions per fsync | %s raises in %s commits = %s | (reported) |\n' \
    "$raises" "$commits" "$(calc "%.1f" "$raises / ($commits > 0 ? $commits : 1)")"
}

# --- part 2: footprint --------------------------------------------------------

footprint() {
  log "footprint: $fences fences"
  "$target_dir/release/examples/fence_footprint" "$fences" | tee "$out/footprint.txt" >&2
}

footprint_report() {
  local line
  line=$(grep '^SUMMARY' "$out/footprint.txt")
  local bytes reopen reopen_bytes
  bytes=$(field bytes_per_fence "$line")
  reopen=$(field reopen_seconds "$line")
  reopen_bytes=$(field reopen_bytes_per_fence "$line")
  echo "| measurement ($(field fences "$line") fences, 22-byte keys) | value | target | verdict |"
  echo "|---|---:|---:|---|"
  printf '| RSS per fence, in memory | %s B | <= 200 B at 1 M fences | %s |\n' "$bytes" \
    "$(awk -v x="$bytes" -v n="$(field fences "$line")" 'BEGIN { print (n < 1000000) ? "(measured below 1 M)" : (x <= 200) ? "met" : "not met" }')"
  printf '| peak RSS per fence while filling | %s B | | |\n' "$(field peak_bytes_per_fence "$line")"
  printf '| reopen of the durable store (Fences::open) | %s s | <= 2 s at 1 M fences | %s |\n' "$reopen" \
    "$(awk -v x="$reopen" -v n="$(field fences "$line")" 'BEGIN { print (n < 1000000) ? "(measured below 1 M)" : (x <= 2) ? "met" : "not met" }')"
  printf '| RSS per fence after reopen (table + redb cache) | %s B | | |\n' "$reopen_bytes"
  printf '| store file per fence | %s B | | |\n' "$(field store_file_bytes_per_fence "$line")"
}

# --- part 3: upload RSS -------------------------------------------------------

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

upload() {
  local gw_pid=${disk_pid:-} gw_port=$disk_port
  [ -n "${gw_pid:-}" ] || { start_processes; gw_pid=$disk_pid; }
  log "upload: ${upload_mib} MiB through fencegate --state disk"
  truncate -s "${upload_mib}M" "$work/upload.bin"
  # Warm the gateway's buffers and pools first, as tests/binary/gateway_streaming.rs does.
  for i in 1 2 3; do
    curl -fsS -o /dev/null -X PUT -H 'X-Fencing-Token: 1' -H 'Expect:' \
      --data-binary @<(head -c 1048576 /dev/zero) "http://127.0.0.1:$gw_port/upload/warm-$i"
  done
  local baseline max=0 sample
  baseline=$(rss_kib "$gw_pid")
  max=$baseline
  local started ended status
  started=$(date +%s.%N)
  curl -sS -o /dev/null -w '%{http_code}' -X PUT -H 'X-Fencing-Token: 2' -H 'Expect:' \
    -T "$work/upload.bin" "http://127.0.0.1:$gw_port/upload/big" >"$work/upload.status" &
  local curl_pid=$!
  while kill -0 "$curl_pid" 2>/dev/null; do
    sample=$(rss_kib "$gw_pid")
    [ "$sample" -gt "$max" ] && max=$sample
    sleep 0.01
  done
  wait "$curl_pid" || true
  ended=$(date +%s.%N)
  status=$(cat "$work/upload.status")
  local stored
  stored=$(stat -c %s "$work/dav/upload/big" 2>/dev/null || echo 0)
  rm -f "$work/dav/upload/big"
  printf 'status=%s stored_bytes=%s seconds=%s baseline_kib=%s max_kib=%s growth_kib=%s\n' \
    "$status" "$stored" "$(calc "%.1f" "$ended - $started")" "$baseline" "$max" "$((max - baseline))" |
    tee "$out/upload.txt" >&2
}

upload_report() {
  local line growth
  line=$(cat "$out/upload.txt")
  growth=$(field growth_kib "$line")
  echo "| measurement | value | target | verdict |"
  echo "|---|---:|---:|---|"
  printf '| RSS growth during a %s MiB upload (status %s, %s bytes stored, %s s) | %s MiB | <= 16 MiB | %s |\n' \
    "$upload_mib" "$(field status "$line")" "$(field stored_bytes "$line")" "$(field seconds "$line")" \
    "$(calc "%.1f" "$growth / 1024")" \
    "$(awk -v x="$growth" -v ok="$(field status "$line")" 'BEGIN { print (x <= 16384 && ok ~ /^2/) ? "met" : "not met" }')"
  printf '| gateway RSS before the upload | %s MiB | | |\n' "$(calc "%.1f" "$(field baseline_kib "$line") / 1024")"
}

# --- part 3b: bulk transfer ----------------------------------------------------

bulk_results=$out/bulk.tsv

# bulk_transfer TARGET put|get RUN: one 1 GiB transfer; prints MiB/s.
bulk_transfer() {
  local t=$1 direction=$2 run=$3 url speed
  case $t in
    direct) url="http://127.0.0.1:$backend_port/upload/bulk" ;;
    nginx) url="http://127.0.0.1:$nginx_port/upload/bulk" ;;
    fencegate) url="http://127.0.0.1:$disk_port/upload/bulk" ;;
  esac
  if [ "$direction" = put ]; then
    # A new token per run: fencegate's fence on /upload/bulk only grows.
    speed=$("${client_pin[@]}" curl -sS -o /dev/null -w '%{http_code} %{speed_upload}' -X PUT \
      -H "X-Fencing-Token: $((1000 + run))" -H 'Expect:' -T "$work/upload.bin" "$url")
  else
    speed=$("${client_pin[@]}" curl -sS -o /dev/null -w '%{http_code} %{speed_download}' "$url")
  fi
  case ${speed%% *} in
    2*) calc "%.1f" "${speed#* } / 1048576" ;;
    *) log "bulk: $direction through $t answered ${speed%% *}"; echo 0 ;;
  esac
}

bulk() {
  [ -n "${disk_pid:-}" ] || start_processes
  truncate -s "${upload_mib}M" "$work/upload.bin"
  local runs=$((repeats < 3 ? repeats : 3)) run=0 t direction mib order
  log "bulk: ${upload_mib} MiB PUT and GET, direct, through nginx and fencegate, $runs runs"
  # A first transfer of each kind, not counted: the store's directory and
  # the page cache warm.
  for direction in put get; do run=$((run + 1)); bulk_transfer direct "$direction" "$run" >/dev/null; done
  rm -f "$work/dav/upload/bulk"
  printf 'repeat\tdirection\ttarget\tmib_per_s\n' >"$bulk_results"
  local targets=(direct nginx fencegate)
  for rep in $(seq "$runs"); do
    # Each run starts with another target: none always goes first.
    order=("${targets[@]:$(((rep - 1) % 3))}" "${targets[@]:0:$(((rep - 1) % 3))}")
    for t in "${order[@]}"; do
      for direction in put get; do
        run=$((run + 1))
        mib=$(bulk_transfer "$t" "$direction" "$run")
        printf '%s\t%s\t%s\t%s\n' "$rep" "$direction" "$t" "$mib" >>"$bulk_results"
        log "bulk repeat $rep/$runs $direction ($t): $mib MiB/s"
      done
      rm -f "$work/dav/upload/bulk"
    done
  done
}

bulk_report() {
  m() { awk -F'\t' -v d="$1" -v t="$2" 'NR > 1 && $2 == d && $3 == t { print $4 }' "$bulk_results" |
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  echo "| ${upload_mib} MiB | direct to the store | nginx (buffering off) | fencegate --state disk | fencegate / nginx |"
  echo "|---|---:|---:|---:|---:|"
  local direction
  for direction in put get; do
    printf '| %s MiB/s | %s | %s | %s | %s |\n' "${direction^^}" "$(m "$direction" direct)" "$(m "$direction" nginx)" \
      "$(m "$direction" fencegate)" "$(calc "%.2f" "$(m "$direction" fencegate) / ($(m "$direction" nginx) + 0.000001)")"
  done
}

# --- part 4: micro-benchmarks -------------------------------------------------

micro() {
  log "micro-benchmarks (criterion, short settings)"
  cargo bench --locked --bench core -- --warm-up-time 1 --measurement-time 3 2>&1 | tee "$out/micro.txt" >&2
}

micro_report() {
  echo "| benchmark | time per iteration (criterion's estimate) |"
  echo "|---|---:|"
  # Criterion prints "name  time: [low estimate high]" (the name alone on the
  # line before when it is long), then "change:" lines against the last run.
  awk '/time:/ { name = ($1 == "time:") ? prev : $1; sub(/.*time: *\[/, ""); split($0, v, " ");
                 if (v[4] ~ /^(ps|ns|µs|us|ms|s)$/ && name != "change:") printf "| %s | %s %s |\n", name, v[3], v[4] }
       { if ($1 != "time:" && NF == 1) prev = $1 }' "$out/micro.txt"
  grep -h 'raises per fsync' "$out/micro.txt" | sed 's/^/\n/' || true
}

# --- part 5: the front door --------------------------------------------------

# A CA and a certificate for 127.0.0.1 and localhost (P-256, as the tests
# make), generated for this run only.
make_certs() {
  local dir=$work/tls
  mkdir -p "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj '/CN=fencegate bench CA' -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj '/CN=localhost' \
    -keyout "$dir/leaf.key" -out "$dir/leaf.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$dir/leaf.ext"
  openssl x509 -req -in "$dir/leaf.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 2 -extfile "$dir/leaf.ext" -out "$dir/leaf.pem" 2>/dev/null
}

start_front() {
  [ -n "${mem_pid:-}" ] || start_processes
  make_certs
  local tls=$work/tls
  write_nginx_tls_confs "$work" "$backend_port" "$tls_backend_port" "$nginx_tls_client_port" \
    "$nginx_tls_up_port" "$tls"
  "${client_pin[@]}" nginx -p "$work" -c "$work/backend-tls.conf" >>"$work/backend-tls.error.log" 2>&1 &
  pids+=($!)
  "${proxy_pin[@]}" nginx -p "$work" -c "$work/proxy-tls-client.conf" >>"$work/proxy-tls-client.error.log" 2>&1 &
  pids+=($!)
  "${proxy_pin[@]}" nginx -p "$work" -c "$work/proxy-tls-up.conf" >>"$work/proxy-tls-up.error.log" 2>&1 &
  pids+=($!)
  "${proxy_pin[@]}" "$bin" --upstream "http://127.0.0.1:$backend_port" --state memory \
    --access-log "$work/access.log" \
    --listen "127.0.0.1:$log_port" --admin-listen "127.0.0.1:$log_admin" \
    >"$work/fencegate-log.log" 2>&1 &
  pids+=($!)
  "${proxy_pin[@]}" "$bin" --upstream "http://127.0.0.1:$backend_port" --state memory \
    --tls-cert "$tls/leaf.pem" --tls-key "$tls/leaf.key" \
    --listen "127.0.0.1:$tls_client_port" --admin-listen "127.0.0.1:$tls_client_admin" \
    >"$work/fencegate-tls-client.log" 2>&1 &
  pids+=($!)
  "${proxy_pin[@]}" "$bin" --upstream "https://localhost:$tls_backend_port" --upstream-ca "$tls/ca.pem" \
    --state memory --listen "127.0.0.1:$tls_up_port" --admin-listen "127.0.0.1:$tls_up_admin" \
    >"$work/fencegate-tls-up.log" 2>&1 &
  pids+=($!)
  wait_http "http://127.0.0.1:$nginx_tls_up_port/"
  curl -fsS -o /dev/null --cacert "$tls/ca.pem" "https://localhost:$nginx_tls_client_port/" ||
    { log "nginx with TLS clients does not answer"; exit 1; }
  wait_http "http://127.0.0.1:$log_admin/healthz"
  curl -fsS -o /dev/null --retry 50 --retry-delay 0 --retry-connrefused --cacert "$tls/ca.pem" \
    "https://localhost:$tls_client_admin/healthz" || { log "fencegate with TLS does not answer"; exit 1; }
  wait_http "http://127.0.0.1:$tls_up_admin/healthz"
}

front_targets=(b c c-log b-tls-client c-tls-client b-tls-up c-tls-up)
front_results=$out/front.tsv

front_benchmark() {
  start_front
  log "front door: warm-up ${warmup}s per target"
  for t in "${front_targets[@]}"; do
    run_wrk "$t" w1 "$warmup"
  done
  printf 'repeat\tworkload\ttarget\trps\tp50_us\tp99_us\terrors\trequests\n' >"$front_results"
  for rep in $(seq "$repeats"); do
    for t in "${front_targets[@]}"; do
      run_wrk "$t" w1 "$duration"
      printf '%s\tw1\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$t" \
        "$(field rps "$line")" "$(field p50_us "$line")" "$(field p99_us "$line")" \
        "$(field errors "$line")" "$(field requests "$line")" >>"$front_results"
      log "front repeat $rep/$repeats ($t): $line"
    done
  done
  log "access log: $(wc -l <"$work/access.log") lines written"
}

front_report() {

  m() { results=$front_results median "$@"; }
  echo "| W1 through | req/s | p50 ms | p99 ms | errors |"
  echo "|---|---:|---:|---:|---:|"
  local names=("(b) nginx proxy_pass" "(c) fencegate" "(c) fencegate --access-log FILE" \
    "(b) nginx, ssl listener" "(c) fencegate --tls-cert" \
    "(b) nginx, proxy_pass https:// (verified)" "(c) fencegate --upstream https://")
  local i=0
  for t in "${front_targets[@]}"; do
    printf '| %s | %s | %s | %s | %s |\n' "${names[$i]}" "$(calc "%.0f" "$(m 4 w1 "$t")")" \
      "$(calc "%.2f" "$(m 5 w1 "$t") / 1000")" "$(calc "%.2f" "$(m 6 w1 "$t") / 1000")" \
      "$(results=$front_results total 7 w1 "$t")"
    i=$((i + 1))
  done
  echo
  echo "| ratio (medians of req/s, same run) | value |"
  echo "|---|---:|"
  ratio() { calc "%.2f" "$(m 4 w1 "$1") / $(m 4 w1 "$2")"; }
  printf '| access log on / off, fencegate | %s |\n' "$(ratio c-log c)"
  printf '| TLS clients / plain, nginx | %s |\n' "$(ratio b-tls-client b)"
  printf '| TLS clients / plain, fencegate | %s |\n' "$(ratio c-tls-client c)"
  printf '| fencegate / nginx, both with TLS clients | %s |\n' "$(ratio c-tls-client b-tls-client)"
  printf '| TLS backend / plain, nginx | %s |\n' "$(ratio b-tls-up b)"
  printf '| TLS backend / plain, fencegate | %s |\n' "$(ratio c-tls-up c)"
  printf '| fencegate / nginx, both to a TLS backend | %s |\n' "$(ratio c-tls-up b-tls-up)"
  printf '| fencegate / nginx, plain (this part'"'"'s own baseline) | %s |\n' "$(ratio c b)"
}

# --- part 7: shared fences (scripts/bench/shared.sh) ---------------------------

# shellcheck source=bench/shared.sh
source scripts/bench/shared.sh

# --- part 8: chained writes (scripts/bench/chain.sh) ------------------------------

# shellcheck source=bench/chain.sh
source scripts/bench/chain.sh

# --- part 9: credential custody (scripts/bench/custody.sh) ---------------------

# shellcheck source=bench/custody.sh
source scripts/bench/custody.sh

# --- part 6: token trust ---------------------------------------------------------

issuer_results=$out/issuer.tsv
fresh_results=$out/issuer-fresh.tsv

issuer_counter() { # issuer_counter NAME: from the issuer gateway's /metrics
  curl -fsS "http://127.0.0.1:$issuer_admin/metrics" | awk -v n="fencegate_issuer_${1}_total" '$1 == n { print $2 }'
}

issuer_benchmark() {
  [ -n "${mem_pid:-}" ] || start_processes
  "${client_pin[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    >"$work/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  # The lock service has handed out tokens up to 10^15: above every W2 token
  # (run_number * 10^9 + requests), so every raise is confirmed, by the
  # cached bound after the first question.
  redis-cli -p "$redis_port" set grants 1000000000000000 >/dev/null
  "${proxy_pin[@]}" "$bin" --upstream "http://127.0.0.1:$backend_port" --state memory \
    --token-issuer "redis://127.0.0.1:$redis_port/grants" \
    --listen "127.0.0.1:$issuer_port" --admin-listen "127.0.0.1:$issuer_admin" \
    >"$work/fencegate-issuer.log" 2>&1 &
  pids+=($!)
  wait_http "http://127.0.0.1:$issuer_admin/healthz"
  log "issuer: warm-up ${warmup}s per target"
  for t in c c-issuer; do run_wrk "$t" w2 "$warmup"; done
  printf 'repeat\tworkload\ttarget\trps\tp50_us\tp99_us\terrors\trequests\tquestions\tchecks\n' >"$issuer_results"
  for rep in $(seq "$repeats"); do
    for t in c c-issuer; do
      local q0=0 k0=0 q=0 k=0
      if [ "$t" = c-issuer ]; then q0=$(issuer_counter questions); k0=$(issuer_counter checks); fi
      run_wrk "$t" w2 "$duration"
      if [ "$t" = c-issuer ]; then
        q=$(($(issuer_counter questions) - q0))
        k=$(($(issuer_counter checks) - k0))
      fi
      printf '%s\tw2\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$t" \
        "$(field rps "$line")" "$(field p50_us "$line")" "$(field p99_us "$line")" \
        "$(field errors "$line")" "$(field requests "$line")" "$q" "$k" >>"$issuer_results"
      log "issuer repeat $rep/$repeats ($t): $line questions=$q checks=$k"
    done
  done
  # The worst case: every token fresh from INCR, so above every bound the
  # gateway has confirmed. Same Redis counter for both gateways.
  printf 'repeat\ttarget\trps\tok\trefused\tfailed\tquestions\tchecks\tmerged\n' >"$fresh_results"
  for rep in $(seq "$repeats"); do
    for t in c c-issuer; do
      local q0=0 k0=0 m0=0 q=0 k=0 m=0 addr
      addr=$(target_url "$t"); addr=${addr#http://}
      if [ "$t" = c-issuer ]; then
        q0=$(issuer_counter questions); k0=$(issuer_counter checks); m0=$(issuer_counter merged)
      fi
      "${client_pin[@]}" "$target_dir/release/examples/issuer_load" --gateway "$addr" \
        --redis "127.0.0.1:$redis_port" --counter grants --clients "$connections" \
        --seconds "$duration" >"$work/issuer_load.out" 2>&1 || true
      line=$(grep '^RESULT' "$work/issuer_load.out") || line="RESULT rps=0 ok=0 refused=0 failed=1"
      if [ "$t" = c-issuer ]; then
        q=$(($(issuer_counter questions) - q0))
        k=$(($(issuer_counter checks) - k0))
        m=$(($(issuer_counter merged) - m0))
      fi
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$t" "$(field rps "$line")" \
        "$(field ok "$line")" "$(field refused "$line")" "$(field failed "$line")" "$q" "$k" "$m" >>"$fresh_results"
      log "issuer, fresh tokens, repeat $rep/$repeats ($t): $line questions=$q checks=$k merged=$m"
    done
  done
}

issuer_report() {
  m() { results=$issuer_results median "$@"; }
  echo "| W2 through | req/s | p50 ms | p99 ms | errors |"
  echo "|---|---:|---:|---:|---:|"
  local names=("(c) fencegate --state memory" "(c) the same, --token-issuer redis://")
  local i=0
  for t in c c-issuer; do
    printf '| %s | %s | %s | %s | %s |\n' "${names[$i]}" "$(calc "%.0f" "$(m 4 w2 "$t")")" \
      "$(calc "%.2f" "$(m 5 w2 "$t") / 1000")" "$(calc "%.2f" "$(m 6 w2 "$t") / 1000")" \
      "$(results=$issuer_results total 7 w2 "$t")"
    i=$((i + 1))
  done
  local raises questions checks
  raises=$(results=$issuer_results total 8 w2 c-issuer)
  questions=$(results=$issuer_results total 9 w2 c-issuer)
  checks=$(results=$issuer_results total 10 w2 c-issuer)
  echo
  echo "| measure (same run) | value |"
  echo "|---|---:|"
  printf '| req/s with issuer / without (medians) | %s |\n' "$(calc "%.2f" "$(m 4 w2 c-issuer) / $(m 4 w2 c)")"
  printf '| raises (requests) through the issuer gateway | %s |\n' "$raises"
  printf '| tokens checked (raises above the fence) | %s |\n' "$checks"
  printf '| questions asked of Redis | %s |\n' "$questions"
  printf '| questions per 1,000 raises | %s |\n' "$(calc "%.3f" "1000 * $questions / ($raises + 0.000001)")"
  echo
  echo "Worst case, every request a token INCRed just before (examples/issuer_load.rs, $connections clients):"
  echo
  fm() { awk -F'\t' -v c="$1" -v t="$2" 'NR > 1 && $2 == t { print $c }' "$fresh_results" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  fs() { awk -F'\t' -v c="$1" -v t="$2" 'NR > 1 && $2 == t { s += $c } END { print s + 0 }' "$fresh_results"; }
  echo "| measure (same run) | value |"
  echo "|---|---:|"
  printf '| req/s without issuer (median) | %s |\n' "$(calc "%.0f" "$(fm 3 c)")"
  printf '| req/s with issuer (median) | %s |\n' "$(calc "%.0f" "$(fm 3 c-issuer)")"
  printf '| ratio | %s |\n' "$(calc "%.2f" "$(fm 3 c-issuer) / ($(fm 3 c) + 0.000001)")"
  printf '| refused or failed, both gateways | %s |\n' "$(( $(fs 5 c) + $(fs 6 c) + $(fs 5 c-issuer) + $(fs 6 c-issuer) ))"
  printf '| raises admitted through the issuer gateway | %s |\n' "$(fs 4 c-issuer)"
  printf '| questions asked of Redis | %s |\n' "$(fs 7 c-issuer)"
  printf '| questions per 1,000 raises | %s |\n' "$(calc "%.1f" "1000 * $(fs 7 c-issuer) / ($(fs 4 c-issuer) + 0.000001)")"
  printf '| checks answered by another check'"'"'s question | %s |\n' "$(fs 9 c-issuer)"
}

# --- run ----------------------------------------------------------------------

busy=$(wait_for_quiet)
{
  echo "# fencegate benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- machine: $(nproc) CPUs, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(uname -sr)"
  echo "- fencegate $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (with local changes)'), $(rustc --version)"
  echo "- $(nginx -v 2>&1), wrk $(wrk -v 2>&1 | head -1 | awk '{ print $2 }')"
  echo "- CPU busy before the run: ${busy}% (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  if [ "$pin" = 1 ]; then
    echo "- placement: proxy under test (nginx proxy or fencegate) alone on CPU $proxy_cpu; wrk (1 thread) and the backend nginx (1 worker) on CPU $client_cpu"
  else
    echo "- placement: not pinned"
  fi
  echo "- wrk: 1 thread, $connections connections, ${duration}s per run, median of $repeats runs, ${warmup}s warm-up per target and workload"
  echo
} >"$report"

if want proxy; then
  proxy_benchmark
  { echo "## Proxy benchmark"; echo; proxy_report; echo; } >>"$report"
fi
if want percall; then
  percall_benchmark
  { echo "## W1 and W3 with requests built per call"; echo; percall_report; echo; } >>"$report"
fi
if want footprint; then
  footprint
  { echo "## Footprint"; echo; footprint_report; echo; } >>"$report"
fi
if want upload; then
  upload
  { echo "## Streamed upload"; echo; upload_report; echo; } >>"$report"
fi
if want bulk; then
  bulk
  { echo "## Bulk transfer: ${upload_mib} MiB PUT and GET"; echo; bulk_report; echo; } >>"$report"
fi
if want front; then
  front_benchmark
  { echo "## Front door: access log and TLS"; echo; front_report; echo; } >>"$report"
fi
if want issuer; then
  issuer_benchmark
  { echo "## Token trust: W2 with and without --token-issuer redis://"; echo; issuer_report; echo; } >>"$report"
fi
if want shared; then
  shared_benchmark
  { echo "## Shared fences on etcd: W1 and W2 through 1 and 3 instances"; echo; shared_report; echo; } >>"$report"
fi
if want chain; then
  chain_benchmark
  { echo "## Chained writes: W1 with the client's If-Match, --conditional-writes off and s3"; echo; chain_report; echo; } >>"$report"
fi
if want custody; then
  custody_benchmark
  { echo "## Credential custody: W1 signed by the client and re-signed, next to W1 unsigned"; echo; custody_report; echo; } >>"$report"
fi
if want micro; then
  micro
  { echo "## Micro-benchmarks"; echo; micro_report; echo; } >>"$report"
fi
echo "- CPU busy after the run: $(cpu_busy_percent)% (load average $(cut -d' ' -f1-3 /proc/loadavg))" >>"$report"
# The charts of docs/BENCHMARKS.md, from this run's results.
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
  "$venv/bin/python" scripts/bench/charts.py "$out" "$out/charts" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >&2 ||
    log "charts: charts.py failed"
else
  log "charts: no matplotlib in $venv (scripts/install-deps.sh installs it): no charts"
fi
cat "$report"
log "report: $report (raw: $results, $out/*.txt, charts: $out/charts)"
