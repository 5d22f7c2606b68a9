# Part 8 of scripts/bench.sh (sourced): the cost of a chained write at full
# speed. W1 PUTs that each carry the client's own chain-shaped condition
# (w1c: `If-Match: "fencegate-bench"`) through two fencegates in front of
# one backend that names that version on every answer: (c-chain-off)
# `--conditional-writes off`, the condition forwarded untouched, and
# (c-chain) `--conditional-writes s3`, every PUT a chained write whose
# version comes from the client and is learned again from the answer.
# Interleaved repeats; req/s, latency, and the chain's own counters.
#
# Placement (when pinned): both fencegates on the proxy CPU (one measured at
# a time); wrk and the backend nginx on the client CPU.

chain_backend_port=$((port + 32))
chain_off_port=$((port + 33))
chain_off_admin=$((port + 34))
chain_on_port=$((port + 35))
chain_on_admin=$((port + 36))
# write_nginx_confs also writes a proxy conf; this part never starts it.
chain_unused_proxy_port=$((port + 37))
chain_results=$out/chain.tsv

chain_counter() { # chain_counter METRIC: the sum of a metric's series at the chained gateway
  curl -fsS "http://127.0.0.1:$chain_on_admin/metrics" |
    awk -v n="$1" 'index($1, n) == 1 && ($1 == n || substr($1, length(n) + 1, 1) == "{") { s += $2 } END { print s + 0 }'
}

start_chain() {
  mkdir -p "$work/chain/dav"
  BENCH_BACKEND_ETAG=1 write_nginx_confs "$work/chain" "$chain_backend_port" "$chain_unused_proxy_port"
  "${client_pin[@]}" nginx -p "$work/chain" -c "$work/chain/backend.conf" >>"$work/chain/backend.error.log" 2>&1 &
  pids+=($!)
  "${proxy_pin[@]}" "$bin" --upstream "http://127.0.0.1:$chain_backend_port" --state memory \
    --listen "127.0.0.1:$chain_off_port" --admin-listen "127.0.0.1:$chain_off_admin" \
    >"$work/fencegate-chain-off.log" 2>&1 &
  pids+=($!)
  "${proxy_pin[@]}" "$bin" --upstream "http://127.0.0.1:$chain_backend_port" --state memory \
    --conditional-writes s3 \
    --listen "127.0.0.1:$chain_on_port" --admin-listen "127.0.0.1:$chain_on_admin" \
    >"$work/fencegate-chain.log" 2>&1 &
  pids+=($!)
  wait_http "http://127.0.0.1:$chain_backend_port/"
  wait_http "http://127.0.0.1:$chain_off_admin/healthz"
  wait_http "http://127.0.0.1:$chain_on_admin/healthz"
}

chain_benchmark() {
  start_chain
  log "chain: warm-up ${warmup}s per target"
  for t in c-chain-off c-chain; do run_wrk "$t" w1c "$warmup"; done
  printf 'repeat\tworkload\ttarget\trps\tp50_us\tp99_us\terrors\trequests\n' >"$chain_results"
  for rep in $(seq "$repeats"); do
    for t in c-chain-off c-chain; do
      run_wrk "$t" w1c "$duration"
      printf '%s\tw1c\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$t" \
        "$(field rps "$line")" "$(field p50_us "$line")" "$(field p99_us "$line")" \
        "$(field errors "$line")" "$(field requests "$line")" >>"$chain_results"
      log "chain repeat $rep/$repeats ($t): $line"
    done
  done
}

chain_report() {
  m() { results=$chain_results median "$@"; }
  echo "| W1 with the client's If-Match, through | req/s | p50 ms | p99 ms | errors |"
  echo "|---|---:|---:|---:|---:|"
  local names=("(c) fencegate, --conditional-writes off" "(c) fencegate, --conditional-writes s3")
  local i=0
  for t in c-chain-off c-chain; do
    printf '| %s | %s | %s | %s | %s |\n' "${names[$i]}" "$(calc "%.0f" "$(m 4 w1c "$t")")" \
      "$(calc "%.2f" "$(m 5 w1c "$t") / 1000")" "$(calc "%.2f" "$(m 6 w1c "$t") / 1000")" \
      "$(results=$chain_results total 7 w1c "$t")"
    i=$((i + 1))
  done
  echo
  echo "| measure (same run) | value |"
  echo "|---|---:|"
  printf '| req/s chained / unchained (medians) | %s |\n' "$(calc "%.2f" "$(m 4 w1c c-chain) / $(m 4 w1c c-chain-off)")"
  printf '| versions observed (fencegate_chain_observations_total) | %s |\n' "$(chain_counter fencegate_chain_observations_total)"
  printf '| version conflicts (fencegate_chain_conflicts_total) | %s |\n' "$(chain_counter fencegate_chain_conflicts_total)"
}
