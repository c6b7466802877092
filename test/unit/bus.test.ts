import t, { type Test } from 'tap';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { CommandBus, type RequestMeta } from '../../commands/bus.js';
import { configDecider, configStream, valueHash } from '../../domain/config/decider.js';
import { memoryDecider, memoryStream } from '../../domain/memory/decider.js';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import type { EventStore, StreamAppend } from '../../infra/eventstore/port.js';
import { tempDir } from '../support/temp.js';


const meta = (): RequestMeta => {
  const id = randomUUID();
  return { correlation_id: id, causation_id: id, actor: 'test', request_key: id, sequence: { next: 0 } };
};
const set = (value: number) => ({ type: 'SetConfigValue' as const, data: { project_id: 'p', key: 'k', value } });

t.test('commands pipeline on a hot stream, and recover when another writer moved it', async (t) => {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const store = new EmbeddedEventStore(file);
  const other = new EmbeddedEventStore(file); // another process or node writing the same stream
  t.teardown(async () => { await store.close(); await other.close(); });
  const bus = new CommandBus(store);
  const stream = configStream('p');

  const many = await Promise.all(Array.from({ length: 20 }, (_, i) => bus.handle(stream, configDecider, set(i), meta())));
  t.strictSame(many.map((r) => r.revision), Array.from({ length: 20 }, (_, i) => i), 'twenty concurrent commands, no conflict, in order');

  // The bus's cached state is now stale: the other writer appended revision 20.
  await other.append(stream, [{ id: randomUUID(), type: 'ConfigValueSet', data: { project_id: 'p', key: 'k', value: 'x', set_at: '' }, metadata: { correlation_id: 'o', causation_id: 'o', actor: 'o', occurred_at: '' } }], 19);
  // The first is decided on the stale state and its append fails; the second decides "nothing to do"
  // on the first's optimistic state. Both must end up right, not with an error.
  const [first, second] = await Promise.all([bus.handle(stream, configDecider, set(100), meta()), bus.handle(stream, configDecider, set(100), meta())]);
  t.equal(first.revision, 21, 'retried after the conflict, on fresh state');
  t.strictSame(second.events, [], 'the same value again: nothing appended');
  t.equal(second.position, first.position);
  const events = await store.readStream(stream);
  t.equal(events.length, 22);
  t.match(events.at(-1)!.data, { project_id: 'p', key: 'k', value: 100, set_at: String });
});

