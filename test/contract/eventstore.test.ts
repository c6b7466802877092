import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { DuplicateEventIdError, WrongExpectedVersionError } from '../../infra/eventstore/errors.js';
import { compareStreamNames, type AppendResult, type EventStore, type RecordedEvent, type SubscriptionFilter } from '../../infra/eventstore/port.js';
import { newEvent, runWriter, type Ack, type WriterPlan } from './fixtures/writers.js';
import { EsdbStandin } from '../support/esdb-standin.js';
import { tempDir } from '../support/temp.js';

/** What the contract needs to know about one adapter under test. */
interface Subject {
  store: EventStore;
  /** The log was empty when opened. */
  fresh: boolean;
  /** The store's file, when other processes can open it too (embedded). */
  file?: string;
}

const WRITERS = 8;
const EVENTS_PER_WRITER = 250;
const WRITER_SCRIPT = fileURLToPath(new URL('./fixtures/writer-process.ts', import.meta.url));

/** The one contract, run against every adapter. */
async function eventStoreContract(t: Test, open: () => Promise<Subject>): Promise<void> {
  const subject = await open();
  const { store } = subject;
  t.teardown(() => store.close());
  // Every stream of this run starts with `run`, so a server shared across runs keeps them apart.
  const run = `c${randomUUID().slice(0, 8)}`;
  const s = (name: string) => `${run}-${name}`;

  await t.test('append to a new stream with no_stream', async (t) => {
    const head = await store.headPosition();
    if (subject.fresh) t.equal(head, 0, 'an empty log has head 0');
    if (subject.fresh) t.equal(await store.endPosition(), 0, 'and end 0');
    const a = newEvent('Alpha', { n: 1, nested: { ok: true } });
    const b = newEvent('Beta', { n: 2 });
    const result = await store.append(s('new'), [a, b], 'no_stream');
    t.equal(result.revision, 1, 'revision of the last event');
    t.ok(result.position > head, 'position moves forward');
    const read = await store.readStream(s('new'));
    t.strictSame(read.map((e) => [e.id, e.stream, e.revision, e.type]), [[a.id, s('new'), 0, 'Alpha'], [b.id, s('new'), 1, 'Beta']]);
    t.strictSame(read[0]!.data, a.data);
    t.strictSame(read[0]!.metadata, a.metadata);
    t.ok(read[0]!.position < read[1]!.position, 'events of one append get increasing positions');
    t.equal(read[1]!.position, result.position, 'the result is the last event\'s position');
    t.match(read[0]!.recorded_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/);
    t.equal(await store.headPosition(), result.position, 'head is the last appended event');
    // The store's own records (EventStoreDB's system events) may follow ours: the end is never before the head.
    t.ok(await store.endPosition() >= result.position, 'the end is at or past the last appended event');
    if (store.kind === 'embedded') t.equal(await store.endPosition(), result.position, 'the embedded log holds only events: its end is its head');
    const conflict = await expectError(store.append(s('new'), [newEvent('Gamma', {})], 'no_stream'), WrongExpectedVersionError);
    t.match(conflict, { stream: s('new'), expected: 'no_stream', actual: 1 });
  });

  await t.test('a refused append writes none of its events and does not disturb the appends beside it', async (t) => {
    const repeated = newEvent('Repeated', { n: 1 });
    // Sent together, so the embedded store commits them in one group commit.
    const [refused, bystander] = await Promise.allSettled([
      store.append(s('half'), [newEvent('First', {}), repeated, { ...repeated }], 'no_stream'),
      store.append(s('beside'), [newEvent('Beside', {})], 'no_stream'),
    ]);
    t.equal(refused.status, 'rejected');
    t.type(refused.status === 'rejected' && refused.reason, DuplicateEventIdError, 'an id repeated within one append');
    t.equal(bystander.status, 'fulfilled', 'the append committed beside it is written');
    t.strictSame(await store.readStream(s('half')), [], 'nothing of the refused append is in the log');
    t.equal(await store.streamInfo(s('half')), undefined);
    const unserialisable = { ...newEvent('Big', {}), data: { n: 1n } as unknown as Record<string, unknown> };
    await t.rejects(store.append(s('half'), [newEvent('First', {}), unserialisable], 'no_stream'), 'data that is not JSON is refused');
    t.strictSame(await store.readStream(s('half')), [], 'still nothing of it');
    const next = await store.append(s('half'), [newEvent('After', {})], 'no_stream');
    t.equal(next.revision, 0, 'the stream is appended to as a new one');
    t.strictSame((await store.readStream(s('half'))).map((e) => e.type), ['After']);
  });

  await t.test('an append records its events as JSON has them when it is called: readers and live subscribers get the same', async (t) => {
    const from = await store.headPosition();
    const controller = new AbortController();
    t.teardown(() => controller.abort());
    // Subscribed and waiting before the appends: the events arrive live (the embedded store's in-memory tail).
    const iterator = store.subscribeToAll(from, { signal: controller.signal, filter: { streamPrefixes: [s('json')] } })[Symbol.asyncIterator]();
    const first = iterator.next();
    const list = [1];
    // A Date, undefined, NaN and a function: JSON changes or leaves them out (and a function cannot be posted to a thread).
    const data = { at: new Date(0), gone: undefined, nan: Number.NaN, list, f: () => 1 } as unknown as Record<string, unknown>;
    const base = newEvent('Alpha', {});
    const event = { ...base, data, metadata: { ...base.metadata, project_id: undefined } };
    // Sent right behind another append (the embedded store sends it to its writer thread once that one is committed).
    const beside = store.append(s('beside-json'), [newEvent('Beta', {})], 'no_stream');
    const appended = store.append(s('json'), [event], 'no_stream');
    list.push(2); // changed after the call
    t.equal((await within(Promise.allSettled([beside, appended]), 'the appends')).filter((r) => r.status === 'fulfilled').length, 2, 'both appends are written');
    list.push(3); // and after the acknowledgement
    const recorded = { at: '1970-01-01T00:00:00.000Z', nan: null, list: [1] };
    const [read] = await store.readStream(s('json'));
    t.strictSame(read!.data, recorded, 'the log holds the events as JSON had them at the call');
    t.strictSame(Object.keys(read!.metadata).sort(), Object.keys(base.metadata).sort(), 'metadata without the undefined key');
    const live = (await within(first, 'the live event')).value as RecordedEvent;
    t.strictSame(live.data, recorded, 'a live subscriber gets what the log holds');
    t.strictSame(live.metadata, read!.metadata);
    controller.abort();
    await iterator.return?.();
    t.equal((await store.readStream(s('beside-json'))).length, 1, 'the append beside it is written');
  });

  await t.test('expectedLastEventId: the right revision reached by other events is a conflict (where the store verifies it)', { skip: !store.verifiesLastEventId && 'this adapter does not verify it (the command bus orders such appends itself)' }, async (t) => {
    const first = newEvent('First', {});
    await store.append(s('last-id'), [first], 'no_stream');
    const wrong = await expectError(store.appendAll([{ stream: s('last-id'), events: [newEvent('Second', {})], expected: 0, expectedLastEventId: randomUUID() }]), WrongExpectedVersionError);
    t.match(wrong, { stream: s('last-id'), expected: 0, actual: 0 });
    t.equal((await store.readStream(s('last-id'))).length, 1, 'nothing written');
    const [ok] = await store.appendAll([{ stream: s('last-id'), events: [newEvent('Second', {})], expected: 0, expectedLastEventId: first.id }]);
    t.equal(ok!.revision, 1);
  });

  await t.test('countAfter: events after a position, in events (not position units), bounded', async (t) => {
    const before = await store.headPosition();
    const results = [];
    for (let i = 0; i < 5; i++) results.push(await store.append(s(`count-${i}`), [newEvent('Counted', { i }), newEvent('Counted', { i })], 'no_stream'));
    if (subject.fresh) t.equal(await store.countAfter(before, 1000), 10);
    t.equal(await store.countAfter(results[1]!.position, 1000), 6, 'three appends of two events follow the second');
    t.equal(await store.countAfter(results[4]!.position, 1000), 0);
    t.equal(await store.countAfter(results[1]!.position, 6), 6, 'exactly at the limit');
    t.equal(await store.countAfter(results[1]!.position, 5), 5, 'one past it: stops counting');
  });

  await t.test('appendAll: several streams, each with its expected revision', async (t) => {
    const head = await store.headPosition();
    const reserve = newEvent('NameReserved', { name: 'x' });
    const create = [newEvent('Created', { n: 1 }), newEvent('Renamed', { n: 2 })];
    const results = await store.appendAll([
      { stream: s('name'), events: [reserve], expected: 'no_stream' },
      { stream: s('thing'), events: create, expected: 'no_stream' },
    ]);
    t.equal(results.length, 2);
    t.match(results, [{ revision: 0 }, { revision: 1 }]);
    t.ok(results[0]!.position > head && results[1]!.position > results[0]!.position, 'written in order');
    t.strictSame((await store.readStream(s('thing'))).map((e) => e.id), create.map((e) => e.id));
    const retried = await store.appendAll([
      { stream: s('name'), events: [reserve], expected: 'no_stream' },
      { stream: s('thing'), events: create, expected: 'no_stream' },
    ]);
    t.strictSame(retried.map(place), results.map(place), 'a retry with the same event ids writes nothing and answers the same');
    if (store.kind === 'embedded') t.strictSame([...results, ...retried].map((r) => r.written), [true, true, false, false], 'the embedded log says which appends wrote');
    else t.ok(retried.every((r) => r.written !== true), 'never says a retry wrote');
    t.equal(await store.headPosition(), results[1]!.position);

    // The second part's expectation fails.
    const before = await store.headPosition();
    const e1 = newEvent('NameReserved', { name: 'y' });
    await expectError(store.appendAll([
      { stream: s('name2'), events: [e1], expected: 'no_stream' },
      { stream: s('thing'), events: [newEvent('Created', {})], expected: 'no_stream' },
    ]), WrongExpectedVersionError);
    if (store.atomicAppendAll) {
      t.strictSame(await store.readStream(s('name2')), [], 'atomic: nothing of it was written');
      t.equal(await store.headPosition(), before);
    } else {
      t.equal((await store.readStream(s('name2'))).length, 1, 'not atomic: the parts before the failure stay written');
    }
    t.equal((await store.readStream(s('thing'))).length, 2, 'the failing stream is unchanged');
  });

  await t.test('appendAll: a failing one in a group commit costs only itself', async (t) => {
    const [ok, failed] = await Promise.allSettled([
      store.append(s('bystander'), [newEvent('Fine', {})], 'no_stream'),
      store.appendAll([
        { stream: s('g1'), events: [newEvent('A', {})], expected: 'no_stream' },
        { stream: s('name'), events: [newEvent('B', {})], expected: 5 },
      ]),
      store.append(s('bystander2'), [newEvent('Fine', {})], 'no_stream'),
    ]);
    t.equal(ok.status, 'fulfilled');
    t.equal(failed.status, 'rejected');
    t.equal((await store.readStream(s('bystander2'))).length, 1);
    if (store.atomicAppendAll) t.strictSame(await store.readStream(s('g1')), []);
  });

  await t.test('append with the right numeric revision', async (t) => {
    const c = newEvent('Gamma', { n: 3 });
    const result = await store.append(s('new'), [c], 1);
    t.equal(result.revision, 2);
    t.strictSame((await store.readStream(s('new'))).map((e) => e.revision), [0, 1, 2]);
  });

  await t.test('a wrong revision fails and writes nothing', async (t) => {
    const head = await store.headPosition();
    const d = newEvent('Delta', { n: 4 });
    t.match(await expectError(store.append(s('new'), [d], 0), WrongExpectedVersionError), { expected: 0, actual: 2 }, 'behind');
    t.match(await expectError(store.append(s('new'), [d], 7), WrongExpectedVersionError), { expected: 7, actual: 2 }, 'ahead');
    t.match(await expectError(store.append(s('missing'), [d], 0), WrongExpectedVersionError), { actual: 'no_stream' }, 'no stream');
    t.equal((await store.readStream(s('new'))).length, 3);
    t.strictSame(await store.readStream(s('missing')), []);
    t.equal(await store.headPosition(), head);
    t.strictSame(await store.readAll(head), [], 'nothing reached the log');
    t.equal((await store.append(s('new'), [d], 2)).revision, 3, 'the rejected event id was not burnt');
  });

  await t.test('stream_exists and any', async (t) => {
    const e = newEvent('Alpha', {});
    t.match(await expectError(store.append(s('absent'), [e], 'stream_exists'), WrongExpectedVersionError),
      { expected: 'stream_exists', actual: 'no_stream' });
    t.equal(await store.streamInfo(s('absent')), undefined, 'a failed append does not create the stream');
    t.strictSame(await store.readStream(s('absent')), []);
    t.equal((await store.append(s('new'), [e], 'stream_exists')).revision, 4);
    t.equal((await store.append(s('any'), [newEvent('Alpha', {})], 'any')).revision, 0, 'any creates a stream');
    t.equal((await store.append(s('any'), [newEvent('Alpha', {})], 'any')).revision, 1, 'and appends to it');
  });

  await t.test('an idempotent re-append returns the same result and writes nothing', async (t) => {
    const [e1, e2, e3] = [newEvent('Alpha', { i: 1 }), newEvent('Beta', { i: 2 }), newEvent('Gamma', { i: 3 })];
    const first = await store.append(s('retry'), [e1, e2], 'no_stream');
    const head = await store.headPosition();
    const retry = await store.append(s('retry'), [e1, e2], 'no_stream');
    t.strictSame(place(retry), place(first), 'same ids at the same place');
    const third = await store.append(s('retry'), [e3], 1);
    const thirdRetry = await store.append(s('retry'), [e3], 1);
    t.strictSame(place(thirdRetry), place(third), 'with a numeric revision too');
    if (store.kind === 'embedded') t.strictSame([first.written, retry.written, third.written, thirdRetry.written], [true, false, true, false], 'the embedded log says which appends wrote');
    else t.not(retry.written, true, 'never says a retry wrote');
    t.strictSame((await store.readStream(s('retry'))).map((e) => e.id), [e1.id, e2.id, e3.id], 'each event once');
    t.equal((await store.readAll(head)).length, 1, 'only the third event reached the log');
  });

  await t.test('an event id reused elsewhere', async (t) => {
    const [e1] = await store.readStream(s('retry'), { limit: 1 });
    const reused = { ...newEvent('Alpha', {}), id: e1!.id };
    const fresh = newEvent('Beta', {});
    if (store.kind === 'embedded') {
      await expectError(store.append(s('elsewhere'), [reused], 'no_stream'), DuplicateEventIdError);
      t.strictSame(await store.readStream(s('elsewhere')), [], 'in another stream: rejected');
      await expectError(store.append(s('retry'), [fresh, reused], 2), DuplicateEventIdError);
      t.pass('after a new event, at the end of the same stream: rejected');
      t.match(await expectError(store.append(s('retry'), [reused, fresh], 0), DuplicateEventIdError), { eventId: reused.id },
        'matching the stream only in part: rejected, naming the id the log holds (not the new one)');
    } else {
      // ESDB keeps no index of event ids: idempotence holds only for a retry at the same place,
      // and an id appended to another stream is simply written again.
      t.equal((await store.append(s('elsewhere'), [reused], 'no_stream')).revision, 0, 'in another stream: written (no global id index)');
      await expectError(store.append(s('retry'), [reused, fresh], 0), WrongExpectedVersionError);
      t.pass('matching the stream only in part: a version conflict');
    }
    t.equal((await store.readStream(s('retry'))).length, 3, 'the original stream is unchanged');
  });

  await t.test('readStream: order, fromRevision, limit', async (t) => {
    const events = Array.from({ length: 5 }, (_, i) => newEvent('Alpha', { i }));
    await store.append(s('read'), events.slice(0, 2), 'no_stream');
    await store.append(s('read'), events.slice(2), 1);
    const all = await store.readStream(s('read'));
    t.strictSame(all.map((e) => [e.revision, e.id]), events.map((e, i) => [i, e.id]));
    t.strictSame((await store.readStream(s('read'), { fromRevision: 2 })).map((e) => e.revision), [2, 3, 4]);
    t.strictSame((await store.readStream(s('read'), { fromRevision: 2, limit: 2 })).map((e) => e.revision), [2, 3]);
    t.strictSame(await store.readStream(s('read'), { fromRevision: 5 }), []);
    t.strictSame(await store.readStream(s('never-written')), []);
  });

  await t.test('readAll: exclusive fromPosition, limit, filters', async (t) => {
    const from = await store.headPosition();
    const [a1, b1, g1, a2, b2] = [newEvent('Alpha', {}), newEvent('Beta', {}), newEvent('Gamma', {}), newEvent('Alpha', {}), newEvent('Beta', {})];
    await store.append(s('all-a'), [a1, b1], 'no_stream');
    await store.append(s('all-b'), [g1], 'no_stream');
    await store.append(s('zed'), [a2], 'no_stream');
    const last = await store.append(s('all-a'), [b2], 1);
    const all = await store.readAll(from);
    t.strictSame(ids(all), ids([a1, b1, g1, a2, b2]), 'global order, after fromPosition');
    assertIncreasing(t, all);
    t.equal(all.at(-1)!.position, last.position);
    t.strictSame(ids(await store.readAll(all[1]!.position)), ids(all.slice(2)), 'fromPosition is exclusive');
    t.strictSame(ids(await store.readAll(from, { limit: 2 })), ids(all.slice(0, 2)), 'limit');
    t.strictSame(ids(await store.readAll(from, { filter: { types: ['Alpha'] } })), ids([a1, a2]), 'by type');
    t.strictSame(ids(await store.readAll(from, { filter: { streamPrefixes: [s('all-')] } })), ids([a1, b1, g1, b2]), 'by stream prefix');
    t.strictSame(ids(await store.readAll(from, { filter: { types: ['Alpha', 'Gamma'], streamPrefixes: [s('all-b'), s('zed')] } })),
      ids([g1, a2]), 'both');
    t.strictSame(ids(await store.readAll(from, { filter: { types: ['Beta'] }, limit: 1 })), ids([b1]), 'filter then limit');
    t.strictSame(await store.readAll(from, { filter: { types: [] } }), [], 'an empty type list matches nothing');
    t.strictSame(await store.readAll(from, { filter: { streamPrefixes: [] } }), [], 'an empty prefix list matches nothing');
    t.strictSame(await store.readAll(last.position), [], 'nothing after the head');
    t.equal(await store.headPosition(), last.position);
  });

  await t.test('readAll and subscribeToAll by correlation id and actor (metadata): alternatives merged in log order', async (t) => {
    const from = await store.headPosition();
    const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
    const [k, owner] = [`key:${randomUUID()}`, `user:${randomUUID()}`];
    const by = (type: string, correlation: string, actor: string) => {
      const event = newEvent(type, {});
      return { ...event, metadata: { ...event.metadata, correlation_id: correlation, causation_id: correlation, actor } };
    };
    const [x1, x2, x3, x4, x5] = [by('Alpha', a, k), by('Beta', b, owner), by('Beta', a, owner), by('Alpha', c, k), by('Alpha', a, k)];
    // Another tool's metadata: a number where Cairn writes a string is no request's.
    const numeric = { ...newEvent('Alpha', {}), metadata: { correlation_id: 5, actor: 5 } as unknown as RecordedEvent['metadata'] };
    await store.append(s('meta-1'), [x1, x2], 'no_stream');
    await store.append(s('meta-2'), [x3, numeric], 'no_stream');
    await store.append(s('meta-1'), [x4], 1);
    await store.append(s('other-3'), [x5], 'no_stream');
    const read = async (filter: SubscriptionFilter, limit?: number, after = from) => ids(await store.readAll(after, { filter, limit }));
    t.strictSame(await read({ correlationIds: [a] }), ids([x1, x3, x5]), 'one request');
    t.strictSame(await read({ correlationIds: [c, a] }), ids([x1, x3, x4, x5]), 'two requests, in log order');
    t.strictSame(await read({ correlationIds: [c, a, a] }, 2), ids([x1, x3]), 'alternatives merged, then the limit');
    const [, second] = await store.readAll(from, { filter: { correlationIds: [a, c] }, limit: 2 });
    t.strictSame(await read({ correlationIds: [a, c] }, 2, second!.position), ids([x4, x5]), 'the next page');
    t.strictSame(await read({ actors: [k] }), ids([x1, x4, x5]), 'one actor');
    t.strictSame(await read({ actors: [owner, k] }), ids([x1, x2, x3, x4, x5]), 'two actors');
    t.strictSame(await read({ correlationIds: [a], actors: [owner] }), ids([x3]), 'a request and an actor');
    t.strictSame(await read({ correlationIds: [a, b], types: ['Beta'], streamPrefixes: [s('meta-')] }), ids([x2, x3]), 'with a type and a stream prefix');
    t.strictSame(await read({ actors: [k], types: ['Alpha'], streamPrefixes: [s('meta-')] }), ids([x1, x4]), 'an actor with a type and a prefix');
    t.strictSame(await read({ correlationIds: ['5'] }), [], 'a number is not the text of its digits');
    t.strictSame(await read({ actors: ['5'] }), [], 'nor for actors');
    t.strictSame(await read({ correlationIds: [randomUUID()] }), [], 'an id no event has');
    t.strictSame(await read({ correlationIds: [] }), [], 'an empty list matches nothing');
    t.strictSame(await read({ actors: [] }), [], 'an empty actor list matches nothing');

    const controller = new AbortController();
    t.teardown(() => controller.abort());
    const seen: RecordedEvent[] = [];
    const later = by('Gamma', a, owner);
    const subscription = (async () => {
      for await (const e of store.subscribeToAll(from, { filter: { correlationIds: [a] }, signal: controller.signal })) {
        seen.push(e);
        if (seen.length === 3) await store.append(s('meta-4'), [by('Gamma', b, owner), later], 'no_stream');
        if (seen.length === 4) controller.abort();
      }
    })();
    await within(subscription, 'the subscription by correlation id');
    t.strictSame(ids(seen), ids([x1, x3, x5, later]), 'caught up, then live: only the request\'s events');
  });

  await t.test('read limits: 0 reads nothing, one past the end reads to the end, a negative or fractional one is refused', async (t) => {
    const from = await store.headPosition();
    // A live subscription: the embedded store then keeps the events appended next in memory and reads them from there.
    const controller = new AbortController();
    t.teardown(() => controller.abort());
    const iterator = store.subscribeToAll(from, { signal: controller.signal })[Symbol.asyncIterator]();
    const waiting = iterator.next();
    const events = Array.from({ length: 3 }, (_, i) => newEvent('Alpha', { i }));
    await store.append(s('limits'), events, 'no_stream');
    await within(waiting, 'the subscription');
    for (const limit of [0, 2, 3, 4, 2 ** 53, 1e20, Infinity]) {
      const expected = ids(events.slice(0, Math.min(limit, events.length)));
      t.strictSame(ids(await store.readStream(s('limits'), { limit })), expected, `readStream, limit ${limit}`);
      t.strictSame(ids(await store.readAll(from, { limit })), expected, `readAll, limit ${limit}`);
      t.strictSame(ids(await store.readAll(from, { limit, filter: { types: ['Alpha'] } })), expected, `readAll with a filter, limit ${limit}`);
    }
    for (const limit of [-1, -2, 1.5, Number.NaN]) {
      await t.rejects(store.readStream(s('limits'), { limit }), RangeError, `readStream, limit ${limit}`);
      await t.rejects(store.readAll(from, { limit }), RangeError, `readAll, limit ${limit}`);
      await t.rejects(store.readAll(from, { limit, filter: { types: ['Alpha'] } }), RangeError, `readAll with a filter, limit ${limit}`);
    }
    controller.abort();
    await iterator.return?.();
  });

  await t.test('stream prefixes outside the Basic Multilingual Plane (two UTF-16 units a character)', async (t) => {
    const from = await store.headPosition();
    const p = s('🐻-');
    const bear = newEvent('Alpha', {});
    await store.append(`${p}x`, [bear], 'no_stream');
    await store.append(s('🐻'), [newEvent('Alpha', {})], 'no_stream'); // shorter: not under the prefix
    t.strictSame(ids(await store.readAll(from, { filter: { streamPrefixes: [p] } })), ids([bear]), 'readAll by prefix');
    const listed = await eventually(async () => {
      const list = await store.listStreams({ prefix: p });
      return list.length === 1 ? list : undefined;
    });
    t.strictSame(listed.map((i) => i.stream), [`${p}x`], 'listStreams by prefix');
  });

  await t.test('listStreams by prefix: the prefix itself, names just past its range, prefixes ending at code point edges', async (t) => {
    // Each prefix with: itself as a name, names under it, and names beside it (one code point more or less at its end).
    const cases: Array<[string, string[]]> = [
      [s('edge-'), ['', 'a', '\u{10FFFF}', '-']],
      [s('edge\u{FFFF}'), ['', 'x']],
      [s('edge\u{D7FF}'), ['', 'x']],
      [s('edge\u{10FFFF}'), ['', '\u{10FFFF}']],
    ];
    const outside = [s('edge.'), s('edge,'), s('edge'), s('edge\u{E000}'), s('edge\u{10000}')];
    for (const name of outside) await store.append(name, [newEvent('Alpha', {})], 'no_stream');
    for (const [prefix, under] of cases) for (const rest of under) await store.append(prefix + rest, [newEvent('Alpha', {})], 'no_stream');
    for (const [prefix, under] of cases) {
      const expected = under.map((rest) => prefix + rest).sort(compareStreamNames);
      const listed = await eventually(async () => {
        const list = await store.listStreams({ prefix, limit: 100 });
        return list.length >= expected.length ? list : undefined;
      });
      t.strictSame(listed.map((i) => i.stream), expected, `prefix ending U+${[...prefix].at(-1)!.codePointAt(0)!.toString(16)}: its names, in UTF-8 order, none beside it`);
      t.strictSame((await store.listStreams({ prefix, after: expected[0]!, limit: 100 })).map((i) => i.stream), expected.slice(1), 'after its first (the prefix itself)');
      t.strictSame((await store.listStreams({ prefix, after: s('edge'), limit: 100 })).map((i) => i.stream), expected, 'after a name before the prefix: all of them');
      t.strictSame((await store.listStreams({ prefix, after: expected.at(-1)!, limit: 100 })), [], 'after its last: none');
    }
    // U+10000 comes after U+FFFF in code point order, though its UTF-16 units (D800 DC00) sort before it.
    t.strictSame(await store.listStreams({ prefix: s('edge\u{FFFF}'), after: s('edge\u{10000}') }), [], 'after a name past the prefix in code point order: none');
    t.strictSame((await store.listStreams({ prefix: s('edge'), after: s('edge.'), limit: 100 })).map((i) => i.stream),
      [s('edge\u{D7FF}'), s('edge\u{D7FF}x'), s('edge\u{E000}'), s('edge\u{FFFF}'), s('edge\u{FFFF}x'), s('edge\u{10000}'), s('edge\u{10FFFF}'), s('edge\u{10FFFF}\u{10FFFF}')], 'in code point order');
  });

  await t.test('listStreams and streamInfo', async (t) => {
    const p = s('ls-');
    await store.append(`${p}b`, [newEvent('Alpha', {})], 'no_stream');
    await store.append(`${p}a`, [newEvent('Alpha', {}), newEvent('Beta', {})], 'no_stream');
    await store.append(`${p}c`, [newEvent('Alpha', {})], 'no_stream');
    await store.append(`${p}c`, [newEvent('Beta', {}), newEvent('Gamma', {})], 0);
    // ESDB lists streams from its $streams system projection, which follows the log asynchronously.
    const listed = await eventually(async () => {
      const list = await store.listStreams({ prefix: p });
      return list.length === 3 ? list : undefined;
    });
    t.strictSame(listed.map((i) => i.stream), [`${p}a`, `${p}b`, `${p}c`], 'sorted by name');
    t.strictSame((await store.listStreams({ prefix: p, limit: 2 })).map((i) => i.stream), [`${p}a`, `${p}b`], 'limit');
    t.strictSame((await store.listStreams({ prefix: p, after: `${p}b` })).map((i) => i.stream), [`${p}c`], 'after');
    t.strictSame(await store.listStreams({ prefix: p, limit: 0 }), [], 'limit 0 lists nothing');
    t.equal((await store.listStreams({ prefix: p, limit: Infinity })).length, 3, 'limit Infinity lists them all');
    for (const limit of [-1, 1.5, Number.NaN]) await t.rejects(store.listStreams({ prefix: p, limit }), RangeError, `limit ${limit} is refused, not read as all or none`);
    const events = await store.readStream(`${p}c`);
    const info = await store.streamInfo(`${p}c`);
    t.match(info, {
      stream: `${p}c`, revision: 2, event_count: 3,
      first_position: events[0]!.position, last_position: events[2]!.position,
      created_at: String, updated_at: String,
    });
    t.ok(info!.created_at <= info!.updated_at);
    t.strictSame(listed[2], info, 'a listed stream carries its info');
    t.equal(await store.streamInfo(s('ls-none')), undefined);
  });

  await t.test('subscribeToAll: catch-up, then live, then stopped by its signal', async (t) => {
    const from = await store.headPosition();
    const early = [newEvent('Alpha', {}), newEvent('Beta', {})];
    const other = newEvent('Gamma', {});
    await store.append(s('sub'), early, 'no_stream');
    await store.append(s('sub-other'), [other], 'no_stream');
    const controller = new AbortController();
    const iterator = store.subscribeToAll(from, { signal: controller.signal })[Symbol.asyncIterator]();
    const caughtUp = [];
    for (let i = 0; i < 3; i++) caughtUp.push((await within(iterator.next(), 'catch-up event')).value as RecordedEvent);
    t.strictSame(ids(caughtUp), ids([...early, other]), 'catch-up');
    const live = newEvent('Beta', {});
    await store.append(s('sub'), [live], 1);
    const next = await within(iterator.next(), 'live event');
    t.equal((next.value as RecordedEvent).id, live.id, 'an event appended after subscribing arrives');
    assertIncreasing(t, [...caughtUp, next.value as RecordedEvent]);
    const waiting = iterator.next();
    controller.abort();
    t.equal((await within(waiting, 'end after abort')).done, true, 'abort ends a waiting subscription');

    const exclusive = new AbortController();
    const afterFirst = store.subscribeToAll(caughtUp[0]!.position, { signal: exclusive.signal })[Symbol.asyncIterator]();
    t.equal(((await within(afterFirst.next(), 'first after position')).value as RecordedEvent).id, early[1]!.id, 'fromPosition is exclusive');
    exclusive.abort();
    await afterFirst.return?.();

    const filtered = new AbortController();
    const betas: RecordedEvent[] = [];
    for await (const e of store.subscribeToAll(from, { filter: { types: ['Beta'], streamPrefixes: [s('sub')] }, signal: filtered.signal })) {
      betas.push(e);
      if (betas.length === 2) filtered.abort();
    }
    t.strictSame(ids(betas), ids([early[1]!, live]), 'filtered by type and stream prefix, ended by abort');

    const already = new AbortController();
    already.abort();
    const none = [];
    for await (const e of store.subscribeToAll(from, { signal: already.signal })) none.push(e);
    t.strictSame(none, [], 'an aborted signal yields nothing');
  });

  await t.test(`${WRITERS} concurrent writers, a subscriber from the start: every acknowledged event exactly once`, async (t) => {
    const prefix = s('conc');
    const from = await store.headPosition();
    const watch = watchLog(store, from, prefix, WRITERS * EVENTS_PER_WRITER);
    try {
      const acks = (await Promise.all(Array.from({ length: WRITERS }, (_, writer) =>
        runWriter(store, plan(writer, prefix))))).flat();
      await verifyLog(t, store, from, prefix, acks, await watch.events);
    } finally {
      watch.stop();
    }
  });

  const file = subject.file;
  if (file) {
    await t.test(`${WRITERS} writer processes on the same file, a subscriber in this one`, async (t) => {
      const prefix = s('procs');
      const from = await store.headPosition();
      const watch = watchLog(store, from, prefix, WRITERS * EVENTS_PER_WRITER);
      try {
        const plans = Array.from({ length: WRITERS }, (_, writer) => ({ ...plan(writer, prefix), pauseMs: 3 }));
        const acks = (await runWriterProcesses(file, plans)).flat();
        await verifyLog(t, store, from, prefix, acks, await watch.events);
      } finally {
        watch.stop();
      }
    });
  }
}

