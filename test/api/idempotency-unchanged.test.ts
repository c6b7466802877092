import { rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { configStream } from '../../domain/config/decider.js';
import { memoryStream } from '../../domain/memory/decider.js';
import { bearer, projectWithKey, startTestCairn, type TestCairn } from '../support/cairn.js';
import { startOpenAiServer } from '../support/openai-server.js';

/**
 * A request sent with an Idempotency-Key that was accepted but changed nothing (a value already so, an
 * empty scope, a text already held) or was refused (404) is remembered like one that wrote: its repeat
 * writes nothing and answers what the first one did, also after later changes (README "Idempotency",
 * and *Repeats with Idempotency-Key* in the memory service section). Without a key, such a request
 * still writes nothing.
 */

const server = await startOpenAiServer();
t.teardown(() => server.close());
const app = await startTestCairn({ LLM_BASE_URL: server.url, LLM_CHAT_MODEL: 'test-chat-model' });
let stopped = false;
t.teardown(() => (stopped ? undefined : app.stop()));
const { projectId, key } = await projectWithKey(app);
const auth = bearer(key);

type Answer = { status: number; position: string | null; body: unknown };
async function answer(res: Response): Promise<Answer> {
  const text = await res.text();
  return { status: res.status, position: res.headers.get('x-event-position'), body: text ? JSON.parse(text) : undefined };
}
const withKey = (idem?: string): Record<string, string> => (idem ? { 'Idempotency-Key': idem } : {});
const config = (method: string, k: string, idem?: string, value?: unknown) =>
  app.platform(`/projects/${projectId}/config/${k}`, { method, headers: { ...auth, ...withKey(idem) }, ...(value !== undefined ? { json: value } : {}) }).then(answer);
const configValue = async (k: string) => {
  const res = await app.platform(`/projects/${projectId}/config/${k}`, { headers: { ...auth, 'X-Min-Position': String(await app.events.headPosition()) } });
  return res.status === 200 ? res.json() : res.status;
};
// The config stream's length, not the log's head: a request with an API key may record ApiKeyUsed (at most once a minute).
const configEvents = async () => (await app.events.readStream(configStream(projectId))).length;
const memory = (method: string, path: string, idem?: string, json?: unknown) => app.memory(path, { method, json, headers: withKey(idem) }).then(answer);

let n = 0;
const freshScope = () => ({ agent: 'unchanged', user: `u${++n}` });
type Scope = { agent: string; user: string };
const q = (scope: Scope, more = '') => `agent=${scope.agent}&user=${scope.user}${more}`;
const exported = async (scope: Scope) => (await memory('GET', `/v1/export?${q(scope)}`)).body as { personality: string; memories: Array<{ id: string; text: string }> };
const streamTypes = async (stream: string) => (await app.events.readStream(stream)).map((e) => e.type);

t.test('config PUT with a key that changed nothing: recorded, and its repeat does not set the value back', async (t) => {
  const set = await config('PUT', 'unchanged', undefined, 1);
  const count = await configEvents();
  t.equal((await config('PUT', 'unchanged', undefined, 1)).position, set.position, 'without a key: nothing written, the stream\'s position');
  t.equal(await configEvents(), count);

  const first = await config('PUT', 'unchanged', 'put-unchanged-1', 1);
  t.equal(first.status, 200);
  t.ok(Number(first.position) > Number(set.position), 'with a key: the request is recorded (ConfigValueSet of the same value)');
  const recorded = (await app.events.readStream(configStream(projectId))).at(-1)!;
  t.match(recorded, { type: 'ConfigValueSet', position: Number(first.position), data: { key: 'unchanged', value: 1, request_key: 'idem:put-unchanged-1' } });
  t.equal(await configValue('unchanged'), 1, 'the value is as it was');

  await config('PUT', 'unchanged', undefined, 2);
  const before = await configEvents();
  const repeat = await config('PUT', 'unchanged', 'put-unchanged-1', 1);
  t.equal(repeat.status, 200);
  t.strictSame(repeat.body, first.body);
  t.equal(repeat.position, first.position, 'the first one\'s X-Event-Position');
  t.equal(await configEvents(), before, 'nothing written');
  t.equal(await configValue('unchanged'), 2, 'the later change stands');
});

t.test('config DELETE with a key that answered 404: its repeat answers 404, also once the key was set', async (t) => {
  const count = await configEvents();
  t.equal((await config('DELETE', 'never-set')).status, 404);
  t.equal(await configEvents(), count, 'without a key a refusal writes nothing');

  const first = await config('DELETE', 'later-set', 'delete-missing-1');
  t.equal(first.status, 404);
  t.match(first.body, { type: 'https://cairn.dev/problems/not-found', detail: 'config key later-set not found' });
  t.equal(await configEvents(), count + 1, 'with a key the refusal is recorded');
  t.equal((await app.events.readStream(configStream(projectId))).at(-1)!.type, 'ConfigValueDeletionRefused');

  await config('PUT', 'later-set', undefined, 'created later');
  const before = await configEvents();
  const repeat = await config('DELETE', 'later-set', 'delete-missing-1');
  t.equal(repeat.status, 404, 'the repeat answers as the first did');
  t.strictSame({ ...repeat.body as object, instance: undefined }, { ...first.body as object, instance: undefined }, 'the same problem (but for its request id)');
  t.equal(await configEvents(), before, 'nothing written');
  t.equal(await configValue('later-set'), 'created later', 'the value set later stays');
  t.equal((await config('DELETE', 'later-set', 'delete-missing-2')).status, 204, 'another key deletes it');
});

t.test('DELETE /v1/scope with a key on an empty scope: recorded as ScopeDeleted of 0, and its repeat deletes nothing stored since', async (t) => {
  const scope = freshScope();
  const head = await app.events.headPosition();
  const unkeyed = await memory('DELETE', `/v1/scope?${q(scope)}`);
  t.strictSame(unkeyed.body, { scope, deleted: 0, personality_deleted: false });
  t.equal(await app.events.headPosition(), head, 'without a key: nothing written');

  const first = await memory('DELETE', `/v1/scope?${q(scope)}`, 'wipe-empty-1');
  t.equal(first.status, 200);
  t.strictSame(first.body, { scope, deleted: 0, personality_deleted: false });
  t.equal(first.position, String(head + 1), 'with a key: the request is recorded');
  // t.match ignores array items past the pattern's: the stream's length is checked on its own.
  const wiped = await app.events.readStream(memoryStream(scope.agent, scope.user));
  t.strictSame(wiped.map((e) => e.type), ['ScopeDeleted'], 'one event in the scope\'s stream');
  t.match(wiped, [{ type: 'ScopeDeleted', data: { memory_count: 0, personality: false } }]);

  const kept = await memory('POST', '/v1/memories', undefined, { scope, text: 'a heron stored after the wipe' });
  await memory('PUT', '/v1/personality', undefined, { scope, personality: 'Patient.' });
  const before = await app.events.headPosition();
  const repeat = await memory('DELETE', `/v1/scope?${q(scope)}`, 'wipe-empty-1');
  t.equal(repeat.status, 200);
  t.strictSame(repeat.body, first.body, 'the first answer, not "deleted: 1"');
  t.equal(repeat.position, first.position);
  t.equal(await app.events.headPosition(), before, 'nothing written');
  const after = await exported(scope);
  t.strictSame(after.memories.map((m) => m.id), [(kept.body as { id: string }).id], 'the memory stored since stays');
  t.equal(after.personality, 'Patient.', 'and the personality');
});

t.test('DELETE /v1/memories with a key that answered 404: its repeat answers 404, also once a memory with that id was stored', async (t) => {
  const scope = freshScope();
  await memory('POST', '/v1/memories', undefined, { scope, text: 'something else' });
  const path = `/v1/memories?${q(scope, '&id=note:1')}`;
  const head = await app.events.headPosition();
  t.equal((await memory('DELETE', path)).status, 404);
  t.equal(await app.events.headPosition(), head, 'without a key a refusal writes nothing');

  const first = await memory('DELETE', path, 'delete-missing-memory-1');
  t.equal(first.status, 404);
  t.match(first.body, { type: 'https://cairn.dev/problems/not-found', detail: 'memory note:1 does not exist in this scope' });
  t.equal((await streamTypes(memoryStream(scope.agent, scope.user))).at(-1), 'MemoryDeletionRefused', 'with a key the refusal is recorded');

  await memory('POST', '/v1/memories', undefined, { scope, id: 'note:1', text: 'stored later under that id' });
  const before = await app.events.headPosition();
  const repeat = await memory('DELETE', path, 'delete-missing-memory-1');
  t.equal(repeat.status, 404, 'the repeat answers as the first did');
  t.strictSame({ ...repeat.body as object, instance: undefined }, { ...first.body as object, instance: undefined });
  t.equal(await app.events.headPosition(), before, 'nothing written');
  t.strictSame((await exported(scope)).memories.map((m) => m.text).sort(), ['something else', 'stored later under that id'], 'the memory stored later stays');
  t.strictSame((await memory('DELETE', path, 'delete-missing-memory-2')).body, { id: 'note:1', deleted: 1 }, 'another key deletes it');
});

t.test('POST /v1/memories and PUT /v1/personality with a key that changed nothing: their repeats restore nothing', async (t) => {
  const scope = freshScope();
  const stored = await memory('POST', '/v1/memories', undefined, { scope, text: 'a cormorant on the pier', session: 's1' });
  const head = await app.events.headPosition();
  t.strictSame((await memory('POST', '/v1/memories', undefined, { scope, text: 'a cormorant on the pier' })).body, stored.body, 'without a key: the memory as it is');
  t.equal(await app.events.headPosition(), head, 'and nothing written');

  const first = await memory('POST', '/v1/memories', 'store-held-1', { scope, text: 'a cormorant on the pier' });
  t.equal(first.status, 200);
  t.strictSame(first.body, stored.body, 'with a key: the memory as it is, its session and times unchanged');
  t.equal(first.position, String(head + 1), 'and the request recorded');
  const immediate = await memory('POST', '/v1/memories', 'store-held-1', { scope, text: 'a cormorant on the pier' });
  t.strictSame([immediate.body, immediate.position], [first.body, first.position], 'an immediate repeat: the first answer');
  t.equal(await app.events.headPosition(), head + 1, 'nothing more written');
  await memory('DELETE', `/v1/memories?${q(scope, `&id=${(stored.body as { id: string }).id}`)}`);
  const before = await app.events.headPosition();
  const repeat = await memory('POST', '/v1/memories', 'store-held-1', { scope, text: 'a cormorant on the pier' });
  t.strictSame(repeat.body, first.body);
  t.equal(repeat.position, first.position);
  t.equal(await app.events.headPosition(), before, 'nothing written');
  t.strictSame((await exported(scope)).memories, [], 'the deletion stands');

  const set = await memory('PUT', '/v1/personality', undefined, { scope, personality: 'Calm.' });
  const same = await memory('PUT', '/v1/personality', 'persona-same-1', { scope, personality: 'Calm.' });
  t.strictSame(same.body, set.body, 'the personality as it is, its updated_at unchanged');
  t.ok(Number(same.position) > Number(set.position), 'and the request recorded');
  await memory('PUT', '/v1/personality', undefined, { scope, personality: 'Brisk.' });
  const beforeRepeat = await app.events.headPosition();
  const again = await memory('PUT', '/v1/personality', 'persona-same-1', { scope, personality: 'Calm.' });
  t.strictSame(again.body, same.body);
  t.equal(again.position, same.position);
  t.equal(await app.events.headPosition(), beforeRepeat, 'nothing written');
  t.equal((await exported(scope)).personality, 'Brisk.', 'the later change stands');
});

t.test('after a restart with read models rebuilt from the log: the same answers and read models', async (t) => {
  const scope = freshScope();
  await memory('DELETE', `/v1/scope?${q(scope)}`, 'restart-wipe');
  await memory('DELETE', `/v1/memories?${q(scope, '&id=m1')}`, 'restart-missing');
  await memory('POST', '/v1/memories', undefined, { scope, id: 'm1', text: 'a heron after the restart' });
  const readModels = async (a: TestCairn) => {
    const head = String(await a.events.headPosition());
    return {
      config: await (await a.platform(`/projects/${projectId}/config`, { headers: { ...auth, 'X-Min-Position': head } })).json(),
      memories: await (await a.memory(`/v1/export?${q(scope)}&min_position=${head}`)).json(),
    };
  };
  const live = await readModels(app);
  const streams = [configStream(projectId), memoryStream(scope.agent, scope.user)];
  const lengths = async (a: TestCairn) => Promise.all(streams.map(async (stream) => (await a.events.readStream(stream)).length));
  const written = await lengths(app);
  await app.stop({ keepData: true });
  stopped = true;
  for (const file of ['readmodels.db', 'readmodels.db-wal', 'readmodels.db-shm']) rmSync(join(app.dataDir, file), { force: true });
  const again = await startTestCairn({ LLM_BASE_URL: server.url }, { dataDir: app.dataDir });
  t.teardown(async () => {
    await again.stop();
    rmSync(app.dataDir, { recursive: true, force: true });
  });
  t.strictSame(await readModels(again), live, 'read models rebuilt from the log are the live ones');
  const wipe = await again.memory(`/v1/scope?${q(scope)}`, { method: 'DELETE', headers: { 'Idempotency-Key': 'restart-wipe' } }).then(answer);
  t.strictSame(wipe.body, { scope, deleted: 0, personality_deleted: false }, 'remembered across the restart');
  t.equal((await again.memory(`/v1/memories?${q(scope, '&id=m1')}`, { method: 'DELETE', headers: { 'Idempotency-Key': 'restart-missing' } })).status, 404);
  t.equal((await again.platform(`/projects/${projectId}/config/unchanged`, { method: 'PUT', headers: { ...auth, 'Idempotency-Key': 'put-unchanged-1' }, json: 1 })).status, 200);
  t.strictSame(await lengths(again), written, 'nothing written');
  t.strictSame(await readModels(again), live);
});