t.test('handleAll: commands on several streams commit together, and are decided again together after a conflict', async (t) => {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const store = new EmbeddedEventStore(file);
  const other = new EmbeddedEventStore(file);
  t.teardown(async () => { await store.close(); await other.close(); });
  const bus = new CommandBus(store);
  const [a, b] = [configStream('pa'), configStream('pb')];
  const setIn = (project: string, value: number) => ({ type: 'SetConfigValue' as const, data: { project_id: project, key: 'k', value } });

  const first = await bus.handleAll([
    { stream: a, decider: configDecider, command: setIn('pa', 1) },
    { stream: b, decider: configDecider, command: setIn('pb', 1) },
  ], meta());
  t.strictSame(first.map((r) => r.revision), [0, 0]);
  t.equal(first[1]!.position, first[0]!.position + 1);
  // A clock that moves on every reading: the commands of one request still happen at one time.
  let tick = 0;
  const ticking = new CommandBus(store, () => new Date(Date.UTC(2026, 0, 1, 0, 0, tick++)));
  const together = await ticking.handleAll([
    { stream: configStream('pc'), decider: configDecider, command: setIn('pc', 1) },
    { stream: configStream('pd'), decider: configDecider, command: setIn('pd', 1) },
  ], meta());
  const [c, d] = [(await store.readStream(configStream('pc')))[0]!, (await store.readStream(configStream('pd')))[0]!];
  t.equal(c.metadata.occurred_at, d.metadata.occurred_at, 'one occurred_at for both events');
  t.equal((together[0]!.events[0]!.data as { set_at: string }).set_at, (together[1]!.events[0]!.data as { set_at: string }).set_at);

  // Another writer moves stream b: the bus's cached state of b is stale, so the next pair fails as a
  // whole (nothing of it written to a), is decided again on fresh state, and then commits.
  await other.append(b, [{ id: randomUUID(), type: 'ConfigValueSet', data: { project_id: 'pb', key: 'x', value: 'x', set_at: '' }, metadata: { correlation_id: 'o', causation_id: 'o', actor: 'o', occurred_at: '' } }], 0);
  const second = await bus.handleAll([
    { stream: a, decider: configDecider, command: setIn('pa', 2) },
    { stream: b, decider: configDecider, command: setIn('pb', 2) },
  ], meta());
  t.strictSame(second.map((r) => r.revision), [1, 2], 'b was at revision 1 when decided again');
  t.equal((await store.readStream(a)).length, 2, 'the failed attempt wrote nothing to a');
  t.strictSame((await store.readStream(b)).map((e) => e.data.value), [1, 'x', 2]);

  // Nothing to do on one stream: only the other is appended; a decision that throws appends nothing.
  const third = await bus.handleAll([
    { stream: a, decider: configDecider, command: setIn('pa', 2) },
    { stream: b, decider: configDecider, command: setIn('pb', 3) },
  ], meta());
  t.strictSame(third[0]!.events, []);
  t.equal(third[1]!.revision, 3);
  await t.rejects(bus.handleAll([
    { stream: a, decider: configDecider, command: setIn('pa', 4) },
    { stream: b, decider: configDecider, command: { type: 'DeleteConfigValue' as const, data: { project_id: 'pb', key: 'missing' } } },
  ], meta()));
  t.equal((await store.readStream(a)).length, 2, 'a rejected decision on b leaves a untouched');
  await t.rejects(bus.handleAll([{ stream: a, decider: configDecider, command: setIn('pa', 5) }, { stream: a, decider: configDecider, command: setIn('pa', 6) }], meta()), /one command per stream/);
});

t.test('a replayed request (same Idempotency-Key) answers as the first time and leaves no state behind that was not written', async (t) => {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const store = new EmbeddedEventStore(file);
  t.teardown(() => store.close());
  const bus = new CommandBus(store);
  const stream = configStream('p');
  const keyed = (): RequestMeta => ({ ...meta(), request_key: 'idem:A' });
  const first = await bus.handle(stream, configDecider, set(1), keyed());
  const second = await bus.handle(stream, configDecider, set(2), meta());
  const replay = await bus.handle(stream, configDecider, set(1), keyed());
  t.equal(replay.position, first.position, 'the replay answers with the original position');
  t.equal(replay.revision, first.revision);
  t.equal((await store.readStream(stream)).length, 2, 'and writes nothing');
  // The value is 2 now: setting 1 again is a change and must be written.
  const again = await bus.handle(stream, configDecider, set(1), meta());
  t.ok(again.position > second.position, 'written, not mistaken for a no-op');
  const events = await store.readStream(stream);
  t.strictSame(events.map((e) => (e.data as { value: number }).value), [1, 2, 1]);
});

