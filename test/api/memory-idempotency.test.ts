import { rmSync } from 'node:fs';
import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { startOpenAiServer } from '../support/openai-server.js';

/**
 * Repeats with the same Idempotency-Key: a repeat writes nothing and answers what the first request did,
 * also after later changes (README "Idempotency"; the memory service's decisions in its section).
 */

const server = await startOpenAiServer();
t.teardown(() => server.close());
const app = await startTestCairn({ LLM_BASE_URL: server.url, LLM_CHAT_MODEL: 'test-chat-model' });
t.teardown(() => app.stop());

let n = 0;
const freshScope = () => ({ agent: 'idem', user: `u${++n}` });
type Scope = { agent: string; user: string };
const q = (scope: Scope, more = '') => `agent=${scope.agent}&user=${scope.user}${more}`;

async function call(method: string, path: string, options: { json?: unknown; key?: string } = {}) {
  const res = await app.memory(path, { method, json: options.json, headers: options.key ? { 'Idempotency-Key': options.key } : {} });
  const text = await res.text();
  return { status: res.status, position: res.headers.get('x-event-position'), body: text ? JSON.parse(text) : undefined };
}
const store = (scope: Scope, text: string, extra: Record<string, unknown> = {}) => call('POST', '/v1/memories', { json: { scope, text, ...extra } });
const exported = async (scope: Scope) => (await call('GET', `/v1/export?${q(scope)}`)).body.memories.map((m: { text: string }) => m.text);
const facts = (...list: string[]) => JSON.stringify({ facts: list });

t.test('DELETE /v1/memories repeated with the same key answers the first deletion and writes nothing', async (t) => {
  const scope = freshScope();
  const memory = await store(scope, 'a heron by the canal');
  const path = `/v1/memories?${q(scope, `&id=${memory.body.id}`)}`;
  const first = await call('DELETE', path, { key: 'del-1' });
  t.equal(first.status, 200);
  t.same(first.body, { id: memory.body.id, deleted: 1 });
  const head = await app.events.headPosition();

  const repeat = await call('DELETE', path, { key: 'del-1' });
  t.equal(repeat.status, 200, 'a repeat is not a 404');
  t.same(repeat.body, first.body, 'same body');
  t.equal(repeat.position, first.position, 'same X-Event-Position');
  t.equal(await app.events.headPosition(), head, 'nothing written');

  await store(scope, 'a kingfisher on the railing');
  const restored = await store(scope, 'a heron by the canal');
  t.equal(restored.body.id, memory.body.id, 'the memory is stored again under its id');
  const later = await call('DELETE', path, { key: 'del-1' });
  t.equal(later.status, 200, 'after later changes too');
  t.same(later.body, first.body);
  t.equal(later.position, first.position);
  t.same((await exported(scope)).sort(), ['a heron by the canal', 'a kingfisher on the railing'], 'the repeat deleted nothing');

  t.equal((await call('DELETE', `/v1/memories?${q(scope, '&id=never-stored')}`, { key: 'del-1' })).status, 404, 'the same key with another id is another request');
  const again = await call('DELETE', path, { key: 'del-2' });
  t.equal(again.status, 200, 'another key deletes the memory stored again');
  t.not(again.position, first.position);
  t.equal((await call('DELETE', path)).status, 404, 'without a key, deleting a deleted memory is 404');
  t.equal((await call('DELETE', path, { key: 'del-1' })).position, first.position, 'the first key still answers the first deletion');
});

t.test('DELETE /v1/scope repeated with the same key answers the first deletion and writes nothing', async (t) => {
  const scope = freshScope();
  await store(scope, 'otter one');
  await store(scope, 'otter two');
  await call('PUT', '/v1/personality', { json: { scope, personality: 'Playful.' } });
  const first = await call('DELETE', `/v1/scope?${q(scope)}`, { key: 'wipe-1' });
  t.same(first.body, { scope, deleted: 2, personality_deleted: true });
  const head = await app.events.headPosition();

  const repeat = await call('DELETE', `/v1/scope?${q(scope)}`, { key: 'wipe-1' });
  t.equal(repeat.status, 200);
  t.same(repeat.body, first.body, 'same body, not "deleted: 0"');
  t.equal(repeat.position, first.position, 'same X-Event-Position');
  t.equal(await app.events.headPosition(), head, 'nothing written');

  await store(scope, 'otter after the wipe');
  const later = await call('DELETE', `/v1/scope?${q(scope)}`, { key: 'wipe-1' });
  t.same(later.body, first.body, 'after later changes too');
  t.equal(later.position, first.position);
  t.same(await exported(scope), ['otter after the wipe'], 'the repeat deleted nothing');
  t.same((await call('DELETE', `/v1/scope?${q(scope)}`, { key: 'wipe-2' })).body, { scope, deleted: 1, personality_deleted: false }, 'another key is a new deletion');
});

