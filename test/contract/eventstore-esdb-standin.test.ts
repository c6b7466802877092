import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import t, { type Test } from 'tap';
import { CommandBus, type RequestMeta } from '../../commands/bus.js';
import { configDecider, configStream } from '../../domain/config/decider.js';
import { toProblemError } from '../../api/http/app.js';
import { AppendTooLargeError, EventStoreTimeoutError, StreamDeletedError, WrongExpectedVersionError } from '../../infra/eventstore/errors.js';
import { EsdbEventStore } from '../../infra/eventstore/esdb.js';
import type { NewEvent } from '../../infra/eventstore/port.js';
import { appendPaths, EsdbStandin, READ } from '../support/esdb-standin.js';
import { timed, within } from '../support/settling.js';

/**
 * EsdbEventStore against a stand-in for EventStoreDB (test/support/esdb-standin.ts): an HTTP/2 server that answers the
 * gRPC calls of the client the way the server does.
 */

const newEvent = (type: string): NewEvent => ({
  id: randomUUID(),
  type,
  data: { n: 1 },
  metadata: { correlation_id: 'c', causation_id: 'c', actor: 'a', occurred_at: '2024-01-01T00:00:00.000Z' },
});

async function expectWrongVersion(t: Test, append: Promise<unknown>, expected: Partial<WrongExpectedVersionError>, name: string): Promise<void> {
  const outcome = await timed(append, 5000);
  t.equal(outcome.outcome, 'rejected', `${name}: refused`);
  t.type(outcome.error, WrongExpectedVersionError, name);
  t.match(outcome.error, expected, name);
}

/**
 * The client throws WrongExpectedVersionError for a refused append unless the connection string says
 * `throwOnAppendFailure=false`: then it answers `success: false` (appendToStream/append.js, batchAppend.js), and
 * on its batch path with `nextExpectedRevision` = BigInt(hasCurrentStreamRevision()), a boolean. Either way the
 * adapter reports the refusal with the stream's actual revision, and writes nothing.
 */
t.test('a refused append is a WrongExpectedVersionError with the actual revision, whatever throwOnAppendFailure says', async (t) => {
  for (const batchAppend of [false, true]) {
    for (const option of ['', '&throwOnAppendFailure=false']) {
      const name = `${batchAppend ? 'BatchAppend' : 'Append'}${option}`;
      const esdb = await EsdbStandin.start(t);
      esdb.batchAppend = batchAppend;
      const store = new EsdbEventStore(esdb.url + option);
      t.teardown(() => store.close());

      const first = await store.append('order-1', [newEvent('A'), newEvent('B'), newEvent('C'), newEvent('D')], 'no_stream');
      t.equal(first.revision, 3, `${name}: appended`);
      await expectWrongVersion(t, store.append('order-1', [newEvent('E')], 1), { stream: 'order-1', expected: 1, actual: 3 }, `${name}: behind`);
      await expectWrongVersion(t, store.append('order-1', [newEvent('E')], 'no_stream'), { expected: 'no_stream', actual: 3 }, `${name}: exists`);
      await expectWrongVersion(t, store.append('order-2', [newEvent('E')], 0), { stream: 'order-2', expected: 0, actual: 'no_stream' }, `${name}: no stream`);
      t.equal(esdb.streams.get('order-1')?.length, 4, `${name}: nothing more written`);
      t.notOk(esdb.streams.has('order-2'), `${name}: no stream created`);
      t.equal((await store.append('order-1', [newEvent('E')], 3)).revision, 4, `${name}: the right revision still appends`);
      const path = `/event_store.client.streams.Streams/${batchAppend ? 'BatchAppend' : 'Append'}`;
      t.ok(esdb.calls.includes(path), `${name}: the client appended through ${path}`);
    }
  }
});

/**
 * The client serialises an append's events only after awaiting the server's features (and, on first use, the
 * connection): data the caller changes after calling append was written as changed. The adapter takes their JSON
 * when it is called, as the embedded store does (the contract suite checks both against a server).
 */
t.test('an append sends its events as they were when it was called', async (t) => {
  for await (const { name, esdb, store } of appendPaths(t)) {
    for (const stream of ['order-1', 'order-2']) { // the first append connects and asks the features; the second finds them known
      const list = [1];
      const event = { ...newEvent('A'), data: { list, at: new Date(0) } };
      const appended = store.append(stream, [event], 'no_stream');
      list.push(2);
      await appended;
      const stored = esdb.streams.get(stream)![0]!;
      t.strictSame(JSON.parse(Buffer.from(stored.data).toString('utf8')), { list: [1], at: '1970-01-01T00:00:00.000Z' }, `${name}, ${stream}: as at the call`);
    }
  }
});