t.test('a command that changes nothing, or is refused, is decided on the stream as another node left it', async (t) => {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const store = new EmbeddedEventStore(file);
  const other = new EmbeddedEventStore(file); // a second API node on the same log
  t.teardown(async () => { await store.close(); await other.close(); });
  const [nodeA, nodeB] = [new CommandBus(store), new CommandBus(other)];
  const stream = configStream('p');
  const del = (key: string) => ({ type: 'DeleteConfigValue' as const, data: { project_id: 'p', key } });
  const setKey = (key: string, value: number) => ({ type: 'SetConfigValue' as const, data: { project_id: 'p', key, value } });

  await nodeA.handle(stream, configDecider, set(1), meta()); // node A caches k = 1
  await nodeB.handle(stream, configDecider, set(2), meta()); // node B sets k = 2
  // On node A's cached state, k = 1 is "nothing to do": the write would be lost.
  const again = await nodeA.handle(stream, configDecider, set(1), meta());
  t.equal(again.events.length, 1, 'k = 1 is appended, not answered from the stale cache');
  const last = (await store.readStream(stream)).at(-1)!;
  t.strictSame([last.type, last.data.value], ['ConfigValueSet', 1]);

  // A key node B creates is unknown to node A's cache: deleting it through node A must not be a 404.
  await nodeB.handle(stream, configDecider, setKey('fresh', 7), meta());
  const deleted = await nodeA.handle(stream, configDecider, del('fresh'), meta());
  t.strictSame(deleted.events.map((e) => e.type), ['ConfigValueDeleted']);
  // A key that really does not exist is still refused.
  await t.rejects(nodeA.handle(stream, configDecider, del('never'), meta()), { name: 'DomainError', kind: 'not_found' });
  // And an unchanged value with nothing new in the log appends nothing.
  const unchanged = await nodeA.handle(stream, configDecider, set(1), meta());
  t.strictSame(unchanged.events, []);
  t.equal(unchanged.position, deleted.position);
});


/** Another writer moves the stream by exactly one event: a command counted on to reach that revision fails, and the ones decided on it must not stand. */
async function pipelinedOverAFailedAppend(t: Test, open: (file: string) => EventStore) {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const store = open(file);
  const other = new EmbeddedEventStore(file); // a second API node on the same log
  t.teardown(async () => { await store.close(); await other.close(); });
  const bus = new CommandBus(store);
  const stream = configStream('p');
  const setKey = (key: string, value: unknown) => ({ type: 'SetConfigValue' as const, data: { project_id: 'p', key, value } });
  await bus.handle(stream, configDecider, setKey('k', 1), meta()); // revision 0, cached
  await other.append(stream, [{ id: randomUUID(), type: 'ConfigValueSet', data: { project_id: 'p', key: 'k', value: 'x', set_at: '' }, metadata: { correlation_id: 'o', causation_id: 'o', actor: 'o', occurred_at: '' } }], 0);
  // Pipelined: j is decided on the stale cache (expects revision 0, fails), m on j's state (expects 1,
  // which the other writer's event also is). m must be decided again, not committed on j's phantom state.
  const [j, m] = await Promise.all([bus.handle(stream, configDecider, setKey('j', 1), meta()), bus.handle(stream, configDecider, setKey('m', 2), meta())]);
  t.strictSame([j.events.length, m.events.length], [1, 1]);
  const log = (await store.readStream(stream)).map((e) => `${e.data.key}=${JSON.stringify(e.data.value)}`);
  t.strictSame(log.slice(0, 2), ['k=1', 'k="x"']);
  t.strictSame(log.slice(2).sort(), ['j=1', 'm=2'], 'both written after the other writer\'s event');
  // The bus's state must be the log's: k is "x", so setting it to 1 is a change.
  const k = await bus.handle(stream, configDecider, setKey('k', 1), meta());
  t.equal(k.events.length, 1, 'k = 1 is appended, not lost to a cached state that never was');
  t.strictSame((await store.readStream(stream)).at(-1)!.data.value, 1);
}

t.test('a command pipelined behind an append that fails is decided again (the store checks the last event id)', (t) =>
  pipelinedOverAFailedAppend(t, (file) => new EmbeddedEventStore(file)));

t.test('the same, on a store that cannot check the last event id (as EventStoreDB): the second append waits for the first', (t) =>
  pipelinedOverAFailedAppend(t, (file) => {
    const store = new EmbeddedEventStore(file);
    // The embedded log with its check turned off: appendAll ignores expectedLastEventId, as ESDB's does.
    return Object.assign(Object.create(store) as EmbeddedEventStore, {
      verifiesLastEventId: false,
      appendAll: (appends: StreamAppend[]) => store.appendAll(appends.map(({ expectedLastEventId: _, ...rest }) => rest)),
      close: () => store.close(),
    });
  }));