function plan(writer: number, prefix: string): WriterPlan {
  return { writer, events: EVENTS_PER_WRITER, prefix, seed: 7919 * (writer + 1), sharedStreams: 3 };
}

/**
 * Follows the log from `from` until `count` events of the run arrived, then a little longer to catch
 * duplicates. `stop()` ends it early (when a writer failed).
 */
function watchLog(store: EventStore, from: number, prefix: string, count: number): { events: Promise<RecordedEvent[]>; stop: () => void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 90_000);
  const seen: RecordedEvent[] = [];
  const events = (async () => {
    try {
      for await (const e of store.subscribeToAll(from, { filter: { streamPrefixes: [prefix] }, signal: controller.signal })) {
        seen.push(e);
        if (seen.length === count) setTimeout(() => controller.abort(), 300);
      }
      return seen;
    } finally {
      clearTimeout(timer);
    }
  })();
  events.catch(() => undefined); // observed by the caller unless a writer failed first
  return { events, stop: () => controller.abort() };
}

/**
 * The property: the subscriber and a full readAll each saw every acknowledged event exactly once,
 * in the same strictly increasing global order, and every acknowledgement matches the log.
 */
async function verifyLog(t: Test, store: EventStore, from: number, prefix: string, acks: Ack[], seen: RecordedEvent[]): Promise<void> {
  const acked = acks.flatMap((a) => a.ids);
  t.equal(acked.length, WRITERS * EVENTS_PER_WRITER, 'every writer finished');
  t.equal(new Set(acked).size, acked.length, 'acknowledged ids are distinct');

  const read: RecordedEvent[] = [];
  for (let after = from; ;) {
    const page = await store.readAll(after, { limit: 500, filter: { streamPrefixes: [prefix] } });
    if (page.length === 0) break;
    read.push(...page);
    after = page.at(-1)!.position;
  }
  for (const [name, events] of [['subscriber', seen], ['readAll', read]] as const) {
    t.equal(events.length, acked.length, `${name}: as many events as acknowledged`);
    t.equal(new Set(ids(events)).size, events.length, `${name}: no duplicates`);
    t.strictSame(new Set(ids(events)), new Set(acked), `${name}: exactly the acknowledged events`);
    assertIncreasing(t, events, name);
  }
  t.strictSame(seen.map((e) => [e.id, e.position]), read.map((e) => [e.id, e.position]), 'subscriber and readAll agree on the order');

  const byId = new Map(read.map((e) => [e.id, e]));
  const mismatched = acks.filter((a) => {
    const events = a.ids.map((id) => byId.get(id));
    const last = events.at(-1);
    return !last || last.position !== a.position || last.revision !== a.revision
      || events.some((e, i) => !e || e.stream !== a.stream || e.revision !== a.revision - (a.ids.length - 1 - i));
  });
  t.strictSame(mismatched, [], 'each acknowledgement names its events\' stream, revisions and last position');

  // Guards the test itself: writers that ran one after the other would prove nothing.
  const switches = read.filter((e, i) => i > 0 && e.data.writer !== read[i - 1]!.data.writer).length;
  t.ok(switches >= WRITERS * 10, `the writers' appends interleave in the log (${switches} switches)`);

  const revisions = new Map<string, number[]>();
  for (const e of read) revisions.set(e.stream, [...(revisions.get(e.stream) ?? []), e.revision]);
  const gaps = [...revisions].filter(([, r]) => r.some((revision, i) => revision !== i));
  t.strictSame(gaps, [], 'every stream has revisions 0..n-1 in log order');
}