/** The read limits of the contract suite (there with a server only): the same answers as the embedded store's. */
t.test('read limits: 0 reads nothing, one past the end reads to the end, a negative or fractional one is refused', async (t) => {
  const esdb = await EsdbStandin.start(t);
  const store = new EsdbEventStore(esdb.url);
  t.teardown(() => store.close());
  const events = [newEvent('A'), newEvent('B'), newEvent('C')];
  await store.append('order-1', events, 'no_stream');
  for (const limit of [0, 2, 3, 4, 2 ** 53, 1e20, Infinity]) {
    const expected = events.slice(0, Math.min(limit, events.length)).map((e) => e.id);
    t.strictSame((await store.readStream('order-1', { limit })).map((e) => e.id), expected, `readStream, limit ${limit}`);
    t.strictSame((await store.readAll(0, { limit })).map((e) => e.id), expected, `readAll, limit ${limit}`);
  }
  for (const limit of [-1, 1.5, Number.NaN]) {
    await t.rejects(store.readStream('order-1', { limit }), RangeError, `readStream, limit ${limit}`);
    await t.rejects(store.readAll(0, { limit }), RangeError, `readAll, limit ${limit}`);
  }
});

/**
 * A tombstoned (hard-deleted) stream fails every read with StreamDeletedError, while $streams keeps its link: one
 * such stream made listStreams fail for every prefix. streamInfo reports it as absent, as a soft-deleted one.
 */
t.test('listStreams and streamInfo pass over a tombstoned stream', async (t) => {
  const esdb = await EsdbStandin.start(t);
  const store = new EsdbEventStore(esdb.url);
  t.teardown(() => store.close());
  esdb.write('agent-1', [{ type: 'Created', data: '{}' }, { type: 'Renamed', data: '{}' }]);
  esdb.write('agent-2', [{ type: 'Created', data: '{}' }]);
  esdb.tombstoned.add('agent-2');
  esdb.write('agent-3', [{ type: 'Created', data: '{}' }]);
  esdb.write('$streams', ['agent-1', 'agent-2', 'agent-3'].map((s) => ({ type: '$>', contentType: 'application/octet-stream', data: `0@${s}` })));

  t.equal(await store.streamInfo('agent-2'), undefined, 'a tombstoned stream has no info');
  t.strictSame((await store.listStreams({ prefix: 'agent-' })).map((i) => [i.stream, i.revision, i.event_count]), [['agent-1', 1, 2], ['agent-3', 0, 1]]);
  t.strictSame((await store.listStreams({ prefix: 'agent-', limit: 1, after: 'agent-1' })).map((i) => i.stream), ['agent-3'], 'after it, within the limit');
});

/**
 * The client's dispose() cancels the gRPC calls under reads in flight, and its read stream ends quietly on a
 * cancellation it made itself: each read answered with what it had so far, an empty stream or log, a stream that
 * does not exist. Reads cut off by close() fail instead.
 */
t.test('reads in flight when the store is closed fail, rather than answer with what arrived so far', async (t) => {
  const esdb = await EsdbStandin.start(t);
  esdb.silent = true;
  const store = new EsdbEventStore(esdb.url);
  t.teardown(() => store.close());
  let reads = 0;
  esdb.on('read', () => { reads++; });
  const calls = {
    readStream: store.readStream('agent-1'),
    readAll: store.readAll(0),
    streamInfo: store.streamInfo('agent-1'),
    listStreams: store.listStreams(),
    headPosition: store.headPosition(),
    countAfter: store.countAfter(0, 10),
  };
  while (reads < Object.keys(calls).length) await once(esdb, 'read');
  await store.close();
  for (const [name, call] of Object.entries(calls)) {
    const outcome = await timed(call, 2000);
    t.equal(outcome.outcome, 'rejected', `${name}: fails (${outcome.outcome === 'resolved' ? 'answered' : String(outcome.error)})`);
    t.match(String(outcome.error), /closed/, `${name}: because the store was closed`);
  }
});

/**
 * Stream reads on servers before 22.6 (and for events of explicit transactions on any) carry the server's
 * Position.End, 2^64-1, which the client hands on as a position: as a number it is past any checkpoint, so a
 * consistency token made of it (an append read back, a command's answer from its stream) waits for ever.
 */
