import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig } from '../../infra/config.js';
import { allProjections } from '../../projections/index.js';
import { MEMORIES_PROJECTION } from '../../projections/memory/memories.js';
import { PERSONALITY_PROJECTION } from '../../projections/memory/personality.js';
import { VECTORS_PROJECTION } from '../../projections/memory/vectors.js';
import { rebuildProjection } from '../../projections/rebuild.js';
import { startTestCairn, type TestCairn } from '../support/cairn.js';
import { bagOfWords, startOpenAiServer } from '../support/openai-server.js';

/** Restarts on the same data dir and blue/green rebuilds of the memory read models. */

type Scope = { agent: string; user: string };

async function json(app: TestCairn, method: string, path: string, body?: unknown) {
  const res = await app.memory(path, { method, json: body });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}
const texts = (list: Array<{ text: string }>) => list.map((m) => m.text).sort();
const qs = (s: Scope) => `agent=${s.agent}&user=${s.user}`;

/** What a client sees of a scope, through every read endpoint. */
async function view(app: TestCairn, scope: Scope, query: string) {
  const [lexical, semantic, hybrid, context, exported] = await Promise.all([
    json(app, 'POST', '/v1/search', { scope, query, limit: 100 }),
    json(app, 'POST', '/v1/search', { scope, query, mode: 'semantic', limit: 100 }),
    json(app, 'POST', '/v1/search', { scope, query, mode: 'hybrid', limit: 100 }),
    json(app, 'POST', '/v1/context', { scope, query, mode: 'hybrid', limit: 100 }),
    json(app, 'GET', `/v1/export?${qs(scope)}`),
  ]);
  return {
    lexical: texts(lexical.body.results), semantic: texts(semantic.body.results), hybrid: texts(hybrid.body.results),
    context: texts(context.body.memories), personality: context.body.personality, exported: texts(exported.body.memories),
  };
}

t.test('everything survives a restart; deleted memories stay deleted', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-mem-restart-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const scope = { agent: 'ava', user: 'sam' };
  const wiped = { agent: 'ava', user: 'gone' };

  let app = await startTestCairn({}, { dataDir });
  const kept = await json(app, 'POST', '/v1/memories', { scope, text: 'heron by the river' });
  await json(app, 'POST', '/v1/memories', { scope, text: 'heron in the garden', id: 'garden' });
  await json(app, 'POST', '/v1/memories', { scope, text: 'heron on the roof', id: 'garden' });
  const deleted = await json(app, 'POST', '/v1/memories', { scope, text: 'heron to delete' });
  t.equal((await json(app, 'DELETE', `/v1/memories?${qs(scope)}&id=${deleted.body.id}`)).status, 200);
  await json(app, 'PUT', '/v1/personality', { scope, personality: 'Observant.' });
  await json(app, 'POST', '/v1/memories', { scope: wiped, text: 'heron wiped' });
  await json(app, 'PUT', '/v1/personality', { scope: wiped, personality: 'Wiped.' });
  t.equal((await json(app, 'DELETE', `/v1/scope?${qs(wiped)}`)).body.deleted, 1);
  const before = await view(app, scope, 'heron');
  t.same(before.exported, ['heron by the river', 'heron on the roof']);
  await app.stop({ keepData: true });

  app = await startTestCairn({}, { dataDir });
  t.teardown(() => app.stop());
  const after = await view(app, scope, 'heron');
  t.same(after, before, 'every read endpoint answers as before the restart');
  t.equal(after.personality, 'Observant.');
  t.same(await view(app, wiped, 'heron'), { lexical: [], semantic: [], hybrid: [], context: [], personality: '', exported: [] });

  // The command side rebuilt its state from the log: a duplicate is still a duplicate, a delete still a 404.
  const again = await json(app, 'POST', '/v1/memories', { scope, text: 'heron by the river' });
  t.same(again.body, kept.body);
  t.equal((await json(app, 'DELETE', `/v1/memories?${qs(scope)}&id=${deleted.body.id}`)).status, 404);
});

t.test('projection rebuilds (as `ops projections rebuild` runs them) keep deletes and are picked up live', async (t) => {
  const app = await startTestCairn();
  t.teardown(() => app.stop());
  const scope = { agent: 'rb', user: 'u' };
  for (let i = 0; i < 30; i++) await json(app, 'POST', '/v1/memories', { scope, text: `kestrel sighting ${i}` });
  for (let i = 0; i < 30; i += 3) {
    const id = (await json(app, 'POST', '/v1/memories', { scope, text: `kestrel sighting ${i}` })).body.id;
    await json(app, 'DELETE', `/v1/memories?${qs(scope)}&id=${id}`);
  }
  await json(app, 'PUT', '/v1/personality', { scope, personality: 'Patient.' });
  const before = await view(app, scope, 'kestrel');
  t.equal(before.exported.length, 20);

  // Fresh projection objects, like the ops CLI process has: the server's in-process indexes learn of the
  // swapped generation by themselves.
  const config = loadConfig({ DATA_DIR: app.dataDir });
  const memoryNames = [MEMORIES_PROJECTION, PERSONALITY_PROJECTION, VECTORS_PROJECTION];
  const memoryProjections = allProjections(config).filter((p) => memoryNames.includes(p.name));
  t.equal(memoryProjections.length, 3);
  for (const projection of memoryProjections) {
    const checkpoint = await rebuildProjection(app.events, app.reads, projection);
    t.ok(checkpoint.generation > 1, `${projection.name} rebuilt as generation ${checkpoint.generation}`);
  }
  t.same(await view(app, scope, 'kestrel'), before, 'same answers from the rebuilt generation, deleted memories stay deleted');

  await json(app, 'POST', '/v1/memories', { scope, text: 'kestrel after the rebuild' });
  const after = await view(app, scope, 'kestrel');
  t.equal(after.exported.length, 21, 'the live runners continue on the new generation');
  t.ok(after.hybrid.includes('kestrel after the rebuild'));
});

