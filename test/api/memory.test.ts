import t from 'tap';
import { startTestCairn, type TestCairn } from '../support/cairn.js';

/** Black-box tests of the memory service's endpoints over HTTP (embedded stores, local embedder). */

const app = await startTestCairn();
t.teardown(() => app.stop());

let n = 0;
/** A fresh scope per test, so tests do not see each other's memories. */
const freshScope = () => ({ agent: `agent-${++n}`, user: `user.${n}` });
type Scope = { agent: string; user: string };

async function call(a: TestCairn, method: string, path: string, json?: unknown, headers: Record<string, string> = {}) {
  const res = await a.memory(path, { method, json, headers });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
}
const post = (path: string, json: unknown) => call(app, 'POST', path, json);
const store = (scope: Scope, text: string, extra: Record<string, unknown> = {}) => post('/v1/memories', { scope, text, ...extra });
const search = (scope: Scope, query: string, extra: Record<string, unknown> = {}) => post('/v1/search', { scope, query, ...extra });
const q = (scope: Scope, more = '') => `agent=${encodeURIComponent(scope.agent)}&user=${encodeURIComponent(scope.user)}${more}`;
const ids = (results: Array<{ id: string }>) => results.map((r) => r.id);

t.test('GET /healthz answers 200 without credentials', async (t) => {
  const res = await call(app, 'GET', '/healthz');
  t.equal(res.status, 200);
  t.same(res.body, { status: 'ok' });
});

t.test('POST /v1/memories stores, derives the id from the trimmed text, and deduplicates', async (t) => {
  const scope = freshScope();
  const first = await store(scope, '  I love green tea \n', { session: 'chat-1' });
  t.equal(first.status, 200);
  t.match(first.body, { id: /^m_[0-9a-f]{32}$/, text: 'I love green tea', session: 'chat-1' });
  t.equal(first.body.created_at, first.body.updated_at);
  t.same(Object.keys(first.body).sort(), ['created_at', 'id', 'session', 'text', 'updated_at']);
  const position = Number(first.headers.get('x-event-position'));
  t.ok(position > 0, 'X-Event-Position header');

  const again = await store(scope, 'I love green tea', { session: 'chat-1' });
  t.equal(again.status, 200);
  t.same(again.body, first.body, 'same text → same memory, unchanged');
  t.equal(Number(again.headers.get('x-event-position')), position, 'nothing appended');

  const exported = await call(app, 'GET', `/v1/export?${q(scope)}`);
  t.equal(exported.body.memories.length, 1, 'no duplicate');

  const nfd = await store(scope, 'cafe\u0301 au lait');
  const nfc = await store(scope, 'caf\u00e9 au lait');
  t.equal(nfd.body.id, nfc.body.id, 'canonically equal texts are one memory');
  t.equal(nfc.body.text, 'caf\u00e9 au lait');
});

t.test('POST /v1/memories without id of a text already held: an omitted session keeps the label, a given one replaces it', async (t) => {
  const scope = freshScope();
  const first = await store(scope, 'Sam keeps bees', { session: 'call-1' });
  const head = await app.events.headPosition();
  const omitted = await store(scope, 'Sam keeps bees');
  t.same(omitted.body, first.body, 'unchanged: session and updated_at kept');
  t.equal(await app.events.headPosition(), head, 'nothing appended');
  t.same((await call(app, 'GET', `/v1/export?${q(scope)}`)).body.memories.map((m: { session: string }) => m.session), ['call-1']);

  const relabelled = await store(scope, 'Sam keeps bees', { session: 'call-2' });
  t.equal(relabelled.body.session, 'call-2', 'another session: the memory moves to it');
  t.ok(relabelled.body.updated_at > first.body.updated_at);
  const cleared = await store(scope, 'Sam keeps bees', { session: null });
  t.equal(cleared.body.session, null, 'session null removes the label');
  t.same((await store(scope, 'Sam keeps bees')).body, cleared.body, 'and an omitted one keeps that too');

  const byId = await store(scope, 'Sam keeps wasps', { id: 'hive', session: 'call-3' });
  t.equal(byId.body.session, 'call-3');
  t.equal((await store(scope, 'Sam keeps wasps', { id: 'hive' })).body.session, null, 'by id: exactly what is given, an omitted session is none');
});