t.test('positions the server does not know in a stream read are 0, and an append read back finds its position in $all', async (t) => {
  const esdb = await EsdbStandin.start(t);
  esdb.knowsPositions = false;
  const store = new EsdbEventStore(esdb.url);
  t.teardown(() => store.close());
  esdb.write('other-1', [{ type: 'Created', data: '{}' }]);
  const events = [newEvent('A'), newEvent('B')];
  const appended = await store.append('agent-1', events, 'no_stream');
  const last = esdb.streams.get('agent-1')!.at(-1)!.position;
  t.strictSame(appended, { revision: 1, position: Number(last) }, 'the append\'s position, read back from $all');
  t.strictSame((await store.readStream('agent-1')).map((e) => [e.id, e.position]), events.map((e) => [e.id, 0]), 'stream reads: unknown, 0');
  t.match(await store.streamInfo('agent-1'), { revision: 1, first_position: 0, last_position: 0 });
  t.strictSame((await store.readAll(0)).map((e) => e.position), [...esdb.streams.values()].flat().map((e) => Number(e.position)).sort((a, b) => a - b), '$all reads know them');
});

/** Unhandled rejections while the test runs (a call left to fail on its own after its timeout must not make one). */
function unhandledRejections(t: Test): unknown[] {
  const seen: unknown[] = [];
  const listener = (reason: unknown) => { seen.push(reason); };
  process.on('unhandledRejection', listener);
  t.teardown(() => { process.off('unhandledRejection', listener); });
  return seen;
}

const TIMEOUT_MS = 300;

async function expectTimeout(t: Test, call: Promise<unknown>, expected: Partial<EventStoreTimeoutError>, name: string): Promise<void> {
  const outcome = await timed(call, 5000);
  t.equal(outcome.outcome, 'rejected', `${name}: gave up (after ${Math.round(outcome.ms)} ms: ${String(outcome.error)})`);
  t.type(outcome.error, EventStoreTimeoutError, name);
  t.match(outcome.error, { ...expected, timeoutMs: TIMEOUT_MS }, name);
  t.ok(outcome.ms >= TIMEOUT_MS - 50 && outcome.ms < TIMEOUT_MS + 1000, `${name}: after about EVENTSTORE_TIMEOUT_MS (${Math.round(outcome.ms)} ms)`);
}

/**
 * The client bounds none of these calls: reads and batch appends are gRPC streams without a deadline, and before its
 * first append it asks the server's features with none (and caches the pending answer). Against a server that accepts
 * every call and answers none, each fails after EVENTSTORE_TIMEOUT_MS, and its reads are cancelled then. (The features
 * call stays open until the server answers it or the connection fails: the client's close() does not cancel it.)
 */
t.test('a server that never answers: every call fails with EventStoreTimeoutError after EVENTSTORE_TIMEOUT_MS', async (t) => {
  const esdb = await EsdbStandin.start(t);
  esdb.silent = true;
  const store = new EsdbEventStore(esdb.url, { timeoutMs: TIMEOUT_MS });
  t.teardown(() => store.close());
  const unhandled = unhandledRejections(t);

  const calls: Array<[string, () => Promise<unknown>, Partial<EventStoreTimeoutError>]> = [
    ['append', () => store.append('order-1', [newEvent('A')], 'no_stream'), { operation: 'append', stream: 'order-1' }],
    ['appendAll', () => store.appendAll([
      { stream: 'order-2', events: [newEvent('A')], expected: 'no_stream' },
      { stream: 'order-3', events: [newEvent('B')], expected: 'no_stream' },
    ]), { operation: 'append', stream: 'order-2' }],
    ['readStream', () => store.readStream('order-1'), { operation: 'readStream', stream: 'order-1' }],
    ['readAll', () => store.readAll(0, { limit: 10 }), { operation: 'readAll', stream: undefined }],
    ['streamInfo', () => store.streamInfo('order-1'), { operation: 'streamInfo', stream: 'order-1' }],
    ['headPosition', () => store.headPosition(), { operation: 'headPosition' }],
    ['endPosition', () => store.endPosition(), { operation: 'endPosition' }],
    ['countAfter', () => store.countAfter(0, 10), { operation: 'countAfter' }],
    ['listStreams', () => store.listStreams(), { operation: 'listStreams' }],
  ];
  for (const [name, call, expected] of calls) await expectTimeout(t, call(), expected, name);
  const reads = esdb.closed.filter((_, i) => esdb.calls[i] === READ);
  t.equal(reads.length, 7, 'one read each (the appends wait for the server\'s features)');
  t.ok(await within(Promise.all(reads), 1000), 'the reads are cancelled, not left open on the server');
  t.ok(await within(store.close(), 2000), 'close does not wait for the appends left running');
  await new Promise((resolve) => setImmediate(resolve));
  t.strictSame(unhandled, [], 'no unhandled rejection from the appends that failed after their timeout');
});