/** Starts the writer processes, releases them together once all are ready, and returns their acks. */
async function runWriterProcesses(file: string, plans: WriterPlan[]): Promise<Ack[][]> {
  const children = plans.map((p) => {
    const acksFile = `${file}.acks-${p.writer}.json`;
    const child = spawn(process.execPath, ['--import', 'tsx', WRITER_SCRIPT, file, JSON.stringify(p), acksFile], {
      cwd: process.cwd(),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    const ready = new Promise<void>((resolve, reject) => {
      createInterface({ input: child.stdout }).on('line', (line) => { if (line === 'ready') resolve(); });
      child.once('close', () => reject(new Error(`writer ${p.writer} exited before it was ready: ${stderr}`)));
    });
    const exited = new Promise<Ack[]>((resolve, reject) => {
      child.once('close', (code) => {
        if (code !== 0) return reject(new Error(`writer ${p.writer} exited with ${code}: ${stderr}`));
        resolve(JSON.parse(readFileSync(acksFile, 'utf8')) as Ack[]);
      });
    });
    return { child, ready, exited };
  });
  try {
    await within(Promise.all(children.map((c) => c.ready)), 'writer processes ready', 60_000);
    for (const { child } of children) child.stdin.end('go\n');
    return await within(Promise.all(children.map((c) => c.exited)), 'writer processes done', 90_000);
  } finally {
    for (const { child } of children) if (child.exitCode === null) child.kill();
  }
}

async function expectError<E>(promise: Promise<unknown>, type: new (...args: never[]) => E): Promise<E> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof type) return error;
    throw error;
  }
  throw new Error(`expected ${type.name}, but the call succeeded`);
}

