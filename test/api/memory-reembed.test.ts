import Database from 'better-sqlite3';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { LOCAL_EMBEDDING_MODEL } from '../../infra/providers/embeddings.js';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { olderLocalModels } from '../../projections/memory/reembed.js';
import { startTestCairn, type TestCairn } from '../support/cairn.js';
import { seedMemories, textOf } from '../support/memory-seed.js';

/**
 * An upgrade that changes the local embedder's tokens changes its model name (local-hash-256-vN): the
 * server re-embeds the older local vectors by itself (a blue/green rebuild of memory-vectors). Vectors of
 * any other model are left to the operator (re-embedding them would call and pay a provider).
 */

const scope = { agent: 'a', user: 'u' };
const TEXTS = ['I drink green tea every morning', 'My dog Rex likes the park', 'Anna works as a nurse in Berlin'];

type Exported = { memories: Array<{ id: string; vector_model?: string }> };
async function exported(app: TestCairn): Promise<Exported> {
  const res = await app.memory('/v1/export?agent=a&user=u');
  const body = await res.json();
  if (res.status !== 200) throw new Error(`export answered ${res.status}: ${JSON.stringify(body)}`);
  return body as Exported;
}

/** A DATA_DIR whose memory vectors look as if an earlier version (or another provider) had made them. */
async function dataDirWithVectorsOf(model: string): Promise<string> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-reembed-'));
  const app = await startTestCairn({}, { dataDir });
  for (const text of TEXTS) t.equal((await app.memory('/v1/memories', { method: 'POST', json: { scope, text } })).status, 200);
  const before = await exported(app);
  t.same(before.memories.map((m) => m.vector_model), TEXTS.map(() => LOCAL_EMBEDDING_MODEL));
  await app.stop();
  const db = new Database(join(dataDir, 'readmodels.db'));
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rm_memory_vectors_g%'").pluck().all() as string[];
  t.equal(tables.length, 1);
  t.equal(db.prepare(`UPDATE ${tables[0]} SET doc = json_set(doc, '$.model', ?)`).run(model).changes, TEXTS.length);
  db.close();
  return dataDir;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

for (const thread of ['true', 'false']) {
  t.test(`vectors of an earlier local embedder are re-made at start, without an operator (PROJECTIONS_THREAD=${thread})`, async (t) => {
    const dataDir = await dataDirWithVectorsOf('local-hash-256-v2');
    const app = await startTestCairn({ PROJECTIONS_THREAD: thread }, { dataDir });
    t.teardown(() => app.stop());
    const after = await until('every vector is of the configured model', async () => {
      const e = await exported(app);
      return e.memories.every((m) => m.vector_model === LOCAL_EMBEDDING_MODEL) ? e : undefined;
    });
    t.equal(after.memories.length, TEXTS.length);
    t.equal((await app.reads.checkpoint('memory-vectors')).generation, 2, 'by a rebuild swapped in beside the live generation');
    t.equal(await app.reads.rebuildCheckpoint('memory-vectors'), undefined, 'none left in progress');
    const found = await app.memory('/v1/search', { method: 'POST', json: { scope, query: 'green tea', mode: 'semantic', limit: 1 } });
    t.match(await found.json(), { results: [{ text: TEXTS[0] }] }, 'semantic search finds the old memories again');
  });
}

t.test('vectors of another provider\'s model are not re-made by themselves (that would call the provider)', async (t) => {
  const dataDir = await dataDirWithVectorsOf('text-embedding-3-small');
  const app = await startTestCairn({}, { dataDir });
  t.teardown(() => app.stop());
  // The positive case above completes well within this time.
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  t.equal((await app.reads.checkpoint('memory-vectors')).generation, 1);
  t.equal(await app.reads.rebuildCheckpoint('memory-vectors'), undefined);
  t.same((await exported(app)).memories.map((m) => m.vector_model), TEXTS.map(() => 'text-embedding-3-small'));
});

t.test('a server stopped while it re-embeds leaves no rebuild behind, and the next start finishes it', async (t) => {
  const dataDir = await dataDirWithVectorsOf('local-hash-256-v2');
  const first = await startTestCairn({}, { dataDir });
  await first.stop();
  const reads = new EmbeddedReadStore(join(dataDir, 'readmodels.db'));
  t.equal(await reads.rebuildCheckpoint('memory-vectors'), undefined, 'an interrupted rebuild dropped its generation');
  await reads.close();
  const second = await startTestCairn({}, { dataDir });
  t.teardown(() => second.stop());
  await until('every vector is of the configured model', async () => {
    const e = await exported(second);
    return e.memories.every((m) => m.vector_model === LOCAL_EMBEDDING_MODEL) ? true : undefined;
  });
});

t.test('a projection thread that dies while it re-embeds: its replacement re-embeds again and finishes', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-reembed-'));
  const seeding = await startTestCairn({}, { dataDir });
  // Stopped also when seeding fails: a server left running keeps the file going until tap's timeout.
  await seedMemories(seeding, scope, 4000, { words: 40 }).finally(() => seeding.stop());
  const db = new Database(join(dataDir, 'readmodels.db'));
  const table = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'rm_memory_vectors_g%'").pluck().get() as string;
  t.equal(db.prepare(`UPDATE ${table} SET doc = json_set(doc, '$.model', 'local-hash-256-v2')`).run().changes, 4000);
  db.close();
  const app = await startTestCairn({}, { dataDir });
  t.teardown(() => app.stop());
  const first = app.projections.thread!;
  const rebuilding = await until('the re-embedding has begun', async () => (await app.reads.rebuildCheckpoint('memory-vectors')), 10_000);
  await first.terminate();
  t.ok((await app.reads.rebuildCheckpoint('memory-vectors'))?.generation === rebuilding.generation, 'ended in the middle of the rebuild');
  t.ok((await app.reads.checkpoint('memory-vectors')).generation === 1, 'before its swap');
  await until('every vector is of the configured model', async () => {
    const e = await exported(app);
    return e.memories.length === 4000 && e.memories.every((m) => m.vector_model === LOCAL_EMBEDDING_MODEL) ? true : undefined;
  }, 30_000);
  t.equal(await app.reads.rebuildCheckpoint('memory-vectors'), undefined, 'none left in progress');
  t.ok(app.projections.health().thread.restarts >= 1, 'by a new thread');
  const found = await app.memory('/v1/search', { method: 'POST', json: { scope, query: textOf(7, 40), mode: 'semantic', limit: 1 } });
  t.match(await found.json(), { results: [{ text: textOf(7, 40) }] }, 'semantic search finds the old memories again');
});

t.test('the earlier versions of the local embedder', async (t) => {
  t.same(olderLocalModels('local-hash-256-v3'), ['local-hash-256-v1', 'local-hash-256-v2']);
  t.same(olderLocalModels('local-hash-256-v1'), []);
  t.same(olderLocalModels('text-embedding-3-small'), []);
  t.ok(olderLocalModels().length > 0 && !olderLocalModels().includes(LOCAL_EMBEDDING_MODEL));
});
