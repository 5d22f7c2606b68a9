# Part 9 of scripts/bench.sh (sourced): what credential custody costs
# (SPEC "Credential custody", "What it costs"). W1 (1 KiB PUTs over the
# 1,000 W1 keys, each key always with the same token) through two
# fencegates in front of one backend nginx (which ignores signatures: the
# gateway's cost is what is measured):
#   (c-custody-u) `--store s3 --state memory`, no custody, the requests
#                 unsigned (workload w1);
#   (c-custody-s) the same with `--upstream-credentials` (aws-sigv4, the
#                 store's key) and `--identities` (one identity, write on
#                 `/`): the same requests signed by the client with SigV4
#                 (Authorization header, hex payload hash of the body,
#                 host;x-amz-content-sha256;x-amz-date;x-fencing-token
#                 signed), verified by the gateway and re-signed with the
#                 store's key (workload w1s).
#   (c-custody-au) `--store azure --state memory --token-header
#                 x-ms-fencing-token`, no custody, W1 as Put Blob requests
#                 unsigned (workload w1a);
#   (c-custody-as) the same with `--upstream-credentials` (azure-shared-key)
#                 and `--identities` (one identity, account fgbench): the
#                 same requests signed by the client with Shared Key on
#                 `/fgbench/w1/kN`, verified, the account mapped away, and
#                 re-signed with the store's account key (workload w1a).
# The signed requests are prebuilt: one per W1 key (same paths and tokens as
# W1), signed by python3 (stdlib hmac/hashlib) just before every run that
# replays them, for the exact Host wrk sends, so x-amz-date is always well
# within the 15 minutes the gateway accepts. One request is checked by curl
# first: a refusal is reported with what the gateway logged, and the part
# measures nothing then.
# Interleaved repeats; req/s, latency, CPU time (user + system, from
# /proc/PID/stat) per request of each gateway; then, if valgrind is
# installed (BENCH_CUSTODY_CALLGRIND=0 skips it), user-space instructions
# per request of each under callgrind (as scripts/bench/profile.sh counts
# them: a warm-up, counters zeroed, BENCH_CUSTODY_CALLGRIND_SECONDS (5) of
# load, instructions divided by the requests wrk completed). The goal: the
# signed path at most 1.5 x the unsigned path's instructions.
#
# Placement (when pinned): the fencegates on the proxy CPU (one measured at
# a time); wrk and the backend nginx on the client CPU.

custody_backend_port=$((port + 38))
custody_u_port=$((port + 39))
custody_u_admin=$((port + 40))
custody_s_port=$((port + 41))
custody_s_admin=$((port + 42))
# write_nginx_confs also writes a proxy conf; this part never starts it.
custody_unused_proxy_port=$((port + 43))
# The gateways under callgrind, one at a time.
custody_cg_port=$((port + 44))
custody_cg_admin=$((port + 45))
custody_au_port=$((port + 46))
custody_au_admin=$((port + 47))
custody_as_port=$((port + 48))
custody_as_admin=$((port + 49))
custody_targets=(c-custody-u c-custody-s c-custody-au c-custody-as)
custody_results=$out/custody.tsv
custody_callgrind=$out/custody-callgrind.txt
custody_callgrind_seconds=${BENCH_CUSTODY_CALLGRIND_SECONDS:-5}
custody_signed=$work/custody/signed.tsv
custody_refused=""