t.test('changing the embedding model, then rebuilding memory-vectors, re-embeds from the log', async (t) => {
  const server = await startOpenAiServer();
  t.teardown(() => server.close());
  const dataDir = mkdtempSync(join(tmpdir(), 'cairn-mem-model-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const env = (model: string) => ({ EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: server.url, LLM_EMBEDDING_MODEL: model, LLM_MAX_RETRIES: '0' });
  const scope = { agent: 'model', user: 'u' };

  let app = await startTestCairn(env('embed-a'), { dataDir });
  await json(app, 'POST', '/v1/memories', { scope, text: 'swift over the lake' });
  await json(app, 'POST', '/v1/memories', { scope, text: 'swift under the bridge' });
  await app.stop({ keepData: true });

  server.embed = (text) => bagOfWords(text, 8);
  app = await startTestCairn(env('embed-b'), { dataDir });
  t.teardown(() => app.stop());
  await json(app, 'POST', '/v1/memories', { scope, text: 'swift in the rain' });
  const mixed = await json(app, 'POST', '/v1/search', { scope, query: 'swift', mode: 'semantic', limit: 10 });
  t.same(texts(mixed.body.results), ['swift in the rain'], 'vectors of the old model are not compared with the new one');
  const exported = await json(app, 'GET', `/v1/export?${qs(scope)}`);
  t.same(exported.body.memories.map((m: { vector_model: string }) => m.vector_model), ['embed-a', 'embed-a', 'embed-b']);

  // A memory deleted, one corrected and a scope wiped: their old texts must not go to the provider again.
  const secret = await json(app, 'POST', '/v1/memories', { scope, text: 'SECRET-X pin 4711' });
  await json(app, 'DELETE', `/v1/memories?${qs(scope)}&id=${secret.body.id}`);
  const corrected = await json(app, 'POST', '/v1/memories', { scope, text: 'SECRET-Y old address' });
  await json(app, 'POST', '/v1/memories', { scope, id: corrected.body.id, text: 'moved away' });
  const wiped = { agent: 'model', user: 'wiped' };
  await json(app, 'POST', '/v1/memories', { scope: wiped, text: 'SECRET-Z in a wiped scope' });
  await json(app, 'DELETE', `/v1/scope?${qs(wiped)}`);
  const vectors = allProjections(loadConfig({ ...env('embed-b'), DATA_DIR: dataDir })).find((p) => p.name === VECTORS_PROJECTION)!;
  // The live runner may still be embedding the last texts (legitimately: they were live then); an export
  // waits until every read model has applied the log, so what follows is the rebuild's alone.
  t.equal((await json(app, 'GET', `/v1/export?${qs(wiped)}`)).body.memories.length, 0);
  const seen = server.embeddingRequests().length;
  await rebuildProjection(app.events, app.reads, vectors);
  const sent = server.embeddingRequests().slice(seen).map((r) => JSON.stringify(r.body));
  t.ok(sent.length > 0, 'the rebuild asked the provider');
  t.notOk(sent.some((body) => body.includes('SECRET-')), 'no deleted, replaced or wiped text was sent during the rebuild');
  t.ok(sent.some((body) => body.includes('moved away')), 'the corrected text was');
  const rebuilt = await json(app, 'POST', '/v1/search', { scope, query: 'swift', mode: 'semantic', limit: 10 });
  t.same(texts(rebuilt.body.results).sort(), ['moved away', 'swift in the rain', 'swift over the lake', 'swift under the bridge'],
    'every live memory has a vector of the new model (8 hashed dimensions: the order is not the point here)');
  const moved = await json(app, 'POST', '/v1/search', { scope, query: 'moved away', mode: 'semantic', limit: 1 });
  t.same(texts(moved.body.results), ['moved away'], 'the corrected memory has its vector');
  const after = await json(app, 'GET', `/v1/export?${qs(scope)}`);
  t.ok(after.body.memories.every((m: { vector_model: string; vector: number[] }) => m.vector_model === 'embed-b' && m.vector.length === 8));
  t.equal(after.body.memories.length, 4);
});
