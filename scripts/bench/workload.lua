-- wrk script for scripts/bench.sh: one of three workloads, chosen by the
-- script arguments.
--
--   wrk -t T -c C ... -s scripts/bench/workload.lua URL -- w1|w2|w3 T [TOKEN_BASE [NAMESPACE]]
--   wrk ... -s scripts/bench/workload.lua URL -- w1s|w1a T TOKEN_BASE SIGNED_FILE
--
-- w1  1 KiB PUTs over 1,000 keys (/w1/k0 .. /w1/k999), each key always with
--     the same token (1000 + k): after the first round no PUT raises a fence,
--     the steady state of a lock holder.
-- w2  1 KiB PUTs where every PUT raises its key's token: each wrk thread owns
--     its own keys (/w2/t<thread>/k<n>, 1,000 keys in all) and sends
--     token = TOKEN_BASE + its request counter, which only grows. Requests on
--     one key are 1,000/T requests apart while at most C/T are outstanding,
--     so none arrives after a higher one on its key and none is refused. Each
--     run must pass a TOKEN_BASE above every token sent before to the same
--     gateway (scripts/bench.sh passes run_number * 10^9).
-- w3  GETs without a token over 1,000 keys (/w3/k0 ..): unfenced reads that
--     pass straight through.
-- w1l, w3l W1 and W3 with each request built by Lua when wrk asks for it
--     (string concatenation and wrk.format per request) instead of taken
--     from a prebuilt table: wrk does more per request and batches less,
--     which is how many clients send.
-- w1c W1 with the client's own chain-shaped condition on every PUT
--     (`If-Match: "fencegate-bench"`, the version the backend names when
--     BENCH_BACKEND_ETAG=1): the cost of a chained write
--     (`--conditional-writes s3`) against the same requests unchained.
-- w1s W1 signed with SigV4 for credential custody: the requests of W1 (same
--     paths, tokens and body), each with the Host, X-Amz-Date,
--     X-Amz-Content-Sha256 and Authorization headers read from SIGNED_FILE
--     (one line per key, tab-separated: path, token, host, x-amz-date,
--     payload hash, Authorization; scripts/bench/custody.sh writes it just
--     before the run, the signature covering the token).
-- w1a W1 as an Azure client sends it (Put Blob): x-ms-fencing-token,
--     x-ms-date, x-ms-version, x-ms-blob-type and Authorization read from
--     SIGNED_FILE (path, token, x-ms-date, Authorization or "-" for none;
--     scripts/bench/custody.sh writes it, signed with Shared Key).
--
-- At the end it prints one machine-readable line:
--   RESULT requests=N seconds=S rps=R p50_us=.. p99_us=.. errors=E
-- where errors counts responses with status >= 400 (409 included) plus
-- socket errors and timeouts, so a run full of refusals cannot pass as fast.

local KEYS = 1000
local body = string.rep("x", 1024)

-- setup() runs in the main Lua state, once per thread, before init().
local next_thread = 0
function setup(thread)
   thread:set("thread_id", next_thread)
   next_thread = next_thread + 1
end

-- Per thread (each thread has its own Lua state).
local workload, base, keys_per_thread, counter, prebuilt, prefix, token_header

function init(args)
   workload = args[1] or "w1"
   local threads = tonumber(args[2] or "1") or 1
   base = tonumber(args[3] or "1") or 1
   keys_per_thread = math.max(1, math.floor(KEYS / threads))
   counter = 0
   prebuilt = {}
   if workload == "w1" or workload == "w1c" then
      for k = 0, KEYS - 1 do
         local headers = { ["X-Fencing-Token"] = string.format("%d", 1000 + k) }
         if workload == "w1c" then
            headers["If-Match"] = '"fencegate-bench"'
         end
         prebuilt[k] = wrk.format("PUT", "/w1/k" .. k, headers, body)
      end
   elseif workload == "w3" then
      for k = 0, KEYS - 1 do
         prebuilt[k] = wrk.format("GET", "/w3/k" .. k, nil, nil)
      end
   elseif workload == "w1l" or workload == "w3l" then
      -- Built at each call (request() below): no table of requests.
   elseif workload == "w2" then
      -- args[4]: a namespace, so that several wrk processes at once (one
      -- per gateway instance) never share a W2 key.
      prefix = "/w2/" .. (args[4] or "") .. "t" .. (thread_id or 0) .. "/k"
   elseif workload == "w1s" then
      local file = assert(args[4], "w1s needs the file of signed requests")
      local n = 0
      for l in io.lines(file) do
         local path, token, host, date, payload, auth =
            l:match("^([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)\t(.+)$")
         assert(path, "bad line in " .. file .. ": " .. l)
         prebuilt[n] = wrk.format("PUT", path, {
            ["Host"] = host,
            ["X-Fencing-Token"] = token,
            ["X-Amz-Date"] = date,
            ["X-Amz-Content-Sha256"] = payload,
            ["Authorization"] = auth,
         }, body)
         n = n + 1
      end
      assert(n == KEYS, file .. ": " .. n .. " signed requests, not " .. KEYS)
   elseif workload == "w1a" then
      local file = assert(args[4], "w1a needs the file of signed requests")
      local n = 0
      for l in io.lines(file) do
         local path, token, date, auth = l:match("^([^\t]+)\t([^\t]+)\t([^\t]+)\t(.+)$")
         assert(path, "bad line in " .. file .. ": " .. l)
         local headers = {
            ["x-ms-fencing-token"] = token,
            ["x-ms-date"] = date,
            ["x-ms-version"] = "2021-08-06",
            ["x-ms-blob-type"] = "BlockBlob",
         }
         if auth ~= "-" then
            headers["Authorization"] = auth
         end
         prebuilt[n] = wrk.format("PUT", path, headers, body)
         n = n + 1
      end
      assert(n == KEYS, file .. ": " .. n .. " requests, not " .. KEYS)
   else
      error("unknown workload " .. tostring(workload) .. " (w1, w1a, w1c, w1l, w1s, w2, w3 or w3l)")
   end
end

function request()
   counter = counter + 1
   if workload == "w1l" then
      local k = counter % KEYS
      return wrk.format("PUT", "/w1/k" .. k, { ["X-Fencing-Token"] = tostring(1000 + k) }, body)
   elseif workload == "w3l" then
      return wrk.format("GET", "/w3/k" .. (counter % KEYS))
   end
   if workload == "w2" then
      -- %.0f: exact for integers below 2^53, never printed as 1e+12.
      return wrk.format("PUT", prefix .. (counter % keys_per_thread),
         { ["X-Fencing-Token"] = string.format("%.0f", base + counter) }, body)
   end
   return prebuilt[counter % KEYS]
end

function done(summary, latency, requests)
   local e = summary.errors
   local errors = e.status + e.connect + e.read + e.write + e.timeout
   local seconds = summary.duration / 1e6
   io.write(string.format(
      "RESULT requests=%d seconds=%.3f rps=%.1f p50_us=%d p99_us=%d errors=%d\n",
      summary.requests, seconds, summary.requests / seconds,
      latency:percentile(50), latency:percentile(99), errors))
end