# custody_write_files DIR: the store's credentials and the one identity.
custody_write_files() {
  local dir=$1
  mkdir -p "$dir"
  # Secrets without a trailing newline; random for this run.
  head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/store.secret"
  head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/bench.secret"
  chmod 600 "$dir/store.secret" "$dir/bench.secret"
  printf 'kind = "aws-sigv4"\naccess_key_id = "AKIDSTORE"\nsecret_access_key_file = "%s"\nregion = "us-east-1"\n' \
    "$dir/store.secret" >"$dir/upstream.toml"
  printf '[[identity]]\nname = "bench"\naccess_key_id = "FGBENCH01"\nsecret_file = "%s"\nallow = [ { prefix = "/", access = "write" } ]\n' \
    "$dir/bench.secret" >"$dir/identities.toml"
  # Azure: account keys are base64 of 64 random bytes.
  head -c 64 /dev/urandom | base64 -w0 >"$dir/az-store.key"
  head -c 64 /dev/urandom | base64 -w0 >"$dir/az-bench.key"
  chmod 600 "$dir/az-store.key" "$dir/az-bench.key"
  printf 'kind = "azure-shared-key"\naccount = "fgstore"\nkey_file = "%s"\n' \
    "$dir/az-store.key" >"$dir/az-upstream.toml"
  printf '[[identity]]\nname = "bench"\naccess_key_id = "fgbench"\nsecret_file = "%s"\nallow = [ { prefix = "/", access = "write" } ]\n' \
    "$dir/az-bench.key" >"$dir/az-identities.toml"
}

# custody_sign_azure OUT signed|unsigned: one W1 Put Blob per key (path,
# token, x-ms-date, Authorization or "-"; tab-separated), for
# workload.lua's w1a; signed with Shared Key by the identity fgbench on
# /fgbench/w1/kN, or unsigned on /w1/kN. Dated now: call it right before
# the run.
custody_sign_azure() {
  python3 - "$1" "$2" "$work/custody/az-bench.key" <<'EOF'
import base64, email.utils, hashlib, hmac, sys

out, kind, key_file = sys.argv[1:4]
key = base64.b64decode(open(key_file).read().strip())
date = email.utils.formatdate(usegmt=True)
with open(out, "w") as f:
    for k in range(1000):                # workload.lua's KEYS
        token = str(1000 + k)
        # The account first, as Azurite reads a path at an IP address: without
        # custody the gateway reads it so too (the Azure operation table), and
        # a two-segment path would be a container, no Put Blob.
        path = f"/fgbench/w1/k{k}"
        if kind == "unsigned":
            f.write("\t".join([path, token, date, "-"]) + "\n")
            continue
        # The verb, eleven standard fields (Content-Length 1024), the x-ms-*
        # fields in the service's order, the canonicalized resource.
        to_sign = "PUT\n\n\n1024\n\n\n\n\n\n\n\n\n" + (
            f"x-ms-blob-type:BlockBlob\nx-ms-date:{date}\nx-ms-fencing-token:{token}\n"
            f"x-ms-version:2021-08-06\n/fgbench{path}")
        signature = base64.b64encode(
            hmac.new(key, to_sign.encode(), hashlib.sha256).digest()).decode()
        f.write("\t".join([path, token, date, f"SharedKey fgbench:{signature}"]) + "\n")
EOF
}

# custody_sign HOST OUT: one signed W1 request per key (path, token, host,
# x-amz-date, payload hash, Authorization; tab-separated), for
# workload.lua's w1s. Signed now: call it right before the run.
custody_sign() {
  python3 - "$1" "$2" "$work/custody/bench.secret" <<'EOF'
import datetime, hashlib, hmac, sys

host, out, secret_file = sys.argv[1:4]
secret = open(secret_file).read().strip()
access_key, region, service = "FGBENCH01", "us-east-1", "s3"
body = b"x" * 1024                       # workload.lua's W1 body
payload = hashlib.sha256(body).hexdigest()
now = datetime.datetime.now(datetime.timezone.utc)
amz_date, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
scope = f"{date}/{region}/{service}/aws4_request"
key = ("AWS4" + secret).encode()
for part in (date, region, service, "aws4_request"):
    key = hmac.new(key, part.encode(), hashlib.sha256).digest()
signed = "host;x-amz-content-sha256;x-amz-date;x-fencing-token"
with open(out, "w") as f:
    for k in range(1000):                # workload.lua's KEYS
        path, token = f"/w1/k{k}", str(1000 + k)
        canonical = "\n".join([
            "PUT", path, "",
            f"host:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{amz_date}\nx-fencing-token:{token}\n",
            signed, payload])
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        auth = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                f"SignedHeaders={signed}, Signature={signature}")
        f.write("\t".join([path, token, host, amz_date, payload, auth]) + "\n")
