import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { rebuildProjection } from '../../projections/rebuild.js';
import { CommandBus, type RequestMeta } from '../../commands/bus.js';
import { configDecider, configStream } from '../../domain/config/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import { EsdbEventStore } from '../../infra/eventstore/esdb.js';
import type { EventStore, RecordedEvent } from '../../infra/eventstore/port.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { eventView } from '../../ops/streams.js';
import { configDocId, configProjection } from '../../projections/config/projection.js';
import { ProjectionRunner } from '../../projections/runner.js';
import { EsdbStandin } from '../support/esdb-standin.js';
import { tempDir } from '../support/temp.js';

/**
 * Events Cairn did not write. On EventStoreDB, operators and other services write to the same cluster (the web UI,
 * scripts, other services) and the server writes its own (`$`-streams, the links of system projections such as
 * $streams and $ce-*); on the embedded log, only a row put in by hand. Every reader of the port must get through
 * them: decoded as the port promises, passed over by the projections, counted nowhere they never arrive.
 */

const meta = (): RequestMeta => {
  const id = randomUUID();
  return { correlation_id: id, causation_id: id, actor: 'test', request_key: id, sequence: { next: 0 } };
};
const setConfig = (key: string, value: number) => ({ type: 'SetConfigValue' as const, data: { project_id: 'p', key, value } });

const isObject = (value: unknown) => typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);

/** Every shape another tool may give an event's data and custom metadata, and what the port hands on for it. */
const SHAPES: Array<{ type: string; contentType?: string; data: string | Uint8Array; metadata?: string | Uint8Array; expect: { data: unknown; metadata: unknown } }> = [
  { type: 'UiNote', data: '{"note":"hi"}', metadata: 'null', expect: { data: { note: 'hi' }, metadata: {} } },
  { type: 'UiNote', data: '{"note":"hi"}', metadata: 'not json', expect: { data: { note: 'hi' }, metadata: { raw: Buffer.from('not json').toString('base64') } } },
  { type: 'UiNote', data: '{"note":"hi"}', metadata: '[1,2]', expect: { data: { note: 'hi' }, metadata: { value: [1, 2] } } },
  { type: 'UiNote', data: '{"note":"hi"}', metadata: '"text"', expect: { data: { note: 'hi' }, metadata: { value: 'text' } } },
  { type: 'UiNote', data: '{"note":"hi"}', metadata: '7', expect: { data: { note: 'hi' }, metadata: { value: 7 } } },
  { type: 'Blob', contentType: 'application/octet-stream', data: Buffer.from([0xff, 0x00, 0x01]), expect: { data: { raw: '/wAB' }, metadata: {} } },
  { type: 'Blob', contentType: 'application/octet-stream', data: 'null', expect: { data: {}, metadata: {} } },
  { type: 'Blob', contentType: 'application/octet-stream', data: '{"a":1}', expect: { data: { a: 1 }, metadata: {} } },
  { type: 'Blob', contentType: 'application/octet-stream', data: '', expect: { data: {}, metadata: {} } },
  { type: 'Json', data: 'null', expect: { data: {}, metadata: {} } },
  { type: 'Json', data: '42', expect: { data: { value: 42 }, metadata: {} } },
  { type: 'Json', data: '[1]', expect: { data: { value: [1] }, metadata: {} } },
  { type: 'Json', data: 'true', expect: { data: { value: true }, metadata: {} } },
  { type: 'Json', data: '', expect: { data: {}, metadata: {} } },
  // Not JSON although its content type says so: the client hands on its text, which cannot be told from a JSON string.
  { type: 'Json', data: 'oops', expect: { data: { value: 'oops' }, metadata: {} } },
];

/**
 * What another tool writes reaches every reader as the port's JSON objects: data and metadata that are `null`, other
 * JSON, not JSON or binary were handed on as they were (`null`, 42, an array, a string), against the port's types:
 * a projection reading a known type's fields, or a reader of `metadata.actor`, threw on them in every batch or read.
 */
