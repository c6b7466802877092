import t from 'tap';
import { startTestCairn } from '../support/cairn.js';
import { startOpenAiServer } from '../support/openai-server.js';

/**
 * The query of a semantic or hybrid search goes to the embeddings provider in the form memory texts are
 * stored in (trimmed, NFC): a query canonically equal to a memory's text is an exact match, whatever form
 * the client's keyboard or platform sent (macOS and some input methods send decomposed accents).
 */

const server = await startOpenAiServer();
t.teardown(() => server.close());
const app = await startTestCairn({ EMBEDDINGS_PROVIDER: 'openai', EMBEDDINGS_BASE_URL: server.url, LLM_EMBEDDING_MODEL: 'test-embed-16', LLM_MAX_RETRIES: '0' });
t.teardown(() => app.stop());

async function post(path: string, json: unknown) {
  const res = await app.memory(path, { method: 'POST', json });
  return { status: res.status, body: await res.json() };
}

t.test('a decomposed, padded query is embedded as the stored text is', async (t) => {
  const scope = { agent: 'nfc', user: 'u' };
  const cafe = await post('/v1/memories', { scope, text: 'caf\u00e9 au lait' });
  await post('/v1/memories', { scope, text: 'tea with milk' });
  t.equal(cafe.body.text, 'caf\u00e9 au lait');

  const semantic = await post('/v1/search', { scope, query: '  cafe\u0301 au lait\n', mode: 'semantic', limit: 2 });
  t.equal(semantic.status, 200);
  t.equal(semantic.body.results[0].id, cafe.body.id);
  t.ok(Math.abs(semantic.body.results[0].score - 1) < 1e-6, `the same text scores 1 (${semantic.body.results[0].score})`);
  t.same(server.embeddingRequests().at(-1)!.body.input, ['caf\u00e9 au lait'], 'the provider got the stored form');

  const hybrid = await post('/v1/search', { scope, query: 'cafe\u0301 au lait', mode: 'hybrid', limit: 1 });
  t.same(hybrid.body.results.map((r: { id: string }) => r.id), [cafe.body.id]);
  t.same(server.embeddingRequests().at(-1)!.body.input, ['caf\u00e9 au lait']);
});