EOF
}

# custody_check PORT LOG: the first signed request by curl; sets
# custody_refused when the gateway does not take it.
custody_check() {
  local port=$1 gwlog=$2 path token host date payload auth status
  custody_sign "127.0.0.1:$port" "$custody_signed"
  IFS=$'\t' read -r path token host date payload auth <"$custody_signed"
  head -c 1024 /dev/zero | tr '\0' x >"$work/custody/body"
  # No Content-Type or Expect (an unsigned Content-Type is refused).
  status=$(curl -sS -o "$work/custody/check.body" -w '%{http_code}' -X PUT \
    -H "Host: $host" -H "X-Fencing-Token: $token" -H "X-Amz-Date: $date" \
    -H "X-Amz-Content-Sha256: $payload" -H "Authorization: $auth" \
    -H 'Content-Type:' -H 'Expect:' --data-binary @"$work/custody/body" \
    "http://127.0.0.1:$port$path") || status=000
  case $status in
    200 | 201 | 204) log "custody: signed PUT $path answered $status" ;;
    *)
      custody_refused="signed PUT $path answered $status: $(tr -d '\n' <"$work/custody/check.body" | head -c 400); the gateway logged: $(grep -i 'custody' "$gwlog" | tail -3 | tr '\n' ' ' | head -c 800)"
      log "custody: $custody_refused"
      ;;
  esac
}

# custody_check_azure PORT LOG: the first signed Put Blob by curl; sets
# custody_refused when the gateway does not take it.
custody_check_azure() {
  local port=$1 gwlog=$2 path token date auth status
  custody_sign_azure "$work/custody/az-check.tsv" signed
  IFS=$'\t' read -r path token date auth <"$work/custody/az-check.tsv"
  head -c 1024 /dev/zero | tr '\0' x >"$work/custody/body"
  status=$(curl -sS -o "$work/custody/check.body" -w '%{http_code}' -X PUT \
    -H "x-ms-fencing-token: $token" -H "x-ms-date: $date" -H "x-ms-version: 2021-08-06" \
    -H "x-ms-blob-type: BlockBlob" -H "Authorization: $auth" \
    -H 'Content-Type:' -H 'Expect:' --data-binary @"$work/custody/body" \
    "http://127.0.0.1:$port$path") || status=000
  case $status in
    200 | 201 | 204) log "custody: signed Put Blob $path answered $status" ;;
    *)
      custody_refused="signed Put Blob $path answered $status: $(tr -d '\n' <"$work/custody/check.body" | head -c 400); the gateway logged: $(grep -i 'custody' "$gwlog" | tail -3 | tr '\n' ' ' | head -c 800)"
      log "custody: $custody_refused"
      ;;
  esac
}

custody_gateway() { # custody_gateway u|s|au|as PORT ADMIN LOG [PREFIX...]: starts one, sets custody_pid
  local kind=$1 gport=$2 gadmin=$3 glog=$4
  shift 4
  local extra=()
  case $kind in
    u) extra=(--store s3) ;;
    s) extra=(--store s3 --upstream-credentials "$work/custody/upstream.toml"
      --identities "$work/custody/identities.toml") ;;
    au) extra=(--store azure --token-header x-ms-fencing-token) ;;
    as) extra=(--store azure --token-header x-ms-fencing-token
      --upstream-credentials "$work/custody/az-upstream.toml"
      --identities "$work/custody/az-identities.toml") ;;
  esac
  "${proxy_pin[@]}" "$@" "$bin" --upstream "http://127.0.0.1:$custody_backend_port" --state memory \
    "${extra[@]}" --listen "127.0.0.1:$gport" --admin-listen "127.0.0.1:$gadmin" \
    >"$glog" 2>&1 &
  custody_pid=$!
  pids+=("$custody_pid")
}