t.test('handleAll: a step refused after another was decided leaves no trace of that decision in the cache', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store);
  const [a, b] = [configStream('pa'), configStream('pb')];
  const setIn = (project: string, value: number) => ({ type: 'SetConfigValue' as const, data: { project_id: project, key: 'k', value } });
  await bus.handle(a, configDecider, setIn('pa', 1), meta());
  await t.rejects(bus.handleAll([
    { stream: a, decider: configDecider, command: setIn('pa', 4) },
    { stream: b, decider: configDecider, command: { type: 'DeleteConfigValue' as const, data: { project_id: 'pb', key: 'missing' } } },
  ], meta()), { name: 'DomainError', kind: 'not_found' });
  t.strictSame((await store.readStream(a)).map((e) => e.data.value), [1], 'nothing appended');
  const four = await bus.handle(a, configDecider, setIn('pa', 4), meta());
  t.equal(four.events.length, 1, 'k = 4 is a change: the refused call\'s decision is not in the cached state');
  t.strictSame((await store.readStream(a)).map((e) => e.data.value), [1, 4]);
});

t.test('state: the stream as the next command would see it, appends on their way included, and another writer\'s', async (t) => {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const store = new EmbeddedEventStore(file);
  const other = new EmbeddedEventStore(file);
  t.teardown(async () => { await store.close(); await other.close(); });
  const bus = new CommandBus(store);
  const stream = configStream('s');
  const empty = await bus.state(stream, configDecider, meta());
  t.equal(empty.revision, -1);
  t.strictSame(empty.events, []);
  const pending = bus.handle(stream, configDecider, set(1), meta());
  const seen = await bus.state(stream, configDecider, meta()); // asked while the append is on its way
  const appended = await pending;
  t.equal(seen.state.values.get('k'), valueHash(1), 'includes the pending append');
  t.equal(seen.position, appended.position, 'answered once that append is durable');
  await other.append(stream, [{ id: randomUUID(), type: 'ConfigValueSet', data: { project_id: 's', key: 'k', value: 2, set_at: '' }, metadata: { correlation_id: 'o', causation_id: 'o', actor: 'o', occurred_at: '' } }], 0);
  const fresh = await bus.state(stream, configDecider, meta());
  t.equal(fresh.state.values.get('k'), valueHash(2), 'another writer\'s append is seen');
  t.equal(fresh.revision, 1);
  t.equal((await store.readStream(stream)).length, 2, 'looking appends nothing');
});

t.test('a command decided behind the repeat of an earlier request stands only on what the log holds', async (t) => {
  const store = new EmbeddedEventStore(join(tempDir(t, 'cairn-bus-'), 'events.db'));
  t.teardown(() => store.close());
  const bus = new CommandBus(store);
  const stream = configStream('p');
  const keyed = (key: string): RequestMeta => ({ ...meta(), request_key: `idem:${key}` });
  const setKey = (key: string, value: number) => ({ type: 'SetConfigValue' as const, data: { project_id: 'p', key, value } });
  const del = (key: string) => ({ type: 'DeleteConfigValue' as const, data: { project_id: 'p', key } });
  const last = async () => (await store.readStream(stream)).at(-1)!;

  await bus.handle(stream, configDecider, setKey('k', 1), keyed('A'));
  await bus.handle(stream, configDecider, setKey('k', 2), meta());
  // The repeat decides its first event again, which the log answers as a replay: nothing is written, so
  // k = 1 sent right behind it (decided on the state the repeat would have left) is a change, not a no-op.
  const [repeat, behind] = await Promise.all([
    bus.handle(stream, configDecider, setKey('k', 1), keyed('A')),
    bus.handle(stream, configDecider, setKey('k', 1), meta()),
  ]);
  t.equal(repeat.revision, 0, 'the repeat answers the first request');
  t.strictSame(behind.events.map((e) => (e.type === 'ConfigValueSet' ? e.data.value : e.type)), [1], 'k = 1 behind it is written');
  t.strictSame([(await last()).data.key, (await last()).data.value], ['k', 1]);

  await bus.handle(stream, configDecider, del('k'), keyed('D'));
  await bus.handle(stream, configDecider, setKey('k', 3), meta());
  // The same for a refusal: behind the repeated deletion, k looks deleted, but it is not.
  const [deletedAgain, deleted] = await Promise.all([
    bus.handle(stream, configDecider, del('k'), keyed('D')),
    bus.handle(stream, configDecider, del('k'), meta()),
  ]);
  t.ok(deletedAgain.revision < deleted.revision, 'the repeat answers the first deletion');
  t.strictSame(deleted.events.map((e) => e.type), ['ConfigValueDeleted'], 'the deletion behind it is not refused: k = 3 was live');
  t.equal((await last()).type, 'ConfigValueDeleted');
  const value = await bus.state(stream, configDecider, meta());
  t.notOk(value.state.values.has('k'), 'k is deleted in the log and in the bus\'s state');
});

