import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { matchesFilter, type EventMetadata, type NewEvent, type SubscriptionFilter } from '../../infra/eventstore/port.js';
import { mulberry32 } from '../support/prng.js';
import { tempDir } from '../support/temp.js';

/**
 * The embedded log's filters by correlation id and actor (`ops events tail --correlation/--actor`), which SQLite
 * tests: the same events as the port's own test (matchesFilter) over every event, rows put in by hand included; and a
 * subscription whose filter matches little in a large log stops when asked, not only after reading all of it.
 */

const meta = (correlation: unknown, actor: unknown) => ({ correlation_id: correlation, causation_id: 'c', actor, occurred_at: '2026-11-25T00:00:00Z' }) as unknown as EventMetadata;
const event = (type: string, metadata: EventMetadata): NewEvent => ({ id: randomUUID(), type, data: {}, metadata });

const FILTERS: SubscriptionFilter[] = [
  { correlationIds: ['r1'] }, { correlationIds: ['r2', 'r1'] }, { correlationIds: ['r1', 'r1', 'r3'] }, { correlationIds: [] },
  { correlationIds: ['nobody'] }, { correlationIds: ['5'] }, { correlationIds: ['{"nested":"r1"}'] },
  { actors: ['owner'] }, { actors: ['key:k1', 'owner'] }, { actors: [] }, { actors: ['["owner"]'] },
  { correlationIds: ['r1', 'r2'], actors: ['owner'] }, { correlationIds: ['r3'], types: ['Beta'] },
  { actors: ['key:k1'], types: ['Alpha', 'Gamma'], streamPrefixes: ['s-1', 's-3'] }, { correlationIds: ['r2'], streamPrefixes: [] },
];

t.test('by correlation id and actor: what the port\'s own test finds among every event, rows put in by hand included', async (t) => {
  const file = join(tempDir(t), 'events.db');
  const random = mulberry32(23);
  const pick = <T>(list: T[]) => list[Math.floor(random() * list.length)]!;
  const store = new EmbeddedEventStore(file);
  t.teardown(() => store.close());
  const seed = async (count: number) => {
    for (let i = 0; i < count; i++) {
      const events = Array.from({ length: 1 + Math.floor(random() * 3) }, () => event(pick(['Alpha', 'Beta', 'Gamma']), meta(pick(['r1', 'r2', 'r3', randomUUID()]), pick(['owner', 'key:k1', 'key:k2']))));
      await store.append(`s-${pick([1, 2, 3])}-${randomUUID()}`, events, 'any');
    }
  };
  await seed(100);
  // Rows put in by hand: metadata that is not JSON, not an object, or whose members are not strings; and one that is
  // Cairn's own shape.
  const byHand = new Database(file);
  const insert = byHand.prepare('INSERT INTO events (position, id, stream, revision, type, data, metadata, recorded_at) VALUES (?, ?, ?, 0, ?, ?, ?, ?)');
  let head = byHand.prepare('SELECT MAX(position) FROM events').pluck().get() as number;
  for (const metadata of ['not JSON', '"r1"', '[1]', JSON.stringify({ correlation_id: 5, actor: ['owner'] }),
    JSON.stringify({ correlation_id: { nested: 'r1' }, actor: 'owner' }), Buffer.from([0xde, 0xad]), JSON.stringify({ correlation_id: 'r1', actor: 'key:k1' }),
    // A blob holding JSON text: the port hands it out as bytes ({ raw }), with no correlation id or actor.
    Buffer.from(JSON.stringify({ correlation_id: 'r1', actor: 'owner' }))]) {
    head += 1;
    insert.run(head, randomUUID(), `s-1-hand-${head}`, 'Alpha', '{}', metadata, new Date().toISOString());
  }
  byHand.close();
  await seed(30);

  const every = await store.readAll(0, { limit: Infinity });
  for (const filter of FILTERS) {
    const expected = every.filter((e) => matchesFilter(e, filter)).map((e) => e.position);
    const paged: number[] = [];
    for (let from = 0; ;) {
      const page = await store.readAll(from, { filter, limit: 7 });
      paged.push(...page.map((e) => e.position));
      if (page.length < 7) break;
      from = page.at(-1)!.position;
    }
    t.strictSame(paged, expected, `readAll: ${JSON.stringify(filter)}`);
    const controller = new AbortController();
    const subscribed: number[] = [];
    const last = every.at(-1)!.position;
    for await (const e of store.subscribeToAll(0, { filter, signal: controller.signal, onPosition: (p) => { if (p >= last) controller.abort(); } })) subscribed.push(e.position);
    t.strictSame(subscribed, expected, `subscribeToAll: ${JSON.stringify(filter)}`);
  }
  t.ok(every.filter((e) => matchesFilter(e, { correlationIds: ['r1'] })).some((e) => e.stream.includes('hand')), 'a row put in by hand in Cairn\'s shape is found');
});