start_custody() {
  mkdir -p "$work/custody/dav"
  custody_write_files "$work/custody"
  write_nginx_confs "$work/custody" "$custody_backend_port" "$custody_unused_proxy_port"
  "${client_pin[@]}" nginx -p "$work/custody" -c "$work/custody/backend.conf" >>"$work/custody/backend.error.log" 2>&1 &
  pids+=($!)
  custody_gateway u "$custody_u_port" "$custody_u_admin" "$work/fencegate-custody-u.log"
  custody_u_pid=$custody_pid
  custody_gateway s "$custody_s_port" "$custody_s_admin" "$work/fencegate-custody-s.log"
  custody_s_pid=$custody_pid
  custody_gateway au "$custody_au_port" "$custody_au_admin" "$work/fencegate-custody-au.log"
  custody_au_pid=$custody_pid
  custody_gateway as "$custody_as_port" "$custody_as_admin" "$work/fencegate-custody-as.log"
  custody_as_pid=$custody_pid
  wait_http "http://127.0.0.1:$custody_backend_port/"
  local admin
  for admin in "$custody_u_admin" "$custody_s_admin" "$custody_au_admin" "$custody_as_admin"; do
    wait_http "http://127.0.0.1:$admin/healthz"
  done
}


# custody_run TARGET SECONDS: one wrk run (signing first for the signed
# gateway); sets `line` and `ticks` (the gateway's CPU ticks in the run).
custody_run() {
  local t=$1 secs=$2 pid before
  case $t in
    c-custody-s)
      pid=$custody_s_pid
      custody_sign "127.0.0.1:$custody_s_port" "$custody_signed"
      before=$(cpu_ticks "$pid")
      run_wrk "$t" w1s "$secs" "$custody_signed"
      ;;
    c-custody-au | c-custody-as)
      if [ "$t" = c-custody-as ]; then
        pid=$custody_as_pid
        custody_sign_azure "$custody_signed" signed
      else
        pid=$custody_au_pid
        custody_sign_azure "$custody_signed" unsigned
      fi
      before=$(cpu_ticks "$pid")
      run_wrk "$t" w1a "$secs" "$custody_signed"
      ;;
    *)
      pid=$custody_u_pid
      before=$(cpu_ticks "$pid")
      run_wrk "$t" w1 "$secs"
      ;;
  esac
  ticks=$(($(cpu_ticks "$pid") - before))
}