/** Two API nodes on one log behind a load balancer, with clocks a day apart so that each node's decisions are its own. */
function twoNodesApart(t: Test) {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const [storeA, storeB] = [new EmbeddedEventStore(file), new EmbeddedEventStore(file)];
  t.teardown(async () => { await storeA.close(); await storeB.close(); });
  const nodeA = new CommandBus(storeA, () => new Date('2026-01-01T00:00:00.000Z'));
  const nodeB = new CommandBus(storeB, () => new Date('2026-01-02T00:00:00.000Z'));
  return { storeA, storeB, nodeA, nodeB };
}

t.test('a request repeated on a node whose cached state is just before the first one (written by another node) answers what the log holds', async (t) => {
  const { storeA, nodeA, nodeB } = twoNodesApart(t);
  const keyed = (key: string): RequestMeta => ({ ...meta(), request_key: `idem:${key}` });

  const config = configStream('p');
  await nodeA.handle(config, configDecider, set(0), meta()); // node A caches revision 0
  const first = await nodeB.handle(config, configDecider, { type: 'SetConfigValue', data: { project_id: 'p', key: 'j', value: 1 } }, keyed('K'));
  // The client did not get B's answer and sends the request again; A's cache is exactly one request behind.
  const repeat = await nodeA.handle(config, configDecider, { type: 'SetConfigValue', data: { project_id: 'p', key: 'j', value: 1 } }, keyed('K'));
  t.strictSame(repeat.events, first.events, 'the events the log holds, with node B\'s time, not a decision of node A\'s that was never written');
  t.strictSame([repeat.revision, repeat.position], [first.revision, first.position]);
  t.equal((await storeA.readStream(config)).length, 2, 'nothing written');

  const memory = memoryStream('ag', 'us');
  const storeText = (text: string) => ({ type: 'StoreMemory' as const, data: { agent: 'ag', user: 'us', text } });
  await nodeA.handle(memory, memoryDecider, storeText('first'), meta());
  const stored = await nodeB.handle(memory, memoryDecider, storeText('second'), keyed('M'));
  const { memory_id: id, created_at: createdAt } = stored.events[0]!.data as { memory_id: string; created_at: string };
  const again = await nodeA.handle(memory, memoryDecider, storeText('second'), keyed('M'));
  t.equal(again.state.memories.get(id)?.created_at, createdAt, 'the repeat answers the memory as the log holds it');
  // And node A's cached state is the log's: a later store of the text answers the memory as node B created it.
  const later = await nodeA.handle(memory, memoryDecider, storeText('second'), meta());
  t.strictSame(later.events, []);
  t.equal(later.state.memories.get(id)?.created_at, createdAt, 'created at node B\'s time, as the log says');
});

