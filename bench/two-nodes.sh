#!/usr/bin/env bash
# Two servers on one DATA_DIR (two nodes projecting one log into one read store): seeds memories through
# the first, then a steady stream of single stores through it, and prints both processes' CPU during the
# steady phase. The second node serves nothing: its CPU is what following the first one's writes costs it.
#
#   bench/two-nodes.sh [seed=8000] [steady=400]
set -euo pipefail
seed=${1:-8000}
steady=${2:-400}
root=${ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d)
trap 'kill "$a" "$b" 2>/dev/null || true; rm -rf "$work"' EXIT
base=$((20000 + RANDOM % 20000))
start() { (cd "$root" && DATA_DIR=$work PORT=$1 MEMORY_PORT=$(($1 + 1)) LOG_LEVEL=warn exec node --import tsx api/main.ts) & }
ready() { for _ in $(seq 1 100); do curl -s "localhost:$1/healthz" >/dev/null && return; sleep 0.1; done; }
start "$base"; a=$!; ready $((base + 1))
start $((base + 2)); b=$!; ready $((base + 3))
url=http://127.0.0.1:$((base + 1))/v1/memories
SEED=$seed URL=$url node -e "
const n = Number(process.env.SEED) / 8;
const go = async (k) => { for (let i = 0; i < n; i++) await fetch(process.env.URL, { method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ scope: { agent: 'a', user: 'u' }, text: 'memory ' + k + '-' + i + ' about ' + (i % 97) + ' things' }) }); };
Promise.all(Array.from({ length: 8 }, (_, k) => go(k))).then(() => console.log('seeded ' + process.env.SEED + ' memories (8 clients)'));"
sleep 8 # let both nodes' projections settle
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
a0=$(cpu "$a"); b0=$(cpu "$b"); t0=$(date +%s.%N)
STEADY=$steady URL=$url node -e "
(async () => { for (let i = 0; i < Number(process.env.STEADY); i++) {
  await fetch(process.env.URL, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ scope: { agent: 'a', user: 'u' }, text: 'steady ' + i }) });
  await new Promise((r) => setTimeout(r, 10)); } })();"
sleep 1
a1=$(cpu "$a"); b1=$(cpu "$b"); t1=$(date +%s.%N)
# clock ticks are 10 ms
echo "steady phase: $steady stores in $(echo "$t1 - $t0" | bc) s; CPU: serving node $(( (a1 - a0) * 10 )) ms, other node $(( (b1 - b0) * 10 )) ms"
