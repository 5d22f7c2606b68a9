#!/usr/bin/env bash
# How the cost of fences grows with their number (fences issue): the
# release gateway in `--state disk` with its default fence cache, started on
# a fence file of N fences, for each N of GROWTH_FENCES (default
# "0 500000 1000000 10000000"; add 100000000 for the 100 M row, 3.4 GB of
# disk and about two minutes to fill):
#
#   scripts/bench/growth.sh
#   GROWTH_FENCES="0 1000000 100000000" scripts/bench/growth.sh
#
# Per N, in this order:
#   1. the file: filled once by `fence_growth fill` (kept in
#      target/bench/growth/N for the next run), its bytes per fence;
#   2. the library alone (`fence_growth probe`, a fresh process): time to
#      open, admission latency of a hot key and of cold keys (in the file
#      only; page cache warm, and cold where this runs as root);
#   3. the gateway (pinned to CPU 0, wrk on CPU 1, nginx as the backend as
#      in scripts/bench.sh): time from its start to the first answered
#      request (a PUT on a key of the file, at its own highest), RSS at rest
#      once it has answered, then W1 (1,000 hot keys) and W3 for
#      GROWTH_SECONDS each: req/s, p99, CPU per request, and the highest RSS
#      sampled during W1.
# N = 0 is the baseline of the same run: W1 and W3 at each N are reported
# beside it. Output: target/bench/growth.tsv, and a table on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
log_prefix=growth
# shellcheck source=lib.sh
source scripts/bench/lib.sh
# shellcheck source=nginx.sh
source scripts/bench/nginx.sh

sizes=${GROWTH_FENCES:-0 500000 1000000 10000000}
seconds=${GROWTH_SECONDS:-10}
samples=${GROWTH_SAMPLES:-20000}
port=${BENCH_PORT:-18800}
backend_port=$port gw_port=$((port + 1)) gw_admin=$((port + 2))
out=target/bench
mkdir -p "$out/growth"
work=$(mktemp -d)
cleanup_extra() { rm -rf "$work"; }

for tool in nginx wrk curl taskset; do
  command -v "$tool" >/dev/null || { log "missing $tool (scripts/install-deps.sh)"; exit 1; }
done
cargo build --release --locked --bin fencegate --example fence_growth
target_dir=$(cargo_target_dir)
bin=$target_dir/release/fencegate
growth=$target_dir/release/examples/fence_growth
pin_proxy=(taskset -c 0) pin_client=(taskset -c 1)
[ "$(nproc)" -lt 2 ] && pin_proxy=() pin_client=()

write_nginx_confs "$work" "$backend_port" $((port + 3))
"${pin_client[@]}" nginx -p "$work" -c "$work/backend.conf" >>"$work/backend.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$backend_port/"

