import t from 'tap';
import type { MemoryEvent } from '../../domain/memory/decider.js';
import type { EventStore, RecordedEvent } from '../../infra/eventstore/port.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { LocalHashEmbedder } from '../../infra/providers/embeddings.js';
import { Bm25Index } from '../../infra/search/lexical.js';
import { BruteForceVectorIndex } from '../../infra/search/vector.js';
import { memoriesIndexSync, memoriesProjection } from '../../projections/memory/memories.js';
import { personalityProjection } from '../../projections/memory/personality.js';
import { vectorsIndexSync, vectorsProjection } from '../../projections/memory/vectors.js';
import { RecordingEmbedder } from '../support/embedders.js';
import type { Projection } from '../../projections/projection.js';

const scope = { agent: 'a', user: 'u' };
const T = '2025-01-01T00:00:00.000Z';
const events: MemoryEvent[] = [
  { type: 'MemoryStored', data: { ...scope, memory_id: 'm1', text: 'tea', session: null, created_at: T } },
  { type: 'MemoryStored', data: { ...scope, memory_id: 'm2', text: 'coffee', session: 's', created_at: T } },
  { type: 'PersonalitySet', data: { ...scope, personality: 'kind', updated_at: T } },
  { type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'green tea', session: null, created_at: T, updated_at: T } },
  { type: 'MemoryDeleted', data: { ...scope, memory_id: 'm2', deleted_at: T } },
  { type: 'ScopeDeleted', data: { ...scope, memory_count: 1, personality: true, deleted_at: T } },
  { type: 'MemoryStored', data: { ...scope, memory_id: 'm3', text: 'after the wipe', session: null, created_at: T } },
  { type: 'PersonalitySet', data: { ...scope, personality: 'new', updated_at: T } },
  { type: 'MemoryStored', data: { agent: 'b', user: 'u', memory_id: 'm1', text: 'other scope', session: null, created_at: T } },
];
const recorded: RecordedEvent[] = events.map((e, i) => ({
  id: `e${i}`, stream: `memory-${e.data.agent}/${e.data.user}`, revision: i, position: i + 1, type: e.type, data: e.data,
  metadata: { correlation_id: 'c', causation_id: 'c', actor: 'owner', occurred_at: T }, recorded_at: T,
}));

/** The log these events were read from, for projections that look at what follows a batch. */
const logOf = (all: RecordedEvent[]): Pick<EventStore, 'readStream' | 'headPosition'> => ({
  readStream: async (stream, options = {}) => all.filter((e) => e.stream === stream && e.revision >= (options.fromRevision ?? 0)).slice(0, options.limit ?? Infinity),
  headPosition: async () => all.at(-1)?.position ?? 0,
});
const log = logOf(recorded);

async function feed(reads: EmbeddedReadStore, projection: Projection, batch: RecordedEvent[], from: number) {
  const relevant = batch.filter((e) => projection.canHandle.includes(e.type));
  await projection.prepare?.(relevant, log);
  const { generation } = await reads.checkpoint(projection.name);
  const ok = await reads.applyBatch(projection.name, { position: from, generation }, batch.at(-1)!.position, async (w) => {
    for (const e of relevant) await projection.apply(e, w);
  });
  if (!ok) throw new Error('checkpoint moved');
  projection.afterCommit?.(relevant, generation);
}

async function docs(reads: EmbeddedReadStore, collection: string) {
  return (await reads.find(collection, { limit: 100 })).items.map(({ _position, ...d }) => d);
}