t.test('a refusal recorded for a request sent with an Idempotency-Key is answered as that refusal, by its repeats too, once the key exists', async (t) => {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const [storeA, storeB] = [new EmbeddedEventStore(file), new EmbeddedEventStore(file)];
  t.teardown(async () => { await storeA.close(); await storeB.close(); });
  const [nodeA, nodeB] = [new CommandBus(storeA), new CommandBus(storeB)];
  const stream = configStream('p');
  const keyed = (key: string): RequestMeta => ({ ...meta(), request_key: `idem:${key}` });
  const del = { type: 'DeleteConfigValue' as const, data: { project_id: 'p', key: 'k' } };
  const notFound = { name: 'DomainError', kind: 'not_found', message: 'config key k not found' };
  const types = async () => (await storeA.readStream(stream)).map((e) => e.type);

  await t.rejects(nodeA.handle(stream, configDecider, del, meta()), notFound);
  t.strictSame(await types(), [], 'without a key a refusal writes nothing');
  await t.rejects(nodeA.handle(stream, configDecider, del, keyed('R')), notFound);
  t.strictSame(await types(), ['ConfigValueDeletionRefused'], 'with a key it is recorded, and answered as the refusal');

  await nodeB.handle(stream, configDecider, set(1), meta()); // k is set, by another node
  await t.rejects(nodeA.handle(stream, configDecider, del, keyed('R')), notFound, 'the repeat on the node that refused it');
  await t.rejects(nodeB.handle(stream, configDecider, del, keyed('R')), notFound, 'and on the other node');
  // A decider that has forgotten the request (it remembers the last 256) decides a deletion now, with the
  // first request's event ids: the log answers it as a replay of the refusal it holds.
  const forgetful: typeof configDecider = { ...configDecider, evolve: (s, e) => { const next = configDecider.evolve(s, e); next.requests.clear(); return next; } };
  await t.rejects(new CommandBus(storeA).handle(stream, forgetful, del, keyed('R')), notFound, 'forgotten: what the log holds');
  t.strictSame(await types(), ['ConfigValueDeletionRefused', 'ConfigValueSet'], 'nothing written by the repeats');
  const state = await nodeA.state(stream, configDecider, meta());
  t.ok(state.state.values.has('k'), 'k is still set');
  t.equal((await nodeA.handle(stream, configDecider, del, keyed('S'))).events[0]!.type, 'ConfigValueDeleted', 'another key deletes it');
});

/** The event store with a record of the revisions each readStream call started from (what the bus read, not what it decided). */
function recordingReads(store: EmbeddedEventStore): { store: EventStore; reads: number[] } {
  const reads: number[] = [];
  const recording = Object.assign(Object.create(store) as EmbeddedEventStore, {
    readStream: (stream: string, options?: { fromRevision?: number; limit?: number }) => {
      reads.push(options?.fromRevision ?? 0);
      return store.readStream(stream, options);
    },
  });
  return { store: recording, reads };
}

t.test('two nodes writing one stream in turn: after a conflict a node reads only the events written since, not the whole stream', async (t) => {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const store = new EmbeddedEventStore(file);
  const other = new EmbeddedEventStore(file); // a second API node on the same log
  t.teardown(async () => { await store.close(); await other.close(); });
  const { store: recorded, reads } = recordingReads(store);
  const [nodeA, nodeB] = [new CommandBus(recorded), new CommandBus(other)];
  const scope = { agent: 'a', user: 'u' };
  const stream = memoryStream(scope.agent, scope.user);
  const storeText = (text: string) => ({ type: 'StoreMemory' as const, data: { ...scope, text, session: null } });

  for (let i = 0; i < 2500; i++) await nodeA.handle(stream, memoryDecider, storeText(`fact ${i}`), meta());
  t.strictSame(reads, [0], 'node A read the empty stream once, then decided on its cached state');
  const fromB = await nodeB.handle(stream, memoryDecider, storeText('written by node B'), meta());
  t.equal(fromB.revision, 2500);

  reads.length = 0;
  const next = await nodeA.handle(stream, memoryDecider, storeText('fact after B'), meta());
  t.equal(next.revision, 2501, 'the append that conflicted was decided again, after node B\'s event');
  t.strictSame(reads, [2499], 'and node A read from its last known event on, not the 2,501 events from the start');
  // Node A's state has node B's memory: the same text resolves to B's memory (no duplicate).
  const again = await nodeA.handle(stream, memoryDecider, storeText('written by node B'), meta());
  t.strictSame(again.events, [], 'the same text again: nothing to store');
  t.ok(again.state.memories.has((fromB.events[0] as { data: { memory_id: string } }).data.memory_id), 'B\'s memory is in node A\'s state');

  // The same for a command that appends nothing, checked against the log (a keyed repeat or a no-op).
  await nodeB.handle(stream, memoryDecider, storeText('second from node B'), meta());
  reads.length = 0;
  const noop = await nodeA.handle(stream, memoryDecider, { type: 'DeleteMemory' as const, data: { ...scope, memory_id: 'missing' } }, meta()).catch((e: unknown) => e);
  t.match(noop, { name: 'DomainError', kind: 'not_found' });
  t.strictSame(reads, [2501], 'a refusal on a stale cache reads on from its last known event only');
  t.equal((await store.readStream(stream)).length, 2503);
});