t.test('store with an id updates that memory inside the scope', async (t) => {
  const scope = freshScope();
  const created = await store(scope, 'my favourite colour is blue', { id: 'colour' });
  t.equal(created.status, 200);
  t.equal(created.body.id, 'colour');
  const updated = await store(scope, 'my favourite colour is green', { id: 'colour', session: 's2' });
  t.equal(updated.status, 200);
  t.match(updated.body, { id: 'colour', text: 'my favourite colour is green', session: 's2', created_at: created.body.created_at });
  t.ok(updated.body.updated_at >= created.body.updated_at);
  t.ok(Number(updated.headers.get('x-event-position')) > Number(created.headers.get('x-event-position')));

  t.same(ids((await search(scope, 'blue')).body.results), [], 'the old text is no longer found');
  t.same(ids((await search(scope, 'green')).body.results), ['colour']);

  // The same id in another scope is another memory.
  const other = freshScope();
  await store(other, 'my favourite colour is red', { id: 'colour' });
  t.same((await search(scope, 'colour')).body.results.map((r: { text: string }) => r.text), ['my favourite colour is green']);
  t.same((await search(other, 'colour')).body.results.map((r: { text: string }) => r.text), ['my favourite colour is red']);
});

t.test('storing the old text again does not undo a correction by id; one memory per text', async (t) => {
  const scope = freshScope();
  const porto = await store(scope, 'Sam lives in Porto');
  const lisbon = await store(scope, 'Sam lives in Lisbon', { id: porto.body.id });
  t.match(lisbon.body, { id: porto.body.id, text: 'Sam lives in Lisbon' }, 'corrected by id');
  const again = await store(scope, 'Sam lives in Porto');
  t.equal(again.status, 200);
  t.not(again.body.id, porto.body.id, 'a new memory, not the corrected one overwritten');
  t.equal(again.body.text, 'Sam lives in Porto');
  t.match(again.body.id, /^m_[0-9a-f]{32}$/);
  const third = await store(scope, 'Sam lives in Porto');
  t.equal(third.body.id, again.body.id, 'and storing it once more is that memory');
  t.equal(third.headers.get('x-event-position'), again.headers.get('x-event-position'), 'nothing appended');
  const exported = (await call(app, 'GET', `/v1/export?${q(scope)}`)).body;
  t.same(exported.memories.map((m: { id: string; text: string }) => [m.id, m.text]).sort(),
    [[porto.body.id, 'Sam lives in Lisbon'], [again.body.id, 'Sam lives in Porto']].sort());

  // A text held by a memory with a supplied id is that memory, also for a store without id.
  await store(scope, 'vegetarian since 2019', { id: 'diet' });
  const plain = await store(scope, 'vegetarian since 2019');
  t.equal(plain.body.id, 'diet');
});