t.test('a subscription that matches little in a large log stops when asked, between windows of the log', async (t) => {
  const file = join(tempDir(t), 'events.db');
  const store = new EmbeddedEventStore(file);
  t.teardown(() => store.close());
  for (let i = 0; i < 60; i++) await store.append(`big-${i}`, Array.from({ length: 5000 }, () => event('Alpha', meta('other', 'owner'))), 'no_stream');
  const wanted = event('Alpha', meta('wanted', 'owner'));
  await store.append('big-last', [wanted], 'no_stream');
  const controller = new AbortController();
  const reported: number[] = [];
  const found: string[] = [];
  // Asked to stop at the first turn of the event loop: while SQLite tests the first window of 300,001 events.
  setTimeout(() => controller.abort(), 0);
  for await (const e of store.subscribeToAll(0, { filter: { correlationIds: ['wanted'] }, signal: controller.signal, onPosition: (p) => reported.push(p) })) found.push(e.id);
  t.strictSame(found, [], 'stopped before the match at the end');
  t.ok(reported.length > 0 && reported.at(-1)! < 300_001, `stopped part-way: read up to ${reported.at(-1)}`);

  // Not stopped, the same subscription reads to the end and finds it.
  const whole = new AbortController();
  const all: string[] = [];
  for await (const e of store.subscribeToAll(0, { filter: { correlationIds: ['wanted'] }, signal: whole.signal })) {
    all.push(e.id);
    whole.abort();
  }
  t.strictSame(all, [wanted.id]);
});

t.test('a filtered subscription passes a gap in positions in one step: a row put in by hand far ahead', async (t) => {
  const file = join(tempDir(t), 'events.db');
  const store = new EmbeddedEventStore(file);
  t.teardown(() => store.close());
  const first = event('Alpha', meta('r1', 'owner'));
  await store.append('gap-1', [first, event('Beta', meta('r2', 'owner'))], 'no_stream');
  // An operator's sqlite3 session: a row at a position far past the head (2^40), after which the log appends from there.
  const byHand = new Database(file);
  byHand.prepare('INSERT INTO events (position, id, stream, revision, type, data, metadata, recorded_at) VALUES (?, ?, ?, 0, ?, ?, ?, ?)')
    .run(2 ** 40, randomUUID(), 'gap-hand', 'Alpha', '{}', JSON.stringify(meta('r1', 'owner')), new Date().toISOString());
  byHand.close();
  const last = event('Alpha', meta('r1', 'owner'));
  const { position: end } = await store.append('gap-2', [last], 'no_stream');
  t.equal(end, 2 ** 40 + 1);
  for (const filter of [{ types: ['Alpha'] }, { correlationIds: ['r1'] }] satisfies SubscriptionFilter[]) {
    const controller = new AbortController();
    // Without the step, 2^40 / 65,536 = 16.8 million windows of nothing (about 4.5 minutes here; a row at 2^50, months).
    // Given 5 s, it says how far it got.
    const timer = setTimeout(() => controller.abort(), 5_000);
    const found: number[] = [];
    let reached = 0;
    for await (const e of store.subscribeToAll(0, { filter, signal: controller.signal, onPosition: (p) => { reached = p; if (p >= end) controller.abort(); } })) found.push(e.position);
    clearTimeout(timer);
    t.equal(reached, end, `${JSON.stringify(filter)}: read to the head (reached ${reached})`);
    t.strictSame(found, [1, 2 ** 40, end], `${JSON.stringify(filter)}: every match, each once`);
  }
});