# custody_callgrind_one u|s|au|as: instructions per request of one gateway under
# callgrind; appends a line to $custody_callgrind.
custody_callgrind_one() {
  local kind=$1 file=$work/custody/callgrind.$1 workload=w1 extra=()
  custody_gateway "$kind" "$custody_cg_port" "$custody_cg_admin" "$work/fencegate-custody-cg-$kind.log" \
    valgrind --tool=callgrind --callgrind-out-file="$file"
  local pid=$custody_pid
  wait_http "http://127.0.0.1:$custody_cg_admin/healthz"
  case $kind in
    s)
      workload=w1s
      custody_sign "127.0.0.1:$custody_cg_port" "$work/custody/signed-cg.tsv"
      extra=("$work/custody/signed-cg.tsv")
      ;;
    au | as)
      workload=w1a
      if [ "$kind" = as ]; then
        custody_sign_azure "$work/custody/signed-cg.tsv" signed
      else
        custody_sign_azure "$work/custody/signed-cg.tsv" unsigned
      fi
      extra=("$work/custody/signed-cg.tsv")
      ;;
  esac
  load_cg() { # load_cg SECONDS: the RESULT line
    "${client_pin[@]}" wrk -t1 -c"$connections" -d"${1}s" --timeout 30s -s scripts/bench/workload.lua \
      "http://127.0.0.1:$custody_cg_port" -- "$workload" 1 1 "${extra[@]}" 2>&1 | grep '^RESULT' ||
      echo "RESULT requests=0 rps=0 p50_us=0 p99_us=0 errors=1"
  }
  load_cg 2 >/dev/null
  callgrind_control -z "$pid" >/dev/null
  local cg_line instructions requests
  cg_line=$(load_cg "$custody_callgrind_seconds")
  callgrind_control -d "$pid" >/dev/null
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  instructions=$(awk '/^(summary|totals):/ { print $2; exit }' "$file.1" 2>/dev/null)
  requests=$(field requests "$cg_line")
  # Of them, SHA-256's block function (ring's): valgrind offers no SHA
  # extensions (SHA-NI), so it runs ring's AVX code, where the hardware
  # would run a few instructions per round.
  local sha
  sha=$(callgrind_annotate --threshold=100 --inclusive=no "$file.1" 2>/dev/null |
    awk '/sha256_block_data_order/ && !/=>/ { gsub(",", "", $1); s += $1 } END { print s + 0 }')
  printf 'target=%s instructions=%s requests=%s errors=%s per_request=%s sha256_per_request=%s\n' "$kind" \
    "${instructions:-0}" "${requests:-0}" "$(field errors "$cg_line")" \
    "$(calc "%.0f" "${instructions:-0} / (${requests:-0} > 0 ? ${requests:-0} : 1)")" \
    "$(calc "%.0f" "${sha:-0} / (${requests:-0} > 0 ? ${requests:-0} : 1)")" >>"$custody_callgrind"
  log "custody under callgrind ($kind): $cg_line instructions=${instructions:-0}"
}

custody_benchmark() {
  start_custody
  : >"$custody_callgrind"
  printf 'repeat\tworkload\ttarget\trps\tp50_us\tp99_us\terrors\trequests\tcpu_ticks\n' >"$custody_results"
  custody_check "$custody_s_port" "$work/fencegate-custody-s.log"
  [ -z "$custody_refused" ] || return 0
  custody_check_azure "$custody_as_port" "$work/fencegate-custody-as.log"
  [ -z "$custody_refused" ] || return 0
  log "custody: warm-up ${warmup}s per target"
  local t ticks
  for t in "${custody_targets[@]}"; do custody_run "$t" "$warmup"; done
  for rep in $(seq "$repeats"); do
    for t in "${custody_targets[@]}"; do
      custody_run "$t" "$duration"
      printf '%s\tw1\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$t" \
        "$(field rps "$line")" "$(field p50_us "$line")" "$(field p99_us "$line")" \
        "$(field errors "$line")" "$(field requests "$line")" "$ticks" >>"$custody_results"
      log "custody repeat $rep/$repeats ($t): $line cpu_ticks=$ticks"
    done
  done
  if [ "${BENCH_CUSTODY_CALLGRIND:-1}" != 0 ] && command -v valgrind >/dev/null &&
    command -v callgrind_control >/dev/null; then
    log "custody: instructions per request under callgrind, ${custody_callgrind_seconds}s each"
    local kind
    for kind in u s au as; do custody_callgrind_one "$kind"; done
  fi
}