for (const [name, make] of [
  ['memories', (reads: EmbeddedReadStore) => memoriesProjection(memoriesIndexSync(reads, new Bm25Index()))],
  ['memory-personality', () => personalityProjection],
  ['memory-vectors', (reads: EmbeddedReadStore) => vectorsProjection(new LocalHashEmbedder(), vectorsIndexSync(reads, new BruteForceVectorIndex(), new LocalHashEmbedder().model))],
] as const) {
  t.test(`${name}: feeding the events twice changes nothing`, async (t) => {
    const reads = new EmbeddedReadStore(':memory:');
    t.teardown(() => reads.close());
    const projection = make(reads);
    await reads.register(projection.name, projection.collections);
    await projection.reset?.();
    await feed(reads, projection, recorded, 0);
    const collection = projection.collections[0]!.name;
    const once = await docs(reads, collection);
    // Replay everything (a runner resuming from an older checkpoint), then each event on its own.
    await reads.applyBatch(projection.name, { position: recorded.length, generation: 1 }, recorded.length, async (w) => {
      for (const e of recorded.filter((e) => projection.canHandle.includes(e.type))) {
        await projection.prepare?.([e], log);
        await projection.apply(e, w);
        await projection.apply(e, w);
      }
    });
    t.same(await docs(reads, collection), once);
    t.same(once.map((d) => d.id).sort(), name === 'memory-personality' ? ['a/u', ] : ['a/u/m3', 'b/u/m1']);
    if (name === 'memory-personality') t.equal(once[0]!.personality, 'new');
  });
}

t.test('memories: the in-process BM25 index follows commits and reloads from the read model', async (t) => {
  const reads = new EmbeddedReadStore(':memory:');
  t.teardown(() => reads.close());
  const lexical = new Bm25Index();
  const projection = memoriesProjection(memoriesIndexSync(reads, lexical));
  await reads.register(projection.name, projection.collections);
  await projection.reset!();
  await feed(reads, projection, recorded.slice(0, 5), 0);
  t.same(lexical.search('a/u', 'tea', 5).map((h) => h.id), ['m1']);
  t.same(lexical.search('a/u', 'coffee', 5), [], 'deleted');
  await feed(reads, projection, recorded.slice(5), 5);
  t.same(lexical.search('a/u', 'tea', 5), [], 'scope wiped');
  t.same(lexical.search('a/u', 'wipe', 5).map((h) => h.id), ['m3']);
  lexical.clear();
  await projection.reset!();
  t.same(lexical.search('a/u', 'wipe', 5).map((h) => h.id), ['m3'], 'reloaded');
  t.same(lexical.search('b/u', 'scope', 5).map((h) => h.id), ['m1']);
});

t.test('memory-vectors: behind the head, texts that later events replace or delete are not sent to the embedder', async (t) => {
  const recording = new RecordingEmbedder();
  const { sent } = recording;
  const reads = new EmbeddedReadStore(':memory:');
  t.teardown(() => reads.close());
  const index = new BruteForceVectorIndex();
  const projection = vectorsProjection(recording, vectorsIndexSync(reads, index, new LocalHashEmbedder().model));
  await reads.register(projection.name, projection.collections);
  await projection.reset!();
  // One event per batch, as a runner far behind the head (or a rebuild) may see them.
  for (const [i, e] of recorded.entries()) await feed(reads, projection, [e], i);
  t.same(sent.sort(), ['after the wipe', 'other scope'], '"tea" (corrected), "coffee" (deleted), "green tea" (scope wiped) never embedded');
  t.same((await docs(reads, 'memory_vectors')).map((d) => d.id).sort(), ['a/u/m3', 'b/u/m1']);

  // One batch holding several scopes: wiping one does not hide another scope's texts from the embedder.
  sent.length = 0;
  const other = { ...recorded[8]!, id: 'e-b2', position: 50, revision: 50, data: { ...recorded[8]!.data, memory_id: 'm2', text: 'kept in b' } };
  const wipe = { ...recorded[5]!, id: 'e-wipe', position: 51, revision: 51 };
  await projection.prepare!([other, wipe], logOf([...recorded, other, wipe]));
  t.same(sent, ['kept in b']);

  // Caught up with the head, a batch embeds what it stores (nothing follows it yet).
  sent.length = 0;
  const fresh = { ...recorded[6]!, id: 'e-new', position: 99, revision: 99, data: { ...recorded[6]!.data, memory_id: 'm4', text: 'newest' } };
  const relevant = [fresh];
  await projection.prepare!(relevant, logOf([...recorded, fresh]));
  t.same(sent, ['newest']);
});

