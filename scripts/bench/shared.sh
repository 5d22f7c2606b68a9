# Part 7 of scripts/bench.sh (sourced): shared fences on etcd. W1 (steady
# token) and W2 (every PUT raises) through one fencegate --state etcd
# instance and through three at once (one wrk per instance, the connections
# split between them; W2 keys distinct per instance, W1 keys shared), next
# to fencegate --state disk on one instance, all in the same run, over a
# 3-member etcd cluster on loopback. Reports etcd round trips per request
# and claims per etcd transaction from the instances' /metrics.
#
# Placement (when pinned): the fencegate instances on the proxy CPU; wrk,
# the backend nginx and the three etcd members on the client CPU.

shared_results=$out/shared.tsv
etcd_client_port=$((port + 18)) # .. +20
etcd_peer_port=$((port + 21))   # .. +23
shared_gw_port=$((port + 24))   # data +24 +26 +28, admin +25 +27 +29
shared_disk_port=$((port + 30))
shared_disk_admin=$((port + 31))

shared_start() {
  [ -n "${mem_pid:-}" ] || start_processes
  local cluster="" i
  for i in 0 1 2; do
    cluster+="${cluster:+,}m$i=http://127.0.0.1:$((etcd_peer_port + i))"
  done
  for i in 0 1 2; do
    "${client_pin[@]}" etcd --name "m$i" --data-dir "$work/etcd-m$i" \
      --listen-client-urls "http://127.0.0.1:$((etcd_client_port + i))" \
      --advertise-client-urls "http://127.0.0.1:$((etcd_client_port + i))" \
      --listen-peer-urls "http://127.0.0.1:$((etcd_peer_port + i))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_peer_port + i))" \
      --initial-cluster "$cluster" --initial-cluster-state new \
      --logger zap --log-level error >"$work/etcd-m$i.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1 2; do wait_http "http://127.0.0.1:$((etcd_client_port + i))/health"; done
  etcd_endpoints="http://127.0.0.1:$etcd_client_port,http://127.0.0.1:$((etcd_client_port + 1)),http://127.0.0.1:$((etcd_client_port + 2))"
  for i in 0 1 2; do
    "${proxy_pin[@]}" "$bin" --upstream "http://127.0.0.1:$backend_port" --state etcd \
      --etcd-endpoints "$etcd_endpoints" --instance-name "bench-$i" \
      --data-dir "$work/shared-$i" \
      --listen "127.0.0.1:$((shared_gw_port + 2 * i))" \
      --admin-listen "127.0.0.1:$((shared_gw_port + 2 * i + 1))" \
      >"$work/fencegate-etcd-$i.log" 2>&1 &
    pids+=($!)
  done
  "${proxy_pin[@]}" "$bin" --upstream "http://127.0.0.1:$backend_port" --state disk \
    --data-dir "$work/shared-disk" \
    --listen "127.0.0.1:$shared_disk_port" --admin-listen "127.0.0.1:$shared_disk_admin" \
    >"$work/fencegate-shared-disk.log" 2>&1 &
  pids+=($!)
  for i in 0 1 2; do wait_http "http://127.0.0.1:$((shared_gw_port + 2 * i + 1))/readyz"; done
  wait_http "http://127.0.0.1:$shared_disk_admin/readyz"
}

shared_metric() { # shared_metric INSTANCE NAME: a counter from an etcd instance's /metrics
  curl -fsS "http://127.0.0.1:$((shared_gw_port + 2 * $1 + 1))/metrics" |
    awk -v n="$2" '$1 == n { printf "%.0f\n", $2 }'
}

shared_counters() { # the sum over the instances of: round trips, raises, commits
  local rt=0 raises=0 commits=0 i
  for i in 0 1 2; do
    rt=$((rt + $(shared_metric "$i" fencegate_shared_etcd_round_trips_total)))
    raises=$((raises + $(shared_metric "$i" fencegate_store_raises_total)))
    commits=$((commits + $(shared_metric "$i" fencegate_store_commits_total)))
  done
  echo "$rt $raises $commits"
}

