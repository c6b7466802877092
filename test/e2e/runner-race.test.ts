import t from 'tap';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedEventStore } from '../../infra/eventstore/embedded.js';
import type { RecordedEvent } from '../../infra/eventstore/port.js';
import { LocalHashEmbedder } from '../../infra/providers/embeddings.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { Bm25Index } from '../../infra/search/lexical.js';
import { BruteForceVectorIndex } from '../../infra/search/vector.js';
import { memoriesIndexSync, memoriesProjection } from '../../projections/memory/memories.js';
import { vectorsIndexSync, vectorsProjection } from '../../projections/memory/vectors.js';
import type { Projection } from '../../projections/projection.js';
import { ProjectionRunner } from '../../projections/runner.js';

const metadata = { correlation_id: 'c', causation_id: 'c', actor: 'test', occurred_at: '2026-01-01T00:00:00.000Z' };
const scope = { agent: 'a', user: 'u' };
const stored = (n: number) => ({
  id: randomUUID(), type: 'MemoryStored', metadata,
  data: { ...scope, memory_id: `m${n}`, text: `memory tok${n} of the race`, session: null, created_at: '2026-01-01T00:00:00.000Z' },
});
const deleted = (n: number) => ({ id: randomUUID(), type: 'MemoryDeleted', metadata, data: { ...scope, memory_id: `m${n}`, deleted_at: '2026-01-01T00:00:00.000Z' } });

/**
 * One node of several projecting one log into one read store: its own connection, runners and in-process indexes,
 * with counts of full index reloads and of batches another node committed first.
 */
function node(dir: string, events: EmbeddedEventStore) {
  const reads = new EmbeddedReadStore(join(dir, 'readmodels.db'));
  const lexical = new Bm25Index();
  const vectorIndex = new BruteForceVectorIndex();
  const embedder = new LocalHashEmbedder();
  const counts = { reloads: 0, elsewhere: 0 };
  const lexicalSync = memoriesIndexSync(reads, lexical);
  const vectorSync = vectorsIndexSync(reads, vectorIndex, embedder.model);
  for (const sync of [lexicalSync, vectorSync]) {
    const reset = sync.reset.bind(sync);
    sync.reset = () => { counts.reloads++; return reset(); };
  }
  const counted = (p: Projection): Projection => ({
    ...p,
    committedElsewhere: p.committedElsewhere && (async (batch: RecordedEvent[], generation: number, store) => {
      counts.elsewhere++;
      await p.committedElsewhere!(batch, generation, store);
    }),
  });
  const runners = [memoriesProjection(lexicalSync), vectorsProjection(embedder, vectorSync)]
    .map((p) => new ProjectionRunner(counted(p), events, reads, undefined, { batchWindowMs: 0 }));
  return { reads, lexical, vectorIndex, counts, runners };
}

t.test('nodes projecting one log into one read store: a batch another node committed first is followed, not reloaded in full', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-runner-race-'));
  const events = new EmbeddedEventStore(join(dir, 'events.db'));
  const nodes = [node(dir, events), node(dir, events)];
  t.teardown(async () => {
    for (const n of nodes) for (const r of n.runners) await r.stop();
    for (const n of nodes) await n.reads.close();
    await events.close();
    rmSync(dir, { recursive: true, force: true });
  });
  for (const n of nodes) for (const r of n.runners) await r.start();
  const startReloads = nodes.map((n) => n.counts.reloads);

  // Many small appends, so that both nodes' runners race for most batches.
  const total = 300;
  for (let i = 0; i < total; i += 3) {
    await events.append('memory-a/u', [stored(i), stored(i + 1), stored(i + 2)], 'any');
    if (i % 30 === 0 && i > 0) await events.append('memory-a/u', [deleted(i - 30)], 'any');
  }
  const head = await events.headPosition();
  for (const n of nodes) for (const r of n.runners) await r.waitFor(head, 30_000);

  const live = Array.from({ length: total }, (_, i) => i).filter((i) => !(i % 30 === 0 && i < total - 30));
  t.ok(nodes[0]!.counts.elsewhere + nodes[1]!.counts.elsewhere > 0, `races happened: ${nodes.map((n) => n.counts.elsewhere).join(' and ')} batches followed`);
  nodes.forEach((n, k) => {
    t.equal(n.counts.reloads, startReloads[k], `node ${k}: no index reloaded after its start`);
    const missing = live.filter((i) => n.lexical.search('a/u', `tok${i}`, 1)[0]?.id !== `m${i}`);
    t.same(missing, [], `node ${k}: every live memory is in its BM25 index`);
    const gone = [0, 30, 60].filter((i) => n.lexical.search('a/u', `tok${i}`, 1).length > 0);
    t.same(gone, [], `node ${k}: deleted memories are not`);
    t.equal(n.vectorIndex.size('a/u'), live.length, `node ${k}: one vector per live memory`);
  });
});