t.test('POST /v1/ingest repeated with the same key answers the first ingest\'s facts without asking the provider again', async (t) => {
  const scope = freshScope();
  const body = { scope, text: 'I moved to Lisbon and I play the cello.', session: 'call-1' };
  server.chat.push(facts('The user lives in Lisbon', 'The user plays the cello'));
  const calls = server.chatRequests().length;
  const first = await call('POST', '/v1/ingest', { json: body, key: 'ingest-1' });
  t.equal(first.status, 200);
  t.equal(first.body.facts.length, 2);
  t.equal(server.chatRequests().length, calls + 1);
  const head = await app.events.headPosition();

  server.chat.push(facts('Something else entirely'));
  const repeat = await call('POST', '/v1/ingest', { json: body, key: 'ingest-1' });
  t.equal(repeat.status, 200);
  t.same(repeat.body, first.body, 'the first ingest\'s facts, as stored');
  t.equal(repeat.position, first.position, 'same X-Event-Position while the scope has not changed');
  t.equal(server.chatRequests().length, calls + 1, 'the provider is not asked again');
  t.equal(await app.events.headPosition(), head, 'nothing written');

  await call('DELETE', `/v1/memories?${q(scope, `&id=${first.body.facts[1].id}`)}`);
  const later = await call('POST', '/v1/ingest', { json: body, key: 'ingest-1' });
  t.same(later.body, { facts: [first.body.facts[0]] }, 'after later changes: the first ingest\'s memories that are still live');
  t.ok(Number(later.position) > Number(first.position), 'and the scope\'s position now');
  t.equal(server.chatRequests().length, calls + 1, 'still without asking the provider');

  const other = await call('POST', '/v1/ingest', { json: { ...body, text: 'Another conversation.' }, key: 'ingest-1' });
  t.same(other.body.facts.map((f: { text: string }) => f.text), ['Something else entirely'], 'the same key with another text is another ingest');
  t.equal(server.chatRequests().length, calls + 2);
  server.chat.push(facts('The user lives in Porto'));
  const otherSession = await call('POST', '/v1/ingest', { json: { ...body, session: 'call-2' }, key: 'ingest-1' });
  t.same(otherSession.body.facts.map((f: { text: string }) => f.text), ['The user lives in Porto'], '... and so is another session');
  t.equal(server.chatRequests().length, calls + 3);

  server.chat.push(facts('The user lives in Lisbon'), facts('The user lives in Lisbon'));
  await call('POST', '/v1/ingest', { json: body });
  await call('POST', '/v1/ingest', { json: body });
  t.equal(server.chatRequests().length, calls + 5, 'without a key every ingest asks the provider');

  const elsewhere = freshScope();
  server.chat.push(facts('The user likes figs'));
  const inOtherScope = await call('POST', '/v1/ingest', { json: { ...body, scope: elsewhere }, key: 'ingest-1' });
  t.same(inOtherScope.body.facts.map((f: { text: string }) => f.text), ['The user likes figs'], 'a key is remembered per scope');
});

t.test('an ingest with a key that stored nothing is remembered too: a repeat does not ask the provider again', async (t) => {
  const scope = freshScope();
  server.chat.push(facts());
  const first = await call('POST', '/v1/ingest', { json: { scope, text: 'hello' }, key: 'nothing-1' });
  t.same(first.body, { facts: [] });
  const calls = server.chatRequests().length;
  const head = await app.events.headPosition();
  t.equal(first.position, String(head), 'recorded (FactsExtracted of no memories)');
  server.chat.push(facts('The user says hello'));
  const repeat = await call('POST', '/v1/ingest', { json: { scope, text: 'hello' }, key: 'nothing-1' });
  t.same(repeat.body, { facts: [] }, 'the first answer');
  t.equal(repeat.position, first.position);
  t.equal(server.chatRequests().length, calls, 'the provider is not asked again');
  t.equal(await app.events.headPosition(), head, 'nothing written');
  const unkeyed = await call('POST', '/v1/ingest', { json: { scope, text: 'hello again' } });
  t.same(unkeyed.body.facts.map((f: { text: string }) => f.text), ['The user says hello'], 'without a key, each ingest asks the provider');
  server.chat.push(facts());
  const before = await app.events.headPosition();
  t.same((await call('POST', '/v1/ingest', { json: { scope, text: 'bye' } })).body, { facts: [] });
  t.equal(await app.events.headPosition(), before, 'and one that stores nothing writes nothing');
});

t.test('the scope remembers its last 64 deletions and ingests sent with a key', async (t) => {
  const scope = freshScope();
  server.chat.push(facts('The user keeps bees'));
  const ingested = await call('POST', '/v1/ingest', { json: { scope, text: 'I keep bees.' }, key: 'bulk-ingest' });
  t.equal(ingested.status, 200);
  const ids: string[] = [];
  for (let i = 0; i < 64; i++) ids.push((await store(scope, `memory ${i}`)).body.id);
  for (let i = 0; i < 63; i++) t.equal((await call('DELETE', `/v1/memories?${q(scope, `&id=${ids[i]}`)}`, { key: `bulk-${i}` })).status, 200);
  const calls = server.chatRequests().length;
  t.same((await call('POST', '/v1/ingest', { json: { scope, text: 'I keep bees.' }, key: 'bulk-ingest' })).body, ingested.body, 'the 64th newest: remembered');
  t.equal(server.chatRequests().length, calls, 'the provider is not asked');
  t.equal((await call('DELETE', `/v1/memories?${q(scope, `&id=${ids[63]}`)}`, { key: 'bulk-63' })).status, 200);
  server.chat.push(facts('The user keeps bees'));
  await call('POST', '/v1/ingest', { json: { scope, text: 'I keep bees.' }, key: 'bulk-ingest' });
  t.equal(server.chatRequests().length, calls + 1, 'the 65th newest: forgotten, the provider is asked again');
  // A forgotten deletion is decided again, but with the first one's event ids: the log answers it.
  const head = await app.events.headPosition();
  const old = await call('DELETE', `/v1/memories?${q(scope, `&id=${ids[0]}`)}`, { key: 'bulk-0' });
  t.same([old.status, old.body], [200, { id: ids[0], deleted: 1 }], 'a forgotten deletion still answers as the first did');
  t.equal(await app.events.headPosition(), head, 'and writes nothing');
});