/** Where an append's events are (or were found): what a retry must answer the same. */
function place({ revision, position }: AppendResult): Pick<AppendResult, 'revision' | 'position'> {
  return { revision, position };
}

function ids(events: Array<{ id: string }>): string[] {
  return events.map((e) => e.id);
}

function assertIncreasing(t: Test, events: RecordedEvent[], name = 'positions'): void {
  const bad = events.findIndex((e, i) => i > 0 && e.position <= events[i - 1]!.position);
  t.equal(bad, -1, `${name}: strictly increasing`);
}

function within<T>(promise: Promise<T>, what: string, ms = 5000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms); });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Polls `probe` until it returns a value (for ESDB's asynchronous system projections). */
async function eventually<T>(probe: () => Promise<T | undefined>, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((r) => setTimeout(r, 100));
  }
}

t.test('embedded', async (t) => {
  const file = join(tempDir(t, 'cairn-contract-'), 'events.db');
  await eventStoreContract(t, async () => ({ store: new EmbeddedEventStore(file), fresh: true, file }));
});

t.test('embedded: a read-only store object in the same process (the projection thread) follows every commit', async (t) => {
  const file = join(tempDir(t, 'cairn-contract-'), 'events.db');
  const writer = new EmbeddedEventStore(file);
  const reader = new EmbeddedEventStore(file, { appends: false });
  t.teardown(async () => { await writer.close(); await reader.close(); });
  const subscription = new AbortController();
  const seen: RecordedEvent[] = [];
  const following = (async () => {
    for await (const e of reader.subscribeToAll(0, { signal: subscription.signal })) {
      seen.push(e);
      if (seen.length === 600) return;
    }
  })();
  // 600 events from 12 concurrent writers over 30 streams: many group commits, each announced.
  const revisions = new Map<string, number>();
  await Promise.all(Array.from({ length: 12 }, async (_, w) => {
    for (let i = 0; i < 50; i++) {
      const stream = `follow-${(w * 50 + i) % 30}`;
      for (;;) {
        const expected = revisions.get(stream) ?? -1;
        try {
          const r = await writer.append(stream, [newEvent('Followed', { w, i })], expected < 0 ? 'no_stream' : expected);
          revisions.set(stream, r.revision);
          break;
        } catch (error) {
          if (!(error instanceof WrongExpectedVersionError)) throw error;
          revisions.set(stream, (await writer.streamInfo(stream))?.revision ?? -1);
        }
      }
    }
  }));
  await following;
  subscription.abort();
  t.equal(seen.length, 600);
  t.strictSame(seen.map((e) => e.position), Array.from({ length: 600 }, (_, i) => i + 1), 'every event once, in log order');
  t.strictSame(seen, await writer.readAll(0, { limit: 1000 }), 'the same events as the log');
});

