import t from 'tap';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { tempDir } from '../support/temp.js';


const meta = { correlation_id: 'c', causation_id: 'c', actor: 't', occurred_at: '2026-01-01T00:00:00.000Z' };
const event = (n: number) => ({ id: randomUUID(), type: 'Counted', data: { n }, metadata: meta });

t.test('the in-memory tail never hides events another writer appended in between', async (t) => {
  const file = join(tempDir(t, 'cairn-tail-'), 'events.db');
  // Two stores on one file stand for two processes: each has its own writer thread and tail.
  const a = new EmbeddedEventStore(file);
  const b = new EmbeddedEventStore(file);
  t.teardown(async () => { await a.close(); await b.close(); });
  const abort = new AbortController();
  const seen: RecordedEvent[] = [];
  let n = 0;
  const total = 600;
  const subscriber = (async () => {
    for await (const e of a.subscribeToAll(0, { signal: abort.signal })) {
      seen.push(e);
      if (seen.length === total) abort.abort();
    }
  })();
  for (let round = 0; round < 20; round++) {
    const writer = round % 3 === 2 ? b : a;
    await Promise.all(Array.from({ length: 10 }, (_, i) => writer.append(`s-${round}-${i}`, [event(n++), event(n++), event(n++)], 'no_stream')));
  }
  await subscriber;
  t.equal(seen.length, total);
  t.strictSame(seen.map((e) => e.position), Array.from({ length: total }, (_, i) => i + 1), 'every position once, in order');
  const all = await a.readAll(0, { limit: 10_000 });
  t.strictSame(all.map((e) => [e.id, e.position, e.revision, e.stream, e.type, e.data]), seen.map((e) => [e.id, e.position, e.revision, e.stream, e.type, e.data]),
    'what the tail served is what the log holds');
  t.strictSame(all.map((e) => e.recorded_at), seen.map((e) => e.recorded_at));
});

t.test('a process with commits in flight is kept alive until they are acknowledged', async (t) => {
  const { spawnSync } = await import('node:child_process');
  const file = join(tempDir(t, 'cairn-alive-'), 'events.db');
  const fixture = new URL('./fixtures/append-and-exit.ts', import.meta.url).pathname;
  const run = spawnSync(process.execPath, ['--import', 'tsx', fixture, file], { encoding: 'utf8', cwd: new URL('../..', import.meta.url).pathname });
  t.equal(run.status, 0, run.stderr);
  t.equal(run.stdout.trim(), '800');
});

t.test('a filtered subscription reports the positions it read past', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-onpos-'), 'events.db'));
  t.teardown(() => store.close());
  for (let i = 0; i < 10; i++) {
    await store.append(`s-${i}`, [{ id: randomUUID(), type: i % 3 === 0 ? 'Wanted' : 'Other', data: { i }, metadata: meta }], 'no_stream');
  }
  const abort = new AbortController();
  const log: string[] = [];
  for await (const e of store.subscribeToAll(0, { signal: abort.signal, filter: { types: ['Wanted'] }, onPosition: (p) => log.push(`passed ${p}`) })) {
    log.push(`event ${e.position}`);
    if (e.position === 10) abort.abort();
  }
  t.strictSame(log, ['event 1', 'event 4', 'event 7', 'event 10'], 'only matching events; nothing passed ahead of an event still to come');
  const passed: number[] = [];
  const second = new AbortController();
  const seen: number[] = [];
  const consumer = (async () => {
    for await (const e of store.subscribeToAll(0, { signal: second.signal, filter: { types: ['Wanted'] }, onPosition: (p) => { passed.push(p); if (p === 11) second.abort(); } })) seen.push(e.position);
  })();
  await store.append('s-last', [{ id: randomUUID(), type: 'Other', data: {}, metadata: meta }], 'no_stream');
  await consumer;
  t.strictSame(seen, [1, 4, 7, 10]);
  t.ok(passed.includes(11), 'a position with no matching event is reported');
  t.ok(passed.every((p) => p >= 10), 'reported only after the last matching event before it was taken');
});