t.test('search modes: lexical (default), semantic and hybrid', async (t) => {
  const scope = freshScope();
  const tea = (await store(scope, 'I drink green tea every morning')).body.id;
  const coffee = (await store(scope, 'Coffee keeps me awake at night')).body.id;
  const dog = (await store(scope, 'My dog Rex loves running in the park')).body.id;
  const runner = (await store(scope, 'She is a marathon runner')).body.id;

  const lexical = await search(scope, 'GREEN TEA');
  t.equal(lexical.status, 200);
  t.same(ids(lexical.body.results), [tea], 'lexical returns only matching memories, case-insensitively');
  t.same(Object.keys(lexical.body.results[0]).sort(), ['created_at', 'id', 'score', 'session', 'text', 'updated_at']);
  t.ok(lexical.body.results[0].score > 0);
  t.same(ids((await search(scope, 'green tea', { mode: 'lexical' })).body.results), [tea]);

  const semantic = await search(scope, 'runners', { mode: 'semantic', limit: 4 });
  t.equal(semantic.status, 200);
  t.equal(semantic.body.results.length, 4, 'semantic ranks every memory (no abstention threshold)');
  t.equal(semantic.body.results[0].id, runner, 'sub-word overlap (runners/runner) ranks first');
  t.ok(semantic.body.results[0].score > 2 * semantic.body.results[1].score, 'well ahead of texts sharing no word or stem');
  t.same(ids((await search(scope, 'runners', { mode: 'lexical' })).body.results), [], 'lexical needs the exact word');
  const cafe = (await store(scope, 'Meet me at the Café Müller')).body.id;
  t.same(ids((await search(scope, 'cafe muller', { mode: 'lexical' })).body.results), [cafe], 'lexical folds accents: "cafe muller" finds "Café Müller"');
  const scores = semantic.body.results.map((r: { score: number }) => r.score);
  t.same(scores, [...scores].sort((a, b) => b - a), 'best first');

  const hybrid = await search(scope, 'dog running', { mode: 'hybrid', limit: 10 });
  t.equal(hybrid.status, 200);
  t.equal(hybrid.body.results[0].id, dog);
  t.equal(hybrid.body.results[0].score, 1 / 61 + 1 / 61, 'rank 1 in both lists: 1/(60+1) twice');
  for (const r of hybrid.body.results.slice(1)) t.ok(r.score <= 1 / 62 + 1 / 62 + 1e-12);
  t.ok(ids(hybrid.body.results).includes(coffee), 'hybrid includes vector-only hits');
});

t.test('search limit: default 5, at most limit results', async (t) => {
  const scope = freshScope();
  for (let i = 0; i < 7; i++) await store(scope, `note number ${i} about apples`);
  t.equal((await search(scope, 'apples')).body.results.length, 5);
  t.equal((await search(scope, 'apples', { limit: 1 })).body.results.length, 1);
  t.equal((await search(scope, 'apples', { limit: 100 })).body.results.length, 7);
  t.same((await search(scope, 'bananas')).body.results, []);
  t.same((await search(freshScope(), 'apples')).body.results, [], 'unknown scope: no results');
});

t.test('reads are consistent: a search right after a store (no waiting) sees it', async (t) => {
  const scope = freshScope();
  for (let i = 0; i < 20; i++) {
    const word = `zebra${i}`;
    const stored = await store(scope, `memory with ${word}`);
    t.equal(stored.status, 200);
    const [lexical, hybrid] = await Promise.all([search(scope, word), search(scope, word, { mode: 'hybrid', limit: 1 })]);
    t.same(ids(lexical.body.results), [stored.body.id], `lexical sees store ${i}`);
    t.same(ids(hybrid.body.results), [stored.body.id], `hybrid sees store ${i}`);
  }
  // Concurrent stores then one search: all visible.
  const many = await Promise.all(Array.from({ length: 30 }, (_, i) => store(scope, `parallel giraffe ${i}`)));
  t.ok(many.every((r) => r.status === 200));
  t.equal((await search(scope, 'giraffe', { limit: 100 })).body.results.length, 30);
});

t.test('X-Min-Position and min_position: a read waits for that position, bounded by CONSISTENCY_TIMEOUT_MS', async (t) => {
  // Reads wait for the log's head anyway: only a position past it shows that the token is honoured.
  const scope = freshScope();
  const position = Number((await store(scope, 'consistency token test')).headers.get('x-event-position'));
  const searchWith = (a: TestCairn, headers: Record<string, string>, query = '') => call(a, 'POST', `/v1/search${query}`, { scope, query: 'token' }, headers);

  // On the file's app (5 s, the default): a fresh app's projection thread, at a lower CPU priority, can take longer than
  // a short timeout to apply its first write on a loaded machine (1.5 s was not always enough in memory-providers).
  const reached = await searchWith(app, { 'X-Min-Position': String(position) });
  t.equal(reached.status, 200);
  t.equal(reached.body.results.length, 1, 'sees the write at that position');
  // A short timeout for the positions it cannot reach.
  const quick = await startTestCairn({ CONSISTENCY_TIMEOUT_MS: '300' });
  t.teardown(() => quick.stop());
  const far = (await quick.events.headPosition()) + 1000;
  for (const [how, res] of [
    ['header', await searchWith(quick, { 'X-Min-Position': String(far) })],
    ['query', await searchWith(quick, {}, `?min_position=${far}`)],
  ] as const) {
    t.equal(res.status, 503, `${how}: a position the read model cannot reach in time`);
    t.match(res.headers.get('content-type'), /^application\/problem\+json/, `${how}: problem+json`);
    t.equal(res.headers.get('retry-after'), '1', `${how}: Retry-After`);
  }
});