rss() { awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status"; } # rss PID: bytes
now_ns() { date +%s%N; }

printf 'fences\tfile_bytes\topen_s\thot_p99_us\tcold_warm_p50_us\tcold_warm_p99_us\tcold_disk_p99_us\tfirst_answer_ms\trss_rest\trss_w1_max\tw1_rps\tw1_p99_us\tw1_cpu_us\tw3_rps\tw3_cpu_us\n' \
  >"$out/growth.tsv"
hz=$(getconf CLK_TCK)
for n in $sizes; do
  dir=$out/growth/$n
  if [ ! -s "$dir/fences.redb" ]; then
    rm -rf "$dir"
    log "filling $n fences"
    if [ "$n" = 0 ]; then
      "$growth" fill "$dir" 0 >/dev/null
    else
      "$growth" fill "$dir" "$n" >&2
    fi
  fi
  file_bytes=$(stat -c %s "$dir/fences.redb")
  probe="open_seconds=0 hot_p99_us=0 cold_warm_p50_us=0 cold_warm_p99_us=0"
  if [ "$n" != 0 ]; then
    probe=$("$growth" probe "$dir" "$n" "$samples")
  fi
  log "probe: $probe"

  # The gateway on the file: the first answer, timed from the start.
  key=/g/object-000000007
  started=$(now_ns)
  "${pin_proxy[@]}" "$bin" --upstream "http://127.0.0.1:$backend_port" --data-dir "$dir" \
    --listen "127.0.0.1:$gw_port" --admin-listen "127.0.0.1:$gw_admin" \
    >"$work/gateway-$n.log" 2>&1 &
  gw_pid=$!
  pids+=("$gw_pid")
  token=8
  [ "$n" = 0 ] && token=1
  until curl -fsS -o /dev/null -X PUT -H "X-Fencing-Token: $token" --data x \
    "http://127.0.0.1:$gw_port$key" 2>/dev/null; do
    kill -0 "$gw_pid" 2>/dev/null || { log "the gateway exited: $(cat "$work/gateway-$n.log")"; exit 1; }
    sleep 0.002
  done
  first_ms=$(calc "%.1f" "($(now_ns) - $started) / 1e6")
  sleep 1
  rss_rest=$(rss "$gw_pid")

  # W1 then W3, with RSS sampled during W1.
  declare -A rps p99 cpu
  rss_w1=0
  for w in w1 w3; do
    ticks0=$(cpu_ticks "$gw_pid")
    "${pin_client[@]}" wrk -t1 -c64 -d"${seconds}s" --timeout 10s \
      -s scripts/bench/workload.lua "http://127.0.0.1:$gw_port" -- "$w" 1 1 >"$work/wrk.out" 2>&1 &
    wrk_pid=$!
    while kill -0 "$wrk_pid" 2>/dev/null; do
      if [ "$w" = w1 ]; then
        now=$(rss "$gw_pid")
        [ "$now" -gt "$rss_w1" ] && rss_w1=$now
      fi
      sleep 0.5
    done
    wait "$wrk_pid" || true
    line=$(grep '^RESULT' "$work/wrk.out") || { log "wrk: $(cat "$work/wrk.out")"; exit 1; }
    ticks=$(($(cpu_ticks "$gw_pid") - ticks0))
    rps[$w]=$(field rps "$line")
    p99[$w]=$(field p99_us "$line")
    cpu[$w]=$(calc "%.2f" "1e6 * $ticks / $hz / ($(field requests "$line") + 0.000001)")
    errors=$(field errors "$line")
    [ "${errors:-0}" = 0 ] || log "$w at $n fences: $errors errors"
  done
  kill "$gw_pid"
  wait "$gw_pid" 2>/dev/null || true

  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$file_bytes" \
    "$(field open_seconds "$probe")" "$(field hot_p99_us "$probe")" \
    "$(field cold_warm_p50_us "$probe")" "$(field cold_warm_p99_us "$probe")" \
    "$(field cold_disk_p99_us "$probe")" "$first_ms" "$rss_rest" "$rss_w1" \
    "${rps[w1]}" "${p99[w1]}" "${cpu[w1]}" "${rps[w3]}" "${cpu[w3]}" >>"$out/growth.tsv"
  log "$n fences: first answer ${first_ms} ms, RSS at rest $((rss_rest >> 20)) MiB, under W1 $((rss_w1 >> 20)) MiB, W1 ${rps[w1]} req/s"
done

# The table, each size beside the baseline (N = 0) of this run.
awk -F'\t' 'NR == 1 { next }
  NR == 2 { w1 = $11; w3 = $14; c1 = $13 }
  { printf "| %s | %.0f | %.4f | %s / %s | %s | %.0f | %.1f | %.1f | %.0f (%.3f) | %s (%.3f) | %.0f (%.3f) |\n",
      $1, ($1 > 0 ? $2 / $1 : 0), $3, $5, $6, ($7 == "" ? "-" : $7), $8, $9 / 1048576, $10 / 1048576,
      $11, $11 / (w1 + 1e-9), $13, $13 / (c1 + 1e-9), $14, $14 / (w3 + 1e-9) }' "$out/growth.tsv" |
  { echo "| fences | disk bytes/fence | open s | cold p50/p99 us (warm) | cold p99 us (disk) | first answer ms | RSS at rest MiB | RSS under W1 MiB | W1 req/s (vs 0) | W1 CPU us/req (vs 0) | W3 req/s (vs 0) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    cat; }