t.test('a forgotten key repeated on a changed scope answers what was written, never a deletion that did not happen', async (t) => {
  const scope = freshScope();
  await store(scope, 'wren at dawn');
  const first = await call('DELETE', `/v1/scope?${q(scope)}`, { key: 'old-wipe' });
  t.same(first.body, { scope, deleted: 1, personality_deleted: false });
  // 64 later keyed deletions push the first out of what the scope remembers.
  for (let i = 0; i < 64; i++) {
    await store(scope, `sparrow ${i}`);
    t.same((await call('DELETE', `/v1/scope?${q(scope)}`, { key: `later-wipe-${i}` })).body.deleted, 1);
  }
  await store(scope, 'robin at noon');
  await store(scope, 'owl at night');
  const head = await app.events.headPosition();
  // Decided again on today's scope it would delete 2, but its event ids are the first deletion's: the
  // log holds that one already, so nothing is written, and the answer is the deletion that was.
  const repeat = await call('DELETE', `/v1/scope?${q(scope)}`, { key: 'old-wipe' });
  t.equal(repeat.status, 200);
  t.same(repeat.body, first.body, 'the first deletion, not "deleted: 2"');
  t.equal(repeat.position, first.position);
  t.equal(await app.events.headPosition(), head, 'nothing written');
  t.same((await exported(scope)).sort(), ['owl at night', 'robin at noon'], 'and nothing deleted');
});

t.test('POST /v1/memories and PUT /v1/personality repeated after a later change answer what the first one wrote', async (t) => {
  const scope = freshScope();
  const first = await call('POST', '/v1/memories', { json: { scope, text: 'a cormorant drying its wings', session: 's1' }, key: 'store-1' });
  t.equal(first.status, 200);
  await new Promise((r) => setTimeout(r, 5)); // so that a time taken now would differ from the first one's
  const corrected = await store(scope, 'a shag drying its wings', { id: first.body.id });
  t.equal(corrected.status, 200);
  const head = await app.events.headPosition();
  const repeat = await call('POST', '/v1/memories', { json: { scope, text: 'a cormorant drying its wings', session: 's1' }, key: 'store-1' });
  t.equal(repeat.status, 200);
  t.same(repeat.body, first.body, 'the first one\'s body, its times included');
  t.equal(repeat.position, first.position);
  t.equal(await app.events.headPosition(), head, 'nothing written');
  t.same(await exported(scope), ['a shag drying its wings'], 'the later correction stands');

  const set = await call('PUT', '/v1/personality', { json: { scope, personality: 'Calm.' }, key: 'persona-1' });
  await new Promise((r) => setTimeout(r, 5));
  await call('PUT', '/v1/personality', { json: { scope, personality: 'Brisk.' } });
  const again = await call('PUT', '/v1/personality', { json: { scope, personality: 'Calm.' }, key: 'persona-1' });
  t.same(again.body, set.body, 'the first one\'s body, its updated_at included');
  t.equal(again.position, set.position);
  t.equal((await call('GET', `/v1/export?${q(scope)}`)).body.personality, 'Brisk.', 'the later change stands');
});

t.test('remembered across a restart (the state is folded from the log)', async (t) => {
  const durable = await startTestCairn({ LLM_BASE_URL: server.url });
  const scope = freshScope();
  const memory = (await durable.memory('/v1/memories', { method: 'POST', json: { scope, text: 'a durable heron' } }).then((r) => r.json())) as { id: string };
  const path = `/v1/memories?${q(scope, `&id=${memory.id}`)}`;
  const first = await durable.memory(path, { method: 'DELETE', headers: { 'Idempotency-Key': 'restart-1' } });
  t.equal(first.status, 200);
  await durable.stop({ keepData: true });
  const again = await startTestCairn({ LLM_BASE_URL: server.url }, { dataDir: durable.dataDir });
  t.teardown(async () => {
    await again.stop();
    rmSync(durable.dataDir, { recursive: true, force: true });
  });
  const repeat = await again.memory(path, { method: 'DELETE', headers: { 'Idempotency-Key': 'restart-1' } });
  t.equal(repeat.status, 200);
  t.equal(repeat.headers.get('x-event-position'), first.headers.get('x-event-position'));
});