t.test('a store keeps no tail without subscribers, and subscriptions that come and go still see every event once', async (t) => {
  const file = join(tempDir(t, 'cairn-notail-'), 'events.db');
  const store = new EmbeddedEventStore(file);
  t.teardown(() => store.close());
  const tailLength = () => (store as unknown as { tail: unknown[] }).tail.length;
  let n = 0;
  await Promise.all(Array.from({ length: 50 }, (_, i) => store.append(`before-${i}`, [event(n++)], 'no_stream')));
  t.equal(tailLength(), 0, 'nobody subscribes: appended events are not kept');

  const follow = async (from: number, count: number, appendMeanwhile: number): Promise<RecordedEvent[]> => {
    const abort = new AbortController();
    const seen: RecordedEvent[] = [];
    const done = (async () => {
      for await (const e of store.subscribeToAll(from, { signal: abort.signal })) {
        seen.push(e);
        if (seen.length === count) abort.abort();
      }
    })();
    for (let i = 0; i < appendMeanwhile; i++) await store.append(`live-${from}-${i}`, [event(n++)], 'no_stream');
    await done;
    return seen;
  };
  const first = await follow(0, 80, 30);
  t.strictSame(first.map((e) => e.position), Array.from({ length: 80 }, (_, i) => i + 1), 'history from the log, then live appends from the tail');
  t.ok(tailLength() > 0, 'while subscribed, appends feed the tail');

  await Promise.all(Array.from({ length: 20 }, (_, i) => store.append(`between-${i}`, [event(n++)], 'no_stream')));
  const second = await follow(80, 40, 20);
  t.strictSame(second.map((e) => e.position), Array.from({ length: 40 }, (_, i) => i + 81), 'appends made while nobody listened are read from the log');
  t.strictSame((await store.readAll(0, { limit: 1000 })).map((e) => e.position), Array.from({ length: 120 }, (_, i) => i + 1));
});

t.test('a store following its process\'s commits reads no more than its tail keeps after a burst from another process', async (t) => {
  const { spawnSync } = await import('node:child_process');
  const file = join(tempDir(t, 'cairn-burst-'), 'events.db');
  const writer = new EmbeddedEventStore(file);
  const reader = new EmbeddedEventStore(file, { appends: false }); // the projection thread's
  t.teardown(async () => { await writer.close(); await reader.close(); });
  const wanted = () => ({ ...event(0), type: 'Wanted' });
  await writer.append('before', [wanted()], 'no_stream');
  const abort = new AbortController();
  const seen: RecordedEvent[] = [];
  let caughtUp: () => void = () => undefined;
  const following = (async () => {
    for await (const e of reader.subscribeToAll(0, { signal: abort.signal, filter: { types: ['Wanted'] } })) {
      seen.push(e);
      caughtUp();
    }
  })();
  while (seen.length < 1) await new Promise((r) => setTimeout(r, 10));

  // Another process writes 200,000 events; this one is told of none of them (nor waits meanwhile: spawnSync).
  const burst = 200_000;
  const bulk = spawnSync(process.execPath, ['--import', 'tsx', new URL('../contract/fixtures/bulk-writer.ts', import.meta.url).pathname, file, String(burst)],
    { encoding: 'utf8', cwd: new URL('../..', import.meta.url).pathname });
  t.equal(bulk.status, 0, bulk.stderr);

  // The next commit of this process is announced: the reader reads the new rows into its tail, once.
  let stall = 0;
  let last = performance.now();
  const monitor = setInterval(() => { const now = performance.now(); stall = Math.max(stall, now - last); last = now; }, 1);
  const arrived = new Promise<void>((resolve) => { caughtUp = resolve; });
  const after = await writer.append('after', [wanted()], 'no_stream');
  await arrived;
  await new Promise((r) => setTimeout(r, 50));
  clearInterval(monitor);
  abort.abort();
  await following;
  t.strictSame(seen.map((e) => [e.stream, e.position]), [['before', 1], ['after', after.position]], 'every wanted event once, none of the burst');
  t.equal(after.position, burst + 2);
  // Reading and parsing all 200,000 rows (all in memory at once, ~170 MB) stalled it 1.7-2.3 s here; the tail's 8,192, ~50 ms.
  t.ok(stall < 1000, `the reader's thread was not held up reading the whole burst (longest stall ${Math.round(stall)} ms)`);
});