t.test('an append the server does not answer fails after EVENTSTORE_TIMEOUT_MS, through BatchAppend as through Append', async (t) => {
  for (const batchAppend of [true, false]) {
    const name = batchAppend ? 'BatchAppend' : 'Append';
    const esdb = await EsdbStandin.start(t);
    esdb.batchAppend = batchAppend;
    esdb.silentAppends = true;
    const store = new EsdbEventStore(esdb.url, { timeoutMs: TIMEOUT_MS });
    t.teardown(() => store.close());
    const unhandled = unhandledRejections(t);
    await expectTimeout(t, store.append('order-1', [newEvent('A')], 'no_stream'), { operation: 'append', stream: 'order-1' }, name);
    await expectTimeout(t, store.append('order-2', [newEvent('B')], 'no_stream'), { operation: 'append', stream: 'order-2' }, `${name}, again`);
    t.ok(esdb.calls.includes(`/event_store.client.streams.Streams/${name}`), `${name}: the client appended through ${name}`);
    t.ok(await within(store.close(), 2000), `${name}: close does not wait for the appends left running`);
    t.ok(await within(Promise.all(esdb.closed), 2000), `${name}: and ends their calls`);
    await new Promise((resolve) => setImmediate(resolve));
    t.strictSame(unhandled, [], `${name}: no unhandled rejection`);
  }
});

t.test('an append the server answers with a timeout of its own (a commit timeout) is an EventStoreTimeoutError at once', async (t) => {
  for await (const { name, esdb, store } of appendPaths(t, { timeoutMs: 10_000 })) {
    esdb.timeoutAppends = true;
    const outcome = await timed(store.append('order-1', [newEvent('A')], 'no_stream'), 5000);
    t.equal(outcome.outcome, 'rejected', name);
    t.type(outcome.error, EventStoreTimeoutError, `${name}: ${String(outcome.error)}`);
    t.match(outcome.error, { operation: 'append', stream: 'order-1', message: /whether the events were written is unknown/ }, name);
    t.ok(outcome.ms < 2000, `${name}: answered by the server, not by our own timer (${Math.round(outcome.ms)} ms)`);
  }
});

t.test('an append over the server\'s MaxAppendSize is an AppendTooLargeError naming the limit, and writes nothing; one at the limit is written', async (t) => {
  for await (const { name, esdb, store } of appendPaths(t, { timeoutMs: 10_000 })) {
    const sized = (bytes: number): NewEvent => ({ ...newEvent('ConfigValueSet'), data: { v: 'x'.repeat(bytes - 8) } }); // {"v":""} is 8 bytes
    esdb.maxAppendSize = 4096;
    await t.resolves(store.append('config-1', [sized(4096)], 'no_stream'), `${name}: exactly at the limit`);
    const outcome = await timed(store.append('config-1', [sized(4097)], 0), 5000);
    t.equal(outcome.outcome, 'rejected', `${name}: one byte past it`);
    t.type(outcome.error, AppendTooLargeError, `${name}: ${String(outcome.error)}`);
    t.match(outcome.error, { stream: 'config-1', maxAppendSize: 4096 }, name);
    t.equal(esdb.streams.get('config-1')!.length, 1, `${name}: nothing of it written`);
    const problem = toProblemError(outcome.error);
    t.strictSame([problem.status, problem.slug], [413, 'request-too-large'], `${name}: answered 413`);
    t.match(problem.detail, /at most 4096 bytes per write/, name);
  }
});

t.test('a read the server keeps answering is not cut off: EVENTSTORE_TIMEOUT_MS bounds the silences, not the whole read', async (t) => {
  const esdb = await EsdbStandin.start(t);
  esdb.write('order-1', Array.from({ length: 6 }, () => ({ type: 'A', data: '{}' })));
  esdb.trickleMs = TIMEOUT_MS / 2;
  const store = new EsdbEventStore(esdb.url, { timeoutMs: TIMEOUT_MS });
  t.teardown(() => store.close());
  let count = 0;
  const read = await timed(store.readStream('order-1').then((events) => { count = events.length; }), 5000);
  t.equal(read.outcome, 'resolved', `read (${String(read.error ?? '')})`);
  t.ok(read.ms > 2 * TIMEOUT_MS, `in longer than EVENTSTORE_TIMEOUT_MS (${Math.round(read.ms)} ms)`);
  t.equal(count, 6, 'every event');
});

