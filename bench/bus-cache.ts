/**
 * Heap taken by the command bus's cached states of memory scopes, and what a command costs when its scope's state
 * was evicted and is read again from the log. The log is seeded with SCOPES scopes of MEMORIES memories each
 * (appended directly, as the bus would write them); then one store command per scope goes through a bus with the
 * shipped limits and through one bounded by count only (10,000 streams, the bound before weights), in the same process.
 *
 *   npm run bench:bus-cache                 (SCOPES=600 MEMORIES=1000 by default)
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CommandBus, DEFAULT_CACHE_LIMITS, type RequestMeta, type StateCacheLimits } from '../commands/bus.js';
import { memoryDecider, memoryStream, type MemoryEvent, type MemoryState } from '../domain/memory/decider.js';
import { EmbeddedEventStore } from '../infra/eventstore/embedded.js';
import { percentile } from './lib.js';

const SCOPES = Number(process.env.SCOPES ?? 600);
const MEMORIES = Number(process.env.MEMORIES ?? 1000);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (npm run bench:bus-cache does)');
const heapMb = () => {
  gc!();
  gc!();
  return process.memoryUsage().heapUsed / 2 ** 20;
};
const meta = (): RequestMeta => {
  const id = randomUUID();
  return { correlation_id: id, causation_id: id, actor: 'bench', request_key: id, sequence: { next: 0 } };
};

const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-bus-cache-'));
const store = new EmbeddedEventStore(join(dir, 'events.db'));
try {
  const seeding = Date.now();
  for (let s = 0; s < SCOPES; s++) {
    const scope = { agent: 'agent', user: `user-${s}` };
    let state: MemoryState = memoryDecider.initialState();
    const events: MemoryEvent[] = [];
    for (let i = 0; i < MEMORIES; i++) {
      const decided = memoryDecider.decide({ type: 'StoreMemory', data: { ...scope, text: `the user mentioned fact number ${i} about their week` } }, state,
        { now: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(), actor: 'bench', request_key: `seed-${i}`, request_hash: 'seed' });
      for (const e of decided) state = memoryDecider.evolve(state, e);
      events.push(...decided);
    }
    await store.append(memoryStream(scope.agent, scope.user), events.map((e) => ({ id: randomUUID(), type: e.type, data: e.data, metadata: { correlation_id: 'seed', causation_id: 'seed', actor: 'bench', occurred_at: '' } })), 'no_stream');
  }
  console.log(`seeded ${SCOPES} scopes of ${MEMORIES} memories in ${((Date.now() - seeding) / 1000).toFixed(1)} s\n`);

  /** One store per scope, in order, twice: the first pass reads every scope from the log, the second finds it cached or not. */
  async function run(label: string, limits: StateCacheLimits): Promise<void> {
    const base = heapMb();
    const bus = new CommandBus(store, undefined, limits);
    const passes: number[][] = [[], []];
    for (const [pass, times] of passes.entries()) {
      for (let s = 0; s < SCOPES; s++) {
        const started = process.hrtime.bigint();
        await bus.handle(memoryStream('agent', `user-${s}`), memoryDecider, { type: 'StoreMemory', data: { agent: 'agent', user: `user-${s}`, text: `${label} pass ${pass}` } }, meta());
        times.push(Number(process.hrtime.bigint() - started) / 1e6);
      }
    }
    const heap = heapMb() - base;
    const { entries, weight } = bus.cacheStats;
    const [first, second] = passes.map((times) => ({ p50: percentile(times, 50), p99: percentile(times, 99) }));
    console.log(`| ${label} | ${entries} | ${weight.toLocaleString('en-US')} | ${heap.toFixed(1)} MB | ${first!.p50.toFixed(2)} / ${first!.p99.toFixed(2)} ms | ${second!.p50.toFixed(2)} / ${second!.p99.toFixed(2)} ms |`);
  }
  console.log('| bus limits | cached scopes | weight | heap of the cached states | 1st pass p50 / p99 (read from the log) | 2nd pass p50 / p99 |');
  console.log('|---|---|---|---|---|---|');
  await run('10,000 streams, no weight bound (before)', { maxEntries: 10_000, maxWeight: Number.POSITIVE_INFINITY });
  await run(`${DEFAULT_CACHE_LIMITS.maxEntries.toLocaleString('en-US')} streams, ${DEFAULT_CACHE_LIMITS.maxWeight.toLocaleString('en-US')} items (shipped)`, DEFAULT_CACHE_LIMITS);
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
