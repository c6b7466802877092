import { randomUUID as uuid } from 'node:crypto';
import t from 'tap';
import { memoryIdFor, memoryStream } from '../../domain/memory/decider.js';
import type { NewEvent } from '../../infra/eventstore/port.js';
import { findAll } from '../../infra/readstore/port.js';
import { LOCAL_EMBEDDING_MODEL, LocalHashEmbedder } from '../../infra/providers/embeddings.js';
import { allProjections } from '../../projections/index.js';
import { loadConfig } from '../../infra/config.js';
import { MEMORIES, MEMORIES_PROJECTION } from '../../projections/memory/memories.js';
import { PERSONALITY, PERSONALITY_PROJECTION } from '../../projections/memory/personality.js';
import { VECTORS, VECTORS_PROJECTION } from '../../projections/memory/vectors.js';
import { rebuildProjection } from '../../projections/rebuild.js';
import { startTestCairn, type TestCairn } from '../support/cairn.js';

/** Edges of the memory projections and the export: personality-only scopes, a scope wiped and filled again, text updates, one-batch sequences. */

type Scope = { agent: string; user: string };
const qs = (s: Scope) => `agent=${s.agent}&user=${s.user}`;
const embedder = new LocalHashEmbedder();
const vectorOf = (text: string) => Array.from(embedder.embedOne(text), (x) => (x === 0 ? 0 : Number(x.toPrecision(9))));

const app = await startTestCairn();
t.teardown(() => app.stop());

async function call(method: string, path: string, body?: unknown) {
  const res = await app.memory(path, { method, json: body });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}
const ids = (results: Array<{ id: string }>) => results.map((r) => r.id).sort();

t.test('a scope with a personality and no memories exports it, with an empty list', async (t) => {
  const scope = { agent: 'edge.personality-only', user: 'u' };
  t.equal((await call('PUT', '/v1/personality', { scope, personality: 'Only this.' })).status, 200);
  const res = await app.memory(`/v1/export?${qs(scope)}`);
  t.equal(res.status, 200);
  t.equal(await res.text(), JSON.stringify({ scope, personality: 'Only this.', memories: [] }));
  // Its only memory deleted: the same.
  const stored = await call('POST', '/v1/memories', { scope, text: 'short lived' });
  t.equal((await call('DELETE', `/v1/memories?${qs(scope)}&id=${stored.body.id}`)).status, 200);
  t.same((await call('GET', `/v1/export?${qs(scope)}`)).body, { scope, personality: 'Only this.', memories: [] });
});

t.test('a scope deleted, then the same texts stored again: live again everywhere, with vectors; the personality stays gone', async (t) => {
  const scope = { agent: 'a'.repeat(128), user: 'b.c-d_e' };
  const first = await call('POST', '/v1/memories', { scope, text: 'osprey over the estuary' });
  await call('PUT', '/v1/personality', { scope, personality: 'Before.' });
  t.equal((await call('DELETE', `/v1/scope?${qs(scope)}`)).status, 200);
  const again = await call('POST', '/v1/memories', { scope, text: 'osprey over the estuary' });
  t.equal(again.body.id, first.body.id, 'same text, same id');
  t.not(again.body.created_at, undefined);
  for (const mode of ['lexical', 'semantic', 'hybrid']) {
    const res = await call('POST', '/v1/search', { scope, query: 'osprey', mode });
    t.same(ids(res.body.results), [first.body.id], `${mode}: found again, once`);
  }
  const exported = (await call('GET', `/v1/export?${qs(scope)}`)).body;
  t.equal(exported.personality, '');
  t.same(exported.memories.map((m: { text: string; vector: number[]; vector_model: string }) => [m.text, m.vector, m.vector_model]),
    [['osprey over the estuary', vectorOf('osprey over the estuary'), LOCAL_EMBEDDING_MODEL]]);
});

t.test('an update that changes the text: re-embedded, the old terms gone from lexical search', async (t) => {
  const scope = { agent: 'edge', user: 'update' };
  const stored = await call('POST', '/v1/memories', { scope, text: 'lives in Lisbon' });
  await call('POST', '/v1/memories', { scope, id: stored.body.id, text: 'moved to Porto' });
  t.same((await call('POST', '/v1/search', { scope, query: 'Lisbon' })).body.results, [], 'old term gone');
  t.same(ids((await call('POST', '/v1/search', { scope, query: 'porto' })).body.results), [stored.body.id]);
  const [m] = (await call('GET', `/v1/export?${qs(scope)}`)).body.memories;
  t.same([m.text, m.vector], ['moved to Porto', vectorOf('moved to Porto')], 'the vector is the new text\'s');
});

t.test('one batch of store, scope deletion and store again, applied live and rebuilt, gives the same read models', async (t) => {
  const scope = { agent: 'edge', user: 'one-batch' };
  const at = new Date().toISOString();
  const meta = () => ({ correlation_id: uuid(), causation_id: uuid(), actor: 'owner', occurred_at: at });
  const stored = (text: string): NewEvent => ({ id: uuid(), type: 'MemoryStored', data: { ...scope, memory_id: memoryIdFor(text), text, session: null, created_at: at }, metadata: meta() });
  await app.events.append(memoryStream(scope.agent, scope.user), [
    stored('wren in the hedge'), stored('wren on the wall'),
    { id: uuid(), type: 'PersonalitySet', data: { ...scope, personality: 'Gone soon.', updated_at: at }, metadata: meta() },
    { id: uuid(), type: 'ScopeDeleted', data: { ...scope, memory_count: 2, personality: true, deleted_at: at }, metadata: meta() },
    stored('wren after the wipe'),
  ], 'no_stream');
  const exported = (await call('GET', `/v1/export?${qs(scope)}`)).body;
  t.same(exported.memories.map((m: { text: string }) => m.text), ['wren after the wipe']);
  t.equal(exported.personality, '');
  t.same(ids((await call('POST', '/v1/search', { scope, query: 'wren', mode: 'hybrid' })).body.results), [memoryIdFor('wren after the wipe')]);

  const dump = async () => {
    const out: unknown[] = [];
    for (const collection of [MEMORIES, PERSONALITY, VECTORS]) for await (const doc of findAll(app.reads, collection, {}, 1000)) out.push(doc);
    return out;
  };
  const live = await dump();
  const names = [MEMORIES_PROJECTION, PERSONALITY_PROJECTION, VECTORS_PROJECTION];
  for (const p of allProjections(loadConfig({ DATA_DIR: app.dataDir })).filter((p) => names.includes(p.name))) await rebuildProjection(app.events, app.reads, p);
  t.same(await dump(), live);
});