t.test('EventStoreDB: data and metadata other tools wrote reach readAll, readStream and subscribeToAll as JSON objects', async (t) => {
  const esdb = await EsdbStandin.start(t);
  const store = new EsdbEventStore(esdb.url);
  t.teardown(() => store.close());
  esdb.write('tool-1', SHAPES);
  const own = await store.append('tool-2', [{
    id: randomUUID(), type: 'Own', data: { n: 1, list: [1] }, metadata: { correlation_id: 'c', causation_id: 'c', actor: 'a', occurred_at: '2024-01-01T00:00:00.000Z' },
  }], 'no_stream');

  const check = (events: RecordedEvent[], how: string) => {
    t.equal(events.length, SHAPES.length + 1, `${how}: every event`);
    for (const [i, shape] of SHAPES.entries()) {
      const event = events[i]!;
      t.ok(isObject(event.data) && isObject(event.metadata), `${how}: ${shape.type} ${JSON.stringify(String(shape.data))}, metadata ${String(shape.metadata)}: objects`);
      t.strictSame({ data: event.data, metadata: event.metadata }, shape.expect, `${how}: ${shape.type} ${JSON.stringify(String(shape.data))}: as decided`);
      t.doesNotThrow(() => eventView(event), `${how}: an operator's view of it`);
    }
    t.strictSame(events.at(-1)!.data, { n: 1, list: [1] }, `${how}: Cairn's own event as written`);
    t.match(events.at(-1)!.metadata, { actor: 'a' }, `${how}: with its metadata`);
  };
  check(await store.readAll(0), 'readAll');
  check([...await store.readStream('tool-1'), ...await store.readStream('tool-2')], 'readStream');
  const abort = new AbortController();
  const seen: RecordedEvent[] = [];
  for await (const event of store.subscribeToAll(0, { signal: abort.signal })) {
    seen.push(event);
    if (event.position === own.position) abort.abort();
  }
  check(seen, 'subscribeToAll');
});

/**
 * The embedded log has no other writer, but a row put in by hand (an operator's sqlite3 session) with data that is
 * not JSON stopped every read that held it (a SyntaxError from JSON.parse): `stream show`, `events tail`, and every
 * projection's subscription, for good. It is read as EventStoreDB's adapter reads what other tools write.
 */
t.test('embedded: a row put into the log by hand is read as EventStoreDB reads what other tools write', async (t) => {
  const dir = tempDir(t, 'cairn-foreign-');
  const file = join(dir, 'events.db');
  const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'a', occurred_at: '2024-01-01T00:00:00.000Z' };
  const writer = new EmbeddedEventStore(file);
  await writer.append('tool-1', [{ id: randomUUID(), type: 'Own', data: { n: 1 }, metadata }], 'no_stream');
  await writer.close();
  const rows: Array<[data: string | Buffer, metadata: string, expect: { data: unknown; metadata: unknown }]> = [
    ['not json', 'null', { data: { raw: Buffer.from('not json').toString('base64') }, metadata: {} }],
    ['42', '[1]', { data: { value: 42 }, metadata: { value: [1] } }],
    ['null', '', { data: {}, metadata: {} }],
    [Buffer.from([0xff, 0x00]), '{"actor":"sqlite3"}', { data: { raw: '/wA=' }, metadata: { actor: 'sqlite3' } }],
  ];
  const db = new Database(file);
  rows.forEach(([data, meta], i) => {
    db.prepare('INSERT INTO events (position, id, stream, revision, type, data, metadata, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
      .run(2 + i, randomUUID(), 'tool-1', 1 + i, 'ByHand', data, meta, '2024-01-01T00:00:00.000Z');
  });
  db.prepare('UPDATE streams SET revision = ?, event_count = ?, last_position = ? WHERE name = ?').run(rows.length, rows.length + 1, rows.length + 1, 'tool-1');
  db.close();

  const store = new EmbeddedEventStore(file);
  t.teardown(() => store.close());
  const check = (events: RecordedEvent[], how: string) => {
    t.strictSame(events.map((e) => ({ data: e.data, metadata: e.metadata })), [{ data: { n: 1 }, metadata }, ...rows.map(([, , expect]) => expect)], how);
  };
  check(await store.readAll(0), 'readAll');
  check(await store.readStream('tool-1'), 'readStream');
  const abort = new AbortController();
  const seen: RecordedEvent[] = [];
  for await (const event of store.subscribeToAll(0, { signal: abort.signal })) {
    seen.push(event);
    if (event.position === rows.length + 1) abort.abort();
  }
  check(seen, 'subscribeToAll');
});

/**
 * A projection runner on a log full of events it does not read: other tools' events (of types Cairn does not know, in
 * streams it does not own, and in a stream it owns), the server's own (`$`-streams, links of system projections)
 * before, between and after Cairn's. It passes them all, applies Cairn's own, and ends with no lag: `$` events count
 * toward none (headPosition and countAfter skip them, as the subscription does), and another tool's event is passed
 * as soon as it is read. The command bus decides on a Cairn stream holding another tool's event (an unknown type
 * changes no state) whether its state was cached or is read, and `stream show` shows that event.
 */