custody_report() {
  if [ -n "$custody_refused" ]; then
    echo "**The signed request was refused, nothing was measured:** $custody_refused"
    return
  fi
  m() { results=$custody_results median "$@"; }
  local hz
  hz=$(getconf CLK_TCK)
  # CPU microseconds per request, median over the runs of one target.
  cpu_us() {
    awk -F'\t' -v t="$1" -v hz="$hz" 'NR > 1 && $3 == t && $8 > 0 { print 1e6 * $9 / hz / $8 }' "$custody_results" |
      sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
  }
  echo "| W1 (1 KiB PUTs, steady token), fencegate --state memory | req/s | p50 ms | p99 ms | CPU µs per request | errors |"
  echo "|---|---:|---:|---:|---:|---:|"
  local names=("(u) --store s3, no custody, unsigned"
    "(s) --store s3 --upstream-credentials --identities, signed by the client (SigV4), re-signed"
    "(au) --store azure, no custody, unsigned"
    "(as) --store azure --upstream-credentials --identities, signed by the client (Shared Key), re-signed")
  local i=0 t
  for t in "${custody_targets[@]}"; do
    printf '| %s | %s | %s | %s | %s | %s |\n' "${names[$i]}" "$(calc "%.0f" "$(m 4 w1 "$t")")" \
      "$(calc "%.2f" "$(m 5 w1 "$t") / 1000")" "$(calc "%.2f" "$(m 6 w1 "$t") / 1000")" \
      "$(calc "%.1f" "$(cpu_us "$t")")" "$(results=$custody_results total 7 w1 "$t")"
    i=$((i + 1))
  done
  echo
  echo "| measure (same run) | value | goal | verdict |"
  echo "|---|---:|---:|---|"
  local pair u s name cu cs iu is
  for pair in "u s S3" "au as Azure"; do
    read -r u s name <<<"$pair"
    printf '| %s: req/s signed / unsigned (medians) | %s | | |\n' "$name" \
      "$(calc "%.2f" "$(m 4 w1 "c-custody-$s") / ($(m 4 w1 "c-custody-$u") + 0.000001)")"
    printf '| %s: CPU per request signed / unsigned (medians) | %s | | |\n' "$name" \
      "$(calc "%.2f" "$(cpu_us "c-custody-$s") / ($(cpu_us "c-custody-$u") + 0.000001)")"
    if [ -s "$custody_callgrind" ]; then
      cu=$(grep "^target=$u " "$custody_callgrind")
      cs=$(grep "^target=$s " "$custody_callgrind")
      iu=$(field per_request "$cu")
      is=$(field per_request "$cs")
      printf '| %s: instructions per request under callgrind, (%s) (%s requests, %s errors) | %s | | |\n' \
        "$name" "$u" "$(field requests "$cu")" "$(field errors "$cu")" "$iu"
      printf '| %s: instructions per request under callgrind, (%s) (%s requests, %s errors) | %s | | |\n' \
        "$name" "$s" "$(field requests "$cs")" "$(field errors "$cs")" "$is"
      printf '| %s: instructions signed / unsigned | %s | <= 1.5 | %s |\n' "$name" \
        "$(calc "%.2f" "$is / (${iu:-0} + 0.000001)")" \
        "$(awk -v s="$is" -v u="$iu" 'BEGIN { print (u > 0 && s <= 1.5 * u) ? "met" : "not met" }')"
      local hs hu
      hs=$(field sha256_per_request "$cs")
      hu=$(field sha256_per_request "$cu")
      printf '| %s: of the signed request'"'"'s, in SHA-256 blocks (software under valgrind) | %s | | |\n' "$name" "${hs:-0}"
      printf '| %s: instructions signed / unsigned, SHA-256 blocks left out of both | %s | | |\n' "$name" \
        "$(calc "%.2f" "(${is:-0} - ${hs:-0}) / (${iu:-0} - ${hu:-0} + 0.000001)")"
    else
      echo "| $name: instructions per request | (not measured: valgrind missing or BENCH_CUSTODY_CALLGRIND=0) | <= 1.5 x | |"
    fi
  done
  echo
  echo "Signed requests: one prebuilt per W1 key (the same 1,000 paths and tokens as W1), signed right before each run (SigV4 for \`Host: 127.0.0.1:PORT\`; Shared Key over the Put Blob's fields); wrk replays them (both stay valid while their date is within 15 minutes of the gateway's clock)."
}