# shared_wrk TARGET WORKLOAD SECONDS: sets `line` (requests, rps summed over
# the wrk processes; p50 their mean, p99 their max; errors summed).
shared_wrk() {
  run_seq=$((run_seq + 1))
  local base=$((run_seq * 1000000000)) n urls=() i
  case $1 in
    d1) urls=("http://127.0.0.1:$shared_disk_port") ;;
    e1) urls=("http://127.0.0.1:$shared_gw_port") ;;
    e3) for i in 0 1 2; do urls+=("http://127.0.0.1:$((shared_gw_port + 2 * i))"); done ;;
  esac
  n=${#urls[@]}
  local wrks=()
  for i in $(seq 0 $((n - 1))); do
    "${client_pin[@]}" wrk -t1 -c"$((connections / n))" -d"${3}s" --timeout 10s \
      -s scripts/bench/workload.lua "${urls[$i]}" -- "$2" 1 "$base" "i$i" \
      >"$work/wrk-$i.out" 2>&1 &
    wrks+=($!)
  done
  # Only the wrk processes: a bare `wait` would wait for the servers too.
  wait "${wrks[@]}" || true
  line=$(cat "$work"/wrk-[0-9].out 2>/dev/null | grep '^RESULT' | awk -v n="$n" '
    { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      req += v["requests"]; rps += v["rps"]; p50 += v["p50_us"]; err += v["errors"]
      if (v["p99_us"] > p99) p99 = v["p99_us"]; got++ }
    END { if (got < n) err += n - got
          printf "RESULT requests=%d rps=%.1f p50_us=%d p99_us=%d errors=%d\n", req, rps, got ? p50 / got : 0, p99, err }')
  rm -f "$work"/wrk-[0-9].out
}

shared_benchmark() {
  shared_start
  log "shared: warm-up ${warmup}s per target and workload"
  for w in w1 w2; do for t in d1 e1 e3; do shared_wrk "$t" "$w" "$warmup"; done; done
  printf 'repeat\tworkload\ttarget\trps\tp50_us\tp99_us\terrors\trequests\tround_trips\traises\tcommits\n' >"$shared_results"
  for rep in $(seq "$repeats"); do
    for w in w1 w2; do
      for t in d1 e1 e3; do
        local c0 c1
        c0=($(shared_counters))
        shared_wrk "$t" "$w" "$duration"
        c1=($(shared_counters))
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$w" "$t" \
          "$(field rps "$line")" "$(field p50_us "$line")" "$(field p99_us "$line")" \
          "$(field errors "$line")" "$(field requests "$line")" \
          "$((c1[0] - c0[0]))" "$((c1[1] - c0[1]))" "$((c1[2] - c0[2]))" >>"$shared_results"
        log "shared repeat $rep/$repeats $w ($t): $line round_trips=$((c1[0] - c0[0])) raises=$((c1[1] - c0[1])) commits=$((c1[2] - c0[2]))"
      done
    done
  done
}

shared_report() {
  m() { results=$shared_results median "$@"; }
  s() { results=$shared_results total "$@"; }
  local -A names=([d1]="(d) fencegate --state disk, 1 instance" [e1]="(e1) --state etcd, 1 instance" [e3]="(e3) --state etcd, 3 instances")
  echo "| workload | target | req/s | p50 ms | p99 ms | req/s / (d) | etcd round trips per request | claims per etcd transaction | errors |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  for w in w1 w2; do
    for t in d1 e1 e3; do
      local rt="-" per_txn="-"
      if [ "$t" != d1 ]; then
        rt=$(calc "%.4f" "$(s 9 "$w" "$t") / ($(s 8 "$w" "$t") + 0.000001)")
        per_txn=$(calc "%.1f" "$(s 10 "$w" "$t") / ($(s 11 "$w" "$t") + 0.000001)")
      fi
      printf '| %s | %s | %.0f | %.2f | %.2f | %.2f | %s | %s | %s |\n' "$w" "${names[$t]}" \
        "$(m 4 "$w" "$t")" "$(calc "%.3f" "$(m 5 "$w" "$t") / 1000")" \
        "$(calc "%.3f" "$(m 6 "$w" "$t") / 1000")" \
        "$(calc "%.3f" "$(m 4 "$w" "$t") / ($(m 4 "$w" d1) + 0.000001)")" \
        "$rt" "$per_txn" "$(s 7 "$w" "$t")"
    done
  done
  echo
  echo "Round trips count every call to etcd during the runs (claims, lease renewals every TTL/6 per instance, record deletions); claims per transaction = claims committed / claim transactions. etcd: $(etcd --version | head -1)."
}