t.test('a conflict behind pipelined commands still reads the stream whole, and every command ends up right', async (t) => {
  const file = join(tempDir(t, 'cairn-bus-'), 'events.db');
  const store = new EmbeddedEventStore(file);
  const other = new EmbeddedEventStore(file);
  t.teardown(async () => { await store.close(); await other.close(); });
  const { store: recorded, reads } = recordingReads(store);
  const bus = new CommandBus(recorded);
  const stream = configStream('p');
  const setKey = (key: string, value: number) => ({ type: 'SetConfigValue' as const, data: { project_id: 'p', key, value } });
  for (let i = 0; i < 5; i++) await bus.handle(stream, configDecider, setKey(`k${i}`, i), meta());
  await other.append(stream, [{ id: randomUUID(), type: 'ConfigValueSet', data: { project_id: 'p', key: 'k0', value: 'x', set_at: '' }, metadata: { correlation_id: 'o', causation_id: 'o', actor: 'o', occurred_at: '' } }], 4);
  reads.length = 0;
  // The second is decided on the first's state (its events applied in place): the state before both is gone.
  const results = await Promise.all([bus.handle(stream, configDecider, setKey('a', 1), meta()), bus.handle(stream, configDecider, setKey('b', 2), meta())]);
  t.strictSame(results.map((r) => r.events.length), [1, 1]);
  t.equal(reads[0], 0, 'read whole');
  const k0 = await bus.handle(stream, configDecider, setKey('k0', 0), meta());
  t.equal(k0.events.length, 1, 'k0 is "x" in the log: setting it back to 0 is a change');
});

t.test('one request with an Idempotency-Key taken by two nodes at the same moment: both answer what the log holds', async (t) => {
  const { storeA, nodeA, nodeB } = twoNodesApart(t);
  const keyed = (key: string): RequestMeta => ({ ...meta(), request_key: `idem:${key}` });
  const stream = configStream('p');
  for (let round = 0; round < 5; round++) {
    await nodeA.handle(stream, configDecider, set(round), meta());
    await nodeB.state(stream, configDecider, meta()); // both nodes cache the same revision
    const command = { type: 'SetConfigValue' as const, data: { project_id: 'p', key: `j${round}`, value: round } };
    // Both decide on the same revision and append the same event ids: one writes, the other's append is a replay at the very revision it expected.
    const [a, b] = await Promise.all([nodeA.handle(stream, configDecider, command, keyed(`K${round}`)), nodeB.handle(stream, configDecider, command, keyed(`K${round}`))]);
    const logged = (await storeA.readStream(stream)).at(-1)!;
    t.strictSame(a.events.map((e) => e.data), [logged.data], `round ${round}: node A answers the event the log holds`);
    t.strictSame(b.events.map((e) => e.data), [logged.data], `round ${round}: node B answers the event the log holds`);
    t.equal(a.position, b.position);
    // Each node's cached state is the log's: the value set at the other node's time is unchanged, not a change.
    for (const node of [nodeA, nodeB]) t.strictSame((await node.handle(stream, configDecider, command, meta())).events, [], `round ${round}: nothing to change`);
  }
  t.equal((await storeA.readStream(stream)).length, 10, 'each request written once');
});