const meta = (): RequestMeta => {
  const id = randomUUID();
  return { correlation_id: id, causation_id: id, actor: 'test', request_key: id, sequence: { next: 0 } };
};
const setConfig = (key: string, value: number) => ({ type: 'SetConfigValue' as const, data: { project_id: 'p', key, value } });

/**
 * A stream an operator tombstoned (a hard delete) refuses every append and read for good: a command on it, decided on a
 * cached state (its append refused) or loading the stream (its read refused), is a StreamDeletedError answered 410
 * `stream-deleted` naming the stream, not a 500; nothing is written, and the stream's other commands are answered too.
 */
t.test('a command on a tombstoned stream is a StreamDeletedError answered 410, whether its state was cached or is read', async (t) => {
  for await (const { name, esdb, store } of appendPaths(t, { timeoutMs: 10_000 })) {
    const stream = configStream('p');
    const cached = new CommandBus(store);
    await cached.handle(stream, configDecider, setConfig('k', 0), meta());
    esdb.tombstoned.add(stream);
    const appended = await timed(cached.handle(stream, configDecider, setConfig('k', 1), meta()), 5000);
    t.type(appended.error, StreamDeletedError, `${name}, state cached: the append refused (${String(appended.error)})`);
    t.match(appended.error, { stream }, name);
    const loaded = await timed(new CommandBus(store).handle(stream, configDecider, setConfig('k', 2), meta()), 5000);
    t.type(loaded.error, StreamDeletedError, `${name}, state read: the read refused (${String(loaded.error)})`);
    await t.rejects(store.append(stream, [newEvent('A')], 'any'), StreamDeletedError, `${name}: an append expecting any revision too`);
    t.equal(esdb.streams.get(stream)!.length, 1, `${name}: nothing written`);
    const problem = toProblemError(appended.error);
    t.strictSame([problem.status, problem.slug, problem.extra.stream], [410, 'stream-deleted', stream], `${name}: answered 410`);
  }
});

/**
 * The command bus decides commands on one stream one after another, each on the state the append before it will
 * make, and sends an append to EventStoreDB only once the one before succeeded: an append that never settled held
 * every later command on its stream for ever. Once it times out, those are answered, and the state cached on the
 * unanswered append (here never written) is gone: the next command is decided on the log.
 */
t.test('the command bus over an append the server does not answer: the commands behind it are answered, the next is decided on the log', async (t) => {
  const esdb = await EsdbStandin.start(t);
  const store = new EsdbEventStore(esdb.url, { timeoutMs: TIMEOUT_MS });
  t.teardown(() => store.close());
  const bus = new CommandBus(store);
  const stream = configStream('p');
  await bus.handle(stream, configDecider, setConfig('k', 0), meta()); // k = 0, cached

  esdb.silentAppends = true;
  const [first, second] = await Promise.all([
    timed(bus.handle(stream, configDecider, setConfig('k', 1), meta()), 5000),
    timed(bus.handle(stream, configDecider, setConfig('j', 2), meta()), 5000), // decided on k = 1, sent after it
  ]);
  t.equal(first.outcome, 'rejected', `the first fails (${String(first.error)})`);
  t.type(first.error, EventStoreTimeoutError);
  t.ok(first.ms < TIMEOUT_MS + 1000, `after about EVENTSTORE_TIMEOUT_MS (${Math.round(first.ms)} ms)`);
  t.equal(second.outcome, 'rejected', 'the command queued behind it is answered, not held');
  t.ok(second.ms < TIMEOUT_MS + 1000, `as soon as the first failed (${Math.round(second.ms)} ms)`);

  esdb.silentAppends = false;
  // Decided on the state cached on the unanswered append, k = 1 would be "nothing to do", and lost.
  const again = await timed(bus.handle(stream, configDecider, setConfig('k', 1), meta()), 5000);
  t.equal(again.outcome, 'resolved', `the next command is decided (${String(again.error ?? '')})`);
  const written = esdb.streams.get(stream)!.map((e) => JSON.parse(Buffer.from(e.data).toString('utf8')) as { key: string; value: number });
  t.strictSame(written.map((e) => [e.key, e.value]), [['k', 0], ['k', 1]], 'k = 1 is appended: the state cached on the unanswered append was dropped');
});
