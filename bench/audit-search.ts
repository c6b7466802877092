/**
 * Audit searches on the embedded log (`ops events tail --until-head --correlation X` / `--actor A`): the store's filter,
 * which SQLite tests on each event (only matches are parsed), against reading every event and testing it here, as the
 * tail searched before, in the same process on the same file. `npm run bench:audit-search` (about 40 s).
 *
 * Options (env): BENCH_EVENTS (default 1000000).
 */
import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Appender, openWritable, type AppendRequest } from '../infra/eventstore/embedded-appender.js';
import { EmbeddedEventStore } from '../infra/eventstore/embedded.js';
import type { EventMetadata, SubscriptionFilter } from '../infra/eventstore/port.js';
import { fmt, percentile } from './lib.js';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 1_000_000);
const RUNS = 5;
const out = (line = '') => process.stdout.write(`${line}\n`);

/** Request n's id: random-looking, as the UUIDs clients and the server give requests. */
const requestId = (n: number) => {
  const h = createHash('sha256').update(String(n)).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
};

/** Requests of three events, shaped as the memory service writes them (a request id, a key's actor). */
function requests(from: number, count: number): AppendRequest[] {
  return Array.from({ length: count }, (_, k) => {
    const i = from + k;
    const request = requestId(Math.floor(i / 3));
    return {
      stream: `memory-${i % 5000}`,
      expected: 'any',
      events: [{
        id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
        type: 'MemoryStored',
        data: JSON.stringify({ memory_id: `m${i}`, scope: { agent: 'a', user: `u${i % 5000}` }, text: `the user said something, number ${i}` }),
        metadata: JSON.stringify({ correlation_id: request, causation_id: request, actor: `key:k${i % 50}`, occurred_at: '2026-11-25T04:00:00.000Z' }),
      }],
    };
  });
}

const dir = mkdtempSync(join(tmpdir(), 'cairn-bench-audit-'));
try {
  out(`# Audit search benchmark (${new Date().toISOString()}), ${fmt(EVENTS)} events`);
  out();
  const file = join(dir, 'events.db');
  const db = new Database(file);
  openWritable(db); // as the server makes its log (its page size included), then without fsyncs for the seeding
  db.pragma('synchronous = OFF');
  const appender = new Appender(db);
  let started = performance.now();
  for (let i = 0; i < EVENTS; i += 1000) appender.commit(requests(i, Math.min(1000, EVENTS - i)));
  db.close();
  out(`Seeded ${fmt(EVENTS)} events in ${fmt((performance.now() - started) / 1000, 1)} s (${fmt(statSync(file).size / 2 ** 20, 0)} MiB).`);
  out();
  const store = new EmbeddedEventStore(file, { appends: false });

  /** The search as `events tail --until-head` makes it: the subscription, to the head. */
  const search = async (filter: SubscriptionFilter) => {
    const stop = new AbortController();
    let found = 0;
    for await (const _ of store.subscribeToAll(0, { filter, signal: stop.signal, onPosition: (p) => { if (p >= EVENTS) stop.abort(); } })) found += 1;
    return found;
  };
  /** Before: every event read, parsed and tested here. */
  const scan = async (test: (metadata: EventMetadata) => boolean) => {
    let found = 0;
    for (let from = 0; ;) {
      const page = await store.readAll(from, { limit: 1000 });
      if (page.length === 0) return found;
      for (const event of page) if (test(event.metadata)) found += 1;
      from = page.at(-1)!.position;
    }
  };
  const time = async (fn: () => Promise<number>, expected?: number) => {
    const t0 = performance.now();
    const found = await fn();
    if (expected !== undefined && found !== expected) throw new Error(`found ${found} events, not ${expected}`);
    return { ms: performance.now() - t0, found };
  };
  const request = () => requestId(Math.floor(Math.random() * Math.floor(EVENTS / 3)));
  const rows: Array<[string, number[], number[]]> = [];
  const measure = async (name: string, filtered: () => Promise<number>, scanned: () => Promise<number>, expected?: number) => {
    const a: number[] = [];
    const b: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      a.push((await time(filtered, expected)).ms);
      b.push((await time(scanned, expected)).ms);
    }
    rows.push([name, a, b]);
  };
  await measure('one request (3 events)', () => search({ correlationIds: [request()] }), () => { const r = request(); return scan((m) => m.correlation_id === r); }, 3);
  await measure('two requests (6 events)', () => search({ correlationIds: [request(), request()] }), () => { const [r, s] = [request(), request()]; return scan((m) => m.correlation_id === r || m.correlation_id === s); }, 6);
  await measure(`one actor (${fmt(EVENTS / 50)} events)`, () => search({ actors: ['key:k7'] }), () => scan((m) => m.actor === 'key:k7'), EVENTS / 50);
  await measure('one request of one type', () => search({ correlationIds: [request()], types: ['MemoryStored'] }), () => { const r = request(); return scan((m) => m.correlation_id === r); }, 3);
  out(`## Searches of the whole log, ${RUNS} runs each, alternating (ms)`);
  out();
  out('| search | the store\'s filter (SQLite) p50 (min–max) | each event parsed and tested p50 (min–max) | speed-up | events/s filtered |');
  out('|---|---|---|---|---|');
  for (const [name, a, b] of rows) {
    out(`| ${name} | ${fmt(percentile(a, 50), 0)} (${fmt(Math.min(...a), 0)}–${fmt(Math.max(...a), 0)}) | ${fmt(percentile(b, 50), 0)} (${fmt(Math.min(...b), 0)}–${fmt(Math.max(...b), 0)}) | ${fmt(percentile(b, 50) / percentile(a, 50), 1)}× | ${fmt(EVENTS / (percentile(a, 50) / 1000), 0)} |`);
  }
  await store.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
