import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { startOpenAiServer } from '../support/openai-server.js';

/**
 * A memory update that keeps its text (a new session label; a store sent with an Idempotency-Key that changed
 * nothing) keeps its vector without asking the embeddings provider again, which a hosted provider charges for;
 * a new text is embedded as ever.
 */

const server = await startOpenAiServer();
t.teardown(() => server.close());
const app = await startTestCairn({ EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: server.url, LLM_EMBEDDING_MODEL: 'test-embed-16', LLM_MAX_RETRIES: '0' });
t.teardown(() => app.stop());

async function send(path: string, json: unknown, headers: Record<string, string> = {}) {
  const res = await app.memory(path, { method: 'POST', json, headers });
  return { status: res.status, body: await res.json() as any, position: res.headers.get('x-event-position')! };
}
const embedded = () => server.embeddingRequests().flatMap((r) => r.body.input as string[]);
const exported = async (scope: { agent: string; user: string }, position: string) =>
  (await (await app.memory(`/v1/export?agent=${scope.agent}&user=${scope.user}`, { headers: { 'X-Min-Position': position } })).json() as any).memories;

t.test('a new label or an unchanged keyed store reuses the vector; a corrected text is embedded', async (t) => {
  const scope = { agent: 'reuse', user: 'u' };
  const stored = await send('/v1/memories', { scope, text: 'likes green tea' });
  const [first] = await exported(scope, stored.position);
  t.same(embedded(), ['likes green tea']);

  const relabelled = await send('/v1/memories', { scope, id: stored.body.id, text: 'likes green tea', session: 'trip' });
  t.equal(relabelled.body.session, 'trip');
  const again = await send('/v1/memories', { scope, text: 'likes green tea' }, { 'Idempotency-Key': 'reuse-unchanged-1' });
  t.equal(again.status, 200);
  const [after] = await exported(scope, again.position);
  t.same(embedded(), ['likes green tea'], 'no new provider call for the same text');
  t.equal(after.session, 'trip');
  t.same(after.vector, first.vector, 'the memory keeps its vector');
  t.equal(after.vector_model, 'test-embed-16');

  const corrected = await send('/v1/memories', { scope, id: stored.body.id, text: 'likes black tea' });
  const [changed] = await exported(scope, corrected.position);
  t.same(embedded(), ['likes green tea', 'likes black tea'], 'a new text is embedded');
  t.notSame(changed.vector, first.vector);
  const search = await send('/v1/search', { scope, query: 'likes black tea', mode: 'semantic', limit: 1 });
  t.equal(search.body.results[0].id, stored.body.id);
  t.ok(Math.abs(search.body.results[0].score - 1) < 1e-6, 'its vector is the new text\'s');
});
