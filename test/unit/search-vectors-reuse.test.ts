import t from 'tap';
import type { MemoryEvent } from '../../domain/memory/decider.js';
import type { EventStore, RecordedEvent } from '../../infra/eventstore/port.js';
import { LocalHashEmbedder } from '../../infra/providers/embeddings.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { BruteForceVectorIndex } from '../../infra/search/vector.js';
import { vectorsIndexSync, vectorsProjection } from '../../projections/memory/vectors.js';
import { RecordingEmbedder } from '../support/embedders.js';

/**
 * The vector projection behind the head (a runner catching up one batch at a time): updates that keep a
 * memory's text (new session labels) keep its vector without a provider call, also when the log already
 * holds a later update of the memory.
 */

const scope = { agent: 'a', user: 'u' };
const T = '2025-01-01T00:00:00.000Z';
const at = (e: MemoryEvent, i: number): RecordedEvent => ({
  id: `e${i}`, stream: 'memory-a/u', revision: i, position: i + 1, type: e.type, data: e.data,
  metadata: { correlation_id: 'c', causation_id: 'c', actor: 'owner', occurred_at: T }, recorded_at: T,
});
const logOf = (all: RecordedEvent[]): Pick<EventStore, 'readStream' | 'headPosition'> => ({
  readStream: async (stream, options = {}) => all.filter((e) => e.stream === stream && e.revision >= (options.fromRevision ?? 0)).slice(0, options.limit ?? Infinity),
  headPosition: async () => all.at(-1)?.position ?? 0,
});

t.test('relabels of an unchanged text, each in its own batch behind the head: one provider call, vector kept', async (t) => {
  const recording = new RecordingEmbedder();
  const { sent } = recording;
  const reads = new EmbeddedReadStore(':memory:');
  t.teardown(() => reads.close());
  const index = new BruteForceVectorIndex();
  const model = new LocalHashEmbedder().model;
  const projection = vectorsProjection(recording, vectorsIndexSync(reads, index, model));
  await reads.register(projection.name, projection.collections);
  await projection.reset!();
  const relabel = (session: string): MemoryEvent =>
    ({ type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text: 'likes green tea', session, created_at: T, updated_at: T } });
  const events = [
    at({ type: 'MemoryStored', data: { ...scope, memory_id: 'm1', text: 'likes green tea', session: null, created_at: T } }, 0),
    at(relabel('trip'), 1),
    at(relabel('home'), 2),
  ];
  // The store is applied while it is the head; both relabels are in the log when the first is prepared.
  const heads = [[events[0]!], events, events];
  for (const [i, e] of events.entries()) {
    await projection.prepare!([e], logOf(heads[i]!), reads);
    const { generation } = await reads.checkpoint(projection.name);
    t.ok(await reads.applyBatch(projection.name, { position: i, generation }, e.position, async (w) => projection.apply(e, w)));
    projection.afterCommit!([e], generation);
    t.equal(index.size('a/u'), 1, `after event ${i}: the memory has its vector`);
  }
  t.same(sent, ['likes green tea'], 'embedded once, not again for the second relabel');
  const [doc] = (await reads.find('memory_vectors', { limit: 10 })).items;
  t.equal(doc?.memory_id, 'm1', 'the vector document is there');
  t.same(index.search('a/u', model, (await new LocalHashEmbedder().embed(['likes green tea']))[0]!, 1).map((h) => h.id), ['m1']);
});

t.test('a text a later update replaces is still never embedded', async (t) => {
  const recording = new RecordingEmbedder();
  const { sent } = recording;
  const reads = new EmbeddedReadStore(':memory:');
  t.teardown(() => reads.close());
  const projection = vectorsProjection(recording);
  await reads.register(projection.name, projection.collections);
  const update = (text: string): MemoryEvent =>
    ({ type: 'MemoryUpdated', data: { ...scope, memory_id: 'm1', text, session: null, created_at: T, updated_at: T } });
  const events = [
    at({ type: 'MemoryStored', data: { ...scope, memory_id: 'm1', text: 'likes green tea', session: null, created_at: T } }, 0),
    at(update('likes black tea'), 1),
    at(update('likes coffee'), 2),
  ];
  const heads = [[events[0]!], events, events];
  for (const [i, e] of events.entries()) {
    await projection.prepare!([e], logOf(heads[i]!), reads);
    const { generation } = await reads.checkpoint(projection.name);
    await reads.applyBatch(projection.name, { position: i, generation }, e.position, async (w) => projection.apply(e, w));
    projection.afterCommit!([e], generation);
  }
  t.same(sent, ['likes green tea', 'likes coffee'], '"likes black tea" was replaced before it was reached');
});
