#!/usr/bin/env bash
# One write scenario against a freshly started server (`api/main.ts`, embedded stores in a temp dir),
# load from wrk, with the server's CPU time per request for each of its threads (from /proc).
#
#   bench/wrk-scenarios.sh memory|config|agents [clients=8] [seconds=6]
#
# ROOT=<checkout> runs another checkout (e.g. a `git worktree` of an older commit, with node_modules)
# for A/B comparisons in the same time window: on a shared VM, runs minutes apart differ by more than
# most changes do. Extra environment (PROJECTIONS_THREAD=false, ...) is passed to the server.
set -euo pipefail
scenario=${1:?memory, config or agents}
clients=${2:-8}
seconds=${3:-6}
root=${ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 2; }
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
secret=bench-secret-bench-secret-bench-secret-1234
port=$((20000 + RANDOM % 20000))
mport=$((port + 1))
(cd "$root" && AUTH_JWT_SECRET=$secret DATA_DIR=$work/data LOG_LEVEL=warn PORT=$port MEMORY_PORT=$mport exec node ${NODE_FLAGS:-} --import tsx api/main.ts) &
pid=$!
for _ in $(seq 1 100); do curl -s "localhost:$mport/healthz" >/dev/null && break; sleep 0.1; done
run=r$RANDOM$RANDOM
if [ "$scenario" = memory ]; then
  url=http://127.0.0.1:$mport
  cat >"$work/s.lua" <<LUA
local n = 0
request = function()
  n = n + 1
  local body = '{"scope":{"agent":"s' .. (n % 8) .. '","user":"u1"},"text":"memory $run number ' .. n .. ' about coffee and hiking"}'
  return wrk.format("POST", "/v1/memories", {["Content-Type"]="application/json"}, body)
end
LUA
else
  url=http://127.0.0.1:$port
  token=$(cd "$root" && node -e "import('jose').then(async ({ SignJWT }) => console.log(await new SignJWT({ tenant_id: 't1' }).setProtectedHeader({ alg: 'HS256' }).setSubject('u1').setIssuedAt().setExpirationTime('1h').sign(new TextEncoder().encode('$secret'))))")
  project=$(curl -s -XPOST "$url/api/v1/projects" -H "authorization: Bearer $token" -H 'content-type: application/json' -d '{"name":"bench"}' | node -pe 'JSON.parse(require("fs").readFileSync(0)).project_id')
  key=$(curl -s -XPOST "$url/api/v1/projects/$project/keys" -H "authorization: Bearer $token" -H 'content-type: application/json' -d '{}' | node -pe 'JSON.parse(require("fs").readFileSync(0)).key')
  if [ "$scenario" = config ]; then
    # A project holds at most 1,000 keys: 500 keys in turn, each PUT a new value (an event each).
    req="wrk.format(\"PUT\", \"/api/v1/projects/$project/config/$run-\" .. (n % 500), h, tostring(n))"
  else
    req="wrk.format(\"POST\", \"/api/v1/agents\", h, '{\"name\":\"$run-' .. n .. '\"}')"
  fi
  cat >"$work/s.lua" <<LUA
local n = 0
local h = {["Authorization"]="Bearer $key", ["Content-Type"]="application/json"}
request = function() n = n + 1; return $req end
LUA
fi
sleep 1
snapshot() { for t in /proc/$pid/task/*; do echo "$(basename "$t") $(awk "{print \$14+\$15, \$14, \$15}" "$t/stat")"; done | sort; }
snapshot >"$work/before"
TIMEFORMAT="wrk CPU: user %U s, system %S s"; out=$( { time wrk -t1 -c"$clients" -d"${seconds}s" --latency -s "$work/s.lua" "$url"; } 2>&1)
snapshot >"$work/after"
requests=$(echo "$out" | grep -oP '\d+(?= requests in)')
wrkcpu=$(echo "$out" | grep -oP '(?<=wrk CPU: user )[\d.]+ s, system [\d.]+' | awk -v n="$requests" '{ printf "%.0f", ($1 + $4) * 1e6 / n }')
echo "$scenario, $clients clients: $(echo "$out" | grep -oP '(?<=Requests/sec:)\s*[\d.]+' | tr -d ' ') req/s, p50 $(echo "$out" | grep -oP '(?<=50%)\s*\S+' | tr -d ' '), p99 $(echo "$out" | grep -oP '(?<=99%)\s*\S+' | tr -d ' ')$(echo "$out" | grep -q Non-2xx && echo ", $(echo "$out" | grep -oP '(?<=Non-2xx or 3xx responses: )\d+') non-2xx"); wrk itself: ${wrkcpu} us CPU per request"
# clock ticks are 10 ms: ticks * 10,000 / requests = microseconds per request
join "$work/before" "$work/after" | awk -v n="$requests" '{ d = $5 - $2; if (d > 2) printf "  thread %s: %.0f us CPU per request (user %.0f, system %.0f)\n", $1, d * 10000 / n, ($6 - $3) * 10000 / n, ($7 - $4) * 10000 / n }'