t.test('EventStoreDB: projections and commands get through events other tools and the server wrote', async (t) => {
  const esdb = await EsdbStandin.start(t);
  const store: EventStore = new EsdbEventStore(esdb.url);
  const reads = new EmbeddedReadStore(join(tempDir(t, 'cairn-foreign-'), 'readmodels.db'));
  const runner = new ProjectionRunner(configProjection, store, reads, undefined, { retryDelayMs: 20 });
  t.teardown(async () => { await runner.stop(); await reads.close(); await store.close(); });
  const stream = configStream('p');
  const system = (target: string) => {
    esdb.write('$ce-config', [{ type: '$>', contentType: 'application/octet-stream', data: `0@${target}` }]);
    esdb.write('$et-ConfigValueSet', [{ type: '$>', contentType: 'application/octet-stream', data: `0@${target}` }]);
    esdb.write('$stats-127.0.0.1:2113', [{ type: '$statsCollected', data: '{"proc-cpu":1}' }]);
  };
  esdb.write('orders-1', [{ type: 'OrderPlaced', data: 'null', metadata: 'null' }, { type: 'Blob', contentType: 'application/octet-stream', data: Buffer.from([1, 2]) }]);
  system('orders-1');
  await runner.start();

  const bus = new CommandBus(store);
  const first = await bus.handle(stream, configDecider, setConfig('k', 1), meta());
  system(stream);
  // An operator writes to Cairn's stream from the web UI, as the server takes it (expected revision: any).
  esdb.write(stream, [{ type: 'OperatorNote', data: '{"why":"checked by hand"}', metadata: 'null' }]);
  esdb.write('$$' + stream, [{ type: '$metadata', data: '{"$maxAge":86400}' }]);
  const cached = await bus.handle(stream, configDecider, setConfig('k', 2), meta()); // decided on a cached state, refused, read again
  const loaded = await new CommandBus(store).handle(stream, configDecider, setConfig('j', 3), meta()); // read from the log
  t.ok(cached.position > first.position && loaded.position > cached.position, 'both commands are written');
  t.strictSame((await store.readStream(stream)).map((e) => [e.revision, e.type]), [[0, 'ConfigValueSet'], [1, 'OperatorNote'], [2, 'ConfigValueSet'], [3, 'ConfigValueSet']],
    'after the operator\'s event, at the revisions the log gave them');
  t.strictSame((await store.readStream(stream))[1]!.data, { why: 'checked by hand' }, 'stream show shows it');
  system(stream);
  esdb.write('orders-2', [{ type: 'OrderPlaced', data: '{}' }]); // another service's event, the last non-system event
  system('orders-2');

  const head = await store.headPosition();
  t.equal(head, Number(esdb.streams.get('orders-2')![0]!.position), 'the head is the last event not the server\'s own');
  await runner.waitFor(head, 5000);
  t.match(await reads.get('config_values', configDocId('p', 'k')), { value: 2 }, 'Cairn\'s events are applied');
  t.match(await reads.get('config_values', configDocId('p', 'j')), { value: 3 });
  t.equal(await store.countAfter(runner.currentPosition, 100), 0, 'no lag: the server\'s events after the head count toward none');
  t.equal(await store.countAfter(loaded.position, 100), 1, 'another service\'s event counts until the runner has passed it');
  t.strictSame((await store.listStreams()).map((info) => info.stream), [stream, 'orders-1', 'orders-2'], 'streams list: every stream but the server\'s own');
});

/**
 * The projections read their own stream categories only (Projection.streams). Another service on the cluster with an
 * event type of Cairn's name (`ProjectCreated`, `AgentCreated`, `ConfigValueSet`, `MemoryStored`, … are common names) in
 * a stream of its own was applied to Cairn's read models (here a configuration value of project p that no one set), or,
 * its data shaped otherwise, stopped the projection for good (projects: "NOT NULL constraint failed: …id (applying
 * ProjectCreated at position …)"), and every read that waits for it answered 503.
 */
t.test('EventStoreDB: an event of one of Cairn\'s types in a stream Cairn does not own is not projected', async (t) => {
  const esdb = await EsdbStandin.start(t);
  const store = new EsdbEventStore(esdb.url);
  const reads = new EmbeddedReadStore(join(tempDir(t, 'cairn-foreign-'), 'readmodels.db'));
  const runner = new ProjectionRunner(configProjection, store, reads, undefined, { retryDelayMs: 20 });
  t.teardown(async () => { await runner.stop(); await reads.close(); await store.close(); });
  esdb.write('billing-config-7', [{ type: 'ConfigValueSet', data: '{"setting":"vat","value":20}' }]);
  esdb.write('crm-1', [{ type: 'ConfigValueSet', data: '{"project_id":"p","key":"k","value":"from the CRM","set_at":"2024-01-01T00:00:00.000Z"}' }]);
  await runner.start();
  const own = await new CommandBus(store).handle(configStream('p'), configDecider, setConfig('j', 1), meta());
  await t.resolves(runner.waitFor(own.position, 2000), 'the projection gets past the other service\'s events');
  t.equal(await reads.get('config_values', configDocId('p', 'k')), undefined, 'and projects none of them');
  // Nor does a rebuild from position 0, as `ops projections rebuild` runs it.
  await runner.stop();
  await rebuildProjection(store, reads, configProjection);
  t.equal(await reads.get('config_values', configDocId('p', 'k')), undefined, 'rebuilt: none of them either');
  t.ok(await reads.get('config_values', configDocId('p', 'j')), 'and Cairn\'s own value');
});