t.test('PUT /v1/personality and POST /v1/context', async (t) => {
  const scope = freshScope();
  await store(scope, 'The user plays the violin');
  const none = await post('/v1/context', { scope, query: 'violin' });
  t.equal(none.status, 200);
  t.equal(none.body.personality, '', 'no personality set: empty string');
  t.equal(none.body.memories.length, 1);

  const set = await call(app, 'PUT', '/v1/personality', { scope, personality: 'Warm, curious and a little dry.' });
  t.equal(set.status, 200);
  t.match(set.body, { scope, personality: 'Warm, curious and a little dry.', updated_at: String });
  const position = set.headers.get('x-event-position');
  t.ok(position);
  const same = await call(app, 'PUT', '/v1/personality', { scope, personality: 'Warm, curious and a little dry.' });
  t.same(same.body, set.body, 'unchanged personality: same acknowledgement');
  t.equal(same.headers.get('x-event-position'), position, 'nothing appended');

  const context = await post('/v1/context', { scope, query: 'violin', mode: 'hybrid', limit: 3 });
  t.equal(context.status, 200);
  t.same(Object.keys(context.body).sort(), ['memories', 'personality']);
  t.equal(context.body.personality, 'Warm, curious and a little dry.');
  t.match(context.body.memories, [{ text: 'The user plays the violin', score: Number }]);

  await call(app, 'PUT', '/v1/personality', { scope, personality: 'Blunt.' });
  t.equal((await post('/v1/context', { scope, query: 'violin' })).body.personality, 'Blunt.', 'read right after the write');
  t.equal((await post('/v1/context', { scope: freshScope(), query: 'violin' })).body.personality, '', 'personality is per scope');
});

t.test('DELETE /v1/memories deletes one live memory; it never reappears', async (t) => {
  const scope = freshScope();
  const keep = await store(scope, 'keep this walrus');
  const gone = await store(scope, 'delete this walrus');
  const del = await call(app, 'DELETE', `/v1/memories?${q(scope, `&id=${gone.body.id}`)}`);
  t.equal(del.status, 200);
  t.same(del.body, { id: gone.body.id, deleted: 1 });
  t.ok(Number(del.headers.get('x-event-position')) > Number(gone.headers.get('x-event-position')));

  for (const mode of ['lexical', 'semantic', 'hybrid']) {
    t.same(ids((await search(scope, 'walrus', { mode, limit: 10 })).body.results), [keep.body.id], `${mode} search`);
  }
  t.same(ids((await post('/v1/context', { scope, query: 'walrus', mode: 'hybrid' })).body.memories), [keep.body.id], 'context');
  t.same(ids((await call(app, 'GET', `/v1/export?${q(scope)}`)).body.memories), [keep.body.id], 'export');

  const again = await call(app, 'DELETE', `/v1/memories?${q(scope, `&id=${gone.body.id}`)}`);
  t.equal(again.status, 404, 'already deleted → 404');
  t.match(again.headers.get('content-type'), /^application\/problem\+json/);
  t.equal((await call(app, 'DELETE', `/v1/memories?${q(scope, '&id=never-stored')}`)).status, 404);
  t.equal((await call(app, 'DELETE', `/v1/memories?${q(freshScope(), `&id=${keep.body.id}`)}`)).status, 404, 'another scope cannot delete it');

  const restored = await store(scope, 'delete this walrus');
  t.equal(restored.body.id, gone.body.id, 'stored again with its id');
  t.ok(restored.body.created_at >= gone.body.created_at, 'a new memory: created again');
  t.equal(restored.body.updated_at, restored.body.created_at);
  t.equal((await search(scope, 'walrus', { limit: 10 })).body.results.length, 2);
});

