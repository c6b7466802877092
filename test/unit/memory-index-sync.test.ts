import t from 'tap';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import type { ProjectionWriter } from '../../infra/readstore/port.js';
import { Bm25Index } from '../../infra/search/lexical.js';
import { MEMORIES, MEMORIES_PROJECTION, memoriesIndexSync, memoriesProjection, type MemoryDoc } from '../../projections/memory/memories.js';

/** A BM25 index that counts its full reloads (each begins with clear()). */
class CountingIndex extends Bm25Index {
  reloads = 0;
  override clear(): void {
    this.reloads++;
    super.clear();
  }
}

const T = '2025-01-01T00:00:00.000Z';
const N = 200;
async function writeMemories(writer: ProjectionWriter): Promise<void> {
  for (let i = 0; i < N; i++) {
    await writer.put<MemoryDoc>(MEMORIES, { id: `a/u/m${i}`, agent: 'a', user: 'u', memory_id: `m${i}`, text: `memory ${i} about herons`, session: null, created_at: T, updated_at: T }, i + 1);
  }
}

t.test('queries that notice a rebuilt generation at the same moment share one reload of the index', async (t) => {
  const reads = new EmbeddedReadStore(':memory:');
  t.teardown(() => reads.close());
  const projection = memoriesProjection();
  await reads.register(MEMORIES_PROJECTION, projection.collections);
  t.ok(await reads.applyBatch(MEMORIES_PROJECTION, { position: 0, generation: 1 }, N, writeMemories));
  const lexical = new CountingIndex();
  const sync = memoriesIndexSync(reads, lexical);
  await sync.reset();
  t.equal(lexical.size('a/u'), N);

  // A rebuild (`ops projections rebuild memories`, another process) swaps in generation 2 while no event arrives.
  const rebuild = await reads.startRebuild(MEMORIES_PROJECTION);
  t.ok(await reads.applyBatch(MEMORIES_PROJECTION, { position: 0, generation: rebuild.generation }, N, writeMemories, { rebuild: true }));
  t.ok((await reads.finishRebuild(MEMORIES_PROJECTION, { generation: rebuild.generation })).swapped);

  // Twenty searches released together (e.g. by the same read-your-writes wait) each ask whether the index is current.
  lexical.reloads = 0;
  await Promise.all(Array.from({ length: 20 }, () => sync.ready()));
  t.equal(lexical.reloads, 1, 'one reload, not one per query (each reads every document of every scope)');
  t.equal(lexical.size('a/u'), N);
  t.equal(lexical.search('a/u', 'herons', 1000).length, N);
  await sync.ready();
  t.equal(lexical.reloads, 1, 'current now: no further reload');
});

t.test('a reload whose reads fail leaves no half-filled index that the next query would take for whole', async (t) => {
  const reads = new EmbeddedReadStore(':memory:');
  t.teardown(() => reads.close());
  await reads.register(MEMORIES_PROJECTION, memoriesProjection().collections);
  t.ok(await reads.applyBatch(MEMORIES_PROJECTION, { position: 0, generation: 1 }, N, writeMemories));
  const lexical = new CountingIndex();
  const sync = memoriesIndexSync(reads, lexical);
  await sync.reset();

  // The projection's runner reloaded (a replaced projection thread) and has the index reloaded; the read store fails.
  const find = reads.find.bind(reads);
  reads.find = async () => { throw new Error('read store briefly unreachable'); };
  await t.rejects(sync.reset(), /briefly unreachable/);
  reads.find = find;
  t.equal(lexical.size('a/u'), 0, 'the failed load had cleared the index');

  await sync.ready();
  t.equal(lexical.size('a/u'), N, 'the next query reloads it');
  t.equal(lexical.search('a/u', 'herons', 1000).length, N);
});
