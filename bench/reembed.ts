/**
 * Automatic re-embedding after a local embedder upgrade (api/memory/module.ts): how long a blue/green
 * rebuild of memory-vectors takes for N memories, and what it costs requests meanwhile (the rebuild runs
 * on the HTTP thread in batches of 1,000 events).
 *
 *   npx tsx bench/reembed.ts [memories=100000]
 *
 * Seeds N MemoryStored events in one scope, lets the projections apply them, stops, marks every vector as
 * made by `local-hash-256-v2` (as an older release would have), restarts and measures: the time until the
 * new generation is live, the HTTP thread's event-loop delay during it, and GET /healthz latency from a
 * client polling every 10 ms, against the same client on the idle server afterwards (baseline).
 */
import Database from 'better-sqlite3';
import { randomUUID as uuid } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { startCairn, type Cairn } from '../api/app.js';
import { memoryIdFor, memoryStream } from '../domain/memory/decider.js';
import { loadConfig } from '../infra/config.js';
import type { NewEvent } from '../infra/eventstore/port.js';
import { createLogger } from '../infra/logger.js';
import { fmt, percentile } from './lib.js';

const N = Number(process.argv[2] ?? 100_000);
const dataDir = mkdtempSync(join(tmpdir(), 'cairn-bench-reembed-'));
const start = () => startCairn({
  config: loadConfig({ DATA_DIR: dataDir, PORT: '0', MEMORY_PORT: '0', HOST: '127.0.0.1', CONSISTENCY_TIMEOUT_MS: '60000' }),
  log: createLogger('silent'),
});

const scope = { agent: 'bench', user: 'reembed' };
const words = Array.from({ length: 5000 }, (_, i) => `w${(i * 2654435761) % 100003}`);
let cairn: Cairn = await start();
for (let seeded = 0; seeded < N;) {
  const batch: NewEvent[] = [];
  for (; batch.length < Math.min(1000, N - seeded);) {
    const i = seeded + batch.length;
    const text = `memory ${i}: ${words[i % 5000]} ${words[(i * 7) % 5000]} ${words[(i * 13) % 5000]} and ${words[(i * 31) % 5000]}`;
    const now = new Date().toISOString();
    batch.push({ id: uuid(), type: 'MemoryStored', data: { ...scope, memory_id: memoryIdFor(text), text, session: null, created_at: now },
      metadata: { correlation_id: uuid(), causation_id: uuid(), actor: 'owner', occurred_at: now } });
  }
  await cairn.events.append(memoryStream(scope.agent, scope.user), batch, seeded === 0 ? 'no_stream' : seeded - 1);
  seeded += batch.length;
}
await cairn.waitFor(['memories', 'memory-vectors'], await cairn.events.headPosition());
await cairn.close();

const db = new Database(join(dataDir, 'readmodels.db'));
const table = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rm_memory_vectors_g%'").pluck().get() as string;
db.prepare(`UPDATE ${table} SET doc = json_set(doc, '$.model', 'local-hash-256-v2')`).run();
db.close();

/** GET /healthz every 10 ms until `done()`; latencies in ms. */
async function poll(url: string, done: () => boolean): Promise<number[]> {
  const latencies: number[] = [];
  while (!done()) {
    const t0 = performance.now();
    await (await fetch(`${url}/healthz`)).arrayBuffer();
    latencies.push(performance.now() - t0);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return latencies;
}

const loop = monitorEventLoopDelay({ resolution: 5 });
const t0 = performance.now();
cairn = await start();
loop.enable();
let live = false;
const during = poll(cairn.memoryUrl, () => live);
while (!live) {
  live = (await cairn.reads.checkpoint('memory-vectors')).generation > 1;
  if (!live) await new Promise((resolve) => setTimeout(resolve, 50));
}
const took = performance.now() - t0;
loop.disable();
const duringMs = await during;
let stop = false;
setTimeout(() => { stop = true; }, 3000);
const idleMs = await poll(cairn.memoryUrl, () => stop);
await cairn.close();
rmSync(dataDir, { recursive: true, force: true });

const lat = (values: number[]) => `p50 ${fmt(percentile(values, 50), 2)} ms, p99 ${fmt(percentile(values, 99), 2)} ms, max ${fmt(Math.max(...values), 2)} ms (n=${values.length})`;
console.log(`Re-embedding ${fmt(N)} memories of an older local embedder (node ${process.version}, ${new Date().toISOString()})`);
console.log(`- from the restart until the new memory-vectors generation is live: ${fmt(took / 1000, 1)} s (${fmt(N / (took / 1000))} memories/s; includes loading the indexes)`);
console.log(`- HTTP thread event-loop delay meanwhile: p50 ${fmt(loop.percentile(50) / 1e6, 1)} ms, p99 ${fmt(loop.percentile(99) / 1e6, 1)} ms, max ${fmt(loop.max / 1e6, 1)} ms`);
console.log(`- GET /healthz during the re-embedding: ${lat(duringMs)}`);
console.log(`- GET /healthz afterwards (baseline, same process): ${lat(idleMs)}`);