t.test('DELETE /v1/scope deletes memories, indexes and personality of one scope only', async (t) => {
  const scope = freshScope();
  const other = freshScope();
  await store(scope, 'otter one');
  await store(scope, 'otter two');
  await call(app, 'PUT', '/v1/personality', { scope, personality: 'Playful.' });
  await store(other, 'otter elsewhere');

  const del = await call(app, 'DELETE', `/v1/scope?${q(scope)}`);
  t.equal(del.status, 200);
  t.same(del.body, { scope, deleted: 2, personality_deleted: true });
  for (const mode of ['lexical', 'semantic', 'hybrid']) t.same((await search(scope, 'otter', { mode })).body.results, [], mode);
  t.same((await call(app, 'GET', `/v1/export?${q(scope)}`)).body, { scope, personality: '', memories: [] });
  t.equal((await post('/v1/context', { scope, query: 'otter' })).body.personality, '');
  t.equal((await search(other, 'otter')).body.results.length, 1, 'the other scope is untouched');

  const empty = await call(app, 'DELETE', `/v1/scope?${q(scope)}`);
  t.equal(empty.status, 200);
  t.same(empty.body, { scope, deleted: 0, personality_deleted: false }, 'empty scope: 200, nothing deleted');
  const unknown = freshScope();
  t.same((await call(app, 'DELETE', `/v1/scope?${q(unknown)}`)).body, { scope: unknown, deleted: 0, personality_deleted: false });

  await store(scope, 'otter after the wipe');
  t.same((await search(scope, 'otter', { limit: 10 })).body.results.map((r: { text: string }) => r.text), ['otter after the wipe'], 'the scope can be used again');
});

t.test('GET /v1/export: live memories with vectors, and the personality', async (t) => {
  const scope = freshScope();
  const a = await store(scope, 'first memory', { session: 's' });
  const b = await store(scope, 'second memory');
  await call(app, 'PUT', '/v1/personality', { scope, personality: 'Calm.' });
  const res = await call(app, 'GET', `/v1/export?${q(scope)}`);
  t.equal(res.status, 200);
  t.same(res.body.scope, scope);
  t.equal(res.body.personality, 'Calm.');
  t.same(ids(res.body.memories), [a.body.id, b.body.id], 'oldest first');
  const m = res.body.memories[0];
  t.match(m, { id: a.body.id, text: 'first memory', session: 's', created_at: a.body.created_at, updated_at: a.body.updated_at, vector_model: 'local-hash-256-v4' });
  t.equal(m.vector.length, 256);
  const norm = Math.sqrt(m.vector.reduce((s: number, x: number) => s + x * x, 0));
  t.ok(Math.abs(norm - 1) < 1e-4, 'unit vector');
});

t.test('scopes are isolated, including ids that look alike across the separator', async (t) => {
  const s1 = { agent: 'a.b', user: 'c' };
  const s2 = { agent: 'a', user: 'b.c' };
  await store(s1, 'pelican in scope one');
  await store(s2, 'pelican in scope two');
  t.same((await search(s1, 'pelican')).body.results.map((r: { text: string }) => r.text), ['pelican in scope one']);
  t.same((await search(s2, 'pelican')).body.results.map((r: { text: string }) => r.text), ['pelican in scope two']);
  t.same((await call(app, 'GET', `/v1/export?${q(s1)}`)).body.memories.map((r: { text: string }) => r.text), ['pelican in scope one']);
  t.equal((await call(app, 'DELETE', `/v1/scope?${q(s2)}`)).body.deleted, 1);
  t.equal((await search(s1, 'pelican')).body.results.length, 1);
});