/*
 * EsdbEventStore on the stand-in for EventStoreDB (test/support/esdb-standin.ts), whether or not EVENTSTORE_URL is set:
 * the stand-in is not a server, but it answers the client's calls as one does. Twice: as a server since 21.10 with its
 * system projections running (the client appends through BatchAppend, which such servers list among their features;
 * link events in $streams, $ce-* and $et-* follow each append, and streams are listed from $streams), and as a server
 * without them answering the unary Append (streams are listed by scanning $all).
 */
for (const batchAppend of [true, false]) {
  t.test(`esdb stand-in (${batchAppend ? 'BatchAppend, system projections' : 'Append, no system projections'})`, async (t) => {
    const { EsdbEventStore } = await import('../../infra/eventstore/esdb.js');
    const esdb = await EsdbStandin.start(t);
    esdb.batchAppend = batchAppend;
    esdb.systemProjections = batchAppend;
    await eventStoreContract(t, async () => ({ store: new EsdbEventStore(esdb.url), fresh: true }));
  });
}

const eventStoreUrl = process.env.EVENTSTORE_URL;
if (eventStoreUrl) {
  t.test('esdb', async (t) => {
    const { EsdbEventStore } = await import('../../infra/eventstore/esdb.js');
    await eventStoreContract(t, async () => ({ store: new EsdbEventStore(eventStoreUrl), fresh: false }));
  });
} else {
  t.test('esdb', { skip: 'EVENTSTORE_URL not set: EventStoreDB contract run skipped' }, () => {});
}