t.test('memory-vectors: with an in-process embedder, a runner behind the head embeds what follows rather than read ahead', async (t) => {
  const reads = new EmbeddedReadStore(':memory:');
  t.teardown(() => reads.close());
  const local = new LocalHashEmbedder();
  const index = new BruteForceVectorIndex();
  const projection = vectorsProjection(local, vectorsIndexSync(reads, index, local.model));
  await reads.register(projection.name, projection.collections);
  await projection.reset!();
  let streamReads = 0;
  const counted: Pick<EventStore, 'readStream' | 'headPosition'> = { ...log, readStream: async (...args) => { streamReads += 1; return log.readStream(...args); } };
  for (const [i, e] of recorded.entries()) {
    const relevant = [e].filter((x) => projection.canHandle.includes(x.type));
    await projection.prepare?.(relevant, counted);
    const { generation } = await reads.checkpoint(projection.name);
    await reads.applyBatch(projection.name, { position: i, generation }, e.position, async (w) => { for (const x of relevant) await projection.apply(x, w); });
    projection.afterCommit?.(relevant, generation);
  }
  t.equal(streamReads, 0, 'no scope stream read: the local embedder sends no text anywhere, and costs microseconds');
  t.same((await docs(reads, 'memory_vectors')).map((d) => d.id).sort(), ['a/u/m3', 'b/u/m1'], 'the same vectors in the end');
  t.same(index.search('a/u', local.model, local.embedOne('after the wipe'), 5).map((h) => h.id), ['m3']);

  // A provider elsewhere (not in-process): the look-ahead reads the scope's later events.
  const remote = vectorsProjection(new RecordingEmbedder());
  await remote.prepare!([recorded[0]!], counted);
  t.ok(streamReads > 0, 'read ahead for a provider elsewhere');
});

t.test('memory-vectors: the look-ahead sees events appended since it last read a scope', async (t) => {
  const recording = new RecordingEmbedder();
  const { sent } = recording;
  const projection = vectorsProjection(recording);
  const at = (e: MemoryEvent, stream: string, revision: number, position: number): RecordedEvent => ({
    id: `x${position}`, stream, revision, position, type: e.type, data: e.data,
    metadata: { correlation_id: 'c', causation_id: 'c', actor: 'owner', occurred_at: T }, recorded_at: T,
  });
  const first = at({ type: 'MemoryStored', data: { ...scope, memory_id: 'm1', text: 'first', session: null, created_at: T } }, 'memory-a/u', 0, 1);
  const second = at({ type: 'MemoryStored', data: { ...scope, memory_id: 'm2', text: 'second', session: null, created_at: T } }, 'memory-a/u', 1, 2);
  const elsewhere = (position: number) =>
    at({ type: 'MemoryStored', data: { agent: 'b', user: 'u', memory_id: `o${position}`, text: 'elsewhere', session: null, created_at: T } }, 'memory-b/u', position, position);
  // A runner behind the head takes one event per batch; the scope's later events are read with the first.
  await projection.prepare!([first], logOf([first, second, elsewhere(3)]));
  t.same(sent, ['first']);
  // Meanwhile the user deletes m2: the log has the deletion when the next batch is prepared.
  const deleted = at({ type: 'MemoryDeleted', data: { ...scope, memory_id: 'm2', deleted_at: T } }, 'memory-a/u', 2, 4);
  await projection.prepare!([second], logOf([first, second, elsewhere(3), deleted, elsewhere(5)]));
  t.same(sent, ['first'], 'the deleted text is not sent to the provider');

  // A refused deletion (recorded for a request sent with an Idempotency-Key; on EventStoreDB a repeat of it may
  // land after the memory was stored again) changes no memory: the text stored before it is embedded.
  sent.length = 0;
  const third = at({ type: 'MemoryStored', data: { ...scope, memory_id: 'm3', text: 'third', session: null, created_at: T } }, 'memory-a/u', 3, 6);
  const refused = at({ type: 'MemoryDeletionRefused', data: { ...scope, memory_id: 'm3', refused_at: T, request_fingerprint: 'f' } }, 'memory-a/u', 4, 7);
  await projection.prepare!([third], logOf([first, second, elsewhere(3), deleted, elsewhere(5), third, refused, elsewhere(8)]));
  t.same(sent, ['third'], 'not taken for a deletion');
});