t.test('OpenAPI lists every memory operation with its schemas', async (t) => {
  const doc = (await call(app, 'GET', '/docs/openapi.json')).body;
  const ops = Object.entries(doc.paths as Record<string, Record<string, { operationId: string }>>)
    .flatMap(([path, methods]) => Object.entries(methods).map(([m, op]) => `${m.toUpperCase()} ${path} ${op.operationId}`)).sort();
  t.same(ops, [
    'DELETE /v1/memories deleteMemory', 'DELETE /v1/scope deleteScope',
    'GET /healthz liveness', 'GET /readyz readiness', 'GET /v1/export exportScope',
    'POST /v1/chat chat', 'POST /v1/context buildContext', 'POST /v1/ingest ingestFacts', 'POST /v1/memories storeMemory',
    'POST /v1/search searchMemories', 'PUT /v1/personality setPersonality',
  ]);
  t.match(doc.paths['/v1/search'].post.requestBody.content['application/json'].schema.properties.limit, { anyOf: [{ type: 'integer', minimum: 1, maximum: 100 }, { type: 'null' }], default: 5 });
  t.ok(doc.paths['/v1/search'].post.responses['200'].content['application/json'].schema.properties.results);
  // Commands carry X-Event-Position and take Idempotency-Key; the POSTs that only read do not.
  const params = (op: { parameters: Array<{ name: string }> }) => op.parameters.map((p) => p.name);
  for (const query of ['/v1/search', '/v1/context', '/v1/chat']) {
    t.notOk(params(doc.paths[query].post).includes('Idempotency-Key'), `${query}: no Idempotency-Key`);
    t.notOk(doc.paths[query].post.responses['200'].headers, `${query}: no X-Event-Position`);
    t.ok(params(doc.paths[query].post).includes('X-Min-Position'), `${query}: X-Min-Position`);
  }
  // The consistency token's documented pattern is the one the server enforces, at its edge: 16 digits.
  const tokens = doc.paths['/v1/search'].post.parameters.filter((p: { name: string }) => p.name === 'X-Min-Position' || p.name === 'min_position');
  t.same(tokens.map((p: { schema: { pattern: string } }) => p.schema.pattern), ['^[0-9]{1,16}$', '^[0-9]{1,16}$']);
  const documented = new RegExp(tokens[0].schema.pattern);
  for (const token of ['0'.repeat(15) + '1', '0'.repeat(16) + '1']) {
    const valid = documented.test(token);
    t.equal(valid, token.length <= 16, `${token.length} digits: ${valid ? 'documented valid' : 'documented invalid'}`);
    for (const [location, res] of [
      ['header.X-Min-Position', await call(app, 'POST', '/v1/search', { scope: freshScope(), query: 'x' }, { 'X-Min-Position': token })],
      ['query.min_position', await call(app, 'POST', `/v1/search?min_position=${token}`, { scope: freshScope(), query: 'x' })],
    ] as const) {
      t.equal(res.status, valid ? 200 : 400, `${location}, ${token.length} digits: as documented`);
      if (!valid) t.match(res.body, { errors: [{ location }] }, `${location}: the problem names it`);
    }
  }
  t.ok(params(doc.paths['/v1/memories'].post).includes('Idempotency-Key'));
  t.ok(doc.paths['/v1/memories'].post.responses['200'].headers['X-Event-Position']);
  const searched = await search(freshScope(), 'anything');
  t.equal(searched.headers.get('x-event-position'), null, 'and indeed a search answers without one');
});

t.test('the OpenAPI document gives mode and limit the spec\'s defaults, and they are the ones applied', async (t) => {
  const doc = (await call(app, 'GET', '/docs/openapi.json')).body;
  const scope = freshScope();
  for (let i = 1; i <= 7; i++) await store(scope, `the lantern number ${i} ${'glows '.repeat(i)}`);
  for (const path of ['/v1/search', '/v1/context', '/v1/chat']) {
    const { mode, limit } = doc.paths[path].post.requestBody.content['application/json'].schema.properties;
    t.same([mode.default, limit.default], ['lexical', 5], `${path}: the spec's defaults, machine-readable`);
  }
  const { mode, limit } = doc.paths['/v1/search'].post.requestBody.content['application/json'].schema.properties;
  const omitted = await search(scope, 'lantern glows');
  const explicit = await search(scope, 'lantern glows', { mode: mode.default, limit: limit.default });
  t.equal(omitted.body.results.length, limit.default, 'seven memories match: the documented default limit is applied');
  t.same(omitted.body, explicit.body, 'omitting mode and limit is sending their documented defaults');
  t.not(omitted.body.results[0].score, (await search(scope, 'lantern glows', { mode: 'semantic', limit: limit.default })).body.results[0].score, 'and another mode scores differently');
});
